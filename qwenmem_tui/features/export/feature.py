"""Export's registration: its TUI face (/copy, /export) and `qwenmem sessions export`
(its CLI), which write the same file (`formats.export_session`)."""

from __future__ import annotations

from qwenmem_tui.features.feature import Feature

EXPORT = "export"

FEATURE: Feature[object] = Feature(
    EXPORT,
    tui="qwenmem_tui.tui.features.export.extension:export_extension",
    cli="qwenmem_tui.features.export.cli:register",
    api=("formats", "files"),  # a session's text; the private file any command writes
)
