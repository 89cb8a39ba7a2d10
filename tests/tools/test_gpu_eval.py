"""bench/gpu_eval.py, the GPU verdict script, in its CPU smoke mode (suite ``cpu`` variants,
perf_counter timer, no CUDA graphs), plus its gates on hand-made rows."""

import csv
import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest
import torch

import einc

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_eval.py"
SMALL = "^(tiny_gemm_16|pose_rel_rotation)$"


@pytest.fixture(scope="module")
def ge():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("gpu_eval_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


pytestmark = pytest.mark.usefixtures("cleared_caches")


def run(ge, tmp_path, capsys, *extra, filt=SMALL):
    rc = ge.main(["--device", "cpu", "--quick", "--filter", filt, "--out", str(tmp_path), *extra])
    out = capsys.readouterr().out
    csvs = list(tmp_path.glob("gpu_eval_*.csv"))
    assert len(csvs) == 1, csvs
    with open(csvs[0], newline="") as f:
        rows = list(csv.DictReader(f))
    return rc, out, rows, csvs[0]


def gate_line(out, n):
    lines = [line for line in out.splitlines() if line.startswith(f"GATE {n} ")]
    assert len(lines) == 1, out
    return lines[0]


def verdict(out, n):
    m = re.search(r": (PASS|FAIL|N/A)\b", gate_line(out, n))
    assert m, gate_line(out, n)
    return m.group(1)


def test_smoke_csv_table_and_gates(ge, tmp_path, capsys):
    rc, out, rows, path = run(ge, tmp_path, capsys)
    assert rc == 0, out
    assert path.name == "gpu_eval_all_cpu_tiny-gemm-16-pose-rel-rotation.csv"
    assert [r["id"] for r in rows] == ["tiny_gemm_16", "pose_rel_rotation"]
    with open(path, newline="") as f:
        header = next(csv.reader(f))
    assert header == ge.COLUMNS
    for r in rows:
        assert r["status"] == "ok", r
        assert r["error"] == ""
        err = float(r["err"])
        assert math.isfinite(err) and err < 1e-5
        assert r["nan"] == "0"
        assert int(r["k"]) == 1
        for col in ("einc_us", "torch_us", "torch_c_us", "einc_blas_us", "oe_plan_us", "host_einc_us"):
            assert float(r[col]) > 0, (col, r)
        # einc's first call plans (the cache is empty): slower than a cached call
        first_s = float(r["first_s"])
        assert 0 < first_s < 60 and first_s * 1e6 > float(r["einc_us"]), r
        assert r["graph_us"] == "" and r["graph_note"].startswith("n/a")
        assert float(r["e_t"]) == pytest.approx(float(r["einc_us"]) / float(r["torch_us"]), rel=1e-4)
    assert "== table" in out and "tiny_gemm_16" in out.split("== table")[1]
    assert verdict(out, 0) == "PASS"
    assert verdict(out, 1) == "N/A"                # the CPU runs no generated kernel
    assert verdict(out, 2) in ("PASS", "FAIL")
    assert verdict(out, 3) == "N/A"                # no CUDA graphs on the CPU
    assert out.index("versions: torch") < out.index("== table") < out.index("GATE 0")
    assert len(out.split("== table")[1]) < ge.TABLE_LIMIT
    assert (tmp_path / path.name.replace(".csv", ".txt")).read_text().count("GATE ") == 4


@pytest.mark.parametrize("bad, column, expect", [
    ("zeros", "err", lambda r: float(r["err"]) == pytest.approx(1.0)),
    ("nan", "nan", lambda r: r["nan"] == "1"),
])
def test_wrong_einc_fails_correctness(ge, tmp_path, capsys, monkeypatch, bad, column, expect):
    real = einc.einsum

    def wrong(eq, *ops, **kw):
        out = real(eq, *ops, **kw)
        if bad == "zeros":
            return torch.zeros_like(out)
        out.view(-1)[0] = float("nan")
        return out
    monkeypatch.setattr(einc, "einsum", wrong)
    rc, out, rows, _ = run(ge, tmp_path, capsys, filt="^tiny_gemm_16$")
    assert rc == 1
    assert len(rows) == 1 and expect(rows[0]), rows[0][column]
    line = gate_line(out, 0)
    assert verdict(out, 0) == "FAIL" and "0/1 rows correct" in line
    assert "tiny_gemm_16" in out.split(line)[1]


def test_failing_row_is_recorded_and_the_run_goes_on(ge, tmp_path, capsys, monkeypatch):
    real = einc.einsum

    def broken(eq, *ops, **kw):
        if ops[0].dim() == 2:                       # tiny_gemm_16 fails, pose_rel_rotation (3-D) works
            raise RuntimeError("deliberate failure")
        return real(eq, *ops, **kw)
    monkeypatch.setattr(einc, "einsum", broken)
    rc, out, rows, _ = run(ge, tmp_path, capsys)
    assert rc == 1
    by_id = {r["id"]: r for r in rows}
    assert by_id["tiny_gemm_16"]["status"] == "error"
    assert "deliberate failure" in by_id["tiny_gemm_16"]["error"]
    assert by_id["tiny_gemm_16"]["einc_us"] == ""
    assert float(by_id["tiny_gemm_16"]["torch_us"]) > 0      # the other methods still ran
    assert by_id["pose_rel_rotation"]["status"] == "ok"
    assert float(by_id["pose_rel_rotation"]["err"]) < 1e-5
    assert verdict(out, 0) == "FAIL" and "1/2 rows correct" in gate_line(out, 0)


def test_deadline_skips_rows_but_reports(ge, tmp_path, capsys):
    rc, out, rows, _ = run(ge, tmp_path, capsys, "--deadline", "0")
    assert [r["status"] for r in rows] == ["skipped", "skipped"]
    assert verdict(out, 0) == "N/A" and "the deadline cut the run" in out
    assert rc == 0


def test_gates_from_csvs_later_file_wins(ge, tmp_path, capsys, monkeypatch):
    good_dir, bad_dir = tmp_path / "good", tmp_path / "bad"
    rc, _, _, good_csv = run(ge, good_dir, capsys)
    assert rc == 0
    monkeypatch.setattr(einc, "einsum", lambda eq, *ops, **kw: torch.zeros_like(torch.einsum(eq, *ops)))
    rc, _, _, bad_csv = run(ge, bad_dir, capsys, filt="^tiny_gemm_16$")
    assert rc == 1
    monkeypatch.undo()
    assert ge.main(["--gates", str(good_csv)]) == 0
    out = capsys.readouterr().out
    assert verdict(out, 0) == "PASS" and "2/2 rows correct" in out
    assert ge.main(["--gates", str(good_csv), str(bad_csv)]) == 1       # the bad re-run replaces tiny_gemm_16
    out = capsys.readouterr().out
    assert verdict(out, 0) == "FAIL" and "1/2 rows correct" in out
    rows = ge.read_csv(good_csv)
    assert rows[0]["k"] == 1 and rows[0]["nan"] is False and isinstance(rows[0]["einc_us"], float)


def test_parts_cover_the_suite(ge):
    from einc.tools.benchmark.suite import load
    suite = load(ROOT / "bench" / "suite.json")
    gemm = {w["id"] for w in ge.select_workloads(suite, "gemm", "", "cuda")}
    rest = {w["id"] for w in ge.select_workloads(suite, "rest", "", "cuda")}
    pairwise = {w["id"] for w in ge.select_workloads(suite, "pairwise", "", "cuda")}
    every = {w["id"] for w in suite["workloads"] if "gpu" in w["variants"]}
    assert gemm and rest and pairwise and not gemm & rest and not (gemm | rest) & pairwise
    assert gemm | rest | pairwise == every
    assert len(gemm) == 14
    assert {w["id"] for w in ge.select_workloads(suite, "compare", "", "cuda")} == set(ge.COMPARE)
    assert [w["id"] for w in ge.select_workloads(suite, "all", "^tiny_gemm_16$", "cpu")] == ["tiny_gemm_16"]
    assert {w["category"] for w in ge.select_workloads(suite, "rest", "chemistry", "cuda")} == {"chemistry"}
    assert ge.select_workloads(suite, "all", "[", "cpu") == []     # not a regex: a substring, matching nothing


def _row(ge, **kw):
    r = dict.fromkeys(ge.COLUMNS)
    r.update(id="w", category="attention", status="ok", dtype="bfloat16", equation="ij,jk->ik", tol=1e-2,
             err=1e-3, err_torch=1e-3, nan=False, backends="triton mm", k=1)
    r.update(kw)
    ge.derive(r)
    return r


def test_gates_on_synthetic_rows(ge):
    good = _row(ge, einc_us=100.0, torch_us=110.0, torch_c_us=120.0, einc_blas_us=95.0, oe_plan_us=130.0)
    assert ge.gate0([good])[0] == "PASS"
    assert ge.gate0([_row(ge, err=5e-3)])[0] == "FAIL"                    # > 2 x torch's error
    assert ge.gate0([_row(ge, err=2e-2, err_torch=3e-2)])[0] == "PASS"   # torch itself misses the tolerance
    assert ge.gate0([_row(ge, nan=True)])[0] == "FAIL"
    assert ge.gate0([_row(ge, graph_err=math.nan)])[0] == "FAIL"
    assert ge.gate1([good])[0] == "PASS"
    slow = _row(ge, id="s", einc_us=120.0, torch_us=110.0, torch_c_us=120.0, einc_blas_us=100.0)
    assert ge.gate1([good, slow])[0] == "FAIL"
    assert ge.gate1([_row(ge, backends="torch", einc_us=120.0, einc_blas_us=100.0)])[0] == "N/A"
    assert ge.gate1([_row(ge, category="layout", backends="torch", einc_us=130.0, torch_c_us=120.0)])[0] == "FAIL"
    assert ge.gate2([good])[0] == "PASS"
    assert ge.gate2([_row(ge, einc_us=200.0, torch_us=100.0, torch_c_us=150.0)])[0] == "FAIL"   # geomean 2
    assert ge.gate2([good, _row(ge, id="x", einc_us=80.0, torch_us=100.0, torch_c_us=50.0)])[0] == "FAIL"  # 1.6 x tc
    assert ge.gate3([good])[0] == "N/A"
    assert ge.gate3([_row(ge, host_step_us=12.0, host_einc_us=20.0, graph_us=8.0)])[0] == "PASS"
    assert ge.gate3([_row(ge, host_step_us=16.0, host_einc_us=24.0, graph_us=8.0)])[0] == "FAIL"


def test_verdict_times_einc_and_torch_only_and_runs_summarize(ge, tmp_path, capsys):
    dirs = [tmp_path / "run1", tmp_path / "run2"]
    for d in dirs:
        rc, _, rows, _ = run(ge, d, capsys, "--verdict")
        assert rc == 0 and len(rows) == 2
        for r in rows:
            assert float(r["einc_us"]) > 0 and float(r["torch_us"]) > 0 and float(r["torch_c_us"]) > 0
            assert r["oe_plan_us"] == r["einc_blas_us"] == r["einc_kernel_us"] == r["host_einc_us"] == ""
            assert float(r["err"]) < 1e-5                                   # checked as always
    assert ge.main(["--runs", *map(str, dirs)]) == 0
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("| all_cpu_")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == "2" and all(float(c) > 0 for c in cells[2:5]), line     # two rows, two runs, medians
    per_run = [ge.geomean(r["e_t"] for r in ge.read_csv(next(d.glob("gpu_eval_*.csv")))) for d in dirs]
    assert [float(c) for c in cells[2:4]] == [round(g, 3) for g in per_run]
    assert ge.main(["--runs", str(tmp_path / "nothing")]) == 2
