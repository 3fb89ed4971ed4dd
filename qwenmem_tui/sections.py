"""Where the features' settings sections come from, apart from `config.py`.

The feature registry hands its sections in here (`register_sections`); `config.py`
reads them when it composes the settings model. The base never imports a feature:
it is handed them. Kept out of `config.py` so that handing them in (every `qwenmem`
command reads the registry, `--help` too) loads no pydantic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

SectionSource = Callable[[], Sequence[object]]
"""Returns `config.SettingsSection`s, read at each composition (a registry a test
changed composes anew)."""

_sources: list[SectionSource] = []


def register_sections(source: SectionSource) -> None:
    """Add a source of sections (the feature registry adds its own once)."""
    if source not in _sources:
        _sources.append(source)


def registered_sections() -> tuple[object, ...]:
    return tuple(section for source in _sources for section in source())
