"""Each feature's TUI face, one package per feature (`tui/features/<name>/`).

The feature itself (hooks, tools, settings use, daemon routes, MCP tools) lives in
`qwenmem_tui/features/<name>/`, which knows nothing of Textual; its registration names
the face here by reference (`Feature(tui="qwenmem_tui.tui.features.<name>.extension:...")`),
so the core never imports it and Textual stays inside `tui/`.
"""
