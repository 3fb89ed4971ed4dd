"""`qwenmem memory list|search|export|import|forget|stats` (contract §3)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.memory.model import Category, Memory, RememberRequest, Status
from qwenmem_tui.paths import Paths, project_id, project_root
from qwenmem_tui.text import terminal_safe, terminal_safe_json

if TYPE_CHECKING:  # `register` runs for every `qwenmem` command: nothing heavy up here
    from qwenmem_tui.config import Settings
    from qwenmem_tui.features.feature import Commands
    from qwenmem_tui.memory.backup import ImportReport
    from qwenmem_tui.memory.service import MemoryService
    from qwenmem_tui.memory.recall import RecallResult
    from qwenmem_tui.llm.client import LLMClient

_VALUE_WIDTH = 60


def register(registered: Commands) -> None:
    memory = registered.root.add_parser(
        "memory",
        help="inspect and manage long-term memory",
        description="Inspect and manage long-term memory.",
    )
    commands = memory.add_subparsers(dest="memory_command", metavar="ACTION", required=True)
    _register_reading(commands)
    _register_backup(commands)
    _register_changes(commands)
    _register_upkeep(commands)


def _register_reading(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memory list`, `search`: what is stored and how recall sees it."""
    p = commands.add_parser("list", help="active memories of this project and global ones")
    p.add_argument("--all", action="store_true", help="every status, not only active")
    p.add_argument("--json", action="store_true", help="print a JSON array")
    p.set_defaults(func=list_memories)

    p = commands.add_parser(
        "search",
        help="run recall like the chat does",
        description="Without TEXT: one query a line from stdin.",
    )
    p.add_argument("text", nargs="?", help="the query (default: read queries from stdin)")
    p.add_argument(
        "-k", type=int, default=None, metavar="N", help="how many memories (default: memory.top_k)"
    )
    p.add_argument("--json", action="store_true", help="print a JSON array")
    p.add_argument(
        "--as-of",
        metavar="DATE",
        help="recall what was true then: an ISO 8601 date (its end) or date-time, UTC "
        "unless it names a zone",
    )
    p.set_defaults(func=search)

    p = commands.add_parser(
        "history",
        help="a fact's timeline: every version, what replaced it, who decided and why",
    )
    p.add_argument("which", metavar="ID|KEY", help="a memory id (any version) or a key")
    p.add_argument("--json", action="store_true", help="print a JSON array, oldest first")
    p.set_defaults(func=history)



def _register_backup(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memory export`, `import`: memories in and out of the store."""
    p = commands.add_parser("export", help="write every memory as JSON lines")
    p.add_argument("file", nargs="?", type=Path, help="output file (default: stdout)")
    p.add_argument(
        "--salvage",
        action="store_true",
        help="from a damaged database: every memory still readable, read-only "
        "(restore it with `memory import --trust --keep-scope FILE`)",
    )
    p.add_argument(
        "--force", action="store_true", help="replace FILE if it exists (never through a link)"
    )
    p.set_defaults(func=export)

    p = commands.add_parser(
        "import",
        help="read memories from JSON lines (or another tool's memory), through the guard",
        description=(
            "Every line is kept under its own key. Lines written by `memory export` restore"
            " as they were, each project's memories in that project; hand-written lines put"
            " project memories in this project unless --keep-scope."
        ),
    )
    p.add_argument(
        "file",
        type=Path,
        metavar="PATH",
        help="JSON lines: category, key, value per line; with --from, that tool's memory "
        "folder or file",
    )
    p.add_argument(
        "--from",
        dest="source",
        choices=("claude-code", "qwen-code", "mem0"),
        help="read another tool's memory: a Claude Code or qwen-code memory folder "
        "(Markdown files with a type in their front matter) or CLAUDE.md / QWEN.md, "
        "or a mem0 JSON export",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be imported, held or rejected; write nothing",
    )
    p.add_argument(
        "--keep-scope",
        action="store_true",
        help="keep hand-written lines' scope too (backup lines always keep theirs)",
    )
    p.add_argument(
        "--trust",
        action="store_true",
        help="the file is your own words: without it, its lines are judged like text read "
        "from a file (rules and facts about you are held for review)",
    )
    p.set_defaults(func=import_)



def _register_changes(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memory add`, `restore`, `forget`: a person's own acts on memory (audited)."""
    p = commands.add_parser(
        "add",
        help="save a note in long-term memory, as /remember does",
        description="Your own words, filed as /remember files them (a category and a key "
        "chosen for the note unless given); the guard may hold it for review.",
    )
    p.add_argument("text", nargs="+", metavar="TEXT", help="the note (several words need no quotes)")
    p.add_argument("--category", choices=[c.value for c in Category], help="default: chosen for the note")
    p.add_argument("--key", metavar="KEY", help="a short snake_case name (default: chosen for the note)")
    p.add_argument("--json", action="store_true", help='print {"id", "category", "key", "action"}')
    p.set_defaults(func=add)

    p = commands.add_parser(
        "restore", help="make a superseded memory active again (audited)"
    )
    p.add_argument("id", help="the memory's id (memory list --all shows superseded ones)")
    p.set_defaults(func=restore)

    p = commands.add_parser("forget", help="delete one memory (audited)")
    p.add_argument("id", help="the memory's id (memory list shows it)")
    p.set_defaults(func=forget)


def _register_upkeep(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memory stats`, `migrate`: how the store does, and moving it to PostgreSQL."""
    p = commands.add_parser("stats", help="hit rate, staleness, poisoning flag rate, counts")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(func=stats)

    p = commands.add_parser(
        "migrate",
        help="copy this machine's SQLite memory (with its audit history) into PostgreSQL",
        description="Idempotent: running it again copies only what is new.",
    )
    p.add_argument("--to", choices=["postgres"], required=True, help="the target store")
    p.add_argument("--dsn", help="default: memory.postgres_dsn or QWENMEM_POSTGRES_DSN")
    p.set_defaults(func=migrate)


def _project() -> str:
    return project_id(project_root(Path.cwd()))


def _progress(done: int, total: int) -> None:
    if total >= 1000:
        end = "\n" if done == total else ""
        print(
            f"\rqwenmem: rebuilding memory index {done}/{total}",
            end=end,
            file=sys.stderr,
            flush=True,
        )


def _notice(text: str) -> None:
    print(f"qwenmem: {terminal_safe(text)}", file=sys.stderr, flush=True)


@asynccontextmanager
async def _service(
    settings: Settings, paths: Paths, *, lazy: bool = False, llm: LLMClient | None = None
) -> AsyncIterator[MemoryService]:
    """The service for one command, closed however the command ends.

    ``lazy``: for commands that only read or delete rows — the embedder and the
    index (numpy, FAISS, the model: ~1 s) load only if something needs them.
    ``llm``: the model a write may ask (which memory a note restates, where it goes).
    """
    from qwenmem_tui.memory.service import MemoryService

    svc = await MemoryService.open(
        settings, paths, progress=_progress, on_notice=_notice, lazy=lazy, llm=llm
    )
    try:
        yield svc
    finally:
        await svc.close()


def _json(value: object) -> str:
    """JSON for stdout: readable non-ASCII text, control characters as escapes."""
    return terminal_safe_json(json.dumps(value, ensure_ascii=False))


def _key_width(rows: list[Memory]) -> int:
    """The key column fits the longest key, so values line up under each other."""
    return max([24, *(len(m.key) for m in rows)])


def _row(m: Memory, key_width: int, *, status: str | None = None) -> str:
    # Keys and values come from the model, imports and tools: nothing of them may act
    # on the terminal (the same rendering as the TUI's).
    value = " ".join(terminal_safe(m.value).split())
    if len(value) > _VALUE_WIDTH:
        value = value[: _VALUE_WIDTH - 1] + "…"
    flags = f" [{terminal_safe(', '.join(m.flags))}]" if m.flags else ""
    key = terminal_safe(m.key).ljust(key_width)
    return f"{m.id:>5}  {status or m.status:<11} {m.category:<9} {key} {value}  ({m.origin}){flags}"


async def list_memories(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    async with _service(settings, paths, lazy=True) as svc:
        rows = await svc.list(project=_project(), statuses=None if args.all else [Status.ACTIVE])
    if args.json:
        print(_json([m.to_json() for m in rows]))
    elif not rows:
        print("No memories." if args.all else "No active memories.")
    else:
        width = _key_width(rows)
        print("\n".join(_row(m, width) for m in rows))
    return 0


def _hits(result: RecallResult) -> list[JSONObject]:
    from qwenmem_tui.memory.render import version_fields

    return [
        {**m.to_json(), "score": score, **version_fields(m, result.later.get(m.id))}
        for m, score in zip(result.memories, result.scores, strict=True)
    ]


SEARCH_USAGE = (
    "usage: qwenmem memory search TEXT [-k N] [--json]  "
    "(without TEXT it reads one query a line from stdin, e.g. a pipe)"
)


async def search(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    if args.text is None and sys.stdin.isatty():
        # Someone typed `qwenmem memory search` by hand: waiting on the terminal for
        # stdin would look like a hang, and printing nothing like an empty memory.
        print(SEARCH_USAGE, file=sys.stderr)
        return 2
    as_of = None
    if args.as_of is not None:
        from qwenmem_tui.memory.timeline import parse_moment

        try:
            as_of = parse_moment(args.as_of, end_of_day=True)
        except ValueError as exc:
            print(f"qwenmem: --as-of: {terminal_safe(str(exc))}", file=sys.stderr)
            return 2
    async with _service(settings, paths) as svc:
        project = _project()
        if as_of is not None:
            return await _search_as_of(svc, args, project, as_of)
        if args.text is None:
            # Batch mode for scripts and evaluations: one JSON array per input line.
            for line in sys.stdin:
                query = line.rstrip("\n")
                result = await svc.recall(query, project=project, k=args.k, record=False)
                print(_json(_hits(result)), flush=True)
            return 0
        result = await svc.recall(args.text, project=project, k=args.k, record=False)
    if args.json:
        print(_json(_hits(result)))
    elif not result.memories:
        print("No memory passed the filters and the threshold.")
    else:
        print(_search_rows(result))
    return 0


def _search_rows(result: RecallResult) -> str:
    """Search hits as text, best first; an earlier version says so in its status
    column and, on the line below, what may replace it and when."""
    from qwenmem_tui.memory.render import earlier_note

    width = _key_width(result.memories)
    lines = []
    for m, score in zip(result.memories, result.scores, strict=True):
        newer = result.later.get(m.id)
        row = _row(m, width, status="earlier" if newer is not None else None)
        lines.append(f"{score:6.3f} {row}")
        if newer is not None:
            lines.append(f"{'':14}{terminal_safe(earlier_note(m, newer))}")
    return "\n".join(lines)


async def _search_as_of(
    svc: MemoryService, args: argparse.Namespace, project: str, at: float
) -> int:
    """``search --as-of``: recall over the versions that were true at ``at``."""
    from qwenmem_tui.memory.timeline import recall_as_of

    queries = [args.text] if args.text is not None else [line.rstrip("\n") for line in sys.stdin]
    for query in queries:
        found = await recall_as_of(svc, query, project=project, at=at, k=args.k)
        hits = [{**m.to_json(), "score": score} for m, score in found]
        if args.json or args.text is None:
            print(_json(hits), flush=True)
        elif not found:
            print("No memory true then passed the filters and the threshold.")
        else:
            width = _key_width([m for m, _ in found])
            print("\n".join(f"{score:6.3f} {_row(m, width)}" for m, score in found))
    return 0


async def history(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    """``memory history ID|KEY``: every version of the fact, oldest first."""
    from qwenmem_tui.memory.render import day
    from qwenmem_tui.memory.timeline import history as timeline_of

    async with _service(settings, paths, lazy=True) as svc:
        versions = await timeline_of(svc, args.which, project=_project())
    shown = args.which if len(args.which) <= 40 else args.which[:39] + "…"
    if not versions:
        print(f"qwenmem: no memory {terminal_safe(shown)!r} in this project", file=sys.stderr)
        return 1
    if args.json:
        print(_json([v.to_json() for v in versions]))
        return 0
    width = _key_width([v.memory for v in versions])
    for v in versions:
        m = v.memory
        until = "now" if m.valid_until is None else day(m.valid_until)
        print(f"{day(m.stated_at)} → {until:<10} {_row(m, width)}")
        if v.replaced_by is not None:
            why = f": {terminal_safe(v.why)}" if v.why else ""
            print(f"{'':>25}replaced by #{v.replaced_by} (decided by {v.decided_by or 'unknown'}){why}")
        if m.restates is not None:
            print(f"{'':>25}may restate #{m.restates} (not decided yet: both kept)")
    return 0


async def export(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    if args.salvage:
        return await salvage_export(args, settings, paths)
    from qwenmem_tui.memory import backup

    async with _service(settings, paths, lazy=True) as svc:
        lines = await backup.export_lines(svc)
    text = "".join(terminal_safe_json(line) + "\n" for line in lines)
    if args.file is None:
        sys.stdout.write(text)
    elif not _write_file(args, text):
        return 1
    print(f"qwenmem: exported {len(lines)} memories", file=sys.stderr)
    return 0


def _write_file(args: argparse.Namespace, text: str) -> bool:
    """``text`` into ``args.file`` (no link, no existing file without --force); False,
    with the reason on stderr, when refused."""
    from qwenmem_tui.features.export.files import ExportRefused, write_export

    try:
        write_export(args.file, text, force=args.force)
    except ExportRefused as exc:
        print(f"qwenmem: {terminal_safe(str(exc))}", file=sys.stderr)
        return False
    return True


async def salvage_export(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    """``export --salvage``: what a damaged database still holds, without opening it as
    qwenmem does (no migrations, no writes, no index)."""
    import asyncio

    from qwenmem_tui.memory.salvage import salvage
    from qwenmem_tui.memory.service import default_user

    if not paths.db_file.exists():
        print(f"qwenmem: no database at {paths.db_file}", file=sys.stderr)
        return 1
    report = await asyncio.to_thread(salvage, paths.db_file, user=default_user(settings))
    where = "stdout" if args.file is None else str(args.file)
    if report.unreadable_file is None:
        text = "".join(terminal_safe_json(line) + "\n" for line in report.lines)
        if args.file is not None:
            if not _write_file(args, text):
                return 1
        else:
            try:
                sys.stdout.write(text)
                sys.stdout.flush()
            except OSError as exc:
                print(
                    f"qwenmem: cannot write {where}: {exc.strerror or exc} (nothing exported; "
                    f"{paths.db_file} was not touched)",
                    file=sys.stderr,
                )
                return 1
    print(f"qwenmem: {terminal_safe(report.summary(where))}", file=sys.stderr)
    return 1 if report.unreadable_file is not None else 0


async def import_(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    if args.keep_scope and not args.trust:
        print(
            "qwenmem: --keep-scope needs --trust: without it a line's scope is a claim, and "
            "its project memories land in this project",
            file=sys.stderr,
        )
        return 2
    lines = _import_source(args)
    if lines is None:
        return 1
    if args.dry_run:
        return await _dry_run(args, lines, settings, paths)
    async with _service(settings, paths) as svc:
        report = await _import(svc, args, lines, progress=_import_progress())
    return _report_import(args, report)


async def _import(
    svc: MemoryService,
    args: argparse.Namespace,
    lines: list[str],
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    from qwenmem_tui.memory import backup

    return await backup.import_lines(
        svc,
        lines,
        project=_project(),
        keep_scope=args.keep_scope,
        trusted=args.trust,
        progress=progress,
    )


def _report_import(args: argparse.Namespace, report: ImportReport, *, dry: bool = False) -> int:
    """What an import did (or, ``dry``, would do): errors on stderr, the summary; exit
    1 when a line was rejected or the import stopped."""
    for error in () if dry else report.errors:  # a dry run said them line by line
        print(f"qwenmem: {args.file}: {terminal_safe(str(error))}", file=sys.stderr)
    if report.stopped is not None:
        print(
            f"qwenmem: {report.stopped}; stopped at line {report.stopped_at} of {args.file}, "
            f"kept what the lines before it did ({report.summary()}); importing "
            "the file again refreshes those, it does not add them twice",
            file=sys.stderr,
        )
        return 1
    print(("dry run, nothing written: " if dry else "") + report.summary())
    held = report.counts.get("quarantined", 0)
    if held and not args.trust:
        # Held is kept, not lost: say why and what makes them active, or the count
        # reads as a failed import.
        print(
            f"{held} held for review: without --trust an import is read as file content, so "
            "facts about you and rules for the assistant wait for your approval (a on "
            "/memory); import again with --trust if the file is your own"
        )
    return 1 if report.rejected else 0


async def _dry_run(
    args: argparse.Namespace, lines: list[str], settings: Settings, paths: Paths
) -> int:
    """``import --dry-run``: the real import, run on a private copy of the memory that
    is then deleted, so what it prints is what the real run does, line by line."""
    import asyncio
    import shutil
    import tempfile

    from qwenmem_tui.memory.settings import MEMORY_SETTINGS
    from qwenmem_tui.paths import private_dir

    private_dir(paths.home)
    with tempfile.TemporaryDirectory(dir=paths.home, prefix="dry-run-") as scratch:
        copy = Paths(Path(scratch))
        copy.ensure()
        note = ""
        memory = MEMORY_SETTINGS.of(settings)
        if memory.store == "postgres":
            settings = settings.model_copy(
                update={MEMORY_SETTINGS.table: memory.model_copy(update={"store": "sqlite"})}
            )
            note = " (the PostgreSQL memory is not copied: judged against an empty one)"
        elif paths.db_file.exists():
            await asyncio.to_thread(_copy_database, paths.db_file, copy.db_file)
            if paths.index_dir.is_dir():
                shutil.copytree(paths.index_dir, copy.index_dir, dirs_exist_ok=True)
        async with _service(settings, copy) as svc:
            report = await _import(svc, args, lines)
    for outcome in report.by_line():
        print(terminal_safe(outcome))
    if note:
        print("dry run" + note)
    return _report_import(args, report, dry=True)


def _copy_database(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite database (its backup API, not a file copy)."""
    import sqlite3

    with sqlite3.connect(f"file:{source}?mode=ro", uri=True) as src, sqlite3.connect(target) as dst:
        src.backup(dst)


def _import_progress() -> Callable[[int, int], None] | None:
    """A progress bar on stderr when it is a terminal (nothing in pipes and logs)."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        end = "\n" if done >= total else ""
        bar = "#" * filled + "-" * (width - filled)
        print(f"\rqwenmem: importing [{bar}] {done}/{total}", end=end, file=sys.stderr, flush=True)

    return show


def _memory_id(text: str) -> int | None:
    """A positive whole number within range, else None (printed as a usage error)."""
    if not text.isascii() or not text.isdigit():
        return None
    return int(text) if len(text) <= 20 else 0  # longer: out of range anyway


async def restore(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    shown = args.id if len(args.id) <= 30 else args.id[:29] + "…"
    memory_id = _memory_id(args.id)
    if memory_id is None:
        print(f"qwenmem: a memory id is a positive whole number, got {shown!r}", file=sys.stderr)
        return 2
    async with _service(settings, paths) as svc:
        restored = await svc.restore(memory_id, project=_project(), reason="qwenmem memory restore")
    if restored is None:
        print(f"qwenmem: no superseded memory with id {shown}", file=sys.stderr)
        return 1
    memory, replaced = restored
    line = f"Restored memory #{memory_id} ({memory.category}/{terminal_safe(memory.key)})"
    if replaced:
        line += "; it replaces " + ", ".join(f"#{i}" for i in replaced)
    print(line + ".")
    return 0


def json_lines(text: str) -> list[str]:
    """A JSON-lines file's lines (its BOM already read off): split at newlines alone,
    CRLF or LF. ``str.splitlines`` also splits at U+2028, U+0085 and other separators
    that a JSON string may hold raw (JavaScript's ``JSON.stringify`` and Python's
    ``ensure_ascii=False`` write them so), which cut one memory into two broken lines."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def _plain_lines(source: Path, text: str) -> list[str] | None:
    """A file's JSON lines; a conversation written as plain text ("Name: text" a line,
    each session's date on a line of its own) as the dialogue rows it stands for; for
    any other text one line saying what import reads, not an error a line."""
    from qwenmem_tui.memory.importers import read_transcript

    lines = json_lines(text)
    if (document := _one_document(source, text)) is not False:
        return document
    if not any(line.strip() for line in lines) or any(
        line.lstrip().startswith(("{", "[")) for line in lines
    ):
        return lines
    rows = read_transcript(text, source.stem)
    if rows is None:
        print(
            f"qwenmem: {source}: neither JSON lines (one object a line with a \"value\", "
            'optional "category", "key", "stated_at") nor a conversation ("Name: text" a line)',
            file=sys.stderr,
        )
        return None
    return [json.dumps(row, ensure_ascii=False) for row in rows]


def _one_document(source: Path, text: str) -> list[str] | None | Literal[False]:
    """A file that is one JSON document, not JSON lines (a pretty-printed export, an
    array): an array of rows, each an object with a "value", as those rows; anything
    else one line saying what import reads (None), not an error for each of its lines
    (e2e10: a Telegram export was 20 lines of "not valid JSON"). False: not one."""
    if sum(1 for line in text.split("\n") if line.strip()) < 2 and not text.lstrip().startswith("["):
        return False
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return False
    if isinstance(document, list) and document and all(
        isinstance(row, dict) and "value" in row for row in document
    ):
        return [json.dumps(row, ensure_ascii=False) for row in document]
    print(
        f"qwenmem: {source}: one JSON document, not JSON lines (one object a line with a "
        '"value", optional "category", "key", "stated_at"); a mem0 export: --from mem0',
        file=sys.stderr,
    )
    return None


def _import_source(args: argparse.Namespace) -> list[str] | None:
    """The JSON lines to import: the file's, or another tool's memory read as lines."""
    from qwenmem_tui.memory.importers import (
        MAX_IMPORT_BYTES,
        ImportSourceError,
        import_lines,
        read_bounded,
        read_source,
    )

    if args.source is None:
        source: Path = args.file  # argparse's Namespace is untyped
        try:
            text = read_bounded(source, MAX_IMPORT_BYTES, "split it and import the parts")
        except ImportSourceError as exc:
            print(f"qwenmem: cannot read {terminal_safe(str(exc))}", file=sys.stderr)
            return None
        return _plain_lines(source, text)

    try:
        entries = read_source(args.source, args.file)
    except ImportSourceError as exc:
        print(f"qwenmem: {terminal_safe(str(exc))}", file=sys.stderr)
        return None
    if not entries:
        print(f"qwenmem: {args.file}: no {args.source} memories found", file=sys.stderr)
    return import_lines(entries)


async def add(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    """`memory add TEXT`: /remember from the shell, the same filing, guard and answer."""
    import os

    from qwenmem_tui.features.memory.confirmation import ACTION_NAMES, remember_confirmation
    from qwenmem_tui.memory.writer import MemoryRejected
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.llm.provider import resolve_provider

    text = " ".join(args.text)
    # The configured endpoint files the note as in the chat; the bundled model is not
    # started for one note (the rule files it then, as when the endpoint is slow).
    local = resolve_provider(settings, os.environ) == "local"
    llm = None if local else LLMClient.from_settings(settings)
    try:
        async with _service(settings, paths, llm=llm) as svc:
            note = RememberRequest(
                text, project=_project(), category=args.category, key=args.key,
                reason="qwenmem memory add",
            )
            result = await svc.remember(note)
    except MemoryRejected as exc:
        if args.json:
            refused = {"id": None, "category": args.category, "key": args.key, "action": "refused"}
            print(_json({**refused, "error": str(exc)}))
        else:
            print(f"qwenmem: not remembered: {terminal_safe(str(exc))}", file=sys.stderr)
        return 1
    finally:
        if llm is not None:
            await llm.aclose()
    memory = result.memory
    if args.json:
        action = ACTION_NAMES[result.action]
        print(_json({"id": memory.id, "category": str(memory.category), "key": memory.key, "action": action}))
    else:
        print(terminal_safe(remember_confirmation(result)))
    return 0


async def forget(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    shown = args.id if len(args.id) <= 30 else args.id[:29] + "…"
    memory_id = _memory_id(args.id)
    if memory_id is None:
        print(f"qwenmem: a memory id is a positive whole number, got {shown!r}", file=sys.stderr)
        return 2
    async with _service(settings, paths, lazy=True) as svc:
        # Out-of-range ids and other users' or projects' memories read as no memory.
        forgotten = await svc.forget(memory_id, project=_project(), reason="qwenmem memory forget")
    if forgotten is None:
        print(f"qwenmem: no memory with id {shown} (or it was already deleted)", file=sys.stderr)
        return 1
    print(f"Forgot memory #{memory_id} ({forgotten.category}/{terminal_safe(forgotten.key)}).")
    return 0


async def stats(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    async with _service(settings, paths, lazy=True) as svc:
        result = await svc.stats()
    print(_json(result.to_json()) if args.json else terminal_safe(result.to_text()))
    return 0


async def migrate(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    from qwenmem_tui.memory.postgres import PostgresMemoryStore
    from qwenmem_tui.memory.postgres.migrate import (
        migrate_from_sqlite,
        sqlite_source,
    )
    from qwenmem_tui.memory.settings import MEMORY_SETTINGS
    from qwenmem_tui.storage.database import Database

    dsn = args.dsn or MEMORY_SETTINGS.of(settings).postgres_dsn
    if not dsn:
        print(
            "qwenmem: no PostgreSQL DSN: pass --dsn or set memory.postgres_dsn / QWENMEM_POSTGRES_DSN",
            file=sys.stderr,
        )
        return 2
    if not paths.db_file.exists():
        print(f"qwenmem: no SQLite memory to migrate at {paths.db_file}", file=sys.stderr)
        return 1
    db = await Database.open(paths.db_file)
    try:
        store = await PostgresMemoryStore.open(dsn, on_notice=_notice)
        try:
            report = await migrate_from_sqlite(db, store, source=sqlite_source(paths.db_file))
        finally:
            await store.close()
    finally:
        await db.close()
    print(f"{store.where}: {report.to_text()}")
    return 0
