"""docs/architecture.md's worked example, run: adding a feature is one package plus one
line in the registry, and every face picks it up with nothing else edited.

The package is written to a temp dir exactly as a contributor would write it under
`qwenmem_tui/features/stamp/` (a hook that stamps each request, a /stamp command, a
daemon route), the registry gets its one line (a copy of `FEATURES` with it added),
and then the real TUI (Pilot) and the real daemon (in-process HTTP) are started as
they always are: the TUI offers /stamp and its hook runs in the TUI's chat; the
daemon serves its route and its hook runs in the daemon's chats; `qwenmem mcp`'s server
lists and answers its tool beside memory's.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from starlette.testclient import TestClient
from textual.pilot import Pilot

from qwenmem_tui.config import Settings
from qwenmem_tui.daemon.server import create_app
from qwenmem_tui.features import registry
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.widgets.plain_items import InfoItem

from .conftest import send, settle

PACKAGE = {
    "__init__.py": '"""A hypothetical feature: every request carries a stamp."""\n',
    "feature.py": '''
        """The stamp's registration: a hook per session, a TUI command, a daemon route."""

        from qwenmem_tui.features.feature import Feature, SessionPart
        from stampfeature.hook import StampHook

        STAMP = "stamp"


        def _session(state, context, wiring):
            hook = StampHook()
            return SessionPart(hooks=(hook,), handle=hook)


        FEATURE = Feature(
            STAMP,
            hook_rank=5,  # after compaction (0), before memory (10)
            session=_session,
            tui="stampfeature.tui.extension:stamp_extension",
            routes="stampfeature.routes:ROUTES",
            mcp="stampfeature.mcp_tools:register_tools",
        )
    ''',
    "hook.py": '''
        """The stamp's core: a query hook (no Textual, no HTTP)."""

        from qwenmem_tui.chat.session import BaseQueryHook

        STAMP_LINE = "[stamped by the stamp feature]"


        class StampHook(BaseQueryHook):
            def __init__(self):
                self.stamped = 0

            async def before_request(self, session, kind, messages):
                self.stamped += 1
                system, *rest = messages
                return [{**system, "content": system["content"] + "\\n" + STAMP_LINE}, *rest]
    ''',
    "tui/__init__.py": "",
    "tui/extension.py": '''
        """The stamp in the TUI: /stamp says how many requests were stamped."""

        from qwenmem_tui.tui.extensions import Extension, ExtensionFactory
        from qwenmem_tui.tui.host import SlashCommand
        from stampfeature.feature import STAMP


        async def _build(context):
            hook = context.features.handle(STAMP)

            async def stamp(app, args):
                app.show_info(f"Stamped {hook.stamped} requests.")

            command = SlashCommand("stamp", "How many requests were stamped", stamp)
            return Extension(STAMP, commands=(command,))


        stamp_extension = ExtensionFactory(STAMP, _build, features=frozenset({STAMP}))
    ''',
    "mcp_tools.py": '''
        """The stamp in `qwenmem mcp`: a tool saying the line it stamps with."""

        from stampfeature.hook import STAMP_LINE


        def register_tools(server, backend):
            @server.tool(title="Stamp line", description="The line every request is stamped with")
            async def stamp_line() -> str:
                return STAMP_LINE
    ''',
    "routes.py": '''
        """The stamp in the daemon: GET /stamp names the feature."""

        from starlette.responses import JSONResponse

        from qwenmem_tui.daemon.openapi import ApiRoute, json_response


        async def stamp(request):
            return JSONResponse({"feature": "stamp", "line": "[stamped by the stamp feature]"})


        ANSWER = {"type": "object", "properties": {"feature": {"const": "stamp"}, "line": {"type": "string"}}}
        ROUTES = [
            ApiRoute(
                "/stamp",
                "GET",
                stamp,
                {"summary": "The stamp line", "responses": {"200": json_response(ANSWER, "The stamp")}},
                capabilities=("stamp",),
            )
        ]
    ''',
}


@pytest.fixture
def stampfeature(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The package on disk and importable, and the registry's one line added."""
    root = tmp_path / "site"
    for name, source in PACKAGE.items():
        path = root / "stampfeature" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(root))
    feature = importlib.import_module("stampfeature.feature")
    monkeypatch.setattr(registry, "FEATURES", (*registry.FEATURES, feature.FEATURE))  # the one line
    yield feature
    for name in [n for n in sys.modules if n == "stampfeature" or n.startswith("stampfeature.")]:
        del sys.modules[name]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # Only the new feature and the always-there ones: no memory stack to load.
    settings.memory.enabled = False
    settings.compaction.enabled = False
    return settings


def stamped(fake: FakeOpenAI) -> list[bool]:
    """For each chat request the model got: whether its system prompt carries the stamp."""
    return ["[stamped by the stamp feature]" in body["messages"][0]["content"] for body in fake.chat_requests]


def infos(app) -> list[str]:
    return [str(widget.render()) for widget in app.screen.query(InfoItem)]


async def test_the_tui_offers_the_new_feature_and_runs_its_hook(
    stampfeature: ModuleType, make_app, fake: FakeOpenAI
) -> None:
    app = make_app(extensions=None)  # the extensions the registry offers, as `qwenmem` runs
    async with app.run_test() as pilot:
        pilot: Pilot
        fake.script(Reply("Hello!"))
        await send(pilot, "hi")
        await settle(pilot)
        assert stamped(fake) == [True]
        await send(pilot, "/stamp")
        await settle(pilot)
        assert infos(app)[-1] == "Stamped 1 requests."
        assert "stamp" in {command.name for command in app.commands}


def test_the_daemon_serves_the_new_features_route_and_runs_its_hook(
    stampfeature: ModuleType, settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI
) -> None:
    app = create_app(settings, paths, project_root=project)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/stamp").json() == {"feature": "stamp", "line": "[stamped by the stamp feature]"}
        assert "/stamp" in client.get("/openapi.json").json()["paths"]  # documented as it is served
        assert "stamp" in client.get("/capabilities").json()["features"]
        session = client.post("/session", json={}).json()["sessionId"]
        fake.script(Reply("Hello from the daemon."))
        answer = client.post(f"/session/{session}/prompt", json={"text": "hi"})
        assert answer.status_code == 200, answer.text
        assert stamped(fake) == [True]


async def test_the_mcp_server_offers_the_new_features_tool(
    stampfeature: ModuleType, project: Path
) -> None:
    from qwenmem_tui.mcp_server.server import MemoryBackend, build_server

    async def no_runtime():  # the stamp's tool needs none; memory's are not called
        raise AssertionError("not opened")

    server = build_server(MemoryBackend(no_runtime, project_dir=project, cwd=project))
    names = {tool.name for tool in await server.list_tools()}
    assert {"stamp_line", "search_memory", "remember", "forget_memory", "list_memories"} <= names
    answer = await server.call_tool("stamp_line", {})
    assert [block.text for block in answer.content] == ["[stamped by the stamp feature]"]


def test_without_its_line_no_face_knows_the_feature(
    settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI
) -> None:
    """The control: the same daemon without the registry line has no /stamp."""
    app = create_app(settings, paths, project_root=project)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/stamp").status_code == 404
        assert "/stamp" not in client.get("/openapi.json").json()["paths"]
        assert "stamp" not in client.get("/capabilities").json()["features"]


def test_every_registered_feature_is_named_once_and_its_faces_load() -> None:
    """What the import contract reads statically, loaded for real: each registration's
    TUI face is an ExtensionFactory presenting at most its own feature, its routes are
    Starlette routes, its MCP tools a registering function, and no two features share
    a name."""
    from qwenmem_tui.daemon.openapi import ApiRoute
    from qwenmem_tui.features.feature import load_face
    from qwenmem_tui.tui.extensions import ExtensionFactory

    names = [feature.name for feature in registry.FEATURES]
    assert len(names) == len(set(names))
    for feature in registry.FEATURES:
        if feature.tui is not None:
            factory = load_face(feature.tui)
            assert isinstance(factory, ExtensionFactory), feature.name
            assert set(factory.features) <= {feature.name}, feature.name
        if feature.routes is not None:
            routes = load_face(feature.routes)
            assert routes and all(isinstance(route, ApiRoute) for route in routes), feature.name
        if feature.mcp is not None:
            assert callable(load_face(feature.mcp)), feature.name
