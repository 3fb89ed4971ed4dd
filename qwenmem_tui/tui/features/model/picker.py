"""The /model picker: the endpoint's models, filtered as you type, the current one marked."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Input, LoadingIndicator, OptionList, Static
from textual.widgets.option_list import Option

from qwenmem_tui.llm.errors import LLMError
from qwenmem_tui.tui.screens.picker import PickerScreen
from qwenmem_tui.tui.terminal_text import terminal_safe


class ModelPicker(PickerScreen):
    """Dismisses with the chosen model id, or None (Esc, or the list failed: then
    `on_error` got the one line to show)."""

    DEFAULT_CSS = """
    ModelPicker { align: center middle; }
    ModelPicker #model-picker {
        width: 80%; max-width: 80; height: 80%;
        padding: 1 2; border: round $primary; background: $surface;
    }
    ModelPicker #model-title { margin: 0 0 1 0; }
    ModelPicker #model-filter { margin: 0 0 1 0; }
    ModelPicker OptionList { height: 1fr; border: none; background: $surface; }
    ModelPicker LoadingIndicator { height: 1fr; }
    ModelPicker #model-help { margin: 1 0 0 0; color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "close", "Close", id="model.close")]

    def __init__(
        self,
        load: Callable[[], Awaitable[list[str]]],
        current: str,
        on_error: Callable[[str], None],
    ) -> None:
        super().__init__()
        self._load = load
        self._current = current
        self._on_error = on_error
        self._models: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="model-picker"):
            yield Static(
                Content.assemble(("Switch model", "bold"), (f"  now: {terminal_safe(self._current)}", "dim")),
                id="model-title",
            )
            yield Input(placeholder="Type to filter, or a model name", id="model-filter")
            yield LoadingIndicator()  # a spinner until the endpoint answers
            yield OptionList(id="models")
            yield Static(Content("enter switch · esc close"), id="model-help")

    def on_mount(self) -> None:
        self.query_one(OptionList).display = False
        self.load_models()

    @work(exclusive=True, group="model-list")
    async def load_models(self) -> None:
        try:
            self._models = await self._load()
        except LLMError as exc:
            self._on_error(f"Could not list the endpoint's models: {exc.message}")
            self.dismiss(None)
            return
        self.query_one(LoadingIndicator).display = False
        self.query_one(OptionList).display = True
        self._show(self.query_one(Input).value)

    def _show(self, query: str) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        words = query.lower().split()
        matching = [m for m in self._models if all(word in m.lower() for word in words)]
        if not matching:
            hint = "No model matches: Enter switches to the name typed." if query.strip() else (
                "The endpoint lists no models: type a name and press Enter."
            )
            options.add_option(Option(Content(hint), disabled=True))
            return
        options.add_options(
            Option(
                Content.assemble(terminal_safe(m), ("  (current)" if m == self._current else "", "dim")),
                id=m,
            )
            for m in matching
        )
        current = matching.index(self._current) if self._current in matching else 0
        options.highlighted = current

    @on(Input.Changed, "#model-filter")
    def _filter(self, event: Input.Changed) -> None:
        if self._models or not self.query_one(LoadingIndicator).display:
            self._show(event.value)

    @on(Input.Submitted, "#model-filter")
    def _submitted(self, event: Input.Submitted) -> None:
        chosen = self.highlighted_id() if self.query_one(OptionList).display else None
        if chosen is None and event.value.strip():
            chosen = event.value.strip()  # a name the endpoint does not list
        if chosen is not None:
            self.dismiss(chosen)
