"""The recap in the TUI: the controller that fires it and the recap line widget (Textual)."""
