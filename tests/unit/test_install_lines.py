"""The install lines (oeq_wheels/install_lines.py): derived from the pins, shown by README and the PyPI description,
and run by the rehearsal."""
from oeq_wheels import install_lines, pins as P
from oeq_wheels.ext import assemble
from support import REPO


def test_readme_and_the_pypi_description_show_the_derived_install_lines():
    pins = P.load()
    lines = install_lines.ours(pins)
    readme = (REPO / "README.md").read_text()
    assert all(f"\n{line}\n" in readme for line in lines), lines
    from oeq_wheels.checks.rehearse import readme_commands
    assert readme_commands(pins) == lines  # the rehearsal runs exactly these
    assert all(f"\n{line}\n" in readme for line in install_lines.fastmace(pins))  # FastMACE's steps
    assert all(line.endswith(f" --extra-index-url {pins.index_url(pins.oeq_binary.name)}") for line in lines)
    meta = assemble.metadata_text(pins.for_variant("pypi"), "3.11")
    assert f"    {lines[0]}\n" in meta
    assert f"Project-URL: Binary index, {pins.site_url}" in meta
    assert f"Project-URL: Source, https://github.com/{pins.repository}" in meta
