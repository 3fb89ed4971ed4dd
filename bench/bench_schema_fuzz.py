"""The long schemathesis run against `qwenmem serve` (issue 41): every route of the
daemon and its proxy from the OpenAPI document it serves, positive and negative cases,
the coverage phase and stateful sequences, seeded, repeated for `--seconds`, and run
again with the next seed until it has sent over
2,000 requests (at most five runs).

Prints requests sent, statuses, failed checks, tracebacks found in the daemon's
output and debug log, and how many sessions the stateful phase created and then used
through the document's links (create -> prompt -> messages -> delete); exits 1 on any finding or on fewer than `--min-requests`. The
short form runs in `make test` (tests/reliability/test_schema_fuzz.py).

    .venv/bin/python bench/bench_schema_fuzz.py [--examples 100] [--seed 1] [--seconds 150]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from schema_fuzz import FuzzReport, run_fuzz  # noqa: E402


def merged(runs: list[FuzzReport]) -> FuzzReport:
    total = FuzzReport()
    for run in runs:
        total.requests += run.requests
        total.statuses.update(run.statuses)
        total.operations.update(run.operations)
        total.created |= run.created
        total.used |= run.used
        total.failures += run.failures
        total.tracebacks += run.tracebacks
        total.exit_code = total.exit_code or run.exit_code
        total.output += run.output
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="max examples per operation")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=150, help="fuzzing and stateful repeat until spent")
    parser.add_argument("--min-requests", type=int, default=2000)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    runs: list[FuzzReport] = []
    # Runs with the next seed until enough requests were sent (a loaded machine sends
    # fewer in the time given); at most five, each on a fresh daemon.
    while sum(r.requests for r in runs) < args.min_requests and len(runs) < 5:
        with tempfile.TemporaryDirectory(prefix="qwenmem-schema-fuzz-") as workdir:
            runs.append(run_fuzz(
                Path(workdir), max_examples=args.examples, seed=args.seed + len(runs),
                max_time=args.seconds, deterministic=False,
            ))
    report = merged(runs)
    seconds = time.perf_counter() - started
    statuses = ", ".join(f"{status}: {n}" for status, n in sorted(report.statuses.items()))
    print("| runs | requests | 5xx | failed checks | tracebacks | wall time |\n|---:|---:|---:|---:|---:|---:|")
    print(f"| {len(runs)} | {report.requests} | {report.server_errors} | {len(report.failures)} "
          f"| {len(report.tracebacks)} | {seconds:.0f} s |")
    print(f"statuses: {statuses}")
    steps = [("POST", "/session", 201), ("POST", "/session/{session_id}/prompt", 200),
             ("GET", "/session/{session_id}/messages", 200), ("DELETE", "/session/{session_id}", 200)]
    print(f"stateful: {report.chains} sessions created and then used through the document's links; "
          + ", ".join(f"{m} {p} {s}: {report.operations[(m, p, s)]}" for m, p, s in steps))
    for failure in report.failures[:20]:
        print(f"  failed: {failure}")
    clean = not (report.failures or report.tracebacks or report.server_errors or report.exit_code)
    if not clean:
        print(report.output)
    return 0 if clean and report.requests >= args.min_requests else 1


if __name__ == "__main__":
    sys.exit(main())
