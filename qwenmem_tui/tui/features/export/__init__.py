"""Export in the TUI: /copy and /export (Textual)."""
