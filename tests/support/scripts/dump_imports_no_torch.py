"""``einc dump`` (an equation through ``python -m einc``; a suite and ``cache path``
through ``einc.tools.cli.main``) imports neither torch nor triton (run by
``tests/tools/test_cli.py``).

    python dump_imports_no_torch.py OUT SUITE
"""

import runpy
import sys
from pathlib import Path

import checkout  # noqa: F401

out, suite = sys.argv[1], sys.argv[2]
sys.argv = ["einc", "dump", "bqhd,bkhd->bhqk", "--shapes", "2x8x4x16,2x8x4x16", "-o", out]
try:
    runpy.run_module("einc", run_name="__main__")
except SystemExit as e:
    assert e.code == 0, e.code
from einc.tools.cli import main  # noqa: E402

assert main(["dump", "--suite", suite, "-o", str(Path(out) / "suite")]) == 0
assert main(["cache", "path"]) == 0
bad = [m for m in ("torch", "triton") if m in sys.modules]
assert not bad, bad
