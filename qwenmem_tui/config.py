"""Typed settings from `config.toml` plus environment overrides.

Every table forbids unknown keys: a typo in a config file should stop the program with
one line that names the file and the key, not silently fall back to a default.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, Protocol, Self, TypeVar, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
)

from qwenmem_tui import sections
from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.text import one_line

ENV_OVERRIDES: dict[str, tuple[str, str]] = {
    "QWENMEM_BASE_URL": ("llm", "base_url"),
    "QWENMEM_API_KEY": ("llm", "api_key"),
    "QWENMEM_MODEL": ("llm", "model"),
    "QWENMEM_FAST_MODEL": ("llm", "fast_model"),
}
"""The core's environment overrides; a feature's are in its `SettingsSection.env`."""


class ConfigError(Exception):
    """An unusable config; `str()` is the one line shown to the user."""


class LocalModelTraits(Protocol):
    """What a section may fit itself to when the bundled local model serves
    (`llm.local_server.LocalChatDefaults`)."""

    @property
    def supports_tools(self) -> bool: ...
    @property
    def prefetch_wait_ms(self) -> int: ...


class Section(BaseModel):
    """One table of the config file (a feature's section derives from it too)."""

    # strict: TOML is typed, so "yes" for a bool or "5" for an int is a mistake to report.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)

    def fit_to_local_model(self, model: LocalModelTraits) -> None:
        """Adjust to the bundled local model, leaving what the user set (nothing here)."""


_Section = Section


def blank_to_none(value: object) -> object:
    """`key = ""` in TOML means "use the default", since TOML has no null."""
    if isinstance(value, str) and not value.strip():
        return None
    return value


_blank_to_none = blank_to_none


class LLMSettings(Section):
    provider: Literal["auto", "openai", "local"] = "auto"
    base_url: str | None = None  # None: not configured (provider "auto" then runs locally)
    api_key: SecretStr | None = None
    api_key_env: str | None = None
    model: str = "qwen-plus"
    fast_model: str | None = None
    context_window: int = Field(default=32768, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    # Sent with chat requests only when set; the bundled model uses LOCAL_TEMPERATURE.
    temperature: float | None = Field(default=None, ge=0, le=2)
    timeout: float = Field(default=60.0, gt=0)
    max_turns: int = Field(default=20, ge=1)
    local_model_path: str | None = None

    _blank = field_validator(
        "base_url", "api_key", "api_key_env", "fast_model", "local_model_path", mode="before"
    )(_blank_to_none)


class GeneralSettings(Section):
    """`[general]`: the core's keys; a feature may add its own to this table
    (`SettingsSection(shared=True)`)."""

    user: str | None = None


class UISettings(Section):
    theme: str | None = None  # a Textual theme name, e.g. "nord"; None: textual-dark

    _blank = field_validator("theme", mode="before")(_blank_to_none)


S = TypeVar("S", bound=Section, covariant=True)  # read only: `SettingsSection[Section]` holds any


@dataclass(frozen=True)
class SettingsSection(Generic[S]):
    """A feature's settings: the table it reads, its model, its environment overrides.

    The feature declares it in its package (`Feature(settings=...)`); the config is
    composed from the registered ones (`settings_model`), so a feature's keys are
    validated at start like the core's, with the same one-line error, and read back
    typed: ``SECTION.of(settings).key``.
    """

    table: str
    model: type[S]
    env: tuple[tuple[str, str], ...] = ()
    """(variable, key) pairs: a set variable wins over the file's `table.key`."""
    shared: bool = False
    """Its keys join a table another owns (`[general]`, where the contract puts some
    features' keys) instead of a table of its own."""

    def of(self, settings: Settings) -> S:
        """This section of `settings` (its defaults when the settings were composed
        without it: a test's registry, a library caller's `Settings()`)."""
        value = getattr(settings, self.table, None)
        return value if isinstance(value, self.model) else self.model()


class Settings(Section):
    """The whole config: the core's tables, and each registered feature's (composed by
    `settings_model`; `Settings()` builds the composed model)."""

    llm: LLMSettings = Field(default_factory=LLMSettings)
    general: GeneralSettings = Field(default_factory=GeneralSettings)
    ui: UISettings = Field(default_factory=UISettings)
    keys: dict[str, str] = Field(default_factory=dict)  # binding id -> key
    source: Path | None = Field(default=None, exclude=True)  # the file read; not a TOML key

    def __new__(cls, *args: Any, **kwargs: Any) -> Settings:
        # `Settings(...)` is the composed model: the registered features' tables too.
        return super().__new__(settings_model() if cls is Settings else cls)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Self:
        composed = settings_model()
        if cls is Settings and composed is not Settings:
            return cast(Self, composed.model_validate(obj, **kwargs))
        return super().model_validate(obj, **kwargs)

    def api_key_value(self, env: Mapping[str, str] | None = None) -> str | None:
        """The key to send: `llm.api_key` (or QWENMEM_API_KEY), else `$<llm.api_key_env>`."""
        if self.llm.api_key is not None:
            return self.llm.api_key.get_secret_value()
        if self.llm.api_key_env:
            value = (os.environ if env is None else env).get(self.llm.api_key_env, "")
            return value or None
        return None

    def effective_fast_model(self) -> str:
        """Side queries (the features' calls aside from the chat) use the fast model
        when there is one."""
        return self.llm.fast_model or self.llm.model


def registered_sections() -> tuple[SettingsSection[Section], ...]:
    """The sections the feature registry handed in (`sections.register_sections`)."""
    found = sections.registered_sections()
    return tuple(section for section in found if isinstance(section, SettingsSection))


def settings_model() -> type[Settings]:
    """The config's model: the core's tables and the registered features'."""
    return _compose(registered_sections())


@functools.cache
def _compose(sections: tuple[SettingsSection[Section], ...]) -> type[Settings]:
    if not sections:
        return Settings
    own: dict[str, Any] = {}  # pydantic field definitions
    shared: dict[str, list[type[Section]]] = {}
    for section in sections:
        if section.shared:
            shared.setdefault(section.table, []).append(section.model)
        elif section.table in Settings.model_fields or section.table in own:
            raise ValueError(f"two settings sections are called [{section.table}]")
        else:
            own[section.table] = (section.model, Field(default_factory=section.model))
    for table, models in shared.items():
        base = Settings.model_fields[table].annotation
        assert isinstance(base, type) and issubclass(base, Section), table
        joined = create_model(base.__name__, __base__=(base, *models))
        widen = BeforeValidator(functools.partial(_joined, base, joined))
        own[table] = (Annotated[joined, widen], Field(default_factory=joined))
    model: type[Settings] = create_model("Settings", __base__=Settings, **own)
    return model


def _joined(base: type[BaseModel], joined: type[BaseModel], value: object) -> object:
    """The core's table as the core builds it (`Settings(llm=LLMSettings(...))`), taken
    as the table the features joined (their keys at their defaults), what it set kept."""
    if isinstance(value, base) and not isinstance(value, joined):
        return joined.model_validate({name: getattr(value, name) for name in value.model_fields_set})
    return value


def load_settings(
    path: Path | None,
    env: Mapping[str, str] = os.environ,
    *,
    required: bool = False,
) -> Settings:
    """Read `path` (defaults when it does not exist, unless `required`) and apply env overrides.

    `path=None` means the home's config file (`QWENMEM_HOME/config.toml`).
    """
    if path is None:
        from qwenmem_tui.paths import Paths

        path = Paths.from_env(env).config_file
    data: JSONObject = {}
    source: Path | None = None
    if path.exists() or required:
        data = _read_toml(path)
        source = path
    model = settings_model()
    if "source" in data:
        raise ConfigError(f'{path}: unknown key "source" (expected one of: {_known(model)})')
    overrides = [*ENV_OVERRIDES.items()]
    overrides += [(var, (s.table, key)) for s in registered_sections() for var, key in s.env]
    for var, (section, key) in overrides:
        value = env.get(var, "").strip()
        if value:
            table = data.setdefault(section, {})
            if isinstance(table, dict):
                table[key] = value
    try:
        settings = model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(path, exc, model)) from None
    settings.source = source
    return settings


def permission_warning(path: Path | None) -> str | None:
    """One line when the config file holds an API key that other accounts can read.

    A key in a world-readable file is leaked to every user of the machine; the program
    still runs (the key may be a local dummy), but says how to fix it.
    """
    if path is None:
        return None
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        llm = _read_toml(path).get("llm") if mode & 0o044 else None
    except (OSError, ConfigError):
        return None
    if not (isinstance(llm, dict) and llm.get("api_key")):
        return None
    return (
        f"{path} holds llm.api_key and is readable by other users (mode {mode:o}); "
        f"run: chmod 600 {path}"
    )


def _read_toml(path: Path) -> JSONObject:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: expected a TOML file, found a directory") from None
    except PermissionError:
        raise ConfigError(f"{path}: cannot read config file (permission denied)") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: invalid TOML: expected UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        key = _key_at_error(path, str(exc))
        where = f"{key}: " if key else ""
        raise ConfigError(f"{path}: {where}invalid TOML: {one_line(str(exc))}") from None


_ERROR_LINE = re.compile(r"\(at line (\d+), column \d+\)")
_TABLE_HEADER = re.compile(r"^\s*\[\[?\s*([^\[\]]+?)\s*\]")
_KEY_PREFIX = re.compile(r"^\s*([A-Za-z0-9_.\-\"' ]+?)\s*=")


def _key_at_error(path: Path, message: str) -> str | None:
    """The dotted key on the line tomllib complains about, so the one line names it."""
    match = _ERROR_LINE.search(message)
    if match is None:
        return None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    number = int(match.group(1))
    if not 1 <= number <= len(lines):
        return None
    key = _KEY_PREFIX.match(lines[number - 1])
    if key is None:
        return None
    table = ""
    for line in lines[: number - 1]:
        if header := _TABLE_HEADER.match(line):
            table = header.group(1).replace(" ", "") + "."
    return table + key.group(1).replace(" ", "").replace('"', "").replace("'", "")


def _known(model: type[BaseModel]) -> str:
    return ", ".join(name for name in model.model_fields if name != "source")


_EXPECTED = {
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}


def _describe(path: Path, exc: ValidationError, model: type[Settings]) -> str:
    """The first validation error as `FILE: KEY: expected WHAT, got VALUE`."""
    error = exc.errors(include_url=False)[0]
    loc = [str(part) for part in error["loc"]]
    key = ".".join(loc) or "(top level)"
    kind = error["type"]
    if loc and loc[-1] == "[key]":  # a key of a free-form table (a dict of a section)
        expected = (error.get("ctx") or {}).get("expected", "")
        return f'{path}: unknown key "{".".join(loc[:-1])}" (expected one of: {expected})'
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        expected = f" (expected one of: {_known(parent)})" if parent is not None else ""
        return f'{path}: unknown key "{key}"{expected}'
    ctx = error.get("ctx") or {}
    if kind in _EXPECTED:
        expected = _EXPECTED[kind]
    elif kind == "literal_error":
        expected = str(ctx.get("expected", ""))
    elif kind == "value_error":  # our own validators: the message is what is expected
        expected = str(ctx.get("error", error["msg"]))
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {
            "greater_than": ">",
            "greater_than_equal": ">=",
            "less_than": "<",
            "less_than_equal": "<=",
        }[kind]
        bound = next(iter(ctx.values()), "")
        expected = f"a number {op} {bound}"
    else:
        expected = error["msg"][:1].lower() + error["msg"][1:]
    value = error.get("input")
    got = "" if isinstance(value, dict) else f", got {_short(value)}"
    if _secret_key(loc):
        got = ""
    return f"{path}: {key}: expected {expected}{got}"


def _model_at(model: type[BaseModel], loc: list[str]) -> type[BaseModel] | None:
    parts = iter(loc)
    for part in parts:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        if typing.get_origin(annotation) is dict:  # a table of tables: [mcp.servers.NAME]
            annotation = typing.get_args(annotation)[1]
            next(parts, None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _secret_key(loc: list[str]) -> bool:
    # An MCP server's env holds tokens as often as not.
    return any("key" in part or "dsn" in part or part == "env" for part in loc)


def _short(value: object) -> str:
    text = repr(value)
    return one_line(text if len(text) <= 40 else text[:37] + "...")
