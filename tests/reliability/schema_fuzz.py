"""Fuzz `qwenmem serve` from its own OpenAPI document with schemathesis.

A real daemon (a child process on a free loopback port, its model the loopback
FakeOpenAI) and schemathesis' own CLI pointed at `/openapi.json`: every route, positive
and negative cases, and stateful sequences (create a session, prompt it, read its
messages, delete it) that schemathesis links from the document. The run is seeded and
bounded in examples and time; the test (short) and `make bench` (long) read the same
report: requests sent, failed checks, and tracebacks in the daemon's output and log.

Used by tests/reliability/test_schema_fuzz.py and bench/bench_schema_fuzz.py.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

TOKEN = "schema-fuzz-token-7c1d"
API_KEY = "sk-schema-fuzz-0000"
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "negative_data_rejection",
    "use_after_free",
    "ensure_resource_availability",
)


@dataclass
class FuzzReport:
    """What one run saw."""

    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    operations: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    """(method, path template, status) of every answer."""
    created: set[str] = field(default_factory=set)
    """Session ids POST /session answered with."""
    used: set[str] = field(default_factory=set)
    """Session ids a route under /session/{session_id} answered with success."""
    failures: list[str] = field(default_factory=list)  # "check: METHOD PATH -> status"
    tracebacks: list[str] = field(default_factory=list)  # daemon lines
    exit_code: int = 0
    output: str = ""

    @property
    def chains(self) -> int:
        """Sessions created and then used (a link followed with the id the daemon gave)."""
        return len(self.created & self.used)

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


def write_home(home: Path, base_url: str) -> None:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = home / "config.toml"
    config.write_text(
        "[llm]\n"
        f'base_url = "{base_url}"\n'
        f'api_key = "{API_KEY}"\n'
        'model = "fuzz-model"\n'
        "session_titles = false\n"
        "[memory]\n"
        'embedding = "hash"\n'
        "extraction = false\n",
        encoding="utf-8",
    )
    config.chmod(0o600)


@contextmanager
def served_daemon(home: Path, project: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`qwenmem serve --port 0 --token T` in `project`; yields (URL, process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QWENMEM_")}
    env.update(QWENMEM_HOME=str(home), QWENMEM_EMBEDDING="hash", QWENMEM_SERVER_TOKEN=TOKEN)
    proc = subprocess.Popen(
        [sys.executable, "-m", "qwenmem_tui", "serve", "--port", "0"],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()  # blocks until the socket listens (or exit)
        if "listening on http://" not in line:
            raise RuntimeError(f"qwenmem serve did not start: {line}{proc.stderr.read()}")
        yield line.split("listening on ", 1)[1].split()[0], proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_fuzz(
    workdir: Path,
    *,
    max_examples: int,
    seed: int,
    max_time: float | None = None,
    phases: str = "examples,coverage,fuzzing,stateful",
    deterministic: bool = True,
    mode: str = "all",
) -> FuzzReport:
    """One schemathesis run against a fresh daemon in `workdir`: `deterministic` gives
    the same cases every run; otherwise `seed` draws them and `max_time` repeats the
    fuzzing and stateful phases until it is spent. `mode`: schemathesis' generation
    mode (positive, negative or all)."""
    home, project = workdir / "home", workdir / "project"
    (project / ".git").mkdir(parents=True, exist_ok=True)
    report_path = workdir / "events.ndjson"
    with FakeOpenAI() as fake:
        fake.responder = lambda body: Reply("fuzzed reply")
        write_home(home, fake.base_url)
        with served_daemon(home, project) as (url, proc):
            command = [
                sys.executable, "-m", "schemathesis.cli", "run", f"{url}/openapi.json",
                "--url", url, "-H", f"Authorization: Bearer {TOKEN}",
                "--mode", mode, "--phases", phases, "--checks", ",".join(CHECKS),
                "--max-examples", str(max_examples),
                "--workers", "1", "--request-timeout", "30", "--no-color",
                "--suppress-health-check", "all", "--continue-on-failure",
                "--report", "ndjson", "--report-ndjson-path", str(report_path),
                "--warnings", "off",
            ]
            if deterministic:
                command += ["--generation-deterministic"]
            else:
                command += ["--seed", str(seed), "--generation-database", "none"]
            if max_time is not None:
                command += ["--max-time", str(int(max_time))]
            run = subprocess.run(
                command, cwd=workdir, capture_output=True, text=True,
                timeout=(max_time or 600) + 300, env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
            )
            daemon_alive = proc.poll() is None
        assert proc.stderr is not None
        daemon_err = proc.stderr.read()
    report = read_events(report_path)
    report.exit_code = run.returncode
    report.output = run.stdout[-6000:] + run.stderr[-2000:]
    logs = [daemon_err, *(p.read_text(errors="replace") for p in (home / "debug").glob("*.txt"))]
    report.tracebacks = [line for text in logs for line in text.splitlines() if "Traceback" in line]
    if not daemon_alive:
        report.failures.append("the daemon exited during the run")
    return report


def read_events(path: Path) -> FuzzReport:
    """Requests, statuses and failed checks from schemathesis' NDJSON event stream:
    each finished scenario records its cases, their checks and their interactions."""
    report = FuzzReport()
    if not path.exists():
        report.failures.append("schemathesis wrote no report")
        return report
    for line in path.read_text(encoding="utf-8").splitlines():
        for payload in json.loads(line).values():
            recorder = payload.get("recorder") if isinstance(payload, dict) else None
            if recorder:
                _read_scenario(recorder, report)
    return report


def _read_scenario(recorder: dict[str, Any], report: FuzzReport) -> None:
    cases = recorder.get("cases", {})
    for case_id, interaction in recorder.get("interactions", {}).items():
        response = interaction.get("response")
        status = response["status_code"] if response else 0  # 0: no answer
        report.requests += 1
        report.statuses[status] += 1
        case = cases.get(case_id, {}).get("value", {})
        method, path = str(case.get("method")), str(case.get("path"))
        report.operations[(method, path, status)] += 1
        if (method, path, status) == ("POST", "/session", 201) and response:
            report.created.add(_created_id(response))
        session_id = (case.get("path_parameters") or {}).get("session_id")
        if session_id is not None and 200 <= status < 300:
            report.used.add(str(session_id))
    for case_id, checks in recorder.get("checks", {}).items():
        case = cases.get(case_id, {}).get("value", {})
        for check in checks:
            if check.get("status") == "failure":
                report.failures.append(f"{check['name']}: {case.get('method')} {case.get('path')} {case.get('body', '')!r:.120}")


def _created_id(response: dict[str, Any]) -> str:
    """The sessionId in a recorded 201 (schemathesis keeps the body base64-encoded)."""
    try:
        return str(json.loads(base64.b64decode(response["content"]["$base64"]))["sessionId"])
    except (ValueError, KeyError, TypeError):
        return ""


if __name__ == "__main__":  # a quick look by hand: python tests/reliability/schema_fuzz.py DIR
    import tempfile

    result = run_fuzz(Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()), max_examples=20, seed=1)
    print(result.output)
    print(result.requests, dict(result.statuses), result.failures[:20], result.tracebacks[:5])
