import pytest

from oeq_wheels import pythons


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
