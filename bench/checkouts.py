"""Two einc checkouts timed in alternate fresh processes.

A bench script that takes ``--one ARG`` runs one round in its own process and prints its
figures as a JSON object on its last line; :func:`rounds` runs that round under each
checkout's ``PYTHONPATH`` (one thread, a fresh cache folder each time), the checkouts'
order swapped every round, so that a slower spell of a shared machine falls on both.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def median_time(fn, repeat: int, clock=time.thread_time) -> float:
    """The median, in seconds of ``clock``, of ``repeat`` timed calls of ``fn`` (the caller
    warms it up first).  The thread's CPU time by default: on a shared machine the other
    jobs' time does not count."""
    times = []
    for _ in range(repeat):
        t = clock()
        fn()
        times.append(clock() - t)
    return statistics.median(times)


def child(script: Path, root: Path, args, cache, **env) -> dict:
    """The JSON object ``script *args`` prints on its last line, run from ``root`` with einc
    from there and ``cache`` as its cache folder; bytecode is written, so that a later
    process does not compile einc's modules again inside what it times."""
    environ = dict(os.environ, PYTHONPATH=str(root), EINC_CACHE_DIR=str(cache), **env)
    environ.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run([sys.executable, str(script), *map(str, args)], env=environ, cwd=root,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_round(script: Path, root: Path, arg, **env) -> dict:
    """The figures ``script --one arg`` prints, run from ``root`` with einc from there."""
    with tempfile.TemporaryDirectory() as cache:
        return child(script, root, ("--one", arg), cache, OMP_NUM_THREADS="1", **env)


def rounds(script: Path, roots, count: int, arg, **env) -> dict:
    """``{root: [figures of each round]}``: ``count`` rounds, the roots in turn, their order
    swapped every round."""
    found = {root: [] for root in roots}
    for k in range(count):
        for root in roots if k % 2 == 0 else roots[::-1]:
            found[root].append(one_round(script, root, arg, **env))
    return found


def table(rows: dict, roots, first: str, cell=lambda key, m: f"{m * 1e6:.0f}", paired=lambda key: True) -> list:
    """Markdown lines of :func:`rounds`' ``rows``: per figure, its median under each root
    (``cell(key, median)``) and, with two roots, the median of the paired per-round ratios
    of the first over the second with its 95 % interval, where ``paired(key)``."""
    from einc.tools.benchmark.timing import Timing, ratio_interval
    two = len(roots) > 1
    tail = " | this / other (95 % interval) |" if two else " |"
    lines = [f"| {first} | " + " | ".join(str(r) for r in roots) + tail, "|---" * (len(roots) + 1 + two) + "|"]
    for key in rows[roots[0]][0]:
        cells = [cell(key, statistics.median(x[key] for x in rows[r])) for r in roots]
        if two:
            cells.append("{:.3f} ({:.3f}-{:.3f})".format(*ratio_interval(
                Timing(0, 0, [x[key] for x in rows[roots[0]]]), Timing(0, 0, [y[key] for y in rows[roots[1]]])))
                if paired(key) else "")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return lines

