"""Choosing the chat model (/model); the client's part lives in llm/."""
