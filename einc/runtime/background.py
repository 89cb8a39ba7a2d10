"""Daemon threads running jobs in the order they came: the work einc does off a call's
critical path (learn mode's kernels, :mod:`einc.runtime.learn`; the compiled copies,
:mod:`einc.runtime.torch_executor.compiled_copy`).  A :class:`Worker` starts jobs in
order on at most ``threads`` threads (one by default: one job at a time); a job submitted
``later`` starts only when no other is queued.  Each user holds its own, made again in a
forked child (the parent's threads do not exist there), and says at exit how long the
jobs already running may hold the process."""

from __future__ import annotations

import threading
from collections import deque


class Worker:
    """Daemon threads running jobs in the order they came, at most ``threads`` at once
    (an int, or a function returning it, read at each submit)."""

    def __init__(self, name: str = "einc-kernels", threads=1):
        self.name = name
        self.threads = threads
        self.cond = threading.Condition()
        self.jobs: deque = deque()
        self.later: deque = deque()     # jobs that start only when ``jobs`` is empty
        self.running = 0
        self.started = 0                # threads started (each runs until the process ends)

    def submit(self, job, later: bool = False) -> None:
        """Queue ``job``; ``later``: behind every job queued without it, now or after."""
        with self.cond:
            (self.later if later else self.jobs).append(job)
            wanted = self.threads() if callable(self.threads) else self.threads
            if self.started < max(1, wanted):
                threading.Thread(target=self._loop, name=self.name, daemon=True).start()
                self.started += 1
            self.cond.notify_all()

    def _loop(self):
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.jobs or self.later)
                job = (self.jobs or self.later).popleft()
                self.running += 1
            try:
                job()
            except BaseException:   # noqa: BLE001 - a job records its own failure; the thread goes on
                pass
            finally:
                with self.cond:
                    self.running -= 1
                    self.cond.notify_all()

    def settle(self, timeout=None) -> bool:
        """Wait until no job is queued or running (at most ``timeout`` s); whether none is."""
        with self.cond:
            return self.cond.wait_for(lambda: not self.jobs and not self.later and not self.running, timeout)

    def stop(self, timeout) -> None:
        """Drop the queued jobs and wait at most ``timeout`` s for those running (at exit)."""
        with self.cond:
            self.jobs.clear()
            self.later.clear()
        self.settle(timeout)


__all__ = ["Worker"]
