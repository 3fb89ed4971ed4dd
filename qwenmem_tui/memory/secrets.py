"""Moved to the base layer: ``qwenmem_tui/secrets.py`` (storage and the file tools use
it too). This name stays for branches still importing it; import the base module."""

from qwenmem_tui.secrets import REDACTED, contains_secret, key_holds_secret, load, preload, redact, scan

__all__ = ["REDACTED", "contains_secret", "key_holds_secret", "load", "preload", "redact", "scan"]
