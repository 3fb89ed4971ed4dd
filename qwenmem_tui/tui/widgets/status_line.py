"""One line under the input: model, what the app is doing, session title."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import RenderResult
from textual.content import Content
from textual.reactive import reactive
from textual.timer import Timer
from textual.widget import Widget

from qwenmem_tui.tui.terminal_text import terminal_safe

STATE_LABELS = {
    "starting": "starting…",
    "idle": "idle",
    "responding": "responding…",
    "running_tool": "running tool…",
}
"""The chat's own states; extensions add theirs (`StatusLine.labels`)."""
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
SPIN_INTERVAL = 0.1
"""Seconds per spinner frame: a busy app visibly moves, even before the first token."""
STREAMING_SLOWER = 5
"""While the reply's text arrives the spinner turns this many times slower: the reply
moving on screen already shows the app is alive, and at 10 frames a second the
spinner's own repaints were a tenth of a fast stream's CPU."""


class StatusLine(Widget):
    """Renders the app's `state` and the session it is showing.

    While the app is busy a spinner turns and the seconds since it got busy count up,
    so a slow model (the bundled one takes seconds before its first token) does not
    look hung.
    """

    model: reactive[str] = reactive("")
    state: reactive[str] = reactive("idle")
    title: reactive[str] = reactive("")
    queued: reactive[int] = reactive(0)
    thinking: reactive[bool] = reactive(False)
    """The model streams reasoning (never shown) before its answer."""
    badges: reactive[dict[str, str]] = reactive(dict, always_update=True)
    """Extensions' badges by name (e.g. memories awaiting review), in the order set."""
    tokens: reactive[tuple[int, int]] = reactive((0, 0))
    """(prompt, completion) tokens the endpoint counted for this session."""

    def __init__(
        self, *, id: str | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(id=id)
        self._clock = clock
        self.labels = dict(STATE_LABELS)
        """Words for each state; extensions add their busy states' (`add_labels`)."""
        self._busy_since: float | None = None
        self._frame = 0
        self._ticks = 0
        self._ticker: Timer | None = None
        self.streaming = False
        """The reply's text is arriving (the spinner turns STREAMING_SLOWER times slower)."""

    def add_labels(self, labels: dict[str, str]) -> None:
        self.labels.update(labels)
        self.refresh()

    def set_badge(self, name: str, text: str | None) -> None:
        """Show `text` as badge `name`, or drop the badge (None or "")."""
        badges = {k: v for k, v in self.badges.items() if k != name}
        if text:
            badges[name] = text
        self.badges = badges

    def watch_state(self, old: str, new: str) -> None:
        self.set_class(new != "idle", "-busy")
        if new == "idle":
            self._busy_since = None
            self.streaming = False
            if self._ticker is not None:
                self._ticker.stop()
                self._ticker = None
        elif self._busy_since is None:
            self._busy_since = self._clock()
            self._frame = 0
            self._ticker = self.set_interval(SPIN_INTERVAL, self._tick, name="status-spinner")

    def _tick(self) -> None:
        self._ticks += 1
        if self.streaming and self._ticks % STREAMING_SLOWER:
            return
        self._frame += 1
        self.refresh()

    @property
    def elapsed(self) -> float | None:
        """Seconds since the app got busy; None when idle."""
        return None if self._busy_since is None else self._clock() - self._busy_since

    def _state_label(self) -> str:
        if self.thinking and self.state == "responding":
            return "thinking…"
        return self.labels.get(self.state, self.state)

    def render(self) -> RenderResult:
        label = self._state_label()
        elapsed = self.elapsed
        if elapsed is not None:
            label = f"{SPINNER[self._frame % len(SPINNER)]} {label} {int(elapsed)}s"
        parts: list[str | tuple[str, str] | Content] = [
            (terminal_safe(self.model), "bold"),
            " · ",
            (label, "$accent" if self.state != "idle" else ""),
        ]
        if self.queued:
            parts += [" · ", (f"{self.queued} queued", "$warning")]
        for badge in self.badges.values():
            parts += [" · ", (terminal_safe(badge), "$warning")]
        if any(self.tokens):
            parts += [" · ", (token_label(*self.tokens), "$text-muted")]
        parts += [" · ", terminal_safe(self.title or "new session")]
        return Content.assemble(*parts)


def _count(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else f"{n:,}"


def token_label(prompt: int, completion: int) -> str:
    """ "12.3k in / 456 out": tokens the session's requests cost."""
    return f"{_count(prompt)} in / {_count(completion)} out"

