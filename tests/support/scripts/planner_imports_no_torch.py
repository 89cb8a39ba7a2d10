"""The planner's modules import neither torch nor triton, and plan without them: prints
the plan's flops (run by ``tests/test_layering.py``)."""

import sys

import checkout

checkout.bare_einc()
import einc.config  # noqa: E402,F401
import einc.errors  # noqa: E402,F401
import einc.planner.equation  # noqa: E402,F401
import einc.planner.fuse  # noqa: E402,F401
import einc.planner.graph  # noqa: E402,F401
import einc.planner.plan  # noqa: E402,F401

bad = [m for m in ("torch", "triton") if m in sys.modules]
assert not bad, bad
from einc.planner.equation import parse  # noqa: E402
from einc.planner.graph import build  # noqa: E402
from einc.planner.plan import build_plan  # noqa: E402

print(build_plan(build(parse("ij,jk,kl->il"), [(2, 3), (3, 4), (4, 5)])).flops)
assert "torch" not in sys.modules
