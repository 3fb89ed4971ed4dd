"""What compaction keeps verbatim: the user's decisions and corrections, within a budget.

A user message that reads like a decision (`has_decision_cue`) or that the summariser
named is pinned automatically; automatic pins take at most `AUTO_PIN_SHARE` of the
window, the newest kept first. What the user pinned (`item.meta["pinned"]`) is always kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from qwenmem_tui.chat.view import content_text
from qwenmem_tui.features.compaction.gauge import estimate_tokens

if TYPE_CHECKING:
    from qwenmem_tui.features.compaction.summariser import Turn
    from qwenmem_tui.storage.sessions import Item

# Auto-detected decisions may not take more of the window than this; user pins may.
AUTO_PIN_SHARE = 0.2

# Phrases with which people decide or correct, in the languages our users write in.
# Deliberately specific: every hit is carried verbatim and costs window forever.
_CUE_PHRASES = (
    # English
    "actually,", "i decided", "we decided", "let's go with", "lets go with",
    "we'll use", "we will use", "don't use", "do not use", "instead of",
    "correction:", "i meant", "that's wrong", "that is wrong", "from now on",
    "not what i asked", "stick with",
    # Portuguese
    "na verdade", "decidi ", "decidimos", "vamos usar", "em vez de", "não use",
    "nao use", "correção", "quis dizer", "a partir de agora", "está errado",
    # Spanish
    "en realidad", "decidí", "vamos a usar", "en lugar de", "no uses",
    "corrección", "quise decir", "a partir de ahora", "está mal",
    # French
    "en fait", "j'ai décidé", "on va utiliser", "au lieu de", "n'utilise pas",
    "désormais", "à partir de maintenant", "je voulais dire",
    # German
    "eigentlich", "ich habe entschieden", "wir nehmen", "stattdessen",
    "nicht verwenden", "ab jetzt", "korrektur", "ich meinte",
    # Chinese, Japanese
    "其实", "决定", "改成", "不要用", "以后都", "更正", "我的意思是",
    "実は", "決めた", "代わりに", "今後は", "訂正",
)


def has_decision_cue(text: str) -> bool:
    """True when a user message reads like a decision or a correction."""
    folded = text.casefold()
    return any(cue in folded for cue in _CUE_PHRASES)


def decision_ids(block: Sequence[Turn], numbered: Sequence[int]) -> list[int]:
    """The user messages of `block` to pin: the turns the summariser numbered, and cues."""
    ids: list[int] = []
    for number, turn in enumerate(block, start=1):
        user = turn.user_item
        if user is None or user.id is None:
            continue
        message = user.message or {}
        if number in numbered or has_decision_cue(content_text(message.get("content"))):
            ids.append(user.id)
    return ids


def budget_pins(items: Sequence[Item], pinned: list[int], window: int) -> list[int]:
    """Auto pins within AUTO_PIN_SHARE of the window, newest kept first."""
    by_id = {item.id: item for item in items}
    budget = int(window * AUTO_PIN_SHARE)
    kept: list[int] = []
    for item_id in reversed(list(dict.fromkeys(pinned))):
        item = by_id.get(item_id)
        if item is None or item.message is None:
            continue
        cost = estimate_tokens([item.message])
        if cost > budget:
            break
        budget -= cost
        kept.append(item_id)
    return sorted(kept)
