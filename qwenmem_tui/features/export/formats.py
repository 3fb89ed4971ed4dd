"""A stored session written out: Markdown for people, JSON for programs.

One module for `/export` and `qwenmem sessions export`, so both write the same file.
Markdown folds tool calls (`<details>`, the result inside), marks /clear points,
shows a feature's display items as the feature renders them (`ItemKind.markdown`,
found in the registry: export knows no other feature), and notes replies that were
interrupted; JSON is the session's info and its items as stored. Either way the
text passes the secret scanner first: an export is a file that travels, and a key
pasted in a chat must not travel with it. JSON is redacted value by value before it is
serialised: redacting the serialised text would read escapes (`\\n`) as part of a secret
and could cut one in half, leaving invalid JSON and the secret's tail.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Literal

from qwenmem_tui import secrets
from qwenmem_tui.chat.view import content_text
from qwenmem_tui.features import registry
from qwenmem_tui.features.feature import load_function
from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.storage.sessions import Item, SessionInfo

ExportFormat = Literal["md", "json"]
TOOL_RESULT_CHARS = 4000
"""A tool result in a Markdown export is cut here (the JSON has it whole)."""


def export_session(
    info: SessionInfo, items: Sequence[Item], fmt: ExportFormat = "md", *, now: float | None = None
) -> str:
    """The session as Markdown or JSON text, secrets redacted."""
    now = time.time() if now is None else now
    if fmt == "json":
        return to_json(info, items)
    return secrets.redact(to_markdown(info, items, now=now))


def to_json(info: SessionInfo, items: Sequence[Item]) -> str:
    """The session's info and every item, as stored, every string redacted."""
    data: JSONObject = {
        "id": info.id,
        "title": info.title,
        "project": info.project,
        "created_at": info.created_at,
        "updated_at": info.updated_at,
        "message_count": info.message_count,
        "items": [
            {
                "id": item.id,
                "type": item.type,
                "content": item.content,
                "message": item.message,
                "meta": item.meta,
                "created_at": item.created_at,
            }
            for item in items
        ],
    }
    return json.dumps(_redacted(data), ensure_ascii=False, indent=2) + "\n"


def _redacted(value: object) -> object:
    """``value`` with every string in it (keys too) passed through the secret scanner;
    a string holding JSON (a tool call's arguments) is redacted value by value too."""
    if isinstance(value, str):
        return _redacted_text(value)
    if isinstance(value, dict):
        return {_redacted(k): _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    return value


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def _fence(text: str) -> str:
    """A code fence longer than any backtick run in `text` (a result holding a fence)."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def _tool_block(name: str, arguments: str, result: str, is_error: bool) -> str:
    status = "✗" if is_error else "✓"
    args = " ".join(arguments.split())
    shown = result if len(result) <= TOOL_RESULT_CHARS else (
        result[:TOOL_RESULT_CHARS] + f"\n[… {len(result) - TOOL_RESULT_CHARS} more characters]"
    )
    fence = _fence(shown)
    return (
        f"<details><summary>{status} tool <code>{_html(name)}({_html(args)})</code></summary>\n\n"
        f"{fence}\n{shown}\n{fence}\n\n</details>"
    )


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_markdown(info: SessionInfo, items: Sequence[Item], *, now: float) -> str:
    """The conversation as a person reads it (see the module docstring)."""
    title = info.title or "(untitled)"
    out = [
        f"# {title}",
        "",
        f"Session `{info.id}` · project `{info.project}` · started {_stamp(info.created_at)} · "
        f"{info.message_count} messages",
    ]
    calls = _calls(items)
    for item in items:
        block = _item_markdown(item, calls, now)
        if block:
            out += ["", block]
    return "\n".join(out) + "\n"


def _calls(items: Sequence[Item]) -> dict[str, tuple[str, str]]:
    calls: dict[str, tuple[str, str]] = {}
    for item in items:
        for call in (item.message or {}).get("tool_calls") or ():
            function = call.get("function") or {}
            calls[str(call.get("id", ""))] = (
                str(function.get("name", "tool")),
                str(function.get("arguments", "")),
            )
    return calls


def _item_markdown(item: Item, calls: dict[str, tuple[str, str]], now: float) -> str:
    message = item.message or {}
    if item.type == "user":
        return f"## You\n\n{content_text(message.get('content', item.content))}"
    if item.type == "assistant":
        text = content_text(message.get("content", item.content)).strip()
        if not text:
            return ""  # a reply that only called tools: the calls follow
        note = "\n\n*(interrupted)*" if item.meta.get("interrupted") else ""
        return f"## Assistant\n\n{text}{note}"
    if item.type == "tool":
        name, arguments = calls.get(str(message.get("tool_call_id", "")), ("tool", ""))
        return _tool_block(
            str(item.meta.get("tool_name", name)),
            str(item.meta.get("arguments", arguments)),
            content_text(message.get("content", item.content)),
            bool(item.meta.get("is_error")),
        )
    kind = registry.item_kind(item.type)  # a feature's item: its own renderer
    if kind is not None and kind.markdown is not None:
        rendered = load_function(kind.markdown)(item, now)
        if not isinstance(rendered, str):
            raise TypeError(f"{kind.markdown} rendered a {type(rendered).__name__}, not text")
        return rendered
    if item.meta.get("reset"):
        return "---\n\n*(/clear: the model did not see the messages above)*"
    if item.type == "error":
        return f"*✗ {item.content}*"
    return f"*{item.content}*" if item.content.strip() else ""


def default_name(info: SessionInfo, fmt: ExportFormat = "md") -> str:
    """`qwenmem-<first 8 of the id>.md`: where /export writes without a file name."""
    return f"qwenmem-{info.id[:8]}.{fmt}"


def _redacted_text(text: str) -> str:
    if text.lstrip()[:1] in ("{", "["):
        try:
            inner = json.loads(text)
        except (ValueError, RecursionError):
            inner = None
        if isinstance(inner, dict | list):
            cleaned = _redacted(inner)
            if cleaned != inner:
                return json.dumps(cleaned, ensure_ascii=False)
    return secrets.redact(text)
