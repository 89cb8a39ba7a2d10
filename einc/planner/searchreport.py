"""What a path search reports (:class:`Report`, ``explain``'s line; :class:`Exact` for the
search of 6-16 operands) and how it shows a long search's progress (:class:`Progress`);
:mod:`einc.planner.search` fills them."""

from __future__ import annotations

import logging
import math
import sys
from typing import NamedTuple

log = logging.getLogger("einc")


class Report(NamedTuple):
    """What a search did: ``method`` (``"greedy"``, ``"random greedy"``, ``"hyper"``),
    ``seconds`` it ran, ``trials`` (trees tried), ``reason`` it stopped, the predicted
    seconds of the greedy path and of the path kept, and the kept path's flops and largest
    intermediate (elements).  A named tuple, not a frozen dataclass, which is far slower
    to make: a process that reads its path from disk makes this class."""

    method: str
    seconds: float
    trials: int
    reason: str
    greedy_seconds: float
    best_seconds: float
    flops: float
    largest: float
    budget: float

    def text(self) -> str:
        gain = self.greedy_seconds / self.best_seconds if self.best_seconds else 1.0
        return (f"Path search: {self.method}, {self.trials} tree{'s' if self.trials != 1 else ''} in "
                f"{seconds_text(self.seconds)} (budget {seconds_text(self.budget)}); stopped: {self.reason}; predicted "
                f"contraction {seconds_text(self.best_seconds)} ({gain:.3g}x better than greedy's "
                f"{seconds_text(self.greedy_seconds)}; einc.planner.search)")


class Exact(NamedTuple):
    """What einc's search of 6-16 operands did (:func:`einc.planner.options._remembered`):
    ``dp``, the dynamic programming that ran; ``seconds`` the search took, or reading its
    path back took; ``remembered``, whether the path was read back from the path cache,
    found by an earlier search of ``earlier`` seconds (None: not recorded); ``stored``,
    whether this search's path was stored there for later processes."""

    dp: str
    seconds: float
    remembered: bool
    earlier: float | None
    stored: bool

    def text(self) -> str:
        search = f"dynamic programming ({self.dp}), or opt_einsum's auto path where it costs fewer flops"
        if self.remembered:
            earlier = "" if self.earlier is None else f" of {seconds_text(self.earlier)}"
            return (f"Path search: remembered (einc.planner.pathcache): {search}; read back in "
                    f"{seconds_text(self.seconds)}, found by an earlier search{earlier} (einc.planner.options)")
        then = "stored in the path cache for later processes" if self.stored else \
            "not stored (quicker than options.DP_STORE_SECONDS: searched again sooner than read)"
        return f"Path search: {search}, in {seconds_text(self.seconds)}; {then} (einc.planner.options)"


def exact(memory_limit, seconds: float, record: dict | None = None, stored: bool = False) -> Exact:
    """The :class:`Exact` report of a search of 6-16 operands (``record``: the path cache's
    entry its path was read back from).  Its dp is cotengrust's where cotengrust is loaded
    and no memory limit applies, else opt_einsum's, as
    :func:`einc.planner.options._dynamic_programming` chooses."""
    dp = "cotengrust's dp" if memory_limit is None and sys.modules.get("cotengrust") is not None else \
        "opt_einsum's dp"
    earlier = None if record is None else record.get("seconds")
    earlier = earlier if type(earlier) in (int, float) else None
    return Exact(dp, seconds, record is not None, earlier, stored)


def seconds_text(t: float) -> str:
    """``t`` seconds as a short text: three significant digits in s, ms or us."""
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} us"


_TYPES = {"method": (str,), "reason": (str,), "trials": (int,)}     # a Report's fields not int or float


def report_of(data) -> Report | None:
    """The :class:`Report` a remembered entry holds, where it holds a well-formed one."""
    if not isinstance(data, dict) or set(data) != set(Report._fields):
        return None
    for k, v in data.items():
        if type(v) not in _TYPES.get(k, (int, float)):
            return None
    return Report(**data)


def remembered(record: dict, seconds: float) -> Report | None:
    """The report of a path an earlier search found, read back in ``seconds`` from its
    entry ``record`` (einc.planner.pathcache), where it holds a well-formed one."""
    was = report_of(record.get("report"))
    if was is None:
        return None
    return was._replace(seconds=seconds, trials=0, method=f"remembered (einc.planner.pathcache): {was.method}",
                        reason=f"found by an earlier search of {seconds_text(was.seconds)} and {was.trials} "
                               f"trees ({was.reason})")


class Progress:
    """A tqdm bar over the search's seconds where stderr is a terminal, else a log line."""

    def __init__(self, budget: float):
        self.bar = None
        self.last = 0.0
        self.total = round(budget, 1)
        if sys.stderr is not None and getattr(sys.stderr, "isatty", lambda: False)():
            from tqdm import tqdm
            self.bar = tqdm(total=self.total, desc="einc path search", unit="s", leave=False, file=sys.stderr)
        else:
            log.info("einc: searching a contraction path for up to %s", seconds_text(budget))

    def update(self, elapsed: float, trials: int, flops: float) -> None:
        if self.bar is not None:
            step = round(min(elapsed, self.total), 1) - self.last
            self.last += step
            if flops == flops:      # not NaN: a tree was found
                self.bar.set_postfix_str(f"{trials} trees, log10 flops {math.log10(max(flops, 1)):.2f}",
                                         refresh=False)
            self.bar.update(step)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


__all__ = ["Exact", "Progress", "Report", "exact", "remembered", "report_of", "seconds_text"]
