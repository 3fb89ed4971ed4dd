"""Issue 36 item 5 (contract §7): a token-less `qwenmem serve` is private to its user.

Real processes: the daemon is `qwenmem serve --port 0` without a token; the clients are
child processes — one of the same user (no configuration: plain HTTP), one dropped to
`nobody` with setuid (as another account on the machine is). Variants tried for the
other user: every kind of route (the daemon's own, a session's, the memory routes, the
OpenAI-compatible proxy, an unknown path) and every method they take; /health stays
open. The opt-out (--allow-other-users) is said at start and lets the other user in.
The /proc/net/tcp parser is tested in tests/unit/daemon/test_peer.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_daemon_serve import serve_process

NOBODY = 65534
# Plain stdlib HTTP, so the child needs nothing but the interpreter; prints
# "METHOD PATH STATUS CODE" per request.
CLIENT = r"""
import http.client, json, sys
host, port = sys.argv[1], int(sys.argv[2])
for spec in sys.argv[3:]:
    method, path = spec.split(" ", 1)
    conn = http.client.HTTPConnection(host, port, timeout=30)
    body = json.dumps({"text": "hi", "title": "t", "model": "m",
                       "messages": [{"role": "user", "content": "hi"}]})
    conn.request(method, path, body=body if method == "POST" else None,
                 headers={"Content-Type": "application/json"})
    answer = conn.getresponse()
    raw = answer.read()
    try:
        code = json.loads(raw).get("code")
    except Exception:
        code = None
    if isinstance(code, dict) or code is None:
        try:
            code = json.loads(raw)["error"]["code"]
        except Exception:
            pass
    print(method, path, answer.status, code, flush=True)
"""

ROUTES = [
    "GET /capabilities",
    "GET /sessions",
    "POST /session",
    "GET /session/abc/messages",
    "POST /session/abc/prompt",
    "POST /session/abc/recap",
    "DELETE /session/abc",
    "GET /memory",
    "POST /memory/search",
    "DELETE /memory/1",
    "GET /openapi.json",
    "GET /v1/models",
    "POST /v1/chat/completions",
    "POST /v1/responses",
    "GET /no/such/route",
]


def _dropper(uid: int | None):
    def drop() -> None:
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)

    return drop


def _interpreter(uid: int | None) -> str:
    """A Python the other user may run (the test venv's can live under /root, 0700)."""
    for candidate in (sys.executable, shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")):
        if not candidate:
            continue
        try:
            subprocess.run([candidate, "-I", "-c", "import http.client"], preexec_fn=_dropper(uid),
                           check=True, capture_output=True, timeout=60, cwd="/")
        except (OSError, subprocess.CalledProcessError):
            continue
        return candidate
    pytest.skip("no Python interpreter the other user may run")


def _as(uid: int | None, url: str, *requests: str) -> list[tuple[str, int, str | None]]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    done = subprocess.run(
        [_interpreter(uid), "-I", "-c", CLIENT, host, port, *requests],
        capture_output=True,
        text=True,
        preexec_fn=_dropper(uid),
        timeout=120,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    rows = []
    for line in done.stdout.splitlines():
        method, path, status, code = line.split(" ")
        rows.append((f"{method} {path}", int(status), None if code == "None" else code))
    return rows


needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="switching to another user needs root"
)


@needs_root
def test_another_user_is_refused_on_every_route_but_health(home: Path, project: Path) -> None:
    with serve_process(project) as (url, line):
        assert f"private to uid {os.geteuid()}" in line
        theirs = _as(NOBODY, url, "GET /health", *ROUTES)
        ours = _as(None, url, "GET /health", "GET /sessions", "POST /session", "GET /capabilities")
    assert theirs[0][1] == 200
    refused = {route: (status, code) for route, status, code in theirs[1:]}
    assert refused == {route: (403, "forbidden_user") for route in ROUTES}
    # The owner needs no token and no header: the plain request goes through.
    assert [status for _, status, _ in ours] == [200, 200, 201, 200]


@needs_root
def test_the_opt_out_is_said_at_start_and_lets_other_users_in(home: Path, project: Path) -> None:
    proc_env = dict(os.environ)
    with serve_process(project, "--allow-other-users", env=proc_env) as (url, line):
        assert "open to every local user" in line
        (sessions,) = _as(NOBODY, url, "GET /sessions")
    assert sessions[1] == 200


def test_same_user_sdk_and_openai_sdk_need_no_configuration(home: Path, project: Path) -> None:
    """The clients the contract names, as the owner: the SDK and the openai SDK."""
    import openai

    from qwenmem_tui.daemon import DaemonClient

    with serve_process(project) as (url, line):
        assert "token required" not in line or "daemon.token" in line
        with DaemonClient(url, timeout=30) as client:
            session_id = client.create_session("mine")
            assert session_id in [s.session_id for s in client.list_sessions()]
        models = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0).models.list()
        assert json.loads(models.model_dump_json())["data"] is not None
