"""A response body read in a task of its own, handed over in whatever it has gathered.

A stream of many small chunks is mostly per-chunk work downstream: each chunk that
reaches a consumer one at a time goes through every layer above it (the chat session,
the events queue, the screen). A fast stream's chunks arrive in bursts (one socket
read brings dozens), and the HTTP stack hands them over one by one without ever
giving the event loop a turn. Read in a task of its own, the chunks of a burst pile
up until that task next waits on the socket, and the consumer takes them together:
as many hand-overs as reads, not as chunks. A slow stream is unchanged: each chunk is
handed over as soon as it is read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import TypeVar

T = TypeVar("T")


async def read_ahead(source: AsyncGenerator[list[T], None]) -> AsyncIterator[list[T]]:
    """The items of `source`'s lists, read by a task of its own, in lists of all that
    it has read since the consumer last asked (never an empty one).

    An error of `source` is raised after the items read before it. Closing this
    iterator (or cancelling its consumer) cancels the reading task and waits for it,
    so `source` is closed before this returns (an HTTP body: the server sees the
    disconnect).
    """
    ready: list[T] = []
    woken = asyncio.Event()
    failure: list[BaseException] = []
    ended = False

    async def read() -> None:
        nonlocal ended
        try:
            async with aclosing(source) as batches:
                async for batch in batches:
                    if batch:
                        ready.extend(batch)
                        woken.set()
        except BaseException as exc:  # handed to the consumer, cancellation included
            failure.append(exc)
        finally:
            ended = True
            woken.set()

    reader = asyncio.create_task(read(), name="read-ahead")
    try:
        while True:
            await woken.wait()
            woken.clear()
            if ready:
                batch = ready[:]
                ready.clear()
                yield batch
            if ended and not ready:
                if failure:
                    raise failure[0]
                return
    finally:
        if not reader.done():
            reader.cancel()
        await asyncio.wait({reader})
