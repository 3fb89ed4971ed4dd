"""/model and its picker screen (Textual)."""
