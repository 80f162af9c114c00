"""Every address we ship or tell users is the owner's account or an upstream project's ([addresses] in pins.toml):
README, the docs, the workflows, the runtime, every built wheel's METADATA and the index site."""

import pytest

from support import REPO
from oeq_wheels import addresses, pins as P

# What users read or what is shipped: README, the docs and CHANGELOG, the workflows that publish, the runtime, and
# contrib/ (the rules we hand the owner for FastMACE).
TOLD = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / ".github").rglob("*.yml")), *sorted((REPO / "runtime").rglob("*.py")),
        *sorted(f for f in (REPO / "contrib").rglob("*") if f.is_file())]


def test_the_allow_list_is_the_owners_account_and_upstream():
    pins = P.load()
    allowed = pins.allowed_addresses
    owner = pins.repository.split("/")[0]
    assert addresses.foreign(f"https://github.com/{owner}/FastMACE and https://{owner.lower()}.github.io/x/", allowed) == []
    assert addresses.foreign(f"https://github.com/{owner.lower()}/x", allowed) == []  # GitHub names are case-blind
    assert addresses.foreign("https://github.com/PASSIONLab/OpenEquivariance, https://pypi.org/simple/", allowed) == []
    assert addresses.foreign("see https://<owner>.github.io/<name>/", allowed) == []  # a placeholder names no host
    other = ["https://github.com/fastmace/oeq-wheels", "https://fastmace.github.io/oeq-wheels/cu130/simple/",
             "https://github.com/PASSIONLab-fork/x", "https://pypi.org.evil.example/simple/", "http://example.com"]
    assert addresses.foreign(" ".join(other), allowed) == other


def test_readme_docs_workflows_and_runtime_name_only_allowed_addresses():
    allowed = P.load().allowed_addresses
    bad = {str(f.relative_to(REPO)): addresses.foreign(f.read_text(), allowed) for f in TOLD}
    assert {k: v for k, v in bad.items() if v} == {}
    readme = (REPO / "README.md").read_text()
    assert P.load().site_url in readme  # the scan reads the real install lines ...
    moved = readme.replace(P.load().site_url, "https://someone.github.io/oeq-wheels/", 1)
    assert addresses.foreign(moved, allowed) == ["https://someone.github.io/oeq-wheels/simple/"]  # ... and would fail


def test_a_pinned_project_url_on_another_account_is_refused(tmp_path):
    text = P.PINS_FILE.read_text()
    pins = P.load()
    fastmace = dict(pins.urls)["FastMACE"]
    assert fastmace.startswith(addresses.owner_prefixes(pins.repository)[0])  # post1's link to FastMACE, kept
    bad = tmp_path / "pins.toml"
    bad.write_text(text.replace(f'"{fastmace}"', '"https://github.com/someone-else/FastMACE"'))
    with pytest.raises(P.PinsError, match=r"names https://github.com/someone-else/FastMACE, which is neither "
                                          r"the owner's account \(FZWINGEL-UBT\) nor an \[addresses\] upstream"):
        P.load(path=bad)
