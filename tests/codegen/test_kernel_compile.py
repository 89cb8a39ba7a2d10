"""The generated kernels compile for Hopper (sm_90) with Triton's real compiler — frontend,
TTGIR passes, LLVM and ptxas — which needs no GPU: the interpreter does not check what
only the compiler checks (static ``if``s on constants, 3-D dots, layouts, shared
memory).  Runs in a subprocess without ``TRITON_INTERPRET``."""

import subprocess
import sys
from pathlib import Path

import pytest
from compiler import needs_nvidia, uninterpreted_env

triton = pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = ROOT / "tests" / "support" / "scripts" / "hopper_compile.py"


@pytest.mark.slow
@needs_nvidia
def test_kernels_compile_for_hopper():
    env = uninterpreted_env(PYTHONPATH=str(ROOT), TRITON_DEFAULT_FP_FUSION="1")
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert sum(line.startswith("compiled") for line in lines) >= 21, done.stdout
    for kind in ("BLOCK_NT", "BLOCK_T"):                # each tile shape the lowering makes
        assert any(line.startswith("compiled einc_mm_") and f"'{kind}'" in line for line in lines), (kind, done.stdout)
    assert sum(line.startswith("compiled einc_fused_") for line in lines) == 4, done.stdout
    assert sum(line.startswith("compiled einc_mm_") and "_tma " in line for line in lines) == 6, done.stdout
    assert any("_finish" in line for line in lines) and any("split 1 " not in line + " " for line in lines)
