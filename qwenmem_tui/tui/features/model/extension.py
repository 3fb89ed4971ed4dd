"""/model: switch the chat model mid-session, remembered with the session.

A switch is stored as a display item (`model_switch`, meta `{"model": NAME}`), so it
shows in the conversation where it happened and a resumed session chats with the
model it was left on; a session without one uses the configured `llm.model`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qwenmem_tui.tui.extensions import AppContext, Extension, ExtensionFactory
from qwenmem_tui.tui.host import SlashCommand

if TYPE_CHECKING:
    from qwenmem_tui.chat.session import ChatSession
    from qwenmem_tui.tui.host import Host

MODEL_ITEM = "model_switch"


def session_model(session: ChatSession) -> str | None:
    """The model the session was last switched to, if it ever was (held in memory or not)."""
    item = session.latest(MODEL_ITEM)
    if item is not None and isinstance(item.meta.get("model"), str):
        return str(item.meta["model"])
    return None


async def _build(context: AppContext) -> Extension:
    configured = context.llm.model  # what a session without a switch chats with

    async def switch(app: Host, model: str) -> None:
        if model == app.llm.model:
            app.show_info(f"Already chatting with {model}.")
            return
        app.llm.use_model(model)
        app.model_changed()
        await app.add_display_item(MODEL_ITEM, f"Model: {model}", {"model": model})

    async def command(app: Host, args: str) -> None:
        if args:
            await switch(app, args.split()[0])
            return
        from qwenmem_tui.tui.features.model.picker import ModelPicker

        async def chosen(model: str | None) -> None:
            if model:
                await switch(app, model)

        app.push_screen(ModelPicker(app.llm.list_models, app.llm.model, app.show_error), chosen)

    def opened(app: Host, resumed: bool) -> None:
        model = session_model(app.session) or configured
        if model != app.llm.model:
            app.llm.use_model(model)
            app.model_changed()

    return Extension(
        name="model",
        commands=(SlashCommand("model", "Switch the chat model (no name: pick from the endpoint's list)", command, "[name]"),),
        on_session_opened=opened,
    )


model_extension = ExtensionFactory("model", _build)
