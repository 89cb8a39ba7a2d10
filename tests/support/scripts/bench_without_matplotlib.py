"""``einc bench`` where matplotlib is not installed (run by ``tests/tools/test_cli.py``).

    python bench_without_matplotlib.py SUITE OUT
"""

import sys

import checkout  # noqa: F401

sys.modules["matplotlib"] = None            # as if it were not installed
from einc.tools.cli import main  # noqa: E402

suite, out = sys.argv[1], sys.argv[2]
sys.exit(main(["bench", "--suite", suite, "--out", out, "--quick", "--rounds", "3", "--budget", "0.1",
               "--filter", "tiny_gemm"]))
