"""read_ahead: what a source yields without waiting is handed over together; errors and
closing behave as the source's own would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

from qwenmem_tui.llm.read_ahead import read_ahead


async def test_what_arrives_together_is_handed_over_together() -> None:
    more = asyncio.Event()

    async def source() -> AsyncGenerator[list[int], None]:
        yield [1]
        yield []
        yield [2, 3]  # buffered: no wait between these
        await more.wait()  # the socket has nothing: the consumer runs meanwhile
        yield [4]

    got: list[list[int]] = []
    async for batch in read_ahead(source()):
        got.append(batch)
        more.set()
    assert got == [[1, 2, 3], [4]]


async def test_an_error_comes_after_what_was_read_before_it() -> None:
    async def source() -> AsyncGenerator[list[str], None]:
        yield ["a", "b"]
        raise ValueError("bad event")

    got: list[list[str]] = []
    with pytest.raises(ValueError, match="bad event"):
        async for batch in read_ahead(source()):
            got.append(batch)
    assert got == [["a", "b"]]


async def test_closing_early_closes_the_source_before_returning() -> None:
    closed = asyncio.Event()
    never = asyncio.Event()

    async def source() -> AsyncGenerator[list[int], None]:
        try:
            yield [1]
            await never.wait()
            yield [2]
        finally:
            closed.set()

    batches = read_ahead(source())
    assert await anext(batches) == [1]
    await batches.aclose()  # type: ignore[attr-defined]
    assert closed.is_set()


async def test_a_cancelled_consumer_cancels_the_reading() -> None:
    closed = asyncio.Event()
    started = asyncio.Event()
    never = asyncio.Event()

    async def source() -> AsyncGenerator[list[int], None]:
        try:
            started.set()
            await never.wait()
            yield [1]
        finally:
            closed.set()

    async def consume() -> None:
        async for _ in read_ahead(source()):
            pass

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed.is_set()


class LoopTurns:
    """Counts the turns other work gets on the loop while it runs."""

    def __init__(self) -> None:
        self.count = 0
        self._task = asyncio.create_task(self._spin())

    async def _spin(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.wait({self._task})


async def test_a_burst_read_without_waiting_gives_the_loop_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 20k chunks already buffered are read without ever waiting on the socket: the
    # reading task alone would hold the loop (and the user's keys) until all are read.
    monkeypatch.setattr("qwenmem_tui.llm.read_ahead.TURN", 0.0)  # a turn after each read

    async def source() -> AsyncGenerator[list[int], None]:
        for n in range(50):
            yield [n]  # never waits

    turns = LoopTurns()
    await asyncio.sleep(0)
    started = turns.count
    got = [item async for batch in read_ahead(source()) for item in batch]
    await turns.stop()
    assert got == list(range(50))
    assert turns.count - started >= 25  # the loop ran other work between the reads


async def test_a_pile_is_handed_over_in_parts_with_the_loop_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What was read while the consumer was busy (a burst behind a fast stream) was one
    # list of thousands: the session's parsing of it was one 50 ms step of the loop.
    monkeypatch.setattr("qwenmem_tui.llm.read_ahead.HAND_OVER", 10)

    async def source() -> AsyncGenerator[list[int], None]:
        yield list(range(45))  # one read brings them all

    turns = LoopTurns()
    sizes: list[int] = []
    seen_at: list[int] = []
    async for batch in read_ahead(source()):
        sizes.append(len(batch))
        seen_at.append(turns.count)
    await turns.stop()
    assert sizes == [10, 10, 10, 10, 5]
    assert all(later > earlier for earlier, later in zip(seen_at, seen_at[1:]))
