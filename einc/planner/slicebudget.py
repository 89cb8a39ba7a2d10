"""One budget for planning under a memory limit: the search's stages and the slicer's.

Past dynamic programming's reach, a search under ``memory_limit`` below the
hyper-optimizer (:func:`einc.planner.search._limited`) and einc's slicer after it
(:func:`einc.planner.slicing.plan`) share one budget
(:func:`einc.planner.search.sliced_budget`): the allowance of the greedy path's predicted
time (a tenth of it plus :data:`~einc.planner.search.SMALL`), not the smaller budget of
the search without a limit, since slicing multiplies the steps a call runs.  Each stage
runs until the work counted since the start passes its mark, a cumulative share of the
budget, checked between candidates and between rounds:

1. the search without the limit (its own counted search, remembered and shared with
   plans without a limit), charged its own budget up to :data:`FREE_SHARE`;
2. cotengra's slicing reconfiguration of that tree, a quarter of the limit first, then
   the limit, up to :data:`RECONF_MARK`: a target is begun only where its rounds (each
   halves the largest intermediate, :func:`rounds`) fit, at :data:`ROUND_SECONDS` a tensor;
3. opt_einsum's random greedy trials under the limit, up to :data:`TRIALS_MARK`;
4. the ranking of the trees as sliced (einc.planner.objective.ranked_sliced), the
   reconfigured trees first, then the unlimited search's, up to :data:`RANK_MARK`, each
   live-memory pass at :data:`PASS_SECONDS` a step; where it ranks none to the end, the
   first tree is kept;
5. einc's slicer, :data:`SLICER_SHARE` of the budget, its passes counted alike: the cuts
   by peak of the search's path, then of the unlimited one's, then the cuts by cost of
   each, a cut begun only where one as long as the longest so far fits what is left of
   the share, and a cut by cost only where the passes it is expected to take fit too (it
   weighs in full each halving the cuts by peak of its path met), as any cut of a path
   not cut yet (the halvings the first path's cuts met).

Past the hyper-optimizer's floor the search under the limit is cotengra's hyper-optimizer
(:func:`einc.planner.search.find`), clocked to the budget less :data:`SLICER_SHARE`, and
the slicer cuts its tree alone, within its share as above and, since the tree is the
clock's already, within the budget on the clock from the start of planning: a rule is not
begun where one as long on the clock as the longest so far, or its expected work at the
rate the slicer's rules have run on the clock, would end past it (the passes' nominal cost
is a core's alone, and a loaded machine's passes take longer).

The floor: the slicer always cuts the search's path by one rule, so a network of any size
gets a slicing that keeps to the limit where one can.  The work is counted at nominal
costs (one core, no other load), not clocked, so that the choice is the same on a loaded
machine, as the counted search's is; nothing is begun past :data:`GUARD` times the
budget of the thread's CPU time, which other jobs do not advance (a far slower machine may
then choose otherwise), or, for a process that gets no CPU, past the search's ``CAP`` on
the clock: the test is the counted search's (:func:`einc.planner.search.counted_ends`),
which the caller hands in.
"""

from __future__ import annotations

import math
import time

from .searchreport import seconds_text

FREE_SHARE = 0.2        # of the budget, the most the unlimited search is charged (its own budget)
RECONF_MARK = 0.75      # the slicing reconfiguration runs up to this share of the budget
TRIALS_MARK = 0.8       # ... opt_einsum's random greedy trials under the limit up to this
RANK_MARK = 0.9         # ... the ranking of the trees as sliced up to this
SLICER_SHARE = 0.2      # the slicer's own share
ROUND_SECONDS = 0.25e-3     # per tensor: a round of slicing reconfiguration (an index sliced, subtrees of 6 redone)
PASS_SECONDS = 1.5e-6       # per step: a live-memory pass (a slicing's peak, its moments over the limit, its cost)
GUARD = 8               # nothing is begun past this multiple of the budget, in the thread's CPU time


def figures() -> tuple:
    """What the choices depend on: part of the search's and the slicer's versions."""
    return FREE_SHARE, RECONF_MARK, TRIALS_MARK, RANK_MARK, SLICER_SHARE, ROUND_SECONDS, PASS_SECONDS, GUARD


def _unguarded(cpu: float):
    """No guard: where the caller hands none."""
    return lambda: False


class Ledger:
    """Work counted against ``budget`` (seconds, nominal), and a line per stage saying what
    it spent and why it stopped.  ``ends(cpu)``: the test that the guard has passed, once this
    thread has run ``cpu`` seconds more (einc.planner.search.counted_ends, with ``CAP`` on
    the clock); none where not given."""

    def __init__(self, budget: float, ends=_unguarded):
        self.budget, self.work, self.lines = budget, 0.0, []
        self.ended = ends(GUARD * budget)       # (past the budget the marks leave nothing anyway)

    def left(self, mark: float) -> float:
        """Nominal seconds left before ``mark`` (a share of the budget), or none past the guard."""
        return 0.0 if self.ended() else max(0.0, mark * self.budget - self.work)

    def passes(self, mark: float, steps: int) -> float:
        """The live-memory passes over ``steps`` steps left before ``mark``."""
        return self.left(mark) / (PASS_SECONDS * max(steps, 1))

    def charge(self, stage: str, seconds: float, why: str) -> None:
        self.work += seconds
        self.lines.append(f"{stage} {seconds_text(seconds)} ({why})")

    def text(self) -> str:
        return "; ".join(self.lines)


class Slicer:
    """The slicer's share: ``begin()`` a rule, ``afford()`` whether its passes so far leave
    room for another as long as the longest so far, or as the passes it is expected to take
    where more (none past :data:`GUARD` times its share, ``ends`` as :class:`Ledger`'s), ``count``
    the passes the slicer's models weigh."""

    def __init__(self, budget: float, steps: int, deadline: float | None = None, ends=_unguarded):
        self.budget, self.steps = SLICER_SHARE * budget, max(steps, 1)
        self.ended = ends(GUARD * self.budget)
        self.deadline = deadline           # on the clock (``time.perf_counter()``), where given
        self.count = [0]
        self.rules = 0
        self.starts: list[float] = []      # the work counted when each rule began
        self.clocks: list[float] = []      # ... and the clock
        self.need = 0.0                    # the work the last rule asked about was expected to take
        self.late = False                  # whether the deadline stopped it

    def work(self) -> float:
        return self.count[0] * self.steps * PASS_SECONDS

    def begin(self) -> None:
        self.rules += 1
        self.starts.append(self.work())
        self.clocks.append(time.perf_counter())

    def longest(self) -> float:
        """The work of the longest rule so far (the last one's up to now)."""
        return _longest(self.starts, self.work())

    def afford(self, passes: float = 0.0) -> bool:
        """Whether a rule expected to take ``passes`` live-memory passes, or as long as the
        longest so far where that is longer, fits what is left of the share."""
        # a rule that would pass the share is not begun (as a hyper-optimizer trial is not)
        self.need = max(self.longest(), passes * self.steps * PASS_SECONDS)
        now = time.perf_counter()
        # on the clock, the rule's expected work at the rate its rules have run so far
        rate = (now - self.clocks[0]) / self.work() if self.clocks and self.work() > 0 else 1.0
        self.late = self.deadline is not None and \
            now + max(_longest(self.clocks, now), self.need * rate) > self.deadline
        return self.work() + self.need < self.budget and not self.late and not self.ended()

    def text(self, paths: int, weighed: int, rules: int) -> str:
        stopped = "every rule tried" if self.rules >= rules * paths else \
            ("its share spent" if self.work() >= self.budget else
             f"the next rule would pass its share (expected {seconds_text(self.need)})"
             if self.work() + self.need >= self.budget else
             "the next rule would end past the planning's budget on the clock" if self.late else
             "its time guard passed")
        return (f"Slicer: {self.rules} of {rules * paths} rules on {weighed} of {paths} paths, "
                f"{seconds_text(self.work())} of its {seconds_text(self.budget)} (counted); stopped: {stopped} "
                f"(einc.planner.slicebudget)")


def _longest(starts: list[float], now: float) -> float:
    """The longest span between ``starts`` in turn, the last one's up to ``now``."""
    return max((b - a for a, b in zip(starts, [*starts[1:], now])), default=0.0)


def rounds(largest: float, target: float) -> int:
    """The rounds of slicing reconfiguration that bring ``largest`` to ``target``: each
    slices about a factor of two off the largest intermediate."""
    return max(0, math.ceil(math.log2(largest / target))) if largest > target else 0


__all__ = ["FREE_SHARE", "GUARD", "PASS_SECONDS", "RANK_MARK", "RECONF_MARK", "ROUND_SECONDS", "SLICER_SHARE",
           "TRIALS_MARK", "Ledger", "Slicer", "figures", "rounds"]
