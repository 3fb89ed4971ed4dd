"""Facts know their time (issue 35 item 4) and an import's claims are claims (issue 36
item 6, issue 38 item 6), through the `qwenmem` commands in temp homes: in this
process through the console script's own entry (`cli_run`), with the real process
checked once for `memory history` and `memory search --as-of`.

Variants tried: a fact restated under its key and under another key (identity's link),
a restore; history by id and by key, as text and JSON; --as-of before, between and
after the versions, with a date and a date-time; export -> import --trust into a fresh
home and the history compared version by version; untrusted lines claiming another
project's scope (as a path and as a backup row), a 36,000-day expiry, origin user,
a superseded status; a line without category and key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import pytest
from cli_support import CliResult, CliRunner
from process_support import checkout_env

from qwenmem_tui.memory.model import DAY, DEFAULT_TTL_CAP_DAYS

OTHER = "/work/some-other-project"


class Qwenmem(Protocol):
    def __call__(self, *args: str, home: Path, cwd: Path, stdin: str | None = None) -> CliResult: ...


@pytest.fixture
def qwenmem(cli_run: CliRunner) -> Qwenmem:
    """`qwenmem(*args, home=, cwd=)`: the command in this process (`cli_run`)."""

    def run(*args: str, home: Path, cwd: Path, stdin: str | None = None) -> CliResult:
        return cli_run(*args, home=home, cwd=cwd, stdin=stdin, env={"QWENMEM_DEBUG_LOG_FILE": "0"})

    return run


def real_qwenmem(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command as a real process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "qwenmem_tui", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env=checkout_env(
            {
                "QWENMEM_HOME": str(home),
                "QWENMEM_DEBUG_LOG_FILE": "0",
                "PATH": os.environ.get("PATH", ""),
            }
        ),
    )


def make_home(path: Path) -> Path:
    path.mkdir(mode=0o700)
    (path / "config.toml").write_text('[memory]\nembedding = "hash"\n')
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    return root


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def import_(qwenmem: Qwenmem, home: Path, project: Path, tmp_path: Path, rows: list[dict[str, Any]], *more: str) -> CliResult:
    source = tmp_path / f"in-{time.monotonic_ns()}.jsonl"
    source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return qwenmem("memory", "import", *more, str(source), home=home, cwd=project)


def history(qwenmem: Qwenmem, home: Path, project: Path, which: str) -> list[dict[str, Any]]:
    ran = qwenmem("memory", "history", which, "--json", home=home, cwd=project)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def build_a_timeline(qwenmem: Qwenmem, home: Path, project: Path, tmp_path: Path) -> None:
    """São Paulo (2024-01-10) -> Lisbon (2025-03-01) -> Berlin (2026-02-01), each said
    on its own date; then the person restores Lisbon."""
    cities = [("I live in São Paulo", "2024-01-10"), ("I live in Lisbon", "2025-03-01T09:30:00Z"),
              ("I live in Berlin", "2026-02-01")]  # fmt: skip
    for value, said in cities:
        ran = import_(qwenmem, home, project, tmp_path,
                      [{"category": "user", "key": "home_city", "value": value, "stated_at": said}],
                      "--trust")  # fmt: skip
        assert ran.returncode == 0, ran.stderr
    lisbon = history(qwenmem, home, project, "home_city")[1]["id"]
    assert qwenmem("memory", "restore", str(lisbon), home=home, cwd=project).returncode == 0


def test_history_and_as_of_tell_what_was_true_when(qwenmem: Qwenmem, tmp_path: Path, project: Path) -> None:
    home = make_home(tmp_path / "home")
    build_a_timeline(qwenmem, home, project, tmp_path)
    versions = history(qwenmem, home, project, "home_city")
    assert [v["value"] for v in versions] == ["I live in São Paulo", "I live in Lisbon", "I live in Berlin"]
    sao, lisbon, berlin = versions
    assert sao["stated_at"] == at("2024-01-10") and lisbon["stated_at"] == at("2025-03-01T09:30:00")
    # Each held until the next was said; the restore made Lisbon current again.
    assert sao["valid_until"] == lisbon["stated_at"] and sao["replaced_by"] == lisbon["id"]
    assert lisbon["status"] == "active" and lisbon["valid_until"] is None
    assert berlin["status"] == "superseded" and berlin["replaced_by"] == lisbon["id"]
    assert sao["decided_by"] == "user" and f"superseded by #{lisbon['id']}" in sao["why"]
    assert berlin["decided_by"] == "user" and "restored" in berlin["why"]
    assert [e["action"] for e in lisbon["events"]][-1] == "restore"
    # By id: any version names the whole fact; and so says the real process.
    assert history(qwenmem, home, project, str(berlin["id"])) == versions
    real = real_qwenmem("memory", "history", str(berlin["id"]), "--json", home=home, cwd=project)
    assert real.returncode == 0 and json.loads(real.stdout) == versions, real.stderr
    text = qwenmem("memory", "history", "home_city", home=home, cwd=project)
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert lines[0].startswith("2024-01-10 → 2025-03-01") and "I live in São Paulo" in lines[0]
    assert f"replaced by #{lisbon['id']} (decided by user)" in lines[1]
    missing = qwenmem("memory", "history", "no_such_key", home=home, cwd=project)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1

    def as_of(date: str) -> list[str]:
        ran = qwenmem("memory", "search", "where do I live", "--as-of", date, "--json",
                      home=home, cwd=project)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        return [m["value"] for m in json.loads(ran.stdout)]

    assert as_of("2023-12-31") == []
    assert as_of("2024-06-01") == ["I live in São Paulo"]
    assert as_of("2025-03-01T09:00:00Z") == ["I live in São Paulo"]
    assert as_of("2025-03-01") == ["I live in Lisbon"]  # a date means all of that day
    real = real_qwenmem("memory", "search", "where do I live", "--as-of", "2025-03-01", "--json",
                        home=home, cwd=project)  # fmt: skip
    assert real.returncode == 0 and [m["value"] for m in json.loads(real.stdout)] == ["I live in Lisbon"], real.stderr
    assert as_of("2026-03-01") == ["I live in Berlin"]
    now = qwenmem("memory", "search", "where do I live", "--json", home=home, cwd=project)
    assert [m["value"] for m in json.loads(now.stdout)] == ["I live in Lisbon"]
    bad = qwenmem("memory", "search", "x", "--as-of", "last tuesday", home=home, cwd=project)
    assert bad.returncode == 2 and "ISO 8601" in bad.stderr and bad.stderr.count("\n") == 1


def comparable(versions: list[dict[str, Any]], before: float) -> list[tuple[Any, ...]]:
    """A history with its ids replaced by their place in it (a fresh home numbers rows
    anew) and without what the import itself added to the trail (after ``before``)."""
    place = {v["id"]: str(n) for n, v in enumerate(versions)}

    def renumbered(text: str) -> str:
        for memory_id, n in place.items():
            text = text.replace(f"#{memory_id}", f"#v{n}")
        return text

    return [
        (v["category"], v["key"], v["value"], v["status"], v["scope"], v["origin"], v["stated_at"],
         v["valid_until"], place.get(v["replaced_by"]), v["decided_by"], renumbered(v["why"]),
         [(e["action"], e["origin"], e["at"], renumbered(e["reason"])) for e in v["events"] if e["at"] < before])
        for v in versions
    ]  # fmt: skip


def test_export_then_import_keeps_the_history_exactly(qwenmem: Qwenmem, tmp_path: Path, project: Path) -> None:
    home = make_home(tmp_path / "home")
    build_a_timeline(qwenmem, home, project, tmp_path)
    backup = tmp_path / "backup.jsonl"
    assert qwenmem("memory", "export", str(backup), home=home, cwd=project).returncode == 0
    fresh = make_home(tmp_path / "fresh")
    # Another fact first, so the fresh home's ids differ from the backup's.
    assert import_(qwenmem, fresh, project, tmp_path, [{"category": "project", "key": "ci", "value": "CI on Buildkite"}]).returncode == 0
    before = time.time()
    ran = qwenmem("memory", "import", "--trust", str(backup), home=fresh, cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert "imported 1 " in ran.stdout and "history restored 2;" in ran.stdout
    original = history(qwenmem, home, project, "home_city")
    restored = history(qwenmem, fresh, project, "home_city")
    assert [v["id"] for v in restored] != [v["id"] for v in original]
    assert comparable(restored, before) == comparable(original, before)
    # Importing the backup again adds no version twice.
    again = qwenmem("memory", "import", "--trust", str(backup), home=fresh, cwd=project)
    assert "history restored 0;" in again.stdout and "skipped 2;" in again.stdout
    assert len(history(qwenmem, fresh, project, "home_city")) == 3
    # Without --trust a backup's history is a claim: not restored.
    other = make_home(tmp_path / "other")
    untrusted = qwenmem("memory", "import", str(backup), home=other, cwd=project)
    assert "history restored 0;" in untrusted.stdout and "skipped 2;" in untrusted.stdout


def test_untrusted_lines_are_claims_and_the_dry_run_says_what_the_run_does(
    qwenmem: Qwenmem, tmp_path: Path, project: Path
) -> None:
    home = make_home(tmp_path / "home")
    now = time.time()
    rows = [
        # a hand-written "backup" planting facts in another project, for a century
        {"id": 7, "status": "active", "category": "project", "key": "deploy_target",
         "value": "Deploys go to the blue cluster", "scope": OTHER, "origin": "user",
         "created_at": now - 60, "expires_at": now + 36_000 * DAY, "ttl_days": 36_000},
        {"category": "reference", "key": "docs", "value": "The API docs are in docs/api.md",
         "scope": OTHER, "origin": "user", "ttl_days": 36_000},
        {"id": 9, "status": "superseded", "category": "project", "key": "old", "value": "x", "scope": OTHER},
        # no category, no key: filed as /remember files it
        {"value": "This project deploys to fly.io"},
        {"category": "nope", "key": "k", "value": "v"},
    ]  # fmt: skip
    dry = import_(qwenmem, home, project, tmp_path, rows, "--dry-run")
    real = import_(qwenmem, home, project, tmp_path, rows)
    assert real.returncode == dry.returncode == 1  # line 5 was rejected
    summary = real.stdout.splitlines()[0]
    assert summary.startswith("imported 3 (") and "skipped 1; rejected 1" in summary
    assert f"dry run, nothing written: {summary}" in dry.stdout.splitlines()
    listed = {m["key"]: m for m in json.loads(qwenmem("memory", "list", "--json", home=home, cwd=project).stdout)}
    here = str(project.resolve())
    assert {m["scope"] for m in listed.values()} == {here}
    assert all(m["origin"] != "user" for m in listed.values())
    cap = DEFAULT_TTL_CAP_DAYS * DAY
    assert all(m["expires_at"] <= time.time() + cap for m in listed.values())
    filed = qwenmem("memory", "add", "--json", "This project deploys to fly.io", home=make_home(tmp_path / "h2"), cwd=project)
    by_remember = json.loads(filed.stdout)
    assert (listed_row := [m for m in listed.values() if m["value"] == "This project deploys to fly.io"])
    assert (listed_row[0]["category"], listed_row[0]["key"]) == (by_remember["category"], by_remember["key"])
    # The dry run named, line by line, what the run then did.
    outcomes = [line for line in dry.stdout.splitlines() if line.startswith("line ")]
    assert len(outcomes) == 5
    for line in outcomes[:2] + outcomes[3:4]:
        assert "(this project, origin tool)" in line, line
    listing = qwenmem("memory", "list", home=home, cwd=project).stdout
    assert "(user)" not in listing and "(tool)" in listing
