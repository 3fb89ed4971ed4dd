"""The socket-owner lookup behind the private daemon (issue 36 item 5).

Variants: IPv4 rows, IPv6 rows, IPv4-mapped IPv6 rows (a dual-stack socket), the
header and malformed lines, a real loopback connection (IPv4 and IPv6) looked up by
sock_diag netlink and in this machine's own /proc tables, and the token fallback where the kernel cannot tell (file 0600, read by
the SDK for a loopback URL only).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import sys
from pathlib import Path

import pytest

from qwenmem_tui.daemon import client as sdk
from qwenmem_tui.daemon.peer import TABLES, home_token, kernel_can_tell, parse_table, peer_uid, table_uid


def _hex4(address: str) -> str:
    return int.from_bytes(ipaddress.IPv4Address(address).packed, sys.byteorder).to_bytes(4, "big").hex().upper()


def _hex6(address: str) -> str:
    packed = ipaddress.IPv6Address(address).packed
    return "".join(
        int.from_bytes(packed[i : i + 4], sys.byteorder).to_bytes(4, "big").hex().upper()
        for i in range(0, 16, 4)
    )


HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"


def _row(local: str, remote: str, uid: int) -> str:
    return f"   0: {local} {remote} 01 00000000:00000000 00:00000000 00000000  {uid}        0 12345 1"


def test_parses_ipv4_ipv6_and_mapped_rows() -> None:
    v4 = "\n".join(
        [
            HEADER,
            _row(f"{_hex4('127.0.0.1')}:D431", f"{_hex4('127.0.0.1')}:1F90", 1000),
            "garbage line",
            _row("ZZZZ:0000", "0:0", 7),  # malformed: skipped
        ]
    )
    (row,) = parse_table(v4)
    assert (str(row.local[0]), row.local[1], str(row.remote[0]), row.remote[1], row.uid) == (
        "127.0.0.1", 0xD431, "127.0.0.1", 0x1F90, 1000
    )
    v6 = "\n".join(
        [
            HEADER,
            _row(f"{_hex6('::1')}:C000", f"{_hex6('::1')}:1F90", 0),
            _row(f"{_hex6('::ffff:127.0.0.1')}:C001", f"{_hex6('::ffff:127.0.0.1')}:1F90", 65534),
        ]
    )
    plain, mapped = parse_table(v6)
    assert str(plain.local[0]) == "::1" and plain.uid == 0
    assert str(mapped.local[0]) == "127.0.0.1" and mapped.uid == 65534  # read as IPv4


def test_finds_the_client_end_of_a_connection(tmp_path: Path) -> None:
    table = tmp_path / "tcp"
    table.write_text(
        "\n".join(
            [
                HEADER,
                # The server's own end (local = server) must not be taken for the client's.
                _row(f"{_hex4('127.0.0.1')}:1F90", f"{_hex4('127.0.0.1')}:D431", 0),
                _row(f"{_hex4('127.0.0.1')}:D431", f"{_hex4('127.0.0.1')}:1F90", 1000),
            ]
        )
    )
    assert table_uid(("127.0.0.1", 0xD431), ("127.0.0.1", 0x1F90), (table,)) == 1000
    assert table_uid(("127.0.0.1", 0xD432), ("127.0.0.1", 0x1F90), (table,)) is None
    assert table_uid(("::ffff:127.0.0.1", 0xD431), ("127.0.0.1", 0x1F90), (table,)) == 1000
    assert table_uid(("not an address", 1), ("127.0.0.1", 0x1F90), (table,)) is None
    assert table_uid(("127.0.0.1", 0xD431), ("127.0.0.1", 0x1F90), (tmp_path / "missing",)) is None


@pytest.mark.skipif(not kernel_can_tell(), reason="no /proc/net/tcp here")
@pytest.mark.parametrize("family,host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_a_real_loopback_connection_is_ours(family: int, host: str) -> None:
    try:
        server = socket.socket(family, socket.SOCK_STREAM)
        server.bind((host, 0))
    except OSError:
        pytest.skip(f"no {host} here")
    with server:
        server.listen(1)
        with socket.create_connection(server.getsockname()[:2]) as client:
            accepted, peer = server.accept()
            with accepted:
                # Both ways of asking: sock_diag netlink, and the /proc tables.
                assert peer_uid(peer[:2], accepted.getsockname()[:2]) == os.geteuid()
                assert table_uid(peer[:2], accepted.getsockname()[:2], TABLES) == os.geteuid()
                assert peer_uid((host, 1), accepted.getsockname()[:2]) is None  # no such socket


def test_the_fallback_token_is_private_and_read_for_loopback_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    token = home_token(home)
    assert home_token(home) == token  # kept, not regenerated
    assert stat.S_IMODE((home / sdk.TOKEN_FILE).stat().st_mode) == 0o600
    assert sdk.token_for("http://127.0.0.1:8765", home) == token
    assert sdk.token_for("http://[::1]:8765", home) == token
    assert sdk.token_for("http://localhost:8765", home) == token
    assert sdk.token_for("https://daemon.example.com", home) is None  # never sent away
    monkeypatch.setenv("QWENMEM_HOME", str(home))
    monkeypatch.delenv(sdk.TOKEN_ENV, raising=False)
    with sdk.DaemonClient("http://127.0.0.1:9") as client:
        assert client._http.headers["authorization"] == f"Bearer {token}"


def test_where_the_kernel_cannot_tell_a_token_is_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`qwenmem serve`'s choice: the uid check where /proc/net/tcp is readable, else a
    generated token in the home; --allow-other-users says so on stderr."""
    from qwenmem_tui.daemon import cli, peer
    from qwenmem_tui.paths import Paths

    paths = Paths(tmp_path / "home")
    monkeypatch.setattr(peer, "TABLES", (tmp_path / "no-such-table",))
    monkeypatch.setattr(peer, "_diag_available", lambda: False)  # not Linux: no way to ask
    token, uid, said = cli._privacy(None, False, paths)
    assert uid is None and token == (paths.home / sdk.TOKEN_FILE).read_text().strip()
    assert said == f"token required: {paths.home / sdk.TOKEN_FILE}"
    assert cli._privacy("given", False, paths) == ("given", None, "token required")
    assert cli._privacy(None, True, paths) == (None, None, "open to every local user")
    assert "every user of this machine" in capsys.readouterr().err
    monkeypatch.setattr(peer, "TABLES", (tmp_path / "tcp",))
    (tmp_path / "tcp").write_text(HEADER + "\n")  # the tables alone suffice
    assert cli._privacy(None, False, paths) == (None, os.geteuid(), f"private to uid {os.geteuid()}")
