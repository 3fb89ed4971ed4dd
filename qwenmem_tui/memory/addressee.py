"""Whom a turn of a conversation between people calls: the assistant or a person,
read in the embedder's space rather than by a word per language.

An order to the assistant inside other people's conversation is held for review;
"Mel, you should rest" is their speech (``guard.orders_the_assistant``). A turn that
opens by calling someone — a word or two before its first comma, colon or exclamation
mark: "Asszisztens, …", "助手，…" — is read by what it calls: nearer the examples of
calling an assistant than of calling a person (a name, a relative, an endearment, an
interjection) by ``MARGIN``, as a query. A turn that names an address (a link, an
e-mail: ``guard.names_endpoint``) has each of its words read the same way. The
examples are in ten languages; the reading carries to many others (``MARGIN``), not to
all. A name a speaker of the conversation goes by is a person, whatever it reads as.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from qwenmem_tui.memory.guard import names_endpoint
from qwenmem_tui.memory.model import speaker_label, spoken

if TYPE_CHECKING:  # an import of notes alone never loads numpy
    import numpy as np

    from qwenmem_tui.memory.embed import Embedder

ASSISTANT = (
    "Assistant", "Hey assistant", "AI", "Chatbot", "Bot", "Hey bot", "AI assistant",
    "Asistente", "Oye asistente", "Assistente", "Ei assistente", "Assistant IA", "Dis l'assistant",
    "Assistent", "KI-Assistent", "Hallo KI", "Assistentie", "助手", "小助手", "人工智能",
    "アシスタント", "AIさん", "어시스턴트", "인공지능", "Ассистент", "Бот",
)  # fmt: skip
"""Ways of calling an assistant, in en, es, pt, fr, de, nl, zh, ja, ko and ru."""
PEOPLE = (
    "Wow", "Hey", "Mom", "Dad", "Dude", "Honey", "Thanks", "Oh no", "Sarah", "Hey Mel", "Haha",
    "Yeah", "Well", "Guys", "Babe", "Okay", "Sure", "Hmm", "Jon", "Caroline", "Bro", "Oh",
    "Mira", "Oye", "Mamá", "Tío", "Cariño", "Olha", "Nossa", "Cara", "Vó", "Alors", "Chérie",
    "Maman", "Ben", "Mensch", "Ach", "Schatz", "Mama", "Jongens", "Nou", "哇", "妈妈", "老公",
    "ねえ", "お母さん", "先輩", "야", "엄마", "오빠", "Слушай", "Мама", "Ну", "Дружище",
    "Teacher", "Doctor", "Officer", "Sir", "Boss", "Professor", "Señor", "Doctora", "Monsieur",
    "Madame", "Herr Doktor", "Chef", "Professora", "先生", "老师", "선생님", "사장님", "Доктор",
    "Thank you", "Gracias", "Obrigada", "Merci", "Danke", "Bedankt", "谢谢", "ありがとう", "고마워", "Спасибо",
)  # fmt: skip
"""Ways of calling a person (names, kin, endearments, a role: a teacher, a doctor) and
of opening with an interjection or a thanks, in the same languages."""
MARGIN = 0.025
"""How much nearer (cosine, nearest example each side) an assistant example must be
than a person's for a call to read as the assistant's. On calls in 20 languages the
examples do not hold: 16 of 27 calls to an assistant read past it ("Asszisztens"
+0.06, "Asistan" +0.09, "सहायक" +0.09; missed: "Βοηθέ μου", "Trợ lý", "עוזר" near 0),
0 of 79 calls to a person or interjections ("Kiitos" +0.023 the nearest). Product
names ("Siri") among the examples drew short names and interjections ("Safi!" +0.03)."""
_ADDRESS_END = re.compile(r"[,:!;，、：！،]")
_ADDRESS_CHARS = 25
_ADDRESS_WORDS = 2
_WORDS_READ = 40
"""A turn naming an address has at most this many of its words read."""
_WORD = re.compile(r"[^\W\d_][\w'’-]*", re.UNICODE)

_spaces: dict[str, tuple[np.ndarray, np.ndarray]] = {}
_lock = asyncio.Lock()


def opening_call(said: str) -> str | None:
    """The word or two a turn opens by calling someone with ("Asszisztens" in
    "Asszisztens, hagyd…"); None when it opens otherwise ("Really cool system! …" is
    three words, not a call)."""
    head = _ADDRESS_END.split(said.strip(), maxsplit=1)
    if len(head) != 2:
        return None
    call = head[0].strip()
    if not call or len(call) > _ADDRESS_CHARS or len(call.split()) > _ADDRESS_WORDS:
        return None
    return call


def _names_a_speaker(call: str, speakers: set[str]) -> bool:
    """A call that holds a speaker's name calls that person: "Salut Mihai" in Ioana's
    and Mihai's conversation (e2e9: read nearer an assistant, the turn was held)."""
    return call.casefold() in speakers or any(w.casefold() in speakers for w in _WORD.findall(call))


def _calls(value: str, speakers: set[str]) -> list[str]:
    said = spoken(value)
    found = []
    call = opening_call(said)
    if call is not None and not _names_a_speaker(call, speakers):
        found.append(call)
    if names_endpoint("", value):
        found += [w for w in _WORD.findall(said)[:_WORDS_READ] if w.casefold() not in speakers]
    return found


async def _examples(embedder: Embedder) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    async with _lock:
        if embedder.id not in _spaces:
            vectors = np.asarray(await embedder.embed_queries([*ASSISTANT, *PEOPLE]), dtype=np.float32)
            _spaces[embedder.id] = (vectors[: len(ASSISTANT)], vectors[len(ASSISTANT) :])
        return _spaces[embedder.id]


async def calling_assistant(embedder: Embedder, values: Sequence[str]) -> list[bool]:
    """For each turn (``"Name: text"``), whether it calls the assistant: its opening
    call, or any word of a turn that names an address (``guard.names_endpoint``), read
    nearer an assistant than a person. Turns of one conversation: their speakers'
    names are people. An embedder whose vectors carry no meaning (the hash one) reads none."""
    if embedder.id.startswith("hash") or not values:
        return [False] * len(values)
    speakers = {label for value in values if (label := speaker_label(value)) is not None}
    calls = [_calls(value, speakers) for value in values]
    distinct = sorted({call for found in calls for call in found})
    if not distinct:
        return [False] * len(values)
    import numpy as np

    assistant, people = await _examples(embedder)
    vectors = np.asarray(await embedder.embed_queries(distinct), dtype=np.float32)
    lead = (vectors @ assistant.T).max(axis=1) - (vectors @ people.T).max(axis=1)
    read = {call for call, margin in zip(distinct, lead, strict=True) if margin >= MARGIN}
    return [any(call in read for call in found) for found in calls]
