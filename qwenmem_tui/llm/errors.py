"""Every way a request to an LLM endpoint can fail, as one short line a person can act on.

The SDK, httpx and the providers report failures in a dozen shapes (status errors,
wrapped socket errors, error events inside a 200 stream, HTML from a proxy). This module
is the one place that turns them into an `LLMError` whose message names the endpoint
and the model, never the API key, and never carries a traceback.
"""

from __future__ import annotations

import email.utils
import json
import re
import socket
import ssl
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import openai

from qwenmem_tui.text import one_line

class HttpAnswer(Protocol):
    """What is read of the SDK's HTTP response, named by what it offers: the SDK's
    HTTP layer has been httpx and httpx2, and may move again."""

    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def text(self) -> str: ...


KINDS = (
    "connection",
    "auth",
    "not_found",
    "rate_limit",
    "server",
    "timeout",
    "bad_response",
    "bad_request",
    "context_length",
    "crashed",  # the local model's server died (llm/local_client.py)
)

_CONTEXT_PATTERNS = re.compile(
    r"context[_ ]length|context window|maximum context|too many tokens|prompt is too long"
    r"|input is too long|reduce the length|exceeds? the (?:model'?s? )?(?:maximum|max)",
    re.IGNORECASE,
)
_MAX_DETAIL = 160


class LLMError(Exception):
    """A failed LLM request; `message` is the one line to show."""

    def __init__(self, kind: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after

    def __str__(self) -> str:
        return self.message


class StreamProblem(Exception):
    """Raised by the client for replies the SDK accepts but that are unusable (empty, cut off)."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind = kind
        self.text = text


def display_endpoint(base_url: str) -> str:
    """The URL without credentials or query string, safe to show and log."""
    try:
        parts = urlsplit(base_url)
    except ValueError:
        return "the configured endpoint"
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", "")) or base_url


def map_error(
    exc: BaseException,
    *,
    base_url: str,
    model: str,
    timeout: float | None = None,
    api_key: str | None = None,
) -> LLMError:
    """Classify `exc`; `api_key` is only used to scrub it from provider messages."""
    if isinstance(exc, LLMError):
        return exc
    where = f"({display_endpoint(base_url)}, model {model})"
    kind, text, retry_after = _classify(exc, timeout=timeout)
    message = one_line(f"{text} {where}")
    if api_key:
        message = message.replace(api_key, "[REDACTED]")
    return LLMError(kind, message, retry_after=retry_after)


def _classify(exc: BaseException, *, timeout: float | None) -> tuple[str, str, float | None]:
    # Imported here, not at the top: every command reaches LLMError through this module,
    # and the SDK alone costs ~0.4 s of `qwenmem --help`. A request has loaded it anyway.
    import openai

    if isinstance(exc, StreamProblem):
        return exc.kind, exc.text, None
    if isinstance(exc, (openai.APITimeoutError, TimeoutError)) or _is(exc, "TimeoutException"):
        after = f" within {timeout:g}s" if timeout else ""
        return "timeout", f"The endpoint did not answer{after}", None
    if isinstance(exc, openai.APIStatusError):
        return _classify_status(exc)
    if isinstance(exc, openai.APIConnectionError):
        return _classify_connection(exc)
    if isinstance(exc, openai.APIResponseValidationError):
        return "bad_response", "The endpoint sent a reply in an unexpected shape", None
    if isinstance(exc, openai.APIError):
        # An error event inside a 200 stream: the provider failed after it started.
        detail = _provider_detail(exc.body) or exc.message
        if _CONTEXT_PATTERNS.search(detail or ""):
            return "context_length", _context_text(detail), None
        return "server", f"The endpoint reported an error: {_clip(detail)}", None
    if isinstance(exc, OSError) or _is(exc, "TransportError"):
        return _classify_transport(exc)
    if isinstance(exc, ValueError):  # json.JSONDecodeError from a malformed SSE line
        return "bad_response", "The endpoint sent a malformed stream (not valid JSON)", None
    return "bad_response", f"Unexpected failure talking to the endpoint: {type(exc).__name__}", None


def _classify_status(exc: openai.APIStatusError) -> tuple[str, str, float | None]:
    status = exc.status_code
    detail = _provider_detail(exc.body) or _text_detail(exc.response)
    code = _provider_code(exc.body)
    if status in (401, 403):
        # Provider messages for bad keys often echo part of the key: never show them.
        verb = "rejected the API key" if status == 401 else "refused access"
        return (
            "auth",
            f"Authentication failed: the endpoint {verb} (HTTP {status}); "
            "check llm.api_key or QWENMEM_API_KEY",
            None,
        )
    if (
        code == "context_length_exceeded"
        or status == 413
        or (status in (400, 422) and _CONTEXT_PATTERNS.search(detail))
    ):
        return "context_length", _context_text(detail), None
    if status == 404:
        if code == "model_not_found" or "model" in detail.lower():
            return "not_found", "Model not found at the endpoint (HTTP 404)", None
        return (
            "not_found",
            "Endpoint not found (HTTP 404); check llm.base_url (it usually ends in /v1)",
            None,
        )
    if status == 429:
        retry_after = _retry_after(exc.response)
        wait = f"; retry in {retry_after:.0f}s" if retry_after is not None else ""
        extra = f": {_clip(detail)}" if detail else ""
        return "rate_limit", f"Rate limited (HTTP 429){extra}{wait}", retry_after
    if status >= 500:
        extra = f": {_clip(detail)}" if detail else ""
        return "server", f"The endpoint failed with HTTP {status}{extra}", None
    extra = f": {_clip(detail)}" if detail else ""
    return "bad_request", f"The endpoint rejected the request (HTTP {status}){extra}", None


def _classify_connection(exc: openai.APIConnectionError) -> tuple[str, str, float | None]:
    for cause in _causes(exc):
        if isinstance(cause, TimeoutError) or _is(cause, "TimeoutException"):
            return "timeout", "The endpoint did not answer in time", None
        if isinstance(cause, OSError) or _is(cause, "TransportError"):
            return _classify_transport(cause)
    return "connection", "Cannot connect to the endpoint", None


def _classify_transport(exc: BaseException) -> tuple[str, str, float | None]:
    chain = list(_causes(exc))
    text = " ".join(str(e) for e in chain).lower()
    if any(isinstance(e, socket.gaierror) for e in chain) or any(
        marker in text
        for marker in (
            "name or service not known",
            "nodename nor servname",
            "getaddrinfo",
            "name resolution",
            "no address associated",
        )
    ):
        return "connection", "Cannot resolve the endpoint's host name (DNS)", None
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "connection refused" in text:
        return "connection", "Connection refused; is the server running?", None
    if "incomplete chunked read" in text or "without sending complete message body" in text:
        return "bad_response", "The reply was cut off mid-stream (connection dropped)", None
    if any(isinstance(e, ssl.SSLError) for e in chain) or "certificate" in text:
        return "connection", "TLS handshake with the endpoint failed", None
    if (
        isinstance(exc, ConnectionResetError)
        or _is(exc, "RemoteProtocolError")
        or "disconnected" in text
    ):
        return "connection", "The endpoint closed the connection unexpectedly", None
    return "connection", "Cannot connect to the endpoint", None


def _is(exc: BaseException, *names: str) -> bool:
    """Class check by name: the SDK's HTTP layer has been httpx and httpx2, and may move again."""
    return any(cls.__name__ in names for cls in type(exc).__mro__)


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _provider_detail(body: object) -> str:
    """The provider's own error message from the many body shapes in the wild."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            for key in ("message", "msg", "detail"):
                message = error.get(key)
                if isinstance(message, str):
                    return message
        if isinstance(error, str):
            return error
        for key in ("message", "detail"):
            message = body.get(key)
            if isinstance(message, str):
                return message
    if isinstance(body, str) and not body.lstrip().startswith("<"):
        return body
    return ""


def _provider_code(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            code = error.get("code") or error.get("type")
            return str(code) if code else ""
    return ""


def _text_detail(response: HttpAnswer) -> str:
    """For non-JSON error bodies: say so instead of pasting a proxy's HTML page."""
    content_type = response.headers.get("content-type", "")
    if "html" in content_type:
        return "non-JSON (HTML) body"
    try:
        text = response.text
    except Exception:  # a streamed body that was never read: no detail, not a crash
        return ""
    try:
        return _provider_detail(json.loads(text))
    except ValueError:
        return text if text and not text.lstrip().startswith("<") else ""


def _retry_after(response: HttpAnswer) -> float | None:
    headers = response.headers
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    seconds: float = parsed.timestamp() - time.time()
    return max(0.0, seconds)


def _context_text(detail: str) -> str:
    extra = f": {_clip(detail)}" if detail else ""
    return f"The conversation is longer than the model's context window{extra}"


def _clip(text: object) -> str:
    line = one_line(str(text))
    return line if len(line) <= _MAX_DETAIL else line[: _MAX_DETAIL - 3] + "..."
