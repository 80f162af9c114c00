"""The unit tier (tests/unit, `make test-unit`) builds nothing, installs no torch, starts no engine or emulation and
reaches no network. Its tests cannot ask for the integration fixtures: those are tests/integration/conftest.py's, out
of this folder's scope (pytest names the fixture it did not find). Each runs with connections off loopback refused
and a dead proxy for the programs it starts."""
import ipaddress
import socket

import pytest

OFFLINE = "the unit tier reaches no network (tests/unit); move this test to tests/integration"


def _loopback(address) -> bool:
    host = address[0] if isinstance(address, tuple) else None
    if host is None:  # AF_UNIX and the like
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


@pytest.fixture(autouse=True)
def _unit_tier_offline(monkeypatch):
    def loopback_only(real):
        def connect(self, address):
            if not _loopback(address):
                raise OSError(f"{OFFLINE}: {address[0]}")
            return real(self, address)
        return connect

    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, loopback_only(getattr(socket.socket, name)))
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(k, "http://127.0.0.1:9")  # discard: nothing answers
    for k in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(k, "127.0.0.1,localhost,::1")
    yield
