"""The pipeline's own tools are locked: every package pinned with its sha256, installed with --require-hashes."""
import re

from conftest import REPO

REQ = REPO / "requirements"


def direct_pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (REQ / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-r"):
            pkg, ver = line.split("==")
            pins[pkg.lower().replace("_", "-")] = ver
    return pins


def locked() -> dict[str, tuple[str, list[str]]]:
    out = {}
    for block in re.split(r"\n(?=[a-z0-9])", (REQ / "lock.txt").read_text()):
        m = re.match(r"([a-z0-9._-]+)==([^ ;\\]+)", block)
        if m:
            out[m.group(1)] = (m.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return out


def test_every_direct_pin_is_locked_at_its_version():
    lock = locked()
    for name in ("tools.txt", "test.txt"):
        for pkg, ver in direct_pins(name).items():
            assert pkg in lock, f"{pkg} ({name}) is not in lock.txt: run tools/lock.sh"
            assert lock[pkg][0] == ver, f"{pkg}: {name} says {ver}, lock.txt {lock[pkg][0]}: run tools/lock.sh"


def test_every_locked_package_has_hashes_and_bootstrap_requires_them():
    lock = locked()
    assert len(lock) > 20
    assert all(hashes for _, hashes in lock.values()), [p for p, (_, h) in lock.items() if not h]
    boot = (REPO / "tools" / "bootstrap.sh").read_text()
    assert "--require-hashes" in boot and 'LOCK="$REPO/requirements/lock.txt"' in boot


def test_the_pipelines_imports_are_pinned():
    tools = direct_pins("tools.txt")
    for pkg in ("packaging", "wheel", "auditwheel", "twine", "pyelftools", "uv", "pip"):
        assert pkg in tools, pkg
