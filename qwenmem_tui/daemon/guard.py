"""The daemon's security guard: one ASGI layer in front of every route (contract §7).

It lives apart from the routes so that no handler can forget it and so the rules read
in one place: Host (DNS rebinding), Origin, bearer token, client-id header, the body
limit, and a catch-all that turns any exception into the ``internal`` envelope while
the traceback goes to the debug log only.
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("qwenmem.daemon")

CLIENT_ID_HEADER = "x-qwenmem-client-id"
CLIENT_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MAX_BODY_BYTES = 1 << 20
# A proxied chat request carries the client's whole history (coding agents send
# hundreds of kilobytes); the daemon's own routes take a prompt.
MAX_PROXY_BODY_BYTES = 32 << 20
PROXY_PREFIX = "/v1/"
# Names that can only mean this machine: a page on another site can make its own name
# resolve to 127.0.0.1 (DNS rebinding), but its requests then carry its own name.
LOCALHOST_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def error_response(status: int, code: str, message: str, **extra: object) -> JSONResponse:
    """The §7 error envelope ``{"error", "code", ...}``."""
    return JSONResponse({"error": message, "code": code, **extra}, status_code=status)


def rejection(scope: Scope, status: int, code: str, message: str) -> JSONResponse:
    """The guard's refusal in the envelope the route's clients read: OpenAI's shape
    (``{"error": {"message", "type", "code"}}``) on the proxy, §7's elsewhere."""
    if str(scope.get("path", "")).startswith(PROXY_PREFIX):
        kind = "authentication_error" if status == 401 else "invalid_request_error"
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return JSONResponse(body, status_code=status)
    return error_response(status, code, message)


def host_name(host_header: str) -> str:
    """The name part of a Host header, lower-cased: no port, no IPv6 brackets, no
    trailing dot (``localhost.`` is ``localhost``)."""
    value = host_header.strip().lower()
    if value.startswith("["):
        name = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        name, _, port = value.partition(":")
        if not port.isdigit():
            name = value  # "host:junk" matches nothing
    else:
        name = value  # no port, or a bare IPv6 address (as servers report their own)
    return name.rstrip(".")


def allowed_host_names(extra: Iterable[str] = ()) -> frozenset[str]:
    """The localhost names plus what ``--allow-host`` adds (normalised like a header)."""
    return LOCALHOST_NAMES | {host_name(host) for host in extra if host.strip()}


@dataclass(frozen=True)
class GuardPolicy:
    """What the guard enforces; defaults are the safe ones."""

    token: str | None = None
    allowed_origins: frozenset[str] = frozenset()
    allowed_hosts: frozenset[str] = LOCALHOST_NAMES
    max_body_bytes: int = MAX_BODY_BYTES
    max_proxy_body_bytes: int = MAX_PROXY_BODY_BYTES


class _BodyTooLarge(Exception):
    pass


class Guard:
    """Host, Origin, token, client id, body limit and the catch-all, in that order.

    Runs before routing so an unknown route still needs a token (no probing) and a
    bad client id never reaches a handler, let alone the model.
    """

    def __init__(self, app: ASGIApp, *, policy: GuardPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        # A refused origin gets its 403 without CORS headers: the browser then keeps
        # even the error away from that page.
        cors_origin = origin if origin in self.policy.allowed_origins else None
        started = False

        async def send_with_cors(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if cors_origin is not None:
                    cors = [
                        (b"access-control-allow-origin", cors_origin.encode("latin-1")),
                        (b"vary", b"Origin"),
                    ]
                    message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        try:
            refusal = self._check(scope, headers, origin)
            if refusal is not None:
                await refusal(scope, receive, send_with_cors)
                return
            await self.app(scope, self._limited(scope, receive), send_with_cors)
        except _BodyTooLarge:
            if not started:
                await self._too_large(scope)(scope, receive, send_with_cors)
        except ClientDisconnect:
            log.info("[DAEMON] client went away during %s %s", scope["method"], scope["path"])
        except Exception:
            log.exception("[DAEMON] unhandled error on %s %s", scope["method"], scope["path"])
            if not started:
                internal = rejection(scope, 500, "internal", "Internal error")
                await internal(scope, receive, send_with_cors)

    def _check(self, scope: Scope, headers: Headers, origin: str | None) -> Response | None:
        host = headers.get("host")
        if host is not None and not self._host_allowed(scope, host):
            # The name is not echoed: it is whatever a hostile page chose.
            return rejection(
                scope,
                403,
                "host_not_allowed",
                "Host header is not this daemon's address or a localhost name "
                "(qwenmem serve --allow-host NAME adds one)",
            )
        if origin is not None and origin not in self.policy.allowed_origins:
            return rejection(scope, 403, "origin_not_allowed", f'Origin "{origin}" is not allowed')
        if scope["method"] == "OPTIONS" and origin is not None:
            return _preflight()
        if self.policy.token is not None and scope["path"] != "/health":
            if not _token_matches(headers.get("authorization"), self.policy.token):
                return rejection(scope, 401, "unauthorized", "Missing or invalid bearer token")
        client_id = headers.get(CLIENT_ID_HEADER)
        if client_id is not None and not CLIENT_ID_PATTERN.fullmatch(client_id):
            return rejection(
                scope,
                400,
                "invalid_client_id",
                "X-Qwenmem-Client-Id must match [A-Za-z0-9._:-]{1,128}",
            )
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self._body_limit(scope):
            return self._too_large(scope)
        return None

    def _body_limit(self, scope: Scope) -> int:
        if str(scope.get("path", "")).startswith(PROXY_PREFIX):
            return self.policy.max_proxy_body_bytes
        return self.policy.max_body_bytes

    def _host_allowed(self, scope: Scope, host: str) -> bool:
        name = host_name(host)
        if name in self.policy.allowed_hosts:
            return True
        # The address the client actually connected to (the bound one, or on a
        # wildcard bind the interface's), as the server reports it.
        server = scope.get("server")
        return server is not None and name == host_name(str(server[0]))

    def _too_large(self, scope: Scope) -> Response:
        return rejection(
            scope, 413, "body_too_large", f"Request body exceeds {self._body_limit(scope)} bytes"
        )

    def _limited(self, scope: Scope, receive: Receive) -> Receive:
        seen = 0
        limit = self._body_limit(scope)

        async def receive_limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _BodyTooLarge
            return message

        return receive_limited


def _token_matches(authorization: str | None, token: str) -> bool:
    scheme, _, presented = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.encode())


def _preflight() -> Response:
    return Response(
        status_code=204,
        headers={
            "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
            "Access-Control-Allow-Headers": (
                "Authorization, Content-Type, Accept, X-Qwenmem-Client-Id, X-Qwenmem-Project"
            ),
            "Access-Control-Max-Age": "600",
            "Access-Control-Expose-Headers": "X-Qwenmem-Memories",
        },
    )
