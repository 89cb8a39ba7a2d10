"""A minimal progress bar on stderr (no dependency).

On a terminal it redraws one line (``[######------] 12/32  18 s  attn_scores_bshd``);
otherwise (a log file, CI) it prints one line per item, so the log stays readable.
"""

from __future__ import annotations

import sys
import time


class Progress:
    """``start(label)`` before an item, ``advance()`` after it, ``close()`` at the end.

    >>> import io
    >>> p = Progress(2, stream=io.StringIO()); p.start("a"); p.advance(); p.close()
    """

    def __init__(self, total: int, stream=None, width: int = 24):
        self.total, self.done, self.width = total, 0, width
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.label = ""

    def _line(self) -> str:
        filled = self.width * self.done // max(self.total, 1)
        bar = "#" * filled + "-" * (self.width - filled)
        return f"[{bar}] {self.done}/{self.total}  {time.perf_counter() - self.t0:4.0f} s  {self.label}"

    def start(self, label: str) -> None:
        self.label = label
        if self.tty:
            self.stream.write("\r\033[K" + self._line())
        else:
            self.stream.write(f"[{self.done + 1}/{self.total}] {label} ...\n")
        self.stream.flush()

    def advance(self) -> None:
        self.done += 1
        if self.tty:
            self.stream.write("\r\033[K" + self._line())
            self.stream.flush()

    def close(self) -> None:
        elapsed = time.perf_counter() - self.t0
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(f"{self.done}/{self.total} done in {elapsed:.1f} s\n")
        self.stream.flush()
