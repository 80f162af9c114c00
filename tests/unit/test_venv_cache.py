"""A cached test venv is reused only as it was made (oeq_wheels/checks/venvs.py): the same distributions, and the
interpreter it was made from still there."""
import os

from oeq_wheels.checks import venvs


def fake_venv(root, interpreter):
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "demo-1.0.dist-info").mkdir(parents=True)
    (root / "bin").mkdir()
    os.symlink(interpreter, root / "bin" / "python")
    return venvs._done(root)


def test_a_venv_whose_interpreter_is_gone_is_made_again(tmp_path):
    interpreter = tmp_path / "cpython" / "bin" / "python3.11"
    interpreter.parent.mkdir(parents=True)
    interpreter.write_text("")
    venv = fake_venv(tmp_path / "venv", interpreter)
    assert venvs._ready(venv)
    interpreter.unlink()  # the CPython it was made from, removed (a rehearsal's tool cache, a pyenv uninstall)
    assert not venvs._ready(venv)


def test_a_venv_installed_into_since_is_made_again(tmp_path):
    interpreter = tmp_path / "python3.11"
    interpreter.write_text("")
    venv = fake_venv(tmp_path / "venv", interpreter)
    (venv / "lib" / "python3.11" / "site-packages" / "extra-2.0.dist-info").mkdir()
    assert not venvs._ready(venv)


def test_a_venv_made_through_another_index_is_made_again(tmp_path, monkeypatch):
    """uv keeps a wheel under the URL of the index it came through: a venv made from PyPI directly, then used beside
    installs through the session's mirror of PyPI, would leave its stack in uv's cache twice."""
    from support import pypi_mirror
    interpreter = tmp_path / "python3.11"
    interpreter.write_text("")
    monkeypatch.setenv(pypi_mirror.ENV, "off")
    venv = fake_venv(tmp_path / "venv", interpreter)
    assert venvs._ready(venv)
    monkeypatch.setenv(pypi_mirror.ENV, "http://127.0.0.1:20001/simple/")
    assert not venvs._ready(venv)
