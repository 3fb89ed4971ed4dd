"""The lexical recall channel's language: which words of a query are worth matching.

Both stores index key words and value with their own full-text engine (SQLite FTS5
with ``porter unicode61 remove_diacritics 2``, PostgreSQL ``tsvector`` with the
language-neutral ``simple`` config and accents folded), so the query side only has
to pick the words: casefolded, split on anything that is not a letter or digit (a
key's underscores too), function words of English, Portuguese and Spanish dropped
(they match nearly every memory and cost an index scan each), duplicates removed.
The words stay plain letters and digits, so no store needs to escape them.
"""

from __future__ import annotations

import heapq
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from functools import lru_cache

# Letters and digits only: "_" and every operator of FTS5 or tsquery split words.
_WORD = re.compile(r"[^\W_]+")
# A query longer than this is a pasted paragraph: its first words carry the question.
MAX_TERMS = 24
QUERY_CHARS = 8_000
# Okapi BM25's usual constants (FTS5's bm25() uses the same).
BM25_K1 = 1.2
BM25_B = 0.75
# Casefolded, accents removed (compared after ``fold``).
STOP_WORDS = frozenset(
    # English
    "a an and are as at be been being but by can could did do does doing for from had "
    "has have having he her here hers him his how i if in into is it its me mine my "
    "no not of on or our ours she should so some than that the their theirs them then "
    "there these they this those to too us was we were what when where which who whom "
    "why will with would you your yours about any all also am just only please tell "
    "remember know"
    # Portuguese
    " o os um uma uns umas de do da dos das em no na nos nas ao aos pelo pela pelos "
    "pelas por para com sem que e eu tu ele ela nos vos eles elas meu minha meus minhas "
    "teu tua seu sua seus suas qual quais quem como onde quando porque se mas ou ja "
    "nao sim foi era ser esta estao isso isto esse essa aquele aquela lhe me te voce "
    "sao tem ter ha mais muito"
    # Spanish
    " el la los las un una unos unas del al y en con sin por para que de mi mis tu tus "
    "su sus yo es son fue era este esta estos estas ese esa eso lo le les nos cual cuales "
    "quien como donde cuando porque pero o si ya muy mas hay tiene tengo usted"
    .split()
)


def fold(word: str) -> str:
    """Casefolded with accents removed: how stop words and overlaps are compared."""
    if word.isascii():  # most words; recall folds a few hundred per query
        return word.lower()
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def words(text: str) -> list[str]:
    """Every word of ``text``, casefolded (accents kept: the stores fold them)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def query_terms(text: str) -> list[str]:
    """The words of a query worth matching, in order, at most ``MAX_TERMS``, read from
    its first ``QUERY_CHARS`` (a pasted log of megabytes took seconds to tokenise for
    24 words its first lines hold)."""
    seen: set[str] = set()
    terms: list[str] = []
    for word in words(text[:QUERY_CHARS]):
        folded = fold(word)
        if folded in STOP_WORDS or folded in seen or (len(folded) < 2 and not word.isdigit()):
            continue
        seen.add(folded)
        terms.append(word)
        if len(terms) == MAX_TERMS:
            break
    return terms


def _stem(word: str) -> str:
    # A 5-character prefix is a poor man's stemmer that works the same in every
    # language: "projects" meets "project", "favorita" meets "favorito". Folding only
    # the first five characters gives the same five letters, for a fraction of the work.
    return fold(word[:5])[:5]


@lru_cache(maxsize=8192)
def stems(text: str) -> tuple[str, ...]:
    """The 5-letter stems of ``text``'s words, in order. Cached: a common word brings
    the same few hundred newest rows to every query that holds it (each line of an
    import looks its neighbours up), and tokenising them again was most of a lookup."""
    return tuple(_stem(w) for w in words(text))


def coverage(terms: Sequence[str], key: str, value: str) -> float:
    """Share of the query ``terms`` that a memory's key or value contains.

    Recall's threshold uses it to keep strong lexical matches that the embedder
    scores low (names, codes, rare words): the threshold exists to drop unrelated
    memories, never true hits.
    """
    if not terms:
        return 0.0
    wanted = _wanted(tuple(terms))
    return len(wanted.intersection(stems(f"{key} {value}"))) / len(wanted)


MAX_WORD = 64
"""The longest whitespace-free run read as one word when spelled across scripts."""
SPELLED_MIN = 4
"""The shortest romanized word that counts as spelled in another script: shorter ones
("na", "ma", "to") meet by chance across languages."""


@lru_cache(maxsize=8192)
def _romanized(text: str) -> frozenset[str]:
    """The 5-letter stems of ``text``'s words written in any script, in Latin letters
    (``anyascii``: "Тарас" -> "taras", "जोहान" -> "johan", "タラス" -> "tarasu")."""
    from anyascii import anyascii  # only recall's cross-script check needs its tables

    return frozenset(_stem(w) for w in words(anyascii(text)) if len(w) >= SPELLED_MIN)


def spelled_elsewhere(text: str, terms: Sequence[str], key: str, value: str) -> float:
    """Share of the query's words (``terms`` count them) that a memory holds only in
    another script: the same word romanized ("Taras" and "Тарас", "фронтенд" and
    "frontend", "जोहान" and "Johan"), not held as written (``coverage`` counts those).
    A name or a borrowed word crosses scripts; the lexical channel cannot see it, and
    the embedder scores it low. The query's words are read whitespace-apart here: an
    abugida's vowel signs split ``words``' runs ("जोहान" into letters)."""
    held = _romanized(value)
    if not held:
        return 0.0
    plain = set(stems(f"{key} {value}"))
    spelled = 0
    # A pasted paragraph's first words carry the question (as ``MAX_TERMS``); a long
    # run without spaces is no word of it.
    for token in text.split(maxsplit=MAX_TERMS)[:MAX_TERMS]:
        if len(token) > MAX_WORD:
            continue
        own = stems(token)
        if own and not plain.intersection(own) and (r := _romanized(token)) and r <= held:
            spelled += 1
    return min(1.0, spelled / max(1, len(terms)))


@lru_cache(maxsize=256)
def _wanted(terms: tuple[str, ...]) -> frozenset[str]:
    """A query's stems, once per query: recall measures every candidate against them."""
    return frozenset(_stem(t) for t in terms)


def bm25_rank(
    docs: Mapping[int, str],
    matched: Mapping[str, Sequence[int]],
    counts: Mapping[str, int],
    *,
    total: int,
    limit: int,
) -> list[tuple[int, float]]:
    """Okapi BM25 over a bounded set of candidates, best first (higher is better):
    ``docs`` their text, ``matched`` which of them the store found for each query word,
    ``counts`` how many of the ``total`` rows hold each word (its rarity). A word's
    occurrences in a text are counted by the same 5-letter stems as ``coverage``: the
    store found the text for the word, so it counts once at least."""
    tokens = {i: stems(text) for i, text in docs.items()}
    mean = sum(len(t) for t in tokens.values()) / len(tokens) if tokens else 1.0
    # Each document's length norm once (the same expression: the same float), not
    # once per word that found it: every line of an import ranks a few hundred.
    norms = {i: BM25_K1 * (1 - BM25_B + BM25_B * len(t) / (mean or 1.0)) for i, t in tokens.items()}
    scores: dict[int, float] = {}
    for term, ids in matched.items():
        held = counts.get(term, len(ids))
        idf = math.log((total - held + 0.5) / (held + 0.5) + 1.0)
        stem = _stem(term)
        for i in ids:
            tf = max(1, tokens[i].count(stem))
            scores[i] = scores.get(i, 0.0) + idf * tf * (BM25_K1 + 1) / (tf + norms[i])
    return heapq.nsmallest(limit, scores.items(), key=lambda item: (-item[1], item[0]))


def rank_newest(
    matches: Mapping[str, Sequence[tuple[int, str, str]]], *, cap: int, top: int, limit: int
) -> list[tuple[int, float]]:
    """The lexical channel's ranking of each query word's newest matches ((id, key,
    value), newest first, at most ``cap`` a word; ``top`` the store's largest id)."""
    docs: dict[int, str] = {}
    matched: dict[str, list[int]] = {}
    for term, rows in matches.items():
        matched[term] = [memory_id for memory_id, _, _ in rows]
        docs.update((memory_id, f"{key} {value}") for memory_id, key, value in rows)
    if not docs:
        return []
    # How many rows hold each word (its rarity): exact below the cap; above it,
    # estimated from how far back the newest `cap` reach (counting would score
    # every match again).
    counts = {
        t: len(ids) if len(ids) < cap else round(cap * top / max(1, top - min(ids) + 1))
        for t, ids in matched.items()
    }
    return bm25_rank(docs, matched, counts, total=max(top, len(docs)), limit=limit)
