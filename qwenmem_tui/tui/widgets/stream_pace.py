"""How fast a reply is arriving, in the unit rendering costs: lines."""

from __future__ import annotations

from collections import deque


class StreamPace:
    """Lines received over the last `window` seconds, on whatever clock the caller reads.

    A pure counter (no clock of its own): the reply widget asks it whether the stream
    outruns what Markdown widgets can be built for, and tests feed it times directly.
    """

    def __init__(self, window: float = 1.0) -> None:
        self.window = window
        self._arrivals: deque[tuple[float, int]] = deque()
        self._lines = 0

    def add(self, now: float, text: str) -> None:
        """Count `text`'s lines as received at `now`."""
        lines = text.count("\n")
        if lines:
            self._arrivals.append((now, lines))
            self._lines += lines
        self._forget(now)

    def lines(self, now: float) -> int:
        """Lines received in the `window` seconds up to `now`."""
        self._forget(now)
        return self._lines

    def _forget(self, now: float) -> None:
        while self._arrivals and self._arrivals[0][0] <= now - self.window:
            self._lines -= self._arrivals.popleft()[1]
