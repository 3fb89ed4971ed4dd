"""How a child process ended, in the words a user reads (the local model, MCP servers).

A child killed by a signal is a crash, not "it stopped": the line names the signal and
what it usually means, so a user can tell a segfault from an out-of-memory kill.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping

SIGNAL_WORDS: Mapping[int, str] = {
    signal.SIGILL: "illegal instruction",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGBUS: "bus error",
    signal.SIGFPE: "arithmetic fault",
    signal.SIGABRT: "aborted",
    signal.SIGKILL: "killed (out of memory, or by another process)",
    signal.SIGTERM: "terminated by another process",
}


def exit_status(code: int, words: Mapping[int, str] = SIGNAL_WORDS) -> str:
    """`code` (a returncode: negative is the signal) as "stopped (exit code N)" or
    "crashed (SIGSEGV: segmentation fault)"; `words` may say more for one child."""
    if code >= 0:
        return f"stopped (exit code {code})"
    number = -code
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    said = words.get(number)
    return f"crashed ({name}: {said})" if said else f"crashed ({name})"
