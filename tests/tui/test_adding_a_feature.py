"""docs/architecture.md's worked example, run: adding a feature is one package plus one
line in the registry, and every face picks it up with nothing else edited.

The package is written to a temp dir exactly as a contributor would write it under
`qwenmem_tui/features/stamp/`: a setting (`[stamp] line`), a hook that stamps each
request with it, a /stamp command that leaves a display item, a `qwenmem stamp`
subcommand, a daemon route, an MCP tool and the item's export renderer. The registry
gets its one line (a copy of `FEATURES` with it added), and then the real TUI (Pilot),
the real daemon (in-process HTTP), `qwenmem mcp`'s server, the command line and an
export are run as they always are. Without the line, none of it exists.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from cli_support import CliRunner
from starlette.testclient import TestClient
from textual.pilot import Pilot
from textual.widgets import Static

from qwenmem_tui.config import ConfigError, Settings, load_settings
from qwenmem_tui.daemon.server import create_app
from qwenmem_tui.features import registry
from qwenmem_tui.features.export.formats import export_session
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage.sessions import Item, SessionInfo
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

from .conftest import send, settle

PACKAGE = {
    "__init__.py": '"""A hypothetical feature: every request carries a stamp."""\n',
    "settings.py": '''
        """The stamp's setting: `[stamp] line`, the line each request is stamped with."""

        from qwenmem_tui.config import Section, SettingsSection


        class StampSettings(Section):
            line: str = "[stamped by the stamp feature]"


        STAMP_SETTINGS = SettingsSection("stamp", StampSettings)
    ''',
    "feature.py": '''
        """The stamp's registration: its setting, a hook per session, a display item,
        and its faces (TUI command, CLI command, daemon route, MCP tool)."""

        from qwenmem_tui.features.feature import Feature, FeatureKey, ItemKind, SessionPart

        STAMP = "stamp"
        NOTE_ITEM = "stamp_note"
        STAMP_HOOK = FeatureKey(STAMP)


        def _session(state, context, wiring):
            from stampfeature.hook import StampHook
            from stampfeature.settings import STAMP_SETTINGS

            hook = StampHook(STAMP_SETTINGS.of(context.settings).line)
            return SessionPart(hooks=(hook,), handle=hook)


        FEATURE = Feature(
            STAMP,
            settings="stampfeature.settings:STAMP_SETTINGS",
            hook_rank=5,  # after compaction (0), before memory (10)
            session=_session,
            items=(ItemKind(NOTE_ITEM, markdown="stampfeature.render:note_markdown"),),
            tui="stampfeature.tui.extension:stamp_extension",
            cli="stampfeature.cli:register",
            routes="stampfeature.routes:ROUTES",
            mcp="stampfeature.mcp_tools:register_tools",
        )
    ''',
    "hook.py": '''
        """The stamp's core: a query hook (no Textual, no HTTP)."""

        from qwenmem_tui.chat.session import BaseQueryHook


        class StampHook(BaseQueryHook):
            def __init__(self, line):
                self.line = line
                self.stamped = 0

            async def before_request(self, session, kind, messages):
                self.stamped += 1
                system, *rest = messages
                return [{**system, "content": system["content"] + "\\n" + self.line}, *rest]
    ''',
    "render.py": '''
        """How a stamp note reads in an export."""


        def note_markdown(item, now):
            return f"> ✎ {item.content}"
    ''',
    "tui/__init__.py": "",
    "tui/extension.py": '''
        """The stamp in the TUI: /stamp notes how many requests were stamped."""

        from textual.widgets import Static

        from qwenmem_tui.tui.extensions import Extension, ExtensionFactory
        from qwenmem_tui.tui.host import SlashCommand
        from stampfeature.feature import NOTE_ITEM, STAMP, STAMP_HOOK


        async def _build(context):
            hook = context.features.handle(STAMP_HOOK)

            async def stamp(app, args):
                await app.add_display_item(NOTE_ITEM, f"Stamped {hook.stamped} requests.")

            return Extension(
                STAMP,
                commands=(SlashCommand("stamp", "Note how many requests were stamped", stamp),),
                item_widgets={NOTE_ITEM: lambda item: Static(f"✎ {item.content}", classes="stamp-note")},
            )


        stamp_extension = ExtensionFactory(STAMP, _build, features=frozenset({STAMP}))
    ''',
    "cli.py": '''
        """The stamp on the command line: `qwenmem stamp` prints the configured line."""


        def _print_line(args, settings, paths):
            from stampfeature.settings import STAMP_SETTINGS

            print(STAMP_SETTINGS.of(settings).line)


        def register(commands):
            stamp = commands.root.add_parser("stamp", help="print the line requests are stamped with")
            stamp.set_defaults(func=_print_line)
    ''',
    "mcp_tools.py": '''
        """The stamp in `qwenmem mcp`: a tool saying the default line it stamps with."""

        from stampfeature.settings import StampSettings


        def register_tools(server, backend):
            @server.tool(title="Stamp line", description="The line every request is stamped with")
            async def stamp_line() -> str:
                return StampSettings().line
    ''',
    "routes.py": '''
        """The stamp in the daemon: GET /stamp names the feature and its configured line."""

        from starlette.responses import JSONResponse

        from qwenmem_tui.daemon.openapi import ApiRoute, json_response
        from stampfeature.settings import STAMP_SETTINGS


        async def stamp(request):
            line = STAMP_SETTINGS.of(request.app.state.backend.settings).line
            return JSONResponse({"feature": "stamp", "line": line})


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
LINE = "[stamp: from the config]"
"""What the home's config sets `[stamp] line` to (the default is another line)."""


def write_package(root: Path) -> None:
    for name, source in PACKAGE.items():
        path = root / "stampfeature" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")


def configure_stamp(paths: Paths) -> None:
    with paths.config_file.open("a", encoding="utf-8") as config:
        config.write(f'\n[stamp]\nline = "{LINE}"\n')


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The package on disk and importable (its registry line not added)."""
    root = tmp_path / "site"
    write_package(root)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [n for n in sys.modules if n == "stampfeature" or n.startswith("stampfeature.")]:
        del sys.modules[name]


@pytest.fixture
def stampfeature(package: Path, paths: Paths, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The registry's one line added, and the home's config setting the stamp's line."""
    feature = importlib.import_module("stampfeature.feature")
    monkeypatch.setattr(registry, "FEATURES", (*registry.FEATURES, feature.FEATURE))  # the one line
    configure_stamp(paths)
    return feature


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # Only the new feature and the always-there ones: no memory stack to load.
    settings.memory.enabled = False
    settings.compaction.enabled = False
    return settings


def stamped(fake: FakeOpenAI) -> list[bool]:
    """For each chat request the model got: whether its system prompt carries the line."""
    return [LINE in body["messages"][0]["content"] for body in fake.chat_requests]


def notes(app) -> list[str]:
    return [str(widget.render()) for widget in app.screen.query(Static).filter(".stamp-note")]


async def test_the_tui_offers_the_new_feature_its_item_and_its_export(
    stampfeature: ModuleType, make_app, fake: FakeOpenAI
) -> None:
    app = make_app(extensions=None)  # the extensions the registry offers, as `qwenmem` runs
    async with app.run_test() as pilot:
        pilot: Pilot
        fake.script(Reply("Hello!"))
        await send(pilot, "hi")
        await settle(pilot)
        assert stamped(fake) == [True]  # its setting, read by its hook
        await send(pilot, "/stamp")
        await settle(pilot)
        assert notes(app) == ["✎ Stamped 1 requests."]  # its display item, its widget
        exported = export_session(app.session.info, app.session.items, "md")
        assert "> ✎ Stamped 1 requests." in exported  # its export renderer


def test_the_daemon_serves_the_new_features_route_and_runs_its_hook(
    stampfeature: ModuleType, settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI
) -> None:
    app = create_app(settings, paths, project_root=project)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/stamp").json() == {"feature": "stamp", "line": LINE}
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


def test_the_command_line_offers_its_subcommand_with_its_setting(
    stampfeature: ModuleType, cli_run: CliRunner, home: Path, project: Path
) -> None:
    done = cli_run("stamp", home=home, cwd=project)
    assert (done.returncode, done.stdout, done.stderr) == (0, LINE + "\n", "")


async def test_without_its_line_no_face_knows_the_feature(
    package: Path, settings: Settings, paths: Paths, project: Path, fake: FakeOpenAI,
    cli_run: CliRunner, home: Path, make_app,
) -> None:
    """The control: the same package without the registry line is nothing anywhere."""
    from qwenmem_tui.mcp_server.server import MemoryBackend, build_server
    from qwenmem_tui.tui.widgets.plain_items import InfoItem

    app = make_app(extensions=None)
    async with app.run_test() as pilot:
        await send(pilot, "/stamp")
        await settle(pilot)
        shown = [str(widget.render()) for widget in app.screen.query(InfoItem)]
        assert shown[-1:] == ["Unknown command /stamp. Type /help for the list."]
        assert notes(app) == []

    app = create_app(settings, paths, project_root=project)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/stamp").status_code == 404
        assert "/stamp" not in client.get("/openapi.json").json()["paths"]
        assert "stamp" not in client.get("/capabilities").json()["features"]

    async def no_runtime():
        raise AssertionError("not opened")

    server = build_server(MemoryBackend(no_runtime, project_dir=project, cwd=project))
    assert "stamp_line" not in {tool.name for tool in await server.list_tools()}

    info = SessionInfo("s1", "p", "", 0.0, 0.0, 0)
    note = Item(None, "s1", "stamp_note", "Stamped 1 requests.", None, {}, 0.0)
    assert "> ✎" not in export_session(info, [note], "md", now=0.0)  # nobody renders it

    unknown = cli_run("stamp", home=home, cwd=project)
    assert unknown.returncode == 2 and "invalid choice: 'stamp'" in unknown.stderr
    configure_stamp(paths)
    with pytest.raises(ConfigError, match='unknown key "stamp"'):
        load_settings(paths.config_file)


def test_every_registered_feature_is_named_once_and_its_faces_load() -> None:
    """What the import contract reads statically, loaded for real: each registration's
    TUI face is an ExtensionFactory presenting at most its own feature, its routes are
    Starlette routes, its MCP tools a registering function, and no two features share
    a name."""
    from qwenmem_tui.daemon.openapi import ApiRoute
    from qwenmem_tui.features.feature import load_face, load_faces, load_function
    from qwenmem_tui.tui.extensions import ExtensionFactory

    names = [feature.name for feature in registry.FEATURES]
    assert len(names) == len(set(names))
    for feature in registry.FEATURES:
        if feature.tui is not None:
            factory = load_face(feature.tui, ExtensionFactory)
            assert set(factory.features) <= {feature.name}, feature.name
        if feature.routes is not None:
            assert load_faces(feature.routes, ApiRoute), feature.name
        if feature.mcp is not None:
            load_function(feature.mcp)
    # A reference to the wrong thing is one line where it is loaded, not a failure
    # at its first use.
    memory = next(f for f in registry.FEATURES if f.name == "memory")
    assert memory.routes is not None and memory.tui is not None
    with pytest.raises(TypeError, match=r"routes:MEMORY_ROUTES is a list, expected ExtensionFactory"):
        load_face(memory.routes, ExtensionFactory)
    with pytest.raises(TypeError, match="is not a sequence of ApiRoute"):
        load_faces(memory.tui, ApiRoute)
    with pytest.raises(TypeError, match="is a str, expected a function"):
        load_function("qwenmem_tui.features.memory.feature:MEMORY")
