"""The per-session debug file: location, latest symlink, format, off switch, redaction."""

from __future__ import annotations

import logging
import re

from qwenmem_tui import debuglog
from qwenmem_tui.debuglog import Redactor
from qwenmem_tui.paths import Paths

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) \[[\w.]+\] ")


def test_writes_tagged_lines_and_points_latest(paths: Paths) -> None:
    path = debuglog.configure(paths, "sess-1", env={})
    assert path == paths.debug_dir / "sess-1.txt"
    logging.getLogger("qwenmem.test").info("[SESSION] started %s", "ok")
    latest = paths.debug_dir / "latest.txt"
    assert latest.is_symlink() and latest.resolve() == path.resolve()
    line = path.read_text().splitlines()[-1]
    assert LINE.match(line) and line.endswith("[qwenmem.test] [SESSION] started ok")


def test_switching_sessions_moves_the_log_and_latest(paths: Paths) -> None:
    first = debuglog.configure(paths, "one", env={})
    second = debuglog.configure(paths, "two", env={})
    logging.getLogger("qwenmem.test").warning("only in two")
    assert first is not None and second is not None
    assert "only in two" not in first.read_text()
    assert "only in two" in second.read_text()
    assert (paths.debug_dir / "latest.txt").resolve() == second.resolve()


def test_disabled_by_env(paths: Paths) -> None:
    assert debuglog.configure(paths, "off", env={"QWENMEM_DEBUG_LOG_FILE": "0"}) is None
    logging.getLogger("qwenmem.test").error("nowhere")
    assert not (paths.debug_dir / "off.txt").exists()


def test_secrets_and_key_shapes_are_redacted_in_messages_and_tracebacks(paths: Paths) -> None:
    path = debuglog.configure(paths, "secret", secrets=["hunter2-password"], env={})
    log = logging.getLogger("qwenmem.test")
    log.info("key=%s header=%s", "sk-abcdefghijklmnop", "Bearer tok_abcdefghijkl")
    log.info("configured password hunter2-password")
    try:
        raise RuntimeError("api_key: 'plain-secret-value' rejected")
    except RuntimeError:
        log.exception("[LLM] failed")
    text = path.read_text()
    for secret in (
        "sk-abcdefghijklmnop",
        "tok_abcdefghijkl",
        "hunter2-password",
        "plain-secret-value",
    ):
        assert secret not in text
    assert text.count("[REDACTED]") >= 4 and "Traceback" in text


def test_session_id_cannot_escape_the_debug_dir(paths: Paths) -> None:
    path = debuglog.configure(paths, "../../evil", env={})
    assert path is not None and path.parent == paths.debug_dir


def test_redactor_keeps_ordinary_text() -> None:
    redact = Redactor(["abc"])  # too short to be a secret: would mangle ordinary words
    assert redact("a sketch of the task, token count 12") == "a sketch of the task, token count 12"
    assert redact("Authorization: Bearer abcdefgh12345") == "Authorization: Bearer [REDACTED]"


def test_filter_for_other_handlers() -> None:
    record = logging.LogRecord(
        "qwenmem.x", logging.INFO, __file__, 1, "key %s", ("sk-1234567890ab",), None
    )
    assert debuglog.RedactingFilter(Redactor()).filter(record)
    assert record.getMessage() == "key [REDACTED]"
