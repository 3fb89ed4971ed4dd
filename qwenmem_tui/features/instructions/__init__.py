"""Project instruction files (AGENTS.md, QWEN.md, CLAUDE.md) read into the system prompt."""
