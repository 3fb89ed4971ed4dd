"""How the garbage collector treats a process that lives for hours (the TUI).

Launch first: until the chat's first frame, nearly everything allocated is a module,
a class or a style that lives until exit, and Python's defaults ran ~140 collections
over it before that frame (a full one among them: 80-250 ms of a launch on this
machine). The CLI holds the collector from its start (`hold`) until the chat's first
frame is composed (`release`, which freezes what was built) or a subcommand starts.

Python's full collection scans every tracked object. After startup that is ~120k
objects of modules, the SDK's and pydantic's classes and Textual's styles, all alive
until exit: they are frozen out of every later collection.

The other cost is what a frame leaves behind. Every line Textual paints is a reference
cycle (a `Strip` caches itself: a crop or a split that returns the whole strip), freed
only by the collector. Those lines live a frame or two, but with Python's defaults (a
young collection every 700 allocations, a middle one every 10 of those) many are still
alive at two collections in a row and reach the old generation: a fast stream then ran
a full collection of 200-500 ms on the UI thread every few seconds, and typed keys
waited for it. A young generation of 10,000 objects, collected into the middle one
every second time, lets them die young.
"""

from __future__ import annotations

import gc

YOUNG = 10_000
"""Allocations between two young collections (Python's default: 700); each scans at
most these, a few milliseconds."""

MIDDLE_EVERY = 2
"""Young collections between two middle ones (Python's default: 10)."""

FULL_EVERY = 100
"""Middle collections between two full ones (Python's default: 10). Cycles the
conversation drops (removed widgets) still go, a tenth as often."""


def settle_after_startup() -> None:
    """Freeze what startup built out of every later collection, and size the
    generations for frames. Once per process, when startup is done: objects frozen are
    never collected, so a test process (many apps, each dropping its objects) must not
    call it."""
    gc.freeze()
    gc.set_threshold(YOUNG, MIDDLE_EVERY, FULL_EVERY)


def hold() -> None:
    """No collection until `release`: what launch allocates lives until exit."""
    gc.disable()


def release(*, freeze: bool) -> None:
    """Collect again (after `hold`); `freeze`: what was built so far (the app's first
    frame: modules, classes, styles) is left out of every later collection, as
    `settle_after_startup` does with the rest. Safe to call when not held."""
    if freeze and not gc.isenabled():
        gc.freeze()
    gc.enable()

