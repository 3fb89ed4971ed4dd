"""`llm.provider = "auto"` picks the configured endpoint, else the bundled local model."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwenmem_tui.config import Settings, load_settings
from qwenmem_tui.llm.provider import resolve_provider


def settings_from(tmp_path: Path, toml: str, env: dict[str, str]) -> Settings:
    config = tmp_path / "config.toml"
    config.write_text(toml)
    return load_settings(config, env)


@pytest.mark.parametrize(
    ("toml", "env", "expected"),
    [
        ("", {}, "local"),  # fresh machine: no endpoint anywhere
        ('[llm]\nbase_url = ""\n', {}, "local"),  # blank means unset
        ('[llm]\nbase_url = "http://127.0.0.1:8000/v1"\n', {}, "openai"),
        ("", {"QWENMEM_BASE_URL": "http://127.0.0.1:11434/v1"}, "openai"),
        ("", {"QWENMEM_BASE_URL": "  "}, "local"),
        ('[llm]\nprovider = "local"\nbase_url = "http://127.0.0.1:8000/v1"\n', {}, "local"),
        ('[llm]\nprovider = "openai"\n', {}, "openai"),  # explicit: no silent fallback
        ('[llm]\napi_key = "sk-x"\n', {}, "local"),  # a key alone names no endpoint
    ],
)
def test_resolve_provider(tmp_path: Path, toml: str, env: dict[str, str], expected: str) -> None:
    settings = settings_from(tmp_path, toml, env)
    assert resolve_provider(settings, env) == expected


def test_env_endpoint_counts_even_when_settings_were_loaded_without_it(tmp_path: Path) -> None:
    settings = settings_from(tmp_path, "", {})
    assert resolve_provider(settings, {"QWENMEM_BASE_URL": "http://127.0.0.1:1/v1"}) == "openai"
