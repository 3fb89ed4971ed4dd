"""How many messages the protocol fuzzers (MCP, ACP) generate.

The suite runs them short and fixed (the same draws every run); bench/bench_protocol_fuzz.py
sets QWENMEM_FUZZ_EXAMPLES to run them long, with fresh draws each run.
"""

from __future__ import annotations

import os

FUZZ_EXAMPLES_ENV = "QWENMEM_FUZZ_EXAMPLES"


def fuzz_examples(default: int) -> tuple[int, bool]:
    """(examples, derandomize): the suite's `default` with fixed draws, unless
    FUZZ_EXAMPLES_ENV asks for a long run with new ones."""
    value = os.environ.get(FUZZ_EXAMPLES_ENV)
    return (int(value), False) if value else (default, True)
