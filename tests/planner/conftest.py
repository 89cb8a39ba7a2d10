"""A clock for the planner's clocked tests that other jobs on the machine do not move.

The planner bounds its searches on the wall clock (``time.perf_counter``): the slicer's
deadline past the hyper-optimizer's floor, and the last guard (CAP, or the hyper-optimizer's
share of it) of the hyper-optimizer's trials, annealing, the counted searches and the
slicer's stages (their own is the thread's CPU time, which the fixture leaves as it is). On a
loaded machine the wall clock runs several times faster than the planner's own work, so a
test of where those bounds stop the search would fail from the load alone. The
``cpu_clock`` fixture gives the planner's modules this thread's CPU time in its place (the
work the test can see), plus what the test's ``clock.sleep`` stands for (a slower trial,
made without waiting), and ``clock.rate`` times it (a slower machine).
"""

import sys
import time

import pytest


class Clock:
    """``time`` as the planner's modules see it, with ``perf_counter`` this thread's CPU
    time times ``rate``, plus the seconds ``sleep`` stood for."""

    def __init__(self):
        self.rate, self.slept = 1.0, 0.0

    def perf_counter(self) -> float:
        return self.rate * time.thread_time() + self.slept

    def sleep(self, seconds: float) -> None:
        self.slept += seconds

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture
def cpu_clock(monkeypatch):
    clock = Clock()
    for name, module in list(sys.modules.items()):
        if name.startswith("einc.planner") and getattr(module, "time", None) is time:
            monkeypatch.setattr(module, "time", clock)
    return clock
