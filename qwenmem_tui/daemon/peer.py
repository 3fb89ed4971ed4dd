"""A token-less daemon is private to the OS user who runs it (contract §7).

Loopback is shared by every user of the machine, so "bound to 127.0.0.1" keeps out
other machines but not another account on this one. On Linux the kernel says who owns
each TCP socket: sock_diag netlink answers for one socket named by its addresses, and
``/proc/net/tcp`` and ``/proc/net/tcp6`` list every socket with its local and remote
address and its owner's uid. The client's socket of a loopback connection is the one
whose local end is the connection's remote end and whose remote end is ours; its uid
must be ours. Every route but ``/health`` is refused (403)
otherwise, and when the row cannot be found (fail closed).

Where the kernel cannot be asked (no ``/proc/net/tcp``: macOS, a sandbox), the daemon
requires a token instead, generated once into ``$QWENMEM_HOME/daemon.token`` (0600):
only the user who can read that file can use the daemon. The SDK reads it for a
loopback URL (`client.token_for`). ``--allow-other-users`` turns both off, said at start.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import socket
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from qwenmem_tui.daemon.client import TOKEN_FILE as TOKEN_FILE  # re-exported: daemon/cli names it here
from qwenmem_tui.daemon.guard import rejection
from qwenmem_tui.paths import private_file

log = logging.getLogger("qwenmem.daemon")

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
OPEN_PATHS = frozenset({"/health"})

Address = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


@dataclass(frozen=True)
class SocketRow:
    """One socket of a ``/proc/net/tcp*`` table."""

    local: Address
    remote: Address
    uid: int


def _address(field: str) -> Address:
    """``0100007F:1F90`` (the kernel's words in host byte order, the port in hex) as an
    address and a port; IPv4-mapped IPv6 addresses as their IPv4 address."""
    host, _, port = field.partition(":")
    raw = b"".join(
        int(host[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(host), 8)
    )
    return _unmapped(ipaddress.ip_address(raw)), int(port, 16)


def _unmapped(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """A dual-stack socket's ``::ffff:127.0.0.1`` as the IPv4 address it is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_table(text: str) -> Iterator[SocketRow]:
    """The rows of one ``/proc/net/tcp`` or ``tcp6`` text; malformed lines skipped."""
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            yield SocketRow(_address(fields[1]), _address(fields[2]), int(fields[7]))
        except ValueError:
            continue


def _normal(host: str, port: int) -> Address | None:
    try:
        return _unmapped(ipaddress.ip_address(host.split("%", 1)[0])), port
    except ValueError:
        return None


def peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client's end of the TCP connection client -> server, None
    when the kernel does not show it (not on this machine, or it cannot be asked).

    Asked by the connection's exact addresses over sock_diag netlink (what `ss` uses:
    ~0.2 ms); where that is not available, from the socket tables (reading
    /proc/net/tcp walks every socket: ~60 ms on a loaded machine)."""
    ours, theirs = _normal(*server), _normal(*client)
    if ours is None or theirs is None:
        return None
    try:
        return _diag_uid(theirs, ours)
    except OSError:
        return table_uid(client, server, TABLES)


_SOCK_DIAG = 4  # NETLINK_SOCK_DIAG
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_NO_COOKIE = 0xFFFFFFFF
_UID_AT = 16 + 64  # after the netlink header: family..retrans (4), sockid (48), 3 u32s


def _diag_uid(client: Address, server: Address) -> int | None:
    """The owner of the TCP socket client -> server, looked up by its exact addresses
    (an IPv4 pair is tried as IPv4, then as IPv4-mapped IPv6: a dual-stack client).
    OSError when netlink's sock_diag cannot be used here."""
    candidates: list[tuple[int, bytes, bytes]] = []
    for af, convert in ((socket.AF_INET, _packed4), (socket.AF_INET6, _packed6)):
        src, dst = convert(client[0]), convert(server[0])
        if src is not None and dst is not None:
            candidates.append((int(af), src, dst))
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _SOCK_DIAG) as link:
        link.settimeout(2)
        for family, src, dst in candidates:
            sockid = struct.pack("!HH16s16s", client[1], server[1], src, dst)
            request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
            request += sockid + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
            link.sendto(struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, 1, 1, 0) + request, (0, 0))
            answer = link.recv(65536)
            kind = struct.unpack_from("=H", answer, 4)[0]
            if kind != _NLMSG_ERROR and len(answer) >= _UID_AT + 4:
                return int(struct.unpack_from("=I", answer, _UID_AT)[0])
    return None


def _packed4(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes | None:
    return address.packed.ljust(16, b"\0") if address.version == 4 else None


def _packed6(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes | None:
    if address.version == 4:
        return ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + address.packed).packed
    return address.packed


def table_uid(client: tuple[str, int], server: tuple[str, int], tables: tuple[Path, ...]) -> int | None:
    """`peer_uid` read from /proc/net/tcp-style ``tables``."""
    ours, theirs = _normal(*server), _normal(*client)
    if ours is None or theirs is None:
        return None
    for table in tables:
        try:
            text = table.read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        for row in parse_table(text):
            if row.local == theirs and row.remote == ours:
                return row.uid
    return None


def kernel_can_tell() -> bool:
    """Whether the kernel can say who owns a socket here: sock_diag netlink, or the
    /proc/net/tcp tables (Linux)."""
    return _diag_available() or any(os.access(table, os.R_OK) for table in TABLES)


def _diag_available() -> bool:
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _SOCK_DIAG).close()
    except (OSError, AttributeError):  # AttributeError: no AF_NETLINK (not Linux)
        return False
    return True


class OwnerOnly:
    """ASGI layer: only connections from sockets of ``uid`` reach the app (``/health``
    is open to all, as with a token)."""

    def __init__(self, app: ASGIApp, *, uid: int) -> None:
        self.app = app
        self.uid = uid

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        client, server = scope.get("client"), scope.get("server")
        uid = peer_uid(tuple(client), tuple(server)) if client and server else None
        if uid == self.uid:
            await self.app(scope, receive, send)
            return
        log.warning("[DAEMON] refused %s %s: peer uid %s is not %s", scope["method"], scope["path"], uid, self.uid)
        refusal = rejection(
            scope,
            403,
            "forbidden_user",
            "This daemon is private to the user who started it (qwenmem serve --token T "
            "shares it with whoever has the token)",
        )
        await refusal(scope, receive, send)


# -- the token fallback ----------------------------------------------------------------


def home_token(home: Path) -> str:
    """The daemon token kept in ``home`` (created on first use, mode 0600)."""
    path = home / TOKEN_FILE
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = ""
    if token:
        return token
    home.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    private_file(path)
    return token


def owner_only(uid: int | None) -> list[Middleware]:
    """The app's layer keeping it to ``uid``'s connections (none: no such check)."""
    return [] if uid is None else [Middleware(OwnerOnly, uid=uid)]
