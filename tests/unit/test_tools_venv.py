"""The tools venv is checked against requirements/tools-venv.json (tools/venv_check.py, run by tools/bootstrap.sh), never
against anything kept beside it in the cache: a file changed, a module added, a python or a site-packages swapped is
refused in one line; bytecode is removed, so a run reads only what it compiles from checked source."""
import json
import os
import platform
import subprocess
import sys

import pytest

from support import REPO

CHECK = REPO / "tools" / "venv_check.py"


def _venv(root):
    """A venv as the venv module and pip leave one: site-packages, an entry point script naming the venv's path."""
    minor = "%d.%d" % sys.version_info[:2]
    sp = root / "lib" / f"python{minor}" / "site-packages"
    (sp / "tool").mkdir(parents=True)
    (sp / "tool" / "__init__.py").write_text("X = 1\n")
    (sp / "tool-1.0.dist-info").mkdir()
    (sp / "tool-1.0.dist-info" / "METADATA").write_text("Name: tool\nVersion: 1.0\n")
    (sp / "tool-1.0.dist-info" / "RECORD").write_text("tool/__init__.py,,\n")
    (root / "bin").mkdir()
    (root / "bin" / "tool").write_text(f"#!{root}/bin/python\nfrom tool import X\n")
    (root / "bin" / "python").symlink_to(sys.executable)
    (root / "pyvenv.cfg").write_text("home = /x\ninclude-system-site-packages = false\nversion = 3\n")
    return sp


def _run(verb, venv, pins):
    return subprocess.run([sys.executable, "-I", "-S", str(CHECK), verb, str(venv), str(pins)], capture_output=True,
                          text=True)


def _pinned(tmp_path, name="venv"):
    venv = tmp_path / name
    sp = _venv(venv)
    pins = tmp_path / "pins.json"
    assert _run("pin", venv, pins).returncode == 0
    return venv, sp, pins


def test_a_venv_as_pinned_passes_and_the_same_content_elsewhere_has_the_same_digest(tmp_path):
    venv, _sp, pins = _pinned(tmp_path)
    r = _run("check", venv, pins)
    assert r.returncode == 0 and r.stderr == ""
    other = tmp_path / "elsewhere" / "v"
    _venv(other)  # another path: the scripts' shebangs differ by it alone
    assert _run("check", other, pins).returncode == 0
    # a path with a space: pip writes the /bin/sh trampoline instead of a plain shebang (distlib's ScriptMaker)
    spaced = tmp_path / "a home" / "v"
    _venv(spaced)
    header = f"#!/bin/sh\n'''exec' \"{spaced}/bin/python\" \"$0\" \"$@\"\n' '''\n"
    (spaced / "bin" / "tool").write_text(header + "from tool import X\n")
    assert _run("check", spaced, pins).returncode == 0
    (spaced / "bin" / "tool").write_text(header + "import os\n")  # the script itself changed
    assert _run("check", spaced, pins).returncode == 1


@pytest.mark.parametrize("tamper", ["module changed", "module added", "script changed", "pip's RECORD and module",
                                    "system site-packages", "another python"])
def test_a_tampered_venv_is_refused_in_one_line_whatever_its_own_records_say(tmp_path, tamper):
    venv, sp, pins = _pinned(tmp_path)
    if tamper == "module changed":
        (sp / "tool" / "__init__.py").write_text("import os; os.system('id')\n")
    elif tamper == "module added":
        (sp / "evil.pth").write_text("import os\n")
    elif tamper == "script changed":
        (venv / "bin" / "tool").write_text("#!/bin/sh\nid\n")
    elif tamper == "pip's RECORD and module":  # the record beside the files agrees with the change: no help
        (sp / "tool" / "__init__.py").write_text("Y = 2\n")
        (sp / "tool-1.0.dist-info" / "RECORD").write_text("tool/__init__.py,sha256=whatever,6\n")
    elif tamper == "system site-packages":
        (venv / "pyvenv.cfg").write_text("home = /x\ninclude-system-site-packages = true\n")
    else:
        (venv / "bin" / "python").unlink()
        (venv / "bin" / "python").symlink_to("/bin/sh")
    r = _run("check", venv, pins)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"bootstrap: the tools venv {venv} is not what requirements/lock.txt makes: ")
    assert f"rm -rf {venv}" in r.stderr and "Traceback" not in r.stderr


def test_bytecode_is_removed_so_a_planted_pyc_is_never_read(tmp_path):
    venv, sp, pins = _pinned(tmp_path)
    planted = sp / "tool" / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
    planted.parent.mkdir()
    planted.write_bytes(b"anything")
    assert _run("check", venv, pins).returncode == 0
    assert not planted.parent.exists()


def test_a_machine_the_pins_do_not_name_is_said_not_checked(tmp_path):
    venv, _sp, pins = _pinned(tmp_path)
    pins.write_text(json.dumps({"3.99-" + platform.machine(): "0" * 64}))
    r = _run("check", venv, pins)
    assert r.returncode == 0 and r.stderr.startswith("bootstrap: NOT CHECKED: ")


def test_the_suites_own_tools_venv_is_checked_against_the_pins_here():
    """This machine's CPython and machine are pinned (tools/lock.sh): bootstrap checks, it does not say NOT CHECKED."""
    r = subprocess.run([str(REPO / "tools" / "bootstrap.sh")], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if k != "OEQ_WHEELS_TOOLS_PIN"})
    assert r.returncode == 0, r.stderr
    assert "NOT CHECKED" not in r.stderr and r.stdout.strip().endswith("/bin/python")
