# Main job and tests; each sets itself up (venv in ~/.cache/oeq-wheels, pinned downloads).
OUTDIR ?= dist

PUBLISH_FLAGS ?=

.PHONY: wheels test verify publish index install-matrix check-tag clean
wheels:
	tools/release/oeq_wheels/build.sh $(OUTDIR)

test:
	tools/ci/test.sh

verify:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels verify $(OUTDIR)/*.whl $(OUTDIR)-extra/*.whl

publish:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels publish $(OUTDIR) $(PUBLISH_FLAGS)

index:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels index $(OUTDIR) $(INDEX_FLAGS)

# Plain pip and uv installs with every compiler replaced by a sentinel (MATRIX_FLAGS: --torch 2.14.1 ...).
install-matrix:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels install-matrix $(OUTDIR) $(MATRIX_FLAGS)

# The release workflow's first step: TAG must be v + the pinned version.
check-tag:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels check-tag "$(TAG)"

clean:
	rm -rf $(OUTDIR) $(OUTDIR)-extra
