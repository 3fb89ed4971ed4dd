"""HTTP daemon (``qwenmem serve``) and its Python SDK.

Only the SDK is exported here: it needs httpx alone, while the server needs the
``server`` extra (Starlette, uvicorn) and is imported by ``qwenmem serve`` on demand.
The SDK itself loads on first use (PEP 562 ``__getattr__``): every ``qwenmem`` command
imports ``daemon.cli`` to offer ``serve``, and httpx is not needed to print help.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qwenmem_tui.daemon.client import (
        Capabilities,
        DaemonClient,
        DaemonError,
        DaemonSessionClient,
        PromptResult,
        SessionRecap,
        SessionSummary,
        StreamEvent,
    )

__all__ = [
    "Capabilities",
    "DaemonClient",
    "DaemonError",
    "DaemonSessionClient",
    "PromptResult",
    "SessionRecap",
    "SessionSummary",
    "StreamEvent",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("qwenmem_tui.daemon.client"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
