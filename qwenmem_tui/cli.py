"""The `qwenmem` command: the TUI by default, plus subcommands.

Features add their own subcommands through their registration (`Feature.cli`: a
``register(commands)``), the other faces theirs (`FACE_MODULES`: `serve`, `mcp`, `acp`); each
sets `args.func`, a sync or async callable taking `(args, settings, paths)` (or just
`(args)` for a command that loads its own settings) and returning an exit code or
None. A face module that is not installed is simply not offered.

Whatever goes wrong, the user gets one line on stderr: a bad config exits 2, anything
unexpected exits 1 with the traceback in the debug log, never on the terminal.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar, cast

from qwenmem_tui import collector
from qwenmem_tui.features.feature import Commands
from qwenmem_tui.paths import (
    Paths,
    private_umask,
    project_id,
    project_root,
    tighten_home,
)
from qwenmem_tui.text import one_line, terminal_safe, valid_text

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings
    from qwenmem_tui.storage.database import StorageError

# Startup cost is paid by every command, `--help` included, so this module and the
# feature modules' `register` import nothing heavy at the top: the config (pydantic),
# the SDK, storage, numpy/faiss, the server stack and Textual load where a command
# needs them (`qwenmem --help` went from 1.4 s to ~0.1 s).

T = TypeVar("T")

FACE_MODULES = ("qwenmem_tui.daemon.cli", "qwenmem_tui.mcp_server.cli", "qwenmem_tui.acp.cli")
"""The other faces this command starts, each module's ``register(subparsers)``."""


def build_parser(*, feature_commands: bool = True) -> argparse.ArgumentParser:
    """The command line; `feature_commands=False` leaves out the feature modules'
    subcommands (`run` does for a bare `qwenmem`, which names no command: their
    modules' imports would only delay the chat's first frame)."""
    parser = argparse.ArgumentParser(
        prog="qwenmem",
        description="A terminal chat for OpenAI-compatible LLMs that remembers.",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="config file (default: $QWENMEM_HOME/config.toml)",
    )
    parser.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=None,
        metavar="ID",
        help="reopen this project's latest session, or the session ID",
    )
    parser.add_argument(
        "--continue",
        dest="resume",
        action="store_const",
        const=True,
        help="go on in this project's latest session (as --resume without ID)",
    )
    parser.add_argument(
        "-p",
        "--print",
        nargs="?",
        const="-",
        default=None,
        metavar="TEXT",
        help="answer TEXT once as a chat would (what it recalls, its tools), print it and exit "
        "(TEXT - or none: read it from stdin)",
    )
    parser.add_argument(
        "--output-format",
        choices=("text", "json", "stream-json"),
        default=None,
        help="with -p: the reply alone (default), one JSON object, or one JSON event a line",
    )
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    sessions = subparsers.add_parser(
        "sessions",
        help="list this project's sessions",
        description="List this project's sessions, newest first.",
    )
    sessions.add_argument("--json", action="store_true", help="print a JSON array")
    sessions.set_defaults(func=list_sessions)
    session_commands = sessions.add_subparsers(dest="sessions_command", metavar="COMMAND")
    if feature_commands:
        commands = Commands(root=subparsers, sessions=session_commands)
        for ref in _feature_commands():
            _register(ref, commands)
        for name in FACE_MODULES:
            _register(f"{name}:register", subparsers)
    _accept_config_after_command(subparsers)
    return parser


def _accept_config_after_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`qwenmem COMMAND ... --config FILE` works like `qwenmem --config FILE COMMAND ...`.

    People add an option at the end of a command line; argparse only knows it before
    the command. SUPPRESS keeps a value given before the command when none comes after.
    """
    for command in subparsers.choices.values():
        command.add_argument(
            "--config", type=Path, metavar="FILE", default=argparse.SUPPRESS,
            help="config file (default: $QWENMEM_HOME/config.toml)",
        )
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                _accept_config_after_command(action)


def _feature_commands() -> list[str]:
    """The registered features' `register` functions, as references (the registry
    imports only the registrations: light enough for every command, `--help` too)."""
    from qwenmem_tui.features import registry

    return [feature.cli for feature in registry.FEATURES if feature.cli is not None]


def _register(ref: str, target: object) -> None:
    """Call the ``register`` `ref` names ("module:attribute") with what it adds to."""
    name, _, attribute = ref.partition(":")
    try:
        if importlib.util.find_spec(name) is None:
            return
    except ModuleNotFoundError:  # the face's package itself is missing
        return
    try:
        getattr(importlib.import_module(name), attribute)(target)
    except Exception as exc:
        # A broken feature must not take the chat down with it.
        print(f"qwenmem: {name} is unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    # The process's files (chat history, memories, logs, what libraries create on
    # their own) are owner-only whatever the umask; not in run(), which tests call.
    private_umask()
    sys.exit(run(argv))


def run(argv: Sequence[str] | None = None) -> int:
    """Parse, load the config, dispatch; returns the exit code."""
    # What a launch allocates lives until exit: no collection until the chat's first
    # frame (the app releases it, freezing it) or a subcommand starts (collector.py).
    collector.hold()
    try:
        return _run(sys.argv[1:] if argv is None else list(argv))
    finally:
        collector.release(freeze=False)


def _run(argv: list[str]) -> int:
    """`run`'s work, inside the collector's hold."""
    parser, args = _parse(argv)
    _valid_text_arguments(args)
    func = getattr(args, "func", None)
    if func is None and args.command is not None:
        parser.error(f"{args.command}: which action? See qwenmem {args.command} --help")
    if args.print is not None:
        if args.command is not None:
            parser.error(f"-p answers a question; it does not go with {args.command}")
        from qwenmem_tui.headless import run_headless  # the runtime: only when asked

        func = run_headless
        args.output_format = args.output_format or "text"
    elif args.output_format is not None:
        parser.error("--output-format goes with -p")
    # Past parsing (`--help` and usage errors have exited): what every command needs.
    from qwenmem_tui.config import ConfigError, load_settings, permission_warning
    from qwenmem_tui.features import registry  # noqa: F401  (the features' settings sections)

    paths = Paths.from_env()
    try:
        settings = load_settings(args.config or paths.config_file, required=args.config is not None)
    except ConfigError as exc:
        print(f"qwenmem: {exc}", file=sys.stderr)
        return 2
    if (warning := permission_warning(settings.source)) is not None:
        print(f"qwenmem: warning: {warning}", file=sys.stderr)
    if (notice := tighten_home(paths)) is not None:
        print(f"qwenmem: {notice}", file=sys.stderr)
    if func is not None and args.print is None and not getattr(args, "holds_collector", False):
        # A subcommand: the chat's first frame never comes. (`-p` releases it once its
        # runtime and chat are open, as the chat's first frame does; so do the faces
        # that set `holds_collector`, `mcp` and `acp`, once theirs is.)
        collector.release(freeze=False)
    try:
        return _call(func or run_tui, args, settings, paths)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `qwenmem sessions | head`: the reader left, as with any Unix tool that is not
        # an error to report. Stdout goes to /dev/null so the exit flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except ConfigError as exc:  # a subcommand re-read the config
        print(f"qwenmem: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        return _failed(exc, settings, paths)


def _valid_text_arguments(args: argparse.Namespace) -> None:
    """The command line's text as valid Unicode (``valid_text``): a question, a note, a
    query or an id given in bytes that are not UTF-8 was an "unexpected error". File
    names stay as given (argparse made them Paths): the bytes name the file."""
    for name, value in vars(args).items():
        if isinstance(value, str):
            setattr(args, name, valid_text(value))
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            setattr(args, name, [valid_text(item) for item in value])


class _NotLight(Exception):
    """The command line needs the full parser (a subcommand, a usage error)."""


def _parse(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the parsed command line.

    A question for `-p` names no subcommand, so it is parsed without the features' and
    the other faces' (their modules cost ~0.1 s of CPU, a tenth of `llm prompt`'s whole
    run); anything else that parser would not take (a subcommand, a usage error,
    `--help`) gets the full one, with its messages."""
    if _asks_once(argv):
        light = build_parser(feature_commands=False)

        def refuse(message: str) -> NoReturn:
            raise _NotLight(message)

        light.error = refuse  # type: ignore[method-assign]
        try:
            args = light.parse_args(argv)
        except _NotLight:
            pass
        else:
            if args.command is None:
                return light, args
    parser = build_parser(feature_commands=bool(argv))
    return parser, parser.parse_args(argv)


def _asks_once(argv: list[str]) -> bool:
    """Whether `argv` may be a `-p` question alone (no help or version asked)."""
    if any(arg in ("-h", "--help", "--version") for arg in argv):
        return False
    return any(
        arg == "--print" or arg.startswith("--print=") or (arg.startswith("-p") and not arg.startswith("--"))
        for arg in argv
    )


def _failed(exc: Exception, settings: Settings, paths: Paths) -> int:
    """The exit for an error no command handled: its one line, or the crash report.
    (The LLM's and the storage's errors are imported here, not before the chat's first
    frame: the storage package loads sqlite and the session store.)"""
    from qwenmem_tui.llm.errors import LLMError
    from qwenmem_tui.storage.database import StorageError

    if isinstance(exc, LLMError):
        print(f"qwenmem: {exc.message}", file=sys.stderr)
        return 1
    if isinstance(exc, StorageError):  # e.g. a store's database is unreachable: one line
        print(f"qwenmem: {exc}", file=sys.stderr)
        return 1
    if (known := storage_failure(exc, paths)) is not None:
        print(f"qwenmem: {known}", file=sys.stderr)
        return 1
    return _report_crash(exc, settings, paths)


def storage_failure(exc: Exception, paths: Paths) -> StorageError | None:
    """The one line for a damaged database or a full disk met below the storage layer's
    own checks (a store reading rows on its connection, a file written directly)."""
    from qwenmem_tui.storage.database import (
        damaged,
        disk_full,
        is_corrupt,
        is_disk_full,
    )

    if is_corrupt(exc):
        return damaged(paths.db_file, exc)
    if is_disk_full(exc):
        filename = getattr(exc, "filename", None)
        return disk_full(Path(filename) if filename else paths.home, exc)
    return None


def _call(
    func: Callable[..., object], args: argparse.Namespace, settings: Settings, paths: Paths
) -> int:
    """Run a command's ``func`` (sync or async, of ``(args, settings, paths)`` or just
    ``(args)``); its exit code (None: 0)."""
    import inspect

    try:
        inspect.signature(func).bind(args, settings, paths)
        call_args: tuple[object, ...] = (args, settings, paths)
    except TypeError:
        call_args = (args,)
    result = func(*call_args)
    if inspect.isawaitable(result):
        import asyncio

        result = asyncio.run(_await(result))
    return int(cast("int | None", result) or 0)  # a command returns an exit code or None


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _report_crash(exc: Exception, settings: Settings, paths: Paths) -> int:
    import logging

    from qwenmem_tui import debuglog
    from qwenmem_tui.debuglog import Redactor

    secret = settings.api_key_value()
    redact = Redactor([secret] if secret else [])
    if debuglog.current_path() is None:
        # A full disk or an unwritable home: configure() then runs without the file.
        debuglog.configure(paths, "cli", secrets=redact.secrets)
    logging.getLogger("qwenmem.cli").error("[CLI] unexpected error", exc_info=exc)
    log_file = debuglog.current_path()  # None if that line could not be written
    where = f" (details in {log_file})" if log_file else ""
    message = redact(one_line(f"{type(exc).__name__}: {exc}"))
    print(f"qwenmem: unexpected error: {message}{where}", file=sys.stderr)
    return 1


def run_tui(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    """The default command: the chat app for the project around the current directory."""
    restore = keep_early_keys(sys.stdin)
    try:
        return _run_tui(args, settings, paths, typed_before(sys.stdin))
    finally:
        restore()


class Terminal(Protocol):
    """What the early-keys helpers need of a stream (stdin): its file descriptor."""

    def fileno(self) -> int: ...


def keep_early_keys(stream: Terminal) -> Callable[[], None]:
    """Put the terminal in a key-at-a-time mode now, before Textual has loaded.

    Keys typed while the app is still importing sit in the terminal's line discipline:
    in its cooked mode Enter arrives as a line feed, which the prompt reads as Ctrl+J
    (a newline) instead of "send", and the typed text echoes raw over the screen. With
    ICRNL, ICANON and ECHO off (TCSANOW: nothing typed is flushed) the early keys reach
    the prompt as if typed into it. Textual restores what it found when it exits; the
    returned callable puts back the terminal as it was before this.
    """
    try:
        import termios
    except ImportError:  # Windows: no line discipline to adjust
        return lambda: None
    try:
        fd = stream.fileno()
        if not os.isatty(fd):
            return lambda: None
        before = termios.tcgetattr(fd)
        early = termios.tcgetattr(fd)
        early[0] &= ~termios.ICRNL
        early[3] &= ~(termios.ICANON | termios.ECHO)
        termios.tcsetattr(fd, termios.TCSANOW, early)
    except (OSError, ValueError, AttributeError, termios.error):  # not a real terminal
        return lambda: None

    def restore() -> None:
        try:
            termios.tcsetattr(fd, termios.TCSANOW, before)
        except (OSError, termios.error):
            pass

    return restore


def typed_before(stream: Terminal) -> bytes:
    """What was typed before `keep_early_keys` switched the terminal, taken off it.

    The cooked mode turned each Enter typed then into a line feed, which the prompt
    would read as Ctrl+J (a newline): a question typed and sent while qwenmem was
    still loading stayed in the prompt, unsent. Read at once after the switch (the
    partial line is readable then), each line feed goes back to the carriage return
    Enter sent, and the app parses these bytes before anything typed later
    (`QwenmemApp.early_input`). Empty when `stream` is not a terminal.
    """
    import select

    try:
        fd = stream.fileno()
        if not os.isatty(fd):
            return b""
        typed = b""
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            typed += chunk
    except (OSError, ValueError, AttributeError):
        return b""
    return typed.replace(b"\n", b"\r")


def _run_tui(
    args: argparse.Namespace, settings: Settings, paths: Paths, typed: bytes = b""
) -> int:
    import asyncio
    from contextlib import ExitStack

    from qwenmem_tui.llm.provider import resolve_provider
    from qwenmem_tui.tui.app import create_app  # textual: TUI only

    if isinstance(args.resume, str) and args.resume:
        # The runtime (the chat core) loads behind the first frame otherwise.
        from qwenmem_tui.reads import StartupError, check_resume

        try:  # a wrong id is one line here, not a flash of the full-screen view
            args.resume = asyncio.run(check_resume(paths, Path.cwd(), args.resume))
        except StartupError as exc:
            print(f"qwenmem: {exc}", file=sys.stderr)
            return 1
    with ExitStack() as stack:
        defaults = starter = None
        if resolve_provider(settings, os.environ) == "local":
            # No endpoint configured: the bundled model, a child process for this run
            # only, loading behind the drawn TUI (its progress is a line in the chat).
            from qwenmem_tui.runtime import StartupError, bundled_model

            try:
                defaults, starter = bundled_model(settings, paths, stack)
            except StartupError as exc:
                print(f"qwenmem: {exc}", file=sys.stderr)
                return 1
        app = create_app(
            settings,
            paths,
            cwd=Path.cwd(),
            resume=args.resume,
            model_defaults=defaults,
            start_model=starter,
            long_lived=True,
            early_input=typed,
        )
        app.run()
        if app.kept_session_id is not None:
            # Said after the full-screen view is gone, where the shell history keeps it.
            command = resume_command(app.kept_session_id)
            try:
                print(f"Session {app.kept_session_id} saved. Resume it with: {command}")
            except OSError:  # the terminal hung up (tmux killed, window closed): no one to tell
                pass
        return app.return_code or 0


def resume_command(
    session_id: str,
    *,
    argv0: str | None = None,
    which: Callable[[str], str | None] | None = None,
) -> str:
    """The command that reopens `session_id`, as it can be typed in this shell: plain
    `qwenmem` when that name runs this qwenmem, else this one's full path (a venv's
    qwenmem, `make run`, is not on PATH), or `python -m qwenmem_tui` as started."""
    import shlex
    import shutil

    argv0 = sys.argv[0] if argv0 is None else argv0
    found = (which or shutil.which)("qwenmem")
    started = Path(argv0)
    if started.name == "__main__.py":  # python -m qwenmem_tui
        program = f"{shlex.quote(sys.executable)} -m qwenmem_tui"
    elif found is not None and (not started.is_file() or _same_file(found, started)):
        program = "qwenmem"
    elif started.is_file():
        program = shlex.quote(str(started.resolve()))
    else:
        program = "qwenmem"
    return f"{program} --resume {shlex.quote(session_id)}"


def _same_file(a: str | Path, b: str | Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


async def list_sessions(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
    """`qwenmem sessions [--json]`: this project's sessions, newest first."""
    import json
    import time

    from qwenmem_tui.reads import session_reader

    project = project_id(project_root(Path.cwd()))
    async with session_reader(paths) as store:  # the runtime's light read path
        sessions = [] if store is None else await store.list_sessions(project)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "id": s.id,
                        "title": s.title,
                        "project": s.project,
                        "created_at": s.created_at,
                        "updated_at": s.updated_at,
                        "message_count": s.message_count,
                    }
                    for s in sessions
                ]
            )
        )
        return 0
    if not sessions:
        print(f"No sessions yet for {terminal_safe(project)}.")
        return 0
    id_width = max(len(s.id) for s in sessions)
    print(f"{'ID':<{id_width}}  {'UPDATED':<16}  {'MSGS':>5}  TITLE")
    for s in sessions:
        updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated_at))
        # A title comes from any local client's POST /session or a pasted first line.
        title = one_line(terminal_safe(s.title)) or "(untitled)"
        print(f"{s.id:<{id_width}}  {updated:<16}  {s.message_count:>5}  {title}")
    return 0


class _VersionAction(argparse.Action):
    """`--version`, reading the installed version only when asked (importlib.metadata
    scans every installed distribution: too slow for each `qwenmem` start)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.update(nargs=0, default=argparse.SUPPRESS)
        kwargs.setdefault("help", "show the version and exit")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(f"qwenmem {_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("qwenmem")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
