"""Versions in recall: a memory linked as the possible restatement of an older one
(``Memory.restates``, memory/identity) is that fact's newer version until the model
decides. Recall never hands the model the older beside the newer as if both were true:
the newer is delivered first, pulled in beside its older version when only the older
passed, and the older is rendered as an earlier version (``render.py``). A wrong link
(two distinct facts) costs an ordering and a note, never a fact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from qwenmem_tui.features.memory.model import Memory

T = TypeVar("T")


def newer_first(
    ranked: Sequence[T], found: Sequence[T], k: int, memory: Callable[[T], Memory]
) -> list[T]:
    """``ranked`` (the top ``k`` of ``found``) with each linked newer version placed
    right before its older one: moved up when ranked below it, taken from ``found``
    when it missed the cut. At most ``k`` items, the last dropped to make room."""
    newer_of: dict[int, T] = {}
    for item in found:
        older = memory(item).restates
        if older is not None and (
            older not in newer_of or memory(item).created_at > memory(newer_of[older]).created_at
        ):
            newer_of[older] = item  # several: the latest
    if not newer_of:
        return list(ranked)
    placed: list[T] = []
    seen: set[int] = set()
    for item in ranked:
        mid = memory(item).id
        if mid in seen:
            continue
        newer = newer_of.get(mid)
        if newer is not None and memory(newer).id not in seen:
            placed.append(newer)
            seen.add(memory(newer).id)
        placed.append(item)
        seen.add(mid)
    return placed[:k]


def later_versions(memories: Sequence[Memory]) -> dict[int, Memory]:
    """Older memory id -> the newer version among ``memories`` that may restate it."""
    ids = {m.id for m in memories}
    return {m.restates: m for m in memories if m.restates is not None and m.restates in ids}
