"""Config loading: defaults, env overrides, and one-line errors for every kind of bad file."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwenmem_tui.config import ConfigError, Settings, load_settings
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path, {})
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def test_missing_default_file_gives_defaults(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / "config.toml", {})
    assert settings == Settings()
    assert settings.source is None
    assert settings.llm.base_url is None and settings.llm.provider == "auto"
    assert settings.general.show_session_recap is False
    assert settings.general.session_recap_away_threshold_minutes == 5.0
    assert settings.memory.embedding == "auto" and settings.memory.top_k == 5
    assert settings.compaction.threshold == 0.7


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "nope.toml", {}, required=True)


def test_none_means_the_home_config(tmp_path: Path) -> None:
    _write(tmp_path, '[llm]\nmodel = "from-home"\n')
    settings = load_settings(None, {"QWENMEM_HOME": str(tmp_path)})
    assert settings.llm.model == "from-home"
    assert settings.source == Paths(tmp_path).config_file


def test_full_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[llm]
base_url = "http://127.0.0.1:8000/v1"
api_key = "sk-file-key-123456"
model = "qwen-plus"
fast_model = "qwen-flash"
context_window = 65536
timeout = 30

[general]
show_session_recap = true
session_recap_away_threshold_minutes = 0.5

[memory]
embedding = "openai"
embedding_base_url = ""
top_k = 8
min_score = -1.0
ttl_days = { project = 90 }

[compaction]
threshold = 0.8

[keys]
send = "enter"
""",
    )
    settings = load_settings(path, {})
    assert settings.source == path
    assert settings.llm.context_window == 65536 and settings.llm.timeout == 30.0
    assert settings.api_key_value() == "sk-file-key-123456"
    assert settings.effective_fast_model() == "qwen-flash"
    assert settings.general.session_recap_away_threshold_minutes == 0.5
    assert settings.memory.embedding_base_url is None  # "" means the default
    assert settings.memory.ttl_days == {"project": 90}
    assert settings.keys == {"send": "enter"}


def test_env_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, '[llm]\nbase_url = "http://file/v1"\nmodel = "file-model"\n')
    env = {
        "QWENMEM_BASE_URL": "http://env/v1",
        "QWENMEM_API_KEY": "sk-env-key-abcdef",
        "QWENMEM_MODEL": "env-model",
        "QWENMEM_FAST_MODEL": "env-fast",
        "QWENMEM_EMBEDDING": "hash",
    }
    settings = load_settings(path, env)
    assert settings.llm.base_url == "http://env/v1"
    assert settings.llm.model == "env-model"
    assert settings.effective_fast_model() == "env-fast"
    assert settings.api_key_value() == "sk-env-key-abcdef"
    assert settings.memory.embedding == "hash"


def test_blank_env_values_are_ignored(tmp_path: Path) -> None:
    path = _write(tmp_path, '[llm]\nmodel = "file-model"\n')
    assert load_settings(path, {"QWENMEM_MODEL": "  "}).llm.model == "file-model"


def test_api_key_env_indirection(tmp_path: Path) -> None:
    path = _write(tmp_path, '[llm]\napi_key_env = "DASHSCOPE_API_KEY"\n')
    settings = load_settings(path, {})
    assert settings.api_key_value({"DASHSCOPE_API_KEY": "sk-dash"}) == "sk-dash"
    assert settings.api_key_value({}) is None
    assert settings.effective_fast_model() == settings.llm.model


def test_api_key_never_prints(tmp_path: Path) -> None:
    path = _write(tmp_path, '[llm]\napi_key = "sk-very-secret-key"\n')
    settings = load_settings(path, {})
    assert "sk-very-secret-key" not in repr(settings)
    assert "sk-very-secret-key" not in str(settings.model_dump())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[llm\nmodel = 1\n", "invalid TOML"),
        ('[llm]\nmodle = "x"\n', 'unknown key "llm.modle"'),
        ("[bogus]\nx = 1\n", 'unknown key "bogus"'),
        ('source = "/etc/passwd"\n', 'unknown key "source"'),
        ('[llm]\ncontext_window = "big"\n', "llm.context_window: expected an integer, got 'big'"),
        ("[llm]\ncontext_window = 0\n", "llm.context_window: expected a number > 0"),
        (
            '[general]\nshow_session_recap = "yes"\n',
            "general.show_session_recap: expected true or false",
        ),
        ("[general]\nsession_recap_away_threshold_minutes = 0\n", "expected a number > 0"),
        ('[memory]\nembedding = "bert"\n', "memory.embedding: expected 'auto', 'hash' or 'openai'"),
        ('[memory]\nttl_days = { user = "long" }\n', "memory.ttl_days.user: expected an integer"),
        ("llm = 5\n", "llm: expected a table"),
        ('[llm]\nprovider = "cloud"\n', "llm.provider: expected 'auto', 'openai' or 'local'"),
        ("[llm]\nmodel = qwen-plus\n", "llm.model: invalid TOML"),  # bad TOML names its key
        ("[memory.ttl_days]\nusr = 30\n", 'unknown key "memory.ttl_days.usr"'),
        ("[memory]\ntop_k = true\n", "memory.top_k: expected an integer"),
    ],
)
def test_invalid_files_give_one_line(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in _error(tmp_path, text)


def test_unknown_key_lists_the_known_ones(tmp_path: Path) -> None:
    message = _error(tmp_path, "[memory]\ntopk = 3\n")
    assert "expected one of:" in message and "top_k" in message


def test_wrong_type_for_a_secret_does_not_echo_it(tmp_path: Path) -> None:
    message = _error(tmp_path, "[llm]\napi_key = 123456789\n")
    assert "llm.api_key: expected a string" in message and "123456789" not in message


def test_non_utf8_and_directory(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[llm]\nmodel = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="UTF-8"):
        load_settings(bad, {})
    with pytest.raises(ConfigError, match="directory"):
        load_settings(tmp_path, {}, required=True)


def test_home_fixture_points_at_the_fake(settings: Settings, fake: FakeOpenAI) -> None:
    assert settings.llm.base_url == fake.base_url
    assert (settings.llm.model, settings.effective_fast_model()) == ("test-model", "test-fast")


def test_example_config_is_valid_and_documents_every_key() -> None:
    example = Path(__file__).resolve().parents[2] / "config.example.toml"
    settings = load_settings(example, {}, required=True)
    assert settings.llm.base_url is None and settings.llm.api_key is None
    text = example.read_text()
    for section, model in (
        ("llm", settings.llm),
        ("general", settings.general),
        ("memory", settings.memory),
        ("compaction", settings.compaction),
    ):
        for key in type(model).model_fields:
            documented = f"{key} =" in text or f"[{section}.{key}]" in text
            assert documented, f"{section}.{key} is not documented"


def test_a_features_section_is_declared_in_its_package_and_composed_from_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feature's settings are its own model, handed to the config by its registration:
    with the registry line its table is validated (same one-line error) and read typed;
    without it the table is an unknown key."""
    from pydantic import Field

    from qwenmem_tui.config import Section, SettingsSection
    from qwenmem_tui.features import registry
    from qwenmem_tui.features.feature import Feature

    class StampSettings(Section):
        lines: int = Field(default=1, ge=1)
        label: str = "stamp"

    section = SettingsSection("stamp", StampSettings, env=(("QWENMEM_STAMP_LABEL", "label"),))
    text = "[stamp]\nlines = 3\n"
    unknown = _error(tmp_path, text)
    assert 'unknown key "stamp"' in unknown and "memory, compaction, mcp" in unknown
    monkeypatch.setattr(registry, "FEATURES", (*registry.FEATURES, Feature("stamp", settings=section)))
    settings = load_settings(_write(tmp_path, text), {"QWENMEM_STAMP_LABEL": "env"})
    assert section.of(settings) == StampSettings(lines=3, label="env")
    assert _error(tmp_path, "[stamp]\nlines = 0\n").endswith("stamp.lines: expected a number >= 1, got 0")
    assert section.of(Settings()) == StampSettings()


def test_the_recap_keeps_its_keys_in_general(tmp_path: Path) -> None:
    """The recap owns `show_session_recap` and the threshold, where the contract puts
    them: in `[general]`, beside the core's `user`."""
    from qwenmem_tui.features.recap.settings import RECAP_SETTINGS

    path = _write(tmp_path, '[general]\nuser = "ana"\nshow_session_recap = true\n')
    settings = load_settings(path, {})
    assert RECAP_SETTINGS.of(settings).show_session_recap is True
    assert settings.general.user == "ana"
    assert "session_recap_away_threshold_minutes" in _error(tmp_path, "[general]\nshow = 1\n")


def test_session_titles_is_the_titles_key_in_llm_and_a_core_table_built_alone_fits(
    tmp_path: Path,
) -> None:
    """`session_titles` belongs to the titles feature yet stays in `[llm]`; an
    `LLMSettings(...)` built without the features (a library caller, the tests'
    `chat_llm`) is taken as the composed table: what it set kept, the titles' key at
    its default."""
    from qwenmem_tui.config import GeneralSettings, LLMSettings
    from qwenmem_tui.features.titles.settings import TITLES_SETTINGS

    path = _write(tmp_path, '[llm]\nmodel = "m"\nsession_titles = false\n')
    assert TITLES_SETTINGS.of(load_settings(path, {})).session_titles is False
    assert "session_titles" in _error(tmp_path, "[llm]\nsession_title = false\n")

    settings = Settings(llm=LLMSettings(model="m", max_turns=3), general=GeneralSettings(user="ana"))
    assert (settings.llm.model, settings.llm.max_turns, settings.general.user) == ("m", 3, "ana")
    assert TITLES_SETTINGS.of(settings).session_titles is True
    assert settings.llm.model_fields_set == {"model", "max_turns"}  # fit_to_local_model reads it
    settings.llm = LLMSettings(model="n")
    assert settings.llm.model == "n" and TITLES_SETTINGS.of(settings).session_titles is True
