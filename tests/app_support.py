"""Helpers for driving the real app with Pilot, shared by tests/tui and tests/reliability
(a module, so tests can import it; fixtures are in the conftest files)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress

from textual.app import App
from textual.pilot import Pilot
from textual.widget import Widget
from textual.worker import WorkerCancelled

# How long a wait may take before it is a failure: a bound, never a wait. Waits end when
# their condition holds; at load 15-22 on two cores a step the app takes in milliseconds
# took over the old 10 s bound (a streaming test failed once), so the bound is wide.
BOUND = 60.0


async def wait_until(pilot: Pilot, predicate: Callable[[], bool], *, timeout: float = BOUND) -> None:
    """Let the app run until `predicate()` holds; fail after `timeout` seconds."""

    async def poll() -> None:
        while not predicate():
            await pilot.pause(0.01)

    await asyncio.wait_for(poll(), timeout)


async def started(pilot: Pilot) -> None:
    """Wait until the app has opened its session: it takes keys before that (the open
    runs behind the drawn screen), but a test that reads the session needs it."""
    # A bound, not a wait: opening (FAISS, the SDK) can take long on a loaded machine.
    await wait_until(pilot, lambda: pilot.app.state != "starting")


async def settle(pilot: Pilot) -> None:
    """Wait for startup, every worker (turns, commands, session switches) and the repaint."""
    await started(pilot)
    await workers_done(pilot.app)
    await pilot.pause()


async def workers_done(app: App) -> None:
    """Wait until every worker running now has ended; a failed one still raises.

    A cancelled worker (Esc, an exclusive worker replaced by a newer one) has ended as
    meant. Textual's `wait_for_complete` raises WorkerCancelled for it while it is still
    in the manager, i.e. until its task's done callback has run: on a loaded machine the
    test got there first and failed with WorkerCancelled."""
    for worker in list(app.workers):
        with suppress(WorkerCancelled):
            await worker.wait()


async def send(pilot: Pilot, text: str) -> None:
    """Type `text` into the prompt of the started app and press Enter."""
    from qwenmem_tui.tui.widgets.prompt import PromptInput

    await started(pilot)
    prompt = pilot.app.screen.query_one(PromptInput)
    prompt.focus()
    prompt.insert(text)
    await pilot.press("enter")
    # Enter travels in hops: the key, the prompt's send (a call_later), its Sent message
    # bubbling up to the screen. pilot.press returns when the CPU looks idle, which on a
    # loaded machine can be before the screen took the line: `settle` then found no
    # turn to wait for, and the test read a conversation that had not happened yet.
    await wait_until(pilot, lambda: prompt.text != text)  # the prompt has sent (or completed)
    await _delivered(prompt)


async def _delivered(widget: Widget) -> None:
    """Wait until every message `widget` has posted so far has reached its screen.

    A callback queued on a node runs after the messages queued there before it, and
    a bubbling message moves to the parent while its node handles it; so a callback
    chained up the ancestors, one node at a time, arrives behind the message."""
    reached = asyncio.Event()
    chain = [widget, *widget.ancestors]
    chain = chain[: chain.index(widget.screen) + 1]

    def hop(index: int) -> None:
        if index == len(chain):
            reached.set()
        else:
            chain[index].call_later(hop, index + 1)

    hop(0)
    await asyncio.wait_for(reached.wait(), BOUND)
