"""The memory domain model: rows, categories, statuses, origins, scopes and TTLs."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Collection, Sequence
from dataclasses import KW_ONLY, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qwenmem_tui.memory.provenance import Provenance

GLOBAL_SCOPE = "global"
DAY = 86400.0


class Category(StrEnum):
    USER = "user"
    FEEDBACK = "feedback"
    PROJECT = "project"
    REFERENCE = "reference"


class Status(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"
    QUARANTINED = "quarantined"
    DELETED = "deleted"


class Origin(StrEnum):
    USER = "user"  # /remember or import by a person
    TOOL = "tool"  # the model's save_memory call
    AGENT = "agent"  # background extraction


class AuditAction(StrEnum):
    CREATE = "create"
    SUPERSEDE = "supersede"
    REFRESH = "refresh"
    EXPIRE = "expire"
    QUARANTINE = "quarantine"
    APPROVE = "approve"
    FORGET = "forget"
    RESTORE = "restore"  # a superseded memory made active again by a person
    MOVE = "move"  # category and scope changed by a person
    DISMISS = "dismiss"  # "not relevant here": left out of recall for similar messages
    REVIEW = "review"  # a person looked at it in the sampled review and kept it
    UNLINK = "unlink"  # a possible restatement decided to be another fact: both kept


# Facts about the person follow them everywhere; facts about a codebase stay with it.
GLOBAL_CATEGORIES = frozenset({Category.USER, Category.FEEDBACK})

# Flags that describe an active memory instead of holding it for review: a secret was
# cut out of it, or it is a project fact the model read in a file (rendered as a note
# read from a file, never as an instruction). Every other flag quarantines.
FLAG_SECRET_REDACTED = "secret_redacted"
FLAG_FROM_FILE = "from_file"
# Kept beside a memory it may repeat (memory/identity.py): both stay active, /memory
# shows the flag, nothing was merged.
FLAG_POSSIBLE_DUPLICATE = "possible_duplicate"
# A turn of an imported conversation between people (memory/backup.py): its vector
# embeds the turn before it too (``turn_text``), since a reply ("Researching adoption
# agencies") is found by what it answers ("What are your plans for the summer?").
FLAG_DIALOGUE = "dialogue_turn"
LABEL_FLAGS = frozenset(
    {FLAG_SECRET_REDACTED, FLAG_FROM_FILE, FLAG_POSSIBLE_DUPLICATE, FLAG_DIALOGUE}
)


def holds(flags: Collection[str]) -> bool:
    """True when ``flags`` hold the write for review (quarantine)."""
    return any(flag not in LABEL_FLAGS for flag in flags)

DEFAULT_TTL_DAYS: dict[str, int] = {
    Category.USER: 365,
    Category.FEEDBACK: 365,
    Category.PROJECT: 90,
    Category.REFERENCE: 30,
}
DEFAULT_TTL_CAP_DAYS = 730


def scope_for(category: Category, project: str) -> str:
    """The scope a memory of ``category`` lives in when saved from ``project``."""
    return GLOBAL_SCOPE if category in GLOBAL_CATEGORIES else project


def content_hash(value: str) -> str:
    """Hash of the normalised value; equal values under different keys dedupe on it."""
    norm = " ".join(unicodedata.normalize("NFKC", value).casefold().split())
    return hashlib.sha256(norm.encode()).hexdigest()


@dataclass(frozen=True)
class TtlPolicy:
    """Per-category default TTLs; a requested TTL may shorten freely but not pass the cap."""

    days: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_TTL_DAYS))
    cap_days: int = DEFAULT_TTL_CAP_DAYS

    def resolve(self, category: Category, requested: int | None) -> tuple[int, str | None]:
        """Effective TTL in days and, when the request was changed, why (for the audit)."""
        default = self.days.get(category, DEFAULT_TTL_DAYS[category])
        if requested is None:
            return default, None
        if requested < 1:
            return 1, f"ttl_days {requested} raised to 1"
        if requested > self.cap_days:
            return self.cap_days, f"ttl_days {requested} capped at {self.cap_days}"
        if requested > default:
            return requested, f"ttl_days {requested} lengthened from default {default}"
        return requested, None


@dataclass
class MemoryDraft:
    """A memory someone wants to write, before the guard and the store decide its fate."""

    category: Category
    key: str
    value: str
    origin: Origin
    scope: str
    user: str
    ttl_days: int | None = None
    reason: str = ""  # why it is written, kept in the audit trail
    created_at: float | None = None  # import keeps the original time
    stated_at: float | None = None  # when the fact was said (default: created_at, or now)
    # Active rows of the same subject under other keys (memory/identity.py): superseded
    # by this write in its own transaction.
    replaces: tuple[int, ...] = ()
    # Whether an active row holding the same value under another key absorbs this
    # write (DEDUPLICATED). The service says no: equal values under different keys are
    # different subjects' values ("true" for two services).
    dedupe: bool = True
    # An older active memory this write may restate, left for the model to decide:
    # stored as the new row's ``restates`` link (memory/identity.py).
    restates: int | None = None


@dataclass
class Memory:
    id: int
    user: str
    scope: str
    category: Category
    key: str
    value: str
    origin: Origin
    status: Status
    flags: list[str]
    created_at: float
    updated_at: float
    expires_at: float | None
    last_recalled_at: float | None = None
    recall_count: int = 0
    superseded_by: int | None = None
    content_hash: str = ""
    embedding_model: str = ""
    # The older memory this one may restate, not yet decided (memory/identity): both
    # active, recall delivers this one first and that one marked as earlier.
    restates: int | None = None
    # When the fact was said (an import's or a dialogue's date; else when it was
    # saved), and once another version replaced it, until when it held (None while
    # current). Recall "as of" a date and `memory history` read them.
    stated_at: float = 0.0
    valid_until: float | None = None

    def __post_init__(self) -> None:
        if not self.stated_at:
            self.stated_at = self.created_at

    def embed_text(self) -> str:
        return embed_text(self.category, self.key, self.value)

    def to_json(self) -> dict[str, Any]:
        """The contract §3 JSON shape (plus a few extra fields)."""
        return {
            "id": self.id,
            "category": str(self.category),
            "key": self.key,
            "value": self.value,
            "origin": str(self.origin),
            "status": str(self.status),
            "scope": self.scope,
            "user": self.user,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "expires_at": self.expires_at,
            "flags": list(self.flags),
            "last_recalled_at": self.last_recalled_at,
            "recall_count": self.recall_count,
            "superseded_by": self.superseded_by,
            "restates": self.restates,
            "stated_at": self.stated_at,
            "valid_until": self.valid_until,
        }


def export_line(
    memory: Memory, *, approved: bool = False, audit: Collection[AuditEntry] = ()
) -> str:
    """One line of ``qwenmem memory export`` (and of ``--salvage``): the §3 JSON plus
    ``ttl_days``, so an import gives a restored memory the lifetime it had, and
    ``approved`` for a memory a person approved out of quarantine (the review decision
    a restore keeps), and its ``audit`` trail (who changed it, when and why: what
    ``memory history`` shows of it after a restore)."""
    row = memory.to_json()
    if memory.expires_at is not None:
        row["ttl_days"] = max(1, round((memory.expires_at - memory.created_at) / DAY))
    if approved:
        row["approved"] = True
    if audit:
        row["audit"] = [
            {
                "action": str(e.action),
                "origin": e.origin,
                "at": e.at,
                "reason": e.reason,
                "old_value": e.old_value,
                "new_value": e.new_value,
            }
            for e in audit
        ]
    return json.dumps(row, ensure_ascii=False)


def embed_text(category: str, key: str, value: str, context: str | None = None) -> str:
    """What gets embedded: the key words help a query find the fact, not only the value.
    A dialogue turn (``context`` not None) is embedded as it was said, after the turn
    before it ("" for none): its key names a place in a file, not a subject (on LoCoMo
    "reference session 1 d1 3:" before the two turns cost dense R@5 0.653 -> 0.573)."""
    if context is not None:
        return f"{context}\n{value}" if context else value
    return f"{category} {key.replace('_', ' ')}: {value}"


TURN_GAP_S = 6 * 3600
"""A turn stated this long after the one before it starts a new conversation: that one
is not its context."""


def turn_context(memory: Memory, before: Memory | None) -> str | None:
    """What ``memory``'s vector embeds before its own text (``embed_text``): None when it
    is not a dialogue turn; else the turn written just before it (``before``) of the
    same conversation — another dialogue turn of this user and scope, said at most
    ``TURN_GAP_S`` earlier, not held — or "" when there is none."""
    if FLAG_DIALOGUE not in memory.flags:
        return None
    if before is None or not same_conversation(before, memory):
        return ""
    return before.value


_SPEAKER = re.compile(r"^\s*([^\W\d_][^:\n]{0,40}?)\s*:\s+\S")


def speaker_label(value: str) -> str | None:
    """The speaker of a ``"Name: text"`` line (its label, casefolded); None when the
    line is not one. Structure, not words: it holds in any language."""
    match = _SPEAKER.match(value)
    return match.group(1).strip().casefold() if match is not None else None


def spoken(value: str) -> str:
    """What a ``"Name: text"`` line says, its speaker's label left out; any other
    text as it is."""
    return value.split(":", 1)[1] if speaker_label(value) is not None else value


def same_conversation(before: Memory, after: Memory) -> bool:
    """Two dialogue turns of one conversation, ``before`` said first (and not held): of
    one user and scope, at most ``TURN_GAP_S`` apart."""
    return (
        FLAG_DIALOGUE in before.flags
        and FLAG_DIALOGUE in after.flags
        and not holds(before.flags)
        and (before.user, before.scope) == (after.user, after.scope)
        and 0 <= after.stated_at - before.stated_at <= TURN_GAP_S
    )


@dataclass(frozen=True)
class WriteRequest:
    """One write as its writer asks for it (``MemoryService.save`` / ``prepare``): the
    fact, who wrote it, and what the guard, identity and TTL are to take as given.

    ``provenance`` says who wrote and what was in view; without it, a write of origin
    ``user`` is the person's own words and any other a model write with
    ``turn_outputs`` in view. ``hold``: flags that quarantine the write whatever the
    guard says (an imported row held when exported); ``labels``: label flags it keeps
    (``from_file`` of a restored backup). ``explicit_key``: the writer named the key
    (import, ``save_memory``, the daemon): it is kept as given; /remember and
    extraction let identity choose. ``expires_at``: an exact expiry (a backup's),
    instead of the TTL's. ``judge_timeout``: seconds the fast model may take to say
    which memory the write restates (None: the rule alone).
    """

    category: str
    key: str
    value: str
    _: KW_ONLY
    origin: Origin | str
    project: str
    ttl_days: int | None = None
    turn_outputs: Sequence[str] = ()
    provenance: Provenance | None = None
    reason: str = ""
    scope: str | None = None
    created_at: float | None = None
    expires_at: float | None = None
    stated_at: float | None = None
    hold: Sequence[str] = ()
    labels: Sequence[str] = ()
    judge_timeout: float | None = None
    explicit_key: bool = True


REMEMBER_JUDGE_TIMEOUT = 2.5
"""Seconds /remember waits for the fast model's add/update/no-op choice: the
confirmation shows the final decision; when the model is late the pair is linked and
decided later. With the note's embeddings, /remember answers within 3 s."""


@dataclass(frozen=True)
class RememberRequest:
    """A note to file as /remember files it (``MemoryService.remember``): the text,
    the project it is said in, and what its writer settles itself.

    ``category`` / ``key``: the writer's choice (a key it names is kept as given);
    unless named, the rule and the fast model file the note. ``origin`` and
    ``provenance``: the person's own words unless given (the MCP ``remember`` tool
    gives a model's). ``reason``: what the audit says did it. ``judge_timeout``:
    seconds the fast model may take to say which memory the note restates.
    """

    text: str
    _: KW_ONLY
    project: str
    category: str | None = None
    key: str | None = None
    origin: Origin | str = Origin.USER
    provenance: Provenance | None = None
    reason: str = "/remember"
    judge_timeout: float | None = REMEMBER_JUDGE_TIMEOUT


class WriteAction(StrEnum):
    CREATED = "created"
    SUPERSEDED = "superseded"  # created, and an older value of the key was superseded
    REFRESHED = "refreshed"  # same key, same value: only times moved
    DEDUPLICATED = "deduplicated"  # same value already active under another key
    QUARANTINED = "quarantined"


@dataclass
class WriteResult:
    memory: Memory
    action: WriteAction
    superseded: list[int] = field(default_factory=list)  # ids that left the index
    generation: int = 0  # store generation after this write (quarantine: unchanged)


@dataclass
class AuditEntry:
    id: int
    memory_id: int
    action: AuditAction
    origin: str
    at: float
    reason: str
    old_value: str | None
    new_value: str | None
