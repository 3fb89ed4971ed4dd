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

from qwenmem_tui.features.memory.model import Origin, Status, WriteResult
from qwenmem_tui.features.memory.service import MemoryService

CORPUS = Path(__file__).with_name("identity_corpus.jsonl")


def load_pairs(path: Path = CORPUS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class Scores:
    merged_restates: int = 0
    restates: int = 0
    merged_distinct: int = 0
    distinct: int = 0
    misses: list[str] = field(default_factory=list)  # restatements kept apart
    lost: list[str] = field(default_factory=list)  # distinct facts merged

    @property
    def precision(self) -> float:
        merged = self.merged_restates + self.merged_distinct
        return self.merged_restates / merged if merged else 1.0

    @property
    def recall(self) -> float:
        return self.merged_restates / self.restates if self.restates else 1.0

    def line(self, name: str) -> str:
        return (
            f"{name}: merge precision {self.precision:.3f}, recall {self.recall:.3f} "
            f"({self.merged_restates}/{self.restates} restatements merged, "
            f"{self.merged_distinct}/{self.distinct} distinct pairs merged)"
        )


async def write(service: MemoryService, item: Mapping[str, str], project: str) -> WriteResult:
    if "text" in item:
        return await service.remember(item["text"], project=project)
    return await service.save(
        item["category"], item["key"], item["value"], origin=Origin.TOOL, project=project,
        judge_timeout=service_judge_timeout(service),
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
    which pair it is judging."""
    scores = Scores()
    for pair in pairs:
        first = await write(service, pair["a"], project)
        if before_second is not None:
            before_second(pair, first)
        second = await write(service, pair["b"], project)
        old = await service.get(first.memory.id)
        merged = second.memory.id == first.memory.id or (old is not None and old.status is not Status.ACTIVE)
        if pair["label"] == "restates":
            scores.restates += 1
            scores.merged_restates += merged
            if not merged:
                scores.misses.append(pair["id"])
        else:
            scores.distinct += 1
            scores.merged_distinct += merged
            if merged:
                scores.lost.append(pair["id"])
        for memory in await service.list(statuses=[Status.ACTIVE, Status.QUARANTINED]):
            await service.forget(memory.id, reason="identity corpus: next pair")
    return scores
