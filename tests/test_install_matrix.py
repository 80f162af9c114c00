"""The plain-install check: `pip install torch==2.14.1 fastmace-oeq-ext` with every compiler gone.

.ci/run keeps the uv case here (FastMACE's torch) and the pip case in test_index_server.py (with
fastmace-oeq-ext from a real index server); `make install-matrix` runs every torch with pip and uv.
"""
import pytest

from oeq_wheels import installmatrix, pins as P

pytestmark = pytest.mark.slow


def test_judge_refuses_each_way_of_not_getting_our_binary():
    pins = P.load()
    case = installmatrix.Case("2.14.1", "pip")
    good = {"torch": "2.14.1+cu130", "cuda": "13.0", "oeq_version": pins.oeq_binary.version("0.7.0"),
            "precompiled": True, "built": True, "error": None, "ops": ["a", "b", "c"]}
    ok_doctor = (0, "host extension: OpenEquivariance precompiled (x); no compiler needed\n")
    assert installmatrix.judge(case, good, ok_doctor, "", pins) == []
    for change, words in [({"torch": "2.13.0+cpu", "cuda": None}, "not a CUDA 13 build"),
                          ({"oeq_version": "0.7.0"}, "not our binary wheel"),
                          ({"precompiled": False, "error": "no .so"}, "did not load its precompiled"),
                          ({"ops": []}, "operators missing")]:
        why = installmatrix.judge(case, {**good, **change}, ok_doctor, "", pins)
        assert any(words in w for w in why), (change, why)
    assert installmatrix.judge(case, good, (1, "host extension: unusable"), "", pins)
    assert any("build tool was called" in w for w in installmatrix.judge(case, good, ok_doctor, "g++ -c x", pins))
    assert installmatrix.judge(case, None, None, "", pins) == ["the check did not run"]


def test_plain_uv_install_needs_no_compiler(cp311_wheel, cp311_oeq_wheel):
    # uv, a fresh venv, compilers replaced by sentinels before the install; raises on any failure.
    assert installmatrix.run(cp311_wheel.parent, ["2.14.1"], ["uv"], "3.11") == 0
