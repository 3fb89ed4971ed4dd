"""The question before a message holding a secret is sent: send it redacted, edit, or
cancel. The raw text is never sent nor stored: "send" sends the redacted text, and that
is what the session history keeps."""

from __future__ import annotations

from enum import StrEnum

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from qwenmem_tui.text import one_line
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


class SecretConfirm(ModalScreen[SecretChoice]):
    """Dismisses with the user's choice; Esc cancels."""

    DEFAULT_CSS = """
    SecretConfirm { align: center middle; }
    SecretConfirm #secret {
        width: 80%; max-width: 100; height: auto;
        padding: 1 2; border: round $warning; background: $surface;
    }
    SecretConfirm #secret-title { margin: 0 0 1 0; }
    SecretConfirm #secret-preview { margin: 0 0 1 0; color: $text-muted; }
    SecretConfirm OptionList { height: auto; border: none; background: $surface; }
    SecretConfirm #secret-help { margin: 1 0 0 0; color: $text-muted; }
    """
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

    def compose(self) -> ComposeResult:
        what = ", ".join(dict.fromkeys(self.kinds)) or "a secret"
        preview = one_line(terminal_safe(self.redacted))
        if len(preview) > PREVIEW_CHARS:
            preview = preview[: PREVIEW_CHARS - 1] + "…"
        with Vertical(id="secret"):
            yield Static(
                Content.assemble(
                    ("This message holds a secret ", "bold"), (f"({terminal_safe(what)})", ""),
                    ("; it would go to the model and into the session history.", ""),
                ),
                id="secret-title",
            )
            yield Static(Content(preview), id="secret-preview")
            yield OptionList(
                *(Option(Content(f"{key}  {label}"), id=choice.value) for choice, key, label in CHOICES),
                id="secret-choices",
            )
            yield Static(Content("enter choose · esc cancel"), id="secret-help")

    def on_mount(self) -> None:
        self.query_one(OptionList).highlighted = 0

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(SecretChoice(str(event.option.id)))

    def action_choose(self, choice: str) -> None:
        self.dismiss(SecretChoice(choice))
