"""The key footer, rebuilt only when what it shows changed.

Textual's Footer recomposes on every bindings signal: each focus move and each
busy/idle turn of the chat (which refreshes the bindings so its keys' enabled state
follows). A recompose unmounts every FooterKey and mounts new ones, each restyled
twice (its `compact` default, then the footer's), whatever the keys were before; most
of those signals change nothing on the footer.
"""

from __future__ import annotations

from collections.abc import Hashable

from textual.widgets import Footer


class SteadyFooter(Footer):
    """Footer whose recompose is skipped while its keys, labels and states are unchanged."""

    _shown: Hashable | None = None

    def _what_it_shows(self) -> Hashable:
        """What compose reads, as one comparable value: for each shown binding (and the
        command palette's) its key, display, label, action, group, enabled state and
        tooltips, in order."""
        app = self.app
        return (
            self.compact,
            self.show_command_palette and app.ENABLE_COMMAND_PALETTE,
            tuple(
                (
                    key,
                    app.get_key_display(binding),
                    binding.description,
                    binding.action,
                    binding.group,
                    enabled,
                    tooltip,
                    binding.tooltip,
                )
                for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items()
                if binding.show or key == app.COMMAND_PALETTE_BINDING
            ),
        )

    async def recompose(self) -> None:
        if not self._bindings_ready or not self.is_attached:
            await super().recompose()
            return
        shown = self._what_it_shows()
        if shown == self._shown:
            return
        self._shown = shown
        await super().recompose()
