"""How the garbage collector treats a process that lives for hours (the TUI).

Python's full collection scans every tracked object. After startup that is ~120k
objects of modules, the SDK's and pydantic's classes and Textual's styles, all alive
until exit; a long streamed reply adds a hundred thousand more (widgets, strips and
their caches). Left as it is, a 20k-token reply at 1,000 tokens a second ran 15 full
collections of 200-500 ms each on the UI thread: keys typed then waited for them.
"""

from __future__ import annotations

import gc

FULL_COLLECTION_EVERY = 100
"""Second-generation collections between two full ones (Python's default: 10). Cycles
the conversation drops (removed widgets) still go, a tenth as often."""


def settle_after_startup() -> None:
    """Freeze what startup built out of every later collection, and make full ones
    rarer. Once per process, when startup is done: objects frozen are never collected,
    so a test process (many apps, each dropping its objects) must not call it."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
