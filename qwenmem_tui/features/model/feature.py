"""/model's registration: a TUI face only (the client lists and switches models)."""

from __future__ import annotations

from qwenmem_tui.features.feature import Feature

MODEL = "model"

FEATURE: Feature[object] = Feature(MODEL, tui="qwenmem_tui.tui.features.model.extension:model_extension")
