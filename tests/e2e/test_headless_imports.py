"""What `qwenmem -p` loads: only what one answer needs (issue 40 §3: ≤ 1.2× `llm prompt`).

A fresh interpreter answers a question through the CLI against the fake endpoint, with
a memory to recall, then lists its modules: an import added on that path (the TUI, the
other faces' or the features' subcommands) would silently bring its cost back into
every scripted question.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_support import CliRunner
from process_support import checkout_env

from qwenmem_tui import cli
from qwenmem_tui.features import registry
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

_PROBE = """
import gc, json, sys
from qwenmem_tui import cli, collector as hold, headless

collector = {}
started = headless._Report.query_started
release = hold.release


def releasing(*, freeze):  # read at the release itself: after it, the answer may collect
    if freeze and "released" not in collector:
        collector.update(released=[g["collections"] for g in gc.get_stats()], by=sys._getframe(1).f_code.co_name)
    release(freeze=freeze)


async def query_started(self, event):
    collector.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count())
    await started(self, event)


headless._Report.query_started = query_started
hold.release = releasing
collector["before"] = [g["collections"] for g in gc.get_stats()]  # the probe's own imports
code = cli.run(sys.argv[1:])
print(json.dumps([code, sorted(sys.modules), collector]))
"""

NOT_FOR_ONE_ANSWER = (
    "textual",
    "qwenmem_tui.tui",
    *cli.FACE_MODULES,  # the other faces' subcommands
    *(feature.cli.partition(":")[0] for feature in registry.FEATURES if feature.cli is not None),
)


def _ask(home: Path, project: Path, *argv: str) -> tuple[int, str, set[str], dict]:
    env = {**checkout_env(os.environ), "QWENMEM_HOME": str(home), "QWENMEM_DEBUG_LOG_FILE": "0"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=120, env=env, cwd=project
    )
    assert done.returncode == 0, done.stderr[-2000:]
    *answer, last = done.stdout.splitlines()
    code, loaded, collector = json.loads(last)
    return code, "\n".join(answer), set(loaded), collector


def _prefixes(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded for n in names if m == n or m.startswith(n + "."))


def test_a_question_loads_no_tui_and_no_subcommand(
    cli_run: CliRunner, home: Path, project: Path, fake: FakeOpenAI
) -> None:
    source = project.parent / "seed.jsonl"
    source.write_text(json.dumps({"category": "project", "key": "tests", "value": "Tests run with make itest"}))
    assert cli_run("memory", "import", "--trust", str(source), home=home, cwd=project).returncode == 0
    with (home / "config.toml").open("a") as config:
        config.write("\n[memory]\napi_wait_ms = 60000\nextraction = false\n")
    fake.script(Reply("Run make itest."))
    code, answer, loaded, _ = _ask(home, project, "-p", "how do I run the tests?")
    assert (code, answer) == (0, "Run make itest.")
    assert "Tests run with make itest" in fake.chat_requests[-1]["messages"][-1]["content"]
    assert "qwenmem_tui.runtime" in loaded  # the probe ran the real answer
    assert not _prefixes(loaded, NOT_FOR_ONE_ANSWER)


def test_a_subcommand_after_the_question_still_gets_its_message(
    cli_run: CliRunner, home: Path, project: Path
) -> None:
    """The light parser gives way to the full one for what it does not know."""
    done = cli_run("-p", "hi", "memory", "list", home=home, cwd=project)
    assert done.returncode == 2 and "-p answers a question; it does not go with memory" in done.stderr


def test_no_collection_while_the_answer_is_being_set_up(home: Path, project: Path, fake: FakeOpenAI) -> None:
    """Opening the runtime builds what lives until exit (the SDK's classes: Python's
    defaults ran hundreds of collections over `import openai` alone, a fifth of its
    cost); the collector is held until the chat is open, then collects again with that
    frozen out."""
    fake.script(Reply("Hello."))
    code, answer, _, collector = _ask(home, project, "-p", "hello")
    assert (code, answer) == (0, "Hello.")
    # Read at the release by the answer's opening (once released, what runs before the
    # question is sent may collect: the probe read there before, a race under load).
    assert collector["released"] == collector["before"] and collector["by"] == "_answer", collector
    assert collector["enabled"] and collector["frozen"] > 50_000
