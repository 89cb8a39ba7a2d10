"""Networks the tests share with the examples and benchmarks (examples/sliced_network.py)."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "sliced_network", Path(__file__).resolve().parents[2] / "examples" / "sliced_network.py")
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

grid = _module.grid         # grid(rows, cols, bond, seed, dtype) -> (equation, operands)
