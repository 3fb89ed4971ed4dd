"""``qwenmem acp``: qwenmem as an Agent Client Protocol agent (Zed, JetBrains, Neovim,
toad), a face on the runtime like the daemon and the MCP server (`agent.py`)."""
