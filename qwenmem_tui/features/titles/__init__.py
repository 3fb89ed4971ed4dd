"""Session titles from the fast model after the first exchange."""
