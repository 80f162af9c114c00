import pytest

from oeq_wheels.inputs import pythons


def test_discovers_every_pinned_python():
    for v in ("3.10", "3.11", "3.12", "3.13"):
        i = pythons.find(v)
        assert i.version == v and i.cp_tag == "cp" + v.replace(".", "")
        assert i.full_version.startswith(v + ".")


def test_missing_python_names_what_was_found(monkeypatch):
    with pytest.raises(pythons.PythonNotFound) as e:
        pythons.find_all(["3.11", "3.99"])
    msg = str(e.value)
    assert "3.99" in msg and "Found:" in msg and "3.11 (" in msg


def test_a_release_torch_without_a_cpython_narrows_fastmace_oeq_ext_only():
    """As after `make pins ARGS="--torch 9.3.0 --python 3.11,3.12,3.13"` (a torch release with no cp310 wheel)."""
    import dataclasses
    from oeq_wheels import build, pins as P
    pins = P.load()
    narrowed = dataclasses.replace(pins, matrix=dataclasses.replace(pins.matrix, pythons=pins.matrix.pythons[1:]))
    lines = sorted({v for l in pins.oeq_lines for v in l.pythons})
    wanted, ext = build.pythons_per_package(narrowed, None)
    assert sorted(wanted) == sorted(set(lines) | set(ext)) and ext == list(pins.matrix.pythons[1:])
    assert build.pythons_per_package(narrowed, [pins.matrix.pythons[0]]) == ([pins.matrix.pythons[0]], [])
    with pytest.raises(P.PinsError, match=r"Python 3.99 is not in matrix .* or the OEq lines"):
        build.pythons_per_package(narrowed, ["3.99"])
