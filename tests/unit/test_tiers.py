"""The two tiers hold: a unit test reaches no network and asks for no integration fixture (tests/conftest.py), and
every test file is in one tier."""
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

import conftest
from conftest import REPO


def test_a_unit_test_that_reaches_the_network_fails_naming_the_tier():
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.URLError, match="the unit tier reaches no network"):
        direct.open("https://192.0.2.1/simple/", timeout=5)  # an address: no name lookup to fail first
    with pytest.raises(urllib.error.URLError):  # through the environment's proxy: the dead one
        urllib.request.urlopen("https://pypi.org/simple/", timeout=5)
    with pytest.raises(OSError, match="the unit tier reaches no network"):
        socket.create_connection(("192.0.2.1", 443), timeout=1)  # TEST-NET-1: an address, no name lookup
    assert os.environ["https_proxy"] == "http://127.0.0.1:9"  # what it starts goes nowhere either


def test_loopback_stays_open_to_unit_tests():
    server = socket.create_server(("127.0.0.1", 0))
    with server, socket.create_connection(server.getsockname(), timeout=5):
        pass


def test_a_unit_test_asking_for_an_integration_fixture_is_named():
    item = lambda path, *fixtures: SimpleNamespace(path=REPO / "tests" / path, nodeid=f"{path}::t",
                                                   fixturenames=["tmp_path", *fixtures])
    items = [item("unit/test_a.py", "cp311_wheel", "torch_venv"), item("unit/test_b.py", "monkeypatch"),
             item("integration/test_c.py", "cp311_wheel")]
    assert conftest.tier_violations(items) == ["unit/test_a.py::t asks for cp311_wheel, torch_venv"]


def test_every_test_file_is_in_one_tier_and_every_fixture_named_exists():
    assert not list((REPO / "tests").glob("test_*.py")), "a test file outside tests/unit and tests/integration"
    assert {p.name for p in (REPO / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"} >= {"unit",
                                                                                                      "integration"}
    defined = {name for name, value in vars(conftest).items() if hasattr(value, "_pytestfixturefunction")
               or type(value).__name__ == "FixtureFunctionDefinition"}
    assert conftest.INTEGRATION_ONLY <= defined, conftest.INTEGRATION_ONLY - defined
    assert Path(conftest.UNIT_TIER).is_dir()
