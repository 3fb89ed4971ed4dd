"""Fact identity: which stored memory a new write restates — decided by evidence.

A memory that silently drops a distinct fact is worse than none (issue 24), so a write
supersedes an existing memory only when it is certainly the same fact with a new
value. Three concerns, three modules:

- ``subject.py`` reads what a fact is about from its words (a fast path in the
  languages it knows) and ``meaning.py`` reads it by meaning (any language);
- this module decides: ``decide`` is the rule over the recall pipeline's neighbours
  (the same entity's same single-valued attribute supersedes; the same words refresh;
  a near-paraphrase is flagged ``possible_duplicate``), and ``by_meaning`` picks the
  neighbours close in meaning the model may be asked about;
- ``judge.py`` holds the fast model's prompt and validates its answer.

Undecided — no model, or the model late — a likely restatement is linked
(``Identity.restates``), never merged: both stay active, recall delivers the newer
first and marks the older as earlier, and the idle consolidation pass decides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from qwenmem_tui.memory.model import FLAG_POSSIBLE_DUPLICATE, Category, Memory
from qwenmem_tui.memory.subject import (
    SELF,
    Subject,
    about,
    contradicts,
    fold,
    restates,
    single_valued,
    statement,
    words,
)

if TYPE_CHECKING:
    from qwenmem_tui.memory.recall import Candidate

POSSIBLE_DUPLICATE = FLAG_POSSIBLE_DUPLICATE

def near_paraphrase(value: str, other: str) -> bool:
    """Nearly the same words (a restatement the rule cannot name): flag, never merge."""
    a, b = set(words(value)), set(words(other))
    if len(a) < 3 or len(b) < 3:
        return False
    return len(a & b) / len(a | b) >= 0.75


@dataclass(frozen=True)
class Identity:
    """What a write becomes: its key, the rows it supersedes under other keys, the
    row it merely repeats (no write, only a refresh of that row), and the rows it may
    repeat (kept both, flagged)."""

    key: str
    replaces: tuple[int, ...] = ()
    same_as: Memory | None = None
    decided_by: str = "rule"  # "rule" | "model" | "key"
    possible_duplicates: tuple[int, ...] = ()
    # The category the model said the new fact belongs in (validated), if it said one.
    filed: Category | None = None
    # An older memory this write may restate, undecided (no model, or the model late):
    # both stay active, the new row names it (``Memory.restates``) until decided.
    restates: int | None = None
    # The memory the model found this write updates or repeats, wherever it is filed: a
    # note the rule filed apart from it moves there (``MemoryWriter._to_target``).
    target: Memory | None = None

    def flagged(self, ids: Sequence[int]) -> Identity:
        """This identity with ``ids`` also named as possible duplicates."""
        more = tuple(i for i in ids if i not in self.possible_duplicates)
        return replace(self, possible_duplicates=self.possible_duplicates + more) if more else self


def decide(
    key: str,
    value: str,
    category: Category,
    neighbours: Sequence[Memory],
    *,
    explicit: bool = True,
) -> Identity:
    """The deterministic rule over ``neighbours`` (same user, scope and category).

    A neighbour restates this write only when both name the same entity's same
    single-valued attribute: its row is superseded by the write, under the write's
    own key. Without an explicit key, a write saying exactly what the neighbour says
    only refreshes it. Neighbours that may be the same fact are kept and named in
    ``possible_duplicates``.
    """
    new = about(key, value)
    same_key = next((n for n in neighbours if n.key == key), None)
    restated = [
        n for n in neighbours if n.key != key and restates(new, about(n.key, n.value), category)
    ]
    if restated and not explicit and same_key is None and _same_text(value, restated[0].value):
        return Identity(restated[0].key, same_as=restated[0])  # said again: a refresh
    if restated:
        return Identity(key, tuple(n.id for n in restated), decided_by="rule")
    if same_key is not None:
        return Identity(key, decided_by="key")
    maybe = tuple(
        n.id for n in neighbours if _same_text(value, n.value) or near_paraphrase(value, n.value)
    )
    if maybe and not explicit:
        twin = next((n for n in neighbours if _same_text(value, n.value)), None)
        if twin is not None:  # /remember said it again: the row it repeats
            return Identity(twin.key, same_as=twin)
    return Identity(key, possible_duplicates=maybe)


def filed_elsewhere(
    key: str, value: str, category: Category, found: Sequence[Memory]
) -> tuple[int, ...]:
    """Rows of ``found`` under this key in another category that may be this very fact
    (an attribute the vocabulary knows holds one value — an editor, a home city — or
    nearly the same words): kept, and named as possible duplicates. "ana" under
    feedback (how Ana likes meetings) and "ana" under user (what she drinks) share a
    name and nothing else: not named, however short their values."""
    new = about(key, value)
    known = new.attribute is not None and single_valued(new.attribute)
    return tuple(
        m.id
        for m in found
        if m.key == key
        and m.category != category
        and (
            (known and restates(new, about(m.key, m.value), category))
            or _same_text(value, m.value)
            or near_paraphrase(value, m.value)
        )
    )


def read_by_key(
    ruled: Identity, key: str, value: str, category: Category, neighbours: Sequence[Memory]
) -> list[Memory]:
    """The rows ``ruled`` (``decide``'s answer for a note) replaces or shares its key
    with although the words of the two facts do not state the same subject: the
    sameness rests on a key read by meaning ("Mi jefe se llama Carlos" filed under
    "name"), a guess for the model to check, not the rule's knowledge."""
    new = stated(value)
    rows = [
        n
        for n in neighbours
        if n.id in ruled.replaces or (ruled.decided_by == "key" and n.key == key)
    ]
    guessed = [
        n for n in rows if not restates(new, stated(n.value), category) and not _same_text(value, n.value)
    ]
    return guessed if len(guessed) == len(rows) else []  # any row the words state: the rule's


def stated(value: str) -> Subject:
    """What a fact's words alone say it is about (nothing known when they say nothing
    the rule reads)."""
    return statement(value) or Subject(SELF)


def _same_text(a: str, b: str) -> bool:
    return " ".join(fold(a).split()).strip(" .!") == " ".join(fold(b).split()).strip(" .!")


JUDGE_CANDIDATES = 4
"""Neighbours a model is asked about at most: the closest in meaning."""


def by_meaning(
    key: str,
    value: str,
    category: Category,
    found: Sequence[Candidate],
    floor: float | None,
    *,
    explicit: bool = True,
) -> list[Memory]:
    """The recall pipeline's neighbours a write may restate, closest first: the same
    category, another key, close in meaning (the cosine clears ``floor``, recall's own
    threshold for the embedder, in any language) or sharing words, and no evidence
    that they are a different subject (list items, turns, two attributes the rule
    knows apart). No grammar decides who is asked: the rule only rules out.

    A note's key (``explicit`` False) was read from its words, by meaning when the
    rule could not: a guess the model is there to check, so only what the words
    state rules a neighbour out ("Ich habe zu SAP gewechselt", read as a home city,
    is still asked about "Ich bin bei Bosch angestellt")."""
    new = about(key, value) if explicit else stated(value)
    if new.is_list:
        return []
    close = []
    for candidate in found:
        memory = candidate.memory
        if memory.category != category or memory.key == key:
            continue
        near = floor is None or (candidate.dense is not None and candidate.dense >= floor)
        if not (near or candidate.lexical is not None):
            continue
        old = about(memory.key, memory.value) if explicit else stated(memory.value)
        if not contradicts(new, old):
            close.append(memory)
    return close[:JUDGE_CANDIDATES]
