"""The CPU of qwenmem's launch up to its first frame, in instructions, by part.

Wall and CPU seconds swing with the machine's load (this one is shared by several
sessions on 2 cores); the instructions a program runs do not: `valgrind --tool=callgrind`
counts them the same to ~0.2 % whatever else runs. Each probe is a fresh interpreter under
callgrind, each a superset of the one before, so their differences are the parts:

- Python alone;
- + Textual's import (what `textual.app`, its widgets and screens load);
- + pydantic's import (the names the config imports);
- + qwenmem's config and the features' settings sections (their pydantic models);
- + the CLI and the TUI's modules (everything the first frame imports);
- the whole launch: a bare `qwenmem` (config loaded, app built) until its chat screen
  is up, headless at 120x40 (the startup worker replaced by the exit, as in
  tests/unit/test_launch_imports.py).

`--baseline DIR` counts another checkout's whole launch beside this one's. Needs
valgrind; each probe takes ~10-25 s under it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

FIRST_FRAME = """
from qwenmem_tui import cli
from qwenmem_tui.tui import app as app_module

async def first_frame(self):
    self.exit()

run = app_module.QwenmemApp.run
app_module.QwenmemApp.run = lambda self: run(self, headless=True, size=(120, 40))
app_module.QwenmemApp._start = first_frame
cli.run([])
"""

TEXTUAL = "import textual.app, textual.widgets, textual.screen\n"
PYDANTIC = TEXTUAL + (
    "from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, "
    "ValidationError, create_model, field_validator\n"
)
CONFIG = PYDANTIC + "import qwenmem_tui.config\nfrom qwenmem_tui.features import registry\n"
MODULES = CONFIG + "import qwenmem_tui.cli, qwenmem_tui.tui.app\n"

PARTS = (
    ("Python alone", "pass\n"),
    ("+ Textual's import", TEXTUAL),
    ("+ pydantic's import", PYDANTIC),
    ("+ the config's and the sections' models", CONFIG),
    ("+ the CLI's and the TUI's modules", MODULES),
    ("the whole launch to the first frame (+ the config read, the app, its first frame)", FIRST_FRAME),
)


def instructions(checkout: Path, source: str, home: Path) -> int:
    """Instructions a fresh interpreter runs for `source` with `checkout`'s qwenmem."""
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout),
        "QWENMEM_HOME": str(home),
        "QWENMEM_BASE_URL": "http://127.0.0.1:9/v1",  # never reached: the probe exits first
        "QWENMEM_API_KEY": "sk-bench",
        "QWENMEM_MODEL": "bench-model",
        "QWENMEM_DEBUG_LOG_FILE": "0",
        "TERM": "xterm-256color",
    }
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    # Bytecode is cached as in any install (the first, unmeasured run writes it).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", source],
        env=env, cwd=home, capture_output=True, text=True, timeout=600,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"the probe failed:\n{done.stderr[-2000:]}")
    return int(found[1])


def median_of(checkout: Path, source: str, home: Path, runs: int) -> float:
    return statistics.median(instructions(checkout, source, home) for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs per probe (median)")
    parser.add_argument("--baseline", type=Path, help="another qwenmem checkout, to compare")
    parser.add_argument("--no-parts", action="store_true", help="the whole launch only")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("skipped: valgrind is not installed (apt-get install valgrind)")
        return
    checkout = HERE.parent
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        home = Path(tmp)
        (home / "config.toml").write_text('[memory]\nembedding = "auto"\n')
        for tree in (checkout, args.baseline):
            if tree is not None:  # bytecode written, the home made private
                subprocess.run([sys.executable, "-c", FIRST_FRAME], env={
                    **os.environ, "PYTHONPATH": str(tree), "QWENMEM_HOME": str(home),
                    "QWENMEM_BASE_URL": "http://127.0.0.1:9/v1", "QWENMEM_DEBUG_LOG_FILE": "0",
                }, cwd=home, capture_output=True, timeout=300)
        rows: list[tuple[str, str]] = []
        before = 0.0
        parts = PARTS[-1:] if args.no_parts else PARTS
        for label, source in parts:
            count = median_of(checkout, source, home, args.runs)
            step = "" if label.startswith("Python") or args.no_parts else f" (+{(count - before) / 1e6:,.0f} M)"
            rows.append((label, f"{count / 1e6:,.0f} M{step}"))
            before = count
        if args.baseline is not None:
            base = median_of(args.baseline, FIRST_FRAME, home, args.runs)
            rows.append(("the whole launch, the baseline", f"{base / 1e6:,.0f} M: this one {count / base:.3f}x"))
    print("| instructions to the first frame | count |\n|---|---|")
    for label, value in rows:
        print(f"| {label} | {value} |")
    print(f"\n(callgrind, median of {args.runs} run(s) each)")


if __name__ == "__main__":
    main()
