"""bench/gpu_orders.py in its CPU smoke mode (Triton's interpreter, every index of size 3):
the variant that orders M for the result's stores lowers the CCSD(T) term to another
kernel, and both give torch.einsum's answer."""

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

import einc

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.interpreter
def test_both_orders_of_a_ccsdt_kernel_are_right_and_differ(tmp_path, monkeypatch):
    monkeypatch.setenv("EINC_BACKEND", "triton")      # main sets it for the CPU smoke run: undone after
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("gpu_orders_under_test", ROOT / "bench" / "gpu_orders.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        rc = mod.main(["--device", "cpu", "--filter", "^pw_ccsdt_dega", "--out", str(tmp_path)])
    finally:
        einc.cache_clear()
    with open(tmp_path / "gpu_orders.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rc == 0 and [r["variant"] for r in rows] == ["lowered", "m_by_result"]
    assert all(r["ok"] == "True" and float(r["err"]) <= 1e-5 for r in rows)
    assert rows[0]["kernel"] != rows[1]["kernel"] and not rows[1]["same_as"] and rows[1]["us"]
