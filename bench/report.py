"""Result formatting, re-exported from :mod:`einc.benchmark.report` (the one copy of the code):
header (machine, versions, load), Markdown table, CSV.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):                      # imported as a script's sibling: make `einc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from einc.benchmark.report import (REPO, Load, _cpu_model, _cpu_sample, _git_rev, fmt_ratio,  # noqa: E402
                                   geomean, header, markdown_table, ratio, us, write)

__all__ = ["REPO", "Load", "header", "us", "ratio", "fmt_ratio", "geomean", "markdown_table", "write",
           "_cpu_model", "_cpu_sample", "_git_rev"]
