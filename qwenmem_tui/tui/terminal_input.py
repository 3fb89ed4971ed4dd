"""What the terminal sends, made whole before Textual's parser reads it.

Textual's input parser reads one character at a time and gives up on an escape
sequence that is still incomplete ESCAPE_DELAY (0.1 s) after its last byte, then
replays what it has as typed keys. Two things users do lost their meaning that way:

- **A mouse report split across reads** (over ssh, or when the machine is too busy to
  read the second half in time): `ESC [ < 0 ; 8` was replayed as the text "[<0;8" and
  the rest, ";18m", followed as more text — into the prompt, then to the model.
- **Alt+Enter**: terminals and tmux send it as ESC CR, which the parser knows only as
  Enter (it sent the message instead of inserting a newline), and an ESC CR followed
  by more input before the timeout turned into a "^" and an Enter.

`InputCleaner` is a pure filter (no Textual, an injected clock) that sits between
the terminal and the parser: it hands on only whole escape sequences, holding an
incomplete one until the rest arrives; it rewrites ESC CR as the unambiguous form
of Alt+Enter (the kitty keyboard protocol's `CSI 13;3u`, which the parser reads as
"alt+enter"); and it never touches a bracketed paste. `CleanInputDriver` is
Textual's own Linux driver reading through it; it also lets the parser's timeout
run only when no more input is waiting, so a slow read never splits a sequence.
"""

from __future__ import annotations

import errno
import os
import re
import selectors
import threading
import time
from codecs import getincrementaldecoder

# The one Textual internal qwenmem uses: the parser its Linux driver reads with. The
# driver below feeds it exactly as Textual's own loop does (feed, tick), only with
# whole sequences. There is no public route (Textual 8.2): `LinuxDriver.run_input_thread`
# builds its XTermParser inside and offers no hook between the terminal and it, and
# `textual.events` has no parser of its own. The one way around it — a pipe between
# the terminal and the stock driver, fed by another thread — copies every byte once
# more and loses the "tick only when no input waits" rule that keeps a slow read from
# splitting a sequence, for a private name that has been stable since Textual 0.x.
from textual._xterm_parser import XTermParser  # noqa: PLC2701
from textual.drivers.linux_driver import LinuxDriver

ESC = "\x1b"
ALT_ENTER = "\x1b[13;3u"
"""Alt+Enter in the kitty keyboard protocol: Enter (13) with the Alt modifier (3)."""
PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"
ESCAPE_SECONDS = 0.1
"""How long a lone ESC waits to become more than the Escape key: Textual's own
ESCAPE_DELAY. Released, it goes on as the kitty protocol's unambiguous Escape, so
the parser does not wait that long a second time."""
ESCAPE_KEY = "\x1b[27u"
HOLD_SECONDS = 1.0
"""How long an incomplete escape sequence waits for its end. Far longer than a split
read takes to complete (milliseconds); a sequence still incomplete then is cut off."""
CLOSE_SECONDS = 2.0
"""The longest the driver's close waits for the output to drain (it takes
milliseconds, unless the terminal is gone)."""
MAX_SEQUENCE = 32
"""Longer than any key or mouse report: a run this long without an end is not one."""
_MOUSE_PREFIX = re.compile(r"\x1b\[<[\d;]*\Z")
_CSI_BODY = re.compile(r"[\x20-\x3f]*")  # parameter and intermediate bytes


class InputCleaner:
    """Turns raw terminal text into text whose escape sequences are whole.

    `feed` returns what may be parsed now; `flush`, called when no more input is
    waiting, releases a held lone ESC as the Escape key once it has waited
    ESCAPE_SECONDS, and an incomplete sequence once it has waited HOLD_SECONDS
    (dropped if it began a mouse report: half of one is nothing anyone typed).
    """

    def __init__(self, *, hold_seconds: float = HOLD_SECONDS) -> None:
        self._hold_seconds = hold_seconds
        self._held = ""
        self._held_since = 0.0
        self._in_paste = False

    @property
    def holding(self) -> bool:
        """Part of a sequence is waiting for the rest."""
        return bool(self._held)

    def feed(self, data: str, now: float) -> str:
        """The part of `held + data` that can be parsed now; the rest is held."""
        if not self._held:
            self._held_since = now
        text, self._held = self._held + data, ""
        out: list[str] = []
        index = 0
        while index < len(text):
            end = text.find(ESC, index)
            if end < 0:
                out.append(text[index:])
                break
            out.append(text[index:end])
            index = end
            taken = self._sequence(text, index)
            if taken is None:  # incomplete: wait for the rest
                self._held = text[index:]
                break
            sequence, index = taken
            out.append(sequence)
        return "".join(out)

    def flush(self, now: float) -> str:
        """What no further input will complete: called when none is waiting."""
        held = self._held
        waited = now - self._held_since
        if not held or waited < (ESCAPE_SECONDS if held == ESC else self._hold_seconds):
            return ""
        self._held = ""
        if held == ESC:
            return ESCAPE_KEY
        return "" if _MOUSE_PREFIX.match(held) else held

    def _sequence(self, text: str, start: int) -> tuple[str, int] | None:
        """The escape sequence at `start` as it should reach the parser, and where the
        text after it begins; None when it is not complete yet."""
        rest = text[start:]
        if self._in_paste:
            if rest.startswith(PASTE_END):
                self._in_paste = False
                return PASTE_END, start + len(PASTE_END)
            if PASTE_END.startswith(rest):
                return None
            return ESC, start + 1  # an ESC inside pasted text: it stays text
        if len(rest) == 1:
            return None  # a lone ESC: the Escape key, or the start of something longer
        follower = rest[1]
        if follower == "\r":
            return ALT_ENTER, start + 2
        if follower != "[":
            return ESC, start + 1  # Alt+key, SS3 keys: the parser reads those whole
        body = _CSI_BODY.match(rest, 2)
        assert body is not None  # the pattern matches the empty string
        final = body.end()
        if final >= len(rest):
            if len(rest) > MAX_SEQUENCE:
                return rest, start + len(rest)  # not a sequence: let the parser judge
            return None
        sequence = rest[: final + 1]
        if sequence == PASTE_START:
            self._in_paste = True
        return sequence, start + len(sequence)


class CleanInputDriver(LinuxDriver):
    """Textual's Linux driver, its input read through an `InputCleaner`.

    An app's `early_input` (bytes typed before it took the terminal, if it has any)
    is read first, before the terminal.

    It also outlives its terminal: when the terminal hangs up (the window closed),
    writing to it fails and Textual's writer thread dies; stopping that thread then
    blocked the process for good at the very end of the exit (the session already
    stored). Once the input side sees the hangup, output goes nowhere, and the final
    close waits at most CLOSE_SECONDS (the hangup may come after input has stopped).
    """

    terminal_gone = False
    """The terminal hung up: nothing written reaches anyone any more."""

    def write(self, data: str) -> None:
        if not self.terminal_gone and self._hung_up():
            self.terminal_gone = True
        if not self.terminal_gone:
            super().write(data)

    def _hung_up(self) -> bool:
        """The terminal hung up, seen from the output side: a write of nothing fails
        with EIO. The input side stops looking once the app quits, and a hangup then
        (tmux killed, the window closed while quitting) killed Textual's writer thread
        on its next write: every write after that waited for room in its queue forever,
        and the process never exited."""
        try:
            os.write(self.fileno, b"")
        except OSError as exc:
            return exc.errno == errno.EIO
        return False

    def close(self) -> None:
        if self.terminal_gone:
            return
        # In a thread: a writer that died with a full queue never takes the last item.
        closing = threading.Thread(target=super().close, name="qwenmem-close", daemon=True)
        closing.start()
        closing.join(CLOSE_SECONDS)

    def run_input_thread(self) -> None:
        """Wait for input and dispatch events (Textual's loop, with the cleaner)."""
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        parser = XTermParser()
        cleaner = InputCleaner()
        decode = getincrementaldecoder("utf-8")().decode

        def parse(text: str) -> None:
            if text:
                for event in parser.feed(text):
                    self.process_message(event)

        # What was typed before the app took the terminal goes first, as typed.
        parse(cleaner.feed(decode(getattr(self._app, "early_input", b"")), time.monotonic()))
        try:
            while not self.exit_event.is_set():
                if selector.select(0.1):
                    try:
                        data = decode(os.read(self.fileno, 1024 * 4))
                    except OSError:  # EIO: the terminal hung up
                        self.terminal_gone = True
                        break
                    if not data:  # a terminal at end of input has hung up
                        self.terminal_gone = os.isatty(self.fileno)
                        break
                    parse(cleaner.feed(data, time.monotonic()))
                    if selector.select(0):
                        continue  # more is waiting: read it before any timeout runs
                parse(cleaner.flush(time.monotonic()))
                for event in parser.tick():
                    self.process_message(event)
        finally:
            selector.close()
            try:
                for _event in parser.feed(""):
                    pass
            except Exception:  # noqa: BLE001 - the parser at EOF; nothing left to show
                pass
