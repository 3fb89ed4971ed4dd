"""Project instructions' registration: the runtime puts the files into every system
prompt (`runtime.system_prompt_for`); the TUI shows them (/context)."""

from __future__ import annotations

from qwenmem_tui.features.feature import Feature

INSTRUCTIONS = "instructions"

FEATURE = Feature(
    INSTRUCTIONS,
    tui="qwenmem_tui.tui.features.instructions.extension:instructions_extension",
    api=("files",),  # what the TUI's context shows (the runtime reads the files)
)
