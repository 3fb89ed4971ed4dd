"""Export's registration: its TUI face (/copy, /export); `qwenmem sessions export` (the
CLI) writes the same file through `formats.export_session`, its api."""

from __future__ import annotations

from qwenmem_tui.features.feature import Feature

EXPORT = "export"

FEATURE = Feature(
    EXPORT,
    tui="qwenmem_tui.tui.features.export.extension:export_extension",
    api=("formats",),
)
