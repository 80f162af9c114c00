"""The OEq line for Linux aarch64 (GH200, DGX Spark): cross-compiled here, proven statically, loaded under emulation.

No aarch64 machine or GPU is here. What holds: the wheel's ELF files are aarch64 and link like the x86_64
ones; verify, auditwheel's aarch64 policy and torch-abi-audit pass them; and Debian's arm64 CPython, run by
qemu, installs PyPI's aarch64 torch and our wheel through the served index (pip and uv, every compiler a
sentinel) and loads OEq's precompiled extension with its operators (a stub aarch64 libcuda.so.1); FastMACE's own
code, with the proposed rules, takes that extension there (the rules' aarch64 row). The emulated installs share one
uv cache of this module's (aarch64_uv_cache).
"""
import dataclasses
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from packaging.version import Version
from wheel.wheelfile import WheelFile

from support.cli import run_cli
from test_fastmace_rules import ask  # FastMACE's own calls, with and without the rules
from fastmace_oeq_ext.oeq_build import FILE_NAME as OEQ_BUILD_FILE, OeqBuild
from oeq_wheels import build, debian, pins as P, driver_stub, elf
from oeq_wheels.checks import venvs
from oeq_wheels.errors import UsageError
from support import venvs as test_venvs
from oeq_wheels import toolchain as cc
from oeq_wheels.files import default_cache
from oeq_wheels.oeq.gate import torch_abi_audit, verify_oeq_binary
from oeq_wheels.checks import emulated, installmatrix, loader_stubs

pytestmark = pytest.mark.big_disk  # multi-GB trees for a while: one unit with the others like it (tests/support/plugin.py)

EXTLIB = "openequivariance/_torch/extlib/"
MODULE = EXTLIB + "oeq_stable_cuda.cpython-311-aarch64-linux-gnu.so"
AOTI = EXTLIB + "liboeq_stable_cuda_aoti.so"


def test_the_aarch64_wheel_is_aarch64_throughout_and_records_its_aarch64_inputs(cp311_oeq_aarch64_wheel,
                                                                                 cp311_oeq_wheel):
    x86, arm = P.load().line_builds(P.load().oeq_binary.name)
    version = arm.version(P.load().oeq.version)
    assert cp311_oeq_aarch64_wheel.name == f"openequivariance-{version}-cp311-cp311-manylinux_2_28_aarch64.whl"
    with zipfile.ZipFile(cp311_oeq_aarch64_wheel) as a, zipfile.ZipFile(cp311_oeq_wheel) as x:
        # The same sdist tree; only the two libraries (and the build record) differ from the x86_64 wheel.
        same = {n for n in a.namelist() if not n.endswith((".so", "RECORD", "WHEEL", OEQ_BUILD_FILE))}  # + dispatch
        assert same == {n for n in x.namelist() if not n.endswith((".so", "RECORD", "WHEEL", OEQ_BUILD_FILE))}
        assert all(a.read(n) == x.read(n) for n in same)
        for name in (MODULE, AOTI):
            data = a.read(name)
            facts = elf.elf_facts(data)
            assert facts["machine"] == "EM_AARCH64" and facts["stripped"]
            assert facts["runpath"] == x86.runpath() == arm.runpath()
            assert {"libtorch_cpu.so", "libc10.so", "libtorch_cuda.so", arm.dispatch_library,
                    "libcuda.so.1"} <= set(facts["needed"])
            assert not [n for n in facts["needed"] if n.startswith(("libcudart.so", "libnvrtc.so", "libcublas.so"))]
            needs = elf.dynamic_symbols(data, defined=False)
            assert not [n for n, _ in needs if elf.TORCH_CXX.search(n)]
            glibc = elf.glibc_max_symbol(data)  # a version, compared as one: GLIBC_2.4 is older than 2.28
            assert Version(glibc.removeprefix("GLIBC_")) <= Version("2.28"), glibc
        record = OeqBuild.from_json(a.read(f"openequivariance-{version}.dist-info/{OEQ_BUILD_FILE}").decode())
    assert record.built_against.file == arm.torch.file and arm.torch.file.endswith("_aarch64.whl")
    assert all("aarch64" in w.file for w in record.cuda_wheels) and record.compiler.startswith("aarch64-linux-gnu-g++")
    assert (record.torch_min, record.platform_tag) == (arm.torch_min, "manylinux_2_28_aarch64")


def test_verify_and_torch_abi_audit_pass_it(cp311_oeq_aarch64_wheel, cp311_oeq_wheel):
    r = run_cli("verify", str(cp311_oeq_aarch64_wheel), str(cp311_oeq_wheel))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"OK   {cp311_oeq_aarch64_wheel.name}  tag cp311-cp311-manylinux_2_28_aarch64 "
                               "(auditwheel: manylinux_2_")  # auditwheel's aarch64 policy
    audit = f"torch-abi-audit {md.version('torch-abi-audit')}: Torch ABI STABLE, min torch"  # the locked tool's
    x86, arm = P.load().line_builds(P.load().oeq_binary.name)
    assert lines[1].strip() == f"{audit} {arm.torch.version}"
    assert lines[3].strip() == f"{audit} {x86.torch.version}"  # the x86_64 build's floor: CUDA 12.8's torch


def repack(wheel, tmp_path, edit, name=None):
    unpacked = tmp_path / "u"
    shutil.rmtree(unpacked, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(unpacked)
    edit(unpacked)
    out = tmp_path / "o" / (name or wheel.name)
    out.parent.mkdir(exist_ok=True)
    out.unlink(missing_ok=True)
    with WheelFile(out, "w") as wf:
        wf.write_files(str(unpacked))
    return verify_oeq_binary(out, P.load(), twine=False).problems


def test_the_gate_refuses_a_binary_of_the_other_architecture(cp311_oeq_aarch64_wheel, cp311_oeq_wheel, tmp_path):
    with zipfile.ZipFile(cp311_oeq_wheel) as zf:
        x86_aoti = zf.read(AOTI)
    problems = repack(cp311_oeq_aarch64_wheel, tmp_path, lambda u: (u / AOTI).write_bytes(x86_aoti))
    assert any("liboeq_stable_cuda_aoti.so: is an EM_X86_64 binary, the wheel's tag says aarch64" in p
               for p in problems), problems

    def retag(u):  # the aarch64 wheel renamed and re-tagged for x86_64
        wheel_file = next(u.glob("*.dist-info")) / "WHEEL"
        wheel_file.write_text(wheel_file.read_text().replace("_aarch64", "_x86_64"))
    problems = repack(cp311_oeq_aarch64_wheel, tmp_path, retag, cp311_oeq_aarch64_wheel.name.replace("aarch64", "x86_64"))
    assert any("is an EM_AARCH64 binary, the wheel's tag says x86_64" in p for p in problems), problems
    # auditwheel, judging by the tag, finds no x86_64 library; the build record names the aarch64 inputs.
    assert any("auditwheel show failed" in p and "with a 'x86_64' architecture found" in p for p in problems), problems
    assert any("build record platform_tag is 'manylinux_2_28_aarch64'" in p for p in problems), problems


def test_torch_abi_audit_is_a_real_second_opinion(cp311_oeq_aarch64_wheel, cp311_wheel):
    line = P.load().oeq_line(P.load().oeq_binary.name, "aarch64")
    with zipfile.ZipFile(cp311_oeq_aarch64_wheel) as zf:
        libs = {MODULE: zf.read(MODULE), AOTI: zf.read(AOTI)}
    said, problems = torch_abi_audit(libs, line)
    assert problems == [] and said == f"torch-abi-audit {md.version('torch-abi-audit')}: Torch ABI STABLE, min torch " \
        f"{line.torch.version}"
    # A floor the binary does not keep is caught...
    major, minor = line.torch_min.split(".")
    lower = f"{major}.{int(minor) - 1}"
    said, problems = torch_abi_audit(libs, dataclasses.replace(line, torch_min=lower))
    assert problems == [f"torch-abi-audit's minimum torch is {line.torch.version}, the line's floor is {lower}"]
    # ... and so is a library that reaches into torch's C++ internals (fastmace-oeq-ext's JIT-recipe build).
    with zipfile.ZipFile(cp311_wheel) as zf:
        jit = zf.read("fastmace_oeq_ext/libtorch_tp_jit.so")
    said, problems = torch_abi_audit({MODULE: libs[MODULE], AOTI: jit}, line)
    assert "Torch ABI UNSTABLE" in said and any("uses torch internals" in p for p in problems), problems


def test_without_a_cross_compiler_aarch64_is_a_note_or_one_clear_error(monkeypatch):
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda n, *a, **k: None if n.startswith("aarch64-") or n == "apt-get"
                        else real(n, *a, **k))
    pins = P.load()
    toolchains, notes = build.select_arches(pins, None)
    assert list(toolchains) == ["x86_64"]
    assert notes == ["aarch64 left out: no aarch64 cross compiler (aarch64-linux-gnu-g++): aarch64-linux-gnu-g++ "
                     "is not installed and this system has no apt-get; install it with `apt-get install "
                     "g++-aarch64-linux-gnu` (Debian, Ubuntu) or build only --arch x86_64"]
    with pytest.raises(cc.CompileError, match="no aarch64 cross compiler"):
        build.select_arches(pins, ["aarch64"])
    with pytest.raises(UsageError, match="pins.toml builds for x86_64, aarch64"):
        build.select_arches(pins, ["riscv64"])
    monkeypatch.setenv("CXX", "/nonexistent/g++")  # this host's own compiler broken: never a note
    with pytest.raises(cc.CompileError, match="does not run"):
        build.select_arches(pins, None)
    monkeypatch.delenv("CXX")
    monkeypatch.setattr(debian, "as_root", lambda: None)  # neither root nor a password-free sudo
    assert debian.ensure("g++-aarch64-linux-gnu", "aarch64-linux-gnu-g++") == \
        "aarch64-linux-gnu-g++ is not installed and installing g++-aarch64-linux-gnu needs root"


def test_the_emulated_cpython_is_one_of_the_pinned_ones_and_making_it_needs_root(monkeypatch, tmp_path):
    arch = P.load().arches["aarch64"]
    missing = next(f"3.{m}" for m in range(10, 99) if f"3.{m}" not in arch.emulated_pythons)
    with pytest.raises(emulated.EmulationError, match=f"no emulated CPython {missing} for aarch64; .* emulated_pythons: "
                                                      + ", ".join(arch.emulated_pythons).replace(".", r"\.")):
        emulated.rootfs(arch, missing, tmp_path)
    monkeypatch.setattr(debian, "as_root", lambda: None)
    monkeypatch.setattr(emulated, "ensure_tools", lambda *tools: None)  # qemu there or not: the root check runs
    with pytest.raises(emulated.EmulationError, match="needs root"):
        emulated.rootfs(arch, next(iter(arch.emulated_pythons)), tmp_path)
    assert not (tmp_path / "emulated").exists()  # nothing half-made
    cmd = emulated.command(arch, "3.13", tmp_path)
    assert cmd == ["qemu-aarch64-static", "-cpu", "max,pauth=off", "-L", str(tmp_path), str(tmp_path / "usr/bin/python3.13")]


@pytest.fixture(scope="module")
def abi3_set(cp311_wheel, tmp_path_factory, cache):
    """The stable-ABI (cp312-abi3) aarch64 wheel beside the cp311 ones: Debian 13's arm64 CPython is 3.13 and
    Debian testing's 3.14, both served by it."""
    out = tmp_path_factory.mktemp("abi3") / "dist"
    shutil.copytree(cp311_wheel.parent, out)
    shutil.copytree(cp311_wheel.parent.with_name("dist-extra"), out.with_name("dist-extra"))
    rows, failures = build.run(build.Options(out, ["3.12"], cache=cache, arches=["aarch64"]))
    assert not failures, failures
    assert [w.name for w in out.with_name("dist-extra").glob("openequivariance-*-cp312-abi3-*_aarch64.whl")]
    return out


@pytest.fixture(scope="module")
def aarch64_uv_cache(tmp_path_factory):
    """uv's cache of this module's aarch64 installs (PyPI's aarch64 torch at the line's floor for CPython 3.11 and
    3.13 with its NVIDIA wheels, ~6 GB), removed when the module ends: the suite's peak disk (a later test's pip
    install of the x86_64 torch) does not hold it, and the user's uv cache never gets aarch64 wheels from the tests. A
    later run unpacks them again from the session's mirror of PyPI (tests/support/pypi_mirror.py), not from PyPI."""
    d = tmp_path_factory.mktemp("aarch64-uv-cache")
    yield d
    shutil.rmtree(d, ignore_errors=True)


# pip's row first: its install (pip's own copies under qemu, ~9 GB for a while) then runs before the module's uv
# cache holds the aarch64 stacks (~6 GB), not beside it.
@pytest.mark.parametrize("installer, python", [("pip", "3.11"), ("uv", "3.11"), ("uv", "3.13"), ("uv", "3.14")])
def test_debians_arm64_cpython_loads_it_under_emulation_with_every_compiler_a_sentinel(emulation, abi3_set, installer,
                                                                                        python, capsys,
                                                                                        aarch64_uv_cache,
                                                                                        record_property):
    """The install matrix's aarch64 rows at the line's floor torch, with Debian 12's CPython 3.11 (its
    cp311 wheel), Debian 13's 3.13 and Debian testing's 3.14 (the cp312-abi3 wheel): `make install-matrix` runs
    every tested torch. Served as the release serves the site; raises on any failure."""
    line = P.load().oeq_line(P.load().oeq_binary.name, "aarch64")
    floor = line.tested_torch[0]
    assert installmatrix.run(abi3_set, [floor], [installer], "3.11", arches=["aarch64"],
                             emulated_pythons=[python], uv_cache=aarch64_uv_cache, standins=True) == 0
    table = capsys.readouterr().out
    assert f"{floor}  {line.name} aarch64 py{python}  {installer}" in table and \
        "OEq precompiled (our aarch64 wheel; emulated import" in table and "PASS" in table
    # NVIDIA's aarch64 wheels as stand-ins (~2 GB PyPI never sends): what torch and OEq take from them is stubbed,
    # the exact set printed in the proof table's row; with NVIDIA's wheels whole (no stand-in index) nothing is.
    (stubs,) = installmatrix.stubs_shown(table)
    assert stubs or venvs.standin_url() is None, table
    record_property("load stubs", stubs)


def test_aarch64_under_emulation_loads_oeqs_precompiled_extension(emulation, cp311_oeq_aarch64_wheel, oeq_ops,
                                                                  sentinels, tmp_path, aarch64_uv_cache,
                                                                  record_property):
    """FastMACE's rules (contrib/fastmace, test_fastmace_rules.py) on GH200 / DGX Spark, as near as this host gets:
    Debian 12's arm64 CPython 3.11 under qemu, in a venv holding PyPI's aarch64 torch at the aarch64 build's floor,
    the pinned FastMACE and our aarch64 binary OEq, no fastmace-oeq-ext, no compiler. Today FastMACE
    refuses (its prebuilt is x86_64-only and it forces the JIT extension); with the rules OEq loads its own
    precompiled aarch64 extension."""
    pins = P.load()
    line = pins.oeq_line(pins.oeq_binary.name, "aarch64")
    torch, python = line.tested_torch[0], "3.11"
    # As FastMACE's rules on another CUDA 13 torch (test_fastmace_rules.py venv_for): of NVIDIA's wheels only those
    # FastMACE's runtime looks for; load stubs (of this root's architecture) for the rest, which nothing calls here.
    runner, site = test_venvs.emulated_pypi_torch_venv(pins, default_cache(), torch, emulation, python, tmp_path / "venv",
                                                 aarch64_uv_cache, whole=False)
    r = subprocess.run([sys.executable, "-m", "uv", "pip", "install", "-q", "--no-deps", "--target", str(site),
                        "--python-platform", f"aarch64-{emulation.platform_tag.rsplit('_', 1)[0]}", "--python-version",
                        python, str(cp311_oeq_aarch64_wheel)],
                       env=dict(venvs.pip_env(), UV_NO_CONFIG="1", UV_CACHE_DIR=str(aarch64_uv_cache)),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    extlib = site / "openequivariance" / "_torch" / "extlib"
    mods = sorted(extlib.glob("*.so"))
    cross = cc.cross_toolchain(emulation).cc
    stub_dir = driver_stub.make_stub(driver_stub.undefined_driver_symbols(mods, dynamic=True), tmp_path / "stub",
                                     cross).parent
    root = emulated.rootfs(emulation, python, default_cache())
    made = loader_stubs.make(site, root / "usr" / "bin" / f"python{python}", stub_dir, cross, sysroot=root)
    assert made  # the venv left NVIDIA's other wheels out: stubs of exactly what its files NEED of them (make's check)
    record_property("load stubs", sorted(p.name for p in made))
    venv = tmp_path / "venv"
    today = ask(venv, sentinels, stub_dir, tmp_path, rules=False, runner=runner)
    assert today["torch_distribution"] == torch and today["oeq_version"] == line.version(pins.oeq.version), today
    assert today["refused"].startswith("OEq unavailable: prebuilt extension not usable: fastmace-oeq-ext is not "
                                       "installed"), today
    assert "host extension: built with the host toolchain (OEQ_JIT_EXTENSION=1" in today["cli_doctor"], today

    ours = ask(venv, sentinels, stub_dir, tmp_path, rules=True, runner=runner)
    assert "refused" not in ours, ours
    assert ours["extension"]["source"] == "oeq-precompiled", ours
    assert ours["extension"]["path"] == str(extlib / "liboeq_stable_cuda_aoti.so"), ours
    assert ours["plan_jit"] is None and ours["env_jit"] is None, ours
    assert ours["torch"].startswith(torch) and ours["torch_cuda"].split(".")[0] == line.cuda_major, ours
    assert ours["precompiled"] is True and ours["built"] is True and ours["error"] is None, ours
    assert ours["module"] == str(extlib / f"oeq_stable_cuda.cpython-{python.replace('.', '')}-aarch64-linux-gnu.so"), ours
    assert ours["ops"] == oeq_ops, ours  # every operator OEq's sdist registers
    precompiled = f"host extension: OpenEquivariance precompiled ({extlib / 'liboeq_stable_cuda_aoti.so'}); no compiler needed"
    assert ours["doctor_ok"] and precompiled in ours["doctor"].splitlines(), ours["doctor"]
    assert ours["cli_doctor"].startswith("[ ok ] OpenEquivariance") and precompiled in ours["cli_doctor"], ours
    assert ours["sentinel_log"] == "" and today["sentinel_log"] == ""


def test_two_builds_are_compared_by_what_the_gate_checks(cp311_oeq_aarch64_wheel, tmp_path):
    """release.yml's comparison of the cross-built aarch64 wheels with the native ones: the same wheel is SAME; a
    difference a user's machine could see is named; a wheel the gate refuses is refused; other bytes stop the
    release (--bytes)."""
    first, second = tmp_path / "cross", tmp_path / "native"
    first.mkdir()
    shutil.copy(cp311_oeq_aarch64_wheel, first)
    r = run_cli("compare-builds", str(first), str(first))
    assert r.returncode == 0 and r.stdout.startswith(f"SAME {cp311_oeq_aarch64_wheel.name} (byte-identical)"), \
        r.stdout + r.stderr

    def other_generator(u):
        wheel_file = next(u.glob("*.dist-info")) / "WHEEL"
        wheel_file.write_text(wheel_file.read_text().replace("Generator: oeq-wheels", "Generator: other"))
    assert repack(cp311_oeq_aarch64_wheel, tmp_path, other_generator) == []  # the gate takes it
    shutil.copytree(tmp_path / "o", second)
    r = run_cli("compare-builds", str(first), str(second), "--arch", "aarch64")
    assert r.returncode == 1 and f"DIFF {cp311_oeq_aarch64_wheel.name}" in r.stdout, r.stdout + r.stderr
    assert "dist-info/WHEEL differs" in r.stdout and "1 of 1 wheels differ in what the gate checks" in r.stderr
    with zipfile.ZipFile(cp311_oeq_aarch64_wheel) as zf:
        module = zf.read(MODULE)
    repack(cp311_oeq_aarch64_wheel, tmp_path, lambda u: (u / AOTI).write_bytes(module))
    r = run_cli("compare-builds", str(first), str(tmp_path / "o"))
    assert r.returncode == 1 and "fails the gate" in r.stderr and "Traceback" not in r.stderr, r.stderr
    # Every file the same, the archive's bytes not (other zip dates): the gate's view is SAME, but the release asks
    # the native build to reproduce the published bytes (--bytes), and stops naming the file.
    third = tmp_path / "redated"
    third.mkdir()
    with zipfile.ZipFile(cp311_oeq_aarch64_wheel) as zin, \
            zipfile.ZipFile(third / cp311_oeq_aarch64_wheel.name, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            info.date_time = (2001, 2, 3, 4, 5, 6)
            zout.writestr(info, zin.read(info.filename))
    r = run_cli("compare-builds", str(first), str(third))
    assert r.returncode == 0 and r.stdout == f"SAME {cp311_oeq_aarch64_wheel.name}\n", r.stdout + r.stderr
    r = run_cli("compare-builds", str(first), str(third), "--bytes")
    assert r.returncode == 1 and f"does not reproduce the release's bytes: {cp311_oeq_aarch64_wheel.name}" in r.stderr
    # The same set both ways: a second build short of one of the first's wheels stops it, naming the wheel.
    shutil.copy(cp311_oeq_aarch64_wheel, first / cp311_oeq_aarch64_wheel.name.replace("-cp311-cp311-", "-cp310-cp310-"))
    r = run_cli("compare-builds", str(first), str(third))
    assert r.returncode == 1 and "lacks " + cp311_oeq_aarch64_wheel.name.replace("-cp311-cp311-", "-cp310-cp310-") \
        in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_emulated_machine_describes_an_aarch64_cpu_not_the_hosts(emulation, tmp_path):
    """qemu-user passes the host's /proc/cpuinfo through, which torch >= 2.12 parses as an aarch64 CPU's and crashes
    on; the root file system's own description (Neoverse V2) is what the emulated CPython reads."""
    arch = P.load().arches["aarch64"]
    root = emulated.rootfs(arch, "3.11", default_cache())
    assert (root / "proc").is_dir() and not (root / "proc").is_symlink() and (root / "lib").is_symlink()
    r = subprocess.run([*emulated.command(arch, "3.11", root), "-c",
                        "import platform; print(platform.machine()); print(open('/proc/cpuinfo').read().count('CPU part\\t: 0xd4f')); "
                        "print(open('/sys/devices/system/cpu/cpu0/regs/identification/midr_el1').read().strip())"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.stdout.split() == ["aarch64", str(os.cpu_count()), emulated.CPU_MIDR], r.stdout + r.stderr
