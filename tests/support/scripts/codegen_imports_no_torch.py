"""Dumping a plan's kernels (planner and codegen) imports neither torch nor triton (run by
``tests/codegen/test_codegen.py``)."""

import sys

import checkout

checkout.bare_einc()
from einc.tools import dump  # noqa: E402

dump.plan_files("ij,jk->ik", [(4, 4), (4, 4)], "float16")
assert "torch" not in sys.modules and "triton" not in sys.modules
