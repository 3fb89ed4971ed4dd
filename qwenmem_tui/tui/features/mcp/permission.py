"""The question an MCP tool asks before it runs: allow once, always here, or deny."""

from __future__ import annotations

from textual.binding import Binding
from textual.content import Content

from qwenmem_tui.features.mcp.permissions import Decision, PermissionRequest
from qwenmem_tui.features.mcp.tools import describe_arguments
from qwenmem_tui.tui.screens.choice import ChoiceScreen
from qwenmem_tui.tui.terminal_text import terminal_safe

CHOICES = (
    (Decision.ONCE, "1", "Allow once"),
    (Decision.ALWAYS, "2", "Always allow this tool in this project"),
    (Decision.DENY, "3", "Deny"),
)


class PermissionScreen(ChoiceScreen[Decision]):
    """Dismisses with the user's decision, or None on Esc (the turn is cancelled)."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel the turn", id="permission.cancel"),
        Binding("1", "choose('once')", show=False),
        Binding("2", "choose('always')", show=False),
        Binding("3", "choose('deny')", show=False),
        Binding("y", "choose('once')", show=False),
        Binding("n", "choose('deny')", show=False),
    ]
    HELP = "enter choose · esc cancel the turn"

    def __init__(self, request: PermissionRequest) -> None:
        super().__init__()
        self.request = request

    def choices(self) -> tuple[tuple[Decision, str, str], ...]:
        return CHOICES

    def title_content(self) -> Content:
        request = self.request
        return Content.assemble(
            ("Run ", ""),
            (terminal_safe(request.tool), "bold"),
            (" of MCP server ", ""),
            (terminal_safe(request.server), "bold"),
            ("?", ""),
        )

    def detail_content(self) -> Content:
        request = self.request
        description = request.description.strip()
        detail = terminal_safe(description.splitlines()[0]) if description else ""
        arguments = terminal_safe(describe_arguments(request.arguments))
        claim = "the server says this tool only reads (its word, not checked)" if request.says_read_only else ""
        return Content("\n".join(line for line in (detail, f"arguments: {arguments}", claim) if line))

    def action_cancel(self) -> None:
        self.dismiss(None)
