"""The MCP server and the ACP agent fuzzed long (issue 41): the suite's own fuzzers
(tests/reliability/test_mcp_fuzz.py, tests/e2e/test_acp_fuzz.py: messages from the
protocols' schemas plus raw damage: lines cut short, bytes that are not UTF-8, lone
surrogates, huge ids, unknown methods) at `--examples` messages each, with fresh
random draws, `--runs` times. Every request must be answered, the server never exit,
nothing be written for a rejected request; exits 1 on any failed run.

    .venv/bin/python bench/bench_protocol_fuzz.py [--examples 500] [--runs 4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fuzz_support import FUZZ_EXAMPLES_ENV  # noqa: E402

FUZZERS = {
    "MCP": "tests/reliability/test_mcp_fuzz.py::test_every_request_is_answered_and_nothing_rejected_is_written",
    "ACP": "tests/e2e/test_acp_fuzz.py::test_every_message_is_answered_and_the_agent_lives_on",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500, help="generated messages per run and protocol")
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args(argv)
    env = {**os.environ, FUZZ_EXAMPLES_ENV: str(args.examples), "PYTHONPATH": str(REPO)}
    print("| protocol | run | messages | result | wall time |\n|---|---:|---:|---|---:|", flush=True)
    failed = 0
    for run in range(1, args.runs + 1):
        for name, test in FUZZERS.items():
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", test],
                cwd=REPO, env=env, capture_output=True, text=True,
            )
            ok = done.returncode == 0
            failed += not ok
            print(f"| {name} | {run} | {args.examples} | {'ok' if ok else 'FAILED'} "
                  f"| {time.perf_counter() - started:.0f} s |", flush=True)
            if not ok:
                print(done.stdout[-4000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
