"""einc as ``torch.einsum`` inside PyTorch's machinery: the battery of
``tests/support/patched_battery.py`` (FX, TorchScript, jit.trace at other shapes, a
TorchFunctionMode, a tensor subclass, checkpointing, saved-tensor hooks, export, threads,
integer and bool dtypes), run with the patch installed in a process of its own.  The
battery runs once; each of its cases is reported as a test of its own."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

BATTERY = Path(__file__).resolve().parents[1] / "support" / "patched_battery.py"


def _case_names() -> list[str]:
    """The battery's cases (the functions under ``@case``), read without importing it:
    importing it patches ``torch.einsum``."""
    tree = ast.parse(BATTERY.read_text(encoding="utf-8"))
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef)
            and any(isinstance(d, ast.Name) and d.id == "case" for d in node.decorator_list)]


CASES = _case_names()


@pytest.fixture(scope="module")
def battery():
    """The battery's run: its CompletedProcess, and each case's outcome by name (``None``
    when it passed, else the battery's report of why it failed)."""
    done = subprocess.run([sys.executable, str(BATTERY)], capture_output=True, text=True,
                          timeout=900, cwd=BATTERY.parents[2])
    outcome, name = {}, None
    for line in done.stdout.splitlines():
        m = re.match(r"(ok|FAIL) (\w+)(?::|$)", line)
        if m and m.group(2) in CASES:
            name = m.group(2)
            outcome[name] = None if m.group(1) == "ok" else line
        elif name is not None and outcome[name] is not None and not line.startswith("battery:"):
            outcome[name] += "\n" + line
    return done, outcome


def test_the_battery_has_its_cases():
    assert len(CASES) >= 17 and len(set(CASES)) == len(CASES), CASES


@pytest.mark.slow
def test_the_battery_runs_every_case(battery):
    done, outcome = battery
    lines = done.stdout.splitlines()
    assert lines and lines[-1].startswith("battery:"), done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(outcome) == sorted(CASES), done.stdout[-3000:]
    assert (done.returncode == 0) == all(why is None for why in outcome.values()), done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_case(battery, name):
    done, outcome = battery
    assert name in outcome, done.stdout[-3000:] + done.stderr[-3000:]
    assert outcome[name] is None, outcome[name]
