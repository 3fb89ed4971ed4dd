"""Memory's adapter: the registration (`feature.py`), its CLI, routes, MCP tools, hooks
and exchange over the library in `qwenmem_tui.memory` (which knows no face)."""
