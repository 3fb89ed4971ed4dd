"""A candidate the ranking puts ahead of the first one to clear recall's threshold
passes a little under it (recall.ANSWERED_MARGIN); a message nothing clears still gets
nothing, and one ranked behind every passing candidate still needs the threshold."""

from __future__ import annotations

from qwenmem_tui.memory.model import Memory, Status
from qwenmem_tui.memory.recall import ANSWERED_MARGIN, Candidate, passing

THRESHOLD = 0.81


def _candidate(memory_id: int, dense: float) -> Candidate:
    memory = Memory(memory_id, "ana", "global", "user", "k", "v", "user", Status.ACTIVE, [], 0.0, 0.0, None)  # type: ignore[arg-type]
    return Candidate(memory, 1.0 / memory_id, dense, None, 0.0)


def _ids(found: list[Candidate]) -> list[int]:
    return [c.memory.id for c in found]


def test_the_first_ranked_fact_under_the_threshold_passes_ahead_of_one_that_cleared_it() -> None:
    # bench/crosslang_fresh.jsonl: "¿cómo se llama mi jefa?" ranks the manager first at
    # 0.798 and the cat's name third at 0.82.
    found = [_candidate(1, 0.798), _candidate(2, 0.78), _candidate(3, 0.82)]
    assert _ids(passing(found, THRESHOLD)) == [1, 3]
    assert _ids(passing(found, THRESHOLD, answered_margin=0.0)) == [3]


def test_one_ranked_behind_the_first_to_pass_still_needs_the_threshold() -> None:
    found = [_candidate(1, 0.83), _candidate(2, 0.80), _candidate(3, 0.82)]
    assert _ids(passing(found, THRESHOLD)) == [1, 3]


def test_nothing_passes_under_the_threshold_when_nothing_cleared_it() -> None:
    found = [_candidate(1, 0.805), _candidate(2, 0.80)]
    assert passing(found, THRESHOLD) == []


def test_the_margin_is_a_margin_not_a_floor() -> None:
    found = [_candidate(1, THRESHOLD - ANSWERED_MARGIN - 0.005), _candidate(2, 0.83)]
    assert _ids(passing(found, THRESHOLD)) == [2]


def test_an_agreeing_memory_keeps_its_own_margin_when_nothing_cleared_the_threshold() -> None:
    found = [_candidate(1, 0.795), _candidate(2, 0.795)]
    assert _ids(passing(found, THRESHOLD, agreeing={2})) == [2]
