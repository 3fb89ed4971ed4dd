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
import re
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.memory.model import (
    DAY,
    FLAG_DIALOGUE,
    GLOBAL_SCOPE,
    LABEL_FLAGS,
    AuditAction,
    AuditEntry,
    Origin,
    Status,
    WriteAction,
    WriteRequest,
    WriteResult,
    Memory,
    content_hash,
    export_line,
    holds,
    speaker_label,
    turn_context,
)
from qwenmem_tui.memory.addressee import calling_assistant
from qwenmem_tui.memory.guard import KEY_PATTERN, MAX_VALUE_CHARS
from qwenmem_tui.memory.provenance import Provenance
from qwenmem_tui.memory.store import RowQuery
from qwenmem_tui.memory.timeline import parse_moment
from qwenmem_tui.memory.write_plan import (
    AuditValues,
    HistoryRow,
    NewRow,
    PlannedStore,
)
from qwenmem_tui.storage.database import DiskFull

if TYPE_CHECKING:
    from qwenmem_tui.memory.index import Progress
    from qwenmem_tui.memory.service import MemoryService
    from qwenmem_tui.memory.writer import PendingWrite

# Imported times must be real moments: not NaN or infinite (they never expire), not
# before 2000, not more than a day ahead of now (a future created_at never expires).
EXPORT_PAGE = 2000
"""Rows `export_lines` reads at a time."""
_MIN_TIME = 946_684_800.0
_FUTURE_SLACK = 86400.0
_MAX_TTL_DAYS = 36_500

# What became of a line: each line counts once, under one of these.
IMPORTED = ("created", "superseded", "refreshed", "deduplicated")
HELD = "quarantined"  # stored, held for review
HISTORY = "history"  # an older version of a backup, restored as history (--trust)
SKIPPED = "skipped"  # history without --trust, or past its exact expiry: not restored
REJECTED = "rejected"
ACTIONS = (*IMPORTED, HELD, HISTORY, SKIPPED, REJECTED)


@dataclass
class ImportReport:
    counts: dict[str, int] = field(default_factory=dict)  # ACTIONS: one per line
    errors: list[str] = field(default_factory=list)  # "line N: why"
    outcomes: list[tuple[int, str]] = field(default_factory=list)  # (line, what became of it)
    ids: list[int] = field(default_factory=list)  # the memories written, in line order
    renumbered: dict[int, int] = field(default_factory=dict)  # backup id -> new id
    stopped: str | None = None
    """Why the import stopped early (a full disk): the lines before it are kept."""
    stopped_at: int | None = None  # the line it stopped at

    def add(self, what: str, number: int | None = None, outcome: str = "") -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        if number is not None and outcome:
            self.outcomes.append((number, outcome))

    def by_line(self) -> list[str]:
        """What became of each line, in line order: "line N: ..."."""
        return [f"line {n}: {text}" for n, text in sorted(self.outcomes, key=lambda o: o[0])]

    def reject(self, number: int, why: str) -> None:
        self.add(REJECTED, number, f"rejected: {why}")
        self.errors.append(f"line {number}: {why}")

    @property
    def imported(self) -> int:
        return sum(self.counts.get(name, 0) for name in IMPORTED)

    @property
    def rejected(self) -> int:
        return self.counts.get(REJECTED, 0)

    def summary(self) -> str:
        """The line `memory import` (and its dry run) prints: every line counted once,
        under what became of it."""
        parts = ", ".join(f"{name} {self.counts.get(name, 0)}" for name in IMPORTED)
        return (
            f"imported {self.imported} ({parts}); quarantined {self.counts.get(HELD, 0)} "
            "(held for review); "
            f"history restored {self.counts.get(HISTORY, 0)}; skipped "
            f"{self.counts.get(SKIPPED, 0)}; rejected {self.rejected}"
        )


# -- export ------------------------------------------------------------------------------


async def export_lines(service: MemoryService) -> list[str]:
    """Every memory of this user as JSON lines, all statuses (a full backup), each with
    its audit trail, so a restore keeps every version's account of who changed it."""
    trail: dict[int, list[AuditEntry]] = {}
    for entry in await service.store.audit(None):
        trail.setdefault(entry.memory_id, []).append(entry)
    approved = {
        i for i, entries in trail.items() if any(e.action is AuditAction.APPROVE for e in entries)
    }
    # A page of rows at a time: a store of years held as Memory objects all at once
    # was most of `memory export`'s peak (988 MiB at 100k); its lines are a third.
    lines: list[str] = []
    page = RowQuery(user=service.user, limit=EXPORT_PAGE)
    while rows := await service.store.rows(page):
        lines += [
            export_line(
                m, approved=m.id in approved and m.status is Status.ACTIVE, audit=trail.get(m.id, ())
            )
            for m in rows
        ]
        page = replace(page, after=rows[-1].id)
    return lines


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
    """JSON lines through ``import_rows``; a line that is not a JSON object with a
    string value (and, when given, string category and key) is rejected with its line
    number."""
    rows: list[tuple[int, Mapping[str, object]]] = []
    report = ImportReport()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, parse_line(line)))
        except ValueError as exc:
            report.reject(number, str(exc))
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
    rows: Sequence[tuple[int, Mapping[str, object]]],
    *,
    project: str,
    keep_scope: bool = False,
    trusted: bool = False,
    progress: Progress | None = None,
    report: ImportReport | None = None,
) -> ImportReport:
    """The import pipeline: ``(line number, row)`` pairs, validated and guarded, then
    embedded in batches and written in order. A row exported as quarantined stays held.
    Importing the same rows twice changes nothing new.

    Unless ``trusted`` (``--trust``: the person says the rows are their own words),
    a row's origin, scope, status and times are claims, not facts: judged like text
    the model read in a file, stored with origin ``tool`` when it claims ``user``, in
    this project (or everywhere, for facts about the person), with the category's
    lifetime, and a backup's older versions are not restored (``skipped``). Trusted,
    a backup is restored as it was: its scopes, exact expiries, approvals, and its
    history (older versions linked to what replaced them, their audit trail kept).
    A full disk stops the import: what came before is kept, and
    ``report.stopped``/``stopped_at`` say where it stopped.
    """
    report = report or ImportReport()
    rows, speech, continued = split_long_turns(rows, dialogue_turns([row for _, row in rows]))
    # A long turn's later parts open mid-speech: their first words call nobody.
    opening = [row for _, row in rows if id(row) in speech and id(row) not in continued]
    calling = await _calling_assistant(service, opening)
    pending: list[tuple[int, Mapping[str, object], PendingWrite]] = []
    history: list[tuple[int, Mapping[str, object]]] = []
    now = service.clock()
    for number, row in rows:
        try:
            status = row.get("status", Status.ACTIVE.value)
            if status not in (Status.ACTIVE.value, Status.QUARANTINED.value):
                if trusted and is_backup_row(row) and status in {s.value for s in Status}:
                    history.append((number, row))
                else:
                    report.add(SKIPPED, number, f"skipped: an older version ({_shown(status)}); "
                               "a backup's history is restored with --trust")
                continue
            if trusted and is_backup_row(row):
                _restates(row)  # a malformed link rejects the line before anything is written
            item = await _prepare(service, row, project=project, keep_scope=keep_scope,
                                  trusted=trusted, now=now, speech=id(row) in speech,
                                  calls_assistant=id(row) in calling)
        except ValueError as exc:  # MemoryRejected is a ValueError
            report.reject(number, str(exc))
            continue
        if item is None:  # past its exact expiry: history, not a fact to restore
            report.add(SKIPPED, number, "skipped: past its expiry")
            continue
        item.context = _context(item, pending[-1][2] if pending else None)
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
    trails: dict[int, list[AuditValues]] = {}
    links: dict[int, int] = {}  # a restored row's undecided link: id -> the older's backup id
    for (number, row, _), result in zip(pending, done, strict=False):
        await _count(service, report, number, row, result, trusted=trusted, project=project)
        if trusted and is_backup_row(row) and result.action in _NEW_ROW:
            trails[result.memory.id] = _audit_values(row)
            if (older := _restates(row)) is not None:
                links[result.memory.id] = older
    if (history or trails) and report.stopped is None:
        await _restore_history(service, history, trails, report, project=project, now=now, links=links)
    return report


_NEW_ROW = (WriteAction.CREATED, WriteAction.SUPERSEDED)


async def _restore_history(
    service: MemoryService,
    lines: Sequence[tuple[int, Mapping[str, object]]],
    trails: Mapping[int, Sequence[AuditValues]],
    report: ImportReport,
    *,
    project: str,
    now: float,
    links: Mapping[int, int] | None = None,
) -> None:
    """A trusted backup's older versions, restored as they were and linked to what
    replaced them, with the audit trail of every row the import added, and the
    undecided ``restates`` links between them (``links``: id -> backup id): ``memory
    history`` and recall then tell the same story as before the export. A version
    already restored (the same backup imported again) is not added twice."""
    have = {_version(m.scope, m.category, m.key, m.content_hash, m.status, m.stated_at)
            for m in await service.store.list(user=service.user)}
    rows: list[HistoryRow] = []
    numbers: dict[int, int] = {}
    for number, line in lines:
        try:
            history = await _history_row(service, line, project=project, now=now)
        except ValueError as exc:
            report.reject(number, str(exc))
            continue
        r = history.row
        if _version(r.scope, r.category, r.key, r.content_hash, r.status, r.stated_at) in have:
            report.add(SKIPPED, number, f"skipped: {r.category}/{r.key} ({r.status}) already restored")
            continue
        rows.append(history)
        numbers[history.backup_id] = number
    store = service.store
    if not isinstance(store, PlannedStore):  # a read-only copy of a server's memory
        raise TypeError(f"{type(store).__name__} cannot restore a backup's history")
    added = await store.restore_history(rows, report.renumbered, trails, links)
    for history in rows:
        r = history.row
        report.add(HISTORY, numbers[history.backup_id],
                   f"history restored {r.category}/{r.key} #{added[history.backup_id]} ({r.status})")
    report.renumbered.update(added)


def _version(*fields: object) -> tuple[object, ...]:
    return tuple(str(f) if not isinstance(f, float) else round(f, 3) for f in fields)


async def _history_row(
    service: MemoryService, line: Mapping[str, object], *, project: str, now: float
) -> HistoryRow:
    """A backup's older version as it was: validated and redacted like any line."""
    pending = await service.prepare(
        WriteRequest(
            _text(line, "category"),
            _text(line, "key"),
            _text(line, "value"),
            origin=_string("origin", line.get("origin", Origin.USER.value)),
            provenance=Provenance.imported(trusted=True),
            project=project,
            scope=_import_scope(line, project, keep=True),
            reason="import --trust",
        )
    )
    created_at = _import_time(line.get("created_at"), now, "created_at") or now
    updated_at = _import_time(line.get("updated_at"), now, "updated_at") or created_at
    later = line.get("superseded_by")
    if later is not None and (isinstance(later, bool) or not isinstance(later, int)):
        raise ValueError(f"superseded_by must be a memory id, got {_shown(later)}")
    until = line.get("valid_until")
    flags = [f for f in _listed(line.get("flags")) if f in LABEL_FLAGS]
    row = NewRow(
        service.user, pending.scope, pending.category.value, pending.key, pending.value,
        pending.origin.value, Status(_text(line, "status")).value, flags, created_at, updated_at,
        _import_expiry(line.get("expires_at"), created_at), content_hash(pending.value), "", None,
        _import_time(line.get("stated_at"), now, "stated_at") or created_at,
    )  # fmt: skip
    return HistoryRow(
        _backup_id(line),
        row,
        later,
        None if until is None else _finite_number("valid_until", until),
        tuple(_audit_values(line)),
        _restates(line),
    )


def _restates(line: Mapping[str, object]) -> int | None:
    """A backup row's undecided link to the older version it may restate (a backup id)."""
    older = line.get("restates")
    if older is not None and (isinstance(older, bool) or not isinstance(older, int)):
        raise ValueError(f"restates must be a memory id, got {_shown(older)}")
    return older


def _audit_values(line: Mapping[str, object]) -> list[AuditValues]:
    """The audit trail a backup line carries, entries that are not well formed left out."""
    entries = line.get("audit")
    out: list[AuditValues] = []
    for e in entries if isinstance(entries, list) else ():
        if not isinstance(e, dict):
            continue
        action, origin, at, reason = e.get("action"), e.get("origin"), e.get("at"), e.get("reason", "")
        old, new = e.get("old_value"), e.get("new_value")
        if (
            action in {a.value for a in AuditAction}
            and isinstance(origin, str)
            and isinstance(at, int | float) and not isinstance(at, bool) and math.isfinite(at)
            and isinstance(reason, str)
            and all(v is None or isinstance(v, str) for v in (old, new))
        ):  # fmt: skip
            out.append((action, origin, float(at), reason, old, new))
    return out


async def _count(
    service: MemoryService,
    report: ImportReport,
    number: int,
    row: Mapping[str, object],
    result: WriteResult,
    *,
    trusted: bool,
    project: str,
) -> None:
    # Held whatever the write did (a line met again refreshes a held row): the
    # summary's "quarantined" and the lines it says are held are the same lines.
    held = result.action is WriteAction.QUARANTINED or result.memory.status is Status.QUARANTINED
    action = WriteAction.QUARANTINED if held else result.action
    if action is WriteAction.QUARANTINED and trusted and row.get("approved") is True:
        if await service.approve(result.memory.id, reason="approved before export") is not None:
            action = WriteAction.CREATED
    memory = result.memory
    if memory.status is Status.SUPERSEDED:  # said before the current value: history
        report.add(HISTORY, number, f"kept as an earlier version {memory.category}/{memory.key} "
                   f"#{memory.id} (#{memory.superseded_by} was said after it)")
        report.ids.append(memory.id)
        return
    if action is WriteAction.QUARANTINED:
        said = f"held for review [{', '.join(memory.flags)}]"
    else:
        said = str(action.value)
    report.add(action.value, number, f"{said} {memory.category}/{memory.key} #{memory.id} "
               f"({_where(memory.scope, project)}, origin {memory.origin})")
    report.ids.append(memory.id)
    if is_backup_row(row):
        report.renumbered[_backup_id(row)] = memory.id


DIALOGUE_SHARE = 0.8
"""Rows of an import that must be "Name: text" turns for it to read as a conversation."""


def dialogue_turns(rows: Sequence[Mapping[str, object]]) -> set[int]:
    """The rows (by ``id()``) that are turns of a conversation between people: the
    file is one by its shape — most rows "Name: text", a few speakers, each speaking
    more than once (a list of "Note: ..." lines has one label, and notes are not a
    conversation). Structure, not words: it holds in any language."""
    labels: dict[int, str] = {}
    for row in rows:
        value = row.get("value")
        label = speaker_label(value) if isinstance(value, str) else None
        if label is not None:
            labels[id(row)] = label
    if len(rows) < 4 or len(labels) < DIALOGUE_SHARE * len(rows):
        return set()
    turns: dict[str, int] = {}
    for label in labels.values():
        turns[label] = turns.get(label, 0) + 1
    speakers = [label for label, n in turns.items() if n > 1]
    if len(speakers) < 2 or len(turns) > max(2, len(rows) // 4):
        return set()
    return {row_id for row_id, label in labels.items() if turns[label] > 1}


async def _calling_assistant(service: MemoryService, turns: Sequence[Mapping[str, object]]) -> set[int]:
    """The turns (by ``id()``) that call the assistant, read by meaning
    (``addressee.py``): orders to it, held for review like an instruction."""
    said = [(turn, value) for turn in turns if isinstance(value := turn.get("value"), str)]
    if not said:
        return set()
    await service.vectors.load()
    calls = await calling_assistant(service.vectors.embedder, [value for _, value in said])
    return {id(turn) for (turn, _), called in zip(said, calls, strict=True) if called}


_SENTENCE_END = re.compile(r"(?<=[.!?。！？…])\s+")


def split_long_turns(
    rows: Sequence[tuple[int, Mapping[str, object]]], speech: set[int]
) -> tuple[list[tuple[int, Mapping[str, object]]], set[int], set[int]]:
    """Rows with each dialogue turn longer than a memory may be (``MAX_VALUE_CHARS``)
    said as consecutive turns of its speaker, cut between sentences: a long turn in
    other people's conversation is content to recall, not a line to reject (e2e9: a
    6,396-character turn was lost with "the limit is 2000"). Its parts keep the line's
    date and number, and their keys follow the line's (``key_2``, ``key_3``…).
    (rows, the turns' ids, the ids of the parts after a turn's first)."""
    out: list[tuple[int, Mapping[str, object]]] = []
    turns = set(speech)
    continued: set[int] = set()
    for number, row in rows:
        value = row.get("value")
        if id(row) not in speech or not isinstance(value, str) or len(value) <= MAX_VALUE_CHARS:
            out.append((number, row))
            continue
        name, said = value.split(":", 1)
        key = row.get("key")
        for i, part in enumerate(_parts(said.strip(), MAX_VALUE_CHARS - len(name) - 2), start=1):
            piece: dict[str, object] = {**row, "value": f"{name}: {part}"}
            if isinstance(key, str) and i > 1 and KEY_PATTERN.fullmatch(f"{key}_{i}"):
                piece["key"] = f"{key}_{i}"
            turns.add(id(piece))
            if i > 1:
                continued.add(id(piece))
            out.append((number, piece))
    return out, turns, continued


def _parts(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut between sentences (or
    words, or anywhere, when one is longer)."""
    parts: list[str] = []
    current = ""
    for sentence in _SENTENCE_END.split(text):
        while len(sentence) > limit:
            cut = sentence.rfind(" ", 0, limit)
            cut = cut if cut > limit // 2 else limit
            sentence, head = sentence[cut:].lstrip(), sentence[:cut].rstrip()
            if current:
                parts.append(current)
                current = ""
            parts.append(head)
        if current and len(current) + 1 + len(sentence) > limit:
            parts.append(current)
            current = ""
        current = f"{current} {sentence}" if current else sentence
    return [*parts, current] if current else parts


def _where(scope: str, project: str) -> str:
    if scope == GLOBAL_SCOPE:
        return "every project"
    return "this project" if scope == project else f"project {scope}"


async def _prepare(
    service: MemoryService,
    row: Mapping[str, object],
    *,
    project: str,
    keep_scope: bool,
    trusted: bool,
    now: float,
    speech: bool = False,
    calls_assistant: bool = False,
) -> PendingWrite | None:
    """One row as a guarded pending write; None when its exact expiry has passed."""
    origin = row.get("origin", Origin.USER.value)
    if not isinstance(origin, str) or origin not in {o.value for o in Origin}:
        raise ValueError(f"origin must be user, tool or agent, got {_shown(origin)}")
    backup = is_backup_row(row)
    scope = _import_scope(row, project, keep=trusted and (keep_scope or backup))
    listed = _listed(row.get("flags"))
    hold: list[str] = []
    if row.get("status") == Status.QUARANTINED.value:
        hold = [f for f in listed if holds([f])] or ["held_before_export"]
    created_at = _import_time(row.get("created_at"), now, "created_at")
    # Only a trusted backup's exact expiry is kept; otherwise the category's lifetime
    # (a requested ttl_days is capped by the policy).
    expires_at = _import_expiry(row.get("expires_at"), created_at) if backup and trusted else None
    if expires_at is not None and expires_at <= now:
        return None
    value = _text(row, "value")
    category, key = row.get("category"), row.get("key")
    if category is None or key is None:  # hand-written: filed as /remember files a note
        filed = await service.writer.file(
            value,
            project=project,
            category=None if category is None else _string("category", category),
            key=None if key is None else _string("key", key),
        )
        category, key = filed.category, filed.key
    stored_origin = origin if trusted or origin != Origin.USER.value else Origin.TOOL.value
    pending = await service.prepare(
        WriteRequest(
            _string("category", category),
            _string("key", key),
            value,
            origin=stored_origin,
            provenance=Provenance.imported(trusted=trusted, speech=speech, calls_assistant=calls_assistant),
            project=project,
            ttl_days=_import_ttl(row.get("ttl_days")),
            scope=scope,
            created_at=created_at,
            expires_at=expires_at,
            stated_at=_import_time(row.get("stated_at"), now, "stated_at"),
            reason="import --trust" if trusted else f"import; claimed origin {origin}",
            hold=hold,
            labels=[f for f in listed if f in LABEL_FLAGS] + ([FLAG_DIALOGUE] if speech else []),
        )
    )
    # A backup's active set was already decided: restored as it was, not merged. A turn
    # of a conversation is a thing someone said then, not a version of a fact: another
    # turn never restates nor replaces it (LoCoMo: 313 of 419 turns were linked as
    # restating the turn before, and recall put those "newer versions" first). The same
    # key imported again is still the same row (the store's own rule).
    pending.decide_identity = not backup and not speech
    pending.explicit_key = row.get("key") is not None
    approved = trusted and row.get("approved") is True and holds([*pending.flags, *listed])
    if backup and (hold or approved):
        # Held, or held once and approved by the person: the flags it carried then, so
        # it is held again and approved again (``_count``) — the review decision and
        # why it was needed both survive, even when the restore alone would not hold it.
        pending.flags = list(dict.fromkeys([*hold, *listed])) or pending.flags
    return pending


def _context(item: PendingWrite, before: PendingWrite | None) -> str | None:
    """A dialogue turn's context: the turn before it, by ``turn_context``'s rule (the
    same one re-embedding applies to the stored rows)."""
    return turn_context(_turn(item), None if before is None else _turn(before))


def _turn(item: PendingWrite) -> Memory:
    """A pending write as the row ``turn_context`` reads (only what it compares)."""
    return Memory(
        id=0, user="", scope=item.scope, category=item.category, key=item.key,
        value=item.value, origin=item.origin, status=Status.ACTIVE, flags=item.flags,
        created_at=item.created_at or 0.0, updated_at=0.0, expires_at=None,
        stated_at=item.stated_at or 0.0,
    )  # fmt: skip


def _import_scope(row: Mapping[str, object], project: str, *, keep: bool) -> str | None:
    """Where a row lands: ``"project"`` is this project, ``"global"`` every one; any
    other scope (another project's path) is kept only when ``keep`` (a trusted backup,
    or --trust --keep-scope), else the category's default here (None)."""
    scope = row.get("scope") or None
    if scope is not None and not isinstance(scope, str):
        raise ValueError(f"scope must be a string, got {_shown(scope)}")
    if scope == "project":
        return project
    if scope == GLOBAL_SCOPE or keep:
        return scope
    return None


def is_backup_row(row: Mapping[str, object]) -> bool:
    """A line `memory export` wrote (it names its id and status), not a hand-written one."""
    return isinstance(row.get("id"), int) and isinstance(row.get("status"), str)


def _backup_id(row: Mapping[str, object]) -> int:
    """The id `memory export` wrote on a backup's line (`is_backup_row`)."""
    found = row.get("id")
    if not isinstance(found, int):
        raise ValueError(f"id must be a memory id, got {_shown(found)}")
    return int(found)


def _listed(flags: object) -> list[str]:
    """A line's flags: the strings of its list (anything else lists none)."""
    return [f for f in flags if isinstance(f, str)] if isinstance(flags, list) else []


def _shown(value: object) -> str:
    """A bad value in an error message: short, and never recursing into deep nesting."""
    shown = reprlib.Repr()
    shown.maxlevel, shown.maxstring, shown.maxother = 2, 60, 60
    return shown.repr(value)


def _text(row: Mapping[str, object], name: str) -> str:
    return _string(name, row.get(name))


def _string(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {_shown(value)}")
    return value


def load_json(line: str) -> Any:
    """One line's JSON value; ValueError in one sentence for anything unreadable,
    including nesting too deep for the parser (RecursionError is no user's message)."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg}, column {exc.colno})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to be a memory") from None


def parse_line(line: str) -> JSONObject:
    """One import line as a dict with a string value, and string category and key when
    it names them (a line without them is filed as /remember files a note). ValueError
    names what is wrong, never with a JSON library's wording alone."""
    row = load_json(line)
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    if "value" not in row:
        raise ValueError("missing value")
    _text(row, "value")
    for name in ("category", "key"):
        if name in row:
            _text(row, name)
    return row


def _finite_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {_shown(value)}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {_shown(value)}")
    return float(value)


def _import_ttl(value: object) -> int | None:
    """A whole number of days from 1 to 100 years (the TTL policy then caps it)."""
    if value is None:
        return None
    days = _finite_number("ttl_days", value)
    if days != int(days) or not 1 <= days <= _MAX_TTL_DAYS:
        raise ValueError(f"ttl_days must be a whole number of days from 1 to {_MAX_TTL_DAYS}, got {_shown(value)}")
    return int(days)


def _moment(name: str, value: object) -> float:
    """A line's moment: ISO 8601 (a date, or a date-time; UTC unless it names a zone),
    as other tools write their rows' times, or unix seconds, as a backup's are."""
    if isinstance(value, str):
        try:
            return parse_moment(value)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return _finite_number(name, value)


def _import_time(value: object, now: float, name: str) -> float | None:
    """A line's ``name`` moment (``_moment``: created, updated or stated), a real past
    one: a far-future created_at would never expire; None when the line has none (the
    caller says what stands in). e2e10: a line another tool wrote with an ISO
    `created_at` was rejected whole, its value lost."""
    if value is None:
        return None
    at = _moment(name, value)
    if not _MIN_TIME <= at <= now + _FUTURE_SLACK:
        raise ValueError(f"{name} must be between 2000-01-01 and now, got {_shown(value)}")
    return at


def _import_expiry(value: object, created_at: float | None) -> float | None:
    """A backup's exact expiry: after its creation, within 100 years of it."""
    if value is None:
        return None
    at = _moment("expires_at", value)
    start = created_at if created_at is not None else _MIN_TIME
    if not start < at <= start + _MAX_TTL_DAYS * DAY:
        raise ValueError(f"expires_at must be after created_at and within {_MAX_TTL_DAYS} days, got {_shown(value)}")
    return at
