# Main job and tests; each sets itself up (venv in ~/.cache/oeq-wheels, pinned downloads).
OUTDIR ?= dist

PUBLISH_FLAGS ?=

.PHONY: wheels test test-unit verify publish site rehearse-release rehearse-ci install-matrix check-tag pins clean
wheels:
	tools/release/oeq_wheels/build.sh $(OUTDIR)

# ARGS: pytest's own arguments, passed through (make test ARGS='-k verify tests/integration/test_verify.py').
test:
	tools/ci/test.sh $(ARGS)

# The quick loop: the unit tier only (no build, network, engine, emulation or torch install; about a minute).
test-unit:
	tools/ci/test.sh tests/unit $(ARGS)

verify:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels verify $(OUTDIR)/*.whl $(OUTDIR)-extra/*.whl

publish:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels publish $(OUTDIR) $(PUBLISH_FLAGS)

# The binary OEq index site (OUTDIR-extra/site), as the release's Pages job lays it out (SITE_FLAGS: --release DIR ...).
site:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels site $(OUTDIR) $(SITE_FLAGS)

# Build, then rehearse the release's hosting and README's install lines with pip and uv (REHEARSE_FLAGS: --installer pip).
rehearse-release: wheels
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels rehearse $(OUTDIR) $(REHEARSE_FLAGS)

# release.yml (and the test.yml it calls) under act, as GitHub's runner would run them, before a release
# (REHEARSE_CI_FLAGS: --job tag, --python 3.11 for the suite's slice, --keep).
rehearse-ci:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels rehearse-ci $(REHEARSE_CI_FLAGS)

# Plain pip and uv installs with every compiler replaced by a sentinel (MATRIX_FLAGS: --torch 2.14.1 ...).
install-matrix:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels install-matrix $(OUTDIR) $(MATRIX_FLAGS)

# The release workflow's first step: TAG must be v + the pinned version (and REPOSITORY, if given, the pinned one).
check-tag:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels check-tag "$(TAG)" $(if $(REPOSITORY),--repository "$(REPOSITORY)")

clean:
	rm -rf $(OUTDIR) $(OUTDIR)-extra

# Re-pin pins.toml from the registry (ARGS: --torch X.Y.Z [--matrix NAME] [--python X.Y,...], --oeq X.Y.Z,
# --post N, --next-post), or check every pin (ARGS=--check).
pins:
	PYTHONPATH=.:runtime $$(tools/bootstrap.sh) -m oeq_wheels pins $(ARGS)
