"""Where a memory write comes from: who wrote it, and what the writer had in view.

The poisoning guard decides on provenance first and on wording second. A person's
own words (``/remember``, a fact the user stated that the model saves) are trusted
whatever they say. A write the model makes while untrusted content is in its view,
and that the user's messages do not back, may be an order planted in that content:
the guard holds it for review when it would shape behaviour everywhere. Untrusted
content is what ``chat.view.untrusted_content`` names: tool output (a file it read, a
directory listing, an MCP tool's answer), a recalled memory labelled as read from a
file or approved after review, and a compacted summary of any of those. "In view"
means what the model sees on the next request — since the last ``/clear`` — not only
the current turn, because a planted order is often saved a turn later. An import
without ``--trust`` is file content too: its claimed origin is recorded, not believed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from qwenmem_tui import secrets
from qwenmem_tui.chat.view import content_text, untrusted_content, user_words


class Writer(StrEnum):
    USER = "user"  # the person typed it (/remember)
    MODEL = "model"  # save_memory or background extraction
    IMPORT = "import"  # a JSON-lines file a person chose to import


_WORD = re.compile(r"\w+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
# Words every paraphrase adds ("the user prefers …"), so they prove nothing either way.
_FILLER = frozenset(
    "the and for that this with from are was were has have had not but you your user users "
    "user's they them their its it's also into onto than then when what which who whom whose "
    "should would could will shall must can may might always never every all any some use "
    "uses used using prefer prefers preferred like likes wants want please remember note "
    "about there here our out over under only just very more most "
    "i a an to in of is on at be it my me we or as by so do if no up".split()
)
GROUNDED_SHARE = 0.6
_STEM = 4


def content_terms(text: str) -> set[str]:
    """Content words, stemmed by prefix; CJK runs as character bigrams (no spaces there)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    terms: set[str] = set()
    for word in _WORD.findall(folded):
        if _CJK.search(word):
            terms.update(word[i : i + 2] for i in range(max(1, len(word) - 1)))
        elif word not in _FILLER:
            # Short words count too: "i g n o r e" spelled out must not read as nothing.
            terms.add(word[:_STEM])
    return terms


@dataclass(frozen=True)
class Provenance:
    """What one memory write rests on (built by the writer, judged by the guard)."""

    writer: Writer = Writer.MODEL
    sources: tuple[str, ...] = ()
    """Untrusted content in view, named: "read_file docs/notes.md", "list_directory src"."""
    untrusted: tuple[str, ...] = ()
    """The text of that content (tool outputs)."""
    user_text: tuple[str, ...] = ()
    """The user's own messages in view, reminders stripped."""
    file_content: bool = False
    """The write's own text is content nobody in the chat wrote (an import file)."""
    whole_view: bool = False
    """Built from the model's whole view: words the user did not say there were not
    said (a write through the daemon's or MCP's API has no view to judge by)."""
    speech: bool = False
    """The write's text is a turn of a conversation between people ("Caroline: you
    should try it!"): its "you" is the other person, not the assistant."""
    calls_assistant: bool = False
    """A turn of such a conversation that calls the assistant ("Asszisztens, …"), read
    by meaning (``addressee.py``): an order to it, whatever else it says."""
    outside: bool = False
    """Written by another program's agent (MCP ``remember``, the daemon's memory
    routes): a link or address in it is where that agent wants the user's data to go
    until the user confirms it in qwenmem."""

    @classmethod
    def user(cls) -> Provenance:
        return cls(Writer.USER)

    @classmethod
    def imported(cls, *, trusted: bool = False, speech: bool = False, calls_assistant: bool = False) -> Provenance:
        """An import: file content (what it claims about its origin proves nothing),
        unless the person running it said with ``--trust`` that it is their own — then
        its lines are judged by their wording alone, as a restored backup. ``speech``:
        the line is a turn of a dialogue between people (``backup.dialogue_turns``)."""
        if trusted:
            return cls(Writer.IMPORT, speech=speech, calls_assistant=calls_assistant)
        return cls(
            Writer.IMPORT, ("imported file",), file_content=True, speech=speech, calls_assistant=calls_assistant
        )

    @classmethod
    def from_messages(
        cls,
        messages: Iterable[dict[str, Any]],
        extra_outputs: Sequence[str] = (),
        *,
        trusted_tools: Collection[str] = (),
    ) -> Provenance:
        """A model write's provenance from the model view (``ChatSession.history()``).

        ``extra_outputs``: untrusted tool outputs of the running turn that the view may
        not show yet (a tool call's results are left out until all of that call's
        siblings ran). ``trusted_tools``: tools whose output is qwenmem's own answer.
        """
        messages = list(messages)
        found = untrusted_content(messages, trusted_tools)
        sources = [source for source, _ in found]
        untrusted = [text for _, text in found]
        user_text = user_words(messages)
        for output in extra_outputs:
            if output not in untrusted:
                sources.append("tool output")
                untrusted.append(output)
        return cls(
            Writer.MODEL,
            tuple(dict.fromkeys(sources)),
            tuple(untrusted),
            tuple(user_text),
            whole_view=True,
        )

    @classmethod
    def relayed(cls, messages: Iterable[dict[str, Any]]) -> Provenance:
        """A conversation another program sent through the proxy: all of it is that
        client's content — its "user" messages too (a pasted page, another agent's
        text) — so nothing in it is the words of the person qwenmem serves."""
        texts = [content_text(m.get("content")) for m in messages if m.get("role") != "assistant"]
        return cls(
            Writer.MODEL,
            ("proxied client",),
            tuple(t for t in texts if t.strip()) or ("(the client's conversation)",),
            whole_view=True,
        )

    @property
    def untrusted_in_view(self) -> bool:
        """Content nobody in the chat wrote shaped this write (an import is such content)."""
        return self.file_content or any(t.strip() for t in self.untrusted)

    def grounded(self, value: str) -> bool:
        """The user's own messages back this value: most of its content words (in any
        language) occur in what the user said. The model paraphrases, so words are
        compared by a short prefix; filler words prove nothing. The key is the model's
        name for the subject, so it is not weighed."""
        if self.writer is Writer.USER:
            return True
        if self.writer is Writer.IMPORT or not self.user_text:
            return False
        if any(unicodedata.category(ch) == "Cf" for ch in value):
            return False  # invisible characters carry text nobody typed
        wanted = content_terms(value)
        if not wanted:
            return False
        said = content_terms("\n".join(self.user_text))
        return len(wanted & said) >= GROUNDED_SHARE * len(wanted)

    def describe(self) -> str:
        """One line for the audit trail."""
        if self.file_content:
            return "imported without --trust: read as file content"
        if self.writer is not Writer.MODEL:
            return f"written by {self.writer}"
        if not self.untrusted_in_view:
            return "no untrusted content in view"
        names = self.sources or ("tool output",)
        shown = ", ".join(names[:5])
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        # A path is the model's choice of argument: scanned like any text that is kept.
        return secrets.redact(f"untrusted content in view: {shown}{more}")

