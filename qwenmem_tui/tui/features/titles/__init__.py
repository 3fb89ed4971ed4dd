"""Session titles in the TUI (the feature has no face of its own)."""
