"""The display items memory stores in a session (read by its registration and its
receipts alike, without either importing the other)."""

from __future__ import annotations

RECEIPT_ITEM = "memory_receipt"
"""A reply's receipt (`⌁ N memories`): what its requests carried."""
