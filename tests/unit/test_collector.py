"""The collector settles once startup is done: what startup built is frozen out of
every later collection, and the lines a frame paints (reference cycles that live a
frame or two) die young instead of filling full collections. Run in a child process:
a frozen object is never collected, which a test worker must not live with."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from process_support import checkout_env

SCRIPT = """
import gc, json
from rich.segment import Segment
from textual.strip import Strip

def full_collections(frames):
    # Frame after frame, a screen of lines each alive until the next frame is painted;
    # a split into one part caches the strip in itself, as painting one does.
    gc.collect()
    before = gc.get_stats()[2]["collections"]
    shown = []
    for n in range(frames):
        shown = [Strip([Segment(f"line {n} {i}")]) for i in range(30)]
        for strip in shown:
            strip.divide([strip.cell_length])
    return gc.get_stats()[2]["collections"] - before

frozen_before = gc.get_freeze_count()
default = full_collections(3000)
from qwenmem_tui import collector
collector.settle_after_startup()
settled = full_collections(3000)
print(json.dumps([frozen_before, gc.get_freeze_count(), default, settled]))
"""


def test_settling_freezes_startup_and_lets_painted_lines_die_young() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=checkout_env(os.environ),
        check=True,
    )
    frozen_before, frozen_after, default, settled = json.loads(done.stdout)
    assert frozen_before == 0 and frozen_after > 1000  # the interpreter's and our modules'
    # Python's defaults run dozens of full collections for these frames; settled,
    # one at most (each also scans less: startup's objects are frozen).
    assert default >= 10 and settled * 20 <= default
