"""The prompt history caps entry size (issue 25 item 5): a pasted file is not kept."""

from __future__ import annotations

import json
from pathlib import Path

from qwenmem_tui.prompt_history import MAX_ENTRY_CHARS, PromptHistory


def test_a_prompt_over_the_cap_is_not_kept(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    history = PromptHistory(path, "/p")
    assert history.add("x" * (MAX_ENTRY_CHARS + 1)) == ""
    assert history.add("short one") == "short one"
    assert history.entries == ["short one"]
    assert [json.loads(line)["text"] for line in path.read_text().splitlines()] == ["short one"]
    # A file written before the cap: its giant lines are not read back.
    with path.open("a") as handle:
        handle.write(json.dumps({"project": "/p", "text": "y" * (MAX_ENTRY_CHARS + 5), "at": 0}) + "\n")
    assert PromptHistory(path, "/p").entries == ["short one"]
