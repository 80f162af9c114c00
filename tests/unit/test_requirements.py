"""The pipeline's own tools are locked: every package pinned with its sha256, installed with --require-hashes."""
import os
import re
import subprocess

from support import REPO

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


def test_two_bootstraps_at_once_make_the_tools_venv_once(tmp_path):
    """An editor's test run beside `make test` on a new lock: the second bootstrap waits for the first's venv
    instead of removing it half made. A stand-in Python makes a venv whose pip takes a second and logs its call."""
    base = tmp_path / "python3"
    base.write_text(f"""#!/bin/sh
case "$1" in
  -c) exit 0 ;;
  -I) [ "$3" = -c ] && echo "$0"; exit 0 ;;  # its real path when found; the venv check passes
  -m) [ "$2" = venv ] || exit 2
      mkdir -p "$3/bin"
      printf '#!/bin/sh\\n[ "$2 $3" = "pip install" ] || exit 0; sleep 1; echo pip >> {tmp_path}/installs.log\\n' > "$3/bin/python"
      chmod +x "$3/bin/python" ;;
esac
""")
    base.chmod(0o755)
    env = dict(os.environ, OEQ_WHEELS_TOOL_PYTHON=str(base), OEQ_WHEELS_CACHE=str(tmp_path / "cache"))
    runs = [subprocess.Popen([str(REPO / "tools" / "bootstrap.sh")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env) for _ in range(2)]
    outs = [r.communicate(timeout=60) for r in runs]
    assert [r.returncode for r in runs] == [0, 0], outs
    assert outs[0][0] == outs[1][0] and outs[0][0].startswith(str(tmp_path / "cache" / "venv-tools-")), outs
    assert (tmp_path / "installs.log").read_text() == "pip\n"
