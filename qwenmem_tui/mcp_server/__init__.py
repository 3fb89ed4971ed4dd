"""``qwenmem mcp``: one project's long-term memory for any MCP client (contract §8).

``cli`` parses the command and imports nothing heavy; ``server`` builds the stdio
server on the official ``mcp`` SDK around :class:`qwenmem_tui.features.memory.remote.ProjectMemory`.
"""
