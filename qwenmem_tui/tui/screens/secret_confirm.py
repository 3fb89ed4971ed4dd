"""The question before a message holding a secret is sent: send it redacted, edit, or
cancel. The raw text is never sent nor stored: "send" sends the redacted text, and that
is what the session history keeps."""

from __future__ import annotations

from enum import StrEnum

from textual.binding import Binding
from textual.content import Content

from qwenmem_tui.text import one_line
from qwenmem_tui.tui.screens.choice import ChoiceScreen
from qwenmem_tui.tui.terminal_text import terminal_safe

PREVIEW_CHARS = 300


class SecretChoice(StrEnum):
    SEND_REDACTED = "send"
    EDIT = "edit"
    CANCEL = "cancel"


CHOICES = (
    (SecretChoice.SEND_REDACTED, "1", "Send it with the secret replaced by [REDACTED]"),
    (SecretChoice.EDIT, "2", "Edit the message"),
    (SecretChoice.CANCEL, "3", "Cancel: send nothing"),
)


class SecretConfirm(ChoiceScreen[SecretChoice]):
    """Dismisses with the user's choice; Esc cancels."""

    BINDINGS = [
        Binding("escape", "choose('cancel')", "Cancel", id="secret.cancel"),
        Binding("1,r", "choose('send')", "Send redacted", show=False, id="secret.send_redacted"),
        Binding("2,e", "choose('edit')", "Edit", show=False, id="secret.edit"),
        Binding("3", "choose('cancel')", show=False),
    ]

    def __init__(self, redacted: str, kinds: list[str]) -> None:
        super().__init__()
        self.redacted = redacted
        self.kinds = kinds

    def choices(self) -> tuple[tuple[SecretChoice, str, str], ...]:
        return CHOICES

    def title_content(self) -> Content:
        what = ", ".join(dict.fromkeys(self.kinds)) or "a secret"
        return Content.assemble(
            ("This message holds a secret ", "bold"), (f"({terminal_safe(what)})", ""),
            ("; it would go to the model and into the session history.", ""),
        )

    def detail_content(self) -> Content:
        preview = one_line(terminal_safe(self.redacted))
        if len(preview) > PREVIEW_CHARS:
            preview = preview[: PREVIEW_CHARS - 1] + "…"
        return Content(preview)
