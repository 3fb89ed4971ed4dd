"""The TUI extensions a configuration turns on, from the feature registry.

Each feature offers its TUI extension in its registration (`Feature.tui`, an
`ExtensionFactory` in its own `tui/features/<name>/` package); this module loads them,
in registry order. Read at call time, so a registry with one more line (a new
feature, or a test's copy) shows here with nothing else edited.
"""

from __future__ import annotations

from qwenmem_tui.config import Settings
from qwenmem_tui.features import registry
from qwenmem_tui.features.assembly import enabled_features
from qwenmem_tui.features.feature import load_face
from qwenmem_tui.tui.extensions import ExtensionFactory


def extensions() -> list[ExtensionFactory]:
    """Every feature's TUI extension, in registry order (hook order is the assembly's)."""
    return [
        load_face(feature.tui, ExtensionFactory)
        for feature in registry.FEATURES
        if feature.tui is not None
    ]


def default_extensions(settings: Settings) -> list[ExtensionFactory]:
    """The extensions whose features this configuration turns on, and those that are
    always there (/mcp saying how to add a server)."""
    names = enabled_features(settings)
    return [
        factory
        for factory in extensions()
        if factory.always or frozenset(factory.features) <= names
    ]
