"""Nothing for small talk (issue 39): does a message ask anything memory could answer?

"hello?", "thanks!", "谢谢", "obrigado", "ok", "continue", 👍 — recall used to hand each of
them five memories, because a small multilingual embedder gives every pair of texts a
cosine of 0.75-0.85 and some memory always clears the threshold. A threshold on
memories cannot fix that; the decision is about the message.

It is made by meaning, in the embedder's own space, never by a word list: a linear
probe on the query vector (a logistic regression: one weight per dimension and a
bias), fitted on the tuning halves of three corpora (``bench/multilingual_corpus.jsonl``,
``abstain_fresh.jsonl``, ``abstain_fresh2.jsonl``: greetings, thanks, acknowledgements,
"continue", "how are you?", emoji and thanks that name what worked — "tak, buildet
virker nu" — in some 60 languages on one side, questions about facts, terse ones and
bare nouns — "kids?", "Katze?" — and short requests about work — "run the tests" — on
the other). The embedder carries the decision to languages and phrasings the corpora
never held. One signal may overrule it: a memory holding most of the message's own
words is kept (``recall.holds_its_words``), so a bare name or a code still finds it.

The probe belongs to one embedder's space (``abstain_probe.json``, keyed by
``Embedder.id``, written by ``bench/bench_abstain.py --write``). Another embedder gets
no abstention: the hash embedder scores unrelated text near 0 anyway.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

log = logging.getLogger("qwenmem.memory")

PROBES = Path(__file__).with_name("abstain_probe.json")
RIDGE = 0.03
"""L2 penalty of the fit, on standardised dimensions (0.01-0.1 did the same held out)."""


@dataclass(frozen=True)
class Abstention:
    """Small talk or not, for one embedder's query vectors."""

    weights: np.ndarray
    bias: float

    def score(self, vector: np.ndarray) -> float:
        """The probe's log-odds that the message is small talk."""
        return float(vector @ self.weights + self.bias)

    def is_small_talk(self, vector: np.ndarray) -> bool:
        return self.score(vector) > 0.0


def fit(vectors: np.ndarray, small_talk: np.ndarray, weight: np.ndarray, steps: int = 3000) -> Abstention:
    """Logistic regression of ``small_talk`` (bools) on ``vectors``, each row counting
    ``weight``; dimensions standardised while fitting, folded back into the weights."""
    x = np.asarray(vectors, dtype=np.float64)
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
    z = (x - mean) / scale
    y = np.asarray(small_talk, dtype=np.float64)
    w, b, total = np.zeros(z.shape[1]), 0.0, weight.sum()
    for _ in range(steps):
        error = (1 / (1 + np.exp(-(z @ w + b))) - y) * weight
        w -= 0.5 * (z.T @ error / total + RIDGE * w)
        b -= 0.5 * error.sum() / total
    folded = w / scale
    return Abstention(folded.astype(np.float32), float(b - mean @ folded))


@cache
def _table(path: Path) -> dict[str, dict[str, object]]:
    try:
        table: dict[str, dict[str, object]] = json.loads(path.read_text(encoding="utf-8"))
        return table
    except (OSError, ValueError) as exc:
        log.warning("[MEMORY] small-talk probe unreadable (%s): recall never abstains", exc)
        return {}


@cache
def abstention_for(embedder_id: str, path: Path = PROBES) -> Abstention | None:
    """The calibrated abstention of this embedder's space, None when it has none."""
    entry = _table(path).get(embedder_id)
    if entry is None:
        return None
    return Abstention(np.asarray(entry["weights"], dtype=np.float32), float(entry["bias"]))  # type: ignore[arg-type]
