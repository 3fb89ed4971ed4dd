"""The poisoning guard: every memory write passes here before it reaches the store.

Schema violations refuse the write (the caller gets the reason back and can fix
it). A write to hold is still stored — so a person can review it — but as
``quarantined`` with flags naming why, and quarantined rows are never recalled
until someone approves them. Secrets are cut out (the span, not the whole value)
before anything is stored, because secrets must never reach the database.

Provenance decides first (``memory/provenance.py``): the user's own words are
trusted whatever they say; a model write made while untrusted content (a file, a
listing, an MCP tool's output, a recalled file note, a summary of any of them) is in
view and not backed by the user's messages — or an import without ``--trust`` — is
held when it would apply everywhere (user/feedback) or reads as an instruction; a
project fact read in a file is kept, labelled ``from_file``. A model write that reads
as an instruction the user never gave is held whatever was in view. The patterns below are the second signal,
over every reading of the text a model could make (look-alikes, invisible
characters, spaced, reversed, rot13, hex, base64, percent-encoding).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import unicodedata
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from qwenmem_tui import secrets
from qwenmem_tui.memory.model import (
    FLAG_FROM_FILE,
    FLAG_SECRET_REDACTED,
    GLOBAL_CATEGORIES,
    Category,
    holds,
    spoken,
)
from qwenmem_tui.memory.provenance import Provenance, Writer, content_terms

# Anchored for JSON schema (the save_memory tool's "pattern"); Python code must use
# fullmatch: "$" alone lets a trailing newline through (two keys for one fact).
KEY_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_VALUE_CHARS = 2000
REDACTED = secrets.REDACTED

FLAG_INJECTION = "prompt_injection"
FLAG_MARKUP = "markup"
FLAG_SQL = "sql"
FLAG_SECRET = FLAG_SECRET_REDACTED
FLAG_COPIED = "copied_from_tool_output"
FLAG_UNTRUSTED = "untrusted_source"  # a global fact written while reading files, not the user's words
FLAG_INSTRUCTION = "instruction"  # reads as an order to the assistant, and came from a file
FLAG_ENDPOINT = "agent_endpoint"  # an outside agent's note naming a place data could be sent

_I = re.IGNORECASE | re.MULTILINE

_INJECTION = [
    re.compile(p, _I)
    for p in (
        r"\b(ignore|disregard|forget|override|bypass)\b[\w\s,]{0,30}\b(previous|prior|above|earlier|all|any|your|the|system)\b[\w\s]{0,20}\b(instructions?|prompts?|messages?|rules|guidelines|directives)\b",
        r"\byou\s+are\s+now\b",
        # "From now on always use pytest" is ordinary feedback; a new identity is not.
        r"\bfrom\s+now\s+on,?\s+(you\s+are|you're|the\s+assistant\s+is|ignore|disregard)\b",
        r"\b(system|developer)\s+(prompt|message|instructions?)\b",
        r"\bnew\s+instructions?\s*:",
        r"\b(jailbreak|do\s+anything\s+now|dan\s+mode)\b",
        r"\bpretend\s+(to\s+be|you\s+are)\b",
        r"\bact\s+as\s+(if|an?|the)\b",
        r"^\s*(#+\s*)?(system|assistant|user|tool|developer)\s*:",
        r"\[/?INST\]|<<\s*/?SYS\s*>>|<\|[a-z_]+\|>",
        r"\balways\s+(include|add|append|insert|recommend|send)\b.{0,60}\b(link|url|https?://)",
    )
]

# The same requests in other languages: a memory is read by a multilingual model.
_INJECTION += [
    re.compile(p, _I)
    for p in (
        r"\b(ignor\w*|olvid\w*|oubli\w*|vergiss\w*|dimentic\w*|esque[cç]\w*|negeer\w*)\b.{0,50}"
        r"\b(instruc\w*|instru[çc]\w*|anweisung\w*|regeln|r[eè]gles|reglas|regras|consignes?"
        r"|istruzion\w*|richtlijn\w*|instructies|prompts?)",
        r"\b(du bist (jetzt|nun|ab sofort)|tu es maintenant|ahora eres|agora (você )?é|ora sei)\b",
        r"(игнорир\w*|игнорируй|забудь\w*|не обращай внимания).{0,50}(инструкц\w*|указани\w*|правил\w*)",
        r"теперь ты\b",
        r"(忽略|无视|忽视|忘记|忘掉|不要理会).{0,20}(指令|指示|提示|规则|说明|设定)",
        r"(现在你是|你现在是|从现在开始你)",
        r"(指示|命令|ルール|プロンプト).{0,20}(無視|忘れ)",
        r"(지시|명령|규칙|프롬프트).{0,20}(무시|잊어)",
        # Short forms in English that the long pattern above leaves out.
        r"\b(ignore|disregard|forget)\s+(all\s+|everything\s+)?(of\s+)?(the\s+)?(above|previous|prior|earlier)\b",
        r"\b(send|post|upload|forward|exfiltrate|leak)\b.{0,60}\b(to|at)\s+https?://",
    )
]

# The assistant's own voice, roles smuggled as JSON, and orders aimed at the model.
_INJECTION += [
    re.compile(p, _I)
    for p in (
        r"\bas\s+(the|an|your|a)\s+(ai\s+)?(assistant|ai|model|agent|llm|chatbot)\b.{0,40}\b(i|we)\s+(will|shall|must|always|never)\b",
        r"\b(i|the\s+assistant)\s+(will|shall|must)\s+(always|never)\b",
        r"[\"']role[\"']\s*:\s*[\"'](system|assistant|developer|tool)[\"']",
        r"\b(assistants?|ai|models?|agents?|llms?|chatbots?)\b.{0,40}\b(must|should|shall|are\s+(required|instructed))\b",
        r"\b(note|message|instructions?)\s+(to|for)\s+(the\s+)?(ai|assistants?|models?|agents?|llms?)\b",
        r"\b(reveal|print|show|output|leak|dump)\b.{0,30}\b(system\s+prompt|api\s+keys?|credentials|secrets?|env(ironment)?\s+variables)\b",
        r"\b(exfiltrat\w*|curl\s+\S*https?://|wget\s+https?://)",
        r"\b(curl|wget|iwr|irm)\b[^|\n]{0,120}\|\s*(sudo\s+)?(ba|z|da|k)?sh\b",
    )
]

_HTML_TAGS = (
    "a|abbr|b|body|br|button|div|embed|form|frame|head|html|i|iframe|img|input|link|meta|"
    "object|p|script|span|style|svg|table|td|textarea|title|tr|u|video|audio|base|details"
)
_MARKUP = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"</\s*[a-z][\w:-]*\s*>",  # any closing tag
        # Real tags have no space after "<", which keeps "a < b and c > d" harmless.
        r"<(" + _HTML_TAGS + r")\b[^>]*>",  # HTML elements
        r"<[a-z][\w]*[-:|][\w:|-]*[^>]*>",  # custom tags: <system-reminder>, <tool:x>
        r"<(system|assistant|user|tool|instructions?|prompt|context|memory|reminder)\b[^>]*>",
        r"<\|[^|>]{1,40}\|>",  # chat template markers: <|im_start|>
        r"<!--|<!\[CDATA\[|<\?xml",
        r"\bjavascript:",
        r"\bon(error|load|click|mouseover)\s*=",
        # Markdown images load a URL the moment they render: the classic exfiltration.
        r"!\[[^\]]*\]\(\s*<?\s*(https?:)?//",
        r"^\s*\[[^\]]*\]:\s*https?://\S+\?",  # reference-style link with a query
    )
]

_SQL = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(drop|truncate|alter)\s+(table|database|schema|index|view)\b",
        r"\bdelete\s+from\s+\w+",
        r"\binsert\s+into\s+\w+",
        r"\bupdate\s+\w+\s+set\s+\w+\s*=",
        r"\bunion\s+(all\s+)?select\b",
        r"\bselect\s+(\*|[\w.]+(\s*,\s*[\w.]+)*)\s+from\s+\w+",
        r"'\s*or\s+'?\d+'?\s*=\s*'?\d+",
        r";\s*--",
        r"\bexec(ute)?\s+(xp_|sp_)\w+",
    )
]

# A key naming a credential ("db_password", "github_token"; not "token_ttl" or
# "password_rotation", whose subject is a setting) makes a bare value the secret itself.
_SECRET_KEY = re.compile(
    r"(^|_)(password|passwd|passphrase|secret|api_?key|token|private_key|credentials?|pat)$"
)
_BARE_CREDENTIAL = re.compile(r"\S{6,}")

# Newlines and tabs are ordinary text; everything else in Cc, plus the bidi overrides
# used to hide text from reviewers, is refused.
_ALLOWED_CONTROL = frozenset("\n\t")
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

_COPY_MIN_CHARS = 24
_COPY_SHINGLE = 8


@dataclass(frozen=True)
class Verdict:
    """The guard's decision on one write."""

    errors: list[str] = field(default_factory=list)  # non-empty: refuse the write
    flags: list[str] = field(default_factory=list)  # holding flags quarantine; labels do not
    value: str = ""  # the value to store (secrets redacted)
    refused_secret: bool = False  # refused because it holds a secret (counted in stats)

    @property
    def accepted(self) -> bool:
        return not self.errors

    @property
    def quarantine(self) -> bool:
        return holds(self.flags)


def validate_schema(category: str, key: str, value: str) -> list[str]:
    """Reasons the write is malformed; empty when it is well-formed."""
    errors: list[str] = []
    if category not in {c.value for c in Category}:
        errors.append(
            f"category must be one of {', '.join(c.value for c in Category)}, got {category!r}"
        )
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        errors.append("key must be a short snake_case identifier (a-z, 0-9, _; at most 64 chars)")
    if not isinstance(value, str) or not value.strip():
        errors.append("value must be a non-empty string")
    else:
        if len(value) > MAX_VALUE_CHARS:
            errors.append(f"value is {len(value)} characters; the limit is {MAX_VALUE_CHARS}")
        if any(
            (unicodedata.category(ch) == "Cc" and ch not in _ALLOWED_CONTROL) or ch in _BIDI
            for ch in value
        ):
            errors.append("value contains control characters")
    return errors


# Letters from other scripts that look Latin, so "ignоre" with a Cyrillic "о" reads
# as "ignore" to the matcher as it does to a person (and a model).
_CONFUSABLES = str.maketrans(
    "аеорсухіјѕԁһԛԝӏкмтвнαοει\u03baνρτυχγ",
    "aeopcyxijsdhqwlkmtbhaoeikvptuxy",
)
_LEET = str.maketrans("01345@$7", "oieasast")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")


def _decoded_base64(text: str) -> list[str]:
    """Text hidden as base64 runs (the usual way to smuggle an instruction past a filter)."""
    found = []
    for run in _BASE64_RUN.findall(text):
        padded = run + "=" * (-len(run) % 4)
        try:
            raw = base64.b64decode(padded, altchars=b"-_" if ("-" in run or "_" in run) else None, validate=True)
            decoded = raw.decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if decoded and sum(ch.isprintable() or ch.isspace() for ch in decoded) >= 0.9 * len(decoded):
            found.append(decoded)
    return found


def _folded(text: str) -> str:
    """NFKC, casefolded, invisible (format) characters dropped."""
    if text.isascii():  # NFKC leaves ASCII as it is, and none of it is a format character
        return text.casefold()
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf").casefold()


def _tag_text(text: str) -> str:
    """What invisible Unicode tag characters spell ("ASCII smuggling"); models read it."""
    return "".join(chr(ord(ch) - 0xE0000) for ch in text if 0xE0020 <= ord(ch) <= 0xE007E)


_HEX_RUN = re.compile(r"(?:[0-9a-fA-F]{2}[\s:]?){8,}")
_SPACED = re.compile(r"\b(?:\w[ .\-_*]{1,3}){3,}\w\b")


def _decoded_hex(text: str) -> list[str]:
    """Text hidden as hex bytes ("69676e6f7265 …")."""
    found = []
    for run in _HEX_RUN.findall(text):
        try:
            decoded = bytes.fromhex(re.sub(r"[\s:]", "", run)).decode("utf-8")
        except ValueError:
            continue
        if decoded and sum(ch.isprintable() or ch.isspace() for ch in decoded) >= 0.9 * len(decoded):
            found.append(decoded)
    return found


def _despaced(text: str) -> str:
    """"i g n o r e" and "i.g.n.o.r.e" read as the word they spell."""
    return _SPACED.sub(lambda m: re.sub(r"[ .\-_*]", "", m.group()), text)


@lru_cache(maxsize=64)
def _variants(text: str, *, scrambled: bool = True) -> tuple[str, ...]:
    """Every reading of ``text`` a poisoner could rely on the model to make: folded,
    look-alikes mapped, punctuation and underscores read as spaces (instructions split
    across sentences or across key and value), letter-spaced, reversed, rot13,
    leetspeak, percent-, hex- and base64-decoded. ``scrambled=False`` leaves out the
    readings that rewrite the letters (reversed, rot13, leetspeak)."""
    sources = [text, *_decoded_base64(text), *_decoded_hex(text)]
    if hidden := _tag_text(text):
        sources.append(hidden)
    if "%" in text:
        sources.append(urllib.parse.unquote(text))
    variants: list[str] = []
    for source in sources:
        folded = _folded(source)
        mapped = folded.translate(_CONFUSABLES)
        spaced = " ".join(re.sub(r"[\W_]+", " ", mapped).split())
        joined = _despaced(mapped)
        variants += [source, folded, mapped, spaced, joined]
        if scrambled:
            variants += [spaced.translate(_LEET), mapped[::-1], codecs.encode(mapped, "rot13")]
    # Cached: the guard reads a write's text several ways (``check``, its second
    # opinion, the instruction test) and each asked for the same readings anew.
    return tuple(dict.fromkeys(variants))


def _normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def copied_from(value: str, outputs: Sequence[str]) -> bool:
    """True when ``value`` repeats a sizable stretch of a tool output.

    A document the agent read is the classic poisoning route, so a memory that
    quotes it needs a person's approval. Short values ("Python") are not flagged:
    they appear everywhere and carry no instructions.
    """
    norm = _normalise(value)
    if not outputs or not norm:
        return False
    outs = [_normalise(o) for o in outputs if o]
    if len(norm) >= _COPY_MIN_CHARS and any(norm in o for o in outs):
        return True
    words = norm.split()
    if len(words) < _COPY_SHINGLE:
        return False
    shingles = {
        " ".join(words[i : i + _COPY_SHINGLE]) for i in range(len(words) - _COPY_SHINGLE + 1)
    }
    return any(s in o for o in outs for s in shingles)


def redact_secrets(text: str) -> tuple[str, bool]:
    """``text`` with every secret span replaced, and whether any was found."""
    redacted = secrets.redact(text)
    return redacted, redacted != text


def redact_value(key: str, value: str) -> str:
    """The value to store: secret spans cut out; a bare value under a key naming a
    credential ("api_key": "hunter2hunter2") is the secret whole."""
    if _SECRET_KEY.search(key) and _BARE_CREDENTIAL.fullmatch(value.strip()):
        return REDACTED
    return secrets.redact(value)


# Words that only say what kind of secret it was: "my OpenAI key is [REDACTED]" says
# nothing worth remembering once the key is gone.
_SECRET_WORDS = frozenset(
    "key keys api apikey token tokens password passwords passwd pass passcode pin code "
    "secret secrets credential credentials login auth bearer access private personal "
    "openai anthropic github gitlab aws stripe slack google azure npm pypi huggingface "
    "hf db database account admin root here mine authorization basic header value".split()
)


def secret_shell(redacted: str) -> bool:
    """True when ``redacted`` (a value with its secrets cut out) keeps no word that says
    anything besides naming the secret: storing it would keep an empty shell ("my
    OpenAI key is [REDACTED]") and tell the person it was remembered."""
    rest = redacted.replace(REDACTED, " ")
    kept = [w for w in re.findall(r"\w+", rest.casefold()) if w not in _SECRET_WORDS]
    return not content_terms(" ".join(kept))


def suspicious_flags(key: str, value: str, *, turn_outputs: Sequence[str] = ()) -> list[str]:
    """Names of every pattern signal in the (unredacted) write: the second opinion."""
    flags: list[str] = []
    text = f"{key}\n{value}"
    readings = _variants(text)
    if any(p.search(reading) for reading in readings for p in _INJECTION):
        flags.append(FLAG_INJECTION)
    if any(p.search(reading) for reading in readings for p in _MARKUP):
        flags.append(FLAG_MARKUP)
    if any(p.search(text) for p in _SQL):
        flags.append(FLAG_SQL)
    if copied_from(value, turn_outputs):
        flags.append(FLAG_COPIED)
    return flags


# An order rather than a fact: addressed to the assistant, an always/never rule, or a
# command about what to say or where to send things. "Run the tests with make test" is
# how the project works, not an order to the model, so it stays a fact.
_ORDER = re.compile(
    r"^\W*(always|never|do\s+not|don'?t|ignore|disregard|forget|send|upload|post|forward|reply"
    r"|respond|answer|say|tell|print|reveal|output|include|append|insert|recommend|visit"
    r"|fetch|obey|follow|treat|act|pretend|you)\b"
    r"|\b(you|your|you're|assistant|ai|model|agent|llm)\b.{0,60}\b(must|should|shall|will|have\s+to|need\s+to|always|never)\b"
    r"|\b(must|shall)\s+(always|never|be)\b|\b(always|never|whenever|every\s+(reply|answer|response))\b"
    # A link is a fact ("docs at https://…"); one to send data to, or to steer to, is not.
    r"|https?://\S*[?{]|\b(send|post|upload|forward|visit|fetch|download|go\s+to|link\s+(to|there))\b.{0,60}https?://",
    re.IGNORECASE | re.MULTILINE,
)
# "always / never / must / every answer" in other languages: an order, whatever verb
# follows (the model reads them all). Single short words: never looked for in the
# readings that rewrite letters — reversed or rot13, ordinary words turn into them
# ("IAM" reversed is Italian "mai": "TODO: audit IAM roles" read as an order).
_ORDER_WORDS = re.compile(
    r"\b(siempre|nunca|debes|toujours|jamais|dois|chaque r[ée]ponse|immer|niemals|jede antwort"
    r"|sempre|nunca|deve|devi|mai|altijd|nooit|moet|zawsze|nigdy|alltid|aldrig|her zaman|asla"
    r"|selalu|jangan|luôn|không bao giờ|всегда|никогда|обязательно|завжди|ніколи|πάντα|ποτέ"
    r"|תמיד|לעולם)\b"
    r"|(总是|永远|必须|务必|每次|不要|一定要|必ず|常に|毎回|してください|しないで|항상|반드시|절대|하세요"
    r"|دائما|دائماً|أبدا|يجب|همیشه|هرگز|باید|हमेशा|कभी नहीं|चाहिए)",
    re.IGNORECASE | re.MULTILINE,
)


# Where data can go, by its shape in any language: a URL of any scheme, a host with a
# path ("evil.example/docs"), an e-mail address, an IP address.
_ENDPOINT = re.compile(
    r"\b[a-z][a-z0-9+.-]{1,15}://[^\s]+"
    r"|\b(?:[a-z0-9-]+\.)+[a-z]{2,}(?::\d{1,5})?/[^\s]*"
    r"|\b[\w.+-]+@(?:[a-z0-9-]+\.)+[a-z]{2,}\b"
    r"|\b\d{1,3}(?:\.\d{1,3}){3}\b|\[[0-9a-f:]{3,}\]",
    re.IGNORECASE,
)
_DOTS = re.compile(r"\s*[\[(]\s*(?:\.|dot)\s*[\])]\s*", re.IGNORECASE)


def names_endpoint(key: str, value: str) -> bool:
    """A link or address in the note (defanged ``evil[.]example`` and look-alike
    letters read as what they spell): somewhere the note's reader could send data."""
    text = f"{key}\n{value}"
    readings = {text, _folded(text).translate(_CONFUSABLES)}
    readings |= {_DOTS.sub(".", reading) for reading in readings}
    return any(_ENDPOINT.search(reading) for reading in readings)


# Who a conversation's turn may address that is the assistant: its kinds and names.
_TO_ASSISTANT = re.compile(
    r"\b(assistant|a\.?i\.?|model|agent|llm|chatbot|bot|qwen|qwenmem|system)\b", re.IGNORECASE
)


def orders_the_assistant(key: str, value: str) -> bool:
    """A turn of a conversation between people that is an order to the assistant: it
    names the assistant and reads as an instruction or sends somewhere (an address).
    "You should always rest, Mel" is one person's advice to another, content to
    recall, not a rule for the model. A turn that calls the assistant in any language
    is read by meaning (``addressee.py``, ``Provenance.calls_assistant``)."""
    said = spoken(value)
    if not _TO_ASSISTANT.search(said):
        return False
    return reads_as_instruction(key, value) or names_endpoint(key, said)


def reads_as_instruction(key: str, value: str) -> bool:
    """A value that tells the assistant what to do (any reading of it), not what is true."""
    text = f"{key}\n{value}"
    if any(_ORDER_WORDS.search(reading) for reading in _variants(text, scrambled=False)):
        return True
    return any(_ORDER.search(reading) for reading in _variants(text))


def check(
    category: str,
    key: str,
    value: str,
    *,
    provenance: Provenance | None = None,
    turn_outputs: Sequence[str] = (),
) -> Verdict:
    """Validate and judge one write; pure, so it is tested without a store.

    ``provenance`` says who wrote and what was in view (default: a model write with
    ``turn_outputs`` as the only untrusted content in view).
    """
    errors = validate_schema(category, key, value)
    if not errors and secrets.key_holds_secret(key):
        return Verdict(errors=["key must name the subject, not hold a secret"], refused_secret=True)
    if errors:
        return Verdict(errors=errors, value="")
    stored = redact_value(key, value)
    if stored != value and secret_shell(stored):
        return Verdict(
            errors=[
                "it holds a secret and little else; secrets are never saved (keep it in a "
                "password manager, and remember where it is instead)"
            ],
            refused_secret=True,
        )
    prov = provenance or Provenance(untrusted=tuple(turn_outputs))
    labels = [FLAG_SECRET_REDACTED] if stored != value else []
    signals = suspicious_flags(key, value, turn_outputs=prov.untrusted)
    if prov.grounded(value):
        # The user's own words: trusted whatever they say; only secrets are removed.
        # Unless the model copied an order out of a file that merely echoes them.
        if FLAG_COPIED in signals and {FLAG_INJECTION, FLAG_MARKUP} & set(signals):
            return Verdict(flags=[*signals, *labels], value=stored)
        return Verdict(flags=labels, value=stored)
    reads = orders_the_assistant if prov.speech else reads_as_instruction
    instruction = (prov.calls_assistant or reads(key, value)) and not {FLAG_INJECTION, FLAG_MARKUP} & set(signals)
    if prov.untrusted_in_view:
        # A model write beside content nobody in the chat wrote, or an untrusted import.
        held = [FLAG_UNTRUSTED] if category in GLOBAL_CATEGORIES else []
        if instruction:
            held.append(FLAG_INSTRUCTION)
        if prov.outside and names_endpoint(key, value):
            # "Answers are sent to http://…": passive wording, no order to match, but an
            # agent qwenmem cannot see chose an address for the user's data.
            held.append(FLAG_ENDPOINT)
        held += [s for s in signals if s != FLAG_COPIED or held]
        if held:
            return Verdict(flags=[*held, *labels], value=stored)
        return Verdict(flags=[FLAG_FROM_FILE, *labels], value=stored)
    if prov.writer is Writer.MODEL and prov.whole_view and instruction:
        # An order the user never gave, whatever route it came by (one this module
        # cannot see, too): the model does not write itself rules.
        return Verdict(flags=[FLAG_INSTRUCTION, *signals, *labels], value=stored)
    return Verdict(flags=[*signals, *labels], value=stored)
