"""One line under the input: model, what the app is doing, session title."""

from __future__ import annotations

from textual.app import RenderResult
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from qwenmem_tui.tui.terminal_text import terminal_safe

STATE_LABELS = {
    "idle": "idle",
    "responding": "responding…",
    "running_tool": "running tool…",
    "recap": "generating recap…",
    "compacting": "compacting history…",
}


class StatusLine(Widget):
    """Renders the app's `state` and the session it is showing."""

    model: reactive[str] = reactive("")
    state: reactive[str] = reactive("idle")
    title: reactive[str] = reactive("")
    queued: reactive[int] = reactive(0)
    thinking: reactive[bool] = reactive(False)
    """The model streams reasoning (never shown) before its answer."""
    review: reactive[int] = reactive(0)
    """Memories held for review (quarantined): a person should approve or forget them."""

    def watch_state(self, old: str, new: str) -> None:
        self.set_class(new != "idle", "-busy")

    def _state_label(self) -> str:
        if self.thinking and self.state == "responding":
            return "thinking…"
        return STATE_LABELS.get(self.state, self.state)

    def render(self) -> RenderResult:
        parts: list[str | tuple[str, str] | Content] = [
            (terminal_safe(self.model), "bold"),
            " · ",
            (self._state_label(), "$accent" if self.state != "idle" else ""),
        ]
        if self.queued:
            parts += [" · ", (f"{self.queued} queued", "$warning")]
        if self.review:
            parts += [" · ", (review_label(self.review), "$warning")]
        parts += [" · ", terminal_safe(self.title or "new session")]
        return Content.assemble(*parts)


def review_label(count: int) -> str:
    """ "1 memory awaits review", "3 memories await review"."""
    return f"{count} memory awaits review" if count == 1 else f"{count} memories await review"
