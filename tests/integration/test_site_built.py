"""The binary OEq index site: one PEP 503 index for every CUDA torch, laid out from a build or from release assets."""
import hashlib
import json
from pathlib import Path
import re
import shutil

import pytest

from support.cli import run_cli
from oeq_wheels import install_lines, pins as P
from oeq_wheels.release import recorded, site
from oeq_wheels.output import extra_dir


def built_site(tmp_path, cp311_wheel):
    pins = P.load()
    return site.write_site(tmp_path / "site", site.from_outdir(extra_dir(cp311_wheel.parent), pins), pins), pins


def test_one_index_for_every_cuda_torch_at_each_of_its_folders_with_hashes_and_metadata(cp311_wheel, cp311_oeq_wheel,
                                                                                       cp311_oeq_aarch64_wheel, tmp_path):
    root, pins = built_site(tmp_path, cp311_wheel)
    line = pins.oeq_binary
    wheels = [cp311_oeq_aarch64_wheel, cp311_oeq_wheel]  # pip picks the x86_64 or aarch64 wheel by its platform tag
    (served,) = extra_dir(cp311_wheel.parent).glob("fastmace_oeq_ext-*+oeqwheels*.whl")
    # Its own folder (simple/) and the replaced lines' (cu130/simple/, cu128/simple/, variants/simple/): the same
    # pages, each link reaching the one copy under files/.
    for folder in line.index_paths:
        base = root / folder
        depth = len(Path(folder).parts)
        page = (base / "openequivariance" / "index.html").read_text()
        doc = json.loads((base / "openequivariance" / "index.json").read_text())
        assert doc["meta"]["api-version"] == "1.1" and doc["name"] == "openequivariance"
        assert [f["filename"] for f in doc["files"]] == [w.name for w in wheels]
        flat = (base.parent / "links.html").read_text()
        for wheel, f in zip(wheels, doc["files"]):
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            href = "../" * (depth + 1) + "files/" + wheel.name.replace("+", "%2B")
            meta = (root / "files" / (wheel.name + ".metadata")).read_bytes()
            md = hashlib.sha256(meta).hexdigest()
            assert f'href="{href}#sha256={digest}"' in page
            assert f'data-core-metadata="sha256={md}"' in page and f'data-dist-info-metadata="sha256={md}"' in page
            assert meta.startswith(b"Metadata-Version") and b"Version: " + line.version(pins.oeq.version).encode() in meta
            assert (root / "files" / wheel.name).read_bytes() == wheel.read_bytes()
            # PEP 691 JSON: the same files, hashes and metadata hashes.
            assert (f["filename"], f["url"], f["hashes"], f["core-metadata"]) == (wheel.name, href, {"sha256": digest},
                                                                                 {"sha256": md})
            assert f'href="{"../" * (depth - 1)}files/{wheel.name.replace("+", "%2B")}#sha256={digest}"' in flat
        assert 'data-requires-python="==3.11.*"' in page
        assert '<a href="openequivariance/">' in (base / "index.html").read_text()
        # the fastmace-oeq-ext build that names the line's OEq, never PyPI's
        fpage = (base / "fastmace-oeq-ext" / "index.html").read_text()
        assert served.name.replace("+", "%2B") in fpage and cp311_wheel.name not in fpage
        assert '<a href="fastmace-oeq-ext/">' in (base / "index.html").read_text()
    landing = (root / "index.html").read_text()
    assert landing.count("Linux x86_64 and aarch64</h2>") == 1 and "CUDA 12 and 13" in landing
    sums = (root / "SHA256SUMS").read_text()
    # OEq x86_64 and aarch64, and the fastmace-oeq-ext build that names them
    assert sums.count("\n") == 3 and (root / ".nojekyll").exists()
    assert all(cmd in landing.replace("&amp;", "&") for cmd in install_lines.ours(pins))
    assert "R570" in landing and "R580" in landing


def record_of(wheels, tmp_path=None):
    """The recorded set of these wheels (as a release's tag would hold it); written to a file when tmp_path is given."""
    rec = recorded.Recorded("t", {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in wheels}, "the test's set")
    if tmp_path is not None:
        (tmp_path / "release.json").write_text(json.dumps({"version": rec.version, "wheels": rec.wheels}))
    return rec


def release_assets(d, wheels, sums=True):
    """A release's assets as `gh release download` saves them: renamed as GitHub renames them, SHA256SUMS beside."""
    d.mkdir(parents=True)
    if sums:
        (d / "SHA256SUMS").write_text("".join(f"{hashlib.sha256(w.read_bytes()).hexdigest()}  {w.name}\n"
                                              for w in wheels))
    for w in wheels:
        shutil.copy(w, d / site.release_asset_name(w.name))
    return d


def test_the_site_is_laid_out_again_from_renamed_release_assets(cp311_wheel, cp311_oeq_wheel, cp311_oeq_aarch64_wheel,
                                                                  tmp_path):
    pins = P.load()
    wheels = [cp311_wheel, cp311_oeq_wheel, cp311_oeq_aarch64_wheel]
    assets = release_assets(tmp_path / "v1", wheels)
    got = site.from_release(assets, pins, record_of(wheels, tmp_path))
    assert sorted(w.name for w in got) == sorted([cp311_oeq_wheel.name, cp311_oeq_aarch64_wheel.name])  # not fastmace
    root = site.write_site(tmp_path / "site", got, pins)
    assert (root / "files" / cp311_oeq_wheel.name).read_bytes() == cp311_oeq_wheel.read_bytes()
    # The CLI the Pages job runs: several releases, one site; the same release twice is one file each.
    r = run_cli("site", "--out", str(tmp_path / "cli-site"), "--release", str(assets), "--release", str(assets),
                "--recorded", str(tmp_path / "release.json"))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "cli-site" / "files").glob("*.whl")) == \
        sorted([cp311_oeq_wheel.name, cp311_oeq_aarch64_wheel.name])
    # Without --recorded, a release is held to the set of its own tag (the folder's name): v1 is no tag here.
    r = run_cli("site", "--out", str(tmp_path / "tagless"), "--release", str(assets))
    assert r.returncode == 1 and "release v1: its tag has no records/release.json" in r.stderr
    assert not (tmp_path / "tagless").exists()


def test_an_asset_changed_after_the_release_is_never_served_whatever_sha256sums_says(cp311_oeq_wheel,
                                                                                      cp311_oeq_aarch64_wheel, tmp_path):
    """The tampering the issue tried: one wheel changed and SHA256SUMS regenerated to match. The site refuses the
    release in one line naming the asset, and writes nothing."""
    pins = P.load()
    record = record_of([cp311_oeq_wheel, cp311_oeq_aarch64_wheel], tmp_path)
    forged = tmp_path / "forged" / cp311_oeq_wheel.name
    forged.parent.mkdir()
    forged.write_bytes(cp311_oeq_wheel.read_bytes() + b"\0")
    d = release_assets(tmp_path / "v9", [forged, cp311_oeq_aarch64_wheel])  # SHA256SUMS regenerated over the forgery
    with pytest.raises(recorded.Refused, match=rf"v9: asset {re.escape(site.release_asset_name(forged.name))} \(sha256 "):
        site.from_release(d, pins, record)
    r = run_cli("site", "--out", str(tmp_path / "s"), "--release", str(d), "--recorded", str(tmp_path / "release.json"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "a release asset changed after the release" in r.stderr and not (tmp_path / "s").exists()
    # SHA256SUMS alone altered (the wheels untouched): tampering too, refused naming its line.
    d2 = release_assets(tmp_path / "v8", [cp311_oeq_wheel, cp311_oeq_aarch64_wheel])
    (d2 / "SHA256SUMS").write_text(f"{'0' * 64}  {cp311_oeq_wheel.name}\n")
    with pytest.raises(recorded.Refused, match="v8: v8/SHA256SUMS line 1 disagrees with the test.s set"):
        site.from_release(d2, pins, record)
    # and a release without SHA256SUMS is served by content alone
    d3 = release_assets(tmp_path / "v7", [cp311_oeq_wheel, cp311_oeq_aarch64_wheel], sums=False)
    assert len(site.from_release(d3, pins, record)) == 2


def test_bad_release_assets_are_one_line_each(cp311_oeq_wheel, cp311_oeq_aarch64_wheel, tmp_path):
    pins = P.load()
    record = record_of([cp311_oeq_wheel, cp311_oeq_aarch64_wheel], tmp_path)
    d = release_assets(tmp_path / "rel", [cp311_oeq_wheel], sums=False)
    with pytest.raises(site.SiteError, match=f"names {re.escape(cp311_oeq_aarch64_wheel.name)}, which no downloaded "
                                             "asset matches"):
        site.from_release(d, pins, record)
    shutil.copy(cp311_oeq_aarch64_wheel, d / site.release_asset_name(cp311_oeq_aarch64_wheel.name))
    (d / site.release_asset_name(cp311_oeq_wheel.name)).rename(d / "renamed-by-hand.whl")
    with pytest.raises(site.SiteError, match="a name the release host would not give it"):
        site.from_release(d, pins, record)
    r = run_cli("site")
    assert r.returncode == 2 and "site needs OUTDIR or --release DIR" in r.stderr
    (d / "renamed-by-hand.whl").rename(d / site.release_asset_name(cp311_oeq_wheel.name))
    r = run_cli("site", "--release", str(d))  # where would it go? said in one line, nothing written
    assert r.returncode == 2 and "needs --out SITE" in r.stderr and "Traceback" not in r.stderr


def test_the_same_name_with_other_bytes_is_refused(cp311_oeq_wheel, tmp_path):
    pins = P.load()
    other = tmp_path / "other" / cp311_oeq_wheel.name
    other.parent.mkdir()
    other.write_bytes(cp311_oeq_wheel.read_bytes() + b"\0")
    wheels = [site.Wheel(cp311_oeq_wheel, cp311_oeq_wheel.name, "a" * 64), site.Wheel(other, other.name, "b" * 64)]
    with pytest.raises(site.SiteError, match="a released file name never changes"):
        site.write_site(tmp_path / "site", wheels, pins)
    with pytest.raises(site.SiteError, match="no openequivariance wheel"):
        site.write_site(tmp_path / "site", [], pins)
    assert not (tmp_path / "site").exists()
