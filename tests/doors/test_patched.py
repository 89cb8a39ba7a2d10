"""einc as ``torch.einsum`` inside PyTorch's machinery: the battery of
``tests/support/patched_battery.py`` (FX, TorchScript, jit.trace at other shapes, a
TorchFunctionMode, a tensor subclass, checkpointing, saved-tensor hooks, export, threads,
integer and bool dtypes), run with the patch installed in a process of its own."""

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "support"


@pytest.mark.slow
def test_the_patched_battery_passes():
    done = subprocess.run([sys.executable, str(HERE / "patched_battery.py")], capture_output=True, text=True,
                          timeout=900, cwd=HERE.parents[1])
    lines = done.stdout.splitlines()
    assert lines and lines[-1].startswith("battery:"), done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, "\n".join(l for l in lines if not l.startswith("ok ")) + done.stderr[-2000:]
    assert len([l for l in lines if l.startswith("ok ")]) >= 17
