"""Compaction in the TUI: /compact, /pin, /unpin and the marker widget (Textual)."""
