"""``einc bench --train``: the suite in training mode (forward + backward against
torch.einsum) and the models' training table, with gradient checks.

No timing is asserted; rounds and budgets are tiny.  The models' table is exercised
on a stand-in ``models.py`` with ``torch.compile`` replaced by a wrapper (compiling with
inductor would take most of a minute here); the full run compiles for real.
"""

import csv
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import einc
from einc.tools.benchmark import runner, train
from einc.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "bench" / "suite.json"
TINY = ["--quick", "--rounds", "3", "--budget", "0.1"]
SUITE_COLUMNS = ["id", "category", "equation", "dtype", "torch_us", "opt_einsum_us", "einc_us", "einc_over_torch",
                 "einc_over_opt_einsum", "einc_grad_check", "rounds", "torch_calls_per_batch",
                 "opt_einsum_calls_per_batch", "einc_calls_per_batch", "einc_first_call_us", "flops", "min_bytes",
                 "torch_gflops", "opt_einsum_gflops", "einc_gflops", "roofline_gflops", "other_cores_busy",
                 "busy_left_out", "torch_contiguous_us", "like_for_like_ratio", "like_for_like_low95",
                 "like_for_like_high95"]
MODEL_COLUMNS = ["model", "eager_us", "inductor_us", "einc_us", "einc_over_inductor", "einc_over_eager",
                 "eager_first_call_s", "inductor_first_call_s", "einc_first_call_s", "einc_rewrites", "grad_check",
                 "rounds", "eager_calls_per_batch", "inductor_calls_per_batch", "einc_calls_per_batch"]

STAND_IN_MODELS = '''
import torch

class Lin(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(8, 6, generator=g))
        self.b = torch.nn.Parameter(torch.randn(6, generator=g))

    def forward(self, x):
        return torch.einsum("bi,io->bo", x, self.w) + self.b

def models():
    return {"lin": (Lin(0), (torch.randn(4, 8),)), "other": (Lin(1), (torch.randn(5, 8),))}
'''


def rows_of(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def doubled_gradient(fn):
    """``fn`` with the same forward values and twice the gradient."""
    def wrong(*args, **kwargs):
        out = fn(*args, **kwargs)
        return out.detach() + 2 * (out - out.detach())
    return wrong


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A suite folder with one small workload and a stand-in models.py; torch.compile
    replaced by calling the module (``einc``: with a doubled gradient when asked)."""
    folder = tmp_path / "suite"
    folder.mkdir()
    suite = json.loads(SUITE.read_text())
    suite["workloads"] = [w for w in suite["workloads"] if w["id"] == "tiny_gemm_16"]
    (folder / "suite.json").write_text(json.dumps(suite))
    (folder / "models.py").write_text(STAND_IN_MODELS)
    monkeypatch.setattr(sys, "path", list(sys.path))        # train_models adds the folder's parent
    setup = SimpleNamespace(suite=folder / "suite.json", compiled=[], wrong=False)

    def fake_compile(model, method):
        setup.compiled.append(method)
        return doubled_gradient(model) if method == "einc" and setup.wrong else model
    monkeypatch.setattr(train, "_compile", fake_compile)
    return setup


def test_train_quick_writes_the_train_files_beside_the_forward_ones(tmp_path, capsys):
    (tmp_path / "suite_cpu.md").write_text("the forward run's report")
    assert main(["bench", "--suite", str(SUITE), "--out", str(tmp_path), "--train", "--no-models", "--no-chart",
                 *TINY, "--filter", "small"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "suite_cpu.md").read_text() == "the forward run's report"    # not overwritten
    assert not (tmp_path / "suite_cpu.csv").exists() and not list(tmp_path.glob("models_train*"))
    data = rows_of(tmp_path / "suite_cpu_train_quick_small.csv")       # a partial run's name
    assert list(data[0]) == SUITE_COLUMNS
    assert [r["id"] for r in data] == ["tiny_gemm_16", "scf_diis_error", "quat_to_rot", "pose_rel_rotation"]
    assert all(r["einc_grad_check"] == "ok" for r in data)
    assert all(float(r["einc_us"]) > 0 and float(r["torch_us"]) > 0 for r in data)
    md = (tmp_path / "suite_cpu_train_quick_small.md").read_text()
    assert md.startswith("# einc training benchmark (forward + backward)")
    assert "| grad check |" in md and "torch.autograd.grad(out, float_ops, g)" in md
    assert "- target einc/torch ≤ 1.0 on every workload, ratio of the medians as measured: " in md
    # torch.einsum's scf_diis_error result (ij,jk,kl->il) is a transposed view: its baseline adds the copy
    copied = [r["id"] for r in data if r["torch_contiguous_us"] != ""]
    assert copied == ["scf_diis_error"]
    assert "- target einc/torch ≤ 1.0 on every workload, like for like (against torch.einsum + .contiguous() " \
           "where torch returns a non-contiguous view: scf_diis_error " in md
    assert all(float(r["like_for_like_low95"]) <= float(r["like_for_like_ratio"]) <= float(r["like_for_like_high95"])
               for r in data)
    assert "- target geomean einc/torch ≤ 0.7: " in md and "## By category" in md
    assert "target geomean" in out                                                 # the report is printed


def test_a_wrong_einc_gradient_is_a_mismatch(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(einc, "einsum", doubled_gradient(einc.einsum))
    assert main(["bench", "--suite", str(SUITE), "--out", str(tmp_path), "--train", "--no-models", "--no-chart",
                 *TINY, "--filter", "tiny_gemm"]) == 1
    (row,) = rows_of(tmp_path / "suite_cpu_train_quick_tiny_gemm.csv")
    assert row["einc_grad_check"].startswith("MISMATCH gradient of operand 0:")
    assert row["einc_over_torch"] != ""                                 # timed anyway, left out of the summary
    md = (tmp_path / "suite_cpu_train_quick_tiny_gemm.md").read_text()
    assert "einc MISMATCH / ERROR: tiny_gemm_16" in md
    assert "ratio of the medians as measured: **FAIL** (1 of 1 above or not correct: tiny_gemm_16" in md
    assert "like for like" in md and "**FAIL**; above: tiny_gemm_16 (not timed or not correct)" in md
    assert "!!! tiny_gemm_16: einc: MISMATCH gradient of operand 0" in capsys.readouterr().err


def test_check_train_looks_at_the_output_and_every_gradient():
    a, b = torch.ones(3), torch.ones(2)
    assert runner.check_train((a, (a, b)), (a, (a, b))) == "ok"
    assert runner.check_train((a * 2, (a, b)), (a, (a, b))).startswith("MISMATCH in the output:")
    assert runner.check_train((a, (a, b + 1)), (a, (a, b))).startswith("MISMATCH gradient of operand 1:")
    assert runner.check_train((a, (a, None)), (a, (a, b))).startswith("MISMATCH gradient of operand 1: None")


def test_train_prepare_differentiates_the_floating_operands():
    ops = [torch.randn(2, 3), torch.randn(3)]
    call = runner.train_prepare("ij,j->i", ops)
    assert all(o.requires_grad for o in ops)
    out, grads = call(torch.einsum, "ij,j->i", ops)()
    assert out.shape == (2,) and [g.shape for g in grads] == [(2, 3), (3,)]
    with pytest.raises(ValueError, match="no floating-point operand"):
        runner.train_prepare("i,i->", [torch.arange(3), torch.arange(3)])


def test_models_table_from_models_py_beside_the_suite(stand_in, tmp_path, capsys):
    suite, compiled = stand_in.suite, stand_in.compiled
    out = tmp_path / "out"
    assert main(["bench", "--suite", str(suite), "--out", str(out), "--train", "--no-chart", *TINY]) == 0
    assert rows_of(out / "suite_cpu_train_quick.csv")[0]["einc_grad_check"] == "ok"
    data = rows_of(out / "models_train_quick.csv")
    assert list(data[0]) == MODEL_COLUMNS
    assert [r["model"] for r in data] == ["lin", "other"]
    assert all(r["grad_check"] == "ok" and float(r["einc_over_inductor"]) > 0 for r in data)
    assert compiled == ["eager", "inductor", "einc"] * 2
    md = (out / "models_train_quick.md").read_text()
    assert "torch.autograd.grad(out, parameters, g)" in md and "target einc/inductor ≤ 1.0 on every model" in md


def test_models_filter_and_a_wrong_compiled_gradient(stand_in, tmp_path, capsys):
    suite = stand_in.suite
    stand_in.wrong = True
    out = tmp_path / "out"
    # the filter matches a model and no workload: only the models' table is written
    assert main(["bench", "--suite", str(suite), "--out", str(out), "--train", "--no-chart", *TINY,
                 "--filter", "lin"]) == 1
    assert not list(out.glob("suite_cpu*"))
    (row,) = rows_of(out / "models_train_quick_lin.csv")
    assert row["model"] == "lin" and row["grad_check"].startswith("einc: MISMATCH gradient of operand 0:")
    md = (out / "models_train_quick_lin.md").read_text()
    assert "on every model: **FAIL** (lin" in md
    assert "!!! model lin: einc: MISMATCH" in capsys.readouterr().err


def test_no_models_needs_train_and_a_filter_must_match_something(stand_in, tmp_path, capsys):
    suite = stand_in.suite
    assert main(["bench", "--suite", str(suite), "--out", str(tmp_path), "--no-models"]) == 2
    assert "--no-models goes with --train" in capsys.readouterr().err
    assert main(["bench", "--suite", str(suite), "--out", str(tmp_path), "--train", "--filter", "nothing"]) == 2
    assert "nor does a model" in capsys.readouterr().err


def test_an_unchanged_graph_compiled_from_inductors_cache_is_noted(stand_in, tmp_path, monkeypatch):
    """Where the backend rewrote nothing and inductor's FX-graph cache answered its compile,
    both columns run inductor's code for the same graph, and the rewrites column says so."""
    import einc.dynamo
    suite, out = stand_in.suite, tmp_path / "out"
    monkeypatch.setattr(einc.dynamo, "last_report", einc.dynamo.Report())     # nothing rewritten
    hits = iter(range(100))
    monkeypatch.setattr(train, "_fx_cache_hits", lambda: next(hits))          # a hit on every compile
    assert main(["bench", "--suite", str(suite), "--out", str(out), "--train", "--no-chart", *TINY,
                 "--filter", "lin"]) == 0
    (row,) = rows_of(out / "models_train_quick_lin.csv")
    assert row["einc_rewrites"] == "0 einsum(s) from 0 contraction(s), 0 left to inductor " \
                                   "(inductor's own graph: FX-graph cache hit)"
    monkeypatch.setattr(train, "_fx_cache_hits", lambda: 0)                   # no hit: no note
    assert main(["bench", "--suite", str(suite), "--out", str(out), "--train", "--no-chart", *TINY,
                 "--filter", "lin"]) == 0
    (row,) = rows_of(out / "models_train_quick_lin.csv")
    assert row["einc_rewrites"] == "0 einsum(s) from 0 contraction(s), 0 left to inductor"


def test_models_verdict_fails_only_beyond_the_noise(tmp_path):
    """A model fails where the 95 % interval of its paired per-round ratio einc/inductor lies
    above 1.0; a ratio above 1.0 within the noise is named (with a note where both columns
    run the same compiled code), not failed."""
    from einc.tools.benchmark import report as report_module
    from einc.tools.benchmark.timing import Timing

    def row(name, einc_rounds, rewrites):
        inductor = Timing(1e-3, 1, [1e-3] * 9)
        einc_t = Timing(sorted(einc_rounds)[4], 1, einc_rounds)
        return {"name": name, "med": {"eager": 2e-3, "inductor": 1e-3, "einc": einc_t.median},
                "timings": {"einc": einc_t, "inductor": inductor, "eager": inductor}, "rounds": 9, "first": {},
                "status": {}, "rewrites": rewrites, "check": "ok"}
    same = "0 einsum(s) from 0 contraction(s), 1 left to inductor" + train.SAME_CODE_NOTE
    noisy = [0.97e-3, 0.98e-3, 0.99e-3, 1.01e-3, 1.02e-3, 1.03e-3, 1.04e-3, 1.05e-3, 1.06e-3]   # median 1.02
    slower = [1.1e-3, 1.12e-3, 1.15e-3, 1.18e-3, 1.2e-3, 1.21e-3, 1.22e-3, 1.25e-3, 1.3e-3]      # all above
    opts = runner.Options(rounds=9, budget=1.0, mode="train")
    _, _, summary = train.report_models_train([row("a", noisy, same), row("b", [0.9e-3] * 9, "1 einsum(s)")],
                                              tmp_path, opts, report_module.Load(), quiet=True)
    assert summary[1] == "- target einc/inductor ≤ 1.0 on every model: PASS (above 1.0 within the timing " \
                         "noise: a 1.020, interval from 0.980: the same compiled code as inductor's)"
    _, _, summary = train.report_models_train([row("a", noisy, "1 einsum(s) from 1 contraction(s)"),
                                               row("c", slower, same)], tmp_path, opts, report_module.Load(),
                                              quiet=True)
    assert summary[1] == "- target einc/inductor ≤ 1.0 on every model: **FAIL** (c (1.200) above or not " \
                         "correct) (above 1.0 within the timing noise: a 1.020, interval from 0.980)"

def test_a_non_contiguous_torch_result_gets_a_like_for_like_baseline(tmp_path):
    """Where torch.einsum returns a view that is not contiguous (``ii->i``: the diagonal),
    torch.einsum + .contiguous() is timed too, interleaved with the others, and the
    like-for-like ratio is einc's against it."""
    fns = runner.methods("ii->i", [torch.randn(5, 5)])
    assert runner.CONTIGUOUS in fns and fns[runner.CONTIGUOUS]().is_contiguous()
    assert runner.CONTIGUOUS not in runner.methods("ij,jk->ik", [torch.randn(2, 3), torch.randn(3, 4)])
    suite = json.loads(SUITE.read_text())
    (w,) = [w for w in suite["workloads"] if w["id"] == "diagonal"]
    row = runner.bench_workload(w, rounds=3, budget=0.05, min_rounds=3, mode=runner.TRAIN)
    assert set(row["timings"]) == {"torch", "opt_einsum", "einc", runner.CONTIGUOUS}
    base, med, lo, hi = row["like"]
    assert base == runner.CONTIGUOUS and lo <= med <= hi
    pairs = sorted(e / c for e, c in zip(row["timings"]["einc"].samples, row["timings"][runner.CONTIGUOUS].samples))
    assert med == pairs[1] and (lo, hi) == (pairs[0], pairs[2])     # 3 rounds: too few for 95 %, the whole range


def test_like_for_like_verdict_fails_only_beyond_the_noise():
    def row(name, like, check="ok"):
        return {"w": {"id": name}, "einc_check": check, "like": like}
    rows = [row("a", ("torch", 1.02, 0.97, 1.05)), row("b", (runner.CONTIGUOUS, 0.9, 0.85, 0.95)),
            row("c", ("torch", 0.8, 0.7, 0.9))]
    line = train.like_verdict(rows, 1.0)
    assert line.endswith("PASS; above 1.0 but within the noise: a (1.020, interval 0.970-1.050)")
    assert "where torch returns a non-contiguous view: b 0.900)" in line
    line = train.like_verdict(rows + [row("d", ("torch", 1.1, 1.04, 1.2))], 1.0)
    assert "**FAIL**; above: d (1.100, interval 1.040-1.200)" in line


def test_ratio_interval_is_the_sign_tests_interval_around_the_paired_median():
    from einc.tools.benchmark.timing import Timing, ratio_interval
    a = Timing(1, 1, [float(k) for k in range(1, 32)])          # ratios 1 .. 31 against 1
    one = Timing(1, 1, [1.0] * 31)
    # 31 rounds: P(Bin(31, 1/2) <= 9) = 0.015 <= 0.025 < P(<= 10): the 10th and 22nd of the sorted ratios
    assert ratio_interval(a, one) == (16.0, 10.0, 22.0)
    assert ratio_interval(Timing(1, 1, [2.0, 1.0]), Timing(1, 1, [1.0, 2.0])) == (1.25, 0.5, 2.0)
