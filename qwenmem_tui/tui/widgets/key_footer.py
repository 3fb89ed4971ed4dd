"""The key footer: Textual's `Footer`, rebuilt only when the keys it shows change."""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer


class KeyFooter(Footer):
    """Textual's footer recomposes all its keys on every bindings signal (each focus
    change), two style passes per key (~3 ms each): in the suite's apps about half of
    those rebuilds showed the very keys already shown. Such a rebuild is skipped."""

    _shown: tuple[object, ...] | None = None

    def bindings_changed(self, screen: Screen[object]) -> None:
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            shown = tuple(
                (key, binding, enabled, tooltip)
                for key, (_node, binding, enabled, tooltip) in screen.active_bindings.items()
            )
            if shown == self._shown:
                return
            self._shown = shown
        super().bindings_changed(screen)
