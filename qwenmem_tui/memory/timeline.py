"""A fact over time: its versions (``memory history``) and what was true on a date
(``memory search --as-of``).

Every row knows when it was stated and, once a newer version replaced it, until when
it held (``stated_at``, ``valid_until``); ``superseded_by`` links a version to the one
that replaced it, whatever key that one has (identity may file a restatement under
another key). A fact's versions are the rows linked that way, and the audit trail
says who made each change and why — the history is read from those, never kept twice.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from qwenmem_tui.memory.model import AuditAction, AuditEntry, Memory, Status
from qwenmem_tui.memory.store import RowQuery

if TYPE_CHECKING:
    import numpy as np

    from qwenmem_tui.memory.service import MemoryService

# A version that was once the fact's value: quarantined rows never were.
WAS_TRUE = (Status.ACTIVE, Status.SUPERSEDED, Status.EXPIRED)
_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# The replacing write's reason names who found the two one fact when it was not the
# writer's own key (writer: "same fact as key K (model)" or "(rule)"; the idle pass:
# "decided later by the model"): the model or the rule decided, whoever's write it was.
_BY_MODEL = re.compile(r"\(model\)|decided later by the model")
_BY_RULE = re.compile(r"same fact as key \S+ \(rule\)")


def parse_moment(text: str, *, end_of_day: bool = False) -> float:
    """An ISO 8601 date or date-time as unix seconds (no zone: UTC). A bare date is
    its start, or with ``end_of_day`` its last second ("true on that day").
    ValueError names what was expected."""
    text = text.strip()
    try:
        if _DATE_ONLY.match(text):
            day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
            return day.timestamp() + (86399.0 if end_of_day else 0.0)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"expected an ISO 8601 date or date-time (2026-03-01, 2026-03-01T14:30:00Z), "
            f"got {text[:40]!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return float(calendar.timegm(moment.utctimetuple())) + moment.microsecond / 1e6


def true_at(memories: Iterable[Memory], at: float) -> list[Memory]:
    """The versions that held at ``at``: stated by then, not yet replaced, not yet
    expired, and once the fact's value (not held for review, not deleted). Of one
    fact's versions (linked by supersession, or one key) only the latest stated by
    then: a version restored later reads as current since its statement, but the
    newer one said in between was the truth meanwhile."""
    memories = list(memories)
    held = [
        m
        for m in memories
        if m.status in WAS_TRUE
        and m.stated_at <= at
        and (m.valid_until is None or at < m.valid_until)
        and (m.expires_at is None or at < m.expires_at)
    ]
    fact = _facts(memories)
    latest: dict[int, Memory] = {}
    for m in held:
        mine = latest.get(fact[m.id])
        if mine is None or (m.stated_at, m.id) > (mine.stated_at, mine.id):
            latest[fact[m.id]] = m
    kept = {m.id for m in latest.values()}
    return [m for m in held if m.id in kept]


def _facts(memories: Sequence[Memory]) -> dict[int, int]:
    """Memory id -> one id naming its fact: rows joined by supersession or by sharing
    (scope, category, key), transitively."""
    parent = {m.id: m.id for m in memories}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[tuple[str, str, str], int] = {}
    for m in memories:
        links = [first.setdefault((m.scope, str(m.category), m.key), m.id)]
        if m.superseded_by in parent:
            links.append(m.superseded_by)
        for other in links:
            parent[root(m.id)] = root(other)
    return {m.id: root(m.id) for m in memories}


@dataclass
class Version:
    """One version of a fact, with what replaced it and the audit's account of it."""

    memory: Memory
    replaced_by: int | None
    # Who replaced it: "model" or "rule" when either found the two one fact, else the
    # audit's origin (user, tool, agent, system).
    decided_by: str | None
    why: str  # the audit's reasons for the replacement, joined
    events: list[AuditEntry] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.memory.to_json(),
            "replaced_by": self.replaced_by,
            "decided_by": self.decided_by,
            "why": self.why,
            "events": [
                {"action": str(e.action), "origin": e.origin, "at": e.at, "reason": e.reason}
                for e in self.events
            ],
        }


def _decider(why: str) -> str | None:
    """"model" or "rule" when the replacement's reasons say one of them found the two
    one fact; None: the writer's own key did (its origin decided)."""
    if _BY_MODEL.search(why):
        return "model"
    return "rule" if _BY_RULE.search(why) else None


def versions_of(start: Sequence[Memory], rows: Sequence[Memory]) -> list[Memory]:
    """Every row linked to ``start`` by supersession or by an undecided ``restates``
    link (either way, transitively), oldest statement first."""
    by_id = {m.id: m for m in rows}
    linked: dict[int, list[int]] = {}
    for m in rows:
        for other in (m.superseded_by, m.restates):
            if other is not None:
                linked.setdefault(other, []).append(m.id)
    seen: set[int] = set()
    todo = [m.id for m in start]
    while todo:
        memory_id = todo.pop()
        if memory_id in seen or memory_id not in by_id:
            continue
        seen.add(memory_id)
        m = by_id[memory_id]
        todo += [*linked.get(memory_id, ()), *(i for i in (m.superseded_by, m.restates) if i is not None)]
    return sorted((by_id[i] for i in seen), key=lambda m: (m.stated_at, m.id))


def timeline(versions: Sequence[Memory], audit: Sequence[AuditEntry]) -> list[Version]:
    """Each version with the audit entries about it, and the replacement's account:
    who superseded it and why (the supersede entry, then the replacing write's own
    reason, e.g. which judgement found it the same fact)."""
    events: dict[int, list[AuditEntry]] = {}
    # By time: a restored backup's trail (its original times) precedes the restore.
    for entry in sorted(audit, key=lambda e: (e.at, e.id)):
        events.setdefault(entry.memory_id, []).append(entry)
    out = []
    for m in versions:
        mine = events.get(m.id, [])
        replaced_by = m.superseded_by if m.status is Status.SUPERSEDED else None
        decided_by, why = None, ""
        if replaced_by is not None:
            gone = [e for e in mine if e.action is AuditAction.SUPERSEDE][-1:]
            # The replacing row's own account of that moment: the write, approval or
            # restore made in the same transaction (the same time).
            made = [
                e
                for e in events.get(replaced_by, [])
                if e.action in (AuditAction.CREATE, AuditAction.APPROVE, AuditAction.RESTORE)
                and (not gone or e.at == gone[0].at)
            ][:1]
            why = "; ".join(dict.fromkeys(e.reason for e in gone + made if e.reason))
            if gone:
                decided_by = _decider(why) or gone[0].origin
        out.append(Version(m, replaced_by, decided_by, why, mine))
    return out


async def history(service: MemoryService, which: str, *, project: str) -> list[Version]:
    """The timeline of the fact named by ``which`` (a memory id, or a key) as seen from
    ``project``: [] when there is no such memory. Its versions are read link by link
    (a few rows a hop), never the whole store."""
    if which.isascii() and which.isdigit():
        one = await service.get(int(which), project=project)
        start = [] if one is None else [one]
    else:
        start = await service.rows(RowQuery(key=which), project=project)
    if not start:
        return []
    rows = {m.id: m for m in start}
    todo = set(rows)
    while todo:
        # One hop: the rows of these ids, those they supersede or restate, and those
        # superseding or restating them.
        ahead = {i for m in (rows[i] for i in todo) for i in (m.superseded_by, m.restates) if i is not None}
        found = await service.rows(RowQuery(linked=sorted(todo | ahead)), project=project)
        todo = {m.id for m in found} - set(rows)
        rows.update((m.id, m) for m in found)
    versions = versions_of(start, list(rows.values()))
    audit = [e for m in versions for e in await service.audit(m.id, project=project)]
    return timeline(versions, audit)


async def recall_as_of(
    service: MemoryService, query: str, *, project: str, at: float, k: int | None = None
) -> list[tuple[Memory, float]]:
    """Recall over what was true at ``at``: the same two channels, fusion and threshold
    as the chat's recall, over the versions that held then (older versions left the
    index when they were replaced, so they are embedded here, for this one query)."""
    import numpy as np

    from qwenmem_tui.memory.lexical import coverage, query_terms
    from qwenmem_tui.memory.recall import Candidate, fuse, passes

    rows = true_at(await service.list(project=project, statuses=WAS_TRUE), at)
    if not rows or not query.strip():
        return []
    await service.vectors.load()
    recaller = service.recaller
    embedder = recaller.embedder
    q = (await embedder.embed_queries([query]))[0]
    passages = await _passages(service, rows)
    norms = np.linalg.norm(passages, axis=1) * (np.linalg.norm(q) or 1.0)
    cosines = (passages @ q) / np.where(norms == 0, 1.0, norms)
    terms = query_terms(query)
    covered = [coverage(terms, m.key, m.value) for m in rows]
    dense = sorted(range(len(rows)), key=lambda i: -cosines[i])
    lexical = sorted((i for i in range(len(rows)) if covered[i] > 0), key=lambda i: -covered[i])
    fused = fuse(lexical, dense, lexical_weight=recaller.lexical_weight)
    found = [
        Candidate(
            rows[i],
            fused[i],
            float(cosines[i]),
            covered[i] if covered[i] > 0 else None,
            covered[i],
        )
        for i in sorted(fused, key=lambda i: (-fused[i], rows[i].id))
    ]
    kept = [c for c in found if passes(c, recaller.threshold)]
    return [(c.memory, c.score) for c in kept[: k or recaller.top_k]]


async def _passages(service: MemoryService, rows: Sequence[Memory]) -> np.ndarray:
    """The rows' vectors: the stored ones of rows still active, the others (replaced
    versions dropped theirs) embedded now."""
    import numpy as np

    embedder = service.recaller.embedder
    ids, stored = await service.store.vectors(embedder.id, [m.id for m in rows])
    have = {int(i): v for i, v in zip(ids, stored, strict=True)}
    missing = [m for m in rows if m.id not in have]
    if missing:
        fresh = await embedder.embed_passages([m.embed_text() for m in missing])
        have.update({m.id: v for m, v in zip(missing, fresh, strict=True)})
    return np.stack([np.asarray(have[m.id], dtype=np.float32) for m in rows])
