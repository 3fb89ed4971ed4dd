"""The poisoning guard: every memory write passes here before it reaches the store.

Schema violations refuse the write (the caller gets the reason back and can fix
it). Suspicious content is still stored — so a person can review it — but as
``quarantined`` with flags naming why, and quarantined rows are never recalled
until someone approves them. Secrets are redacted before anything is stored,
because secrets must never reach the database.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field

from qwenmem_tui.memory.model import Category

KEY_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_VALUE_CHARS = 2000
REDACTED = "[REDACTED]"

FLAG_INJECTION = "prompt_injection"
FLAG_MARKUP = "markup"
FLAG_SQL = "sql"
FLAG_SECRET = "secret"
FLAG_COPIED = "copied_from_tool_output"

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

# Vendor key formats (the first eight) are case-exact; the phrases are not.
_SECRETS = [
    re.compile(p, re.IGNORECASE if i >= 8 else 0)
    for i, p in enumerate(
        (
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)",
            r"\bsk-(proj-|ant-)?[A-Za-z0-9_-]{16,}",
            r"\bAKIA[0-9A-Z]{16}\b",
            r"\bgh[pousr]_[A-Za-z0-9]{30,}",
            r"\bgithub_pat_[A-Za-z0-9_]{20,}",
            r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
            r"\bAIza[0-9A-Za-z_-]{35}",
            r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
            r"\b(password|passwd|pwd|passphrase)\b\s*(is|[:=])\s*\S+",
            r"\b(secret|api[_ -]?key|access[_ -]?token|auth[_ -]?token|token)\b\s*[:=]\s*\S{6,}",
            r"\bbearer\s+[A-Za-z0-9._~+/-]{16,}",
            r"\b[a-z][a-z0-9+.-]*://[^\s:/@]+:[^\s@/]+@",  # credentials in a URL
        )
    )
]
_SECRET_KEY = re.compile(
    r"(^|_)(password|passwd|secret|api_?key|token|private_key|credentials?)(_|$)"
)

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
    flags: list[str] = field(default_factory=list)  # non-empty: store as quarantined
    value: str = ""  # the value to store (secrets redacted)

    @property
    def accepted(self) -> bool:
        return not self.errors

    @property
    def quarantine(self) -> bool:
        return bool(self.flags)


def validate_schema(category: str, key: str, value: str) -> list[str]:
    """Reasons the write is malformed; empty when it is well-formed."""
    errors: list[str] = []
    if category not in {c.value for c in Category}:
        errors.append(
            f"category must be one of {', '.join(c.value for c in Category)}, got {category!r}"
        )
    if not isinstance(key, str) or not KEY_PATTERN.match(key):
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
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf").casefold()


def _tag_text(text: str) -> str:
    """What invisible Unicode tag characters spell ("ASCII smuggling"); models read it."""
    return "".join(chr(ord(ch) - 0xE0000) for ch in text if 0xE0020 <= ord(ch) <= 0xE007E)


def _variants(text: str) -> list[str]:
    """Every reading of ``text`` a poisoner could rely on the model to make: folded,
    look-alikes mapped, punctuation and underscores read as spaces (instructions split
    across sentences or across key and value), leetspeak, percent- and base64-decoded."""
    sources = [text, *_decoded_base64(text)]
    if hidden := _tag_text(text):
        sources.append(hidden)
    if "%" in text:
        sources.append(urllib.parse.unquote(text))
    variants: list[str] = []
    for source in sources:
        folded = _folded(source)
        mapped = folded.translate(_CONFUSABLES)
        spaced = " ".join(re.sub(r"[\W_]+", " ", mapped).split())
        variants += [source, folded, mapped, spaced, spaced.translate(_LEET)]
    return list(dict.fromkeys(variants))


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
    """``text`` with every secret-looking span replaced, and whether any was found."""
    found = False
    for pattern in _SECRETS:
        text, n = pattern.subn(REDACTED, text)
        found = found or n > 0
    return text, found


def suspicious_flags(key: str, value: str, *, turn_outputs: Sequence[str] = ()) -> list[str]:
    """Names of every poisoning signal in the (unredacted) write."""
    flags: list[str] = []
    text = f"{key}\n{value}"
    readings = _variants(text)
    if any(p.search(reading) for reading in readings for p in _INJECTION):
        flags.append(FLAG_INJECTION)
    if any(p.search(reading) for reading in readings for p in _MARKUP):
        flags.append(FLAG_MARKUP)
    if any(p.search(text) for p in _SQL):
        flags.append(FLAG_SQL)
    if _SECRET_KEY.search(key) or redact_secrets(value)[1]:
        flags.append(FLAG_SECRET)
    if copied_from(value, turn_outputs):
        flags.append(FLAG_COPIED)
    return flags


def check(category: str, key: str, value: str, *, turn_outputs: Sequence[str] = ()) -> Verdict:
    """Validate and inspect one write; pure, so it is tested without a store."""
    errors = validate_schema(category, key, value)
    if errors:
        return Verdict(errors=errors, value="")
    flags = suspicious_flags(key, value, turn_outputs=turn_outputs)
    stored, _ = redact_secrets(value)
    if _SECRET_KEY.search(key):
        # The key says the value is a secret even when it does not look like one.
        stored = REDACTED
    return Verdict(flags=flags, value=stored)
