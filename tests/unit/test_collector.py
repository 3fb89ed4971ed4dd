"""The collector settles once startup is done: what startup built is frozen out of
every later collection, and full collections are rarer. Run in a child process: a
frozen object is never collected, which a test worker must not live with."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

from process_support import checkout_env

SCRIPT = """
import gc, json
before = gc.get_freeze_count()
from qwenmem_tui import collector
collector.settle_after_startup()
print(json.dumps([before, gc.get_freeze_count(), list(gc.get_threshold())]))
"""


def test_settling_freezes_what_startup_built_and_makes_full_collections_rarer() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=checkout_env(os.environ),
        check=True,
    )
    before, after, threshold = json.loads(done.stdout)
    assert before == 0 and after > 1000  # the interpreter's and our modules' objects
    young, middle, full = threshold
    assert (young, middle) == gc.get_threshold()[:2]
    assert full == 100
