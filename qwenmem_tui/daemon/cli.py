"""``qwenmem serve``: argument parsing and startup checks for the HTTP daemon."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from qwenmem_tui.paths import Paths, project_root
from qwenmem_tui.text import one_line

if TYPE_CHECKING:  # `register` runs for every `qwenmem` command: nothing heavy up here
    from types import FrameType

    import uvicorn
    from starlette.applications import Starlette

    from qwenmem_tui.config import Settings
    from qwenmem_tui.daemon.server import DaemonBackend

log = logging.getLogger("qwenmem.daemon")

TOKEN_ENV = "QWENMEM_SERVER_TOKEN"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the HTTP daemon and OpenAI-compatible proxy (see docs/daemon.md)",
        description="Serve qwenmem sessions of this project over HTTP (contract §7), and "
        "an OpenAI-compatible proxy at /v1 that adds what this project's features recall (§9).",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="bind address (default %(default)s)")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="port, 0 for any free one (default %(default)s)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help=f"require 'Authorization: Bearer TOKEN' (prefer the {TOKEN_ENV} env var: "
        "command lines are visible to other users)",
    )
    parser.add_argument(
        "--allow-other-users",
        action="store_true",
        help="without a token, serve every local user too (default: only the user running "
        "it; other users get 403). For a machine where every account is yours",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="accept browser requests from ORIGIN (repeatable); others get 403",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="accept requests whose Host header is NAME (repeatable); besides the bound "
        "address and localhost names, others get 403 (DNS rebinding)",
    )
    parser.add_argument(
        "--project",
        type=Path,
        default=None,
        metavar="DIR",
        help="project directory whose sessions are served (default: git root of the cwd)",
    )
    parser.add_argument(
        "--proxy-extract",
        action="store_true",
        help="learn memories from replies the OpenAI-compatible proxy (/v1) relays "
        "(default: off; recall works either way)",
    )
    parser.set_defaults(func=serve)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a hostname could resolve anywhere: treat it as public


def resolve_token(flag: str | None, env: Mapping[str, str] = os.environ) -> str | None:
    return flag or env.get(TOKEN_ENV) or None


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket with ``TCP_NODELAY``, bound before uvicorn starts, so a
    busy port is a one-line error (not a traceback) and ``--port 0`` can print its port.

    ``IPPROTO_TCP`` (not 0) matters: asyncio sets ``TCP_NODELAY`` on an accepted socket
    only when its protocol says TCP, and accepted sockets inherit the listener's.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    """Refuses unsafe or impossible starts with one line and exit 2 (1 for a busy port),
    then serves until SIGINT/SIGTERM."""
    from qwenmem_tui.chat.tools import broad_root_notice
    from qwenmem_tui.llm.local_server import (
        LocalModelError,
        LocalModelServer,
        progress_printer,
    )
    from qwenmem_tui.llm.provider import resolve_provider
    from qwenmem_tui.runtime import local_model_starter

    token = resolve_token(args.token)
    if not is_loopback(args.host) and token is None:
        print(
            f"qwenmem serve: refusing to bind {args.host} without a token "
            f"(pass --token or set {TOKEN_ENV}, or bind 127.0.0.1)",
            file=sys.stderr,
        )
        return 2
    try:
        import uvicorn  # noqa: F401 - checked here, used by run_server

        from qwenmem_tui.daemon.server import ServerOptions, create_app
    except ImportError as exc:
        print(
            f"qwenmem serve: the daemon needs the server extra ({exc.name} is missing): "
            "pip install 'qwenmem[server]'",
            file=sys.stderr,
        )
        return 2
    root = project_root((args.project or Path.cwd()).resolve())
    if (notice := broad_root_notice(root, Path.cwd())) is not None:
        print(f"qwenmem serve: {notice}", file=sys.stderr)
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as exc:
        print(
            f"qwenmem serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    from qwenmem_tui import debuglog

    token, owner_uid, privacy = _privacy(token, args.allow_other_users, paths)
    secrets = [s for s in (token, settings.api_key_value()) if s]
    debuglog.configure(paths, "daemon", secrets=secrets)
    with ExitStack() as stack:
        starter = None
        defaults = None
        if resolve_provider(settings, os.environ) == "local":
            try:
                local = LocalModelServer.from_settings(settings, paths)
                stack.callback(local.stop)
                local.start(progress_printer(local.label))
                sys.stderr.write("\r\033[K")
            except LocalModelError as exc:
                print(f"qwenmem serve: {exc}", file=sys.stderr)
                return 1
            defaults = local.chat_defaults()
            defaults.apply_to(settings)
            starter = local_model_starter(local, settings)  # started: the runtime's client
        options = ServerOptions(
            token=token,
            owner_uid=owner_uid,
            allowed_origins=frozenset(args.allow_origin),
            allowed_hosts=frozenset(args.allow_host),
            proxy_extract=args.proxy_extract,
        )
        app = create_app(
            settings, paths, project_root=root, options=options, start_model=starter,
            model_defaults=defaults,
        )
        host, port = sock.getsockname()[:2]
        shown_host = f"[{host}]" if ":" in host else host
        listening = (
            f"qwenmem serve: listening on http://{shown_host}:{port} (project {root}, {privacy})"
        )
        return run_server(app, sock, listening)


def _privacy(
    token: str | None, allow_other_users: bool, paths: Paths
) -> tuple[str | None, int | None, str]:
    """Who may use the daemon: the token's holders; else the user running it — checked
    by the kernel where it can tell (`daemon/peer.py`), else by a token generated into
    the home; else, told so, everyone on this machine. (token, owner uid, how it reads)."""
    from qwenmem_tui.daemon import peer

    if token is not None:
        return token, None, "token required"
    if allow_other_users:
        print(
            "qwenmem serve: --allow-other-users: every user of this machine can use this "
            "daemon (its sessions, memories and model key)",
            file=sys.stderr,
        )
        return None, None, "open to every local user"
    if peer.kernel_can_tell():
        uid = os.geteuid()
        return None, uid, f"private to uid {uid}"
    generated = peer.home_token(paths.home)
    return generated, None, f"token required: {paths.home / peer.TOKEN_FILE}"


def _uvicorn_server_class() -> type[uvicorn.Server]:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, remembering the first signal that stopped it."""

        stopped_by: int | None = None

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.stopped_by is None:
                self.stopped_by = int(sig)
            super().handle_exit(sig, frame)

    return Server


def run_server(app: Starlette, sock: socket.socket, listening: str) -> int:
    """Open the app's backend, then say ``listening`` and serve; 1 if either fails.

    The backend opens before the line is printed (not in the ASGI lifespan): a start
    that fails (a damaged database, a full disk) is one line on stderr naming the file
    and a non-zero exit, never "listening" followed by a server that cannot answer.
    """
    from qwenmem_tui.daemon.connections import uvicorn_config

    server = _uvicorn_server_class()(uvicorn_config(app))
    with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
        return runner.run(_open_and_serve(app.state.backend, server, sock, listening))


async def _open_and_serve(
    backend: DaemonBackend, server: uvicorn.Server, sock: socket.socket, listening: str
) -> int:
    from qwenmem_tui import debuglog
    from qwenmem_tui.runtime import StartupError
    from qwenmem_tui.storage.database import StorageError

    try:
        try:
            await backend.start()
        except (StartupError, StorageError) as exc:  # a feature's state too (Feature.ready)
            print(f"qwenmem serve: cannot start: {one_line(str(exc))}", file=sys.stderr)
            return 1
        except OSError as exc:  # e.g. the home's directories on a full disk
            where = f"{exc.filename}: " if exc.filename else ""
            print(f"qwenmem serve: cannot start: {where}{exc.strerror or exc}", file=sys.stderr)
            return 1
        except Exception as exc:  # noqa: BLE001 - one line, the traceback to the log
            log.error("[DAEMON] start failed", exc_info=exc)
            log_path = debuglog.current_path()
            details = f" (details in {log_path})" if log_path else ""
            print(
                f"qwenmem serve: cannot start: {one_line(f'{type(exc).__name__}: {exc}')}"
                f"{details}",
                file=sys.stderr,
            )
            return 1
        print(listening, flush=True)
        await server.serve(sockets=[sock])
    finally:
        await backend.close()  # done already by the lifespan's shutdown, unless it failed
    stopped_by: int | None = getattr(server, "stopped_by", None)
    if stopped_by is not None:
        # The shell's convention for a stop by signal (130 for Ctrl+C). uvicorn raises
        # the signal again after its graceful stop, but a parent that ignores SIGINT
        # (a test runner's worker, `nohup`) hands that disposition down, and then the
        # re-raise does nothing and the process looked like a clean exit.
        return 128 + stopped_by
    # uvicorn gave up on its own (it logged why): not a clean stop.
    return 0 if server.started else 1
