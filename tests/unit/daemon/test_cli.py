"""`qwenmem serve` startup checks, through the real `qwenmem` entry point."""

from __future__ import annotations

import pytest

from qwenmem_tui.cli import run
from qwenmem_tui.daemon.cli import bind_socket, is_loopback, resolve_token


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_token_comes_from_flag_or_env() -> None:
    assert resolve_token("flag", {"QWENMEM_SERVER_TOKEN": "env"}) == "flag"
    assert resolve_token(None, {"QWENMEM_SERVER_TOKEN": "env"}) == "env"
    assert resolve_token(None, {"QWENMEM_SERVER_TOKEN": ""}) is None
    assert resolve_token(None, {}) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "my-host.lan"])
def test_public_bind_without_token_is_refused(home, capsys, host: str) -> None:
    assert run(["serve", "--host", host, "--port", "0"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and "refusing to bind" in err and "QWENMEM_SERVER_TOKEN" in err
    assert "Traceback" not in err


def test_busy_port_is_one_line(home, capsys) -> None:
    taken = bind_socket("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        assert run(["serve", "--port", str(port)]) == 1
    finally:
        taken.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in err
