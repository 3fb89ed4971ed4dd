"""Bring your memory from another tool: Claude Code, qwen-code and mem0 (issue 29).

Each reader turns the other tool's files into the rows `memory import` reads from JSON
lines (``category, value``, a ``key`` where the tool names the memory, plus ``scope``,
``origin``, ``stated_at``; a note without a name is keyed as /remember keys it), so every
entry goes through the one import pipeline — the guard (secrets, instructions, untrusted
content), identity and provenance — exactly as a JSON-lines file would. Nothing here
writes; the CLI hands the rows over (or, with ``--dry-run``, shows what would happen).

Formats read, as the tools document them:

- **Claude Code / qwen-code memory folders**: one Markdown file per memory with YAML
  front matter ``name``, ``description`` and ``type`` (user / feedback / project /
  reference, the same four categories as ours), the memory itself in the body;
  ``MEMORY.md`` is only the folder's index of pointers and is skipped.
- **CLAUDE.md / QWEN.md context files**: bullet lines (Claude Code's ``#`` shortcut
  appends them; qwen-code's ``save_memory`` tool appends facts under
  ``## Qwen Added Memories``). Bullets under that heading are facts about the user,
  other bullets are how the user wants the assistant to work (feedback).
- **mem0 exports**: JSON from ``get_all``/``search`` (``{"results": [...]}``), a bare
  list, or ``{"memories": [...]}``; each entry's text is ``memory`` (or ``text`` /
  ``content``), with optional ``metadata`` and ``categories``.

Their TTLs start at the import (the person brings them in now): an original time
would let a year-old fact expire the moment it arrives. When the source dates a memory
(mem0's ``updated_at`` / ``created_at``, a memory file's last change) that date is the
row's ``stated_at``: when the fact was said, for ``memory history`` and ``--as-of``. Categories map one to one
where the source has ours; scopes follow the category
(user and feedback everywhere, project and reference in the importing project). Origins
say who wrote the text there: the other tool's model (``agent``, ``tool``) or the person
(``user``, a context file they edit). Imported text stays untrusted content unless the
person says ``--trust``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.memory.guard import MAX_VALUE_CHARS
from qwenmem_tui.memory.model import Category, Origin, speaker_label
from qwenmem_tui.memory.timeline import parse_moment

SOURCES = ("claude-code", "qwen-code", "mem0")
INDEX_FILE = "MEMORY.md"
CONTEXT_FILES = ("CLAUDE.md", "CLAUDE.local.md", "QWEN.md", "AGENTS.md")
ADDED_MEMORIES = re.compile(r"^#{1,6}\s*(qwen|gemini|claude)\s+added\s+memories\s*$", re.I)
BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.+?)\s*$")
MAX_FILE_BYTES = 1_000_000
"""A memory file or export larger than this is not a memory file."""
MAX_KEY = 40
KEY_WORDS = 5
"""A key made from a memory file's name keeps its first few words."""

# Categories other tools use for what ours call user / feedback / project / reference.
_CATEGORY_ALIASES = {
    "user": Category.USER,
    "personal": Category.USER,
    "preference": Category.FEEDBACK,
    "preferences": Category.FEEDBACK,
    "feedback": Category.FEEDBACK,
    "project": Category.PROJECT,
    "reference": Category.REFERENCE,
}


class ImportSourceError(ValueError):
    """The path cannot be read as the named tool's memory; ``str(e)`` is one line."""


@dataclass(frozen=True)
class ImportedEntry:
    """One memory read from another tool, as a JSON-lines import row, and where from."""

    row: JSONObject
    source: str  # file (and entry) it came from, for the dry run and errors


def read_source(kind: str, path: Path) -> list[ImportedEntry]:
    """Every memory in ``path`` as ``kind`` (one of SOURCES) writes it."""
    if kind not in SOURCES:
        raise ImportSourceError(f"--from must be one of {', '.join(SOURCES)}, got {kind!r}")
    if not path.exists():
        raise ImportSourceError(f"{path}: no such file or directory")
    if kind == "mem0":
        return list(_mem0(path))
    files = sorted(p for p in path.rglob("*.md") if p.is_file()) if path.is_dir() else [path]
    entries: list[ImportedEntry] = []
    for file in files:
        if file.name == INDEX_FILE:
            continue  # the folder's index: pointers to the files read here
        # In a folder only typed memory files and context files count: a command's or a
        # skill's Markdown bullets there are not rules the person gave.
        entries.extend(_markdown(file, context=not path.is_dir() or file.name in CONTEXT_FILES))
    return entries


# -- Markdown (Claude Code, qwen-code) ---------------------------------------------


def _read_text(path: Path) -> str:
    return read_bounded(path, MAX_FILE_BYTES, "not a memory file", encoding="utf-8")


MAX_IMPORT_BYTES = 64 * 1024 * 1024
"""A JSON-lines file larger than this (tens of thousands of memories) is refused."""


def read_bounded(path: Path, limit: int, beyond: str, *, encoding: str = "utf-8-sig") -> str:
    """A file's text, at most ``limit`` bytes read: one that never ends is refused, not
    read into memory until the kernel kills the process (e2e10: `memory import
    /dev/zero`, which reports a size of 0); a pipe (`/dev/stdin`) reads as a file.
    ``beyond``: what a larger file is said to be."""
    try:
        with path.open("rb") as source:
            data = source.read(limit + 1)
        if len(data) > limit:
            raise ImportSourceError(f"{path}: larger than {max(1, limit // 2**20)} MB, {beyond}")
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ImportSourceError(f"{path}: not UTF-8 text") from exc
    except OSError as exc:
        raise ImportSourceError(f"{path}: {exc.strerror or exc}") from exc


def _markdown(path: Path, *, context: bool) -> Iterator[ImportedEntry]:
    text = _read_text(path)
    front, body = split_front_matter(text)
    if front is not None:
        entry = _memory_file(path, front, body)
        if entry is not None:
            yield entry
    elif context:
        yield from _context_file(path, text)


def split_front_matter(text: str) -> tuple[dict[str, str] | None, str]:
    """YAML front matter between ``---`` lines as flat ``key: value`` pairs, and the body.

    Memory files use only flat string fields, so this reads that subset (quoted or not)
    instead of pulling in a YAML library; None when there is no front matter.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return None, text
    for end in range(1, len(lines)):
        if lines[end].strip() in ("---", "..."):
            break
    else:
        return None, text
    fields: dict[str, str] = {}
    for line in lines[1:end]:
        name, sep, value = line.partition(":")
        if sep and name.strip() and not line[:1].isspace():
            fields[name.strip().lower()] = _unquote(value.strip())
    return fields, "\n".join(lines[end + 1 :])


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _memory_file(path: Path, front: dict[str, str], body: str) -> ImportedEntry | None:
    """One typed memory file of a memory folder."""
    category = _CATEGORY_ALIASES.get(front.get("type", "").strip().lower())
    if category is None:
        return None  # not a memory (a skill, an agent definition): not ours to import
    value = _one_value(body) or _one_value(front.get("description", ""))
    if not value:
        return None
    row = {
        "category": str(category),
        "key": make_key(front.get("name") or path.stem),
        "value": value,
        "origin": str(Origin.AGENT),  # the other tool's model wrote its memory folder
        **_scope(category),
        **_stated(_modified(path)),  # one memory a file: last written when it was said
    }
    return ImportedEntry(row, f"{path}")


def _context_file(path: Path, text: str) -> Iterator[ImportedEntry]:
    """Bullets of a CLAUDE.md / QWEN.md: facts saved by the tool, or the user's rules."""
    added = False
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced  # a code block's lines are code, not bullets
            continue
        if fenced:
            continue
        if line.lstrip().startswith("#"):
            added = bool(ADDED_MEMORIES.match(line.strip()))
            continue
        bullet = BULLET.match(line)
        if bullet is None:
            continue
        value = _one_value(bullet.group(1))
        if not value:
            continue
        # "## Qwen Added Memories": facts the tool's save_memory kept about the user.
        category = Category.USER if added else Category.FEEDBACK
        row = {  # no key: filed as /remember files a note, never named by its value
            "category": str(category),
            "value": value,
            "origin": str(Origin.TOOL if added else Origin.USER),
            **_scope(category),
        }
        yield ImportedEntry(row, f"{path}:{number}")


def _one_value(text: str) -> str:
    """The memory's text as one value: whitespace folded, cut at the guard's limit."""
    folded = " ".join(text.split())
    if len(folded) > MAX_VALUE_CHARS:
        folded = folded[: MAX_VALUE_CHARS - 1].rstrip() + "…"
    return folded


# -- mem0 ----------------------------------------------------------------------------


def _mem0(path: Path) -> Iterator[ImportedEntry]:
    if path.is_dir():
        raise ImportSourceError(f"{path}: a mem0 export is one JSON file")
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise ImportSourceError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from exc
    except RecursionError:
        raise ImportSourceError(f"{path}: JSON nested too deeply to be a mem0 export") from None
    if isinstance(data, dict):
        data = data.get("results", data.get("memories"))
    if not isinstance(data, list):
        raise ImportSourceError(
            f'{path}: expected a list of memories, or {{"results": [...]}} as mem0 exports them'
        )
    for index, entry in enumerate(data):
        if not isinstance(entry, dict):
            continue
        text = next(
            (entry[f] for f in ("memory", "text", "content") if isinstance(entry.get(f), str)), ""
        )
        value = _one_value(text)
        if not value:
            continue
        category = _mem0_category(entry)
        row: JSONObject = {  # no key: filed as /remember files a note
            "category": str(category),
            "value": value,
            "origin": str(Origin.AGENT),  # mem0 extracts memories with a model
            **_scope(category),
            # mem0 stamps each memory; its latest wording dates from its update.
            **_stated(entry.get("updated_at") or entry.get("created_at")),
        }
        yield ImportedEntry(row, f"{path}[{index}] {entry.get('id', '')}".rstrip())


def _mem0_category(entry: JSONObject) -> Category:
    raw = entry.get("metadata")
    metadata: JSONObject = raw if isinstance(raw, dict) else {}
    named = [metadata.get("category"), metadata.get("type")]
    categories = entry.get("categories")
    if isinstance(categories, list):
        named += categories
    for name in named:
        if isinstance(name, str) and name.strip().lower() in _CATEGORY_ALIASES:
            return _CATEGORY_ALIASES[name.strip().lower()]
    # mem0 remembers facts about a user (or an agent's own): ours is "user".
    return Category.USER


# -- shared --------------------------------------------------------------------------


def make_key(text: str) -> str:
    """A snake_case key (the guard's pattern) from a memory file's name."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_text.lower())
    key = ""
    for word in words[:KEY_WORDS]:
        candidate = f"{key}_{word}" if key else word
        if len(candidate) > MAX_KEY:
            break
        key = candidate
    if not key or not key[0].isalpha():
        key = f"imported_{key}" if key else "imported_memory"
    return key[:64]


def _stated(moment: object) -> dict[str, str]:
    """``stated_at`` for a row when the source dates the memory (ISO 8601), else
    nothing: a date that does not parse costs the row its date, not the row."""
    if not isinstance(moment, str):
        return {}
    try:
        parse_moment(moment)
    except ValueError:
        return {}
    return {"stated_at": moment}


def _modified(path: Path) -> str | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat()
    except OSError:
        return None


def _scope(category: Category) -> dict[str, str]:
    # Project facts belong to the project being imported into ("project"); the rest
    # follows the person everywhere (the pipeline makes them global in any case).
    return {"scope": "project"} if category in (Category.PROJECT, Category.REFERENCE) else {}


def import_lines(entries: list[ImportedEntry]) -> list[str]:
    """The entries as the JSON lines `memory import` reads."""
    return [json.dumps(e.row, ensure_ascii=False) for e in entries]


# -- a conversation as plain text ----------------------------------------------------

# A session's date on a line of its own ("Session 2 — 2024-04-11", "11.04.2024",
# "2024年4月11日", "2024. 04. 11.", "8 May 2023"): the turns after it were said then.
_ISO_DAY = re.compile(
    r"\b(\d{4})\.?\s?[-/.]?\s?(\d{1,2})\s?[-/.]\s?(\d{1,2})(?:[T ](\d{1,2}):(\d{2}))?"
)
_DOTTED_DAY = re.compile(r"\b(\d{1,2})\.\s?(\d{1,2})\.\s?(\d{4})\b")
_CJK_DAY = re.compile(r"(\d{4})\s*[年년]\s*(\d{1,2})\s*[月월]\s*(\d{1,2})")
_NAMED_DAY = ("%d %B %Y", "%d %B, %Y", "%B %d, %Y", "%B %d %Y", "%d %b %Y", "%b %d, %Y")
_DAY_WORDS = re.compile(r"\d{1,2}\s+[A-Za-z]+,?\s+\d{4}|[A-Za-z]+\s+\d{1,2},?\s+\d{4}")
TRANSCRIPT_SHARE = 0.5
"""Of a plain-text file's lines, the share that must be "Name: text" turns."""


def session_date(line: str) -> str | None:
    """The ISO date a line of a transcript names (a session's heading), else None."""
    found: list[int] | None = None
    if (m := _ISO_DAY.search(line) or _CJK_DAY.search(line)) is not None:
        found = [int(g) for g in m.groups() if g is not None]
    elif (m := _DOTTED_DAY.search(line)) is not None:
        day, month, year = (int(g) for g in m.groups())
        found = [year, month, day]
    elif (m := _DAY_WORDS.search(line)) is not None:
        for shape in _NAMED_DAY:
            try:
                named = datetime.strptime(m.group().replace(",", ", ").replace("  ", " "), shape)
            except ValueError:
                continue
            found = [named.year, named.month, named.day]
            break
    if found is None:
        return None
    try:
        year, month, day, hour, minute = [*found, 0, 0][:5]
        return datetime(year, month, day, hour, minute, tzinfo=UTC).isoformat()
    except ValueError:  # 2024-13-45: not a date
        return None


# A chat app's export stamps each line with its moment: "12/03/2024, 14:22 - Amina: …"
# (WhatsApp on Android), "[12/03/2024, 14:22:05] Amina: …" (on iOS), "3/12/24, 2:22 PM -
# …" (a US phone), "2024-03-12 14:22 Amina: …". Digits and punctuation: any language.
_STAMP = re.compile(
    r"^\[?(\d{1,4})[./-](\d{1,2})[./-](\d{1,4}),?\s+(\d{1,2})[:.](\d{2})(?:[:.]\d{2})?"
    r"(?:\s*([AaPp])\.?\s?[Mm]\.?)?\]?\s*(?:[-\u2013\u2014]\s*)?"
)


def _stamp_moment(stamp: re.Match[str], day_first: bool) -> str | None:
    """The ISO moment a line's stamp names; None when it names no real day."""
    a, b, c, hour, minute = (int(stamp.group(i)) for i in range(1, 6))
    if len(stamp.group(1)) == 4:
        year, month, day = a, b, c
    else:
        day, month, year = (a, b, c) if day_first else (b, a, c)
    year += 2000 if year < 100 else 0
    if meridiem := (stamp.group(6) or "").lower():
        hour = hour % 12 + (12 if meridiem == "p" else 0)
    try:
        return datetime(year, month, day, hour, minute, tzinfo=UTC).isoformat()
    except ValueError:
        return None


def unstamped(lines: list[str]) -> list[tuple[str, str | None]]:
    """Each line less a chat export's stamp, with the moment the stamp names (None: no
    stamp). Day or month first is the file's: a month past 12 in either place says which
    (a US export: "3/25/24"); neither, the day comes first, as most of the world writes."""
    found = [(_STAMP.match(line), line) for line in lines]
    stamps = [m for m, _ in found if m is not None and len(m.group(1)) < 4]
    day_first = not any(int(m.group(2)) > 12 for m in stamps)
    return [
        (line, None) if m is None or not line[m.end() :].strip()  # a heading: a date alone
        else (line[m.end() :].strip(), _stamp_moment(m, day_first))
        for m, line in found
    ]


def read_transcript(text: str, name: str) -> list[JSONObject] | None:
    """A conversation written as plain text — one ``"Name: text"`` line a turn, a
    session's date on a line of its own before its turns, or each line stamped with its
    moment as chat apps export them — as the rows a JSON-lines dialogue import holds
    (category ``reference``, the line as said, when it was said); None when the file is
    not one (most lines must be turns). A line that is neither a turn nor a date is kept
    as a turn without a name; a stamped one that is no turn (the app's own notice:
    "Messages are end-to-end encrypted") is nobody's words and is left out."""
    lines = [(line, moment, speaker_label(line) is not None)
             for line, moment in unstamped([line.strip() for line in text.split("\n") if line.strip()])]
    turns = sum(1 for *_, turn in lines if turn)
    if turns < 2 or turns < TRANSCRIPT_SHARE * len(lines):
        return None
    stem = make_key(name) if name else "conversation"
    rows: list[JSONObject] = []
    stated: str | None = None
    for line, moment, turn in lines:
        if not turn and moment is not None:
            continue
        if not turn and (date := session_date(line)) is not None:
            stated = date
            continue
        row: JSONObject = {"category": "reference", "key": f"{stem}_{len(rows) + 1}", "value": line}
        said = moment or stated
        rows.append(row | ({"stated_at": said} if said else {}))
    return rows
