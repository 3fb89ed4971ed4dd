"""The bundled model's chat client: a crash of its server is named as a crash.

All the HTTP client sees of a local server that died is a connection dropped or
refused, which the chat showed as a network problem ("The reply was cut off
mid-stream (connection dropped)") when llama.cpp had in fact been killed by an
illegal instruction. This client asks the process: a failed request whose server is
gone becomes "the local model crashed (SIGILL: … built for another CPU) — log: …",
and the server is started again for the next message, once: a server that dies
again before it has answered anything stays down, and the message says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx

from qwenmem_tui.llm.client import LLMClient, LLMEvent, StreamFinished, Usage
from qwenmem_tui.llm.errors import LLMError
from qwenmem_tui.llm.local_server import (
    LOCAL_MAX_TOKENS,
    LOCAL_TEMPERATURE,
    LocalModelServer,
)
from qwenmem_tui.llm.wire import Message

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings

log = logging.getLogger("qwenmem.llm")

EXIT_WAIT_SECONDS = 2.0
"""How long a failed request waits for the server's exit status: the socket closes
while the dying process is still being torn down."""
COUNT_TIMEOUT_SECONDS = 5.0
_CRASH_KINDS = frozenset({"connection", "bad_response", "timeout", "server"})


class LocalModelClient(LLMClient):
    """An `LLMClient` for a `LocalModelServer` child, which it restarts after a crash."""

    def __init__(self, server: LocalModelServer, **options: Any) -> None:
        super().__init__(base_url=server.base_url, **options)
        self.server = server
        self._may_restart = True  # until a restarted server dies before it answered
        self._crashed: str | None = None  # the last crash, while the server is down
        self._restart = asyncio.Lock()
        self._counter: httpx.AsyncClient | None = None  # for `_counted`

    @classmethod
    def for_server(cls, server: LocalModelServer, settings: Settings) -> LocalModelClient:
        """The chat client for `server`, capped at LOCAL_MAX_TOKENS unless the config
        sets `llm.max_tokens` itself. Any model name reaches the one loaded model, so
        side queries on `fast_model` work too. (Here, not on the server: the server's
        module is the child process's shim and knows no client.)"""
        temperature = settings.llm.temperature
        return cls(
            server,
            api_key=server.api_key,
            model=server.model,
            timeout=settings.llm.timeout,
            max_tokens=settings.llm.max_tokens or LOCAL_MAX_TOKENS,
            label=server.display_label,
            temperature=temperature if temperature is not None else LOCAL_TEMPERATURE,
            yield_side_calls=True,  # one request at a time: the reply must not wait
        )

    async def _stream_chat(
        self, messages: list[Message], **options: Any
    ) -> AsyncGenerator[LLMEvent, None]:
        await self._running()
        try:
            async for event in super()._stream_chat(messages, **options):
                if isinstance(event, StreamFinished):
                    self._may_restart = True  # it answered: the next crash restarts it
                    if event.completion.usage is None:
                        event.completion.usage = await self._counted(messages, event.completion.content)
                yield event
        except LLMError as exc:
            named = await self._crash_error(exc)
            if named is None:
                raise
            raise named from exc

    async def _counted(self, messages: list[Message], reply: str) -> Usage | None:
        """The request's tokens, counted by the model's own tokenizer: llama_cpp.server
        reports no usage on a streamed reply, and the status line showed no tokens for
        the local model. The prompt is the messages in the model's ChatML form; None
        when the server cannot count (the reply is not held up by it)."""
        prompt = "".join(
            f"<|im_start|>{m.get('role')}\n{_text(m.get('content'))}<|im_end|>\n" for m in messages
        )
        try:
            if self._counter is None:
                self._counter = httpx.AsyncClient(timeout=COUNT_TIMEOUT_SECONDS)
            counts = []
            for text in (prompt + "<|im_start|>assistant\n", reply):
                response = await self._counter.post(
                    f"{self.server.root_url}/extras/tokenize/count",
                    json={"input": text},
                    headers={"Authorization": f"Bearer {self.server.api_key}"},
                )
                response.raise_for_status()
                counts.append(int(response.json()["count"]))
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.info("[LOCAL_MODEL] tokens not counted: %s", exc)
            return None
        return Usage(prompt_tokens=counts[0], completion_tokens=counts[1])

    async def aclose(self) -> None:
        if self._counter is not None:
            await self._counter.aclose()
        await super().aclose()

    async def _crash_error(self, exc: LLMError) -> LLMError | None:
        """`exc` as the crash it is when the server has died, else None."""
        if exc.kind not in _CRASH_KINDS:
            return None
        reason = await asyncio.to_thread(self.server.wait_for_exit, EXIT_WAIT_SECONDS)
        if reason is None:
            return None
        self._crashed = reason
        log.warning("[LOCAL_MODEL] %s", reason)
        if self._may_restart:
            return LLMError("crashed", f"{_sentence(reason)}; it restarts with your next message.")
        return LLMError("crashed", f"{_sentence(reason)}; it crashed again, so it is not restarted.")

    async def _running(self) -> None:
        """Start the server again if it has died (once); else say why it is down."""
        async with self._restart:
            if self.server.running:
                return
            reason = self.server.exit_reason() or self._crashed or "the local model is not running"
            if not self._may_restart:
                raise LLMError("crashed", f"{_sentence(reason)}; restart qwenmem to try again.")
            self._may_restart = False
            log.info("[LOCAL_MODEL] restarting after: %s", reason)
            try:
                await self.server.arestart()
            except Exception as exc:  # LocalModelError: one line for the user
                raise LLMError("crashed", f"The local model could not restart: {exc}") from exc
            self._crashed = None
            if self.server.base_url != self.base_url:  # the old port was taken meanwhile
                self.base_url = self.server.base_url
                old, self._client = self._client, self._make_client(self.base_url, max_retries=0)
                await old.close()


def _text(content: object) -> str:
    """A message's text (a list of parts: their text joined)."""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]
