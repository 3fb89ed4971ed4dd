"""The package's import contract, read from the source with `ast` (no module is imported).

1. No import cycle among `qwenmem_tui` modules. Function-local imports count (they only
   hide a cycle until the function runs), and so do `if TYPE_CHECKING:` ones: two
   modules that name each other are one concept in two rooms, whether or not the names
   are needed at run time. (The other rules read run-time edges only.) An import edge
   goes to the module named, or — for `from package import name` where `name` is not a
   submodule — to the package's `__init__`.
2. The chat core (`qwenmem_tui/chat/`) imports no feature, directly or through other
   modules: nothing under `features/`, no runtime, no face.
3. Only the TUI imports Textual: `tui/` (the features' faces in `tui/features/<name>/`) and the
   CLI entry that starts it — statically, so a function-local import the subprocess
   check in test_core_imports.py never runs is caught too.
4. The base (config, paths, text, secrets, the debug log, prompt history, `llm/`,
   `storage/`) imports nothing above it: no feature, no chat loop, no runtime, no face.
5. A feature's core (everything under `features/` but its faces: `tui/`, `routes.py`,
   `mcp_tools.py`), the assembly and the runtime import no face, directly or not: not
   `tui/`, `daemon/`, `mcp_server/`, the CLI, nor any feature's faces.
6. The faces (`tui/`, `daemon/`, `mcp_server/` and every feature's faces)
   import of a feature only its registration (`feature.py`), its faces and the
   modules its registration lists in `api` — plus the shared `features/feature.py`
   (the protocol), `registry.py` and `assembly.py`. A feature's own faces may import
   its core. Everything else they import is the runtime, the chat core or the base.
7. A feature is one package with one registration: every `features/<name>/` has a
   `feature.py` with one `Feature(...)`, `registry.py` imports each of them, and the
   faces it offers (`tui=`, `routes=`, `mcp=`) and its `api` name modules of its own package
   that exist (the attribute too).
8. The faces (the TUI, the daemon with its proxy, the MCP server) open nothing the
   runtime opens (database, session store, LLM client, memory service, feature
   assembly, chats, the memory views of faces that are not chats): they present
   `Runtime`.
9. No module but `tui/app.py` names the app class: the others see `tui.host.Host`.
10. The faces construct no hook: no call to a class whose name ends in `Hook` or that
   implements `QueryHook` (by inheritance or by defining its five methods), and no
   such class defined there. Hooks are built by the features' registrations, the same
   for every face.
11. The daemon (`daemon/`, its proxy included) imports no feature package, not even a
   registration or an `api` module, at run time or for types: of `features/` only
   `feature.py`, `registry.py` and `assembly.py`. What a feature offers it reaches
   through the registry (`Feature.routes`, `Feature.exchange` behind the neutral
   `exchange.Exchange`), so the daemon names no feature.
12. Memory's library (`qwenmem_tui/memory/`: store, index, recall, identity, guard,
   writer) knows no face: it imports no feature package (its adapter
   `features/memory/` included), no runtime, no face, no CLI and of the chat core only
   the pure `chat/view.py` — directly or not, at run time or for types. A feature's
   settings may be declared in its library (`qwenmem_tui/<name>/`).
13. The core's files (`config.py`, `cli.py`, `runtime.py`, `reads.py`, `daemon/` but the
   SDK's contract in `client.py`) and the export feature name no feature in their code
   (identifiers and strings; prose aside) — export none but itself: what a feature adds
   comes in through its registration. Three features' names are also words of the
   core, left out of the check: `model` (the LLM's), `mcp` (`qwenmem mcp`, a face) and
   `instructions` (a field of OpenAI's Responses API).
"""

from __future__ import annotations

import ast
import re
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import qwenmem_tui

PACKAGE = "qwenmem_tui"
PACKAGE_DIR = Path(qwenmem_tui.__file__).parent
CHAT_CORE = f"{PACKAGE}.chat"
LIBRARIES = (f"{PACKAGE}.memory",)
"""Libraries a feature presents (`qwenmem_tui/<name>/`, its adapter `features/<name>/`)."""
PURE_CHAT = f"{CHAT_CORE}.view"
FEATURES_PACKAGE = f"{PACKAGE}.features"
FACES = (f"{PACKAGE}.tui", f"{PACKAGE}.daemon", f"{PACKAGE}.mcp_server", f"{PACKAGE}.acp")
"""The faces' own rooms; each feature's `tui/` and `routes.py` are faces too (`is_face`)."""
FEATURES = (FEATURES_PACKAGE, f"{PACKAGE}.runtime", *FACES, f"{PACKAGE}.cli", f"{PACKAGE}.__main__")
"""Everything above the chat core: the features, the runtime and the faces."""
SHARED_FEATURE_MODULES = (
    f"{FEATURES_PACKAGE}.feature",
    f"{FEATURES_PACKAGE}.registry",
    f"{FEATURES_PACKAGE}.assembly",
)
"""What every face may use of `features/`: the protocol, the registry, the assembly."""
FEATURE_FACE_ROOMS = ("tui", "routes", "mcp_tools")
FACE_KEYWORDS = {"tui": "tui", "routes": "routes", "mcp": "mcp_tools", "cli": "cli"}
"""A registration's face keyword -> the room of its feature it must point into."""
TUI_FEATURES = f"{PACKAGE}.tui.features"
"""Where each feature's TUI face lives (`tui/features/<name>/`): inside the TUI, so
Textual stays in `tui/` and the feature's own package stays UI-free."""


def face_room(name: str) -> str | None:
    """The face a feature module is, if it is one: "tui" for `tui/features/<name>/...`,
    "routes" / "mcp_tools" for those modules of `features/<name>/`."""
    parts = name.split(".")
    if parts[:3] == TUI_FEATURES.split(".") and len(parts) >= 4:
        return "tui"
    if feature_of(name) is not None and len(parts) >= 4 and parts[3] in FEATURE_FACE_ROOMS[1:]:
        return parts[3]
    return None


def feature_of(name: str) -> str | None:
    """The feature a module belongs to (`memory` for `features.memory.x` and for its TUI
    face `tui.features.memory.x`)."""
    parts = name.split(".")
    if parts[:3] == TUI_FEATURES.split(".") and len(parts) >= 4:
        return parts[3]
    if parts[:2] != [PACKAGE, "features"] or len(parts) < 3 or name in SHARED_FEATURE_MODULES:
        return None
    return parts[2]


def is_feature_face(name: str) -> bool:
    """A feature's own face module: `tui/features/<name>/...`, its `routes` or `mcp_tools`."""
    return face_room(name) is not None


def is_face(name: str) -> bool:
    """A face: `tui/` (the features' TUI faces included), `daemon/`, `mcp_server/`, the
    CLI entry, a feature's routes or MCP tools."""
    return _in(name, (*FACES, f"{PACKAGE}.cli", f"{PACKAGE}.__main__")) or is_feature_face(name)


def is_textual_room(name: str) -> bool:
    """Where Textual may be imported: the TUI (the features' TUI faces are in it) and the
    CLI entry."""
    return _in(name, (f"{PACKAGE}.tui", f"{PACKAGE}.cli", f"{PACKAGE}.__main__"))


HOOK_METHODS = {"on_query_start", "before_request", "on_query_end", "on_reset", "on_close"}
HOOK_BASES = {"QueryHook", "BaseQueryHook"}


def _in(name: str, prefixes: tuple[str, ...] | str) -> bool:
    if isinstance(prefixes, str):
        prefixes = (prefixes,)
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    is_package: bool
    imports: set[str] = field(default_factory=set)  # runtime edges to package modules
    type_imports: set[str] = field(default_factory=set)  # those and the TYPE_CHECKING ones


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _all_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node, the bodies of `if TYPE_CHECKING:` included."""
    for child in ast.iter_child_nodes(node):
        yield child
        yield from _all_nodes(child)


def _runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node that can run: all of them but the bodies of `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _runtime_nodes(other)
            continue
        yield child
        yield from _runtime_nodes(child)


@functools.cache  # the tests only read it
def load_modules() -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        name, is_package = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        modules[name] = Module(name, path, tree, is_package)
    for module in modules.values():
        _read_imports(module, modules)
    return modules


def _read_imports(module: Module, modules: dict[str, Module]) -> None:
    module.imports = set(_imports_of(module, modules))
    module.type_imports = set(_imports_of(module, modules, nodes=_all_nodes))


def external_imports(module: Module) -> set[str]:
    """Top-level names of the non-package modules `module` imports at run time."""
    found: set[str] = set()
    for node in _runtime_nodes(module.tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found - {PACKAGE}


def _imports_of(
    module: Module,
    modules: dict[str, Module],
    nodes: Callable[[ast.AST], Iterator[ast.AST]] = _runtime_nodes,
) -> Iterator[str]:
    for node in nodes(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _in(alias.name, PACKAGE):
                    yield _nearest_module(alias.name, modules)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            if base is None or not _in(base, PACKAGE):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield candidate if candidate in modules else _nearest_module(base, modules)


def _absolute(module: Module, node: ast.ImportFrom) -> str | None:
    if node.level == 0:
        return node.module
    package = module.name.split(".")
    if not module.is_package:
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _nearest_module(name: str, modules: dict[str, Module]) -> str:
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def strongly_connected(modules: dict[str, Module]) -> list[set[str]]:
    """Tarjan's algorithm: the import cycles (type-level edges too), as sets of modules
    (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = []
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work.append((root, iter(sorted(modules[root].type_imports))))
        while work:
            node, edges = work[-1]
            advanced = False
            for target in edges:
                if target not in modules:
                    continue
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(modules[target].type_imports))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in modules[node].type_imports:
                    found.append(component)
    return found


def reachable(modules: dict[str, Module], start: str) -> dict[str, str]:
    """Modules `start` imports at run time, directly or not: each with who imports it."""
    seen: dict[str, str] = {}
    todo = [start]
    while todo:
        current = todo.pop()
        for target in modules[current].imports:
            if target in modules and target not in seen and target != start:
                seen[target] = current
                todo.append(target)
    return seen


def hook_classes(modules: dict[str, Module]) -> set[str]:
    """Names of the package's classes that are query hooks (by base or by shape)."""
    classes: dict[str, ast.ClassDef] = {}
    for module in modules.values():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = node
    hooks = set(HOOK_BASES)
    changed = True
    while changed:
        changed = False
        for name, node in classes.items():
            if name in hooks:
                continue
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            methods = {
                item.name
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
            if bases & hooks or HOOK_METHODS <= methods or name.endswith("Hook"):
                hooks.add(name)
                changed = True
    return hooks


def hook_constructions(modules: dict[str, Module]) -> list[str]:
    hooks = hook_classes(modules)
    problems: list[str] = []
    for module in modules.values():
        if not is_face(module.name):
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ClassDef) and node.name in hooks:
                problems.append(f"{module.name}:{node.lineno} defines hook class {node.name}")
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called is not None and (called in hooks or called.endswith("Hook")):
                problems.append(f"{module.name}:{node.lineno} constructs {called}")
    return problems


# -- features: one package, one registration ---------------------------------------


@dataclass(frozen=True)
class Registration:
    """A feature's `Feature(...)` as its `feature.py` writes it (read, not run)."""

    feature: str  # the package: "memory"
    module: str
    faces: dict[str, str]  # "tui" / "routes" -> "module:attribute"
    api: tuple[str, ...]
    settings: str | None = None  # "module:attribute" of its SettingsSection


def registrations(modules: dict[str, Module]) -> tuple[dict[str, Registration], list[str]]:
    """Every feature package's registration, and what is wrong with them."""
    found: dict[str, Registration] = {}
    problems: list[str] = []
    for feature in sorted({f for f in map(feature_of, modules) if f is not None}):
        name = f"{FEATURES_PACKAGE}.{feature}.feature"
        module = modules.get(name)
        if module is None:
            problems.append(f"{FEATURES_PACKAGE}.{feature} has no feature.py")
            continue
        calls = [
            node
            for node in ast.walk(module.tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Feature"
        ]
        if len(calls) != 1:
            problems.append(f"{name} makes {len(calls)} registrations, not one")
            continue
        keywords = {k.arg: k.value for k in calls[0].keywords}
        faces = {
            key: value.value
            for key, value in keywords.items()
            if key in FACE_KEYWORDS and isinstance(value, ast.Constant)
        }
        api_node = keywords.get("api")
        api = tuple(
            e.value for e in getattr(api_node, "elts", ()) if isinstance(e, ast.Constant)
        )
        settings = keywords.get("settings")
        section = settings.value if isinstance(settings, ast.Constant) else None
        found[feature] = Registration(feature, name, faces, api, section)
    return found, problems


def _defines(module: Module, attribute: str) -> bool:
    for node in module.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == attribute:
                return True
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == attribute for t in targets):
            return True
    return False


def registration_problems(modules: dict[str, Module]) -> list[str]:
    """A feature package without its one registration, one the registry does not list,
    and faces or `api` that name what is not the feature's own."""
    found, problems = registrations(modules)
    registry = modules.get(f"{FEATURES_PACKAGE}.registry")
    for feature, registration in found.items():
        if registry is None or registration.module not in registry.imports:
            problems.append(f"{registration.module} is not in the registry")
        for keyword, ref in registration.faces.items():
            room = FACE_KEYWORDS[keyword]
            target, _, attribute = ref.partition(":")
            own = feature_of(target) == feature and is_feature_face(target)
            if keyword == "cli":  # its `cli.py` (one-shot commands; its core's rules)
                own = target == f"{FEATURES_PACKAGE}.{feature}.{room}"
            elif own:
                own = face_room(target) == room
            if not own:
                problems.append(f"{registration.module} offers {keyword}={ref}: not its own {room}")
            elif target not in modules or not _defines(modules[target], attribute):
                problems.append(f"{registration.module} offers {keyword}={ref}: no such thing")
        if registration.settings is not None:
            target, _, attribute = registration.settings.partition(":")
            own = feature_of(target) == feature and not is_feature_face(target)
            own = own or _in(target, f"{PACKAGE}.{feature}") and _in(target, LIBRARIES)
            if not own or target not in modules or not _defines(modules[target], attribute):
                problems.append(f"{registration.module} offers settings={registration.settings}: not its own")
        for entry in registration.api:
            target = f"{FEATURES_PACKAGE}.{feature}.{entry}"
            if target not in modules or entry in FEATURE_FACE_ROOMS:
                problems.append(f"{registration.module} lists api {entry!r}: not a module of its core")
    return problems


def faces_reaching_feature_cores(modules: dict[str, Module]) -> list[str]:
    """Faces importing of another feature what its registration does not offer."""
    found, _ = registrations(modules)
    problems = []
    for name in sorted(modules):
        if not is_face(name):
            continue
        own = feature_of(name)
        for target in sorted(modules[name].imports):
            feature = feature_of(target)
            if feature is None or feature == own or is_feature_face(target):
                continue
            rest = target.split(".")[3:]
            if rest in ([], ["feature"]) or (feature in found and rest[0] in found[feature].api):
                continue
            problems.append(f"{name} imports {target} (not offered by {feature}'s registration)")
    return problems


def reaching(
    modules: dict[str, Module], source: Callable[[str], bool], forbidden: Callable[[str], bool]
) -> list[str]:
    """Each module `source` picks that imports, directly or not, one `forbidden` picks."""
    problems = []
    for name in sorted(filter(source, modules)):
        for target, via in sorted(reachable(modules, name).items()):
            if forbidden(target):
                problems.append(f"{name} imports {target} (via {via})")
    return problems


def cores_reaching_faces(modules: dict[str, Module]) -> list[str]:
    """The features' cores, the assembly and the runtime reaching a face, directly or not."""

    def core(name: str) -> bool:
        return (_in(name, FEATURES_PACKAGE) and not is_feature_face(name)) or name == f"{PACKAGE}.runtime"

    return reaching(modules, core, is_face)


def chat_core_reaching_features(modules: dict[str, Module]) -> list[str]:
    return reaching(modules, lambda name: _in(name, CHAT_CORE), lambda target: _in(target, FEATURES))


def libraries_reaching_up(modules: dict[str, Module]) -> list[str]:
    """A library module importing a feature package, the runtime, a face, the CLI or
    the chat loop: directly (TYPE_CHECKING too) or through other modules at run time."""

    def above(target: str) -> bool:
        return _in(target, FEATURES) or (_in(target, CHAT_CORE) and target != PURE_CHAT)

    found = set(reaching(modules, lambda name: _in(name, LIBRARIES), above))
    for name in sorted(n for n in modules if _in(n, LIBRARIES)):
        found.update(
            f"{name} imports {target} (for types)"
            for target in modules[name].type_imports - modules[name].imports
            if above(target)
        )
    return sorted(found)


def textual_outside_the_tui(modules: dict[str, Module]) -> list[str]:
    return sorted(
        name
        for name, module in modules.items()
        if "textual" in external_imports(module) and not is_textual_room(name)
    )


# -- the contract ----------------------------------------------------------------------


def test_the_parser_sees_the_package() -> None:
    modules = load_modules()
    session = modules[f"{PACKAGE}.chat.session"]
    assert f"{PACKAGE}.chat.view" in session.imports
    assert f"{PACKAGE}.chat.turns" in session.imports
    # A TYPE_CHECKING import is no edge; a function-local one is.
    assert f"{PACKAGE}.chat.session" not in modules[f"{PACKAGE}.chat.turns"].imports
    memory_face = modules[f"{PACKAGE}.tui.features.memory.extension"]
    assert f"{PACKAGE}.tui.features.memory.screen" in memory_face.imports


def test_no_import_cycle() -> None:
    modules = load_modules()
    cycles = strongly_connected(modules)
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in cycles)


def test_the_chat_core_imports_no_feature() -> None:
    assert chat_core_reaching_features(load_modules()) == []


def test_the_features_the_assembly_and_the_runtime_import_no_face() -> None:
    modules = load_modules()
    assert f"{FEATURES_PACKAGE}.memory.access" in modules  # the rule sees the features
    assert cores_reaching_faces(modules) == []


def test_the_memory_library_imports_no_feature_and_no_face() -> None:
    """`qwenmem_tui/memory/` is a library: its faces are `features/memory/`'s."""
    modules = load_modules()
    assert f"{PACKAGE}.memory.service" in modules  # the rule sees the library
    assert libraries_reaching_up(modules) == []


def test_only_the_tui_imports_textual() -> None:
    assert textual_outside_the_tui(load_modules()) == []


def test_a_feature_is_one_package_with_one_registration() -> None:
    """Every `features/<name>/` registers itself once, the registry lists it, and what
    it offers the faces is its own."""
    modules = load_modules()
    found, _ = registrations(modules)
    assert {"memory", "compaction", "recap", "mcp", "titles"} <= set(found)
    assert found["memory"].faces["routes"] == "qwenmem_tui.features.memory.routes:MEMORY_ROUTES"
    assert registration_problems(modules) == []


def test_faces_import_of_a_feature_only_what_it_offers() -> None:
    """The TUI, the daemon, the MCP server and the features' faces import of another
    feature its registration, its faces and its declared `api` — not its core."""
    assert faces_reaching_feature_cores(load_modules()) == []


def test_faces_construct_no_hook() -> None:
    assert hook_constructions(load_modules()) == []


DAEMON = f"{PACKAGE}.daemon"


def daemon_feature_imports(modules: dict[str, Module]) -> list[str]:
    """Each import of a feature package by a daemon module (TYPE_CHECKING ones too)."""
    return [
        f"{name} imports {target}"
        for name in sorted(n for n in modules if _in(n, DAEMON))
        for target in sorted(modules[name].type_imports)
        if _in(target, FEATURES_PACKAGE) and target not in SHARED_FEATURE_MODULES
    ]


def test_the_daemon_imports_no_feature_package() -> None:
    """The proxy holds an `exchange.Exchange` from the registry, not memory's class."""
    modules = load_modules()
    assert f"{FEATURES_PACKAGE}.registry" in modules[f"{DAEMON}.server"].imports  # the rule sees it
    assert daemon_feature_imports(modules) == []


BASE = (
    f"{PACKAGE}.config",
    f"{PACKAGE}.paths",
    f"{PACKAGE}.text",
    f"{PACKAGE}.secrets",
    f"{PACKAGE}.debuglog",
    f"{PACKAGE}.prompt_history",
    f"{PACKAGE}.llm",
    f"{PACKAGE}.storage",
)
"""The base every layer stands on: it knows no feature, no chat loop, no face."""
ABOVE_BASE = (*FEATURES, f"{PACKAGE}.chat")
RUNTIME_PARTS = {
    "Database": {"open"},
    "SessionStore": None,
    "LLMClient": None,
    "MemoryService": {"open"},
    "MemoryAccess": None,
    "McpServers": None,
    "Assembly": {"create"},
    "ChatSession": {"load"},
    "LocalModelClient": {"for_server"},
    "ProjectMemory": None,
    "ExchangeMemory": None,
}
"""What the runtime opens, and how (None: by calling the class itself)."""
OPENING_FACES = (*FACES, f"{PACKAGE}.cli")
APP_CLASS = "QwenmemApp"
APP_MODULE = f"{PACKAGE}.tui.app"


def base_reaching_up(modules: dict[str, Module]) -> list[str]:
    return reaching(modules, lambda name: _in(name, BASE), lambda target: _in(target, ABOVE_BASE))


def runtime_constructions(modules: dict[str, Module]) -> list[str]:
    """Faces opening what the runtime opens: `Database.open(...)`, `LLMClient(...)`, ..."""
    problems = []
    for module in modules.values():
        # The one-shot reads (`qwenmem sessions`, `--resume` checks, exports) go through
        # the runtime's light read path (`reads.py`), the CLI entry's too.
        if not (_in(module.name, OPENING_FACES) or is_feature_face(module.name)):
            continue
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in RUNTIME_PARTS and RUNTIME_PARTS[func.id] is None:
                problems.append(f"{module.name}:{node.lineno} constructs {func.id}")
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                allowed = RUNTIME_PARTS.get(func.value.id, ())
                if func.value.id in RUNTIME_PARTS and (allowed is None or func.attr in allowed):
                    problems.append(f"{module.name}:{node.lineno} calls {func.value.id}.{func.attr}")
    return problems


def typed_against_the_app(modules: dict[str, Module]) -> list[str]:
    """Modules other than the app's naming its class: an import of it (TYPE_CHECKING
    ones too), a use of the name, or a string annotation / cast naming it."""
    problems = []
    for module in modules.values():
        if module.name == APP_MODULE:
            continue
        for node in ast.walk(module.tree):
            named = (
                (isinstance(node, ast.ImportFrom) and any(a.name == APP_CLASS for a in node.names))
                or (isinstance(node, ast.Name) and node.id == APP_CLASS)
                or (isinstance(node, ast.Attribute) and node.attr == APP_CLASS)
                or (isinstance(node, ast.Constant) and node.value == APP_CLASS)
            )
            if named:
                problems.append(f"{module.name}:{getattr(node, 'lineno', 0)} names {APP_CLASS}")
    return problems


TEXTUAL_PRIVATE_ATTRIBUTES = frozenset(
    {"_bindings", "_merged_bindings", "_binding_chain", "_modal_binding_chain", "_keymap"}
)
"""Textual's private binding machinery: public routes are `BINDINGS`, `App.bind`,
`set_keymap`, `check_action`, `refresh_bindings` and `Screen.active_bindings`."""
TEXTUAL_PRIVATE_ALLOWED = {(f"{PACKAGE}.tui.terminal_input", "textual._xterm_parser")}
"""The one private Textual module used, because Textual has no public route to it
(the module's comment says why)."""


def private_textual_uses(modules: dict[str, Module]) -> list[str]:
    """Uses of Textual's private modules (`textual._x`) or binding attributes."""
    problems = []
    for module in modules.values():
        for node in ast.walk(module.tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                private = name.startswith("textual.") and any(
                    part.startswith("_") for part in name.split(".")[1:]
                )
                if private and (module.name, name) not in TEXTUAL_PRIVATE_ALLOWED:
                    problems.append(f"{module.name}:{node.lineno} imports {name}")
            if isinstance(node, ast.Attribute) and node.attr in TEXTUAL_PRIVATE_ATTRIBUTES:
                problems.append(f"{module.name}:{node.lineno} uses .{node.attr}")
    return problems


def test_no_private_textual_api() -> None:
    """Bindings through Textual's public API only; see TEXTUAL_PRIVATE_ALLOWED."""
    assert private_textual_uses(load_modules()) == []


CHAT_EVENTS = frozenset(
    {
        "QueryStarted", "TurnStarted", "AssistantDelta", "ReasoningDelta", "ToolCallStarted",
        "ToolCallFinished", "ItemAdded", "Notice", "QueryFinished",
    }
)
"""The chat events (`chat/events.py`); faces walk them with `ChatEventHandler`."""


def event_ladders(modules: dict[str, Module]) -> list[str]:
    """Face functions that tell chat events apart by isinstance (two types or more):
    the one dispatch is `ChatEventHandler.handle`, a method per event."""
    problems = []
    for module in modules.values():
        if not (_in(module.name, FACES) or is_feature_face(module.name)):
            continue
        for function in ast.walk(module.tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            tested: set[str] = set()
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "isinstance"
                    and len(node.args) == 2
                ):
                    kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                    for kind in kinds:
                        name = kind.id if isinstance(kind, ast.Name) else getattr(kind, "attr", "")
                        if name in CHAT_EVENTS:
                            tested.add(name)
            if len(tested) > 1:
                problems.append(f"{module.name}:{function.lineno} {function.name} tests {', '.join(sorted(tested))}")
    return problems


def test_faces_walk_chat_events_with_the_one_handler() -> None:
    assert event_ladders(load_modules()) == []


MAX_FUNCTION_LINES = 80
"""The longest a function may be (docstring included) where issue 26 asked for it."""
SHORT_FUNCTION_ROOMS = (
    f"{PACKAGE}.daemon",
    f"{PACKAGE}.features.memory",
    f"{PACKAGE}.memory",
    f"{PACKAGE}.mcp_server",
    f"{PACKAGE}.runtime",
)


def long_functions(modules: dict[str, Module], limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Functions over `limit` lines in SHORT_FUNCTION_ROOMS."""
    problems = []
    for module in modules.values():
        if not _in(module.name, SHORT_FUNCTION_ROOMS):
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    problems.append(f"{module.name}:{node.lineno} {node.name} is {length} lines")
    return problems


def test_no_long_function_in_the_daemon_memory_and_runtime() -> None:
    """A function that outgrows a screen gets steps (see `Runtime.open`'s `_Opening`)."""
    assert long_functions(load_modules()) == []


def test_the_base_imports_no_feature() -> None:
    """config, paths, text, secrets, the debug log, llm/ and storage/ know nothing above."""
    assert base_reaching_up(load_modules()) == []


def test_the_faces_open_nothing_the_runtime_opens() -> None:
    """The TUI, the daemon (and its proxy) and the MCP server get database, store,
    client, memory, features and chats from `qwenmem_tui.runtime`; none opens its own."""
    assert runtime_constructions(load_modules()) == []


def test_no_module_is_typed_against_the_app_class() -> None:
    """Commands, extensions and screens see the app as `tui.host.Host`."""
    assert typed_against_the_app(load_modules()) == []


def test_the_checks_catch_what_they_are_for() -> None:
    """Each check fails on a small bad example (so a green run means something)."""

    def module(name: str, source: str) -> Module:
        path = PACKAGE_DIR / (name.removeprefix(f"{PACKAGE}.").replace(".", "/") + ".py")
        return Module(name, path, ast.parse(source), False)

    def wired(*members: Module) -> dict[str, Module]:
        """A package of just `members`, their imports read against each other."""
        package = {m.name: m for m in members}
        for m in package.values():
            _read_imports(m, package)
        return package

    a = module(f"{PACKAGE}.a", "def f():\n    from qwenmem_tui import b\n")
    b = module(f"{PACKAGE}.b", "import qwenmem_tui.a\n")
    c = module(
        f"{PACKAGE}.c",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from qwenmem_tui import a\n",
    )
    d = module(
        f"{PACKAGE}.d",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from qwenmem_tui.e import E\n",
    )
    e = module(f"{PACKAGE}.e", "from qwenmem_tui.d import D\n")
    fake = wired(a, b, c, d, e)
    # Function-local counts; a type-level cycle is a cycle too.
    assert sorted(strongly_connected(fake), key=sorted) == [{a.name, b.name}, {d.name, e.name}]
    assert a.name not in c.imports  # a TYPE_CHECKING import is no run-time edge
    assert a.name in c.type_imports

    hook = module(f"{PACKAGE}.chat.h", "class MyThing(BaseQueryHook):\n    pass\n")
    face = module(
        f"{PACKAGE}.tui.x",
        "def build(llm):\n    return [MyThing(), mod.CompactionHook(llm)]\n",
    )
    fake = {m.name: m for m in (hook, face)}
    assert hook_constructions(fake) == [
        f"{PACKAGE}.tui.x:2 constructs MyThing",
        f"{PACKAGE}.tui.x:2 constructs CompactionHook",
    ]

    config = module(f"{PACKAGE}.config", "def f():\n    from qwenmem_tui.features.memory import model\n")
    model = module(f"{PACKAGE}.features.memory.model", "")
    opener = module(
        f"{PACKAGE}.daemon.y",
        "async def f(p, s):\n    db = await Database.open(p)\n    return LLMClient.from_settings(s), SessionStore(db)\n",
    )
    typed = module(
        f"{PACKAGE}.tui.z",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from qwenmem_tui.tui.app import QwenmemApp\n"
        "def f(app):\n    return cast('QwenmemApp', app)\n",
    )
    fake = wired(config, model, opener, typed)
    assert base_reaching_up(fake) == [f"{PACKAGE}.config imports {PACKAGE}.features.memory.model (via {PACKAGE}.config)"]
    assert runtime_constructions(fake) == [
        f"{PACKAGE}.daemon.y:2 calls Database.open",
        f"{PACKAGE}.daemon.y:3 calls LLMClient.from_settings",
        f"{PACKAGE}.daemon.y:3 constructs SessionStore",
    ]
    mcp = module(
        f"{PACKAGE}.mcp_server.m",
        "def f(s, p):\n    return MemoryAccess(s, p), ProjectMemory(s, 'p', None)\n",
    )
    assert runtime_constructions({mcp.name: mcp}) == [
        f"{PACKAGE}.mcp_server.m:2 constructs MemoryAccess",
        f"{PACKAGE}.mcp_server.m:2 constructs ProjectMemory",
    ]
    assert [p.split(":")[1] for p in typed_against_the_app(fake)] == ["3 names QwenmemApp", "5 names QwenmemApp"]

    ladder = module(
        f"{PACKAGE}.daemon.e",
        "def f(event):\n    if isinstance(event, AssistantDelta):\n        pass\n"
        "    elif isinstance(event, events.ItemAdded):\n        pass\n"
        "def g(event):\n    return isinstance(event, ReasoningDelta)\n",
    )
    assert event_ladders({ladder.name: ladder}) == [f"{PACKAGE}.daemon.e:1 f tests AssistantDelta, ItemAdded"]

    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    long = module(f"{PACKAGE}.daemon.l", f"def short():\n    pass\ndef long():\n{body}")
    assert long_functions({long.name: long}) == [
        f"{PACKAGE}.daemon.l:3 long is {MAX_FUNCTION_LINES + 1} lines"
    ]

    private = module(
        f"{PACKAGE}.tui.w",
        "from textual._xterm_parser import XTermParser\n"
        "def f(widget, key):\n    return widget._bindings.key_to_bindings.get(key)\n",
    )
    allowed = module(f"{PACKAGE}.tui.terminal_input", "from textual._xterm_parser import XTermParser\n")
    assert private_textual_uses({m.name: m for m in (private, allowed)}) == [
        f"{PACKAGE}.tui.w:1 imports textual._xterm_parser",
        f"{PACKAGE}.tui.w:3 uses ._bindings",
    ]

    # The chat core reaching a feature, even through another module.
    loop = module(f"{PACKAGE}.chat.loop", "from qwenmem_tui.chat import helper\n")
    helper = module(f"{PACKAGE}.chat.helper", "def f():\n    from qwenmem_tui.features.memory import model\n")
    fake = wired(loop, helper, model)
    assert chat_core_reaching_features(fake) == [
        f"{PACKAGE}.chat.helper imports {PACKAGE}.features.memory.model (via {PACKAGE}.chat.helper)",
        f"{PACKAGE}.chat.loop imports {PACKAGE}.features.memory.model (via {PACKAGE}.chat.helper)",
    ]

    # Memory's library reaching its adapter through a helper, the chat loop for types,
    # a face; the pure chat view is allowed.
    lib = module(
        f"{PACKAGE}.memory.lib",
        "from typing import TYPE_CHECKING\nfrom qwenmem_tui.memory import util\n"
        "from qwenmem_tui.chat import view\nif TYPE_CHECKING:\n    from qwenmem_tui.chat import session\n",
    )
    util = module(f"{PACKAGE}.memory.util", "def f():\n    from qwenmem_tui.features.memory import cli\n")
    guard = module(f"{PACKAGE}.memory.guard", "import qwenmem_tui.mcp_server.server\n")
    fake = wired(
        lib, util, guard,
        *(module(f"{PACKAGE}.{n}", "") for n in ("features.memory.cli", "chat.view", "chat.session", "mcp_server.server")),
    )
    assert libraries_reaching_up(fake) == [
        f"{PACKAGE}.memory.guard imports {PACKAGE}.mcp_server.server (via {PACKAGE}.memory.guard)",
        f"{PACKAGE}.memory.lib imports {PACKAGE}.chat.session (for types)",
        f"{PACKAGE}.memory.lib imports {PACKAGE}.features.memory.cli (via {PACKAGE}.memory.util)",
        f"{PACKAGE}.memory.util imports {PACKAGE}.features.memory.cli (via {PACKAGE}.memory.util)",
    ]

    # Textual in a feature's own package (its core, or a tui/ of its own), not in the
    # feature's face inside the TUI.
    widgetish = module(f"{PACKAGE}.features.stamp.hook", "from textual.widget import Widget\n")
    inner_tui = module(f"{PACKAGE}.features.stamp.tui.screen", "from textual.screen import Screen\n")
    screen = module(f"{PACKAGE}.tui.features.stamp.screen", "from textual.screen import Screen\n")
    found = textual_outside_the_tui({m.name: m for m in (widgetish, inner_tui, screen)})
    assert found == sorted([inner_tui.name, widgetish.name])

    # A feature's core reaching a face (its own tui/ counts), and the runtime reaching one.
    stamp_core = module(
        f"{PACKAGE}.features.stamp.core", "def f():\n    from qwenmem_tui.tui.features.stamp import screen\n"
    )
    runtime = module(f"{PACKAGE}.runtime", "import qwenmem_tui.daemon.server\n")
    server = module(f"{PACKAGE}.daemon.server", "")
    fake = wired(stamp_core, screen, runtime, server)
    assert cores_reaching_faces(fake) == [
        f"{stamp_core.name} imports {screen.name} (via {stamp_core.name})",
        f"{PACKAGE}.runtime imports {server.name} (via {PACKAGE}.runtime)",
    ]

    # The daemon importing a feature package, even its api for types; the shared
    # registry is allowed.
    proxy = module(
        f"{DAEMON}.p",
        "from typing import TYPE_CHECKING\nfrom qwenmem_tui.features import registry\n"
        "if TYPE_CHECKING:\n    from qwenmem_tui.features.stamp.public import Thing\n",
    )
    fake = wired(proxy, module(f"{FEATURES_PACKAGE}.registry", ""), module(f"{FEATURES_PACKAGE}.stamp.public", ""))
    assert daemon_feature_imports(fake) == [f"{DAEMON}.p imports {FEATURES_PACKAGE}.stamp.public"]

    # Faces importing another feature's core: caught unless its registration's api
    # offers the module; a feature's own face may import its own core.
    registration = module(
        f"{PACKAGE}.features.stamp.feature",
        "FEATURE = Feature('stamp', tui='qwenmem_tui.tui.features.stamp.screen:stamp_extension',"
        " api=('public',))\n",
    )
    public = module(f"{PACKAGE}.features.stamp.public", "")
    uses_core = "from qwenmem_tui.features.stamp import core\n"
    own_face = module(f"{PACKAGE}.tui.features.stamp.extension", uses_core)
    tui_face = module(
        f"{PACKAGE}.tui.bar",
        "from qwenmem_tui.features.stamp import core, feature, public\n"
        "from qwenmem_tui.tui.features.stamp import screen\n",
    )
    other_feature_face = module(f"{PACKAGE}.features.other.routes", uses_core)
    fake = wired(registration, public, stamp_core, screen, own_face, tui_face, other_feature_face)
    assert faces_reaching_feature_cores(fake) == [
        f"{other_feature_face.name} imports {stamp_core.name} (not offered by stamp's registration)",
        f"{tui_face.name} imports {stamp_core.name} (not offered by stamp's registration)",
    ]

    # One package, one registration: a package without feature.py ("other"), a
    # registry not listing it, a face ref that is not its own or not there, an api
    # naming no module; a good registration listed in the registry passes.
    registry = module(
        f"{PACKAGE}.features.registry", "from qwenmem_tui.features.stamp import feature as stamp\n"
    )
    fake = wired(registration, public, stamp_core, screen, registry, other_feature_face)
    assert registration_problems(fake) == [
        f"{PACKAGE}.features.other has no feature.py",
        f"{registration.name} offers tui={PACKAGE}.tui.features.stamp.screen:stamp_extension: no such thing",
    ]
    bad = module(
        f"{PACKAGE}.features.stamp.feature",
        "FEATURE = Feature('stamp', routes='qwenmem_tui.features.other.routes:ROUTES', api=('nothing',))\n"
        "SECOND = Feature('stamp2')\n",
    )
    assert registration_problems({**fake, bad.name: bad}) == [
        f"{PACKAGE}.features.other has no feature.py",
        f"{bad.name} makes 2 registrations, not one",
    ]
    bad = module(
        f"{PACKAGE}.features.stamp.feature",
        "FEATURE = Feature('stamp', routes='qwenmem_tui.features.other.routes:ROUTES', api=('nothing',))\n",
    )
    unlisted = module(f"{PACKAGE}.features.registry", "")
    fake = wired(bad, public, stamp_core, unlisted)
    assert registration_problems(fake) == [
        f"{bad.name} is not in the registry",
        f"{bad.name} offers routes={PACKAGE}.features.other.routes:ROUTES: not its own routes",
        f"{bad.name} lists api 'nothing': not a module of its core",
    ]


NAMELESS = (
    f"{PACKAGE}.config", f"{PACKAGE}.cli", f"{PACKAGE}.runtime", f"{PACKAGE}.reads", DAEMON,
)
"""Rule 13's rooms; the SDK (`daemon/client.py`, re-exported by `daemon/__init__.py`)
keeps the contract's methods (`recap_session`, `search_memory`...)."""
SDK = (f"{DAEMON}.client", DAEMON)
CORE_WORDS = frozenset({"model", "mcp", "instructions"})
EXPORT = f"{FEATURES_PACKAGE}.export"


def feature_names() -> frozenset[str]:
    """The features' names, from their packages (`features/<name>/feature.py`)."""
    return frozenset(p.parent.name for p in (PACKAGE_DIR / "features").glob("*/feature.py"))


def _code_words(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, word) for each word of the code's identifiers and strings, docstrings
    and other bare string statements (prose) left out."""
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            text = node.value
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            text = node.name
        elif isinstance(node, ast.arg):
            text = node.arg
        elif isinstance(node, ast.keyword) and node.arg:
            text = node.arg
        elif isinstance(node, ast.alias):
            text = f"{node.name} {node.asname or ''}"
        elif isinstance(node, ast.ImportFrom):
            text = node.module or ""
        else:
            continue
        for word in re.split(r"[^a-z]+", text.lower()):
            yield getattr(node, "lineno", 0), word


def features_named(modules: dict[str, Module], names: frozenset[str]) -> list[str]:
    """Each place a rule-13 module names a feature (the export feature: another one)."""
    found = []
    for name in sorted(modules):
        if _in(name, NAMELESS) and name not in SDK:
            banned = names - CORE_WORDS
        elif _in(name, EXPORT):
            banned = names - CORE_WORDS - {"export"}
        else:
            continue
        found += [f"{name}:{line} names {word}" for line, word in _code_words(modules[name].tree) if word in banned]
    return found


def test_the_core_and_export_name_no_feature() -> None:
    modules = load_modules()
    names = feature_names()
    assert {"memory", "recap", "compaction", "titles", "export"} <= names  # the rule sees them
    assert features_named(modules, names) == []
    planted = {
        name: Module(name, PACKAGE_DIR, ast.parse(source), False)
        for name, source in {
            f"{PACKAGE}.config": '"""memory: prose is fine."""\nmemory_wait_ms = 1  # so is a comment\n',
            f"{DAEMON}.server": "def f(model):\n    return route('/session/recap')\n",
            f"{DAEMON}.client": "def recap_session(): ...\n",
            f"{EXPORT}.formats": "from qwenmem_tui.features.compaction.render import x\nEXPORT = 1\n",
        }.items()
    }
    assert features_named(planted, names) == [
        f"{PACKAGE}.config:2 names memory",
        f"{DAEMON}.server:2 names recap",
        f"{EXPORT}.formats:1 names compaction",
    ]
