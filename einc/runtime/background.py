"""One daemon thread running jobs in the order they came: the work einc does off a call's
critical path (learn mode's kernels, :mod:`einc.runtime.learn`; the compiled copies,
:mod:`einc.runtime.torch_executor.compiled_copy`).  Each user holds its own
:class:`Worker`, made again in a forked child (the parent's thread does not exist there),
and says at exit how long a job already running may hold the process."""

from __future__ import annotations

import threading
from collections import deque


class Worker:
    """One daemon thread running jobs in the order they came."""

    def __init__(self, name: str = "einc-kernels"):
        self.name = name
        self.cond = threading.Condition()
        self.jobs: deque = deque()
        self.running = 0
        self.thread = None

    def submit(self, job) -> None:
        with self.cond:
            self.jobs.append(job)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self.thread.start()
            self.cond.notify_all()

    def _loop(self):
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.jobs)
                job = self.jobs.popleft()
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
            return self.cond.wait_for(lambda: not self.jobs and not self.running, timeout)

    def stop(self, timeout) -> None:
        """Drop the queued jobs and wait at most ``timeout`` s for a running one (at exit)."""
        with self.cond:
            self.jobs.clear()
        self.settle(timeout)


__all__ = ["Worker"]
