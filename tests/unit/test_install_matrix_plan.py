"""The install matrix's plan and judges, without installing anything: every line's cases (and, for a line of one
CUDA major, the mix), and each way of not getting our binary refused (the installs themselves: tests/integration/test_install_matrix.py)."""
import pytest

from oeq_wheels import pins as P
from oeq_wheels.checks import installmatrix

OEQ = P.load().oeq.version


def test_judge_refuses_each_way_of_not_getting_our_binary():
    pins = P.load()
    line = pins.oeq_binary
    torch, cu12_torch = pins.matrix.torch_version, line.tested_torch[0]
    case = installmatrix.Case(torch, "pip", line)
    good = {"torch": pins.matrix.consumer_torch, "cuda": pins.matrix.cuda, "oeq_version": line.version(OEQ),
            "precompiled": True, "built": True, "error": None, "ops": ["a", "b", "c"], **bound("13")}
    ok_doctor = (0, "host extension: OpenEquivariance precompiled (x); no compiler needed\n")
    assert installmatrix.judge(case, good, ok_doctor, "", pins) == []
    for change, words in [({"torch": f"{torch}+cpu", "cuda": None}, "not a CUDA 12 or 13 build"),
                          ({"oeq_version": OEQ}, f"not our {line.name} binary wheel"),
                          ({"precompiled": False, "error": "no .so"}, "did not load its precompiled"),
                          ({"ops": []}, "operators missing")]:
        why = installmatrix.judge(case, {**good, **change}, ok_doctor, "", pins)
        assert any(words in w for w in why), (change, why)
    assert installmatrix.judge(case, good, (1, "host extension: unusable"), "", pins)
    assert any("build tool was called" in w for w in installmatrix.judge(case, good, ok_doctor, "g++ -c x", pins))
    assert installmatrix.judge(case, None, None, "", pins) == ["the check did not run"]
    # the same wheel beside a CUDA 12 torch; a torch of a CUDA major it does not serve is refused
    cu12 = installmatrix.Case(cu12_torch, "pip", line)
    assert installmatrix.judge(cu12, {**good, "torch": f"{cu12_torch}+cu128", "cuda": line.cuda, **bound("12")},
                               None, "", pins) == []
    assert any("not a CUDA 12 or 13 build" in w for w in installmatrix.judge(
        cu12, {**good, "torch": f"{cu12_torch}+cu140", "cuda": "14.0"}, None, "", pins))


SITE = "/v/lib/python3.11/site-packages"


def bound(major: str, folder: str = f"{SITE}/nvidia/cu13/lib") -> dict:
    """What the install's check says when the dispatch library bound CUDA `major` from torch's NVIDIA wheels."""
    paths = [f"{folder}/{lib}.so.{major}" for lib in ("libcudart", "libnvrtc", "libcublas")]
    return {"module": f"{SITE}/openequivariance/_torch/extlib/oeq_stable_cuda.abi3.so",
            "dispatch": {"major": int(major), "paths": paths}, "mapped": sorted(paths)}


def test_judge_refuses_a_binding_of_another_major_another_place_or_beside_another_runtime(tmp_path):
    """The binding, forced: torch's own major, from the install's NVIDIA wheels (or the load stubs standing in for
    them), and nothing else of CUDA's runtime, NVRTC or cuBLAS mapped."""
    pins = P.load()
    line = pins.oeq_binary
    case = installmatrix.Case(pins.matrix.torch_version, "uv", line)
    good = {"torch": pins.matrix.consumer_torch, "cuda": pins.matrix.cuda, "oeq_version": line.version(OEQ),
            "precompiled": True, "built": True, "error": None, "ops": ["a", "b", "c"], **bound("13")}
    assert installmatrix.judge(case, good, None, "", pins) == []
    stray = f"{SITE}/nvidia/cu13/lib/libcudart.so.12"
    for check, words in [({**good, "dispatch": None}, "bound CUDA nothing, not torch's CUDA 13"),
                         ({**good, **bound("12")}, "bound CUDA 12, not torch's CUDA 13"),
                         ({**good, "mapped": sorted([*good["mapped"], stray])}, "not exactly libcudart.so.13"),
                         ({**good, **bound("13", "/usr/local/cuda/lib64")}, "not from the install's NVIDIA wheels")]:
        why = installmatrix.judge(case, check, None, "", pins)
        assert any(words in w for w in why), (check, why)
    stubs = tmp_path / "stubs"
    stubbed = {**good, **bound("13", str(stubs))}
    assert installmatrix.judge(case, stubbed, None, "", pins, stubs) == []
    assert installmatrix.judge(case, stubbed, None, "", pins) != []


def _linked_pins(tmp_path):
    """The pins with the line linked to its CUDA 12 headers' libraries (no dispatch library): a CUDA 12 line."""
    text = P.PINS_FILE.read_text()
    (tmp_path / "pins.toml").write_text(text.replace('cuda_binding = "dispatch"\n', ""))
    return P.load(path=tmp_path / "pins.toml")


def test_judge_of_the_mixed_pair_wants_a_one_line_refusal_and_no_build(tmp_path):
    """A line of one CUDA major beside FastMACE's torch of another (no such pair today: the one line serves both)."""
    pins = _linked_pins(tmp_path)
    line = pins.oeq_line(P.load().oeq_binary.name)
    cu12 = line.version(OEQ)
    mix = installmatrix.Case(pins.matrix.torch_version, "uv", line, mix=True)
    seen = {"torch": pins.matrix.consumer_torch, "cuda": pins.matrix.cuda, "oeq_version": cu12, "precompiled": True,
            "built": False, "error": "libcudart.so.12: cannot open shared object file", "ops": []}
    refused = (1, f"host extension: unusable; openequivariance {cu12} is built for CUDA 12, ...\n")
    assert installmatrix.judge(mix, seen, refused, "", pins) == []
    assert installmatrix.judge(mix, {**seen, "built": True}, refused, "", pins)  # it must not load
    assert installmatrix.judge(mix, seen, (0, "host extension: OpenEquivariance precompiled (x)"), "", pins)
    assert installmatrix.judge(mix, seen, refused, "g++ -c jit.cpp", pins)  # nor build anything


def test_the_plan_covers_every_torch_of_the_line_and_no_mix():
    pins = P.load()
    cases = installmatrix.plan(pins, None, ["pip", "uv"])
    got = {(c.torch, c.line.key, c.installer, c.mix) for c in cases}
    x86, arm_line = pins.line_builds(pins.oeq_binary.name)
    assert (x86.tested_torch[0], x86.key, "uv", False) in got and (x86.tested_torch[-1], x86.key, "pip", False) in got
    assert not any(c.mix for c in cases)  # the one line serves every CUDA torch: no pair to refuse
    # aarch64 rows: every tested torch with each emulated CPython (Debian 12's 3.11, 13's 3.13, testing's 3.14)
    arm = pins.arches["aarch64"]
    assert (arm_line.tested_torch[-1], arm_line.key, "uv", False) in \
        {(c.torch, c.line.key, c.installer, c.mix) for c in cases if c.foreign}
    assert {c.python for c in cases if c.foreign} == set(arm.emulated_pythons)
    # x86_64: the host's CPython, and Debian testing's 3.14 and 3.15 in their root for the torches that have
    # wheels for them (the stable-ABI wheel)
    rooted = {(c.torch, c.line.key, c.python, c.installer) for c in cases if c.rooted}
    assert rooted == {(t, x86.key, v, i) for v, row in pins.arches["x86_64"].debian_pythons.items()
                      for t in row["torch"] if t in x86.tested_torch for i in ("pip", "uv")} and rooted
    # and the free-threaded CPython built here, on the torches with its wheel
    threaded = {(c.torch, c.line.key, c.installer) for c in cases if c.free_threaded}
    assert threaded == {(t, x86.key, i) for t in x86.tested_torch if t in pins.freethreaded["3.14t"].torch
                        for i in ("pip", "uv")} and threaded
    per_line = lambda l: len(l.tested_torch) * (len(l.arch.emulated_pythons) if l.arch.name == "aarch64" else 1)
    assert len(cases) == 2 * sum(per_line(l) for l in pins.oeq_lines) + len(rooted) + len(threaded)
    floor, py = arm_line.tested_torch[0], sorted(arm.emulated_pythons)[-1]
    narrow = installmatrix.plan(pins, [floor], ["uv"], ["aarch64"], [py])
    assert [(c.torch, c.line.key, c.python, c.installer) for c in narrow] == [(floor, arm_line.key, py, "uv")]
    with pytest.raises(installmatrix.UsageError, match="the OEq lines are built for x86_64, aarch64"):
        installmatrix.plan(pins, None, ["uv"], ["riscv64"])
    with pytest.raises(installmatrix.UsageError, match="no OEq line is tested on it"):
        installmatrix.plan(pins, ["2.9.0"], ["pip"])


def test_the_stub_driver_joins_the_loader_path_instead_of_replacing_it(monkeypatch):
    """A shared CPython (setup-python's on GitHub's runner) finds its libpython through LD_LIBRARY_PATH: the
    install-matrix's and the clean install's checks put the stub driver first and keep the rest (make rehearse-ci
    found the matrix's check failing to start its venv's python)."""
    from pathlib import Path
    from oeq_wheels import driver_stub
    assert driver_stub.loader_path(Path("/stub"), {"LD_LIBRARY_PATH": "/py/lib"}) == "/stub:/py/lib"
    assert driver_stub.loader_path(Path("/stub"), {}) == "/stub"
    import inspect
    from oeq_wheels.checks import cleaninstall, installmatrix
    for mod in (installmatrix, cleaninstall):
        assert "driver_stub.loader_path(" in inspect.getsource(mod), mod.__name__


def test_the_tables_load_stubs_are_read_back_exactly():
    """Each stand-in case prints its exact load stubs; a case with NVIDIA's wheels whole prints that instead."""
    printed = (f"9.2.0  cu130 py3.14  uv   OEq precompiled (ours); NVIDIA's wheels stand-ins, load stubs: "
               f"libcublasLt.so.13, libcudnn.so.9  PASS\n"
               f"9.2.0  cu130 py3.15  pip  OEq precompiled (ours); {installmatrix.WHOLE_SHOWN}  PASS\n"
               f"9.1.0  cu130 py3.14  pip  OEq precompiled (ours); NVIDIA's wheels stand-ins, load stubs: none  PASS")
    assert installmatrix.stubs_shown(printed) == [["libcublasLt.so.13", "libcudnn.so.9"], [], []]


def test_the_run_record_names_each_case_and_the_wheels_it_installed(tmp_path):
    """`--record FILE`: the written record reads back with every case's result and the sha256 of each wheel a case
    installed (a wheel only served is not named); one failed case makes the run not ok."""
    import hashlib
    from oeq_wheels.checks import run_records
    from oeq_wheels.release.site import Wheel
    pins = P.load()
    cu13 = pins.oeq_binary
    wheels = []
    for tag in ("cp311-cp311", "cp310-cp310"):
        name = f"openequivariance-{cu13.version(pins.oeq.version)}-{tag}-manylinux_2_28_x86_64.whl"
        (tmp_path / name).write_bytes(name.encode())
        wheels.append(Wheel(tmp_path / name, name, hashlib.sha256(name.encode()).hexdigest()))
    arm = wheels[0].name.replace("x86_64", "aarch64")  # served, but no case here is of that architecture
    (tmp_path / arm).write_bytes(b"arm")
    wheels.append(Wheel(tmp_path / arm, arm, hashlib.sha256(b"arm").hexdigest()))
    ext = tmp_path / "fastmace_oeq_ext-9.0.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    ext.write_bytes(b"ext")
    cases = [installmatrix.Case(pins.matrix.torch_version, "pip", cu13), installmatrix.Case("9.9.9", "uv", cu13)]
    cases[0].ok, cases[0].result, cases[1].result = True, "PASS", "FAIL: install failed"
    cases[0].installed = {"openequivariance": cu13.version(pins.oeq.version), "fastmace-oeq-ext": "9.0.0", "abi": "cp311"}
    rec = installmatrix.write_record(tmp_path / "r.json", "0" * 40, cases, wheels, [ext], "3.11", pins)
    back = run_records.load(tmp_path / "r.json")
    # cp310's wheel was served and not installed; the failed case installed nothing
    assert back.wheels == {wheels[0].name: wheels[0].sha256, ext.name: hashlib.sha256(b"ext").hexdigest()} == rec.wheels
    assert back.ok is False and [c["result"] for c in back.results["cases"]] == ["PASS", "FAIL: install failed"]
    assert back.machine["torch"] == f"{pins.matrix.torch_version}, 9.9.9"


def test_the_free_threaded_rows_run_each_line_on_the_torches_with_its_wheel_and_keep_the_gil_off():
    pins = P.load()
    ft = pins.freethreaded["3.14t"]
    rows = [(c.torch, c.line.key, c.python) for c in installmatrix.plan(pins, None, ["pip"], ["x86_64"], ["3.14t"],
                                                                         plain=False)]
    # each line on the pinned torches that have a cp314t wheel and that it is tested on
    assert rows == [(t, l.key, "3.14t") for l in pins.oeq_lines if l.arch.name == "x86_64" for t in l.tested_torch
                    if t in ft.torch] and {r[1] for r in rows} == {pins.oeq_binary.key}
    newest = ft.torch[-1]
    case = installmatrix.Case(newest, "uv", pins.oeq_binary, python="3.14t")
    assert case.free_threaded and not case.rooted and not case.foreign
    assert case.index == f"{pins.oeq_binary.name} py3.14t (free-threaded, built here)"
    good = {"torch": newest, "cuda": pins.matrix.cuda, "python": ft.source.version, "free_threaded": True,
            "gil_after_torch": False, "gil_after_oeq": False, "oeq_version": pins.oeq_binary.version(OEQ),
            "precompiled": True, "built": True, "error": None, "ops": ["a", "b", "c"], **bound("13")}
    assert installmatrix.judge(case, good, None, "", pins) == []
    for change, words in [({"free_threaded": False}, "GIL build"), ({"gil_after_oeq": True}, "turned the GIL back on"),
                          ({"python": "3.15.1"}, "not 3.14t")]:
        why = installmatrix.judge(case, {**good, **change}, None, "", pins)
        assert any(words in w for w in why), (change, why)
    # the GIL already on after torch's import is torch's doing, not OEq's
    assert installmatrix.judge(case, {**good, "gil_after_torch": True, "gil_after_oeq": True}, None, "", pins) == []


def test_a_record_names_the_wheels_each_case_installed_and_no_other():
    """A row's check says what it installed (OEq's and fastmace-oeq-ext's versions, the CPython's ABI): the record
    holds exactly those files, the +oeqwheels twin the index gave included, never a wheel that was only served."""
    pins = P.load()
    line = pins.oeq_binary
    oeq, ext = line.version(OEQ), "9.0.0.post1"
    twin = f"{ext}+{line.local_version}"
    case = installmatrix.Case(pins.matrix.torch_version, "pip", line)
    case.installed = {"openequivariance": oeq, "fastmace-oeq-ext": twin, "abi": "cp311"}
    x86 = "manylinux_2_28_x86_64"
    assert installmatrix.installed_by(case, f"openequivariance-{oeq}-cp311-cp311-{x86}.whl")
    assert installmatrix.installed_by(case, f"fastmace_oeq_ext-{twin}-cp311-cp311-{x86}.whl")
    assert not installmatrix.installed_by(case, f"fastmace_oeq_ext-{ext}-cp311-cp311-{x86}.whl")  # served, not taken
    assert not installmatrix.installed_by(case, f"openequivariance-{oeq}-cp310-cp310-{x86}.whl")
    assert not installmatrix.installed_by(case, f"openequivariance-{oeq}-cp311-cp311-manylinux_2_28_aarch64.whl")
    assert not installmatrix.installed_by(case, f"openequivariance-{oeq}-cp312-abi3-{x86}.whl")  # 3.11 < 3.12
    case.installed = {"openequivariance": oeq, "fastmace-oeq-ext": None, "abi": "cp315"}
    assert installmatrix.installed_by(case, f"openequivariance-{oeq}-cp312-abi3-{x86}.whl")
    case.installed["abi"] = "cp314t"  # a free-threaded CPython loads no abi3 module
    assert not installmatrix.installed_by(case, f"openequivariance-{oeq}-cp312-abi3-{x86}.whl")
    assert installmatrix.installed_by(case, f"openequivariance-{oeq}-cp314-cp314t-{x86}.whl")
    assert not installmatrix.installed_by(installmatrix.Case(line.tested_torch[0], "uv", line),  # nothing installed
                                          f"openequivariance-{oeq}-cp311-cp311-{x86}.whl")
