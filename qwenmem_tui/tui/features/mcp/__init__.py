"""MCP in the TUI: /mcp and the permission prompt (Textual)."""
