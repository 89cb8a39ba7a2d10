"""The machine's load, and what the benchmark does about it.

With torch running one thread per core, a core taken by another process makes every
parallel op wait for the scheduler to run its last thread, so per-call times inflate
to multiples of the scheduler's tick: rows timed so are noise, not measurements.
:func:`settle` runs before the timing: on a busy machine it waits for it to go idle,
else pins torch to one thread where a core is free for it, else refuses
(:class:`BusyMachine`).  During the run :class:`Load` samples the load around each
workload, and the runner re-times or flags a workload timed while the machine was busy.
Linux only (``/proc/stat``); elsewhere the load is unknown and nothing is done.
Standard library only (torch is passed in where threads are changed).
"""

from __future__ import annotations

import math
import os
import sys
import time

from ...errors import EincError

BUSY = 0.3          # cores kept busy by other processes that disturb a run with a thread per core
TICK = 2.0          # seconds per sample while waiting


class BusyMachine(EincError):
    """Other processes keep too many cores busy to time anything trustworthy."""


def _cpu_sample():
    """(wall s, CPU s busy machine-wide, CPU s of this process); None off Linux."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    t = os.times()
    return time.monotonic(), (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK"), t.user + t.system


def other_cores(a, b) -> float:
    """Cores kept busy by other processes between two :func:`_cpu_sample`; nan if unknown."""
    if a is None or b is None or b[0] <= a[0]:
        return float("nan")
    return max(0.0, (b[1] - a[1]) - (b[2] - a[2])) / (b[0] - a[0])


def measure(seconds: float) -> float:
    """Cores kept busy by other processes over the next ``seconds``."""
    a = _cpu_sample()
    time.sleep(seconds)
    return other_cores(a, _cpu_sample())


def fits(other: float, threads: int, cores: int | None = None) -> bool:
    """Whether ``threads`` threads run undisturbed beside ``other`` busy cores: on a machine
    torch fills (threads = cores) the others may keep at most :data:`BUSY` cores busy; with
    fewer threads, the cores torch leaves free minus that margin.  Unknown load fits."""
    cores = cores or os.cpu_count() or 1
    return math.isnan(other) or other <= max(BUSY, cores - threads - BUSY)


class Load:
    """Cores kept busy by *other* processes: before the run (``before``, a 0.5 s sample),
    during it, and what :func:`settle` did about it (``actions``); the runner adds the
    workloads it had to flag (``noisy``)."""

    settled = False             # whether settle() judged the load (else line() flags any)
    actions: list = ()
    noisy: list = ()

    def __init__(self, sample: float = 0.5):
        self.before = measure(sample)
        self.start = _cpu_sample()
        self.actions: list[str] = []
        self.noisy: list[str] = []

    def during(self) -> float:
        return other_cores(self.start, _cpu_sample())

    def warning(self) -> str:
        """'' on a quiet run, else the noise warning the report and the chart carry."""
        if self.noisy:
            return (f"machine busy while timing {len(self.noisy)} workload(s) ({', '.join(self.noisy)}): "
                    "their ratios are noise and are left out of the summary")
        if self.actions and any(a.startswith("quick") for a in self.actions):
            return "machine busy: a smoke test, timings are not trustworthy"
        return ""

    def line(self) -> str:
        during = self.during()
        text = f"cores busy with other processes: {self.before:.2f} before the run, {during:.2f} during it"
        if not self.settled and max(self.before, during) > BUSY:
            text += " **(machine not idle: timings are inflated and noisy)**"
        if self.actions:
            text += "; " + "; ".join(self.actions)
        warning = self.warning()
        return text + (f" **({warning})**" if warning else "")


def settle(load: Load, torch, *, wait: float, threads_set: bool, quick: bool, stream=None) -> None:
    """Make the run trustworthy before it starts, or refuse it.

    Where the threads torch uses do not :func:`fit` beside the other processes: wait up
    to ``wait`` seconds for the machine to quieten; then pin torch to one thread if that
    fits and the user did not choose ``--threads``; else raise :class:`BusyMachine`.
    A ``quick`` run (a smoke test) never waits or refuses: it is marked as noisy."""
    stream = stream if stream is not None else sys.stderr
    load.settled = True
    threads, cores = torch.get_num_threads(), os.cpu_count() or 1
    if fits(load.before, threads, cores):
        return
    busy = f"other processes keep {load.before:.1f} of {cores} cores busy"
    if quick:
        load.actions.append(f"quick run on a busy machine ({busy}, {threads} thread(s))")
        print(f"einc bench: warning: {busy}; a --quick run goes on, but its timings are not trustworthy",
              file=stream)
        return
    other, t0 = load.before, time.monotonic()
    if wait > 0:
        print(f"einc bench: {busy}, too many for {threads} torch thread(s): waiting up to {wait:.0f} s for "
              "the machine to quieten (--wait)", file=stream)
        while not fits(other, threads, cores) and time.monotonic() - t0 < wait:
            other = measure(TICK)
    waited = time.monotonic() - t0
    load.before = other
    if fits(other, threads, cores):
        load.actions.append(f"waited {waited:.0f} s for an idle machine")
        load.start = _cpu_sample()
        return
    if threads > 1 and not threads_set and fits(other, 1, cores):
        torch.set_num_threads(1)
        load.actions.append(f"pinned to 1 torch thread (other processes kept {other:.1f} cores busy)")
        print(f"einc bench: other processes keep {other:.1f} of {cores} cores busy: timing with 1 torch thread "
              "(pass --threads to choose)", file=stream)
        load.start = _cpu_sample()
        return
    raise BusyMachine(
        f"other processes keep {other:.1f} of {cores} cores busy (after waiting {waited:.0f} s), too many for "
        f"{threads} torch thread(s): the timings would be the scheduler's, so nothing was timed. Run it on an "
        "idle machine, wait longer (--wait S), or use fewer threads (--threads N); --quick runs anyway, as a "
        "smoke test")
