"""`memory export` and `memory import`: a backup that restores exactly, an import
that never loses a line.

Export writes every memory of the user (all statuses) as JSON lines, with what a
restore needs to reproduce the active set: key, value, category, scope, origin,
flags (``from_file``…), times and exact expiry, and the review decision
(``"approved": true`` for a memory a person approved out of quarantine).

Import is one pipeline (``import_rows``) every source feeds — JSON lines here, the
``--from`` parsers of other tools: each row is validated and passes the guard
(``MemoryService.prepare``), then all are embedded in batches and committed in
order (``MemoryService.commit_many``), so a bulk import costs about what the
embedder costs. Keys are kept as given (identity never rewrites an explicit key), and
equal values under different keys are never merged. A line exported by qwenmem
(it has ``id`` and ``status``) is a backup row: it keeps its scope and is restored
as it was, without identity merging it into a neighbour — the backup's active set
was already decided. A hand-written line lands its project memories in the
importing project unless ``keep_scope``: a file must not plant facts in other
projects by naming them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qwenmem_tui.features.memory.model import (
    DAY,
    GLOBAL_SCOPE,
    LABEL_FLAGS,
    AuditAction,
    Origin,
    Status,
    WriteAction,
    WriteResult,
    export_line,
    holds,
)
from qwenmem_tui.features.memory.provenance import Provenance
from qwenmem_tui.storage.database import DiskFull

if TYPE_CHECKING:
    from qwenmem_tui.features.memory.index import Progress
    from qwenmem_tui.features.memory.service import MemoryService
    from qwenmem_tui.features.memory.writer import PendingWrite

# Imported times must be real moments: not NaN or infinite (they never expire), not
# before 2000, not more than a day ahead of now (a future created_at never expires).
_MIN_TIME = 946_684_800.0
_FUTURE_SLACK = 86400.0
_MAX_TTL_DAYS = 36_500

# What a line of an import is, for the summary ("by line: 29 facts, 2 held, …").
KIND_FACT = "facts"
KIND_HELD = "held"
KIND_HISTORY = "history"  # superseded, expired or deleted in the backup: not restored
KIND_INVALID = "invalid"
KINDS = (KIND_FACT, KIND_HELD, KIND_HISTORY, KIND_INVALID)
ACTIONS = ("created", "superseded", "refreshed", "deduplicated", "quarantined", "skipped", "rejected")


@dataclass
class ImportReport:
    counts: dict[str, int] = field(default_factory=dict)  # WriteAction / "rejected" / "skipped"
    errors: list[str] = field(default_factory=list)  # "line N: why"
    kinds: dict[str, int] = field(default_factory=dict)  # KINDS
    ids: list[int] = field(default_factory=list)  # the memories written, in line order
    stopped: str | None = None
    """Why the import stopped early (a full disk): the lines before it are kept."""
    stopped_at: int | None = None  # the line it stopped at

    def add(self, what: str, kind: str | None = None) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        if kind is not None:
            self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def summary(self) -> str:
        """The lines `memory import` prints: what it did, and what the lines were."""
        counts = ", ".join(f"{name} {self.counts.get(name, 0)}" for name in ACTIONS)
        kinds = ", ".join(f"{self.kinds.get(kind, 0)} {kind}" for kind in KINDS)
        return f"imported {sum(self.counts.values())} lines: {counts}\nby line: {kinds}"


# -- export ------------------------------------------------------------------------------


async def export_lines(service: MemoryService) -> list[str]:
    """Every memory of this user as JSON lines, all statuses (a full backup)."""
    rows = await service.store.list(user=service.user)
    approved = {
        e.memory_id for e in await service.store.audit(None) if e.action is AuditAction.APPROVE
    }
    return [export_line(m, approved=m.id in approved and m.status is Status.ACTIVE) for m in rows]


# -- import ------------------------------------------------------------------------------


async def import_lines(
    service: MemoryService,
    lines: Iterable[str],
    *,
    project: str,
    keep_scope: bool = False,
    trusted: bool = False,
    progress: Progress | None = None,
) -> ImportReport:
    """JSON lines through ``import_rows``; a line that is not a JSON object with
    string category, key and value is rejected with its line number."""
    rows: list[tuple[int, Mapping[str, Any]]] = []
    report = ImportReport()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, parse_line(line)))
        except ValueError as exc:
            report.add("rejected", KIND_INVALID)
            report.errors.append(f"line {number}: {exc}")
    return await import_rows(
        service,
        rows,
        project=project,
        keep_scope=keep_scope,
        trusted=trusted,
        progress=progress,
        report=report,
    )


async def import_rows(
    service: MemoryService,
    rows: Sequence[tuple[int, Mapping[str, Any]]],
    *,
    project: str,
    keep_scope: bool = False,
    trusted: bool = False,
    progress: Progress | None = None,
    report: ImportReport | None = None,
) -> ImportReport:
    """The import pipeline: ``(line number, row)`` pairs, validated and guarded, then
    embedded in batches and written in order. Old rows of a backup (superseded,
    expired, deleted) are skipped so a restore never resurrects a replaced value; a
    row exported as quarantined stays held. Importing the same rows twice changes
    nothing new.

    Unless ``trusted`` (``--trust``: the person says the rows are their own words),
    the rows are file content: judged like text the model read in a file; the origin
    a row claims is kept as its label and in the audit, never believed. Trusted, a
    backup row a person approved out of quarantine is approved again if the guard
    holds it. A full disk stops the import: what came before is kept, and
    ``report.stopped``/``stopped_at`` say where it stopped.
    """
    report = report or ImportReport()
    pending: list[tuple[int, Mapping[str, Any], PendingWrite]] = []
    now = service.clock()
    for number, row in rows:
        try:
            if row.get("status", Status.ACTIVE.value) not in (
                Status.ACTIVE.value,
                Status.QUARANTINED.value,
            ):
                report.add("skipped", KIND_HISTORY)
                continue
            item = await _prepare(service, row, project=project, keep_scope=keep_scope,
                            trusted=trusted, now=now)
        except ValueError as exc:  # MemoryRejected is a ValueError
            report.add("rejected", KIND_INVALID)
            report.errors.append(f"line {number}: {exc}")
            continue
        if item is None:  # past its exact expiry: history, not a fact to restore
            report.add("skipped", KIND_HISTORY)
            continue
        pending.append((number, row, item))
    done: list[WriteResult] = []
    try:
        await service.commit_many(
            [p for _, _, p in pending],
            progress=progress,
            on_result=done.append,
        )
    except DiskFull as exc:
        # Each write is its own transaction: what came before is committed, this line
        # was rolled back. Stop and say how far it got, not a traceback.
        report.stopped, report.stopped_at = str(exc), pending[len(done)][0]
    for (_, row, _), result in zip(pending, done, strict=False):
        await _count(service, report, row, result, trusted=trusted)
    return report


async def _count(
    service: MemoryService,
    report: ImportReport,
    row: Mapping[str, Any],
    result: WriteResult,
    *,
    trusted: bool,
) -> None:
    action = result.action
    if action is WriteAction.QUARANTINED and trusted and row.get("approved") is True:
        if await service.approve(result.memory.id, reason="approved before export") is not None:
            action = WriteAction.CREATED
    kind = KIND_HELD if row.get("status") == Status.QUARANTINED.value else KIND_FACT
    report.add(action.value, kind)
    report.ids.append(result.memory.id)


async def _prepare(
    service: MemoryService,
    row: Mapping[str, Any],
    *,
    project: str,
    keep_scope: bool,
    trusted: bool,
    now: float,
) -> PendingWrite | None:
    """One row as a guarded pending write; None when its exact expiry has passed."""
    origin = row.get("origin", Origin.USER.value)
    if origin not in {o.value for o in Origin}:
        raise ValueError(f"origin must be user, tool or agent, got {origin!r}")
    backup = is_backup_row(row)
    scope = row.get("scope") or None
    if scope is not None and not isinstance(scope, str):
        raise ValueError(f"scope must be a string, got {scope!r}")
    if scope == "project":  # hand-written: this project, as "global" is every one
        scope = project
    elif scope != GLOBAL_SCOPE and not (keep_scope or backup):
        scope = None  # another project's path: the category's default here
    flags = row.get("flags")
    listed = [f for f in flags if isinstance(f, str)] if isinstance(flags, list) else []
    hold: list[str] = []
    if row.get("status") == Status.QUARANTINED.value:
        hold = [f for f in listed if holds([f])] or ["held_before_export"]
    created_at = _import_time(row.get("created_at"), now)
    expires_at = _import_expiry(row.get("expires_at"), created_at) if backup else None
    if expires_at is not None and expires_at <= now:
        return None
    pending = await service.prepare(
        _text(row, "category"),
        _text(row, "key"),
        _text(row, "value"),
        origin=origin,
        provenance=Provenance.imported(trusted=trusted),
        project=project,
        ttl_days=_import_ttl(row.get("ttl_days")),
        scope=scope,
        created_at=created_at,
        expires_at=expires_at,
        reason="import --trust" if trusted else f"import; claimed origin {origin}",
        hold=hold,
        labels=[f for f in listed if f in LABEL_FLAGS],
    )
    # A backup's active set was already decided: restored as it was, not merged.
    pending.decide_identity = not backup
    approved = trusted and row.get("approved") is True and holds([*pending.flags, *listed])
    if backup and (hold or approved):
        # Held, or held once and approved by the person: the flags it carried then, so
        # it is held again and approved again (``_count``) — the review decision and
        # why it was needed both survive, even when the restore alone would not hold it.
        pending.flags = list(dict.fromkeys([*hold, *listed])) or pending.flags
    return pending


def is_backup_row(row: Mapping[str, Any]) -> bool:
    """A line `memory export` wrote (it names its id and status), not a hand-written one."""
    return isinstance(row.get("id"), int) and isinstance(row.get("status"), str)


def _text(row: Mapping[str, Any], name: str) -> str:
    value = row.get(name)
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def parse_line(line: str) -> dict[str, Any]:
    """One import line as a dict with string category, key and value (ValueError names
    what is wrong, never with a JSON library's wording alone)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    missing = [f for f in ("category", "key", "value") if f not in row]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    for name in ("category", "key", "value"):
        _text(row, name)
    return row


def _finite_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _import_ttl(value: Any) -> int | None:
    """A whole number of days from 1 to 100 years (the TTL policy then caps it)."""
    if value is None:
        return None
    days = _finite_number("ttl_days", value)
    if days != int(days) or not 1 <= days <= _MAX_TTL_DAYS:
        raise ValueError(f"ttl_days must be a whole number of days from 1 to {_MAX_TTL_DAYS}, got {value!r}")
    return int(days)


def _import_time(value: Any, now: float) -> float | None:
    """A real past moment: a far-future created_at would never expire."""
    if value is None:
        return None
    at = _finite_number("created_at", value)
    if not _MIN_TIME <= at <= now + _FUTURE_SLACK:
        raise ValueError(
            f"created_at must be a unix time between 2000-01-01 and now, got {value!r}"
        )
    return at


def _import_expiry(value: Any, created_at: float | None) -> float | None:
    """A backup's exact expiry: after its creation, within 100 years of it."""
    if value is None:
        return None
    at = _finite_number("expires_at", value)
    start = created_at if created_at is not None else _MIN_TIME
    if not start < at <= start + _MAX_TTL_DAYS * DAY:
        raise ValueError(f"expires_at must be after created_at and within {_MAX_TTL_DAYS} days, got {value!r}")
    return at
