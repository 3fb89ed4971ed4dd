"""Secrets: the API key and the daemon token never reach the database file, the debug
log, the screen or an error message — even when a provider echoes them back — and a
config file that exposes the key to other users gets a one-line warning.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from app_support import send, settle, started

from qwenmem_tui import cli
from qwenmem_tui.config import Settings
from qwenmem_tui.memory.backup import import_lines
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, RawResponse, Reply
from qwenmem_tui.tui.app import create_app
from qwenmem_tui.memory.model import RememberRequest, WriteRequest

from .conftest import SIZE, child_env, serve_url

API_KEY = "sk-test-qwenmem-0000"  # tests/conftest.py writes it to the home's config
DAEMON_TOKEN = "daemon-secret-token-7c41a9e2"


def files_under(home: Path) -> dict[str, bytes]:
    """Every file in the home, bytes (the database with its WAL, indexes, debug logs)."""
    return {str(p.relative_to(home)): p.read_bytes() for p in home.rglob("*") if p.is_file()}


def assert_nowhere(secret: str, home: Path) -> None:
    needle = secret.encode()
    leaks = [name for name, data in files_under(home).items() if needle in data and name != "config.toml"]
    assert leaks == [], leaks


async def test_api_key_stays_out_of_db_log_screen_and_errors(
    fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path, home: Path
) -> None:
    fake.api_key = API_KEY  # the fake checks the bearer key like a real provider
    settings.memory.extraction = False
    app = create_app(settings, paths, cwd=project)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)  # the session opens behind the drawn prompt

        async def say(text: str) -> None:
            await send(pilot, text)
            await settle(pilot)

        fake.script(Reply("fine"))
        await say("a normal question")
        # Providers that echo the key back in errors, in every shape.
        fake.script(HTTPError(401, {"error": {"message": f"Incorrect API key provided: {API_KEY}"}}))
        await say("second")
        fake.script(HTTPError(500, f"upstream said: bad key {API_KEY}"))
        await say("third")
        fake.script(RawResponse(body=json.dumps({"error": {"message": f"key {API_KEY} revoked"}}).encode(),
                                content_type="application/json"))
        await say("fourth")
        fake.script(RawResponse(body=f'data: {{"error": {{"message": "bad {API_KEY}"}}}}\n\n'.encode()))
        await say("fifth")
        await say("/memory")
        screen = app.export_screenshot()
        errors = [i.content for i in app.session.items if i.type == "error"]
    assert len(errors) == 4, errors
    assert all(API_KEY not in e for e in errors)
    assert API_KEY not in screen
    assert all(r.headers.get("authorization") == f"Bearer {API_KEY}" for r in fake.requests)
    assert (paths.debug_dir / "latest.txt").exists()
    assert_nowhere(API_KEY, home)


def test_daemon_token_and_key_stay_out_of_responses_db_and_log(
    fake: FakeOpenAI, home: Path, project: Path
) -> None:
    """The real `qwenmem serve`, token from the environment, its debug log on."""
    fake.responder = lambda body: Reply("served")
    env = child_env(home, QWENMEM_SERVER_TOKEN=DAEMON_TOKEN)
    proc = subprocess.Popen(
        [sys.executable, "-m", "qwenmem_tui", "serve", "--port", "0"],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        base = serve_url(proc)  # printed once the socket listens
        good = {"Authorization": f"Bearer {DAEMON_TOKEN}"}
        with httpx.Client(base_url=base, timeout=30) as client:
            responses = [
                client.get("/sessions"),
                client.get("/sessions", headers={"Authorization": f"Bearer {DAEMON_TOKEN[:-1]}"}),
                client.get("/sessions", headers={"Authorization": f"Basic {DAEMON_TOKEN}"}),
                client.get("/nope", headers=good),
            ]
            sid = client.post("/session", json={"title": "t"}, headers=good).json()["sessionId"]
            responses.append(client.post(f"/session/{sid}/prompt", json={"text": "hello"}, headers=good))
            # Keyed on the prompt, not queued: the first turn's background memory
            # extraction may ask the model in between and would take a queued error.
            fake.responder = lambda body: (
                HTTPError(401, {"error": {"message": f"bad key {API_KEY}"}})
                if "again" in json.dumps(body["messages"][-1])
                else Reply("served")
            )
            responses.append(client.post(f"/session/{sid}/prompt", json={"text": "again"}, headers=good))
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=20)
    assert [r.status_code for r in responses] == [401, 401, 401, 404, 200, 502]
    for response in responses:
        assert DAEMON_TOKEN not in response.text and API_KEY not in response.text
    assert DAEMON_TOKEN not in stderr and API_KEY not in stderr
    assert (home / "debug" / "daemon.txt").exists()
    assert_nowhere(DAEMON_TOKEN, home)
    assert_nowhere(API_KEY, home)


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def qwenmem(project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """`qwenmem(*args)`: the real CLI entry in this process (the home fixture set the env)."""
    monkeypatch.chdir(project)

    def run(*args: str) -> Ran:
        code = cli.run(list(args))
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)

    return run


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604], ids=["644", "640", "604"])
def test_config_readable_by_others_gets_one_warning_line(home: Path, qwenmem, mode: int) -> None:  # type: ignore[no-untyped-def]
    config = home / "config.toml"
    config.chmod(mode)
    done = qwenmem("sessions", "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == []
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "warning" in lines[0] and str(config) in lines[0] and "chmod 600" in lines[0]
    assert API_KEY not in done.stderr


def test_private_config_or_no_key_gets_no_warning(home: Path, qwenmem) -> None:  # type: ignore[no-untyped-def]
    config = home / "config.toml"
    config.chmod(0o600)
    assert qwenmem("sessions").stderr == ""
    config.write_text('[llm]\napi_key_env = "SOME_VAR"\nmodel = "m"\n')
    config.chmod(0o644)  # readable, but holds no key
    assert qwenmem("sessions").stderr == ""


@pytest.mark.parametrize("value", ["123456789012345", "true", "[\"sk-abcdefghijklmnop\"]"])
def test_config_errors_never_echo_a_key_value(home: Path, qwenmem, value: str) -> None:  # type: ignore[no-untyped-def]
    (home / "config.toml").write_text(f"[llm]\napi_key = {value}\n")
    done = qwenmem("sessions")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "llm.api_key" in done.stderr
    assert value.strip('[]"') not in done.stderr


# --- secrets everywhere the user's words go (issue 25 item 4) ---------------------------

TITLE_SECRET = "ghp_R2d4F6h8J0k2L4m6N8p0Q2r4S6t8V0w2X4y6"


def test_prose_forms_are_cut_and_look_alikes_left_alone(capsys: pytest.CaptureFixture[str]) -> None:
    from trust_corpus import SECRET_LOOKALIKES, SECRETS

    from qwenmem_tui import secrets

    caught = [f for f in SECRETS if f.secret not in secrets.redact(f.text)]
    untouched = [t for t in SECRET_LOOKALIKES if secrets.redact(t) == t]
    with capsys.disabled():
        print(
            f"\nsecret formats caught: {len(caught)}/{len(SECRETS)}; "
            f"look-alikes left alone: {len(untouched)}/{len(SECRET_LOOKALIKES)}"
        )
    assert len(caught) == len(SECRETS), [f.name for f in SECRETS if f not in caught]
    assert untouched == SECRET_LOOKALIKES


async def test_memory_writes_of_every_form_keep_no_secret_and_stats_count_them(
    settings: Settings, paths: Paths
) -> None:
    from trust_corpus import SECRET_LOOKALIKES, SECRETS

    from qwenmem_tui.memory.service import MemoryService
    from qwenmem_tui.memory.writer import MemoryRejected

    settings.memory.embedding = "hash"
    service = await MemoryService.open(settings, paths)
    refused = 0
    try:
        for fmt in SECRETS:
            try:
                await service.remember(RememberRequest(fmt.text, project="/p"))
            except MemoryRejected as exc:
                assert "holds a secret" in str(exc)
                refused += 1
        # Secrets in keys, by import and by a model write (extraction's route).
        for key in ("db_password_tr0ub4dor3", "db_password_hunter2hunter"):
            report = await import_lines(service, [json.dumps({"category": "project", "key": key, "value": "the db"})], project="/p", trusted=True)
            assert report.counts == {"rejected": 1} and "not hold a secret" in report.errors[0]
            with pytest.raises(MemoryRejected):
                await service.save(
                    WriteRequest("project", key, "db settings", origin="agent", project="/p")
                )
        for text in SECRET_LOOKALIKES:
            await service.save(WriteRequest("project", "note", text, origin="user", project="/p"))
        rows = await service.list(statuses=None)
        stats = await service.stats()
    finally:
        await service.close()
    stored = "\n".join(f"{m.key} {m.value}" for m in rows)
    assert [f.name for f in SECRETS if f.secret in stored] == []
    assert "tr0ub4dor3" not in stored and "hunter2hunter" not in stored
    assert {t for t in SECRET_LOOKALIKES} <= {m.value for m in rows}  # stored as written
    assert stats.secrets_refused == refused + 4
    assert stats.secrets_redacted == len(SECRETS) - refused
    assert stats.to_json()["secret_write_rate"] > 0 and "secrets caught" in stats.to_text()


def test_session_titles_and_listings_never_show_a_secret(
    fake: FakeOpenAI, home: Path, project: Path, qwenmem  # type: ignore[no-untyped-def]
) -> None:
    """The first message titles the session: `qwenmem sessions` and `GET /sessions`."""
    fake.responder = lambda body: Reply("done")
    proc = subprocess.Popen(
        [sys.executable, "-m", "qwenmem_tui", "serve", "--port", "0"],
        cwd=project, env=child_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        base = serve_url(proc)
        with httpx.Client(base_url=base, timeout=30) as client:
            named = client.post("/session", json={"title": f"use token {TITLE_SECRET} here"}).json()["sessionId"]
            untitled = client.post("/session", json={}).json()["sessionId"]
            assert client.post(f"/session/{untitled}/prompt", json={"text": f"deploy with token {TITLE_SECRET}"}).status_code == 200
            listed = client.get("/sessions").text
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
    assert TITLE_SECRET not in listed
    titles = {s["sessionId"]: s["title"] for s in json.loads(listed)["sessions"]}
    assert titles[named] == "use token [REDACTED] here"
    assert titles[untitled] == "deploy with token [REDACTED]"
    for args in (("sessions",), ("sessions", "--json")):
        done = qwenmem(*args)
        assert done.returncode == 0 and TITLE_SECRET not in done.stdout and "deploy with token [REDACTED]" in done.stdout
