"""The question an MCP tool asks before it runs: allow once, always here, or deny."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from qwenmem_tui.features.mcp.permissions import Decision, PermissionRequest
from qwenmem_tui.features.mcp.tools import describe_arguments
from qwenmem_tui.tui.terminal_text import terminal_safe

CHOICES = (
    (Decision.ONCE, "1", "Allow once"),
    (Decision.ALWAYS, "2", "Always allow this tool in this project"),
    (Decision.DENY, "3", "Deny"),
)


class PermissionScreen(ModalScreen[Decision | None]):
    """Dismisses with the user's decision, or None on Esc (the turn is cancelled)."""

    DEFAULT_CSS = """
    PermissionScreen { align: center middle; }
    PermissionScreen #permission {
        width: 80%; max-width: 100; height: auto;
        padding: 1 2; border: round $warning; background: $surface;
    }
    PermissionScreen #permission-title { margin: 0 0 1 0; }
    PermissionScreen #permission-detail { margin: 0 0 1 0; color: $text-muted; }
    PermissionScreen OptionList { height: auto; border: none; background: $surface; }
    PermissionScreen #permission-help { margin: 1 0 0 0; color: $text-muted; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Cancel the turn", id="permission.cancel"),
        Binding("1", "choose('once')", show=False),
        Binding("2", "choose('always')", show=False),
        Binding("3", "choose('deny')", show=False),
        Binding("y", "choose('once')", show=False),
        Binding("n", "choose('deny')", show=False),
    ]

    def __init__(self, request: PermissionRequest) -> None:
        super().__init__()
        self.request = request

    def compose(self) -> ComposeResult:
        request = self.request
        with Vertical(id="permission"):
            yield Static(
                Content.assemble(
                    ("Run ", ""),
                    (terminal_safe(request.tool), "bold"),
                    (" of MCP server ", ""),
                    (terminal_safe(request.server), "bold"),
                    ("?", ""),
                ),
                id="permission-title",
            )
            detail = terminal_safe(request.description.strip().splitlines()[0]) if request.description.strip() else ""
            arguments = terminal_safe(describe_arguments(request.arguments))
            yield Static(
                Content("\n".join(line for line in (detail, f"arguments: {arguments}") if line)),
                id="permission-detail",
            )
            yield OptionList(
                *(Option(Content(f"{key}  {label}"), id=decision.value) for decision, key, label in CHOICES),
                id="permission-choices",
            )
            yield Static(Content("enter choose · esc cancel the turn"), id="permission-help")

    def on_mount(self) -> None:
        self.query_one(OptionList).highlighted = 0

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.dismiss(Decision(event.option.id))

    def action_choose(self, decision: str) -> None:
        self.dismiss(Decision(decision))

    def action_cancel(self) -> None:
        self.dismiss(None)
