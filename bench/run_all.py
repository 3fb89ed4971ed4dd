"""Run every benchmark (`make bench`), each in its own process, and print their tables.

Own processes because several benchmarks report RSS, which one shared interpreter
would blur. `--only NAME` (repeatable) runs a subset; run a `bench_*.py` directly
for its own options.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = (
    "pty", "launch_instructions", "memory", "recall", "prefetch", "compaction", "postgres", "daemon", "proxy", "mcp",
    "schema_fuzz", "protocol_fuzz", "soak", "daemon_load", "acp", "faces", "scale", "pg_scale", "abstain", "warm",
    "locomo", "import", "crosslang", "identity", "filing",
)
# Benchmarks with a smaller size for CI-sized machines (`--quick`): the full
# bench_pg_scale builds a million rows (~30 min on 2 cores).
QUICK = ("scale", "pg_scale", "import")
# Benchmarks that run another checkout beside this one (`--baseline DIR`, alternated in
# the same run) and that take a median over `--runs N`: so one `make bench` can carry
# the build before and enough runs for a percentile.
BASELINE = ("pty", "launch_instructions", "faces", "pg_scale", "import")
RUNS = ("pty", "launch_instructions", "faces", "scale", "import")
HELD_OUT = {
    "crosslang": ["--corpora", "heldout", "--debias", "on"],
    "identity": ["--corpus", str(HERE / "identity_heldout.jsonl"), "--no-import"],
    "filing": ["--split", "held"],
}
"""The figures issues 35 and 39 set goals on are their held-out sets' (never tuned on);
run a benchmark directly for its tuning sets."""
LOCOMO_ENV = "QWENMEM_LOCOMO_DIR"
"""bench_locomo reads LoCoMo's conversations from this directory (not in the repository:
CC BY-NC); without it that benchmark is skipped."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=BENCHMARKS, help="run just these")
    parser.add_argument("--quick", action="store_true", help=f"the small sizes of {', '.join(QUICK)}")
    parser.add_argument("--baseline", metavar="DIR", help=f"the build before, beside us in {', '.join(BASELINE)}")
    parser.add_argument("--runs", type=int, help=f"runs per figure in {', '.join(RUNS)} (each its own default)")
    args = parser.parse_args(argv)
    selected = args.only or list(BENCHMARKS)
    failed: list[str] = []
    summary: list[tuple[str, float, int]] = []
    for name in selected:
        script = HERE / f"bench_{name}.py"
        print(f"\n=== bench_{name} ===", flush=True)
        extra: list[str] = list(HELD_OUT.get(name, []))
        if name == "locomo":
            if not os.environ.get(LOCOMO_ENV):
                print(f"skipped: set {LOCOMO_ENV} to the directory of LoCoMo's conversation files")
                continue
            extra = [os.environ[LOCOMO_ENV]]
        if args.quick and name in QUICK:
            extra.append("--quick")
        if args.baseline and name in BASELINE:
            extra += ["--baseline", args.baseline]
        if args.runs and name in RUNS:
            extra += ["--runs", str(args.runs)]
        started = time.perf_counter()
        code = subprocess.call([sys.executable, str(script), *extra])
        summary.append((name, time.perf_counter() - started, code))
        if code != 0:
            failed.append(name)
    print("\n| benchmark | wall time | exit |\n|---|---:|---:|")
    for name, seconds, code in summary:
        print(f"| bench_{name} | {seconds:.1f} s | {code} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
