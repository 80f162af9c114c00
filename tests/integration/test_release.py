"""Publish gate, SHA256SUMS, the tag and repository checks, over real built wheels."""
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from support.uploads import UPLOAD_PASSWORD
from support.artifacts import forgeries
from oeq_wheels import pins as P

from oeq_wheels.release import publish
from oeq_wheels.output import extra_dir


def only_cp311(pins):
    """The release pins narrowed to CPython 3.11 (the matrix and every OEq line), for a set the tests can build
    quickly."""
    return dataclasses.replace(pins, matrix=dataclasses.replace(pins.matrix, pythons=("3.11",)),
                               oeq_lines=tuple(dataclasses.replace(l, pythons=("3.11",)) for l in pins.oeq_lines))


def release_dir(tmp_path, wheel, oeq_wheels):
    """A build's output as the release sees it: OUTDIR and OUTDIR-extra (oeq_wheels: a list, or one wheel)."""
    out = tmp_path / "dist"
    out.mkdir(parents=True)
    extra_dir(out).mkdir()
    if wheel is not None:
        shutil.copy(wheel, out)
    for w in oeq_wheels if isinstance(oeq_wheels, list) else [oeq_wheels] if oeq_wheels else []:
        shutil.copy(w, extra_dir(out))
    return out


@pytest.fixture
def oeq_set(cp311_oeq_wheel, cp311_oeq_aarch64_wheel, cp311_wheel):
    """The OEq line's cp311 wheels (x86_64 and aarch64) and the fastmace-oeq-ext build that names it: the complete
    served set of the cp311 pins."""
    (served,) = extra_dir(cp311_wheel.parent).glob("fastmace_oeq_ext-*.whl")
    return [cp311_oeq_wheel, served, cp311_oeq_aarch64_wheel]


def test_incomplete_set_is_refused(cp311_wheel, oeq_set, tmp_path):
    out = release_dir(tmp_path, cp311_wheel, oeq_set)
    missing = ", ".join(P.cp_tag(v) for v in P.load().matrix.pythons if v != "3.11")
    with pytest.raises(publish.ReleaseError, match=rf"incomplete fastmace-oeq-ext set: no wheel for {missing}"):
        publish.publish(out, None, True, P.load())
    assert not (extra_dir(out) / "SHA256SUMS").exists()
    name = P.load().oeq_binary.name
    out2 = release_dir(tmp_path / "b", cp311_wheel, oeq_set[1:])  # the x86_64 OEq wheel is missing
    with pytest.raises(publish.ReleaseError, match=rf"incomplete openequivariance {name} x86_64 set: no wheel for cp311"):
        publish.publish(out2, None, True, only_cp311(P.load()))
    # A build without a cross compiler leaves aarch64 out (with a note); such a release is refused.
    out3 = release_dir(tmp_path / "c", cp311_wheel, oeq_set[:2])
    with pytest.raises(publish.ReleaseError, match=rf"incomplete openequivariance {name} aarch64 set: no wheel for cp311"):
        publish.publish(out3, None, True, only_cp311(P.load()))


def test_dry_run_verifies_and_writes_sha256sums(cp311_wheel, oeq_set, tmp_path, capsys):
    out = release_dir(tmp_path, cp311_wheel, oeq_set)
    assert publish.publish(out, None, True, only_cp311(P.load())) == 0
    sums = (extra_dir(out) / "SHA256SUMS").read_text()
    for w in (cp311_wheel, *oeq_set):
        assert f"{hashlib.sha256(w.read_bytes()).hexdigest()}  {w.name}\n" in sums
    r = subprocess.run(["sha256sum", "-c", str(extra_dir(out) / "SHA256SUMS")], cwd=extra_dir(out),
                       capture_output=True, text=True)
    assert r.stdout.count(": OK") == 3  # the served wheels sit beside SHA256SUMS
    printed = capsys.readouterr().out
    assert "dry run: would upload 1 fastmace-oeq-ext wheel(s)" in printed
    # the two OEq wheels and the fastmace-oeq-ext build that names them
    assert "the 3 served wheel(s) (openequivariance and its lines' fastmace-oeq-ext) go to the GitHub release" \
        in printed
    assert sorted(p.name for p in out.iterdir()) == [cp311_wheel.name]  # OUTDIR holds distributions only
    from oeq_wheels.release import site
    site.write_site(extra_dir(out) / "site", site.from_outdir(extra_dir(out), P.load()), P.load())
    # The owner's conventional commands work on OUTDIR after build, publish --dry-run and the site.
    r = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, out.iterdir())],
                       capture_output=True, text=True)
    assert r.returncode == 0 and sorted(p.name for p in out.iterdir()) == [cp311_wheel.name], r.stdout + r.stderr


def test_a_wheel_whose_library_differs_from_its_manifest_is_refused(cp311_wheel, oeq_set, tmp_path):
    from wheel.wheelfile import WheelFile
    unpacked = tmp_path / "u"
    with zipfile.ZipFile(cp311_wheel) as zf:
        zf.extractall(unpacked)
    lib = unpacked / "fastmace_oeq_ext" / "libtorch_tp_jit.so"
    lib.write_bytes(lib.read_bytes() + b"\0")  # RECORD rewritten, manifest left as it was
    out = release_dir(tmp_path, None, oeq_set)
    with WheelFile(out / cp311_wheel.name, "w") as wf:
        wf.write_files(str(unpacked))
    with pytest.raises(publish.Refused, match="failed verification"):
        publish.publish(out, None, True, only_cp311(P.load()))


def test_tampered_wheel_is_refused(cp311_wheel, oeq_set, tmp_path):
    out = release_dir(tmp_path, None, oeq_set)
    bad = out / cp311_wheel.name
    with zipfile.ZipFile(cp311_wheel) as zin, zipfile.ZipFile(bad, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info, data + b"# edited\n" if info.filename.endswith("__init__.py") else data)
    with pytest.raises(publish.Refused, match="failed verification"):
        publish.publish(out, None, True, only_cp311(P.load()))


@pytest.mark.parametrize("kind", ["injected", "duplicate", "oversized"])
def test_publish_refuses_a_consistent_forgery_in_one_line(cp311_wheel, oeq_set, tmp_path, kind):
    wheel, why = forgeries(cp311_wheel, tmp_path / "forged")[kind]
    out = release_dir(tmp_path, wheel, oeq_set)
    with pytest.raises(publish.Refused) as info:
        publish.publish(out, None, True, only_cp311(P.load()))
    line = str(info.value)
    assert "\n" not in line and f"failed verification: {wheel.name} (" in line and why in line
    assert not (extra_dir(out) / "SHA256SUMS").exists()  # nothing written for a refused set


@pytest.mark.parametrize("credentials", ["none", "wrong password"])
def test_missing_or_wrong_credentials_refused_and_nothing_uploaded(credentials, cp311_wheel, oeq_set, tmp_path,
                                                                   monkeypatch, capfd, upload_server):
    """Against a server that checks them (pypiserver with a password): twine, not we, refuses; nothing lands."""
    url, pkgs = upload_server
    out = release_dir(tmp_path, cp311_wheel, oeq_set)
    for k in [k for k in os.environ if k.startswith("TWINE_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.pypirc
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
    if credentials == "wrong password":
        monkeypatch.setenv("TWINE_USERNAME", "owner")
        monkeypatch.setenv("TWINE_PASSWORD", "not-" + UPLOAD_PASSWORD)
    with pytest.raises(publish.ReleaseError, match="twine upload failed"):
        publish.publish(out, None, False, only_cp311(P.load()), repository_url=url)
    said = capfd.readouterr()
    assert "1 file(s) not on " in said.out  # the gate passed: twine itself refused
    assert ("403" in said.out + said.err) if credentials == "wrong password" else \
        ("username" in (said.out + said.err).lower())
    assert list(pkgs.iterdir()) == [] and UPLOAD_PASSWORD not in said.out + said.err


def test_unreachable_index_is_refused_before_any_upload(cp311_wheel, oeq_set, tmp_path, capsys):
    out = release_dir(tmp_path, cp311_wheel, oeq_set)
    with pytest.raises(publish.ReleaseError, match=r"cannot read http://user:\*\*\*@127.0.0.1:9/simple/.*--index-url"):
        publish.publish(out, None, False, only_cp311(P.load()), repository_url="http://user:secret@127.0.0.1:9/")
    assert "secret" not in capsys.readouterr().out


def test_dry_run_never_prints_a_password(cp311_wheel, oeq_set, tmp_path, capsys):
    out = release_dir(tmp_path, cp311_wheel, oeq_set)
    publish.publish(out, None, True, only_cp311(P.load()), repository_url="https://user:s3cret@example.invalid/x/")
    printed = capsys.readouterr().out
    assert "s3cret" not in printed and "https://user:***@example.invalid/x/" in printed


def test_publish_cli_dry_run_needs_the_full_set(cp311_wheel, tmp_path):
    out = release_dir(tmp_path, cp311_wheel, None)
    (out / "garbage.whl").write_text("not a wheel")
    from support.cli import run_cli
    r = run_cli("publish", str(out), "--dry-run")
    assert r.returncode == 1 and "incomplete fastmace-oeq-ext set" in r.stderr  # a failed check, not a usage error
    assert "garbage.whl is not a valid wheel file name" in r.stderr and "Traceback" not in r.stderr
