"""Which LLM backend a run uses: the configured endpoint or the bundled local model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings

Provider = Literal["openai", "local"]

BASE_URL_ENV = "QWENMEM_BASE_URL"


def resolve_provider(settings: Settings, env: Mapping[str, str]) -> Provider:
    """`llm.provider` made concrete.

    "auto" means: an endpoint configured anywhere (config file or `QWENMEM_BASE_URL`)
    wins, so adding a `base_url` is all it takes to leave the local model; with none,
    a fresh machine without a key or network still gets a working chat.
    `env` is checked too, so the answer holds even for settings built without it.
    """
    choice = settings.llm.provider
    if choice == "openai" or choice == "local":
        return choice
    endpoint = settings.llm.base_url or env.get(BASE_URL_ENV, "")
    return "openai" if endpoint.strip() else "local"
