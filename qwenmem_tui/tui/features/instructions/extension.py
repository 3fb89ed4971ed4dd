"""Project instruction files in the app: /context lists the ones in force, and a file
cut for length says so once when the app opens (`qwenmem_tui.features.instructions.files`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qwenmem_tui.tui.extensions import AppContext, Extension, ExtensionFactory
from qwenmem_tui.tui.host import SlashCommand
from qwenmem_tui.features.instructions.feature import INSTRUCTIONS_PROMPT
from qwenmem_tui.features.instructions.files import Instructions

if TYPE_CHECKING:
    from qwenmem_tui.tui.host import Host


async def _build(context: AppContext) -> Extension:
    instructions = context.prompt_part(INSTRUCTIONS_PROMPT) or Instructions()
    pending = instructions.notices()  # said once, under the first session shown

    def opened(app: Host, resumed: bool) -> None:
        for notice in pending:
            app.show_info(notice)
        pending.clear()

    def show(app: Host, args: str) -> None:
        app.show_info(instructions.describe())

    return Extension(
        name="instructions",
        commands=(
            SlashCommand("context", "The instruction files (AGENTS.md, QWEN.md, CLAUDE.md) in force", show),
        ),
        on_session_opened=opened,
    )


instructions_extension = ExtensionFactory("instructions", _build)
"""Always on: the files are read by the runtime whatever the features."""
