# Main job and tests; each sets itself up (venv in ~/.cache/oeq-wheels, pinned downloads).
OUTDIR ?= dist

PUBLISH_FLAGS ?=

.PHONY: wheels test verify publish index clean
wheels:
	tools/release/oeq_wheels/build.sh $(OUTDIR)

test:
	tools/ci/test.sh

verify:
	PYTHONPATH=. $$(tools/bootstrap.sh) -m oeq_wheels verify $(OUTDIR)/*.whl

publish:
	PYTHONPATH=. $$(tools/bootstrap.sh) -m oeq_wheels publish $(OUTDIR) $(PUBLISH_FLAGS)

index:
	PYTHONPATH=. $$(tools/bootstrap.sh) -m oeq_wheels index $(OUTDIR)

clean:
	rm -rf $(OUTDIR)
