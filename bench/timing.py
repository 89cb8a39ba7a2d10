"""Timing helpers, re-exported from :mod:`einc.benchmark.timing` (the one copy of the code).

Kept so that ``from bench.timing import interleaved`` (bench/run.py, bench/dispatch.py,
bench/models.py) keeps working; see einc/benchmark/timing.py for the method.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):                      # imported as a script's sibling: make `einc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from einc.benchmark.timing import Timing, calibrate, interleaved, time_batch  # noqa: E402

__all__ = ["Timing", "calibrate", "interleaved", "time_batch"]
