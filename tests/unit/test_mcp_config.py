"""`[mcp.servers.NAME]` and `[ui]` in config.toml: read as documented, and every
mistake is the usual one-line error naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwenmem_tui.config import ConfigError, load_settings


def _load(tmp_path: Path, text: str):
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return load_settings(path, env={}), path


def test_stdio_and_http_servers_are_read(tmp_path: Path) -> None:
    settings, _ = _load(
        tmp_path,
        """
[mcp.servers.time]
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
env = { TZ = "UTC" }
timeout = 5

[mcp.servers.web-search_2]
url = "http://127.0.0.1:9000/mcp"
trust = true
enabled = false

[ui]
theme = "nord"
""",
    )
    time = settings.mcp.servers["time"]
    assert (time.command, time.args, time.env, time.timeout, time.trust, time.enabled) == (
        "mcp-server-time", ["--local-timezone", "UTC"], {"TZ": "UTC"}, 5, False, True
    )
    web = settings.mcp.servers["web-search_2"]
    assert (web.url, web.trust, web.enabled, web.timeout) == ("http://127.0.0.1:9000/mcp", True, False, 30)
    assert settings.ui.theme == "nord"


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('[mcp.servers.Time]\ncommand = "x"', 'mcp.servers: expected server names of lowercase'),
        ("[mcp.servers.time]\ntimeout = 5", "mcp.servers.time: expected one of command (stdio) or url"),
        ('[mcp.servers.time]\ncommand = "x"\nurl = "http://h/mcp"', "expected one of command"),
        ('[mcp.servers.time]\nurl = "ftp://h/mcp"', "expected an http:// or https:// url"),
        ('[mcp.servers.time]\ncommand = "x"\ncomand = "y"', 'unknown key "mcp.servers.time.comand" (expected one of: command, args'),
        ('[mcp.servers.time]\ncommand = "x"\ntimeout = 0', "mcp.servers.time.timeout: expected a number > 0"),
        ('[mcp.servers.time]\ncommand = "x"\ntrust = "yes"', "mcp.servers.time.trust: expected true or false"),
        ('[mcp.servers.time]\ncommand = "x"\nenv = { TOKEN = 5 }', "mcp.servers.time.env.TOKEN: expected a string"),
        ("[mcp]\nserver = 1", 'unknown key "mcp.server" (expected one of: servers)'),
    ],
)
def test_mistakes_are_one_line(tmp_path: Path, table: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, table)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "config.toml"))
    assert expected in message


def test_env_values_never_reach_the_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, '[mcp.servers.time]\ncommand = "x"\nenv = { TOKEN = ["sk-secret-123"] }')
    assert "sk-secret-123" not in str(info.value)
