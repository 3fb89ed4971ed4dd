"""The write path of the memory: the guard, identity, TTL, vector, store and index.

Every write of every face passes here (``MemoryService.save`` and friends delegate):
the guard judges it, identity decides which stored memory it restates (the rule,
then the fast model where the rule cannot tell), its vector is embedded in batches,
and the store commits it in one transaction with what it supersedes, after which the
index follows. A tool writing to the store directly would skip all of that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from qwenmem_tui import secrets
from qwenmem_tui.memory import guard
from qwenmem_tui.memory.filing import parse_filing
from qwenmem_tui.memory.identity import (
    POSSIBLE_DUPLICATE,
    Identity,
    by_meaning,
    decide,
    filed_elsewhere,
    read_by_key,
)
from qwenmem_tui.memory.judge import Judgement, judge_messages, judgement_of, parse_judgement
from qwenmem_tui.memory.holder_space import ONE_HOLDER, TWO_PEOPLE, holder_space
from qwenmem_tui.memory.owner_space import LEANS, owner_space
from qwenmem_tui.memory.meaning import MARGIN, MeaningReader, Reading
from qwenmem_tui.memory.model import (
    DAY,
    FLAG_SECRET_REDACTED,
    GLOBAL_CATEGORIES,
    GLOBAL_SCOPE,
    LABEL_FLAGS,
    Category,
    Memory,
    MemoryDraft,
    Origin,
    RememberRequest,
    Status,
    TtlPolicy,
    WriteAction,
    WriteRequest,
    WriteResult,
    content_hash,
    embed_text,
    holds,
    scope_for,
)
from qwenmem_tui.memory.provenance import Provenance, Writer
from qwenmem_tui.memory.store import MemoryStore
from qwenmem_tui.memory.subject import KEY_CHARS, UNNAMED, NoteKey, file_note
from qwenmem_tui.memory.vectors import MemoryVectors
from qwenmem_tui.memory.write_plan import join_reasons

if TYPE_CHECKING:
    import numpy as np

    from qwenmem_tui.memory.bulk import BatchLookup

    from qwenmem_tui.memory.index import Progress
    from qwenmem_tui.llm.client import LLMClient

log = logging.getLogger("qwenmem.memory")

# Writes embedded per batch (a bulk import): the embedder's efficient batch size, and
# the step of the progress bar.
WRITE_BATCH = 128
NEIGHBOURS = 8
CONSOLIDATE_TIMEOUT = 30.0
"""Seconds the idle consolidation pass waits for one judgement: nobody waits on it."""
DECIDED_LATER = "decided later by the model"
LINK_COSINE = 0.9
"""A neighbour this close (the real embedder's cosine) nearest the same attribute as the
new fact is linked even when neither reading is clear (see ``meaning.py``)."""
APART = 2
"""A note's close facts in the other category the model is also shown, at most."""
FOLLOW_COSINE = 0.94
"""A note whose side (the person's, a project's) nothing says is filed beside a stored
note this close (the real embedder's cosine, the new note's statement against the
stored vectors): a restatement of one fact is 0.95-0.97 in the overwrite lab's seven
languages (tests/unit/memory/test_overwrite_lab_remember.py), two facts of one person
0.87-0.93 (bench/identity_wordings.jsonl's first 20 pairs)."""


class MemoryRejected(ValueError):
    """The write is malformed (schema); ``str(e)`` tells the writer what to fix."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = list(errors)


@dataclass
class PendingWrite:
    """A write the guard accepted (``prepare``), not yet stored: what
    ``commit_many`` embeds in batches and commits one by one."""

    category: Category
    key: str
    value: str  # as stored: secrets cut out
    said: str  # as written
    origin: Origin
    provenance: Provenance
    flags: list[str]
    reason: str
    scope: str
    ttl_days: int
    created_at: float | None = None
    expires_at: float | None = None
    stated_at: float | None = None  # when the fact was said (an import's date)
    judge_timeout: float | None = None
    explicit_key: bool = True
    # False for a backup's row: restored as it was, never merged into a neighbour.
    decide_identity: bool = True
    # A /remember note the rule filed (no writer named its category): the fast model's
    # validated category, asked with its judgement, may file it elsewhere (``_refiled``).
    refile: NoteKey | None = None
    project: str = ""
    # A dialogue turn's context: the turn before it in the import (``turn_context``).
    context: str | None = None
    # Decided where the rule first filed the note, by the model: moved to the memory
    # it restates, it is written as decided, not looked up again (``_to_target``).
    decided: Identity | None = None

    def text(self) -> str:
        """What its vector embeds."""
        return embed_text(self.category, self.key, self.value, self.context)


@dataclass(frozen=True)
class Filed:
    """Where a note goes (``MemoryWriter.file``): category, key, whether the writer
    named the key, and the rule's reading of the note."""

    category: str
    key: str
    named: bool
    note: NoteKey


def note_subject(text: str) -> tuple[str, str]:
    """(category, key) for a free-text note, derived with its secrets cut out, so a key
    never carries one (the value loses it in the guard)."""
    note = file_note(secrets.redact(text).replace(secrets.REDACTED, " "))
    return note.category.value, note.key


def _keyed(note: NoteKey, reading: Reading) -> NoteKey:
    """A note's key where the rule could not name it, or only guessed: its attribute
    when it reads clearly as one (value-free, in any language), else the attribute
    both readings lean to in its category; a guessed first word or a number the rule
    took for a subject ("Python 3.12 is what we use") gives way to ``note``. Nothing
    less names a key: the nearest attribute alone, however far it leads, is as often
    wrong ("Mein Projekt heißt Alpha" a deploy target by 0.44, "Torço para o Flamengo"
    an employer) as right ("Abito a Pisa" a home city by 0.31), and a key shared with
    a listed attribute links the note to that attribute's facts; ``note`` links none."""
    if note.named and not note.by_name and not note.loose:
        return note
    attribute, named = reading.attribute, reading.named
    if attribute is not None:
        return NoteKey(note.category, attribute.key, False)
    if named is not None and named.category is note.category:
        return NoteKey(note.category, named.key, False)
    if note.first_word or (note.loose and any(c.isdigit() for c in note.key)):
        return NoteKey(note.category, UNNAMED, False, named=False)
    return note


def _stored(result: WriteResult) -> bool:
    """The write made a new active row (one that may need a second vector, ``memory/turns.py``)."""
    return result.memory.status is Status.ACTIVE and result.action in (
        WriteAction.CREATED,
        WriteAction.SUPERSEDED,
    )


def _same_fact(memory: Memory, draft: MemoryDraft) -> bool:
    """One fact: the same category and key (the caller matched user and scope)."""
    return (memory.category, memory.key) == (draft.category, draft.key)


class MemoryWriter:
    """Prepares and commits the writes of one memory service."""

    def __init__(
        self,
        store: MemoryStore,
        vectors: MemoryVectors,
        *,
        user: str,
        ttl: TtlPolicy,
        clock: Callable[[], float],
        llm: LLMClient | None,
        on_held: Callable[[], None],
    ) -> None:
        self.store = store
        self.vectors = vectors
        self.user = user
        self.ttl = ttl
        self.clock = clock
        # The fast model judging which memory a write restates; None: the rule alone.
        self.llm = llm
        # A write was held for review: the "N memories await review" count moved.
        self._on_held = on_held
        # A write was linked to an older memory it may restate: decide it at idle.
        self.on_linked: Callable[[], None] | None = None

    async def prepare(self, request: WriteRequest) -> PendingWrite:
        """The guard's verdict, TTL and scope for one write, before anything is stored.

        Raises MemoryRejected for a malformed write (``WriteRequest`` says what each
        field is taken as).
        """
        origin = Origin(request.origin)
        provenance = request.provenance
        if provenance is None:
            provenance = (
                Provenance.user()
                if origin is Origin.USER
                else Provenance(untrusted=tuple(request.turn_outputs))
            )
        verdict = guard.check(request.category, request.key, request.value, provenance=provenance)
        if not verdict.accepted:
            if verdict.refused_secret:
                await self.store.add_metrics({"secrets_refused": 1.0})
            raise MemoryRejected(verdict.errors)
        if FLAG_SECRET_REDACTED in verdict.flags:
            await self.store.add_metrics({"secrets_redacted": 1.0})
        kept = [f for f in request.labels if f in LABEL_FLAGS]
        flags = list(dict.fromkeys([*request.hold, *verdict.flags, *kept]))
        reason = request.reason
        if provenance.untrusted_in_view:
            reason = join_reasons(reason, provenance.describe())
        cat = Category(request.category)
        days, ttl_note = self.ttl.resolve(cat, request.ttl_days)
        scope = GLOBAL_SCOPE if cat in GLOBAL_CATEGORIES else request.scope
        return PendingWrite(
            category=cat,
            key=request.key,
            value=verdict.value,
            said=request.value,  # as written: grounding is judged on it, not on the redacted value
            origin=origin,
            provenance=provenance,
            flags=flags,
            reason=join_reasons(reason, ttl_note or ""),
            scope=scope or scope_for(cat, request.project),
            ttl_days=days,
            created_at=request.created_at,
            expires_at=request.expires_at,
            stated_at=request.stated_at,
            judge_timeout=request.judge_timeout,
            explicit_key=request.explicit_key,
        )

    async def save(self, request: WriteRequest) -> WriteResult:
        """Guard, identity, TTL, embed, store, index — the only way a memory is written.

        A write supersedes a stored memory only when it is the same fact restated
        (``identify``): the same key, the same entity's same single-valued attribute,
        or the fast model's validated choice (``request.judge_timeout`` seconds at
        most; None: the rule alone). Anything else is its own memory.
        """
        [result] = await self.commit_many([await self.prepare(request)])
        return result

    async def commit_many(
        self,
        pending: Sequence[PendingWrite],
        progress: Progress | None = None,
        on_result: Callable[[WriteResult], None] | None = None,
    ) -> list[WriteResult]:
        """Store prepared writes in order: their vectors embedded in batches (the
        embedder's own batch cost), each write's identity looked up with its own
        vector (no second embedding), each committed in its own transaction so a
        later line sees the earlier ones. ``progress(done, total)`` after each batch;
        ``on_result`` after each write (what is committed when a later one raises)."""
        await self.vectors.load()  # identity and the writes' vectors need them
        results: list[WriteResult] = []
        for start in range(0, len(pending), WRITE_BATCH):
            part = pending[start : start + WRITE_BATCH]
            vectors = await self.vectors.passage_vectors([p.text() for p in part])
            lookup = self._batch_lookup(part, vectors)
            for item, vector in zip(part, vectors, strict=True):
                results.append(await self._commit(item, vector, lookup))
                if on_result is not None:
                    on_result(results[-1])
            if progress is not None:
                progress(start + len(part), len(pending))
        await self.vectors.embed_turns([r.memory for r in results if _stored(r)])
        return results

    def _batch_lookup(
        self, part: Sequence[PendingWrite], vectors: Sequence[np.ndarray | None]
    ) -> BatchLookup | None:
        """The identity lookups of a batch made in bulk (``memory/bulk.py``); None for
        one write (nothing to share) or a store that answers one lookup at a time."""
        from qwenmem_tui.memory.bulk import BatchLine, BatchLookup  # numpy: loaded with the vectors
        from qwenmem_tui.memory.store_index import StoreIndex

        lines = [
            BatchLine(p.scope, embed_text(p.category, p.key, p.value), p.key, p.value, v)
            for p, v in zip(part, vectors, strict=True)
            if p.decide_identity
        ]
        index = self.vectors.index
        if len(lines) < 2 or isinstance(index, StoreIndex):
            return None
        return BatchLookup(self.vectors.recaller, index, lines)

    async def _commit(
        self, pending: PendingWrite, vector: np.ndarray | None, lookup: BatchLookup | None = None
    ) -> WriteResult:
        cat, key, value, flags = pending.category, pending.key, pending.value, list(pending.flags)
        reason = pending.reason
        now = self.clock()
        held = holds(flags)
        identity = Identity(key)
        # A note is read as read_note read it (its key may be that reading already).
        noted = None if pending.explicit_key else self.reader().noted(value)
        reading = noted or await self.reader().read(vector)
        if pending.decided is not None:
            identity = pending.decided
        elif pending.decide_identity:
            identity = await self.identify(
                cat,
                key,
                value,
                scope=pending.scope,
                judge_timeout=None if held else pending.judge_timeout,
                explicit=pending.explicit_key,
                vector=vector,
                reading=reading,
                lookup=lookup,
                apart=self._other_filing(pending),
            )
            moved = self._to_target(pending, identity) or await self._refiled(pending, identity)
            if moved is not None:  # the model filed the note elsewhere: decided there anew
                [vector] = await self.vectors.passage_vectors([moved.text()])
                return await self._commit(moved, vector, lookup)
        if held:
            # Held for review, it supersedes nothing now; approving it later replaces
            # its key's value (approval goes by key).
            identity = Identity(identity.key)
        if identity.same_as is not None:
            # Already said: refresh that row (same key, same value) instead of adding.
            value = identity.same_as.value
        if identity.replaces or identity.key != key or identity.decided_by == "model":
            reason = join_reasons(reason, f"same fact as key {identity.key} ({identity.decided_by})")
        if identity.possible_duplicates and not held:
            flags.append(POSSIBLE_DUPLICATE)
            ids = ", ".join(f"#{i}" for i in identity.possible_duplicates)
            reason = join_reasons(reason, f"possible duplicate of {ids}: both kept")
        restates = None if held or identity.replaces else identity.restates
        if restates is not None:
            reason = join_reasons(reason, f"possible restatement of #{restates}: linked, both kept")
        draft = MemoryDraft(
            category=cat,
            key=identity.key,
            value=value,
            origin=pending.origin,
            scope=pending.scope,
            user=self.user,
            ttl_days=pending.ttl_days,
            reason=reason,
            created_at=pending.created_at,
            stated_at=pending.stated_at,
            replaces=identity.replaces,
            restates=restates,
            # Equal values under different keys are different subjects' values
            # ("true" for two services): never merged by value alone.
            dedupe=False,
        )
        if held:
            twin = await self._held_twin(draft)
            if twin is not None:  # the same value already awaits review: one row is enough
                return WriteResult(twin, WriteAction.QUARANTINED)
            if await self._active_twin(draft):
                # Its key already holds this very value, trusted: nothing new to review
                # (a backup imported twice); the write only refreshes that row.
                flags = [f for f in flags if not holds([f])]
        if vector is not None and (draft.key != key or draft.value != pending.value):
            vector = (await self.vectors.passage_vectors([embed_text(cat, draft.key, draft.value)]))[0]
        result = await self._store(pending, draft, flags, vector, reading, now)
        if lookup is not None:
            lookup.wrote(result)
        return result

    async def _store(
        self,
        pending: PendingWrite,
        draft: MemoryDraft,
        flags: list[str],
        vector: np.ndarray | None,
        reading: Reading,
        now: float,
    ) -> WriteResult:
        """The decided draft into the store, the recall index and the meaning reader;
        a restatement link, its trust and a hold announced (the last step of `_commit`)."""
        born = pending.created_at if pending.created_at is not None else now
        result = await self.store.write(
            draft,
            flags=flags,
            expires_at=pending.expires_at or born + pending.ttl_days * DAY,
            vector=vector,
            embedding_model=self.vectors.embedder.id,
            now=now,
        )
        await self.vectors.recaller.apply(result, vector)
        self.reader().remember(result.memory.id, reading)
        if result.memory.restates is not None and self.on_linked is not None:
            self.on_linked()
        await self._count_trust(pending.provenance, pending.said, result)
        if result.action is WriteAction.QUARANTINED:
            self._on_held()
            log.info(
                "[MEMORY_GUARD] quarantined #%d %s/%s flags=%s origin=%s",
                result.memory.id,
                pending.category,
                pending.key,
                ",".join(result.memory.flags),
                draft.origin,
            )
        return result

    async def _held_twin(self, draft: MemoryDraft) -> Memory | None:
        """A quarantined row of the same fact (user, scope, category, key) and value, if
        any: holding a write again (a re-import, the model retrying) must not pile up
        rows to review."""
        chash = content_hash(draft.value)
        held = await self.store.list(
            user=draft.user, scopes=[draft.scope], statuses=[Status.QUARANTINED]
        )
        return next((m for m in held if _same_fact(m, draft) and m.content_hash == chash), None)

    async def _active_twin(self, draft: MemoryDraft) -> bool:
        """Whether the fact's active row (this scope, category and key) holds the
        draft's value."""
        rows = await self.store.list(user=draft.user, scopes=[draft.scope], statuses=[Status.ACTIVE])
        chash = content_hash(draft.value)
        return any(_same_fact(m, draft) and m.content_hash == chash for m in rows)

    async def _count_trust(self, provenance: Provenance, value: str, result: WriteResult) -> None:
        """The two rates `memory stats` reports: how many model writes made while
        reading files (not the user's words) were held, and how many facts the user
        stated were stored active."""
        held = result.action is WriteAction.QUARANTINED
        if provenance.grounded(value):
            await self.store.add_metrics(
                {"user_stated_writes": 1.0, "user_stated_active": 0.0 if held else 1.0}
            )
        elif provenance.writer is Writer.MODEL and provenance.untrusted_in_view:
            await self.store.add_metrics(
                {"untrusted_writes": 1.0, "untrusted_held": 1.0 if held else 0.0}
            )

    async def remember(self, request: RememberRequest) -> WriteResult:
        """/remember: the person's own words, filed under the subject they name.

        The key is derived from the text with its secrets cut out, so a key never
        carries one (the value loses it in the guard, which refuses a note that is
        nothing but a secret). A key already held by another fact of that name ("ana" for "Ana leads the
        backend team" beside "Ana: likes tea") gets a number instead of replacing it.
        A free-text note from a model (the MCP ``remember`` tool) comes the same way
        with its own ``origin`` and ``provenance``, and may name the ``category`` or
        ``key`` itself (a key it names is kept as given).

        Unless the caller names the category, the rule files the note; where the fast
        model is asked which memory the note restates, its validated choice of
        category and scope, given in the same answer, wins (``memory/filing.py``,
        ``_refiled``; ``judge_timeout`` seconds at most, the audit says so).
        """
        r = request
        filed = await self.file(r.text, project=r.project, category=r.category, key=r.key)
        pending = await self.prepare(
            WriteRequest(
                filed.category,
                filed.key,
                r.text.strip(),
                origin=r.origin,
                project=r.project,
                provenance=r.provenance,
                reason=r.reason,
                judge_timeout=r.judge_timeout,
                explicit_key=filed.named,
            )
        )
        if r.category is None and not filed.named:
            pending.refile, pending.project = filed.note, r.project
        [result] = await self.commit_many([pending])
        return result

    async def file(
        self, text: str, *, project: str, category: str | None = None, key: str | None = None
    ) -> Filed:
        """Where /remember files a note (and an import line that names no category or
        key): the rule's category and key unless given, a key another fact of that name
        holds numbered instead of replaced."""
        note = file_note(secrets.redact(text).replace(secrets.REDACTED, " "))  # note_subject's
        if category is None or key is None:
            note = await self._read_note(note, secrets.redact(text), project)
        chosen = Category(category) if category in {c.value for c in Category} else note.category
        named = key is not None
        if key is None:
            key = note.key
            if not note.restates_by_key:
                key = await self._free_key(key, text.strip(), chosen, scope_for(chosen, project))
        # A wrong category named by the writer is kept: the guard says so.
        return Filed(category if category is not None else chosen.value, key, named, note)

    async def _read_note(self, note: NoteKey, text: str, project: str) -> NoteKey:
        """The rule's filing of a note, completed by meaning (``memory/meaning.py``,
        ``memory/owner_space.py``): a note the rule cannot place goes where whose life
        it reads as puts it, in any language (rules, references and what the rule read
        stay the rule's), and a key the rule could not name, or only guessed, takes its
        attribute's name or the value-free ``note``. Unread: the rule's filing."""
        await self.vectors.load()
        reader = self.reader()
        if not reader.meaningful:
            return note
        try:
            reading = await reader.read_note(text)
            category = note.category
            if category in (Category.USER, Category.PROJECT) and not note.sure:
                if note.by_name and not note.first_word:
                    category = await self._named_owner(text, reading) or category
                else:
                    category = await self._owner(text, reading, project) or category
        except Exception as exc:  # the note matters more than its reading
            log.info("[MEMORY_IDENTITY] note not read by meaning: %s", exc)
            return note
        return _keyed(replace(note, category=category), reading)

    async def _owner(self, text: str, reading: Reading, project: str) -> Category | None:
        """Whose life a note the rule cannot place reads as: its clear attribute's;
        else past the margin on the life/project direction (``owner_space.py``); else
        a very close note's (``FOLLOW_COSINE``: "Mein Projekt heißt jetzt Beta" goes
        where "Mein Projekt heißt Alpha" went, so the two are one fact's candidates);
        else its nearest attribute's when that leads by ``meaning.MARGIN`` (a short
        note of a listed attribute whose plain centroid disagrees: "Faccio
        l'infermiere"); else the side it leans to by ``owner_space.LEANS``; else
        the side of the attribute both readings lean to ("이제 조종사로 일해요", +0.10:
        an occupation); else the side it leans to at all (on the tuning notes the
        lean's sign was right for all but one; the rule's own default is a guess).
        For an embedder with no shipped direction, the attribute reading's."""
        if reading.attribute is not None:
            return reading.attribute.category
        space = await asyncio.to_thread(owner_space, self.vectors.embedder.id)
        if space is None:
            return reading.owner
        vector = await self.reader().note_statement(text)
        top = reading.top if reading.lead >= MARGIN else None
        return (
            space.owner(vector)
            or await self._beside(text, vector, project)
            or (top.category if top is not None else None)
            or space.owner(vector, LEANS)
            or (reading.named.category if reading.named is not None else None)
            or space.owner(vector, 0.0)
        )

    async def _named_owner(self, text: str, reading: Reading) -> Category | None:
        """Whose a note opening with a name is ("Carlos es mi jefe", "Berlin ist meine
        Lieblingsstadt", "Rust ist unsere Hauptsprache"): the project's when the
        life/project direction reads it so past its margin (Rust +0.36, though read
        clearly as the many languages a person speaks); else where its attribute
        reads it belongs, else the rule's (someone else's: the project's). A life it
        reads says nothing here: it cannot tell another's life from mine."""
        space = await asyncio.to_thread(owner_space, self.vectors.embedder.id)
        if space is not None and space.owner(await self.reader().note_statement(text)) is Category.PROJECT:
            return Category.PROJECT
        return reading.attribute.category if reading.attribute is not None else reading.owner

    async def _beside(self, text: str, vector: np.ndarray, project: str) -> Category | None:
        """The category of the person's or this project's note closest to ``text``
        (``vector``: its statement), when one is within ``FOLLOW_COSINE`` of it."""
        best: tuple[float, Category] | None = None
        for category in (Category.USER, Category.PROJECT):
            found = await self.vectors.nearest(
                UNNAMED, text, scope=scope_for(category, project), category=category, k=1, vector=vector
            )
            for candidate in found[:1]:
                if candidate.dense is not None and (best is None or candidate.dense > best[0]):
                    best = (candidate.dense, category)
        return best[1] if best is not None and best[0] >= FOLLOW_COSINE else None

    @staticmethod
    def _other_filing(pending: PendingWrite) -> tuple[Category, str] | None:
        """For a note the rule filed as the person's or the project's, the other of the
        two and its scope: where the fact it restates may be filed instead."""
        if pending.refile is None or pending.category not in (Category.USER, Category.PROJECT):
            return None
        other = Category.PROJECT if pending.category is Category.USER else Category.USER
        return other, scope_for(other, pending.project)

    def _to_target(self, pending: PendingWrite, identity: Identity) -> PendingWrite | None:
        """The note moved to the memory the model found it updates or repeats, when the
        rule filed it elsewhere ("Mój projekt nazywa się Alpha" a project fact, "… teraz
        Beta" the person's): written there under that memory's key, as the model decided,
        so it supersedes (or refreshes) it. None when the note stays where it is."""
        target = identity.target
        if pending.refile is None or target is None or target.category is pending.category:
            return None
        why = f"filed under {target.category} with #{target.id}, the fact it restates (rule: {pending.category})"
        moved = self._moved(pending, target.category, target.key, target.scope, why)
        return replace(moved, decided=replace(identity, filed=None, target=None))

    async def _refiled(self, pending: PendingWrite, identity: Identity) -> PendingWrite | None:
        """The note under the category the model chose with its judgement, when that
        differs from the rule's and the note restates nothing where the rule put it;
        None otherwise. Its key is the note's own, numbered when that category holds
        it already (a name is no evidence of one fact); the model is not asked again."""
        filed = identity.filed
        if (
            pending.refile is None
            or filed is None
            or filed is pending.category
            or identity.replaces  # it restates a memory where the rule put it: stays there
            or identity.same_as is not None
            or identity.key != pending.key
        ):
            return None
        note, scope = pending.refile, scope_for(filed, pending.project)
        key = note.key
        if not note.restates_by_key:
            key = await self._free_key(key, pending.value, filed, scope)
        return self._moved(pending, filed, key, scope, f"filed under {filed} by the model (rule: {pending.category})")

    def _moved(self, pending: PendingWrite, category: Category, key: str, scope: str, why: str) -> PendingWrite:
        """``pending`` filed anew where the model's judgement put it, with that
        category's TTL; the model is not asked again."""
        days, ttl_note = self.ttl.resolve(category, None)
        return replace(
            pending, category=category, key=key, scope=scope, ttl_days=days, refile=None,
            judge_timeout=None, reason=join_reasons(pending.reason, why, ttl_note or ""),
        )

    async def _free_key(self, key: str, value: str, category: Category, scope: str) -> str:
        """``key``, or ``key_2``, ``key_3``… when another fact of this category and
        scope already holds it: a name shared by two facts is no evidence they are one.
        The same words said again keep the key (the write then only refreshes that row)."""
        stem = key[: KEY_CHARS - 4]
        holders = await self.store.list(
            user=self.user, scopes=[scope], statuses=[Status.ACTIVE], key_prefix=stem
        )
        taken = {m.key: m for m in holders if m.category == category}
        candidate, n = key, 1
        while candidate in taken and content_hash(taken[candidate].value) != content_hash(value):
            n += 1
            candidate = f"{key[: KEY_CHARS - 4]}_{n}"
        return candidate

    async def neighbours(
        self,
        scope: str,
        category: Category | str,
        key: str,
        value: str,
        *,
        k: int = NEIGHBOURS,
        vector: np.ndarray | None = None,
    ) -> list[Memory]:
        """This user's active memories of ``category`` in ``scope`` nearest to a fact,
        nearest first: the candidates a write may restate.

        Both recall channels, fused, over exactly this scope (``nearest``).
        """
        found = await self.vectors.nearest(key, value, scope=scope, category=category, k=k, vector=vector)
        return [c.memory for c in found]

    async def identify(
        self,
        category: Category,
        key: str,
        value: str,
        *,
        scope: str,
        judge_timeout: float | None = None,
        explicit: bool = True,
        vector: np.ndarray | None = None,
        reading: Reading | None = None,
        lookup: BatchLookup | None = None,
        apart: tuple[Category, str] | None = None,
    ) -> Identity:
        """Which stored memory this write restates (see ``memory/identity.py``).

        Candidates come from the recall pipeline itself (both channels, fused, this
        user, scope and category), in any language. The rule's sure answers (the same
        key; the same entity's same single-valued attribute in a language it reads)
        are a fast path. Otherwise the fast model judges the candidates close in
        meaning (``judge_timeout`` seconds at most); its answer, validated, wins.
        Undecided — no model, the model late or unusable — the likeliest restatement
        is linked (``Identity.restates``): both stay active, the newer delivered
        first, and the idle consolidation pass (``consolidate``) decides later. With
        no model at all, only a neighbour that ``reading`` finds to be the same
        single-valued attribute. ``apart``: the other side whose facts the model sees.
        """
        try:
            found = await self.vectors.nearest(
                key, value, scope=scope, category=category, k=NEIGHBOURS, vector=vector,
                same_key=True, lookup=lookup,
            )
        except Exception as exc:  # a failed lookup must not lose the fact: plain write
            log.warning("[MEMORY_IDENTITY] neighbour lookup failed: %s", exc)
            return Identity(key)
        candidates = [c.memory for c in found if c.memory.category == category]
        # The same key under another category is another fact (the store's identity is
        # scope, category, key): never superseded, flagged when it reads as the same one.
        elsewhere = filed_elsewhere(key, value, category, [c.memory for c in found])
        ruled = decide(key, value, category, candidates, explicit=explicit)
        if ruled.replaces or ruled.same_as is not None or ruled.key != key or ruled.decided_by == "key":
            guessed = [] if explicit else read_by_key(ruled, key, value, category, candidates)
            if not guessed:
                return ruled.flagged(elsewhere)
            if self.llm is not None and judge_timeout is not None and judge_timeout > 0:
                judged = await self._judge_guess(category, key, value, guessed, scope, judge_timeout)
                if judged is not None:
                    return judged.flagged(elsewhere)
            # Undecided, a guess is linked, never merged (the idle pass decides it) —
            # unless the two read as two people's: "Meine Frau heißt Anna" filed under
            # "name", then "Ich heiße Peter" is my name beside my wife's, not its version.
            if any(m.key == key for m in guessed):
                key = await self._free_key(key, value, category, scope)
            linked = [m for m in guessed if await self._one_holder(value, m, nearest=True)]
            return Identity(key, restates=linked[0].id if linked else None).flagged(elsewhere)
        close = by_meaning(key, value, category, found, self._meaning_floor(), explicit=explicit)
        near = {c.memory.id for c in found if c.dense is not None and c.dense >= LINK_COSINE}
        # Model-free links are for the person's own facts filed by their reading: a
        # writer's own key (save_memory, import, the daemon) says which fact it is, and a
        # project's or a rule's facts are too varied for a few attributes (on
        # recall_corpus, 10 of 120 rows linked to another key's fact: "car" to
        # "allergy", "docker_base_image" to "python_version").
        likely = None
        if category == Category.USER and not explicit:
            likely = await self.reader().likely_restatement(
                key, reading or Reading(None, None), close, near, lambda older, filed: self._one_holder(value, older, TWO_PEOPLE if filed else ONE_HOLDER, nearest=not filed)
            )
        if self.llm is not None and judge_timeout is not None and judge_timeout > 0:
            asked = [*close, *await self._filed_apart(key, value, apart, vector)]
            judged = await self._judge(category, key, value, asked, judge_timeout, explicit) if asked else None
            if judged is not None:
                return judged.flagged(elsewhere)
            # Undecided: linked, decided at idle by the same judgement: a likely
            # restatement, or with an embedder that reads no meaning the closest one.
            if close and not self.reader().meaningful:
                likely = likely or close[0]
        if likely is not None:
            return replace(ruled, restates=likely.id).flagged(elsewhere)
        return ruled.flagged(elsewhere)

    async def _filed_apart(
        self, key: str, value: str, apart: tuple[Category, str] | None, vector: np.ndarray | None
    ) -> list[Memory]:
        """The facts close to a note in ``apart`` (the other category and its scope): the
        rule may file a restatement apart from the fact it restates, and the model, who
        also says where a fact belongs, is shown both. The closest few, as ``by_meaning``
        picks them; none when the lookup fails (the note is written where it is)."""
        if apart is None:
            return []
        category, scope = apart
        try:
            found = await self.vectors.nearest(key, value, scope=scope, category=category, k=NEIGHBOURS, vector=vector)
        except Exception as exc:
            log.warning("[MEMORY_IDENTITY] lookup in %s failed: %s", category, exc)
            return []
        return by_meaning("", value, category, found, self._meaning_floor(), explicit=False)[:APART]

    async def _judge_guess(
        self,
        category: Category,
        key: str,
        value: str,
        guessed: Sequence[Memory],
        scope: str,
        timeout: float,
    ) -> Identity | None:
        """The model's judgement of a note the rule finds the same fact only through a
        key read by meaning (``read_by_key``): a guess, so the model decides; an "add"
        takes the key numbered (``home_city_2``), for the store would supersede it.
        None: no valid answer, the rule's stands."""
        answer = await self._ask(judge_messages(str(category), key, value, guessed), timeout)
        judged = None if answer is None else parse_judgement(answer, key, value, guessed)
        if answer is None or judged is None:
            return None
        judged = replace(judged, filed=parse_filing(answer))
        if judgement_of(answer) is Judgement.ADD and any(m.key == key for m in guessed):
            return replace(judged, key=await self._free_key(key, value, category, scope))
        return judged

    async def _one_holder(
        self, value: str, older: Memory, floor: float = ONE_HOLDER, *, nearest: bool = False
    ) -> bool:
        """Whether a fact's words and ``older``'s read as held by one person in the
        holder space (``holder_space.py``, statements as the reader embeds them): their
        agreement at ``floor`` or above; True for an embedder it has no space for."""
        embedder = self.vectors.embedder
        space = await asyncio.to_thread(holder_space, embedder.id)
        if space is None:
            return True
        new = await self.reader().note_statement(value)
        old = await self.reader().statements([older])
        return space.one_holder(new, old[0], floor, nearest=nearest)

    def reader(self) -> MeaningReader:
        """The attribute reader of the embedder in use (its prototypes embedded once)."""
        return self.vectors.reader()

    async def warm(self) -> None:
        """Ready the attribute reader (its prototypes' vectors) once the vectors are
        loaded, so the first /remember does not embed them."""
        reader = self.reader()
        if not reader.meaningful:
            return
        try:
            await reader.prepare()
        except Exception as exc:  # read at the first write instead
            log.info("[MEMORY_IDENTITY] attribute prototypes not ready: %s", exc)

    def _meaning_floor(self) -> float | None:
        """The cosine below which a neighbour is not close enough in meaning to ask
        about: recall's own threshold for this embedder (None: lexical-only)."""
        if not self.vectors.ready:
            return None
        return self.vectors.recaller.threshold

    async def consolidate(self, *, timeout: float = CONSOLIDATE_TIMEOUT) -> int:
        """The idle pass: each open ``restates`` link decided by the fast model's
        validated judgement — the same fact supersedes the older (restorable), another
        fact unlinks — audited "decided later by the model". A link the model cannot
        decide now stays for the next pass. The number of links decided."""
        if self.llm is None:
            return 0
        decided = 0
        for row in await self.store.list(user=self.user, statuses=[Status.ACTIVE], linked=True):
            older = None if row.restates is None else await self.store.get(row.restates)
            same: bool | None = False
            if older is not None and older.status is Status.ACTIVE and older.key != row.key:
                same = await self._decide_later(row, older, timeout)
            if same is None:
                continue
            gone = await self.store.settle(
                row.id, same_fact=same, origin=Origin.AGENT, now=self.clock(), reason=DECIDED_LATER
            )
            if gone is not None:
                decided += 1
            if gone:
                await self.vectors.remove(gone)
        return decided

    async def _decide_later(self, row: Memory, older: Memory, timeout: float) -> bool | None:
        """Whether ``row`` restates ``older`` by the model's judgement; None: undecided."""
        answer = await self._ask(judge_messages(str(row.category), row.key, row.value, [older]), timeout)
        judged = None if answer is None else parse_judgement(answer, row.key, row.value, [older])
        if judged is None:
            return None
        return judged.same_as is not None or judged.key == older.key or older.id in judged.replaces

    async def _judge(
        self,
        category: Category,
        key: str,
        value: str,
        candidates: Sequence[Memory],
        timeout: float,
        explicit: bool,
    ) -> Identity | None:
        """The fast model's add / update / no-op, validated; None when unusable."""
        answer = await self._ask(judge_messages(str(category), key, value, candidates), timeout)
        if answer is None:
            return None
        judged = parse_judgement(answer, key, value, candidates, explicit=explicit)
        if judged is None:
            log.info("[MEMORY_IDENTITY] model answer not a valid choice; using the rule")
            return None
        # Where the new fact belongs, asked in the same call: kept only when valid.
        return replace(judged, filed=parse_filing(answer))

    async def _ask(self, messages: list[dict[str, str]], timeout: float) -> str | None:
        """One side call to the fast model, bounded by ``timeout``; None on any failure
        (the caller's rule decides: a write never waits on, or fails by, the model)."""
        llm = self.llm
        assert llm is not None
        try:
            completion = await asyncio.wait_for(
                llm.complete(messages, model=llm.fast_model, temperature=0.0), timeout
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # TimeoutError, LLMError, anything: the rule decides
            log.info("[MEMORY_IDENTITY] model side call unavailable (%s); using the rule", exc)
            return None
        return completion.content
