"""What the chat's first frame loads: only what it draws.

Launch to a typed key is Python, Textual and the first frame; everything else (the SDK,
numpy/FAISS, the chat loop and the runtime, the reply's Markdown, the secret scanner's
detectors) loads behind the drawn screen, in the startup worker's thread. An import
added at the top of a module on that path would silently bring its cost back in front
of the first frame, so this checks it in a fresh interpreter: the real app, headless,
started as a bare `qwenmem` through the CLI, with the startup worker replaced by a
probe that lists what is loaded by then (the chat screen is composed and mounted).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from process_support import checkout_env

from qwenmem_tui import cli
from qwenmem_tui.features import registry

_PROBE = """
import gc, json, sys

from qwenmem_tui import cli
from qwenmem_tui.tui import app as app_module

loaded = []
collector = {}


async def first_frame(self):
    from qwenmem_tui.tui.screens.chat import ChatScreen
    from qwenmem_tui.tui.widgets.prompt import PromptInput

    assert isinstance(self.screen, ChatScreen) and self.screen.query(PromptInput)
    from qwenmem_tui import secrets

    loaded.extend(sorted(sys.modules))
    collector.update(
        enabled=gc.isenabled(), frozen=gc.get_freeze_count(), full=gc.get_stats()[2]["collections"],
        secret_rules=secrets._rules.cache_info().currsize,
    )
    self.exit()


run = app_module.QwenmemApp.run
app_module.QwenmemApp.run = lambda self: run(self, headless=True, size=(100, 30))
app_module.QwenmemApp._start = first_frame  # the startup worker, run once the screen is up
cli.run([])  # a bare `qwenmem`, as typed
print(json.dumps([loaded, collector, gc.isenabled()]))
"""

DEFERRED = (
    "openai",
    "httpx",
    "numpy",
    "faiss",
    "detect_secrets",
    "mcp",
    "markdown_it",
    "rich.markdown",
    "textual.widgets._markdown",
    "qwenmem_tui.runtime",
    "qwenmem_tui.features.assembly",
    "qwenmem_tui.chat.session",
    "qwenmem_tui.chat.events",
    "qwenmem_tui.llm.client",
    "qwenmem_tui.tui.screens.reply_view",
    "qwenmem_tui.storage.database",  # sqlite and the session store: opened by the runtime
    "aiosqlite",
    "qwenmem_tui.memory.service",
    "qwenmem_tui.tui.widgets.items",
    "qwenmem_tui.tui.default_extensions",
    *cli.FACE_MODULES,  # the other faces' subcommands: a bare `qwenmem` names none
    # nor the features' (`Feature.cli`)
    *(feature.cli.partition(":")[0] for feature in registry.FEATURES if feature.cli is not None),
)
"""Loaded after the first frame (by the startup worker, in a thread)."""


def _launch(home: Path) -> tuple[set[str], dict[str, int], bool]:
    """A bare `qwenmem` until its screen is up: the modules loaded by then, the
    collector's state then, and whether it collects after the app ended."""
    env = {
        **checkout_env(os.environ),
        "QWENMEM_HOME": str(home),
        "QWENMEM_BASE_URL": "http://127.0.0.1:9/v1",  # never reached: the probe stops first
        "QWENMEM_DEBUG_LOG_FILE": "0",
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, env=env, cwd=home
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded, collector, enabled_after = json.loads(done.stdout.strip().splitlines()[-1])
    return set(loaded), collector, enabled_after


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> tuple[set[str], dict[str, int], bool]:
    """One launch for the tests that read it (each is a fresh interpreter, ~1-2 s)."""
    return _launch(tmp_path_factory.mktemp("home"))


def test_the_first_frame_loads_none_of_what_can_wait(
    launched: tuple[set[str], dict[str, int], bool],
) -> None:
    loaded, _, _ = launched
    assert "qwenmem_tui.tui.screens.chat" in loaded  # the probe ran with the screen up
    assert loaded.isdisjoint(DEFERRED), sorted(loaded & set(DEFERRED))


def test_the_first_frame_compiles_no_secret_rule(
    launched: tuple[set[str], dict[str, int], bool],
) -> None:
    """The secret scanner's ~30 patterns (~5 ms of CPU) are compiled by the scanner's
    preload thread or its first use, not when the debug log and the prompt history import
    it on the way to the first frame."""
    _, state, _ = launched
    assert state["secret_rules"] == 0


def test_no_full_collection_before_the_first_frame(
    launched: tuple[set[str], dict[str, int], bool],
) -> None:
    """Python's defaults ran a full collection (and ~140 others) over what launch builds,
    all of it alive until exit; the collector is held until the screen is up, then
    collects again with what was built frozen out of every collection."""
    _, collector, enabled_after = launched
    assert collector["full"] == 0
    assert collector["enabled"] and collector["frozen"] > 50_000
    assert enabled_after


def test_a_subcommand_runs_with_the_collector_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    monkeypatch.setenv("QWENMEM_HOME", str(tmp_path))
    monkeypatch.setattr(cli, "list_sessions", lambda args, settings, paths: seen.append(gc.isenabled()))
    assert cli.run(["sessions"]) == 0
    assert seen == [True] and gc.isenabled()


def test_the_startup_worker_loads_the_reply_widgets_and_the_runtime() -> None:
    """What was left out of the first frame is imported by the startup thread, before
    any reply or stored item is shown (so the first reply does not pay for it)."""
    probe = (
        "import json, sys\n"
        "from qwenmem_tui.tui import app\n"
        "widgets = app._startup_imports()\n"
        "print(json.dumps([sorted(widgets), 'qwenmem_tui.runtime' in sys.modules,"
        " 'textual.widgets._markdown' in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=checkout_env(os.environ)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    types, runtime, markdown = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"user", "assistant", "info", "error"} <= set(types)
    assert runtime and markdown
