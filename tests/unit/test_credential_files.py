"""Issue 25 item 3: credential files stay unread wherever qwenmem starts.

A planted home of our own (HOME is a tmp dir) holding the files an attack read when
qwenmem ran in the home directory — package-manager and cloud credentials, shell
histories, keys, dotenv files, browser profiles, a hard link to one of them — plus
secrets in innocently named files. The real file tools, and one whole chat turn over
the SDK to the fake server, so what reaches the model is checked, not just the answer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from chat_support import SessionFactory, collect

from qwenmem_tui.chat.tools import (
    ToolContext,
    ToolRegistry,
    ToolResult,
    broad_root_notice,
    builtin_tools,
)
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec

TOKEN = "npm_Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx"
PEM = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----\n"

MARK = "PLANTED-CONTENT\n"
"""The last line of every planted file: seen anywhere, the file was read."""
PLANTED: dict[str, str] = {
    ".npmrc": f"//registry.npmjs.org/:_authToken={TOKEN}\n",
    ".yarnrc.yml": f'npmAuthToken: "{TOKEN}"\n',
    ".cargo/credentials.toml": '[registry]\ntoken = "cio8Hq2Lm9Kp4Rt6Vw8Nb0Xc"\n',
    ".cargo/credentials": '[registry]\ntoken = "cio8Hq2Lm9Kp4Rt6Vw8Nb0Xc"\n',
    ".pypirc": "[pypi]\npassword = pypi-AgEIcHlwaS5vcmc\n",
    ".docker/config.json": '{"auths": {"ghcr.io": {"auth": "dXNlcjpwYXNz"}}}\n',
    ".kube/config": "users:\n- name: admin\n  user:\n    token: kube-secret\n",
    ".config/gcloud/credentials.db": "gcloud secret\n",
    ".config/gcloud/application_default_credentials.json": '{"refresh_token": "1//0g"}\n',
    ".aws/credentials": "[default]\naws_secret_access_key = x\n",
    ".azure/accessTokens.json": "[]\n",
    ".bash_history": "mysql -u root -pS3cretRootPw\n",
    ".zsh_history": ": 1700000000:0;export GITHUB_TOKEN=x\n",
    ".python_history": "openai.api_key = 'x'\n",
    ".psql_history": "\\password\n",
    ".local/share/fish/fish_history": "- cmd: export TOKEN=x\n",
    ".config/anthropic/api_key": "sk-ant-api03-Qw3Er5Ty7Ui9Op1As3Df5\n",
    ".config/openai/token.json": '{"token": "x"}\n',
    ".ssh/id_ed25519": PEM,
    "id_ecdsa_sk": PEM,
    "keys/id_rsa_deploy": PEM,
    "server.pem": PEM,
    "tls/site.key": PEM,
    "cert.p12": "binaryish\n",
    ".env": "DATABASE_URL=postgres://app:hunter2hunter2@db/prod\n",
    ".env.production": "API_KEY=x\n",
    "app/prod.env": "SECRET=x\n",
    ".git-credentials": "https://user:ghp_R2d4F6h8J0k2L4m6N8p0Q2r4S6t8V0w2X4y6@github.com\n",
    ".config/git/credentials": "https://user:pw@example.com\n",
    ".netrc": "machine example.com login me password pw\n",
    ".pgpass": "db:5432:app:me:pw\n",
    ".local/share/keyrings/login.keyring": "keyring\n",
    ".gnupg/private-keys-v1.d/x.key": "gpg\n",
    ".mozilla/firefox/abc.default/logins.json": "{}\n",
    ".config/google-chrome/Default/Cookies": "cookies\n",
    ".config/chromium/Default/Login Data": "logins\n",
    ".password-store/email.gpg": "gpg\n",
    "Library/Keychains/login.keychain-db": "mac\n",
}

BENIGN: dict[str, str] = {
    "README.md": "# My home\n",
    ".env.example": "DATABASE_URL=postgres://localhost/db\nAPI_KEY=\n",
    "code/id_utils.py": "def ident(): ...\n",
    "code/token.py": "TOKEN_TTL = 3600\n",
    "code/history.md": "# History of the project\n",
    "code/package.json": '{"name": "x"}\n',
    "code/certs/README": "public certificates go here\n",
}


@pytest.fixture
def planted_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    for name, text in {**PLANTED, **BENIGN}.items():
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + (MARK if name in PLANTED else ""))
    os.link(home / ".npmrc", home / "notes.txt")  # a hard link under an innocent name
    monkeypatch.setenv("HOME", str(home))
    return home


def named(root: Path, *paths: str) -> ToolContext:
    """A context whose view holds a user message naming ``paths``."""
    said = {"role": "user", "content": "please look at " + ", ".join(paths)}
    return ToolContext(project_root=root, session_id="s1", view=lambda: [said])


async def read(registry: ToolRegistry, root: Path, path: str) -> ToolResult:
    return await registry.call("read_file", json.dumps({"path": path}), named(root, path))


async def test_credential_files_in_a_home_root_are_refused_by_name(planted_home: Path) -> None:
    registry = builtin_tools(planted_home, start=planted_home)
    leaked = []
    for name in PLANTED:
        # As named, absolute, and in other case (case-insensitive file systems).
        for path in (name, str(planted_home / name), name.upper()):
            result = await read(registry, planted_home, path)
            if not result.is_error or MARK in result.content:
                leaked.append((path, result.content))
    assert leaked == []
    assert len(PLANTED) >= 35


async def test_a_hard_link_to_a_credential_file_is_refused(planted_home: Path) -> None:
    registry = builtin_tools(planted_home, start=planted_home)
    result = await read(registry, planted_home, "notes.txt")
    assert result.is_error and "hard link to a credential file" in result.content
    assert TOKEN not in result.content


async def test_secrets_in_innocent_files_are_cut_out_or_refused(planted_home: Path) -> None:
    (planted_home / "code" / "deploy.md").write_text(f"Deploy with\n\nnpm publish --token {TOKEN}\n\nthen tag.\n")
    (planted_home / "code" / "backup.txt").write_text("my key:\n" + PEM)
    registry = builtin_tools(planted_home, start=planted_home)
    deploy = await read(registry, planted_home, "code/deploy.md")
    assert not deploy.is_error and TOKEN not in deploy.content
    assert "then tag." in deploy.content and "1 secret value(s) replaced by [REDACTED]" in deploy.content
    backup = await read(registry, planted_home, "code/backup.txt")
    assert backup.is_error and "private key" in backup.content and "b3BlbnNz" not in backup.content


async def test_benign_look_alikes_stay_readable(planted_home: Path) -> None:
    registry = builtin_tools(planted_home, start=planted_home)
    for name, text in BENIGN.items():
        result = await read(registry, planted_home, name)
        assert (result.is_error, result.content) == (False, text), name


async def test_in_the_home_directory_tools_open_only_what_the_user_names(planted_home: Path) -> None:
    notice = broad_root_notice(planted_home, planted_home)
    assert notice is not None and "only the files and folders you name" in notice
    registry = builtin_tools(planted_home, start=planted_home)
    unnamed = ToolContext(project_root=planted_home, session_id="s1", view=lambda: [{"role": "user", "content": "what do I have here?"}])
    for tool, path in (("read_file", "README.md"), ("list_directory", "."), ("list_directory", "code")):
        result = await registry.call(tool, json.dumps({"path": path}), unnamed)
        assert result.is_error and "was not named" in result.content, (tool, path)
    # A folder the user names opens, and what is below it.
    folder = ToolContext(project_root=planted_home, session_id="s1", view=lambda: [{"role": "user", "content": "look in ~/code please"}])
    listing = await registry.call("list_directory", json.dumps({"path": "code"}), folder)
    assert not listing.is_error and "token.py" in listing.content
    inside = await registry.call("read_file", json.dumps({"path": "code/token.py"}), folder)
    assert inside.content == BENIGN["code/token.py"]
    # Below the home, in a project of its own, nothing changes.
    project = planted_home / "code"
    (project / ".git").mkdir()
    scoped = builtin_tools(project, start=project)
    result = await scoped.call("read_file", json.dumps({"path": "package.json"}), unnamed)
    assert not result.is_error


async def test_a_whole_turn_in_the_home_directory_sends_no_credential(
    planted_home: Path, make_session: SessionFactory, fake: FakeOpenAI
) -> None:
    session = await make_session(project_root=planted_home, tools=builtin_tools(planted_home, start=planted_home))
    calls = [ToolCallSpec("read_file", {"path": p}, id=f"c{i}") for i, p in enumerate([".npmrc", "notes.txt", ".bash_history", "README.md"])]
    fake.script(Reply(tool_calls=calls), Reply("Done."))
    await collect(session, "read .npmrc, notes.txt, .bash_history and README.md")
    sent = json.dumps(fake.chat_requests, ensure_ascii=False)
    assert TOKEN not in sent and "S3cretRootPw" not in sent
    assert "# My home" in sent
