"""`qwenmem memory import --from claude-code|qwen-code|mem0` (issue 29): other tools'
memory, read from fixtures written in their documented formats, through the one import
pipeline (never a real home)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_support import CliRunner

from qwenmem_tui.memory.importers import (
    ImportSourceError,
    make_key,
    read_source,
    split_front_matter,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "memory_import"


def rows(kind: str, path: Path) -> dict[str, dict]:
    """The rows read, by key (a memory file's name) or, for a note, by its value."""
    return {e.row.get("key", e.row["value"]): e.row for e in read_source(kind, path)}


def test_a_claude_code_memory_folder_maps_types_to_categories_and_skips_the_index() -> None:
    found = rows("claude-code", FIXTURES / "claude-code" / "memory")
    assert {k: (r["category"], r.get("scope"), r["origin"]) for k, r in found.items()} == {
        "user_role": ("user", None, "agent"),
        "integration_tests_use_a_real": ("feedback", None, "agent"),
        "merge_freeze": ("project", "project", "agent"),
        "pipeline_bug_tracker": ("reference", "project", "agent"),
    }
    # The body is the memory (folded to one value), not the one-line description.
    assert found["merge_freeze"]["value"] == (
        "Non-critical merges are frozen from 2026-03-05 while the mobile team cuts the "
        "release branch."
    )
    assert not any("MEMORY.md" in e.source for e in read_source("claude-code", FIXTURES / "claude-code"))


def test_claude_md_and_qwen_md_bullets_become_rules_and_added_memories_facts() -> None:
    claude = rows("claude-code", FIXTURES / "claude-code" / "CLAUDE.md")
    assert [(r["category"], r["origin"], r["value"]) for r in claude.values()] == [
        ("feedback", "user", "Use bun, not npm, for package management"),
        ("feedback", "user", "Run `make test` before every commit"),
    ]
    qwen = list(rows("qwen-code", FIXTURES / "qwen-code").values())
    assert [(r["category"], r["origin"], r["value"]) for r in qwen] == [
        ("feedback", "user", "Answer in British English"),
        ("user", "tool", "My preferred programming language is Python."),
        ("user", "tool", "The project I'm currently working on is called 'harbor'."),
        ("user", "agent", "The user edits code in Helix and reads diffs in the terminal."),
    ]


def test_a_mem0_export_keeps_its_categories_and_starts_ttls_at_the_import() -> None:
    found = list(rows("mem0", FIXTURES / "mem0" / "export.json").values())
    assert [(r["category"], r["value"]) for r in found] == [
        ("user", "Is a vegetarian and allergic to nuts"),
        ("feedback", "Prefers concise answers without a closing summary"),
        ("reference", "The staging API is at https://staging.example.com"),
    ]
    # A 2024 created_at would expire a user fact (365 days) the moment it arrived.
    assert not any("created_at" in r for r in found)


def test_a_bare_list_is_a_mem0_export_too(tmp_path: Path) -> None:
    source = tmp_path / "mem0.json"
    source.write_text(json.dumps([{"memory": "Lives in Lisbon"}, {"id": "x"}, "junk"]))
    assert [r["value"] for r in rows("mem0", source).values()] == ["Lives in Lisbon"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ('{"answer": 42}', "expected a list of memories"),
    ],
)
def test_a_bad_mem0_file_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    source = tmp_path / "export.json"
    source.write_text(content)
    with pytest.raises(ImportSourceError, match=message):
        read_source("mem0", source)


def test_front_matter_and_keys() -> None:
    front, body = split_front_matter('---\nname: "x y"\ntype: user\n---\nbody\n')
    assert front == {"name": "x y", "type": "user"} and body == "body"
    assert split_front_matter("no front matter") == (None, "no front matter")
    assert make_key("Prefer bun over npm!") == "prefer_bun_over_npm"
    assert make_key("2024 plans") == "imported_2024_plans"
    assert make_key("日本語") == "imported_memory"
    assert make_key("Ação rápida") == "acao_rapida"


def test_a_note_without_a_name_is_keyed_as_remember_keys_it_never_by_its_value(
    cli_run: CliRunner, home: Path, project: Path
) -> None:
    """Issue 35: a key names the subject, never the value, on every write path. A
    bullet or a mem0 memory has no name: it was keyed by its first words
    (`i_live_in_oslo`, `mieszkam_w_oslo`)."""
    source = project.parent / "QWEN.md"
    source.write_text("## Qwen Added Memories\n- I live in Oslo\n- Mieszkam w Oslo\n")
    mem0 = project.parent / "mem0.json"
    mem0.write_text(json.dumps([{"memory": "Lives in Lisbon"}]))
    for kind, path in (("qwen-code", source), ("mem0", mem0)):
        done = cli_run("memory", "import", "--trust", "--from", kind, str(path), home=home, cwd=project)
        assert done.returncode == 0, done.stderr
    listed = json.loads(cli_run("memory", "list", "--all", "--json", home=home, cwd=project).stdout)
    assert len(listed) == 3
    assert not [m["key"] for m in listed if {"oslo", "lisbon"} & set(m["key"].split("_"))]


def test_a_file_without_a_memory_type_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "skill.md").write_text("---\nname: deploy\ndescription: a skill\n---\nSteps\n")
    assert read_source("claude-code", tmp_path) == []


# -- through the real CLI ----------------------------------------------------------------


def test_import_from_claude_code_goes_through_the_guard(
    cli_run: CliRunner, home: Path, project: Path
) -> None:
    source = project.parent / "claude-memory"
    shutil.copytree(FIXTURES / "claude-code" / "memory", source)
    done = cli_run("memory", "import", "--from", "claude-code", str(source), home=home, cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("imported 2 (created 2,")
    assert "quarantined 2 (held for review)" in done.stdout
    listed = json.loads(cli_run("memory", "list", "--all", "--json", home=home, cwd=project).stdout)
    by_key = {m["key"]: m for m in listed}
    # Untrusted by default: facts about the person from a file wait for review;
    # project notes are kept, labelled as read from a file.
    assert by_key["user_role"]["status"] == "quarantined"
    assert by_key["merge_freeze"]["status"] == "active"
    assert "from_file" in by_key["merge_freeze"]["flags"]
    assert by_key["merge_freeze"]["scope"] == str(project.resolve())


def test_trust_imports_them_as_the_users_own(cli_run: CliRunner, home: Path, project: Path) -> None:
    done = cli_run(
        "memory", "import", "--trust", "--from", "mem0", str(FIXTURES / "mem0" / "export.json"),
        home=home, cwd=project,
    )
    assert done.returncode == 0, done.stderr
    listed = json.loads(cli_run("memory", "list", "--json", home=home, cwd=project).stdout)
    assert {(m["category"], m["value"], m["status"]) for m in listed} >= {
        ("user", "Is a vegetarian and allergic to nuts", "active"),
        ("feedback", "Prefers concise answers without a closing summary", "active"),
    }


def test_dry_run_says_what_would_happen_and_writes_nothing(
    cli_run: CliRunner, home: Path, project: Path
) -> None:
    done = cli_run(
        "memory", "import", "--dry-run", "--from", "qwen-code", str(FIXTURES / "qwen-code"),
        home=home, cwd=project,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[4] == (
        "dry run, nothing written: imported 0 (created 0, superseded 0, refreshed 0, "
        "deduplicated 0); quarantined 4 (held for review); history restored 0; skipped 0; rejected 0"
    )
    assert lines[1].startswith("line 2: held for review [")
    assert "user/favourite_programming_language" in lines[1]  # named by meaning, not by its words
    assert json.loads(cli_run("memory", "list", "--all", "--json", home=home, cwd=project).stdout) == []


def test_a_missing_path_is_one_line_and_exit_1(cli_run: CliRunner, home: Path, project: Path) -> None:
    done = cli_run("memory", "import", "--from", "claude-code", str(project / "nope"), home=home, cwd=project)
    assert done.returncode == 1
    assert done.stderr.strip() == f"qwenmem: {project / 'nope'}: no such file or directory"
    assert "Traceback" not in done.stderr


def test_in_a_folder_only_memory_and_context_files_count(tmp_path: Path) -> None:
    (tmp_path / "commands").mkdir()
    (tmp_path / "commands" / "release.md").write_text("# Release\n- bump the version\n- tag it\n")
    (tmp_path / "CLAUDE.md").write_text("- Use bun, not npm\n```sh\n- not a bullet\n```\n")
    assert [r["value"] for r in rows("claude-code", tmp_path).values()] == ["Use bun, not npm"]
    # Named on its own, any Markdown file is read as a context file.
    assert len(read_source("claude-code", tmp_path / "commands" / "release.md")) == 2


def test_entries_keep_the_date_their_source_gives_them(tmp_path: Path) -> None:
    """mem0 stamps its memories and a memory file was last written when its fact was
    said: that date is the row's stated_at (issue 35 item 4); no date, none claimed."""
    found = rows("mem0", FIXTURES / "mem0" / "export.json")
    dated = {r["value"]: r.get("stated_at") for r in found.values()}
    assert dated == {
        "Is a vegetarian and allergic to nuts": "2024-07-20T01:30:36.275141-07:00",
        "Prefers concise answers without a closing summary": "2024-07-21T09:00:00Z",
        "The staging API is at https://staging.example.com": None,
    }
    folder = tmp_path / "memory"
    shutil.copytree(FIXTURES / "claude-code" / "memory", folder)
    role = folder / "user_role.md"
    os.utime(role, (1_700_000_000, 1_700_000_000))
    assert rows("claude-code", folder)["user_role"]["stated_at"] == "2023-11-14T22:13:20+00:00"


def test_a_transcripts_session_headings_are_read_as_dates_in_their_usual_shapes() -> None:
    from qwenmem_tui.memory.importers import session_date

    day = "2024-04-11T00:00:00+00:00"
    for heading in ("Session 2 — 2024-04-11", "11.04.2024", "2024年4月11日", "2. alkalom: 2024. 04. 11.", "11 April 2024"):
        assert session_date(heading) == day, heading
    assert session_date("2024-03-02T18:30") == "2024-03-02T18:30:00+00:00"
    assert session_date("2024-13-45") is None and session_date("room 2024, floor 5") is None


WHATSAPP = """12/03/2024, 14:20 - Messages and calls are end-to-end encrypted. No one outside of this chat can read them.
12/03/2024, 14:22 - Amina: Nimehamia Mombasa mwezi uliopita
12/03/2024, 14:23 - Juma: Hongera! Kazi mpya?
13/03/2024, 09:01 - Amina: Ndiyo, ninafanya kazi Safaricom sasa
"""
IPHONE = "[3/25/24, 2:22:05\u202fPM] Aigerim: Мен Алматыға көштім\n[3/25/24, 2:23:10\u202fPM] Dana: Құттықтаймын!\n"


def test_a_chat_apps_export_is_a_transcript_each_turn_said_when_stamped() -> None:
    """e2e10: a WhatsApp export ("12/03/2024, 14:22 - Amina: …", the chat export people
    have) was "neither JSON lines nor a conversation": its stamps hid the "Name: text"
    turns. The stamp is when the turn was said; the app's own notices are nobody's words;
    a US phone's month-first stamps are read as such ("3/25/24")."""
    from qwenmem_tui.memory.importers import read_transcript

    android = read_transcript(WHATSAPP, "Chat with Amina")
    assert android is not None
    assert [(r["value"], r["stated_at"]) for r in android] == [
        ("Amina: Nimehamia Mombasa mwezi uliopita", "2024-03-12T14:22:00+00:00"),
        ("Juma: Hongera! Kazi mpya?", "2024-03-12T14:23:00+00:00"),
        ("Amina: Ndiyo, ninafanya kazi Safaricom sasa", "2024-03-13T09:01:00+00:00"),
    ]
    iphone = read_transcript(IPHONE, "chat")
    assert iphone is not None
    assert [(r["value"], r["stated_at"]) for r in iphone] == [
        ("Aigerim: Мен Алматыға көштім", "2024-03-25T14:22:00+00:00"),
        ("Dana: Құттықтаймын!", "2024-03-25T14:23:00+00:00"),
    ]
    headed = read_transcript("2024-03-02 18:30\nAna: oi\nBia: olá\n", "c")
    assert headed is not None and [r["stated_at"] for r in headed] == ["2024-03-02T18:30:00+00:00"] * 2
