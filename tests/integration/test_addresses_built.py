"""Every address a built wheel's METADATA and the index site name is the owner's account or an upstream
project's ([addresses] in pins.toml); what we tell users is tests/unit/test_addresses.py's."""
import zipfile

from oeq_wheels import addresses, pins as P
from oeq_wheels.output import extra_dir
from oeq_wheels.release import site


def shipped_part(text: str, name: str) -> str:
    """What we write: all of it, except the description of an openequivariance METADATA (the wheel's or the site's
    .metadata copy), which is OEq's own README from its unmodified sdist (the gate checks the sdist tree) and cites
    its papers and related projects. Its header fields (Project-URL, Home-page) are checked like ours."""
    if name.startswith("openequivariance-"):
        return text.split("\n\n", 1)[0]
    return text


def test_built_wheels_and_the_site_name_only_allowed_addresses(cp311_wheel, tmp_path):
    pins = P.load()
    wheels = [cp311_wheel, *sorted(extra_dir(cp311_wheel.parent).glob("*.whl"))]
    assert len(wheels) == len(pins.ext_variants) + len(pins.oeq_lines)
    for whl in wheels:
        with zipfile.ZipFile(whl) as zf:
            meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        assert "Project-URL" in meta or "Home-page" in meta, whl.name
        assert addresses.foreign(shipped_part(meta, whl.name), pins.allowed_addresses) == [], whl.name
    with zipfile.ZipFile(cp311_wheel) as zf:  # fastmace-oeq-ext: every pinned Project-URL, FastMACE's among them
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    for label, url in pins.project_urls:
        assert f"Project-URL: {label}, {url}\n" in meta
    root = site.write_site(tmp_path / "site", site.from_outdir(extra_dir(cp311_wheel.parent), pins), pins)
    pages = [p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".whl")]
    assert any(p.name == "index.html" for p in pages)
    bad = {str(p.relative_to(root)): addresses.foreign(shipped_part(p.read_text(errors="replace"), p.name),
                                                       pins.allowed_addresses) for p in pages}
    assert {k: v for k, v in bad.items() if v} == {}
