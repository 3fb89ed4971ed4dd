"""Issue 36 item 1: instruction files are read under read_file's policy.

A cloned repository chooses what its AGENTS.md / QWEN.md / CLAUDE.md are. The class
tried here, one variant a file so each refusal is seen on its own: a symlink out of
the project (to a file in the user's home), a symlink to /proc/self/environ, a FIFO,
a character device, a hard link to a credential file under an innocent name, a file
whose content is a private key, a symlink into a credential store inside the
project, and the home's own AGENTS.md linking out of $QWENMEM_HOME. A file with an
AWS key keeps its text with the key cut out. Each refusal is named with its reason.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from qwenmem_tui.features.instructions.files import load_instructions

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with an SSH key and a shadow-like secrets file (HOME points here)."""
    home = tmp_path / "userhome"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(PRIVATE_KEY)
    (home / "passwords.txt").write_text("root:$6$saltsalt$hashedvalue:19000:0:99999:7:::\n")
    monkeypatch.setenv("HOME", str(home))
    return home


def _project(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    qhome = tmp_path / "qwenmem-home"
    root.mkdir()
    qhome.mkdir()
    return root, qhome


def _load(root: Path, qhome: Path, cwd: Path | None = None):
    return load_instructions(root, cwd or root, qhome)


def _refused(found) -> dict[str, str]:
    return dict(found.refused)


def test_a_link_out_of_the_project_is_refused_and_named(tmp_path: Path, user_home: Path) -> None:
    root, qhome = _project(tmp_path)
    os.symlink(user_home / "passwords.txt", root / "AGENTS.md")
    found = _load(root, qhome)
    assert not found.files
    assert "outside the project root" in _refused(found)["AGENTS.md"]
    assert "hashedvalue" not in found.section()
    assert "AGENTS.md  (" in found.describe() and "Refused" in found.describe()
    assert any("AGENTS.md was not read" in line for line in found.notices())


def test_a_link_to_proc_environ_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QWENMEM_API_KEY", "sk-proj-environleak1234567890")
    root, qhome = _project(tmp_path)
    os.symlink("/proc/self/environ", root / "QWEN.md")
    found = _load(root, qhome)
    assert not found.files and "QWEN.md" in _refused(found)
    assert "environleak" not in found.section()


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    root, qhome = _project(tmp_path)
    os.mkfifo(root / "CLAUDE.md")
    done = threading.Event()
    result: list = []

    def load() -> None:
        result.append(_load(root, qhome))
        done.set()

    threading.Thread(target=load, daemon=True).start()
    assert done.wait(30), "reading a FIFO blocked"
    assert "not a regular file" in _refused(result[0])["CLAUDE.md"]


def test_a_device_is_refused(tmp_path: Path) -> None:
    root, qhome = _project(tmp_path)
    try:
        os.mknod(root / "AGENTS.md", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero
    except PermissionError:
        pytest.skip("making a device node needs root")
    found = _load(root, qhome)
    assert "not a regular file" in _refused(found)["AGENTS.md"]


def test_a_hard_link_to_a_credential_file_is_refused(tmp_path: Path, user_home: Path) -> None:
    root, qhome = _project(tmp_path)
    try:
        os.link(user_home / ".ssh" / "id_rsa", root / "AGENTS.md")
    except OSError:
        pytest.skip("no hard links across these directories")
    found = _load(root, qhome)
    assert not found.files
    assert "hard link to a credential file" in _refused(found)["AGENTS.md"]


def test_a_private_key_by_content_is_refused(tmp_path: Path) -> None:
    root, qhome = _project(tmp_path)
    (root / "AGENTS.md").write_text("Deploy with this key:\n" + PRIVATE_KEY)
    found = _load(root, qhome)
    assert "private key" in _refused(found)["AGENTS.md"]
    assert "b3BlbnNzaC1rZXkt" not in found.section()


def test_a_link_into_a_credential_store_inside_the_project_is_refused(tmp_path: Path) -> None:
    root, qhome = _project(tmp_path)
    (root / ".aws").mkdir()
    (root / ".aws" / "credentials").write_text("[default]\naws_secret_access_key = x\n")
    os.symlink(".aws/credentials", root / "AGENTS.md")
    found = _load(root, qhome)
    assert "credential store" in _refused(found)["AGENTS.md"]


def test_the_home_file_stays_inside_the_home(tmp_path: Path, user_home: Path) -> None:
    root, qhome = _project(tmp_path)
    os.symlink(user_home / "passwords.txt", qhome / "AGENTS.md")
    found = _load(root, qhome)
    assert not found.files
    assert any("outside" in why for why in _refused(found).values())


def test_secrets_are_cut_before_the_prompt(tmp_path: Path) -> None:
    root, qhome = _project(tmp_path)
    (root / "AGENTS.md").write_text(f"Use the staging bucket. aws_access_key_id = {AWS_KEY}\n")
    found = _load(root, qhome)
    (file,) = found.files
    assert AWS_KEY not in found.section()
    assert "Use the staging bucket." in found.section() and "[REDACTED]" in found.section()


def test_links_inside_the_project_still_work(tmp_path: Path) -> None:
    root, qhome = _project(tmp_path)
    (root / "docs").mkdir()
    (root / "docs" / "rules.md").write_text("Use uv.")
    os.symlink("docs/rules.md", root / "AGENTS.md")
    os.symlink("AGENTS.md", root / "CLAUDE.md")
    found = _load(root, qhome)
    assert [f.shown for f in found.files] == ["AGENTS.md"] and not found.refused
