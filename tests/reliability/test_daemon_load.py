"""Issue 41, short form (bench/bench_daemon_load.py: 50 clients for 60 s, 20 kills):
concurrent clients get only 2xx answers, and a daemon killed with SIGKILL while
clients stream loses no committed message and starts clean again."""

from __future__ import annotations

from pathlib import Path

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

from .daemon_load import kill_cycles, load, summary
from .schema_fuzz import served_daemon, write_home


async def test_concurrent_clients_get_only_successful_answers(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    with FakeOpenAI() as fake:
        fake.responder = lambda body: Reply("The build runs with make all.", chunk_size=6)
        write_home(home, fake.base_url)
        with served_daemon(home, project) as (url, _):
            report = await load(url, clients=6, rounds=2)
    assert report.errors == [], report.errors[:5]
    assert report.requests == 6 * 2 * 4, summary(report)


async def test_kill_9_mid_stream_loses_no_committed_message(tmp_path: Path) -> None:
    report = await kill_cycles(tmp_path, kills=2, clients=3)
    assert report.kills == 2 and report.committed > 0
    assert report.lost == [], report.lost[:5]
    assert report.unclean_starts == [], report.unclean_starts[:2]
