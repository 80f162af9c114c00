# Main job and tests; each sets itself up (venv in ~/.cache/oeq-wheels, pinned downloads).
OUTDIR ?= dist

.PHONY: wheels test verify clean
wheels:
	tools/release/oeq_wheels/build.sh $(OUTDIR)

test:
	tools/ci/test.sh

verify:
	PYTHONPATH=. $$(tools/bootstrap.sh) -m oeq_wheels verify $(OUTDIR)/*.whl

clean:
	rm -rf $(OUTDIR)
