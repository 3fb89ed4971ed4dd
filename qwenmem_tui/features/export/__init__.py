"""A stored session written out as Markdown or JSON (/export, qwenmem sessions export)."""
