"""Project instruction files in the real app: they reach the model's system prompt,
/context lists them, a long one says it was cut."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from qwenmem_tui.features.instructions.files import FILE_CAP_CHARS
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.instructions.extension import instructions_extension
from qwenmem_tui.tui.widgets.plain_items import InfoItem

from .conftest import SIZE, send, settle


async def test_instruction_files_shape_the_prompt_and_are_listed(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp], project: Path
) -> None:
    (project / "AGENTS.md").write_text("Answer every question in French.")
    sub = project / "pkg"
    sub.mkdir()
    (sub / "CLAUDE.md").write_text("x" * (FILE_CAP_CHARS + 10))
    fake.script(Reply("Bonjour !"))
    app = make_app(cwd=sub, extensions=[instructions_extension])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        notices = [str(item.render()) for item in app.screen.query(InfoItem)]
        assert any("pkg/CLAUDE.md is long" in text for text in notices)
        await send(pilot, "hello")
        await settle(pilot)
        system = fake.chat_requests[0]["messages"][0]
        assert system["role"] == "system"
        assert "<project-instructions>" in system["content"]
        assert "## AGENTS.md\nAnswer every question in French." in system["content"]
        await send(pilot, "/context")
        await settle(pilot)
        listing = str(app.screen.query(InfoItem).last().render())
        assert "AGENTS.md  (32 characters)" in listing
        assert f"pkg/CLAUDE.md  ({FILE_CAP_CHARS + 10} characters, cut to {FILE_CAP_CHARS})" in listing
    assert (project / "AGENTS.md").read_text() == "Answer every question in French."
