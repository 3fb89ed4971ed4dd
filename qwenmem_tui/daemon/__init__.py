"""HTTP daemon (``qwenmem serve``) and its Python SDK.

Only the SDK is imported here: it needs httpx alone, while the server needs the
``server`` extra (Starlette, uvicorn) and is imported by ``qwenmem serve`` on demand.
"""

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
