"""The core (everything but the TUI and the CLI entry) must import without Textual.

That keeps the daemon, `qwenmem memory ...` and the tests of pure logic fast, and makes
sure no domain code grows a dependency on widgets. Checked in a fresh interpreter,
since this test process has long imported textual itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import qwenmem_tui

PACKAGE_DIR = Path(qwenmem_tui.__file__).parent
NOT_CORE = {"qwenmem_tui.cli", "qwenmem_tui.__main__"}

_PROBE = """
import importlib, json, sys
result = {"textual": None, "failed": {}}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception as exc:
        result["failed"][name] = f"{type(exc).__name__}: {exc}"
    if result["textual"] is None and "textual" in sys.modules:
        result["textual"] = name
print(json.dumps(result))
"""


def core_modules() -> list[str]:
    """Discovered from the files, so a new module is covered without editing this test."""
    names = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if "tui" in parts[1:] or name in NOT_CORE:  # tui/ and every tui/features/<name>/
            continue
        names.append(name)
    return names


def test_core_modules_are_discovered() -> None:
    names = core_modules()
    expected_names = ("qwenmem_tui.config", "qwenmem_tui.llm.client", "qwenmem_tui.testing.fake_openai")
    for expected in expected_names:
        assert expected in names
    assert not any(name.startswith("qwenmem_tui.tui") for name in names)


def test_core_imports_without_textual() -> None:
    names = core_modules()
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["failed"] == {}
    assert result["textual"] is None, f"{result['textual']} imports textual"
