"""Project instructions in the TUI: /context (Textual)."""
