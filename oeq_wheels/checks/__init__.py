"""The checks a release passes on this machine before it ships, kept apart from the release's own steps (release/):
the loopback stand-ins for the hosts (GitHub's release assets and Pages, PyPI, PyTorch's index), another
architecture's CPython under emulation, the test venvs, the failing compiler sentinels, and the checks that use
them (the install matrix, the clean install, `make rehearse-release`, `make rehearse-ci`)."""
