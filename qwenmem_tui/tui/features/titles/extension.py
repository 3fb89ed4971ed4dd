"""Session titles from the fast model in the app: the core feature, no face of its own.

The hook (`qwenmem_tui/features/titles/hook.py`) stores the title; the /resume picker, `qwenmem
sessions` and `GET /sessions` read it from the store. The app assembles only the
features its extensions present, so this one presents it.
"""

from __future__ import annotations

from qwenmem_tui.features.titles.feature import TITLES
from qwenmem_tui.tui.extensions import AppContext, Extension, ExtensionFactory


async def _build(context: AppContext) -> Extension:
    return Extension(name="titles")


titles_extension = ExtensionFactory(name="titles", build=_build, features=frozenset({TITLES}))
