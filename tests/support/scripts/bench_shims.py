"""The scripts under ``bench/`` still offer the names they re-export (run by
``tests/tools/test_cli.py``)."""

import sys

import checkout

sys.path.insert(0, str(checkout.ROOT / "bench"))
import report  # noqa: E402
import timing  # noqa: E402

from bench import dispatch, run  # noqa: E402

assert timing.interleaved and timing.calibrate and timing.time_batch and timing.Timing
assert report.Load and report.header and report.write and report.markdown_table and report.geomean
assert run.check and run.methods and run.METHODS and dispatch.chain(3) == "ab,bc,cd->ad"
