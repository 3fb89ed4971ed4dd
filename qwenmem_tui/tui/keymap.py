"""`[keys]` of the config checked like every other table: binding ids and key names.

Textual takes any string as a key and any id in a keymap, so a typo (`app.qiut`,
`ctrl+nonsense`) would silently leave a key unbound. The ids are those of qwenmem's own
bindings; the names those Textual can produce. The check lives in the TUI because
both lists come from Textual and the widgets, and it runs when the app is built, before
anything is drawn, so the CLI reports it as the one-line config error it is (exit 2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from textual.binding import Binding, BindingType
from textual.keys import REPLACED_KEYS, Keys, key_to_character

from qwenmem_tui.config import ConfigError, Settings

MODIFIERS = frozenset({"ctrl", "shift", "alt", "meta", "super", "hyper"})
_NAMED_KEYS = frozenset(key.value for key in Keys if "+" not in key.value) | {"space"}


def binding_ids(app_bindings: Iterable[BindingType] = ()) -> list[str]:
    """Every id a `[keys]` entry may name: the app's, its screens' and widgets' bindings,
    and those each feature's TUI extension declares (`ExtensionFactory.keys`)."""
    # Imported only when [keys] has entries: the extensions pull in the memory service.
    from qwenmem_tui.tui.default_extensions import extensions
    from qwenmem_tui.tui.screens.chat import ChatScreen
    from qwenmem_tui.tui.screens.resume import ResumeScreen
    from qwenmem_tui.tui.screens.secret_confirm import SecretConfirm
    from qwenmem_tui.tui.widgets.prompt import PromptInput

    owners: list[Iterable[BindingType]] = [
        app_bindings,
        ChatScreen.BINDINGS,
        PromptInput.BINDINGS,
        ResumeScreen.BINDINGS,
        SecretConfirm.BINDINGS,
        *(factory.keys() for factory in extensions() if factory.keys is not None),
    ]
    return sorted(
        {b.id for bindings in owners for b in bindings if isinstance(b, Binding) and b.id}
    )


def valid_key(key: str) -> bool:
    """True for a key Textual can report: `ctrl+q`, `f2`, `slash`, `alt+enter`, `a`."""
    *modifiers, name = key.strip().lower().split("+")
    if not name or any(m not in MODIFIERS for m in modifiers):
        return False
    return (
        len(name) == 1
        or name in _NAMED_KEYS
        or name in REPLACED_KEYS
        or key_to_character(name) is not None
    )


def checked_keymap(settings: Settings, app_bindings: Iterable[BindingType] = ()) -> dict[str, str]:
    """`settings.keys` when every id and key name is known; else ConfigError naming it."""
    keys: Mapping[str, str] = settings.keys
    if not keys:
        return {}
    ids = binding_ids(app_bindings)
    where = settings.source or "config"
    for binding_id, value in keys.items():
        if binding_id not in ids:
            raise ConfigError(
                f'{where}: unknown key "keys.{binding_id}" (expected one of: {", ".join(ids)})'
            )
        bad = [key for key in value.split(",") if not valid_key(key)]
        if bad:
            raise ConfigError(
                f"{where}: keys.{binding_id}: expected key names like ctrl+q, f2 or "
                f"alt+enter (comma-separated), got {bad[0].strip()!r}"
            )
    return dict(keys)
