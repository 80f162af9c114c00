"""The release rehearsal: the hosts' rules (renamed assets, redirects, Pages), every link, README's line verbatim."""
import hashlib
import http.client
import re
import subprocess
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

from support.cli import run_cli
from oeq_wheels.release import site
from oeq_wheels.checks import hosts, rehearse
from oeq_wheels import install_lines, pins as P
from oeq_wheels.output import extra_dir
from oeq_wheels.checks.venvs import pip_env

pytestmark = pytest.mark.big_disk  # multi-GB trees for a while: one unit with the others like it (tests/support/plugin.py)


def test_release_host_renames_on_upload_and_redirects_downloads(cp311_oeq_wheel, tmp_path):
    host = hosts.ReleaseHost(tmp_path / "storage", "owner/repo")
    (name,) = host.upload("v1", [cp311_oeq_wheel])
    assert name == site.release_asset_name(cp311_oeq_wheel.name) and "+" not in name
    with host.serving():
        front = urlsplit(host.api)
        conn = http.client.HTTPConnection(front.hostname, front.port)
        conn.request("GET", f"/owner/repo/releases/download/v1/{name}")
        r = conn.getresponse()
        assert r.status == 302 and r.getheader("Location").startswith(host.downloads + "/")
        conn.close()
        # The exact name is not there: a link to it 404s, which is why the index cannot point at assets.
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"{host.api}/owner/repo/releases/download/v1/{cp311_oeq_wheel.name}")
        got = host.download("v1", tmp_path / "dl")
    assert (got / name).read_bytes() == cp311_oeq_wheel.read_bytes()


def test_pages_serves_only_the_project_path_and_crawl_finds_a_broken_or_wrong_file(cp311_wheel, tmp_path):
    pins = P.load()
    root = site.write_site(tmp_path / "site", site.from_outdir(extra_dir(cp311_wheel.parent), pins), pins)
    with hosts.pages(root, "oeq-wheels") as base:
        assert base.endswith("/oeq-wheels/")
        # each folder serving the index (its own and the replaced lines'): both OEq wheels (x86_64, aarch64) and
        # fastmace-oeq-ext, on the project pages and the flat page
        assert len(rehearse.crawl(base, pins)) == 6 * len(pins.oeq_binary.index_paths)
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(base.replace("/oeq-wheels/", "/other/") + "index.html")
        (wheel,) = (root / "files").glob("openequivariance-*_x86_64.whl")
        wheel.write_bytes(wheel.read_bytes() + b"\0")
        with pytest.raises(rehearse.RehearsalError, match="does not have the sha256 its link names"):
            rehearse.crawl(base, pins)
        wheel.unlink()
        with pytest.raises(rehearse.RehearsalError, match="answered HTTP 404"):
            rehearse.crawl(base, pins)


def test_upgrade_download_hashes_and_index_url_from_the_served_site(cp311_wheel, cp311_oeq_wheel, tmp_path, cache):
    """What README says of upgrades and mixed indexes, against the site as Pages serves it (no torch needed)."""
    from oeq_wheels.oeq import wheel as oeqpy
    from oeq_wheels.inputs import pythons
    pins = P.load()
    root = site.write_site(tmp_path / "site", site.from_outdir(extra_dir(cp311_wheel.parent), pins), pins)
    py = pythons.find("3.11").executable
    venv = tmp_path / "venv"
    subprocess.run([py, "-m", "venv", str(venv)], check=True)
    vpy = str(venv / "bin" / "python")
    # OEq as a user's sdist build leaves it (its plain version, no precompiled extension).
    plain = oeqpy.build_pure(pins, tmp_path / "plain", cache)
    subprocess.run([vpy, "-m", "pip", "install", "-q", "--no-deps", str(plain)], check=True, env=pip_env())
    version = lambda: subprocess.run([vpy, "-c", "import importlib.metadata as m; print(m.version('openequivariance'))"],
                                     capture_output=True, text=True).stdout.strip()
    assert version() == pins.oeq.version
    with hosts.pages(root, "oeq-wheels") as base:
        index = base + pins.oeq_binary.index_paths[0] + "/"
        pip = [vpy, "-m", "pip", "install", "--no-deps", f"openequivariance=={pins.oeq.version}", "--extra-index-url", index]
        r = subprocess.run(pip, capture_output=True, text=True, env=pip_env())
        assert r.returncode == 0 and "already satisfied" in r.stdout and version() == pins.oeq.version
        r = subprocess.run(pip + ["--upgrade"], capture_output=True, text=True, env=pip_env())
        assert r.returncode == 0 and version() == pins.oeq_binary.version(pins.oeq.version), r.stdout + r.stderr
        # pip download and --require-hashes, with the hash the site publishes.
        dl = tmp_path / "dl"
        r = subprocess.run([vpy, "-m", "pip", "download", "--no-deps", "-d", str(dl), f"openequivariance=={pins.oeq.version}",
                            "--index-url", index], capture_output=True, text=True, env=pip_env())
        assert r.returncode == 0 and (dl / cp311_oeq_wheel.name).read_bytes() == cp311_oeq_wheel.read_bytes()
        digest = hashlib.sha256(cp311_oeq_wheel.read_bytes()).hexdigest()
        assert f"{digest}  {cp311_oeq_wheel.name}" in (root / "SHA256SUMS").read_text()
        req = tmp_path / "req.txt"
        req.write_text(f"openequivariance=={pins.oeq_binary.version(pins.oeq.version)} --hash=sha256:{digest}\n")
        r = subprocess.run([vpy, "-m", "pip", "install", "--no-deps", "--force-reinstall", "--require-hashes",
                            "-r", str(req), "--index-url", index], capture_output=True, text=True, env=pip_env())
        assert r.returncode == 0, r.stdout + r.stderr
        # --index-url alone: OEq's dependencies are not on our index, and pip says so.
        r = subprocess.run([vpy, "-m", "pip", "install", "--dry-run", "--ignore-installed", f"openequivariance=={pins.oeq.version}",
                            "--index-url", index], capture_output=True, text=True, env=pip_env())
        assert r.returncode != 0 and "No matching distribution found for" in r.stderr, r.stderr


def test_rehearsal_with_readmes_first_line_and_pip(cp311_wheel, cp311_oeq_wheel):
    """.ci/run's pip case of `make rehearse-release`: assets renamed and redirected, the site laid out from them,
    every link checked, then README's first install line verbatim (site address substituted), compilers hidden."""
    r = run_cli("rehearse", str(cp311_wheel.parent), "--installer", "pip", "--command", "0")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    # Renamed: the two OEq wheels (x86_64 and aarch64) and the fastmace-oeq-ext build that names them (+ -> .).
    v = re.escape(P.load().oeq.version)
    assert re.search(rf"the host renamed {2 + 1}, e.g. \S+-{v}(\.post\d+)?\+oeqwheels\.[a-z0-9.]+-cp311-\S+ -> "
                     rf"\S+-{v}(\.post\d+)?.oeqwheels\.", r.stderr), r.stderr
    assert "every link resolves with its sha256" in r.stderr
    assert f"README: {install_lines.ours(P.load())[0]}" in r.stderr
    assert "OEq precompiled (our binary wheel; CUDA 13 bound)" in r.stdout and "PASS" in r.stdout
