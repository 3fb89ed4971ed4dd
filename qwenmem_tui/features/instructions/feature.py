"""Project instructions' registration: its prompt part, the files read into every
system prompt (`Feature.prompt`); the TUI shows them (/context)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from qwenmem_tui.features.feature import Feature, FeatureKey

if TYPE_CHECKING:
    from qwenmem_tui.features.instructions.files import Instructions

INSTRUCTIONS = "instructions"
INSTRUCTIONS_PROMPT: FeatureKey[Instructions] = FeatureKey(INSTRUCTIONS)
"""The instruction files in force: what it added to the runtime's system prompt."""


def _prompt(root: Path, cwd: Path, home: Path) -> Instructions:
    from qwenmem_tui.features.instructions.files import load_instructions

    return load_instructions(root, cwd, home)


FEATURE: Feature[object] = Feature(
    INSTRUCTIONS,
    prompt=_prompt,
    tui="qwenmem_tui.tui.features.instructions.extension:instructions_extension",
    api=("files",),  # the instruction block's reading (instructions_in), for tests
)
