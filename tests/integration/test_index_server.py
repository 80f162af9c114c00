"""The owner's path against a real index server (pypiserver): upload with `make publish` (credentials from
~/.pypirc) and with plain `twine upload dist/*`, a re-upload refused by our gate before the server, then a
plain `pip install fastmace-oeq-ext` from that server into a fresh venv, with the doctor's verdict."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO
from oeq_wheels import pins as P
from oeq_wheels.release import publish, recorded, site
from oeq_wheels.checks import hosts, installmatrix
from oeq_wheels.output import extra_dir

from support.uploads import UPLOAD_PASSWORD as PASSWORD

pytestmark = pytest.mark.big_disk  # multi-GB trees for a while: one unit with the others like it (tests/support/plugin.py)


def owner_env(home: Path, cache) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWINE_")}
    env.update(HOME=str(home), OEQ_WHEELS_CACHE=str(cache), PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring")
    return env


def test_make_publish_with_pypirc_uploads_once_and_refuses_a_reupload(release_set, upload_server, tmp_path, cache):
    url, pkgs = upload_server
    home = tmp_path / "home"
    home.mkdir()
    (home / ".pypirc").write_text(f"[distutils]\nindex-servers = local\n\n[local]\nrepository = {url}\n"
                                  f"username = owner\npassword = {PASSWORD}\n")
    make = ["make", "-s", "publish", f"OUTDIR={release_set}", "PUBLISH_FLAGS=--repository local"]
    r = subprocess.run(make, cwd=REPO, env=owner_env(home, cache), capture_output=True, text=True)
    said = r.stdout + r.stderr
    assert r.returncode == 0, said[-3000:]
    ours = sorted(w.name for w in release_set.glob("*.whl"))
    assert sorted(p.name for p in pkgs.iterdir()) == ours and len(ours) == len(P.load().matrix.pythons)
    assert PASSWORD not in said  # credentials came from ~/.pypirc through twine, and were never echoed
    assert publish.files_on_index(url + "simple/", "fastmace-oeq-ext") == \
        {w.name: publish.sha256_file(w) for w in release_set.glob("*.whl")}  # the server's links name each sha256
    uploaded = {p.name: p.stat().st_mtime_ns for p in pkgs.iterdir()}
    # A re-run after the upload (a partial one completes the set): our own bytes there are left alone.
    again = subprocess.run(make, cwd=REPO, env=owner_env(home, cache), capture_output=True, text=True)
    said = again.stdout + again.stderr
    assert again.returncode == 0, said[-3000:]
    assert f"{len(ours)} file(s) already on {url}simple/ with our bytes (left alone)" in said
    assert "nothing to upload" in said and "Uploading" not in said
    # Someone else's bytes under one of our names: refused in one line naming it, before twine runs, in a dry run too.
    other = pkgs / ours[0]
    other.write_bytes(other.read_bytes() + b"\0")
    uploaded[ours[0]] = other.stat().st_mtime_ns
    for flags in ("--repository local", "--repository local --dry-run --check-index"):
        r = subprocess.run(make[:-1] + [f"PUBLISH_FLAGS={flags}"], cwd=REPO, env=owner_env(home, cache),
                           capture_output=True, text=True)
        said = r.stdout + r.stderr
        assert r.returncode == 2, said[-3000:]  # make's status for a failed recipe (publish itself exits 1)
        (line,) = [x for x in said.splitlines() if x.startswith("oeq-wheels: error:")]
        assert f"already has 1 of our file name(s) with other bytes: {ours[0]} (sha256 there" in line
        assert "bump .postN" in line and "Uploading" not in said and "publish] Error 1" in said  # Refused: 1
    assert {p.name: p.stat().st_mtime_ns for p in pkgs.iterdir()} == uploaded
    assert PASSWORD not in said


def test_plain_twine_upload_then_pip_install_from_the_server(release_set, upload_server, tmp_path, cache):
    url, pkgs = upload_server
    twine = [sys.executable, "-m", "twine"]
    dist = sorted(map(str, release_set.iterdir()))  # what the owner's `dist/*` expands to
    env = dict(owner_env(tmp_path, cache), TWINE_USERNAME="owner", TWINE_PASSWORD=PASSWORD)
    r = subprocess.run([*twine, "check", "--strict", *dist], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([*twine, "upload", "--non-interactive", "--repository-url", url, *dist], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0 and PASSWORD not in r.stdout + r.stderr, r.stdout + r.stderr
    # A user's plain install: fastmace-oeq-ext from the server, torch and the rest from the registry,
    # the binary openequivariance from our index; compilers replaced by sentinels; then the doctor.
    pins = P.load()
    site_dir = site.write_site(tmp_path / "site", site.from_outdir(extra_dir(release_set), pins), pins)
    with hosts.pages(site_dir, "oeq-wheels") as base:
        args = ["torch==" + pins.matrix.torch_version, pins.package_name,
                "--extra-index-url", base + pins.oeq_binary.index_paths[0] + "/", "--extra-index-url", url + "simple/"]
        case = installmatrix.run_case(installmatrix.Case(pins.matrix.torch_version, "pip", pins.oeq_binary),
                                      pins, args, installmatrix.pythons.find("3.11").executable, False, print,
                                      with_fastmace=True)
    assert case.ok, case.result  # judged with the doctor's first line: "OpenEquivariance precompiled ..."


def test_the_release_set_is_exactly_the_recorded_set_every_wheel_by_name_and_bytes(release_set):
    """Every wheel the full build gives, both packages and every line and architecture, is records/release.json's,
    by exact name and sha256, and no recorded wheel is missing: all 16, not a sample. A change that alters any wheel's bytes fails here, naming each file it alters, until the set is recorded
    again."""
    record = recorded.load()
    built = sorted([*release_set.glob("*.whl"), *extra_dir(release_set).glob("*.whl")], key=lambda w: w.name)
    problems = record.problems(built)  # a line per built file not recorded, or recorded with other bytes
    problems += [f"{name} is in the recorded set but was not built"
                 for name in sorted(set(record.wheels) - {w.name for w in built})]
    assert problems == [], f"{len(problems)} file(s) differ from the recorded set of {len(record.wheels)}:\n" + \
        "\n".join(problems)
    assert sorted(w.name for w in built) == sorted(record.wheels)  # the same names, each once


def test_the_release_set_has_the_bytes_the_gpu_runs_used(release_set):
    """The GPU runs' records (records/runs/) hold the sha256 of each wheel as computed on the GPU machine; the
    pinned build gives those bytes. A change that alters them fails here until the GPU runs are made again."""
    from oeq_wheels.checks import run_records
    from oeq_wheels.files import sha256_file
    built = {w.name: w for w in [*release_set.glob("*.whl"), *extra_dir(release_set).glob("*.whl")]}
    compared = []
    for rec in run_records.all_records():
        for name, digest in sorted(rec.wheels.items()):
            if name in built:  # a rebuild for another torch (not a release file) is not built here
                assert sha256_file(built[name]) == digest, f"{name}: {rec.path.name} ran other bytes"
                compared.append(name)
    line = P.load().oeq_binary
    assert any(n.startswith(f"openequivariance-{line.version(P.load().oeq.version)}-cp312-abi3-") for n in compared), \
        compared


def test_the_owners_manual_doors_hold_the_recorded_set_unless_told_loudly(release_set, tmp_path):
    """`make publish` and `make site` refuse a wheel that passes the gate but whose bytes records/release.json does not
    name (here: one OEq wheel repacked with other zip dates, every file the same), in one line naming it; only
    --unrecorded lets it through, saying so on stderr."""
    import shutil
    import zipfile
    from support.cli import run_cli
    out = tmp_path / "dist"
    shutil.copytree(release_set, out)
    shutil.copytree(extra_dir(release_set), extra_dir(out))
    (victim,) = [w for w in extra_dir(out).glob("openequivariance-*-cp311-cp311-*x86_64.whl")
                 if P.load().line_of(w.name.split("-")[1]) == P.load().oeq_binary]
    data = victim.read_bytes()
    with zipfile.ZipFile(victim, "w", zipfile.ZIP_DEFLATED) as zout, \
            zipfile.ZipFile(__import__("io").BytesIO(data)) as zin:
        for info in zin.infolist():
            info.date_time = (2001, 2, 3, 4, 5, 6)
            zout.writestr(info, zin.read(info.filename))
    r = run_cli("publish", str(out), "--dry-run")
    assert r.returncode == 1 and "whose bytes are not the recorded ones" in r.stderr and victim.name in r.stderr \
        and "Traceback" not in r.stderr, r.stdout[-2000:] + r.stderr
    r = run_cli("site", str(out), "--out", str(tmp_path / "site"))
    assert r.returncode == 1 and f"refusing to serve: {victim.name} has sha256" in r.stderr, r.stderr
    assert not (tmp_path / "site").exists()  # nothing half-written
    r = run_cli("site", str(out), "--out", str(tmp_path / "site"), "--unrecorded")
    assert r.returncode == 0 and "WARNING: --unrecorded: serving" in r.stderr, r.stderr
    r = run_cli("publish", str(out), "--dry-run", "--unrecorded")
    assert r.returncode == 0 and "WARNING: --unrecorded: publishing" in r.stderr, r.stdout[-2000:] + r.stderr
