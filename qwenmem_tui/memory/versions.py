"""Versions in the memory block: a memory linked as the possible restatement of an
older one (``Memory.restates``, memory/identity) is that fact's newer version until the
model decides. Recall puts the newer first (``recall.current_first``); the block never
shows the older beside it as if both were true: the older is rendered as an earlier
version (``render.py``). A wrong link (two distinct facts) costs an ordering and a
note, never a fact.
"""

from __future__ import annotations

from collections.abc import Sequence

from qwenmem_tui.memory.model import Memory


def later_versions(memories: Sequence[Memory]) -> dict[int, Memory]:
    """Older memory id -> the newer version among ``memories`` that may restate it."""
    ids = {m.id for m in memories}
    return {m.restates: m for m in memories if m.restates is not None and m.restates in ids}
