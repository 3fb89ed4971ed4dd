"""Project instruction files: AGENTS.md, QWEN.md and CLAUDE.md, read into the prompt.

Users of other agents keep their standing instructions in these files; qwenmem reads
them, never writes them (its own memory stays in the store). The files in force are
`$QWENMEM_HOME/AGENTS.md` (for every project) and, in every directory from the
project root down to the working directory, AGENTS.md, QWEN.md and CLAUDE.md — the
nearer the file, the later it comes, so it has the last word. They go into the
system prompt as one labelled `<project-instructions>` block; the recap writer and
the compaction summariser read the block out of the chat's system prompt
(`instructions_in`), so every model call that speaks for the session sees them.

A large file is cut at `FILE_CAP_CHARS` (and all of them at `TOTAL_CAP_CHARS`) with
a line saying so in the prompt and a notice for the user.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("qwenmem.instructions")

FILE_NAMES = ("AGENTS.md", "QWEN.md", "CLAUDE.md")
FILE_CAP_CHARS = 16_000
TOTAL_CAP_CHARS = 48_000
OPEN_TAG = "<project-instructions>"
CLOSE_TAG = "</project-instructions>"
_BLOCK = re.compile(re.escape(OPEN_TAG) + r".*?" + re.escape(CLOSE_TAG), re.DOTALL)


@dataclass(frozen=True)
class InstructionFile:
    path: Path
    text: str  # as it goes into the prompt (cut when too long)
    size: int  # characters in the file
    shown: str  # how the user and the model know it: "~/.qwenmem/AGENTS.md", "src/QWEN.md"

    @property
    def truncated(self) -> bool:
        return len(self.text) < self.size


@dataclass(frozen=True)
class Instructions:
    """The instruction files in force, in prompt order."""

    files: tuple[InstructionFile, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.files)

    def section(self) -> str:
        """The labelled block for the system prompt ("" without files)."""
        if not self.files:
            return ""
        parts = [
            OPEN_TAG,
            "The user's instruction files for this project follow (read-only, kept by the "
            "user). Follow them like the user's own words; a nearer file wins over a more "
            "general one.",
        ]
        for file in self.files:
            # A file cannot close the block early (the recap reads the block back).
            text = file.text.replace(OPEN_TAG, "<project-instructions​>").replace(
                CLOSE_TAG, "</project-instructions​>"
            )
            parts.append(f"\n## {file.shown}\n{text.rstrip()}")
            if file.truncated:
                parts.append(f"[… {file.shown} is cut here: {file.size - len(file.text)} more characters]")
        parts.append(CLOSE_TAG)
        return "\n".join(parts)

    def notices(self) -> list[str]:
        """One line per file that was cut, for the user."""
        return [
            f"{file.shown} is long ({file.size} characters): only the first {len(file.text)} "
            "are in the prompt."
            for file in self.files
            if file.truncated
        ]

    def describe(self) -> str:
        """What /context shows: the files in force, or where they would be read from."""
        if not self.files:
            return (
                "No instruction files in force. qwenmem reads AGENTS.md, QWEN.md and CLAUDE.md "
                "from the project root down to this directory, and AGENTS.md in its home."
            )
        lines = ["Instruction files in the system prompt (read-only):"]
        for file in self.files:
            cut = f", cut to {len(file.text)}" if file.truncated else ""
            lines.append(f"  {file.shown}  ({file.size} characters{cut})")
        return "\n".join(lines)


def _directories(root: Path, cwd: Path) -> list[Path]:
    """The project root and every directory below it down to `cwd` (just the root when
    `cwd` is outside it)."""
    root, cwd = root.resolve(), cwd.resolve()
    try:
        relative = cwd.relative_to(root)
    except ValueError:
        return [root]
    directories = [root]
    for part in relative.parts:
        directories.append(directories[-1] / part)
    return directories


def _shown(path: Path, root: Path, home: Path) -> str:
    for base, label in ((root, ""), (home, str(home).rstrip("/") + "/")):
        try:
            return label + str(path.relative_to(base))
        except ValueError:
            continue
    return str(path)


def _read(path: Path, budget: int) -> tuple[str, int] | None:
    """The file's text, cut to `budget` characters, and its full length; None when it
    is missing, not a regular file or unreadable."""
    try:
        if not path.is_file():
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        log.warning("[INSTRUCTIONS] cannot read %s: %s", path, exc)
        return None
    return text[: max(0, min(FILE_CAP_CHARS, budget))], len(text)


def load_instructions(root: Path, cwd: Path, home: Path) -> Instructions:
    """The instruction files in force for `cwd` in the project at `root`."""
    candidates = [home / "AGENTS.md"]
    for directory in _directories(root, cwd):
        candidates.extend(directory / name for name in FILE_NAMES)
    files: list[InstructionFile] = []
    seen: set[Path] = set()
    budget = TOTAL_CAP_CHARS
    for path in candidates:
        try:
            real = path.resolve()
        except OSError:
            continue
        if real in seen:  # CLAUDE.md -> AGENTS.md symlinks are common: read it once
            continue
        read = _read(path, budget)
        if read is None or not read[0].strip():
            continue
        seen.add(real)
        text, size = read
        budget -= len(text)
        files.append(InstructionFile(path, text, size, _shown(path, root.resolve(), home)))
    return Instructions(tuple(files))


def with_instructions(system_prompt: str, instructions: Instructions) -> str:
    """The chat's system prompt with the instruction block after it."""
    section = instructions.section()
    return f"{system_prompt}\n\n{section}" if section else system_prompt


def instructions_in(messages: list[dict] | str | None) -> str:
    """The instruction block of a chat's system prompt (a history, or the prompt
    itself), "" when it has none: what the recap and the summariser add to theirs."""
    if isinstance(messages, str):
        prompt = messages
    elif messages and messages[0].get("role") == "system":
        content = messages[0].get("content")
        prompt = content if isinstance(content, str) else ""
    else:
        return ""
    match = _BLOCK.search(prompt)
    return match.group(0) if match else ""
