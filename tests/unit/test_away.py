"""The away-recap state machine, driven by a fake clock (issue 3)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from qwenmem_tui.features.recap.away import (
    AbortRecap,
    AwayController,
    FireRecap,
    ShowRecap,
    should_recap_on_resume,
    threshold_seconds,
)

MINUTE = 60.0


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Harness:
    clock: FakeClock = field(default_factory=FakeClock)
    items: list[dict] = field(
        default_factory=lambda: [
            {"type": kind} for kind in ("user", "assistant") * 3
        ]
    )

    def controller(self, *, enabled: bool = True, threshold: float | None = 5.0,
                   focused: bool = True, idle: bool = True) -> AwayController:
        return AwayController(
            enabled=enabled,
            threshold_minutes=threshold,
            clock=self.clock,
            items=lambda: self.items,
            focused=focused,
            idle=idle,
        )


@pytest.fixture
def h() -> Harness:
    return Harness()


def away(h: Harness, ctl: AwayController, minutes: float) -> list:
    assert ctl.on_focus_change(False) == []
    h.clock.advance(minutes * MINUTE)
    return ctl.on_focus_change(True)


def test_fires_once_after_threshold_and_shows_result(h: Harness) -> None:
    ctl = h.controller()
    assert away(h, ctl, 5) == [FireRecap(1)]
    assert ctl.in_flight == 1
    assert ctl.on_recap_result(1, "Fixing the parser. Next: add a test.") == [
        ShowRecap("Fixing the parser. Next: add a test.")
    ]
    assert ctl.in_flight is None


def test_disabled_never_fires(h: Harness) -> None:
    ctl = h.controller(enabled=False)
    assert away(h, ctl, 60) == []
    assert ctl.blurred_at is None


def test_brief_blur_resets(h: Harness) -> None:
    ctl = h.controller()
    assert away(h, ctl, 4) == []
    assert ctl.blurred_at is None
    # The four minutes do not carry over into the next away period.
    assert away(h, ctl, 2) == []


def test_blur_start_is_remembered_once(h: Harness) -> None:
    ctl = h.controller()
    ctl.on_focus_change(False)
    start = ctl.blurred_at
    h.clock.advance(3 * MINUTE)
    # A duplicate blur report (focus events can repeat) keeps the original start.
    assert ctl.on_focus_change(False) == []
    assert ctl.blurred_at == start
    h.clock.advance(2 * MINUTE)
    assert ctl.on_focus_change(True) == [FireRecap(1)]


def test_focus_mid_turn_fires_when_turn_ends(h: Harness) -> None:
    ctl = h.controller()
    ctl.on_focus_change(False)
    h.clock.advance(6 * MINUTE)
    assert ctl.on_idle_change(False) == []
    assert ctl.on_focus_change(True) == []
    assert ctl.blurred_at is not None  # kept for the end of the turn
    assert ctl.on_idle_change(True) == [FireRecap(1)]
    assert ctl.on_idle_change(False) == []
    assert ctl.on_idle_change(True) == []  # once


def test_turn_end_while_still_away_does_not_fire(h: Harness) -> None:
    ctl = h.controller(idle=False)
    ctl.on_focus_change(False)
    h.clock.advance(10 * MINUTE)
    assert ctl.on_idle_change(True) == []
    assert ctl.on_focus_change(True) == [FireRecap(1)]


def test_dedupe_gate_consumes_the_cycle_silently(h: Harness) -> None:
    h.items.append({"type": "away_recap"})
    h.items.append({"type": "user"})  # only one new turn since the last recap
    ctl = h.controller()
    assert away(h, ctl, 10) == []
    assert ctl.blurred_at is None
    assert ctl.in_flight is None
    # The cycle is gone: a later turn end does not resurrect it.
    h.items.append({"type": "user"})
    assert ctl.on_idle_change(False) == []
    assert ctl.on_idle_change(True) == []
    # The next away period can fire now that two user turns are new.
    assert away(h, ctl, 10) == [FireRecap(1)]


def test_too_few_user_messages_consumes_the_cycle(h: Harness) -> None:
    h.items[:] = [{"type": "user"}, {"type": "assistant"}]
    ctl = h.controller()
    assert away(h, ctl, 10) == []
    assert ctl.blurred_at is None


def test_recap_in_flight_means_nothing_happens(h: Harness) -> None:
    ctl = h.controller()
    assert away(h, ctl, 5) == [FireRecap(1)]
    assert away(h, ctl, 5) == []
    assert ctl.in_flight == 1


def test_late_arrival_while_not_idle_is_dropped(h: Harness) -> None:
    ctl = h.controller()
    assert away(h, ctl, 5) == [FireRecap(1)]
    ctl.on_idle_change(False)  # the user started typing a new turn meanwhile
    assert ctl.on_recap_result(1, "Late recap.") == []
    assert ctl.in_flight is None


def test_empty_result_shows_nothing_and_clears(h: Harness) -> None:
    ctl = h.controller()
    away(h, ctl, 5)
    assert ctl.on_recap_result(1, None) == []
    assert ctl.in_flight is None
    h.items += [{"type": "user"}, {"type": "user"}]
    assert away(h, ctl, 5) == [FireRecap(2)]


def test_disable_aborts_the_call_in_flight(h: Harness) -> None:
    ctl = h.controller()
    assert away(h, ctl, 5) == [FireRecap(1)]
    assert ctl.set_enabled(False) == [AbortRecap(1)]
    assert ctl.in_flight is None
    assert ctl.on_recap_result(1, "Too late.") == []
    assert away(h, ctl, 30) == []


def test_disable_forgets_the_blur_and_enable_while_blurred_starts_it(h: Harness) -> None:
    ctl = h.controller()
    ctl.on_focus_change(False)
    h.clock.advance(3 * MINUTE)
    assert ctl.set_enabled(False) == []
    assert ctl.blurred_at is None
    h.clock.advance(3 * MINUTE)
    assert ctl.set_enabled(True) == []
    assert ctl.blurred_at == h.clock.now
    h.clock.advance(4 * MINUTE)
    assert ctl.on_focus_change(True) == []  # only 4 minutes since it was enabled


def test_unmount_aborts_and_ignores_everything_after(h: Harness) -> None:
    ctl = h.controller()
    assert away(h, ctl, 5) == [FireRecap(1)]
    assert ctl.close() == [AbortRecap(1)]
    assert ctl.close() == []
    assert ctl.on_recap_result(1, "After close.") == []
    assert ctl.on_focus_change(False) == []
    h.clock.advance(10 * MINUTE)
    assert ctl.on_focus_change(True) == []


def test_only_the_newest_call_clears_the_in_flight_marker(h: Harness) -> None:
    ctl = h.controller()
    assert away(h, ctl, 5) == [FireRecap(1)]
    assert ctl.set_enabled(False) == [AbortRecap(1)]
    ctl.set_enabled(True)
    h.items += [{"type": "user"}, {"type": "user"}]
    assert away(h, ctl, 5) == [FireRecap(2)]
    # The aborted first call finishes late: it must not clear call 2's marker...
    assert ctl.on_recap_result(1, "Stale.") == []
    assert ctl.in_flight == 2
    # ...so a new away period still sees a recap in flight.
    assert away(h, ctl, 5) == []
    assert ctl.on_recap_result(2, "Fresh.") == [ShowRecap("Fresh.")]


@pytest.mark.parametrize("minutes", [0, -3, None, float("nan")])
def test_threshold_fallback_is_five_minutes(h: Harness, minutes: float | None) -> None:
    assert threshold_seconds(minutes) == 5 * MINUTE
    ctl = h.controller(threshold=minutes)
    assert away(h, ctl, 4.99) == []
    assert away(h, ctl, 5) == [FireRecap(1)]


def test_fractional_threshold(h: Harness) -> None:
    ctl = h.controller(threshold=0.05)  # three seconds
    assert threshold_seconds(0.05) == pytest.approx(3.0)
    assert away(h, ctl, 2.9 / MINUTE) == []
    assert away(h, ctl, 3.1 / MINUTE) == [FireRecap(1)]


def test_starting_blurred_counts_as_away(h: Harness) -> None:
    ctl = h.controller(focused=False)
    h.clock.advance(5 * MINUTE)
    assert ctl.on_focus_change(True) == [FireRecap(1)]


def test_repeated_focus_reports_are_ignored(h: Harness) -> None:
    ctl = h.controller()
    assert away(h, ctl, 5) == [FireRecap(1)]
    assert ctl.on_focus_change(True) == []


def test_resume_recap_needs_the_setting_and_an_old_session() -> None:
    now = 1_800_000_000.0
    days_ago = now - 3 * 24 * 3600
    assert should_recap_on_resume(days_ago, now, enabled=True, threshold_minutes=5)
    assert not should_recap_on_resume(days_ago, now, enabled=False, threshold_minutes=5)
    assert not should_recap_on_resume(now - 60, now, enabled=True, threshold_minutes=5)
    assert should_recap_on_resume(now - 300, now, enabled=True, threshold_minutes=0)
    assert not should_recap_on_resume(None, now, enabled=True, threshold_minutes=5)


def test_opening_an_old_session_fires_once(h: Harness) -> None:
    ctl = h.controller()
    last = h.clock.now - 3 * 24 * 3600
    assert ctl.on_session_opened(last) == [FireRecap(1)]
    assert ctl.on_recap_result(1, "Back to the parser. Next: tests.") == [
        ShowRecap("Back to the parser. Next: tests.")
    ]


def test_opening_a_recent_or_new_session_or_with_the_setting_off_does_nothing(
    h: Harness,
) -> None:
    assert h.controller().on_session_opened(h.clock.now - 60) == []
    assert h.controller().on_session_opened(None) == []
    assert h.controller(enabled=False).on_session_opened(h.clock.now - 86400) == []


def test_opening_a_session_ending_in_a_recap_does_not_repeat_it(h: Harness) -> None:
    h.items.append({"type": "away_recap"})
    assert h.controller().on_session_opened(h.clock.now - 86400) == []


def test_opening_an_old_session_with_fewer_than_three_messages_gives_no_recap(
    h: Harness,
) -> None:
    # "※ recap: You started with: hello Latest: hello" for a one-message session.
    h.items[:] = [{"type": "user"}, {"type": "assistant"}]
    assert h.controller().on_session_opened(h.clock.now - 86400) == []


def test_switching_sessions_aborts_the_recap_of_the_previous_one(h: Harness) -> None:
    ctl = h.controller()
    assert away(h, ctl, 5) == [FireRecap(1)]
    assert ctl.on_session_opened(h.clock.now - 86400) == [AbortRecap(1), FireRecap(2)]
    assert ctl.on_recap_result(1, "Recap of the old session.") == []
    assert ctl.on_recap_result(2, "Recap of the new one.") == [ShowRecap("Recap of the new one.")]


def test_switching_sessions_forgets_the_away_period(h: Harness) -> None:
    ctl = h.controller()
    ctl.on_focus_change(False)
    h.clock.advance(10 * MINUTE)
    ctl.on_idle_change(False)
    ctl.on_focus_change(True)  # came back mid-turn: the blur start is kept...
    assert ctl.on_session_opened(None) == []
    assert ctl.on_idle_change(True) == []  # ...but not across a session switch
