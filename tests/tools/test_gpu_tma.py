"""bench/gpu_tma.py in its CPU smoke mode (Triton's interpreter, the TMA variant let run on
CPU tensors): both rows take the variant, every candidate answers right, the CSV and the
summary are written."""

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

import einc
from einc.runtime.triton_executor import tma

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.interpreter
def test_the_tma_comparison_runs_and_takes_the_variant(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(tma, "ANYWHERE", False)        # main lets the variant run on CPU tensors: undone after
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("gpu_tma_under_test", ROOT / "bench" / "gpu_tma.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        rc = mod.main(["--dry-run", "--out", str(tmp_path)])
    finally:
        einc.cache_clear()
    with open(tmp_path / "gpu_tma.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rc == 0 and [(r["row"], r["candidate"]) for r in rows] == \
        [(row, c) for row in ("dry_nn", "dry_nt", "dry_gett") for c in ("cublas", "tma", "kernel")]
    assert all(not r["error"] and float(r["err"]) < 1e-2 and float(r["us"]) > 0 for r in rows)
    out = capsys.readouterr().out
    assert "tma/cublas" in out and "incomplete" not in out
