import subprocess

import pytest

from conftest import REPO
from oeq_wheels.release.cleaninstall import judge

GOOD_SMOKE = {"built": True, "status": {"state": "prebuilt"}, "ops": ["a", "b", "c"], "forward_norm": None}
DOCTOR_OK = "host extension: prebuilt (fastmace-oeq-ext 0.7.0.post1, /x/libtorch_tp_jit.so); no compiler needed\n"


def test_judge_passes_only_when_everything_holds():
    assert judge(0, DOCTOR_OK, GOOD_SMOKE, "", gpu=False).ok
    assert not judge(0, "host extension: built with the host toolchain ...", GOOD_SMOKE, "", False).ok
    assert not judge(1, DOCTOR_OK, GOOD_SMOKE, "", False).ok
    assert not judge(0, DOCTOR_OK, None, "", False).ok
    assert not judge(0, DOCTOR_OK, {**GOOD_SMOKE, "status": {"state": "built"}}, "", False).ok
    assert not judge(0, DOCTOR_OK, {**GOOD_SMOKE, "ops": ["a"]}, "", False).ok
    v = judge(0, DOCTOR_OK, GOOD_SMOKE, "g++ -c x.cpp\n", False)
    assert not v.ok and "g++ -c x.cpp" in v.problems[0]
    assert not judge(0, DOCTOR_OK, GOOD_SMOKE, "", gpu=True).ok  # on a GPU the forward must run


def test_refuses_a_directory_without_wheels(tmp_path):
    r = subprocess.run([str(REPO / "tools/release/clean_install.sh"), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "no fastmace_oeq_ext wheel" in r.stderr


@pytest.mark.slow
def test_clean_install_passes_with_compilers_removed(cp311_wheel):
    r = subprocess.run([str(REPO / "tools/release/clean_install.sh"), str(cp311_wheel.parent), "3.11"],
                       capture_output=True, text=True, timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "doctor: host extension: prebuilt (fastmace-oeq-ext 0.7.0.post3," in out
    assert "PASS: prebuilt host extension, no compiler or build tool called" in out
