"""Issue 41: the daemon and its proxy fuzzed from their own OpenAPI document.

A short, seeded, bounded schemathesis run against a real `qwenmem serve` (the long
one, over 2,000 requests, is bench/bench_schema_fuzz.py): no 5xx, no response outside
the document, no traceback in the daemon's output or log. Then one regression test per
finding of the long runs, in process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jsonschema_rs
import pytest
from starlette.testclient import TestClient

from qwenmem_tui.config import Settings
from qwenmem_tui.daemon.server import ServerOptions, create_app
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

from .schema_fuzz import run_fuzz

TOKEN = "schema-regression-token"


def test_the_daemon_fuzzed_from_its_document_stays_inside_it(tmp_path: Path) -> None:
    report = run_fuzz(tmp_path, max_examples=6, seed=41, phases="fuzzing,stateful")
    assert report.requests >= 80, report.output
    assert report.server_errors == 0, report.output
    assert report.failures == [], report.output
    assert report.tracebacks == [], report.tracebacks[:3]
    assert report.exit_code == 0, report.output


@pytest.fixture
def daemon(fake: FakeOpenAI, settings: Settings, paths: Paths, project: Path) -> Iterator[TestClient]:
    fake.responder = lambda body: Reply("ok")
    app = create_app(settings, paths, project_root=project, options=ServerOptions(token=TOKEN))
    with TestClient(app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


def _admits(schema: dict, value: object) -> bool:
    return jsonschema_rs.validator_for(schema).is_valid(value)


def test_a_null_title_is_accepted_and_documented(daemon: TestClient) -> None:
    # Found by schemathesis (negative_data_rejection): the daemon took {"title": null}
    # as untitled, the document said a title is a string.
    document = daemon.get("/openapi.json").json()
    body = document["paths"]["/session"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert _admits(body, {"title": None}) and not _admits(body, {"title": 5})
    response = daemon.post("/session", json={"title": None})
    assert response.status_code == 201 and response.json()["title"] == ""
    assert daemon.post("/session", json={"title": 5}).status_code == 400


def test_an_empty_category_lists_every_memory_and_is_documented(daemon: TestClient) -> None:
    # Found by schemathesis: GET /memory?category= answered 200 (every category), the
    # document allowed only the four names.
    document = daemon.get("/openapi.json").json()
    [category] = document["paths"]["/memory"]["get"]["parameters"][-1:]
    assert category["name"] == "category"
    assert _admits(category["schema"], "") and not _admits(category["schema"], "users")
    assert daemon.get("/memory", params={"category": ""}).status_code == 200
    assert daemon.get("/memory", params={"category": "users"}).status_code == 400
