"""docs/architecture.md matches the code: every path it names exists.

The map is what a newcomer reads first; a file that moved or a module that was renamed
leaves it pointing at nothing. A path with a slash is looked up from the repository,
the package and its feature rooms; a bare module name in the layout (`access.py`) must
be some module of the package. The worked example's `stamp` feature is a hypothetical
one (it runs as tests/tui/test_adding_a_feature.py) and `<name>` a placeholder.
"""

from __future__ import annotations

import re
from pathlib import Path

import qwenmem_tui

PACKAGE = Path(qwenmem_tui.__file__).parent
REPO = PACKAGE.parent
DOC = REPO / "docs" / "architecture.md"
ROOTS = (
    REPO,
    PACKAGE,
    PACKAGE / "features",
    PACKAGE / "tui",
    PACKAGE / "tui" / "features",
    PACKAGE / "daemon",
    REPO / "tests",
)
SLASHED = re.compile(r"(?<![\w./<>-])((?:[\w.-]+/)+[\w.-]*)")
ROOMS = {"qwenmem_tui", "features", "tui", "daemon", "mcp_server", "acp", "chat", "llm",
         "storage", "testing", "tests", "docs", "snapshots", "bench", "memory", "compaction",
         "recap", "mcp", "titles", "instructions", "export", "model", "screens", "widgets"}
"""First segments of the repository's paths (`debug/`, `home/` are the user's home)."""
MODULE = re.compile(r"(?<![\w/.-])([a-z_][a-z0-9_]*\.(?:py|tcss))\b")
FILE_SUFFIXES = (".py", ".tcss", ".md", ".toml", ".svg")


def _as_file(token: str) -> str | None:
    """A repository path of `token`: itself, or the module of a `module.attribute`
    reference (`tui/host.Host` -> `tui/host.py`); None when it is no such path."""
    token = token.rstrip(".")
    if token.split("/")[0] not in ROOMS or "stamp" in token or "<" in token:
        return None
    head, _, last = token.rpartition("/")
    if last and "." in last and not last.endswith(FILE_SUFFIXES):
        return f"{head}/{last.split('.')[0]}.py"
    return token


def named_paths(text: str) -> tuple[set[str], set[str]]:
    """The slashed paths and the bare module names the document names."""
    slashed = {path for path in map(_as_file, SLASHED.findall(text)) if path is not None}
    bare = {name for name in MODULE.findall(text) if "stamp" not in name}
    return slashed, bare


def exists(path: str) -> bool:
    return any((root / path).exists() for root in ROOTS)


def test_every_path_the_architecture_names_exists() -> None:
    slashed, bare = named_paths(DOC.read_text(encoding="utf-8"))
    files = {p.name for d in (PACKAGE, REPO / "tests") for p in d.rglob("*") if p.suffix in FILE_SUFFIXES}
    assert len(slashed) > 30 and len(bare) > 30  # the parser sees the map
    missing = sorted(p for p in slashed if not exists(p)) + sorted(b for b in bare if b not in files)
    assert missing == []


def test_the_check_catches_a_path_that_is_not_there() -> None:
    slashed, bare = named_paths("see `features/memory/nowhere.py` and gone_module.py")
    assert not exists(next(iter(slashed))) and "gone_module.py" in bare


def test_every_fault_in_the_readme_table_is_backed_by_tests_that_exist() -> None:
    """README's "Faults tried" table: each row names its tests by file and function
    (issue 41), and each named test is defined in that file."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("### Faults tried") : readme.index("\n## Benchmarks")]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| fault ")]
    assert len(rows) >= 10
    for row in rows:
        cited = re.findall(r"\]\((tests/[^)]+)\): ((?:`test_\w+`(?:, )?)+)", row)
        assert cited, f"a fault without a named test: {row[:80]}"
        for path, names in cited:
            source = (REPO / path).read_text(encoding="utf-8")
            for name in re.findall(r"`(test_\w+)`", names):
                assert re.search(rf"def {name}\(", source), f"{path} has no {name}"
