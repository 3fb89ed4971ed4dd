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

import json
import os
import subprocess
import sys
from pathlib import Path

from qwenmem_tui import cli

_PROBE = """
import json, sys

from qwenmem_tui import cli
from qwenmem_tui.tui import app as app_module

loaded = []


async def first_frame(self):
    from qwenmem_tui.tui.screens.chat import ChatScreen
    from qwenmem_tui.tui.widgets.prompt import PromptInput

    assert isinstance(self.screen, ChatScreen) and self.screen.query(PromptInput)
    loaded.extend(sorted(sys.modules))
    self.exit()


run = app_module.QwenmemApp.run
app_module.QwenmemApp.run = lambda self: run(self, headless=True, size=(100, 30))
app_module.QwenmemApp._start = first_frame  # the startup worker, run once the screen is up
cli.run([])  # a bare `qwenmem`, as typed
print(json.dumps(loaded))
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
    "qwenmem_tui.features.memory.service",
    "qwenmem_tui.tui.widgets.items",
    "qwenmem_tui.tui.default_extensions",
    *cli.FEATURE_MODULES,  # the feature subcommands: a bare `qwenmem` names none
)
"""Loaded after the first frame (by the startup worker, in a thread)."""


def test_the_first_frame_loads_none_of_what_can_wait(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "QWENMEM_HOME": str(tmp_path),
        "QWENMEM_BASE_URL": "http://127.0.0.1:9/v1",  # never reached: the probe stops first
        "QWENMEM_DEBUG_LOG_FILE": "0",
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "qwenmem_tui.tui.screens.chat" in loaded  # the probe ran with the screen up
    assert loaded.isdisjoint(DEFERRED), sorted(loaded & set(DEFERRED))


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
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    types, runtime, markdown = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"user", "assistant", "info", "error"} <= set(types)
    assert runtime and markdown
