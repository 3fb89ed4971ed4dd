"""Memory in the TUI: the extension, the /memory screen and its edit dialog, the receipt widget (Textual)."""
