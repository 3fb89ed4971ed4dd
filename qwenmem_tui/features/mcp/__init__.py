"""The MCP client: configured servers, their tools for the model, and the permission rules."""
