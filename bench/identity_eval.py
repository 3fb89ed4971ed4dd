"""Scoring fact identity on ``bench/identity_corpus.jsonl`` (used by the identity test
and by ``bench/bench_identity.py``).

Each pair is two writes through the real ``MemoryService`` — ``/remember`` text, or
an explicit ``category/key/value`` as import and ``save_memory`` write it — labelled
*restates* (the second is the first fact with a new value: it should replace it) or
*distinct* (two facts: both must stay). A pair is *merged* when, after the second
write, the first is no longer active (superseded) or the second only refreshed it.
Precision and recall are of merges: a distinct pair merged is a lost fact.
Both memories are forgotten before the next pair, so pairs never see each other.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwenmem_tui.memory.model import Origin, RememberRequest, Status, WriteRequest, WriteResult
from qwenmem_tui.memory.service import MemoryService

CORPUS = Path(__file__).with_name("identity_corpus.jsonl")


def load_pairs(path: Path = CORPUS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class Tally:
    """One language's (or the whole corpus's) figures."""

    restates: int = 0
    merged_restates: int = 0  # resolved: the older value superseded (or refreshed)
    linked_restates: int = 0  # kept both, the newer linked as the older's version
    distinct: int = 0
    merged_distinct: int = 0  # a lost fact
    linked_distinct: int = 0  # kept both, wrongly linked (recall marks one as earlier)
    asked: int = 0  # restatements with a question
    newer_first: int = 0  # ... whose recall put the newer version first

    def add(self, other: Tally) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Scores:
    by_language: dict[str, Tally] = field(default_factory=dict)
    misses: list[str] = field(default_factory=list)  # restatements kept apart
    lost: list[str] = field(default_factory=list)  # distinct facts merged
    stale_first: list[str] = field(default_factory=list)  # older version recalled first
    linked_apart: list[str] = field(default_factory=list)  # distinct facts linked as versions

    @property
    def total(self) -> Tally:
        total = Tally()
        for tally in self.by_language.values():
            total.add(tally)
        return total

    @property
    def merged_distinct(self) -> int:
        return self.total.merged_distinct

    @property
    def precision(self) -> float:
        t = self.total
        merged = t.merged_restates + t.merged_distinct
        return t.merged_restates / merged if merged else 1.0

    @property
    def recall(self) -> float:
        t = self.total
        return t.merged_restates / t.restates if t.restates else 1.0

    def line(self, name: str) -> str:
        t = self.total
        return (
            f"{name}: merge precision {self.precision:.3f}, recall {self.recall:.3f} "
            f"({t.merged_restates}/{t.restates} restatements merged, "
            f"{t.merged_distinct}/{t.distinct} distinct pairs merged)"
        )

    def table(self) -> str:
        """Per language: restatements resolved (merged) or linked, distinct pairs
        merged or linked, and the newer version recalled first."""
        lines = ["lang | restatements merged | + linked | distinct merged | distinct linked | newer first"]
        for lang, t in [*sorted(self.by_language.items()), ("all", self.total)]:
            lines.append(
                f"{lang} | {t.merged_restates}/{t.restates} | {t.merged_restates + t.linked_restates}/{t.restates}"
                f" | {t.merged_distinct}/{t.distinct} | {t.linked_distinct}/{t.distinct}"
                f" | {t.newer_first}/{t.asked}"
            )
        return "\n".join(lines)


async def write(service: MemoryService, item: Mapping[str, str], project: str) -> WriteResult:
    if "text" in item:
        return await service.remember(RememberRequest(item["text"], project=project))
    return await service.save(
        WriteRequest(
            item["category"], item["key"], item["value"], origin=Origin.TOOL, project=project,
            judge_timeout=service_judge_timeout(service),
        )
    )


def service_judge_timeout(service: MemoryService) -> float | None:
    """Explicit writes ask the model too when there is one (as extraction does)."""
    return 5.0 if service.llm is not None else None


async def evaluate(
    service: MemoryService,
    pairs: list[dict[str, Any]],
    *,
    project: str,
    before_second: Callable[[dict[str, Any], WriteResult], None] | None = None,
) -> Scores:
    """Score every pair; ``before_second(pair, first)`` lets a scripted model know
    which pair it is judging. A pair with a question (``q``) is also recalled with it
    as the chat would (top 5): the newer version must come first, the older after it
    or not at all."""
    scores = Scores()
    for pair in pairs:
        tally = scores.by_language.setdefault(pair["lang"], Tally())
        first = await write(service, pair["a"], project)
        if before_second is not None:
            before_second(pair, first)
        second = await write(service, pair["b"], project)
        await service.consolidated()
        old = await service.get(first.memory.id)
        new = await service.get(second.memory.id)
        merged = second.memory.id == first.memory.id or (old is not None and old.status is not Status.ACTIVE)
        linked = not merged and new is not None and new.restates == first.memory.id
        if pair["label"] == "restates":
            tally.restates += 1
            tally.merged_restates += merged
            tally.linked_restates += linked
            if not (merged or linked):
                scores.misses.append(pair["id"])
            if "q" in pair:
                tally.asked += 1
                if await _newer_first(service, pair["q"], first.memory.id, second.memory.id, project):
                    tally.newer_first += 1
                else:
                    scores.stale_first.append(pair["id"])
        else:
            tally.distinct += 1
            tally.merged_distinct += merged
            tally.linked_distinct += linked
            if merged:
                scores.lost.append(pair["id"])
            if linked:
                scores.linked_apart.append(pair["id"])
        for memory in await service.list(statuses=[Status.ACTIVE, Status.QUARANTINED]):
            await service.forget(memory.id, reason="identity corpus: next pair")
    return scores


async def _newer_first(service: MemoryService, question: str, older: int, newer: int, project: str) -> bool:
    ids = (await service.recall(question, project=project, k=5, record=False)).ids
    return newer in ids and (older == newer or older not in ids or ids.index(newer) < ids.index(older))
