"""The named-axes notation module imports no torch: prints what ``notation.for_cli`` makes
of a named equation (run by ``tests/doors/test_notation.py``)."""

import sys

import checkout

checkout.bare_einc()
from einc.planner import notation  # noqa: E402

print(notation.for_cli("b n (h d), h d e -> b n (h e)", [(2, 3, 8), (2, 4, 5)], {})[:2])
assert "torch" not in sys.modules
