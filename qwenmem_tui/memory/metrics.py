"""Is memory helping, and is it trustworthy? Hit rate, staleness, poisoning flag rate,
and the two trust rates (model writes made while reading files that were held; facts
the user stated that were stored active), from stored counters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from qwenmem_tui.memory.model import DAY


@dataclass(frozen=True)
class MemoryStats:
    recalls: int
    recall_hits: int
    recalled_memories: int
    writes: int
    quarantined_writes: int
    counts: dict[str, int]
    mean_recalled_age_s: float  # staleness: mean age of what recall returned
    deliveries: dict[str, int] = field(default_factory=dict)  # prefetch point -> count
    untrusted_writes: int = 0  # model writes with files in view, not the user's words
    untrusted_held: int = 0
    user_stated_writes: int = 0  # /remember, or a model write grounded in the user's words
    user_stated_active: int = 0
    secrets_redacted: int = 0  # writes stored with a secret span cut out
    secrets_refused: int = 0  # writes refused: a secret and nothing else, or one in the key
    recall: str = ""  # which channels recall uses, and why when lexical-only
    recall_note: str = ""  # set when recall fell back to lexical-only: the reason
    reviewed: int = 0  # active memories a person kept in the sampled review
    reviewed_of: int = 0  # active memories
    turn_tokens: dict[int, int] = field(default_factory=dict)  # bucket top -> replies

    def tokens_at(self, share: float) -> int | None:
        """The memory tokens a reply carried at this percentile (the top of its
        TOKEN_STEP bucket), over replies that carried memory; None before any."""
        total = sum(self.turn_tokens.values())
        if not total:
            return None
        seen = 0
        for top in sorted(self.turn_tokens):
            seen += self.turn_tokens[top]
            if seen >= share * total:
                return top
        return max(self.turn_tokens)

    @property
    def reviewed_share(self) -> float:
        """Active memories a person has reviewed / all active ones."""
        return self.reviewed / self.reviewed_of if self.reviewed_of else 0.0

    @property
    def hit_rate(self) -> float:
        """Recalls that returned at least one memory / all recalls."""
        return self.recall_hits / self.recalls if self.recalls else 0.0

    @property
    def poisoning_flag_rate(self) -> float:
        """Writes quarantined by the guard / all writes."""
        return self.quarantined_writes / self.writes if self.writes else 0.0

    @property
    def untrusted_held_rate(self) -> float:
        """Model writes made while reading files (not the user's words) held for review."""
        return self.untrusted_held / self.untrusted_writes if self.untrusted_writes else 0.0

    @property
    def user_stated_active_rate(self) -> float:
        """Facts the user stated that were stored active (not held)."""
        return (
            self.user_stated_active / self.user_stated_writes if self.user_stated_writes else 0.0
        )

    @property
    def secret_write_rate(self) -> float:
        """Writes that carried a secret (cut out, or refused) / all write attempts."""
        attempts = self.writes + self.secrets_refused
        caught = self.secrets_redacted + self.secrets_refused
        return caught / attempts if attempts else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "recalls": self.recalls,
            "recall_hits": self.recall_hits,
            "hit_rate": round(self.hit_rate, 4),
            "recalled_memories": self.recalled_memories,
            "staleness_days": round(self.mean_recalled_age_s / DAY, 3),
            "writes": self.writes,
            "quarantined_writes": self.quarantined_writes,
            "poisoning_flag_rate": round(self.poisoning_flag_rate, 4),
            "untrusted_writes": self.untrusted_writes,
            "untrusted_held": self.untrusted_held,
            "untrusted_held_rate": round(self.untrusted_held_rate, 4),
            "user_stated_writes": self.user_stated_writes,
            "user_stated_active": self.user_stated_active,
            "user_stated_active_rate": round(self.user_stated_active_rate, 4),
            "secrets_redacted": self.secrets_redacted,
            "secrets_refused": self.secrets_refused,
            "secret_write_rate": round(self.secret_write_rate, 4),
            "counts": dict(self.counts),
            "deliveries": dict(self.deliveries),
            "recall": self.recall,
            "reviewed": self.reviewed,
            "reviewed_share": round(self.reviewed_share, 4),
            "memory_tokens_per_reply": {
                "replies": sum(self.turn_tokens.values()),
                "p50": self.tokens_at(0.5),
                "p95": self.tokens_at(0.95),
            },
        }

    def to_text(self) -> str:
        lines = [
            f"recall hit rate      {self.hit_rate:6.1%}"
            f"  ({self.recall_hits}/{self.recalls} recalls)",
            f"staleness            {self.mean_recalled_age_s / DAY:6.1f} days"
            " (mean age of recalled memories)",
            f"poisoning flag rate  {self.poisoning_flag_rate:6.1%}"
            f"  ({self.quarantined_writes}/{self.writes} writes)",
            f"held from files      {self.untrusted_held_rate:6.1%}"
            f"  ({self.untrusted_held}/{self.untrusted_writes} model writes while reading files,"
            " not the user's words)",
            f"user facts kept      {self.user_stated_active_rate:6.1%}"
            f"  ({self.user_stated_active}/{self.user_stated_writes} user-stated writes stored active)",
            f"reviewed             {self.reviewed_share:6.1%}"
            f"  ({self.reviewed}/{self.reviewed_of} active memories kept in a sampled review)",
            f"secrets caught       {self.secret_write_rate:6.1%}"
            f"  ({self.secrets_redacted} writes stored with the secret cut out,"
            f" {self.secrets_refused} refused as nothing but a secret)",
            "counts by status     " + ", ".join(f"{k} {v}" for k, v in self.counts.items()),
        ]
        if self.recall:
            lines.append(f"recall               {self.recall}")
        if self.deliveries:
            lines.append(
                "deliveries           "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.deliveries.items()))
            )
        if self.turn_tokens:
            lines.append(
                f"memory tokens/reply  p50 ≤{self.tokens_at(0.5)}, p95 ≤{self.tokens_at(0.95)}"
                f"  ({sum(self.turn_tokens.values())} replies that carried memory)"
            )
        late = self.deliveries.get("late", 0)
        if late:
            lines.append(
                f"late recalls         {late:6d}  (not ready when a reply without tool calls"
                " was requested: that message went without its memory)"
            )
        return "\n".join(lines)


DELIVERY_PREFIX = "delivery_"
TOKENS_PREFIX = "reply_memory_tokens_"
TOKEN_STEP = 25
"""Replies are counted by the memory tokens they carried in buckets this wide: the
store keeps counters, and p50/p95 to 25 tokens is what a budget needs."""


def token_bucket(tokens: int) -> str:
    """The counter of replies that carried about ``tokens`` memory tokens."""
    top = max(1, -(-tokens // TOKEN_STEP)) * TOKEN_STEP
    return f"{TOKENS_PREFIX}{top}"


def compute_stats(
    counters: Mapping[str, float],
    counts: Mapping[str, int],
    *,
    recall: str = "",
    recall_note: str = "",
) -> MemoryStats:
    """Pure: the store's raw counters and status counts -> the dashboard numbers."""
    recalled = int(counters.get("recalled_memories", 0))
    return MemoryStats(
        recalls=int(counters.get("recalls", 0)),
        recall_hits=int(counters.get("recall_hits", 0)),
        recalled_memories=recalled,
        writes=int(counters.get("writes", 0)),
        quarantined_writes=int(counters.get("quarantined_writes", 0)),
        counts=dict(counts),
        mean_recalled_age_s=counters.get("recalled_age_sum", 0.0) / recalled if recalled else 0.0,
        untrusted_writes=int(counters.get("untrusted_writes", 0)),
        untrusted_held=int(counters.get("untrusted_held", 0)),
        user_stated_writes=int(counters.get("user_stated_writes", 0)),
        user_stated_active=int(counters.get("user_stated_active", 0)),
        secrets_redacted=int(counters.get("secrets_redacted", 0)),
        secrets_refused=int(counters.get("secrets_refused", 0)),
        deliveries={
            name[len(DELIVERY_PREFIX) :]: int(v)
            for name, v in counters.items()
            if name.startswith(DELIVERY_PREFIX)
        },
        recall=recall,
        recall_note=recall_note,
        turn_tokens={
            int(name[len(TOKENS_PREFIX) :]): int(v)
            for name, v in counters.items()
            if name.startswith(TOKENS_PREFIX) and name[len(TOKENS_PREFIX) :].isdigit()
        },
    )
