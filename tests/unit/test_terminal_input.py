"""Raw terminal bytes through qwenmem's input cleaner and Textual's parser, as the
driver reads them: mouse reports are never text however the reads split them, and
Alt+Enter (ESC CR) is its own key."""

from __future__ import annotations

import pytest
from textual import events
from textual._xterm_parser import XTermParser
from textual.constants import ESCAPE_DELAY

from qwenmem_tui.tui.terminal_input import ALT_ENTER, HOLD_SECONDS, InputCleaner

PRESS_RELEASE = "\x1b[<0;8;18M\x1b[<0;8;18m"


class Terminal:
    """The driver's loop without the tty: each read is cleaned and parsed at `now`,
    and the parser's timeout runs (as it does when no input is waiting) at `idle`."""

    def __init__(self) -> None:
        self.cleaner = InputCleaner()
        self.parser = XTermParser()
        self.events: list[object] = []
        self.now = 0.0

    def read(self, data: str) -> None:
        self._parse(self.cleaner.feed(data, self.now))

    def idle(self, seconds: float) -> None:
        """Nothing more arrives for `seconds` (the parser's timeout may fire)."""
        self.now += seconds
        self._parse(self.cleaner.flush(self.now))
        if seconds >= ESCAPE_DELAY and self.parser._timeout_time is not None:
            # The parser's timeout (ESCAPE_DELAY after its last input) has passed; its
            # clock is the real one, moved here instead of sleeping.
            self.parser._timeout_time = 0.0
        self.events += list(self.parser.tick())

    def _parse(self, text: str) -> None:
        if text:
            self.events += list(self.parser.feed(text))

    def text(self) -> str:
        return "".join(
            e.character or "" for e in self.events if isinstance(e, events.Key) and e.is_printable
        )

    def keys(self) -> list[str]:
        return [e.key for e in self.events if isinstance(e, events.Key)]

    def mouse(self) -> list[str]:
        return [type(e).__name__ for e in self.events if isinstance(e, events.MouseEvent)]


@pytest.mark.parametrize(
    ("reads", "gap"),
    [
        ([PRESS_RELEASE], 0.3),  # press and release in one read
        (["ab" + PRESS_RELEASE + "cd"], 0.3),  # between typed keys
        (["\x1b[<0;8", ";18M\x1b[<0;8;18m"], 0.3),  # split in the middle of the press
        (["\x1b[", "<", "0", ";8;18M", "\x1b[<0;8;1", "8m"], 0.3),  # bytes straggling in
        # Right after an ESC the rest must follow within ESCAPE_SECONDS, as for Textual:
        # later, an ESC alone is the Escape key.
        (["\x1b[<0;8;18M\x1b", "[<0;8;18m"], 0.05),
    ],
)
def test_a_mouse_report_is_never_text_however_the_reads_split_it(
    reads: list[str], gap: float
) -> None:
    term = Terminal()
    for data in reads:
        term.read(data)
        term.idle(gap)  # the parser alone would have timed out and typed the rest
    term.idle(0.3)
    assert term.text() in ("", "abcd")
    assert term.mouse() == ["MouseDown", "MouseUp"]


def test_half_a_mouse_report_that_never_ends_is_dropped_not_typed() -> None:
    term = Terminal()
    term.read("x\x1b[<0;8;1")
    term.idle(0.5)
    assert term.text() == "x" and term.cleaner.holding  # still waiting for the rest
    term.idle(HOLD_SECONDS)
    term.read("y")
    term.idle(0.3)
    assert term.text() == "xy" and not term.cleaner.holding


@pytest.mark.parametrize(
    "reads",
    [["alpha\x1b\rbeta"], ["alpha", "\x1b\r", "beta"], ["alpha\x1b", "\rbeta"]],
)
def test_alt_enter_sent_as_esc_cr_is_alt_enter(reads: list[str]) -> None:
    term = Terminal()
    for data in reads:
        term.read(data)
    term.idle(0.3)
    assert term.keys() == [*"alpha", "alt+enter", *"beta"]


def test_escape_alone_is_still_the_escape_key_and_alt_keys_still_work() -> None:
    term = Terminal()
    term.read("\x1b")
    term.idle(0.3)
    term.read("\x1ba")
    term.idle(0.3)
    term.read("\x1b[A")  # Up
    assert term.keys() == ["escape", "alt+a", "up"]


def test_a_bracketed_paste_is_left_alone() -> None:
    pasted = "line one\rline two [<0;8;18m"
    term = Terminal()
    term.read("\x1b[200~" + pasted[:12])
    term.read(pasted[12:] + "\x1b[20")
    term.read("1~z")
    term.idle(0.3)
    pastes = [e.text for e in term.events if isinstance(e, events.Paste)]
    assert pastes == [pasted]
    assert term.keys() == ["z"]


def test_the_cleaner_rewrites_only_esc_cr() -> None:
    cleaner = InputCleaner()
    assert cleaner.feed("a\x1b\rb\r", 0.0) == f"a{ALT_ENTER}b\r"


def test_output_to_a_terminal_that_hung_up_goes_nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    # A hangup while the app quits (the input side no longer looking) killed Textual's
    # writer thread on its next write; every write after it waited forever for room in
    # the dead thread's queue, and the process never exited.
    import os
    import pty

    from textual.drivers.linux_driver import LinuxDriver

    from qwenmem_tui.tui.terminal_input import CleanInputDriver

    written: list[str] = []
    monkeypatch.setattr(LinuxDriver, "write", lambda self, data: written.append(data))
    master, slave = pty.openpty()
    driver = CleanInputDriver.__new__(CleanInputDriver)  # no app: only its output side
    driver.fileno = slave
    try:
        driver.write("a frame")
        assert written == ["a frame"] and not driver.terminal_gone
        os.close(master)  # the terminal hangs up
        driver.write("the mouse off, on the way out")
        assert written == ["a frame"] and driver.terminal_gone
    finally:
        os.close(slave)
