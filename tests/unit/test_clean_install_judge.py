"""The clean-install check's verdict, its one-line refusal and its stand-in's port (the check itself, in a fresh
venv with every compiler a sentinel, is tests/integration/test_clean_install.py's)."""
import subprocess
import time

from support import REPO
from oeq_wheels.checks.cleaninstall import judge

GOOD_PROBE = {"usable": True, "extension": {"source": "prebuilt"}, "ops": ["a", "b", "c"]}
GOOD_SMOKE = {"ok": True, "backend": "hybrid", "oeq_extension": {"source": "prebuilt"}}
DOCTOR_OK = ("[ ok ] OpenEquivariance: openequivariance 4.5.6+oeqwheels.cu13.1; looked up, not imported\n"
             "       host extension: prebuilt (fastmace-oeq-ext 4.5.6.post9, /x/libtorch_tp_jit.so); no compiler needed\n")


def test_judge_passes_only_when_everything_holds():
    assert judge(0, DOCTOR_OK, GOOD_PROBE, "", gpu=False).ok
    assert judge(1, DOCTOR_OK, GOOD_SMOKE, "", gpu=True).ok  # the doctor fails on a CPU-only item: not ours to judge
    assert not judge(0, "       host extension: built with the host toolchain ...", GOOD_PROBE, "", False).ok
    assert not judge(0, DOCTOR_OK, None, "", False).ok
    assert not judge(0, DOCTOR_OK, {**GOOD_PROBE, "usable": False, "reason": "built for torch None"}, "", False).ok
    assert not judge(0, DOCTOR_OK, {**GOOD_PROBE, "extension": {"source": "built"}}, "", False).ok
    assert not judge(0, DOCTOR_OK, {**GOOD_PROBE, "ops": ["a"]}, "", False).ok
    v = judge(0, DOCTOR_OK, GOOD_PROBE, "g++ -c x.cpp\n", False)
    assert not v.ok and "g++ -c x.cpp" in v.problems[0]
    assert not judge(0, DOCTOR_OK, GOOD_PROBE, "", gpu=True).ok  # on a GPU the NVT smoke must run
    assert not judge(0, DOCTOR_OK, {**GOOD_SMOKE, "backend": "cueq"}, "", gpu=True).ok
    assert not judge(0, DOCTOR_OK, {**GOOD_SMOKE, "oeq_extension": {"source": "built"}}, "", gpu=True).ok


def test_refuses_a_directory_without_wheels(tmp_path):
    r = subprocess.run([str(REPO / "tools/release/clean_install.sh"), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "no fastmace_oeq_ext wheel" in r.stderr


def test_a_stand_ins_port_depends_on_its_folder_only():
    from oeq_wheels.checks.hosts import stable_port
    assert stable_port("/a/standins/pytorch-cu130") == stable_port("/a/standins/pytorch-cu130")
    assert stable_port("/a/standins/pytorch-cu130") != stable_port("/b/standins/pytorch-cu130")
    assert all(20000 <= stable_port(str(i)) < 32000 for i in range(200))  # below the ephemeral range


def test_two_stand_ins_started_at_once_for_one_port_both_serve(tmp_path, monkeypatch):
    """act runs a matrix's jobs at once on one host: their clean installs start the torch stand-in on the same
    stable port. Between one's free-port check and its server's bind the other checked too (widened here): both
    must serve, the second on another port, instead of one failing with 'Address already in use'."""
    import threading
    from oeq_wheels.checks import hosts
    real = hosts._free_port
    monkeypatch.setattr(hosts, "_free_port", lambda preferred=0: (real(preferred), time.sleep(1.0))[0])
    # A stable port that is free now (it is below the ephemeral range: no outgoing connection takes it meanwhile).
    port = next(p for p in (hosts.stable_port(f"{tmp_path}{i}") for i in range(1000)) if real(p) == p)
    urls, errors, up = [], [], threading.Barrier(3)

    def serve(i):
        (tmp_path / f"p{i}").mkdir()
        try:
            with hosts.pypiserver(tmp_path / f"p{i}", tmp_path / f"log{i}", "--disable-fallback", port=port) as url:
                urls.append(url)
                up.wait(120)  # both up at the same time
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(str(exc))
            up.abort()

    threads = [threading.Thread(target=serve, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        up.wait(120)
    except threading.BrokenBarrierError:
        pass
    for t in threads:
        t.join(120)
    assert errors == [] and len(set(urls)) == 2, (errors, urls)
    assert f"http://127.0.0.1:{port}/" in urls
