"""Timing: calibrated batches, methods interleaved round-robin, medians.

Method: every callable is timed in *batches* of back-to-back calls, with the batch
size calibrated so one batch takes at least ``target`` seconds (timer resolution and
loop overhead then do not matter).  The callables are timed round-robin -- one batch
of each per round, in a freshly shuffled order every round -- so that slow drifts of
a noisy machine (frequency scaling, other processes) hit all methods alike.  The
reported figure is the median over rounds of the per-call time of a batch.

``sync`` (e.g. ``torch.cuda.synchronize``) is called before the clock starts and
before it stops, so that asynchronous launches are timed to completion.  Standard
library only.
"""

from __future__ import annotations

import gc
import math
import random
import statistics
import time
from dataclasses import dataclass


def time_batch(fn, n: int, sync=None) -> float:
    """Seconds per call of ``n`` back-to-back calls of ``fn()``, with the GC paused."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if sync is not None:
            sync()
        return (time.perf_counter() - t0) / n
    finally:
        if enabled:
            gc.enable()


def calibrate(fn, target: float = 2e-3, max_n: int = 1_000_000, sync=None) -> tuple[int, float]:
    """Smallest batch size (roughly) whose batch takes >= ``target`` s; also returns s/call."""
    n = 1
    while True:
        per_call = time_batch(fn, n, sync)
        if per_call * n >= target or n >= max_n:
            return n, per_call
        n = min(max_n, max(2 * n, math.ceil(1.2 * target / max(per_call, 1e-9))))


@dataclass
class Timing:
    median: float          # seconds per call, median over rounds
    calls: int             # calls per batch
    samples: list[float]   # seconds per call, one per round


def interleaved(fns: dict, rounds: int, budget: float, min_rounds: int = 5,
                target: float = 2e-3, seed: int = 0, sync=None) -> tuple[dict[str, Timing], int]:
    """Time every callable in ``fns`` round-robin; returns ({name: Timing}, rounds run).

    The callables must already be warmed up.  ``rounds`` is lowered so that all rounds
    together take about ``budget`` seconds, but never below ``min_rounds``.

    >>> t, n = interleaved({"noop": lambda: None}, rounds=3, budget=0.01, min_rounds=1)
    >>> n >= 1 and t["noop"].median >= 0
    True
    """
    calls, round_s = {}, 0.0
    for name, fn in fns.items():
        calls[name], per_call = calibrate(fn, target, sync=sync)
        round_s += calls[name] * per_call
    rounds = max(min_rounds, min(rounds, int(budget / max(round_s, 1e-9))))
    samples = {name: [] for name in fns}
    order, rng = list(fns), random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            samples[name].append(time_batch(fns[name], calls[name], sync))
    return {name: Timing(statistics.median(s), calls[name], s) for name, s in samples.items()}, rounds


def ratio_interval(a: Timing, b: Timing, level: float = 0.95) -> tuple[float, float, float]:
    """``(median, low, high)`` of the per-round ratios ``a / b`` of two methods timed in
    the same :func:`interleaved` run (round ``k`` of each was timed back to back, so the
    ratio is paired), with a distribution-free ``level`` interval for that median: the
    order statistics that the binomial(n, 1/2) law puts around it (the sign test's
    interval).  With too few rounds for ``level`` the interval is the whole range.

    >>> ratio_interval(Timing(1, 1, [1.0] * 9), Timing(1, 1, [2.0] * 9))
    (0.5, 0.5, 0.5)
    """
    r = sorted(x / y for x, y in zip(a.samples, b.samples))
    n = len(r)
    k, tail = 0, 0.0                 # the most order statistics below the interval: P(Bin < k) <= (1 - level) / 2
    while k < n and tail + math.comb(n, k) / 2 ** n <= (1 - level) / 2:
        tail += math.comb(n, k) / 2 ** n
        k += 1
    lo, hi = (r[k - 1], r[n - k]) if k else (r[0], r[-1])
    return statistics.median(r), lo, hi
