"""How fast a reply is arriving, in the unit rendering costs: lines on screen."""

from __future__ import annotations

from collections import deque

from rich.cells import cell_len


def wrapped_lines(text: str, width: int) -> float:
    """About the lines `text` adds to the screen at `width` cells: its line breaks and
    its wrapping (a fragment of a paragraph adds the part of a line it fills)."""
    return text.count("\n") + cell_len(text) / max(1, width)


class StreamPace:
    """Lines received over the last `window` seconds, on whatever clock the caller reads.

    A pure counter (no clock of its own): the reply widget asks it whether the stream
    outruns what Markdown widgets can be built for, and tests feed it times directly.
    """

    def __init__(self, window: float = 1.0) -> None:
        self.window = window
        self._arrivals: deque[tuple[float, float]] = deque()
        self._lines = 0.0

    def add(self, now: float, lines: float) -> None:
        """Count `lines` as received at `now`."""
        if lines:
            self._arrivals.append((now, lines))
            self._lines += lines
        self._forget(now)

    def lines(self, now: float) -> float:
        """Lines received in the `window` seconds up to `now`."""
        self._forget(now)
        return self._lines

    def _forget(self, now: float) -> None:
        while self._arrivals and self._arrivals[0][0] <= now - self.window:
            self._lines -= self._arrivals.popleft()[1]
        if not self._arrivals:
            self._lines = 0.0  # no float residue
