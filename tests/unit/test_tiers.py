"""The two tiers hold: a unit test reaches no network (tests/unit/conftest.py) and cannot ask for an integration
fixture (they are tests/integration/conftest.py's, out of tests/unit's scope), and every test file is in one tier."""
import ast
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support import REPO


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


def fixtures_of(path: Path) -> set[str]:
    """The fixtures a conftest or plugin module defines, read as Python."""
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)
            and any("fixture" in ast.unparse(d) for d in n.decorator_list)}


def test_a_unit_test_cannot_reach_an_integration_fixture(request):
    integration = fixtures_of(REPO / "tests" / "integration" / "conftest.py")
    assert {"cache", "cp311_wheel", "resumed_build", "torch_venv", "oeq_venv", "emulation", "oeq_ops",
            "post1_wheel", "upload_server"} <= integration, integration
    # What pytest would give this test for each name: nothing, as for a misspelt fixture (the lookup itself works:
    # tmp_path and the tier's own guard are found).
    lookup = request._fixturemanager.getfixturedefs
    assert lookup("tmp_path", request.node) and lookup("_unit_tier_offline", request.node)
    assert [name for name in sorted(integration) if lookup(name, request.node)] == []


def test_every_test_file_is_in_one_tier_and_the_shared_files_define_no_integration_fixture():
    assert not list((REPO / "tests").glob("test_*.py")), "a test file outside tests/unit and tests/integration"
    assert not list((REPO / "tests" / "support").glob("test_*.py")), "a test file among the helpers"
    assert {p.name for p in (REPO / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"} >= {"unit",
                                                                                                      "integration"}
    integration = fixtures_of(REPO / "tests" / "integration" / "conftest.py")
    shared = [REPO / "tests" / "conftest.py", *(REPO / "tests" / "support").glob("*.py")]
    assert {f.name: fixtures_of(f) & integration for f in shared if fixtures_of(f) & integration} == {}
