"""Keys typed while qwenmem is still starting reach the prompt as typed (issue 16/15).

Before Textual takes the terminal, the tty is in cooked mode: Enter arrives as a line
feed (Ctrl+J, a newline in the prompt) and the text echoes raw. `keep_early_keys` puts
the terminal in key-at-a-time mode at once and gives back exactly what it found.
"""

from __future__ import annotations

import os
import pty
import select
import termios

from qwenmem_tui.cli import keep_early_keys, typed_before


def test_early_keys_mode_on_a_real_pty_then_restored() -> None:
    leader, follower = pty.openpty()
    try:
        before = termios.tcgetattr(follower)
        assert before[0] & termios.ICRNL and before[3] & termios.ICANON  # cooked, as a shell leaves it
        with os.fdopen(os.dup(follower), "rb", buffering=0) as stream:
            restore = keep_early_keys(stream)
            during = termios.tcgetattr(follower)
            assert not during[0] & termios.ICRNL  # Enter stays a carriage return: "send"
            assert not during[3] & (termios.ICANON | termios.ECHO)
            os.write(leader, b"hi\r")  # typed before the app has the terminal
            assert os.read(follower, 16) == b"hi\r"  # nothing flushed, Enter not turned into \n
            restore()
        assert termios.tcgetattr(follower) == before
    finally:
        os.close(leader)
        os.close(follower)


def test_not_a_terminal_is_left_alone(tmp_path) -> None:
    with open(tmp_path / "in.txt", "w+b") as stream:
        restore = keep_early_keys(stream)
        restore()  # nothing to restore, and no error
        assert typed_before(stream) == b""


def test_what_was_typed_in_cooked_mode_comes_back_with_its_enter() -> None:
    """A question typed and sent before qwenmem switched the terminal: the cooked mode
    made its Enter a line feed (Ctrl+J, a newline in the prompt: the question stayed
    unsent); taken off the terminal, it comes back as typed, Enter a carriage return,
    with the line still being typed after it."""
    leader, follower = pty.openpty()
    try:
        with os.fdopen(os.dup(follower), "rb", buffering=0) as stream:
            os.write(leader, b"which editor?\rand th")  # before the switch: cooked
            # Readable in cooked mode once the line discipline has taken the whole line.
            assert select.select([follower], [], [], 10)[0]
            restore = keep_early_keys(stream)
            assert typed_before(stream) == b"which editor?\rand th"
            assert typed_before(stream) == b""  # taken once
            restore()
    finally:
        os.close(leader)
        os.close(follower)
