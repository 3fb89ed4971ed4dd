"""Python SDK for the qwenmem daemon (contract §7).

Synchronous on purpose: the callers are scripts and editor plugins that want one call,
one answer. Every request has a timeout (30 s unless told otherwise), so a stalled
daemon surfaces as :class:`DaemonError` with code ``timeout`` instead of a hang.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import httpx

DEFAULT_TIMEOUT = 30.0
TOKEN_ENV = "QWENMEM_SERVER_TOKEN"
TOKEN_FILE = "daemon.token"
"""In the home: the token `qwenmem serve` generates where the kernel cannot say who a
loopback client is (`daemon/peer.py`)."""


class DaemonError(Exception):
    """A non-2xx answer (``status`` set) or a transport failure (``status`` is None).

    ``code`` is the envelope's machine-readable code (``session_not_found``,
    ``unauthorized``, ...) or ``timeout`` / ``connection`` for transport failures.
    """

    def __init__(
        self, status: int | None, code: str, message: str, body: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{message} ({code}{'' if status is None else f', HTTP {status}'})")
        self.status = status
        self.code = code
        self.message = message
        self.body = body or {}


@dataclass(frozen=True)
class Capabilities:
    v: int
    features: tuple[str, ...]


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    title: str
    created_at: float
    updated_at: float
    message_count: int


@dataclass(frozen=True)
class PromptResult:
    session_id: str
    reply: str
    status: str
    memories: tuple[dict[str, Any], ...] = ()
    """The memories the reply used: ``{"id", "key", "value"}`` each (its receipt)."""


@dataclass(frozen=True)
class SessionRecap:
    session_id: str
    recap: str | None


@dataclass(frozen=True)
class StreamEvent:
    """One SSE event of a streamed prompt: delta, tool_call, tool_result, done or error."""

    event: str
    data: dict[str, Any]


def _default_token(base_url: str) -> str | None:
    """Without a token given: ``QWENMEM_SERVER_TOKEN``, else — for a daemon on this
    machine — the one ``qwenmem serve`` generated into the home where the kernel cannot
    say who a client is (`daemon/peer.py`)."""
    from qwenmem_tui.paths import Paths

    return os.environ.get(TOKEN_ENV) or token_for(base_url, Paths.from_env().home)


def token_for(base_url: str, home: Path) -> str | None:
    """The token a client of a loopback daemon sends when given none: the one the
    daemon generated in ``home`` (never sent to another host)."""
    host = urlparse(base_url).hostname or ""
    if host != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:
            return None
    try:
        return (home / TOKEN_FILE).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeError):
        return None



class DaemonClient:
    """Talks to one daemon; use as a context manager or call :meth:`close`."""

    def __init__(
        self, base_url: str, token: str | None = None, timeout: float | None = DEFAULT_TIMEOUT
    ) -> None:
        token = token or _default_token(base_url)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.timeout)

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def health(self) -> bool:
        return self._request("GET", "/health").get("status") == "ok"

    def capabilities(self) -> Capabilities:
        body = self._request("GET", "/capabilities")
        return Capabilities(v=int(body["v"]), features=tuple(body["features"]))

    def create_session(self, title: str | None = None, *, client_id: str | None = None) -> str:
        """Creates a session in the daemon's project and returns its id."""
        payload = {"title": title} if title is not None else {}
        body = self._request("POST", "/session", json=payload, client_id=client_id)
        return str(body["sessionId"])

    def list_sessions(self) -> list[SessionSummary]:
        body = self._request("GET", "/sessions")
        return [
            SessionSummary(
                session_id=s["sessionId"],
                title=s.get("title", ""),
                created_at=float(s.get("createdAt", 0.0)),
                updated_at=float(s.get("updatedAt", 0.0)),
                message_count=int(s.get("messageCount", 0)),
            )
            for s in body["sessions"]
        ]

    def prompt(self, session_id: str, text: str, *, client_id: str | None = None) -> PromptResult:
        """Runs one query (tools included) and returns the final reply.

        A long tool-using turn can outlast the client's default timeout; pass a larger
        ``timeout`` to the client for those.
        """
        body = self._request(
            "POST", f"{_session_path(session_id)}/prompt", json={"text": text}, client_id=client_id
        )
        return PromptResult(
            session_id=body["sessionId"],
            reply=body["reply"],
            status=body.get("status", "ok"),
            memories=tuple(body.get("memories") or ()),
        )

    def stream_prompt(
        self, session_id: str, text: str, *, client_id: str | None = None
    ) -> Iterator[StreamEvent]:
        """Like :meth:`prompt`, yielding events as they arrive; ends after done/error."""
        headers = _headers(client_id) | {"Accept": "text/event-stream"}
        try:
            with self._http.stream(
                "POST", f"{_session_path(session_id)}/prompt", json={"text": text}, headers=headers
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _error_from(response)
                yield from _parse_sse(response.iter_lines())
        except httpx.TimeoutException as exc:
            raise DaemonError(None, "timeout", f"daemon did not answer in time: {exc}") from exc
        except httpx.TransportError as exc:
            raise DaemonError(None, "connection", f"cannot reach the daemon: {exc}") from exc

    def recap_session(self, session_id: str, client_id: str | None = None) -> SessionRecap:
        """The session's 'where was I' recap; ``recap`` is None when there is nothing to say."""
        body = self._request("POST", f"{_session_path(session_id)}/recap", client_id=client_id)
        return SessionRecap(session_id=body["sessionId"], recap=body["recap"])

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        """The session's stored chat messages in order (OpenAI dicts plus ``createdAt``)."""
        return list(self._request("GET", f"{_session_path(session_id)}/messages")["messages"])

    def delete_session(self, session_id: str, *, client_id: str | None = None) -> str:
        """Deletes the session; returns where its JSON copy was kept for recovery."""
        body = self._request("DELETE", _session_path(session_id), client_id=client_id)
        return str(body.get("copy", ""))

    def list_memories(self, category: str | None = None) -> list[dict[str, Any]]:
        """Active memories of the daemon's project and the user's global ones, newest first."""
        path = "/memory" if category is None else f"/memory?category={quote(category, safe='')}"
        return list(self._request("GET", path)["memories"])

    def search_memory(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        """The chat's recall for ``query``, best first, each with its ``score``."""
        return list(self._request("POST", "/memory/search", json={"query": query, "k": k})["memories"])

    def forget_memory(self, memory_id: int, *, client_id: str | None = None) -> bool:
        """Deletes one memory (audited); False when there is no such memory here."""
        try:
            self._request("DELETE", f"/memory/{int(memory_id)}", client_id=client_id)
        except DaemonError as exc:
            if exc.code == "memory_not_found":
                return False
            raise
        return True

    def session(self, session_id: str, client_id: str | None = None) -> DaemonSessionClient:
        return DaemonSessionClient(self, session_id, client_id)

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        client_id: str | None = None,
    ) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, json=json, headers=_headers(client_id))
        except httpx.TimeoutException as exc:
            raise DaemonError(None, "timeout", f"daemon did not answer in time: {exc}") from exc
        except httpx.TransportError as exc:
            raise DaemonError(None, "connection", f"cannot reach the daemon: {exc}") from exc
        if response.status_code >= 400:
            raise _error_from(response)
        try:
            body = response.json()
        except ValueError as exc:
            raise DaemonError(
                response.status_code, "bad_response", "daemon answered with invalid JSON"
            ) from exc
        if not isinstance(body, dict):
            raise DaemonError(response.status_code, "bad_response", "daemon answered a non-object")
        return body


class DaemonSessionClient:
    """One session seen through a :class:`DaemonClient`, with a fixed client id."""

    def __init__(self, client: DaemonClient, session_id: str, client_id: str | None = None) -> None:
        self.client = client
        self.session_id = session_id
        self.client_id = client_id

    def prompt(self, text: str) -> PromptResult:
        return self.client.prompt(self.session_id, text, client_id=self.client_id)

    def stream_prompt(self, text: str) -> Iterator[StreamEvent]:
        return self.client.stream_prompt(self.session_id, text, client_id=self.client_id)

    def recap(self) -> SessionRecap:
        return self.client.recap_session(self.session_id, client_id=self.client_id)

    def messages(self) -> list[dict[str, Any]]:
        return self.client.messages(self.session_id)

    def delete(self) -> str:
        return self.client.delete_session(self.session_id, client_id=self.client_id)


def _session_path(session_id: str) -> str:
    # safe="" so "/" in an id is encoded and cannot address another route.
    return f"/session/{quote(session_id, safe='')}"


def _headers(client_id: str | None) -> dict[str, str]:
    return {"X-Qwenmem-Client-Id": client_id} if client_id is not None else {}


def _error_from(response: httpx.Response) -> DaemonError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        code = str(body.get("code", "error"))
        return DaemonError(response.status_code, code, body["error"], body)
    return DaemonError(
        response.status_code, "http_error", response.text[:200] or response.reason_phrase
    )


def _parse_sse(lines: Iterator[str]) -> Iterator[StreamEvent]:
    event = "message"
    data: list[str] = []
    for line in lines:
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line and data:
            yield StreamEvent(event, json.loads("\n".join(data)))
            event, data = "message", []
