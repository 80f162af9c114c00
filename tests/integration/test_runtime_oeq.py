"""fastmace_oeq_ext with the real torch and OpenEquivariance of the pins (CPU, stub libcuda)."""
import json
import os
import shutil
import subprocess
import zipfile

from oeq_wheels import pins as P


PROBE = r"""
import json, os, sys, time
t0 = time.perf_counter()
import fastmace_oeq_ext as f
if os.environ.get("PROBE_IMPORT_OEQ_FIRST"):
    import openequivariance
err = None
try:
    f.activate()
except Exception as exc:
    err = f"{type(exc).__name__}: {exc}"
if err is None and not os.environ.get("PROBE_NO_IMPORT"):
    import openequivariance
    from openequivariance._torch import extlib
    res = {"built": extlib.BUILT_EXTENSION, "ext_error": str(extlib.BUILT_EXTENSION_ERROR),
           "file": getattr(extlib.extension_module, "__file__", None),
           "DeviceProp": openequivariance._torch.extlib.DeviceProp.__module__}
else:
    res = {}
print("RESULT " + json.dumps({"status": f.status(), "error": err, "seconds": time.perf_counter() - t0, **res}))
"""


def probe(venv, env_extra, tmp_path, path_prefix=None, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "FASTMACE_OEQ_PREBUILT",
                                                           "OEQ_CUDA_FROM_WHEELS", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(filter(None, [str(path_prefix) if path_prefix else None, str(venv / "bin"),
                                                env["PATH"]]))
    env.setdefault("TORCH_EXTENSIONS_DIR", str(tmp_path / "torch_extensions"))
    env.update(env_extra)
    r = subprocess.run([str(venv / "bin" / "python"), "-W", "ignore", "-c", PROBE], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path), **kw)
    lines = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    assert lines, f"exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return json.loads(lines[-1][7:])


def test_prebuilt_required_loads_with_no_compiler(oeq_venv, libcuda_stub, sentinels, tmp_path):
    sbin, log = sentinels
    res = probe(oeq_venv, {"FASTMACE_OEQ_PREBUILT": "1", "LD_LIBRARY_PATH": str(libcuda_stub)}, tmp_path, sbin)
    assert res["error"] is None, res
    assert res["status"]["state"] == "prebuilt"
    assert res["built"] is True and res["file"].endswith("site-packages/fastmace_oeq_ext/libtorch_tp_jit.so")
    assert res["DeviceProp"] == "libtorch_tp_jit"
    assert not log.exists(), log.read_text()             # no compiler was even tried
    assert not (tmp_path / "torch_extensions").exists()  # no build directory, no lock


def test_stale_lock_does_not_delay(oeq_venv, libcuda_stub, sentinels, tmp_path):
    lock = tmp_path / "torch_extensions" / "libtorch_tp_jit" / "lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")  # left by a killed JIT build; OEq itself would wait 300 s, past the probe's timeout
    res = probe(oeq_venv, {"LD_LIBRARY_PATH": str(libcuda_stub)}, tmp_path, sentinels[0], timeout=120)
    assert res["built"] is True and res["status"]["state"] == "prebuilt"
    assert sorted(p.name for p in lock.parent.iterdir()) == ["lock"]


def test_two_processes_at_once(oeq_venv, libcuda_stub, sentinels, tmp_path):
    env = dict(os.environ, LD_LIBRARY_PATH=str(libcuda_stub), FASTMACE_OEQ_PREBUILT="1",
               TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"),
               PATH=f"{sentinels[0]}{os.pathsep}{oeq_venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    procs = [subprocess.Popen([str(oeq_venv / "bin" / "python"), "-W", "ignore", "-c", PROBE], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
             for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        res = json.loads([l for l in out.splitlines() if l.startswith("RESULT ")][-1][7:])
        assert res["built"] is True and res["status"]["state"] == "prebuilt"
    assert not (tmp_path / "ext").exists() and not sentinels[1].exists()


def test_prebuilt_never_leaves_oeq_alone(oeq_venv, libcuda_stub, sentinels, tmp_path):
    sbin, log = sentinels
    res = probe(oeq_venv, {"FASTMACE_OEQ_PREBUILT": "0", "OEQ_CUDA_FROM_WHEELS": "0",
                           "LD_LIBRARY_PATH": str(libcuda_stub)}, tmp_path, sbin)
    assert res["status"]["state"] == "skipped" and "FASTMACE_OEQ_PREBUILT=0" in res["status"]["reason"]
    assert res["built"] is False          # OEq tried its own JIT build: the sentinels refused it
    assert log.read_text().strip()      # ninja/c++ were called and refused


def _copy_package(venv, dest, edit):
    site = next((venv / "lib").glob("python3.*/site-packages"))
    shutil.copytree(site / "fastmace_oeq_ext", dest / "fastmace_oeq_ext")
    m = dest / "fastmace_oeq_ext" / "manifest.json"
    data = json.loads(m.read_text())
    edit(data)
    m.write_text(json.dumps(data))
    return site


def test_required_but_mismatched_raises_and_compiles_nothing(oeq_venv, sentinels, tmp_path):
    shadow = tmp_path / "shadow"
    _copy_package(oeq_venv, shadow, lambda d: d.update(python="cp312", python_built_with="3.12.0"))
    res = probe(oeq_venv, {"FASTMACE_OEQ_PREBUILT": "1", "PYTHONPATH": str(shadow)}, tmp_path, sentinels[0])
    assert res["error"].startswith("PrebuiltUnavailable") and "library built for cp312" in res["error"]
    assert not sentinels[1].exists() and not (tmp_path / "torch_extensions").exists()


def test_oeq_imported_first_is_reported(oeq_venv, libcuda_stub, sentinels, tmp_path):
    env = {"PROBE_IMPORT_OEQ_FIRST": "1", "OEQ_CUDA_FROM_WHEELS": "0", "LD_LIBRARY_PATH": str(libcuda_stub)}
    res = probe(oeq_venv, env, tmp_path, sentinels[0])
    assert res["status"]["state"] == "skipped" and "imported before activate()" in res["status"]["reason"]
    # Its own extensions directory: stock OEq leaves torch's lock file behind, and OEq
    # itself (imported first, so nothing of ours runs) would wait 5 minutes on it.
    res = probe(oeq_venv, {**env, "FASTMACE_OEQ_PREBUILT": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext2")},
                tmp_path, sentinels[0])
    assert res["error"].startswith("PrebuiltUnavailable") and "imported before" in res["error"]


def test_oeq_own_precompiled_extension_is_left_alone(oeq_venv, tmp_path):
    site = next((oeq_venv / "lib").glob("python3.*/site-packages"))
    shadow = tmp_path / "shadow"
    shutil.copytree(site / "openequivariance", shadow / "openequivariance")
    (shadow / "openequivariance" / "_torch" / "extlib" / "liboeq_stable_cuda_aoti.so").write_bytes(b"")
    res = probe(oeq_venv, {"PYTHONPATH": str(shadow), "PROBE_NO_IMPORT": "1"}, tmp_path)
    assert res["status"]["state"] == "oeq-precompiled"


def test_stock_jit_fails_here_and_wheel_fallback_builds(oeq_venv, libcuda_stub, tmp_path):
    """Stock OEq cannot build here (torch guesses a CUDA_HOME without headers); with the
    NVIDIA-wheel fallback it builds and loads, nvcc hidden behind a failing sentinel."""
    from oeq_wheels.checks import sentinels
    log = tmp_path / "nvcc.log"
    sbin = sentinels.make(tmp_path / "nvcc-only", log, tools=("nvcc",))
    base = {"LD_LIBRARY_PATH": str(libcuda_stub), "FASTMACE_OEQ_PREBUILT": "0", "MAX_JOBS": "2"}
    stock = probe(oeq_venv, {**base, "OEQ_CUDA_FROM_WHEELS": "0", "TORCH_EXTENSIONS_DIR": str(tmp_path / "stock")},
                  tmp_path, sbin, timeout=600)
    assert stock["built"] is False, stock
    assert "cuda_runtime_api.h" in stock["ext_error"] or "cusparse.h" in stock["ext_error"], stock["ext_error"][-2000:]
    env = {**base, "OEQ_CUDA_DRIVER_DIR": str(libcuda_stub), "TORCH_EXTENSIONS_DIR": str(tmp_path / "wheels")}
    # As after `pip install torch` (the venv is this test's own), torch's requirements do not bring nvidia-cuda-crt
    # (nor, before torch 2.15, nvidia-cuda-cccl): the fallback says what to install, the versions pinned for the
    # matrix's torch ...
    from oeq_wheels import files, pins as P
    from oeq_wheels.inputs import fetch
    from fastmace_oeq_ext import cudaflags
    missing = {dist for _f, dist in cudaflags.missing_cu13_parts(next((oeq_venv / "lib").glob("python3.*/site-packages")))}
    assert "nvidia-cuda-crt" in missing, missing
    pins = [n for n in P.load().matrix.nvidia if n.name in missing]
    assert sorted(n.name for n in pins) == sorted(missing), missing  # each one pinned for the matrix's torch
    res = probe(oeq_venv, {**env, "PROBE_NO_IMPORT": "1"}, tmp_path, sbin)
    assert res["status"]["state"] == "skipped"
    assert f"pip install {' '.join(sorted(f'{p.name}=={p.version}' for p in pins))}" in res["status"]["reason"]
    # ... and we install exactly those, by hash, from the pinned cache.
    paths = fetch.ensure(pins, files.default_cache(), whole=True)  # installed: the wheels themselves
    req = tmp_path / "headers.txt"
    req.write_text("".join(f"{paths[p.file]} --hash=sha256:{p.sha256}\n" for p in pins))
    subprocess.run([str(oeq_venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                    "--disable-pip-version-check", "--require-hashes", "-r", str(req)], check=True)
    res = probe(oeq_venv, env, tmp_path, sbin, timeout=600)
    assert res["built"] is True, res["ext_error"]
    assert res["status"]["state"] == "built" and res["file"].startswith(str(tmp_path / "wheels"))
    needed = subprocess.run(["readelf", "-d", res["file"]], capture_output=True, text=True).stdout
    for soname in ("libcudart.so.13", "libnvrtc.so.13", "libcublas.so.13", "libcuda.so.1"):
        assert f"[{soname}]" in needed
    assert not log.exists()  # nvcc was never called
    # torch leaves <build dir>/lock behind; the second process must neither wait on it (300 s, past the probe's
    # timeout) nor rebuild.
    assert (tmp_path / "wheels" / "libtorch_tp_jit" / "lock").exists()
    again = probe(oeq_venv, env, tmp_path, sbin, timeout=120)
    assert again["built"] is True and again["status"]["state"] == "reused"


def doctor(venv, env_extra, path=None):
    env = {k: v for k, v in os.environ.items() if k not in ("FASTMACE_OEQ_PREBUILT",)}
    env.update(env_extra)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([str(venv / "bin" / "python"), "-m", "fastmace_oeq_ext"], capture_output=True,
                          text=True, env=env, cwd="/")


def test_doctor_lines(oeq_venv, tmp_path):
    r = doctor(oeq_venv, {})
    assert r.returncode == 0, r.stdout + r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith(f"host extension: prebuilt (fastmace-oeq-ext {P.load().version}, ")
    assert first.endswith("libtorch_tp_jit.so); no compiler needed")
    assert f"  taken    prebuilt: matches torch {P.load().matrix.torch_version}+{P.load().matrix.torch_local}" in r.stdout  # the trace of every candidate
    assert f"  refused  oeq-precompiled: OpenEquivariance {P.load().oeq.version} has no precompiled extension" in r.stdout
    toolkit = tmp_path / "cuda"  # a CUDA toolkit with headers, as torch's CUDA_HOME
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "cuda_runtime_api.h").write_text("")
    r = doctor(oeq_venv, {"FASTMACE_OEQ_PREBUILT": "0", "CUDA_HOME": str(toolkit)})
    assert r.returncode == 0 and "host extension: built with the host toolchain (g++ " in r.stdout
    assert "prebuilt not used: FASTMACE_OEQ_PREBUILT=0" in r.stdout
    r = doctor(oeq_venv, {"FASTMACE_OEQ_PREBUILT": "0", "CUDA_HOME": str(toolkit)}, path=str(oeq_venv / "bin"))
    assert r.returncode == 1 and "missing: g++" in r.stdout  # ninja, no g++
    r = doctor(oeq_venv, {"FASTMACE_OEQ_PREBUILT": "0", "CUDA_HOME": str(tmp_path / "no-headers"),
                          "OEQ_CUDA_FROM_WHEELS": "0"})
    assert r.returncode == 1 and "has no CUDA headers" in r.stdout  # says why instead of promising a build


def test_our_manifest_carries_every_key_of_the_published_post1_in_its_format(post1_wheel, cp311_wheel):
    """FastMACE reads post1's keys (CONSUMER_KEYS): the published post1 manifest has each, and ours carries
    each with the type of post1's value and the pinned builds' values."""
    from fastmace_oeq_ext.manifest import CONSUMER_KEYS
    name = "fastmace_oeq_ext/manifest.json"
    post1 = json.loads(zipfile.ZipFile(post1_wheel).read(name))
    ours = json.loads(zipfile.ZipFile(cp311_wheel).read(name))
    assert set(CONSUMER_KEYS) <= set(post1), set(CONSUMER_KEYS) - set(post1)
    for key in CONSUMER_KEYS:
        assert type(ours[key]) is type(post1[key]), key
    pins = P.load()
    assert (ours["torch"], ours["python"], ours["openequivariance"], ours["extension_version"]) == \
        (pins.matrix.consumer_torch, "cp311", pins.oeq.version, pins.version)
    for key, prefix in (("compiler", "GCC "), ("glibc_max_symbol", "GLIBC_2.")):
        assert post1[key].startswith(prefix) and ours[key].startswith(prefix), key
