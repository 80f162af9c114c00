"""The binary openequivariance wheel: OEq's own stable extension, built once for every CUDA 13 torch."""
import json
import os
import subprocess
import zipfile


from support import RUNTIME
from support.cli import run_cli
from support.oeq_operators import LOADED
from fastmace_oeq_ext.oeq_build import FILE_NAME as OEQ_BUILD_FILE, OeqBuild
from oeq_wheels import pins as P, elf
from oeq_wheels.inputs import unpack
from oeq_wheels.oeq import stable
from oeq_wheels.oeq.gate import verify_oeq_binary

VERSION = P.load().oeq_binary.version(P.load().oeq.version)
EXTLIB = "openequivariance/_torch/extlib/"


def test_name_version_and_contents(cp311_oeq_wheel, cache):
    pins = P.load()
    assert cp311_oeq_wheel.name == f"openequivariance-{VERSION}-cp311-cp311-manylinux_2_28_x86_64.whl"
    root = unpack.oeq_tree(cache / "downloads" / pins.oeq.file, pins.oeq, cache)
    with zipfile.ZipFile(cp311_oeq_wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read(f"openequivariance-{VERSION}.dist-info/METADATA").decode()
        record = OeqBuild.from_json(zf.read(f"openequivariance-{VERSION}.dist-info/{OEQ_BUILD_FILE}").decode())
        # The sdist's package tree, unchanged, byte for byte.
        for path in (root / "openequivariance").rglob("*"):
            if path.is_file():
                arc = path.relative_to(root).as_posix()
                assert zf.read(arc) == path.read_bytes(), arc
    assert {EXTLIB + "oeq_stable_cuda.cpython-311-x86_64-linux-gnu.so", EXTLIB + "liboeq_stable_cuda_aoti.so"} <= names
    # METADATA is the sdist's PKG-INFO with the version changed, and `packaging` (which OEq
    # imports without declaring it) added after its own requirements; it still satisfies ==<OEq's version>.
    want = (root / "PKG-INFO").read_text().replace(f"Version: {P.load().oeq.version}\n", f"Version: {VERSION}\n", 1)
    want = want.replace("Requires-Dist: pybind11\n", "Requires-Dist: pybind11\nRequires-Dist: packaging\n", 1)
    assert meta == want
    from packaging.specifiers import SpecifierSet
    oeq, line = P.load().oeq, P.load().oeq_binary
    assert VERSION in SpecifierSet(f"=={oeq.version}") and "+" in VERSION  # PyPI refuses local versions
    assert (record.torch_min, record.cuda_majors, record.built_against.version) == \
        (line.torch_min, ("12", "13"), line.torch.version)
    assert {w.name: w.version for w in record.cuda_wheels} == {n.name: n.version for n in line.nvidia}


def test_libraries_link_by_soname_into_torch_and_the_dispatch_library(cp311_oeq_wheel):
    ob = P.load().oeq_binary
    with zipfile.ZipFile(cp311_oeq_wheel) as zf:
        for name in ("oeq_stable_cuda.cpython-311-x86_64-linux-gnu.so", "liboeq_stable_cuda_aoti.so"):
            data = zf.read(EXTLIB + name)
            facts = elf.elf_facts(data)
            assert facts["runpath"] == ob.runpath() == "$ORIGIN:$ORIGIN/../../../torch/lib"
            assert {"libtorch_cpu.so", "libc10.so", "libtorch_cuda.so", ob.dispatch_library,
                    "libcuda.so.1"} <= set(facts["needed"])
            assert not [n for n in facts["needed"] if n.startswith(("libcudart.so", "libnvrtc.so", "libcublas.so"))]
            assert facts["stripped"] and not any(n.startswith("libpython") for n in facts["needed"])
            # torch only through its stable C ABI (aoti_torch_*), no c10::/at::/torch:: C++ symbols.
            needs = elf.dynamic_symbols(data, defined=False)
            assert any(n.startswith("aoti_torch_") for n, _ in needs)
            assert not [n for n, _ in needs if elf.TORCH_CXX.search(n)]
            # every CUDA call through the dispatch library's version node, none under a CUDA library's own
            assert stable.DISPATCH_VERSION in {v for _, v in needs} and not {v for _, v in needs} & set(ob.cuda_sonames())


def test_verify_passes_and_refuses_tampering(cp311_oeq_wheel, tmp_path):
    r = run_cli("verify", str(cp311_oeq_wheel))
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
    pins = P.load()
    from wheel.wheelfile import WheelFile

    def repack(edit):
        unpacked = tmp_path / "u"
        if unpacked.exists():
            import shutil
            shutil.rmtree(unpacked)
        with zipfile.ZipFile(cp311_oeq_wheel) as zf:
            zf.extractall(unpacked)
        edit(unpacked)
        out = tmp_path / "o" / cp311_oeq_wheel.name
        out.parent.mkdir(exist_ok=True)
        out.unlink(missing_ok=True)
        with WheelFile(out, "w") as wf:  # a consistent RECORD around the change
            wf.write_files(str(unpacked))
        return verify_oeq_binary(out, pins, twine=False).problems

    info = f"openequivariance-{VERSION}.dist-info"
    assert any("do not belong" in p for p in repack(lambda u: (u / "zz_evil.pth").write_text("import os\n")))
    assert any("do not belong" in p for p in repack(lambda u: (u / "torch").mkdir() or (u / "torch" / "version.py").write_text("x")))
    edit_init = lambda u: (u / "openequivariance" / "__init__.py").write_text("raise SystemExit\n")
    assert any("differ from the pinned sdist" in p for p in repack(edit_init))

    def lower_floor(u):
        f = u / info / OEQ_BUILD_FILE
        f.write_text(f.read_text().replace(f'"torch_min": "{P.load().oeq_binary.torch_min}"', '"torch_min": "2.9"'))
    assert any("torch_min" in p for p in repack(lower_floor))


def run_in_torch_venv(wheel, venv, sentinels, tmp_path):
    """OEq from `wheel` (first on PYTHONPATH) in a venv of the matrix's torch (CPU, stub libcuda), compilers replaced by
    sentinels: activate(), import OEq's extlib, then the doctor. Returns (result, doctor); result's ops: every
    operator the process then holds under torch.ops.libtorch_tp_jit."""
    sbin, log = sentinels
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    from oeq_wheels import driver_stub
    stub_dir = driver_stub.stub_for_library(site / EXTLIB / "oeq_stable_cuda.cpython-311-x86_64-linux-gnu.so",
                                     tmp_path / "stub").parent
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "FASTMACE_OEQ_PREBUILT")}
    env.update(PYTHONPATH=f"{site}{os.pathsep}{RUNTIME}", LD_LIBRARY_PATH=str(stub_dir),
               PATH=f"{sbin}{os.pathsep}{env['PATH']}", TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"))
    code = ("import json, torch, fastmace_oeq_ext as f\n"
            "try:\n    st = f.activate()\nexcept RuntimeError as e:\n    st = {'error': str(e)}\n"
            "from openequivariance._torch import extlib\n"
            "print('R ' + json.dumps({'torch': torch.__version__, 'pre': extlib.USE_PRECOMPILED_EXTENSION,"
            " 'built': extlib.BUILT_EXTENSION, 'error': str(extlib.BUILT_EXTENSION_ERROR),"
            " 'file': getattr(extlib.extension_module, '__file__', None), 'status': st,"
            f" 'ops': {LOADED}}}))")
    r = subprocess.run([str(venv / "bin" / "python"), "-W", "ignore", "-c", code], env=env,
                       capture_output=True, text=True, cwd=tmp_path)
    res = json.loads([l for l in r.stdout.splitlines() if l.startswith("R ")][-1][2:]) if "R " in r.stdout else None
    assert res, r.stderr[-3000:]
    assert not log.exists() and not (tmp_path / "ext").exists()  # nothing was compiled, nothing tried to
    d = subprocess.run([str(venv / "bin" / "python"), "-m", "fastmace_oeq_ext"], env=env, capture_output=True,
                       text=True, cwd=tmp_path)
    return res, d, site


def test_oeq_loads_it_into_newer_torch_without_any_compiler(cp311_oeq_wheel, oeq_venv, oeq_ops, sentinels, tmp_path):
    """Built against the line's floor torch's headers, loaded by OEq into the matrix's newer torch (CPU, stub libcuda),
    with every operator OEq's sdist registers (and no other).

    The venv brings torch and OEq's dependencies; the binary wheel's files come first on PYTHONPATH."""
    res, d, site = run_in_torch_venv(cp311_oeq_wheel, oeq_venv, sentinels, tmp_path)
    assert res["torch"].startswith(P.load().matrix.torch_version) and res["pre"] and res["built"]
    assert res["ops"] == oeq_ops, res["ops"]
    assert res["file"].startswith(str(site)) and res["status"]["state"] == "oeq-precompiled"
    assert d.returncode == 0 and d.stdout.startswith(
        f"host extension: OpenEquivariance precompiled ({site / EXTLIB}/oeq_stable_cuda."), d.stdout
    assert d.stdout.splitlines()[0].endswith("; no compiler needed")


def _so(tmp_path, name: str, source: str, *link: str, version_script: str | None = None) -> bytes:
    """A small shared library built with the host's gcc (the check reads symbols only; nothing runs)."""
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    cmd = ["gcc", "-shared", "-fPIC", "-o", str(tmp_path / name), str(src), f"-L{tmp_path}", *link]
    if version_script:
        (tmp_path / f"{name}.map").write_text(version_script)
        cmd += [f"-Wl,--version-script={tmp_path / f'{name}.map'}", f"-Wl,-soname,{name}"]
    subprocess.run(cmd, check=True)
    return (tmp_path / name).read_bytes()


def test_the_cuda_symbol_check_refuses_a_symbol_the_oldest_pinned_library_lacks(tmp_path):
    from oeq_wheels.oeq.gate import abi_problems
    soname = "libcublas.so.13"  # NVIDIA versions its symbols by soname, as the check expects
    script = f"{soname} {{ global: %s local: *; }};"
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    _so(old, soname, "int cublasOld(void){return 0;}", version_script=script % "cublasOld;")
    _so(new, soname, "int cublasOld(void){return 0;}\nint cublasNew(void){return 1;}",
        version_script=script % "cublasOld; cublasNew;")
    uses = "int cublasOld(void); int cublasNew(void);\nint f(void){return cublasOld()%s;}"
    only_old = _so(new, "only_old.so", uses % "", f"-l:{soname}")
    both = _so(new, "both.so", uses % " + cublasNew()", f"-l:{soname}")
    assert abi_problems(only_old, {soname: old / soname}) == []
    assert abi_problems(both, {soname: old / soname}) == \
        [f"needs ['cublasNew'] from {soname}, absent in the oldest pinned {soname}"]
    assert abi_problems(both, {soname: old / "absent.so"}) == [f"cannot check CUDA symbols: {old / 'absent.so'} missing"]
    # A torch C++ symbol (not the stable C ABI) is refused too.
    cxx = _so(tmp_path, "cxx.so", "void _ZN3c104impl3fooEv(void); void g(void){_ZN3c104impl3fooEv();}",
              "-Wl,--unresolved-symbols=ignore-all")
    assert abi_problems(cxx, {}) == ["imports C++ symbols, not torch's stable C ABI: ['_ZN3c104impl3fooEv']"]


def test_from_cpython_3_12_on_one_stable_abi_wheel_and_the_gate_proves_its_abi(abi3_oeq_wheel, cp311_oeq_wheel,
                                                                              tmp_path):
    """nanobind's STABLE_ABI: the module built against Python's limited API 3.12 and named as CPython imports an
    abi3 module; the tag, the module's suffix and the index's Requires-Python agree; abi3audit (beside
    torch-abi-audit) passes it and refuses a module that uses more than the limited API."""
    from oeq_wheels.oeq.gate import abi3audit
    from oeq_wheels.release.site import _requires_python
    pins = P.load()
    assert abi3_oeq_wheel.name == f"openequivariance-{VERSION}-cp312-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(abi3_oeq_wheel) as zf:
        names = zf.namelist()
        module = zf.read(EXTLIB + "oeq_stable_cuda.abi3.so")
        record = OeqBuild.from_json(zf.read(f"openequivariance-{VERSION}.dist-info/{OEQ_BUILD_FILE}").decode())
    assert not [n for n in names if ".cpython-" in n] and record.python_tag == "cp312"
    assert _requires_python(abi3_oeq_wheel.name) == ">=3.12"
    v = verify_oeq_binary(abi3_oeq_wheel, pins)
    assert v.ok, v.problems
    assert sorted(v.facts["abi3audit"].split("; ")) == ["liboeq_cuda_dispatch.so: 3.12", "liboeq_stable_cuda_aoti.so: 3.12",
                                                         "oeq_stable_cuda.abi3.so: 3.12"]
    assert b"_PyObject_LookupAttr" not in module  # nanobind's full-API paths are compiled out
    # A module of the full API (the cp311 build's) in the abi3 wheel's place: abi3audit names what it uses.
    with zipfile.ZipFile(cp311_oeq_wheel) as zf:
        full = next(zf.read(n) for n in zf.namelist() if n.endswith(".cpython-311-x86_64-linux-gnu.so"))
    bad = tmp_path / abi3_oeq_wheel.name
    with zipfile.ZipFile(abi3_oeq_wheel) as src, zipfile.ZipFile(bad, "w") as dst:
        for n in src.namelist():
            dst.writestr(n, full if n.endswith("oeq_stable_cuda.abi3.so") else src.read(n))
    said, problems = abi3audit(bad)
    assert problems and problems[0].startswith("abi3audit: oeq_stable_cuda.abi3.so is not abi3 3.12: ") and \
        "_Py" in problems[0], problems
    # The same bytes named as a per-version wheel: the pins build 3.12 as abi3, so the gate refuses the tag.
    renamed = tmp_path / abi3_oeq_wheel.name.replace("-cp312-abi3-", "-cp312-cp312-")
    renamed.write_bytes(abi3_oeq_wheel.read_bytes())
    v = verify_oeq_binary(renamed, pins)
    assert "wheel tag cp312-cp312-manylinux_2_28_x86_64: the pins build CPython 3.12's wheel with ABI abi3" in v.problems


def test_a_free_threaded_cpython_has_its_own_wheel_and_the_gate_proves_its_build(ft_oeq_wheel, abi3_oeq_wheel,
                                                                               tmp_path):
    """CPython 3.14t loads no abi3 module: its wheel (cp314-cp314t) holds a module compiled with the free-threaded
    CPython's headers (Py_GIL_DISABLED: its reference counting calls _Py_DecRefShared) and nanobind's FREE_THREADED,
    named as that CPython imports it; manylinux_2_28 still (nanobind's pthread keys bound to glibc's first version:
    shim/pthread_keys.h). The gate refuses a GIL build's module under a cp314t tag, and the reverse."""
    from oeq_wheels.oeq.gate import free_threading_problems
    from oeq_wheels.release.site import _requires_python
    pins = P.load()
    module_name = "oeq_stable_cuda.cpython-314t-x86_64-linux-gnu.so"
    assert ft_oeq_wheel.name == f"openequivariance-{VERSION}-cp314-cp314t-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(ft_oeq_wheel) as zf:
        module = zf.read(EXTLIB + module_name)
        record = OeqBuild.from_json(zf.read(f"openequivariance-{VERSION}.dist-info/{OEQ_BUILD_FILE}").decode())
    assert record.python_tag == "cp314" and _requires_python(ft_oeq_wheel.name) == "==3.14.*"
    v = verify_oeq_binary(ft_oeq_wheel, pins)
    assert v.ok, v.problems
    needs = {n: ver for n, ver in elf.dynamic_symbols(module, defined=False)}
    assert "_Py_DecRefShared" in needs and not [n for n, ver in needs.items() if (ver or "").startswith("GLIBC_2.3")]
    with zipfile.ZipFile(abi3_oeq_wheel) as zf:
        gil_module = zf.read(EXTLIB + "oeq_stable_cuda.abi3.so")
    assert free_threading_problems(module, True, "cp314-cp314t") == []
    assert free_threading_problems(gil_module, False, "cp312-abi3") == []
    assert "was not compiled with a free-threaded CPython's headers" in free_threading_problems(gil_module, True, "t")[0]
    assert "compiled with a free-threaded CPython's headers" in free_threading_problems(module, False, "cp314")[0]
    # The free-threaded module in place of a GIL build's (the cp312-abi3 wheel's): the gate refuses it.
    from wheel.wheelfile import WheelFile  # the writer the build packs with: a consistent RECORD
    unpacked = tmp_path / "u"
    with zipfile.ZipFile(abi3_oeq_wheel) as zf:
        zf.extractall(unpacked)
    (unpacked / EXTLIB / "oeq_stable_cuda.abi3.so").write_bytes(module)
    bad = tmp_path / "o" / abi3_oeq_wheel.name
    bad.parent.mkdir()
    with WheelFile(bad, "w") as wf:
        wf.write_files(str(unpacked))
    problems = verify_oeq_binary(bad, pins).problems
    assert any("but its module calls _Py_DecRefShared" in p for p in problems), problems


def test_a_wheel_variant_of_either_package_is_refused(cp311_oeq_wheel, cp311_wheel, tmp_path):
    """The one build serves every CUDA torch: no PEP 825 variant is built, and the gate refuses a label on a wheel of
    either package (the bytes of a wheel it passes, under a variant's name)."""
    import shutil
    from oeq_wheels.gate import verify_any
    pins = P.load()
    for wheel in (cp311_oeq_wheel, cp311_wheel):
        labelled = tmp_path / wheel.name.replace(".whl", "-cu13.whl")
        shutil.copyfile(wheel, labelled)
        problems = verify_any(labelled, pins).problems
        assert problems and "variant" in problems[0], problems
