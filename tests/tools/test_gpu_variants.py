"""bench/gpu_variants.py in its CPU smoke mode (Triton's interpreter, every index of size 3):
the CCSD(T) term lowers to four different kernels (default: N as a 2-D block; plain; each
with its rows ordered for the result's stores), each right through both of its paths (one fixed config and no tuning, as
``Launcher.screen`` runs it, and the autotuned launch)."""

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

import einc

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.interpreter
def test_every_lowering_of_a_ccsdt_kernel_is_right_through_both_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("EINC_BACKEND", "triton")      # main sets it for the CPU smoke run: undone after
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path / "cache"))
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("gpu_variants_under_test", ROOT / "bench" / "gpu_variants.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        rc = mod.main(["--device", "cpu", "--filter", "^pw_ccsdt_dega", "--out", str(tmp_path)])
    finally:
        einc.cache_clear()
    with open(tmp_path / "gpu_variants.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    variants = ["default", "plain", "default_m_by_result", "m_by_result"]
    assert rc == 0 and [r["variant"] for r in rows] == [v for v in variants for _ in range(2)]
    assert [r["config"] == "tuned" for r in rows] == [False, True] * 4
    assert all(r["ok"] == "True" and float(r["err"]) <= 1e-5 and not r["error"] for r in rows)
    assert len({r["kernel"] for r in rows}) == 4
