"""When to show an automatic recap after the user was away.

A pure state machine with an injected clock: the TUI feeds it facts (setting toggled,
terminal focused or blurred, turn started or ended, recap arrived, screen closed) and
executes the actions it returns. Keeping it free of Textual and of real time is what
lets every rule below be tested in microseconds.

Rules (issue 3): a blur starts the away clock once; coming back before the threshold
forgets it. Coming back after it fires one recap — unless one is already in flight
(nothing happens), a turn is running (the blur start is kept and the recap fires when
the turn ends) or the dedupe gate says no (the cycle is consumed silently). A recap
arriving while a turn runs is dropped; turning the setting off or closing aborts the
call in flight; only the newest call may clear the in-flight marker.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from qwenmem_tui.features.recap.session_recap import should_fire_recap

DEFAULT_THRESHOLD_MINUTES = 5.0


@dataclass(frozen=True)
class FireRecap:
    """Start generating a recap; report its result with the same ``call_id``."""

    call_id: int


@dataclass(frozen=True)
class AbortRecap:
    """Abort the recap call ``call_id``; its result will be ignored anyway."""

    call_id: int


@dataclass(frozen=True)
class ShowRecap:
    """Add an ``away_recap`` item with ``text`` to the conversation."""

    text: str


AwayAction = FireRecap | AbortRecap | ShowRecap


def threshold_seconds(minutes: float | None) -> float:
    """The away threshold in seconds; nonsense (≤ 0, NaN, missing) means 5 minutes."""
    if minutes is None or math.isnan(minutes) or minutes <= 0:
        minutes = DEFAULT_THRESHOLD_MINUTES
    return minutes * 60.0


def should_recap_on_resume(
    last_activity_at: float | None,
    now: float,
    *,
    enabled: bool,
    threshold_minutes: float | None,
) -> bool:
    """Whether opening an old session deserves a recap ("/resume days later").

    Same opt-in and threshold as the away timer: the session's last message must be
    at least the threshold old. Both times are unix seconds.
    """
    if not enabled or last_activity_at is None:
        return False
    return now - last_activity_at >= threshold_seconds(threshold_minutes)


class AwayController:
    """The away-recap state machine; every input returns the actions to execute.

    ``items`` returns the conversation's display items for the dedupe gate
    (:func:`qwenmem_tui.features.recap.session_recap.should_fire_recap`); ``clock`` is a monotonic clock in
    seconds.
    """

    def __init__(
        self,
        *,
        enabled: bool,
        threshold_minutes: float | None,
        clock: Callable[[], float],
        items: Callable[[], Sequence[object]],
        focused: bool = True,
        idle: bool = True,
    ) -> None:
        self._enabled = enabled
        self._threshold_minutes = threshold_minutes
        self._threshold = threshold_seconds(threshold_minutes)
        self._clock = clock
        self._items = items
        self._focused = focused
        self._idle = idle
        self._blurred_at: float | None = None
        self._in_flight: int | None = None
        self._last_call_id = 0
        self._closed = False
        if enabled and not focused:
            self._blurred_at = clock()

    @property
    def in_flight(self) -> int | None:
        """The id of the recap call whose result is still awaited, if any."""
        return self._in_flight

    @property
    def blurred_at(self) -> float | None:
        """When the current away period started (clock time), if one is running."""
        return self._blurred_at

    def set_enabled(self, enabled: bool) -> list[AwayAction]:
        """``general.show_session_recap`` changed; turning it off aborts at once."""
        if self._closed or enabled == self._enabled:
            return []
        self._enabled = enabled
        if enabled:
            if not self._focused:
                self._blurred_at = self._clock()
            return []
        self._blurred_at = None
        return self._abort()

    def on_focus_change(self, focused: bool) -> list[AwayAction]:
        """The terminal gained or lost focus (a key press while blurred is a focus)."""
        if self._closed or focused == self._focused:
            return []
        self._focused = focused
        if not self._enabled:
            return []
        if not focused:
            # Remembered once: a second blur report must not restart the away clock.
            if self._blurred_at is None:
                self._blurred_at = self._clock()
            return []
        return self._maybe_fire()

    def on_idle_change(self, idle: bool) -> list[AwayAction]:
        """A turn started (``False``) or ended (``True``)."""
        if self._closed or idle == self._idle:
            return []
        self._idle = idle
        if idle and self._enabled and self._focused:
            # The user came back mid-turn after the threshold: fire now it's quiet.
            return self._maybe_fire()
        return []

    def on_recap_result(self, call_id: int, text: str | None) -> list[AwayAction]:
        """Recap call ``call_id`` finished with ``text`` (``None``: nothing to show)."""
        if self._closed or call_id != self._in_flight:
            return []  # aborted or superseded: only the newest call counts
        self._in_flight = None
        if not text or not self._idle:
            return []  # a recap landing in the middle of a new turn is dropped
        return [ShowRecap(text)]

    def on_session_opened(self, last_activity_at: float | None) -> list[AwayAction]:
        """Another session is on screen (startup, /resume); ``None`` when it is new.

        A recap still in flight belongs to the previous session and is aborted. A
        session whose last activity is older than the threshold gets one recap — the
        "/resume days later" case — when the dedupe gate allows it (three user
        messages; two more since the last recap): a one-message session gets none.
        """
        if self._closed:
            return []
        actions = self._abort()
        self._blurred_at = None if self._focused else self._clock()
        if not self._idle or not should_recap_on_resume(
            last_activity_at,
            self._clock(),
            enabled=self._enabled,
            threshold_minutes=self._threshold_minutes,
        ):
            return actions
        # The same gate as the away timer's: something to summarise (three user
        # messages), and not a repeat of the recap the session ends with.
        if not should_fire_recap(self._items()):
            return actions
        return actions + self._fire()

    def close(self) -> list[AwayAction]:
        """The screen is going away: abort the call in flight; ignore everything after."""
        if self._closed:
            return []
        actions = self._abort()
        self._closed = True
        self._blurred_at = None
        return actions

    def _maybe_fire(self) -> list[AwayAction]:
        blurred_at = self._blurred_at
        if blurred_at is None:
            return []
        if self._clock() - blurred_at < self._threshold:
            self._blurred_at = None
            return []
        if self._in_flight is not None:
            self._blurred_at = None
            return []
        if not self._idle:
            return []  # keep the blur start; on_idle_change(True) comes back here
        self._blurred_at = None
        if not should_fire_recap(self._items()):
            return []
        return self._fire()

    def _fire(self) -> list[AwayAction]:
        self._last_call_id += 1
        self._in_flight = self._last_call_id
        return [FireRecap(self._last_call_id)]

    def _abort(self) -> list[AwayAction]:
        if self._in_flight is None:
            return []
        call_id, self._in_flight = self._in_flight, None
        return [AbortRecap(call_id)]
