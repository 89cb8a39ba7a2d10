"""Two einc checkouts timed in alternate fresh processes.

A bench script that takes ``--one ARG`` runs one round in its own process and prints its
figures as a JSON object on its last line; :func:`rounds` runs that round under each
checkout's ``PYTHONPATH`` (one thread, a fresh cache folder each time), the checkouts'
order swapped every round, so that a slower spell of a shared machine falls on both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def one_round(script: Path, root: Path, arg, **env) -> dict:
    """The figures ``script --one arg`` prints, run from ``root`` with einc from there."""
    with tempfile.TemporaryDirectory() as cache:
        done = subprocess.run([sys.executable, str(script), "--one", str(arg)],
                              env=dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1",
                                       EINC_CACHE_DIR=cache, **env),
                              cwd=root, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def rounds(script: Path, roots, count: int, arg, **env) -> dict:
    """``{root: [figures of each round]}``: ``count`` rounds, the roots in turn, their order
    swapped every round."""
    found = {root: [] for root in roots}
    for k in range(count):
        for root in roots if k % 2 == 0 else roots[::-1]:
            found[root].append(one_round(script, root, arg, **env))
    return found
