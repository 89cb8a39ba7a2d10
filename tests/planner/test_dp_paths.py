"""einc's default search of 3-16 operands (einc.planner.options._auto): the paths it finds
are those recorded in tests/planner/dp_golden.py's file, pair for pair (a cheaper search
must find the same ones, ties broken as they were), and what a first search pays."""

import gzip
import json
import subprocess
import sys

import pytest

from einc.planner import search as S
from tests.planner.dp_golden import GOLDEN, MODULES, path

HAS_COTENGRUST = S._cotengrust() is not None


def _cases():
    with gzip.open(GOLDEN, "rt") as f:
        return json.load(f)


def test_the_golden_file_covers_3_to_16_operands_ties_and_the_modules():
    cases = _cases()
    assert len(cases) > 1000 and {len(c["shapes"]) for c in cases} == set(range(3, 17))
    assert sum(max(max(s, default=1) for s in c["shapes"]) <= 2 for c in cases) > 50     # ties everywhere
    assert {eq for eq, _ in MODULES} <= {c["eq"] for c in cases}


def test_auto_finds_the_recorded_paths():
    # without cotengrust, 6-16 operands run opt_einsum's dp: the same least cost, other ties
    cases = [c for c in _cases() if HAS_COTENGRUST or len(c["shapes"]) <= 5]
    wrong = [(c["eq"], c["shapes"]) for c in cases if path(c["eq"], c["shapes"]) != c["path"]]
    assert not wrong, f"{len(wrong)} of {len(cases)} paths changed, the first: {wrong[:3]}"


@pytest.mark.skipif(not HAS_COTENGRUST, reason="cotengrust's import")
def test_einc_imports_the_dp_searchs_library_as_torch_imports_opt_einsum():
    # a first search of 6-16 operands (a module's first step) finds cotengrust loaded
    code = "import sys\nimport einc\nprint('cotengrust' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr
