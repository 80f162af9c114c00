"""Tests read versions from pins.toml: no test, fixture, docstring or claims.toml row spells a version pins.toml
pins (torch, OEq, FastMACE, the NVIDIA wheels, the toolchain's packages), so that a re-pin changes no test and a
test never holds on to an old release by its literal. A test needing an arbitrary version uses one nothing pins."""
import re
import tomllib

from support import REPO

PINS = REPO / "oeq_wheels" / "pins.toml"
# X.Y.Z[.W...], then a post release, a local version (+cu130) or a Debian revision (-14+deb12u1).
VERSION = re.compile(r"(?<![\w.])\d+\.\d+\.\d+(?:\.\d+)*(?:\.post\d+)?(?:\+[\w.]*\w)?(?:-\d[\w.+~]*)?")


def pinned_versions(text: str) -> set[str]:
    """Every version pins.toml's values spell (X.Y.Z and longer, with its local or Debian suffix), file names'
    included: `torch-X.Y.Z-cp311-...whl` pins X.Y.Z as much as `version = "X.Y.Z"` does."""
    found: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(k)
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str):
            found.update(m.group(0) for m in VERSION.finditer(value))
    walk(tomllib.loads(text))
    # A version's release part flags its longer spellings too (X.Y.Z flags X.Y.Z+cu130).
    return found | {re.match(r"\d+\.\d+\.\d+", v).group(0) for v in found}


def spelled(versions: set[str], files) -> list[str]:
    """file:line: version, for each pinned version a file spells as a whole token."""
    pattern = re.compile(r"(?<![\w.])(" + "|".join(sorted(map(re.escape, versions), key=len, reverse=True)) +
                         r")(?![\w])")
    return [f"{f.relative_to(REPO) if f.is_relative_to(REPO) else f}:{n}: {m.group(1)}" for f in files
            for n, line in enumerate(f.read_text().splitlines(), 1) for m in pattern.finditer(line)]


def test_no_test_spells_a_pinned_version():
    files = sorted(p for p in (REPO / "tests").rglob("*") if p.suffix in (".py", ".toml") and p.is_file())
    found = spelled(pinned_versions(PINS.read_text()), files)
    assert not found, "read these from pins.toml (oeq_wheels.pins) instead:\n" + "\n".join(found)


def test_the_scan_finds_a_pinned_version_in_any_spelling(tmp_path):
    pins = 'torch = "9.8.7"\nwheel = "nvidia_x-77.0.96-py3-none-any.whl"\ndeb = "88.2.0-14+deb88u1"\n'
    assert pinned_versions(pins) == {"9.8.7", "77.0.96", "88.2.0-14+deb88u1", "88.2.0"}
    t = tmp_path / "test_x.py"
    t.write_text('"""torch 9.8.7+cu130"""\nx = "77.0.96"\ny = "19.8.7"\nz = "9.8.70"\nw = "88.2.0-14+deb88u1"\n')
    assert [line.split(":", 1)[1] for line in spelled(pinned_versions(pins), [t])] == [
        "1: 9.8.7", "2: 77.0.96", "5: 88.2.0-14+deb88u1"]
