"""A response body read in a task of its own, handed over in whatever it has gathered.

A stream of many small chunks is mostly per-chunk work downstream: each chunk that
reaches a consumer one at a time goes through every layer above it (the chat session,
the events queue, the screen). A fast stream's chunks arrive in bursts (one socket
read brings dozens), and the HTTP stack hands them over one by one without ever
giving the event loop a turn. Read in a task of its own, the chunks of a burst pile
up until that task next waits on the socket, and the consumer takes them together:
as many hand-overs as reads, not as chunks. A slow stream is unchanged: each chunk is
handed over as soon as it is read.

A burst already buffered is read without ever waiting on the socket, so the reading
task also gives the loop a turn every TURN seconds: 20k chunks behind a fast stream
took a second of parsing, in steps of 10-40 ms, and every key the user typed waited
behind several of them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import TypeVar

T = TypeVar("T")

TURN = 0.004
"""Seconds the reading task runs before the event loop gets a turn."""

HAND_OVER = 256
"""Items handed over at most at a time; the loop gets a turn between two hand-overs.
A pile read while the consumer was busy (a burst behind a fast stream) was one list
of thousands, 50 ms of the session's parsing in one step of the loop."""


async def read_ahead(source: AsyncGenerator[list[T], None]) -> AsyncIterator[list[T]]:
    """The items of `source`'s lists, read by a task of its own, in lists of all that
    it has read since the consumer last asked (never an empty one), HAND_OVER at most.

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
                turn = time.perf_counter()
                async for batch in batches:
                    if batch:
                        ready.extend(batch)
                        woken.set()
                    if time.perf_counter() - turn >= TURN:
                        await asyncio.sleep(0)
                        turn = time.perf_counter()
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
            while ready:
                batch = ready[:HAND_OVER]
                del ready[:HAND_OVER]
                yield batch
                await asyncio.sleep(0)  # the loop's turn (keys, frames) before the next
            if ended and not ready:
                if failure:
                    raise failure[0]
                return
    finally:
        if not reader.done():
            reader.cancel()
        await asyncio.wait({reader})
