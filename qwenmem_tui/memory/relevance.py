""""Not relevant here": a person's verdict that a memory did not belong with a message.

Recall finds what is *similar*; only the person knows whether it was *relevant*. When
they mark a receipt's memory "not relevant here", the message it came with is kept
(redacted) with the project, and recall leaves that memory out whenever a new message
in the project is like that one: the same words (most of the query terms shared) or
the same meaning (the embedder's cosine well above its recall threshold). Other
messages still find it: the memory is not wrong, only out of place there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from qwenmem_tui.memory.lexical import query_terms

if TYPE_CHECKING:  # the service imports this module before it loads numpy
    import numpy as np

SIMILAR_TERMS = 0.5
"""Jaccard share of query terms from which two messages count as alike."""
SIMILAR_MARGIN = 0.5
"""How far between the embedder's recall threshold and 1.0 a cosine must be: a recall
threshold says "related", alike messages need more than that."""

EmbedQueries = Callable[[Sequence[str]], Awaitable["np.ndarray"]]


def term_overlap(a: str, b: str) -> float:
    """Jaccard similarity of the two texts' query terms (0.0 when either has none)."""
    left, right = set(query_terms(a)), set(query_terms(b))
    if not left or not right:
        return 0.0
    return len(left & right) / len(left | right)


def similar_cosine(threshold: float) -> float:
    """The cosine from which two messages are alike, for an embedder's recall threshold."""
    return threshold + (1.0 - threshold) * SIMILAR_MARGIN


async def dismissed_for(
    query: str,
    dismissals: Sequence[tuple[int, str]],
    *,
    embed: EmbedQueries | None = None,
    threshold: float = 0.0,
) -> set[int]:
    """The memories marked not relevant for a message like ``query``."""
    if not dismissals or not query.strip():
        return set()
    out = {memory_id for memory_id, said in dismissals if term_overlap(query, said) >= SIMILAR_TERMS}
    rest = [(memory_id, said) for memory_id, said in dismissals if memory_id not in out]
    if rest and embed is not None:
        vectors = await embed([query, *(said for _, said in rest)])
        cosines = vectors[1:] @ vectors[0]
        floor = similar_cosine(threshold)
        out.update(memory_id for (memory_id, _), cos in zip(rest, cosines) if float(cos) >= floor)
    return out
