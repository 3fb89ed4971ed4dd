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


async def test_context_names_each_refused_file_and_why(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp], project: Path, tmp_path: Path
) -> None:
    """Issue 36 item 1 in the real app. Variants: a link out of the project, a FIFO, a
    file holding a private key; the readable file beside them still reaches the prompt
    and no refused text does."""
    import os

    outside = tmp_path / "outside-secret.txt"
    outside.write_text("root:$6$hashedvalue:19000")
    os.symlink(outside, project / "AGENTS.md")
    os.mkfifo(project / "QWEN.md")
    sub = project / "pkg"
    sub.mkdir()
    (sub / "CLAUDE.md").write_text("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\n")
    (sub / "AGENTS.md").write_text("Use uv.")
    fake.script(Reply("ok"))
    app = make_app(cwd=sub, extensions=[instructions_extension])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        notices = "\n".join(str(item.render()) for item in app.screen.query(InfoItem))
        assert "AGENTS.md was not read" in notices
        await send(pilot, "hello")
        await settle(pilot)
        system = fake.chat_requests[0]["messages"][0]["content"]
        assert "Use uv." in system
        assert "hashedvalue" not in system and "MIIEow" not in system
        await send(pilot, "/context")
        await settle(pilot)
        listing = str(app.screen.query(InfoItem).last().render())
    assert "pkg/AGENTS.md  (7 characters)" in listing
    refused = listing.split("Refused (not in the prompt):", 1)[1]
    assert "AGENTS.md  (" in refused and "outside the project root" in refused
    assert "QWEN.md  (" in refused and "not a regular file" in refused
    assert "pkg/CLAUDE.md  (" in refused and "private key" in refused
