"""Issue 41: the soak's short form (bench/bench_soak.py runs 5,000 turns).

One real session on the runtime every face opens, against the fake server: memory
writes by the model's tool and forgets, compaction firing, recaps, a resume; nothing
lost at the end, and no fd, thread or asyncio task left behind from one checkpoint to
the next.
"""

from __future__ import annotations

from pathlib import Path

from .soak import POOL_MAX, soak

TURNS = 90
EVERY = 30
WINDOW = 10  # the chat's window in memory, small enough to be passed many times over
RESUME = 25  # not on a checkpoint: what a checkpoint sees was held since, not just loaded


async def test_a_long_session_loses_nothing_and_leaks_no_handles(tmp_path: Path) -> None:
    report = await soak(tmp_path, turns=TURNS, every=EVERY, recap_every=30, resume_every=RESUME, window_items=WINDOW)
    assert report.turns == TURNS and report.user_items == TURNS  # every message stored
    assert report.writes == TURNS * 2 // 5  # every save_memory call kept, as written
    assert report.forgets == report.memories_deleted == report.writes  # every forget stands
    assert report.memories_active == 0
    assert report.compactions >= 2 and report.recaps == TURNS // 30 and report.resumes == TURNS // RESUME
    # Handles: what a checkpoint after warm-up held is what the last holds, each count
    # on its own (a tuple's order would let fewer fds hide more threads). Warm-up is the
    # first two checkpoints: what opens lazily (a reader connection) may open late on a
    # loaded machine, but only once. The default executor's threads are counted apart:
    # they start one more whenever work finds none idle, which under load happened
    # between the last two checkpoints (5 threads, then 6), so they are held to the
    # pool's bound; every other thread is held strictly, by name in the message.
    warm, last = report.checkpoints[1], report.checkpoints[-1]
    assert last.fds <= warm.fds and last.threads <= warm.threads and last.tasks <= warm.tasks, report.checkpoints
    assert all(0 < point.pool_threads <= POOL_MAX for point in report.checkpoints), report.checkpoints
    # Memory: the chat holds its window, not its transcript; the database holds it all.
    assert all(point.held <= max(WINDOW, point.view) for point in report.checkpoints), report.checkpoints
    assert last.held < last.stored // 2 and last.stored >= 2 * TURNS, report.checkpoints
