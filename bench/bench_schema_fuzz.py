"""The long schemathesis run against `qwenmem serve` (issue 41): every route of the
daemon and its proxy from the OpenAPI document it serves, positive and negative cases,
the coverage phase and stateful sequences, over 2,000 requests.

Prints requests sent, statuses, failed checks and tracebacks found in the daemon's
output and debug log; exits 1 on any finding or on fewer than `--min-requests`. The
short form runs in `make test` (tests/reliability/test_schema_fuzz.py).

    .venv/bin/python bench/bench_schema_fuzz.py [--examples 120] [--seed 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from schema_fuzz import run_fuzz  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=120, help="max examples per operation")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-requests", type=int, default=2000)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qwenmem-schema-fuzz-") as workdir:
        report = run_fuzz(Path(workdir), max_examples=args.examples, seed=args.seed)
    seconds = time.perf_counter() - started
    statuses = ", ".join(f"{status}: {n}" for status, n in sorted(report.statuses.items()))
    print("| requests | 5xx | failed checks | tracebacks | wall time |\n|---:|---:|---:|---:|---:|")
    print(f"| {report.requests} | {report.server_errors} | {len(report.failures)} "
          f"| {len(report.tracebacks)} | {seconds:.0f} s |")
    print(f"statuses: {statuses}")
    for failure in report.failures[:20]:
        print(f"  failed: {failure}")
    clean = not (report.failures or report.tracebacks or report.server_errors or report.exit_code)
    if not clean:
        print(report.output)
    return 0 if clean and report.requests >= args.min_requests else 1


if __name__ == "__main__":
    sys.exit(main())
