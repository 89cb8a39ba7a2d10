"""What makes ``einc bench``'s figures trustworthy: the load gate (wait, one thread, or
refuse), re-timing or flagging workloads timed on a busy machine, partial runs under
their own file names, the expected duration, and a chart that carries its context.

The machine's load is simulated (the samples are replaced), so these tests do not
depend on how busy the machine running them is.
"""

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from einc.tools.benchmark import load as loadmod
from einc.tools.benchmark import runner
from einc.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "bench" / "suite.json"
TINY = ["--rounds", "3", "--budget", "0.1", "--no-chart"]


class FakeTorch:
    def __init__(self, threads):
        self.threads = threads

    def get_num_threads(self):
        return self.threads

    def set_num_threads(self, n):
        self.threads = n


def fake_load(before):
    load = loadmod.Load.__new__(loadmod.Load)
    load.before, load.start, load.actions, load.noisy, load.settled = before, None, [], [], False
    return load


@pytest.fixture
def machine(monkeypatch):
    """Two cores; ``machine.samples`` are what successive load measurements return."""
    state = SimpleNamespace(samples=[])
    monkeypatch.setattr(loadmod.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(loadmod, "measure", lambda seconds: state.samples.pop(0) if state.samples else 1.9)
    monkeypatch.setattr(loadmod, "TICK", 0.0)
    return state


def test_fits():
    assert loadmod.fits(0.2, 2, 2) and not loadmod.fits(0.5, 2, 2)          # torch fills the machine
    assert loadmod.fits(0.6, 1, 2) and not loadmod.fits(0.9, 1, 2)          # one thread beside the others
    assert loadmod.fits(10.0, 4, 16) and not loadmod.fits(12.0, 4, 16)
    assert loadmod.fits(float("nan"), 2, 2)                                  # unknown load (not Linux)


def test_an_idle_machine_runs_as_asked(machine):
    load, torch = fake_load(0.1), FakeTorch(2)
    loadmod.settle(load, torch, wait=60, threads_set=False, quick=False, stream=io.StringIO())
    assert torch.threads == 2 and load.actions == [] and load.warning() == ""


def test_a_busy_machine_is_waited_for(machine):
    machine.samples = [1.5, 0.9, 0.1]
    load, torch = fake_load(1.8), FakeTorch(2)
    err = io.StringIO()
    loadmod.settle(load, torch, wait=60, threads_set=False, quick=False, stream=err)
    assert torch.threads == 2 and load.actions[0].startswith("waited") and "waiting up to 60 s" in err.getvalue()
    assert machine.samples == []


def test_a_machine_that_stays_half_busy_gets_one_thread(machine):
    machine.samples = [0.5] * 3
    load, torch = fake_load(0.5), FakeTorch(2)
    err = io.StringIO()
    loadmod.settle(load, torch, wait=0, threads_set=False, quick=False, stream=err)
    assert torch.threads == 1 and "pinned to 1 torch thread" in load.line() and "timing with 1" in err.getvalue()


def test_a_busy_machine_is_refused_with_a_clear_message(machine):
    load, torch = fake_load(1.9), FakeTorch(2)
    with pytest.raises(loadmod.BusyMachine, match="the timings would be the scheduler's, so nothing was timed"):
        loadmod.settle(load, torch, wait=0, threads_set=False, quick=False, stream=io.StringIO())
    load, torch = fake_load(0.5), FakeTorch(2)                   # --threads 2 given: no pinning behind its back
    with pytest.raises(loadmod.BusyMachine, match="--threads N"):
        loadmod.settle(load, torch, wait=0, threads_set=True, quick=False, stream=io.StringIO())
    assert torch.threads == 2


def test_a_quick_run_goes_on_marked_as_untrustworthy(machine):
    load, torch = fake_load(1.9), FakeTorch(2)
    loadmod.settle(load, torch, wait=60, threads_set=False, quick=True, stream=io.StringIO())
    assert torch.threads == 2 and "not trustworthy" in load.line()


def test_the_cli_refuses_and_writes_nothing_on_a_busy_machine(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(loadmod, "measure", lambda seconds: 1.9)
    monkeypatch.setattr(loadmod.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(runner, "Load", lambda: fake_load(1.9))
    assert main(["bench", "--suite", str(SUITE), "--out", str(tmp_path), "--wait", "0", *TINY]) == 2
    err = capsys.readouterr().err
    assert err.startswith("einc bench: error: other processes keep 1.9 of 2 cores busy")
    assert list(tmp_path.iterdir()) == []


def test_a_workload_timed_while_the_machine_got_busy_is_retimed_then_flagged(tmp_path, monkeypatch, capsys):
    """The load during each workload is sampled: one busy sample re-times it; two flag it,
    and its ratio leaves the summary."""
    (w,) = [w for w in json.loads(SUITE.read_text())["workloads"] if w["id"] == "tiny_gemm_16"]
    busy = iter([1000.0, 0.0])                   # first timing busy, the re-timing quiet
    monkeypatch.setattr(runner, "other_cores", lambda a, b: next(busy))
    monkeypatch.setattr(runner, "measure", lambda s: 0.0)
    opts = runner.Options(rounds=3, budget=0.1, min_rounds=1, wait=0)
    load = fake_load(0.0)
    (row,) = runner.run([w], opts, load=load)
    assert not row.get("noisy") and load.noisy == [] and "timing it again" in capsys.readouterr().err

    monkeypatch.setattr(runner, "other_cores", lambda a, b: 1000.0)
    rows = runner.run([w], opts, load=load)
    assert rows[0]["noisy"] and load.noisy == ["tiny_gemm_16"]
    md, csv, summary = runner.report_suite(rows, tmp_path, opts, load, quiet=True)
    assert ",1000.0,yes," in csv.read_text().splitlines()[1]
    assert "- geomean einc/torch: —" in summary and "less the 1 timed on a busy machine" in summary[0]
    assert "- timed on a busy machine, left out of the summary: tiny_gemm_16" in summary
    text = md.read_text()
    assert "left out)**" in text and "their ratios are noise" in text


def test_partial_runs_never_overwrite_a_full_runs_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "Load", lambda: fake_load(0.0))            # an idle machine
    monkeypatch.setattr(runner, "other_cores", lambda a, b: 0.0)
    full = {name: f"the full run's {name}" for name in ("suite_cpu.md", "suite_cpu.csv", "suite_cpu.png")}
    for name, text in full.items():
        (tmp_path / name).write_text(text)
    assert main(["bench", "--suite", str(SUITE), "--out", str(tmp_path), "--quick", *TINY,
                 "--filter", "gemm_16"]) == 0
    assert main(["bench", "--suite", str(SUITE), "--out", str(tmp_path), "--wait", "0", *TINY,
                 "--filter", "tiny_gemm"]) == 0
    assert all((tmp_path / name).read_text() == text for name, text in full.items())
    assert (tmp_path / "suite_cpu_quick_gemm_16.csv").is_file() and (tmp_path / "suite_cpu_tiny_gemm.md").is_file()
    assert runner.run_tag(False, "") == "" and runner.run_tag(True, "") == "_quick"
    assert runner.run_tag(False, "small") == "_small" and runner.run_tag(True, "../x y") == "_quick_x-y"


def test_the_expected_duration_is_printed_and_plausible(tmp_path, capsys):
    assert main(["bench", "--suite", str(SUITE), "--out", str(tmp_path), "--quick", *TINY, "--filter",
                 "tiny_gemm"]) == 0
    err = capsys.readouterr().err
    assert "einc bench: 1 workload(s) on cpu" in err and "; expected duration about " in err
    suite = json.loads(SUITE.read_text())["workloads"]
    full = runner.expected_seconds(suite, runner.Options())
    assert 15 < full < 4.5 * len(suite)            # most workloads finish their 31 rounds within the budget
    assert runner.expected_seconds(suite, runner.Options(mode="train")) > full


def test_the_chart_groups_by_category_and_shows_the_numbers(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    from einc.tools.benchmark import chart

    rows = [{"w": {"id": f"w{k}", "category": cat}, "einc_check": "ok", "et": et, "eo": 0.8}
            for k, (cat, et) in enumerate([("a", 0.5), ("b", 2.0), ("a", 1.25)])]
    groups = chart.by_category(rows)
    assert [(c, [r["w"]["id"] for r in rs]) for c, rs in groups] == [("a", ["w0", "w2"]), ("b", ["w1"])]
    fig, ax = plt.subplots()
    chart._speedups(ax, groups)
    texts = {t.get_text() for t in ax.texts}
    plt.close(fig)
    assert {"a", "b", "2.00", "0.50", "0.80", "1.25"} <= texts
    title = "einc vs torch.einsum\nAMD EPYC, 2 cores; torch 2.13.0 with 1 thread(s)\nWARNING: machine busy"
    assert chart.draw(rows, tmp_path / "c.png", title).read_bytes()[:4] == b"\x89PNG"


def test_the_chart_title_carries_machine_threads_versions_and_the_warning(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from einc.tools.benchmark import chart

    titles = []
    monkeypatch.setattr(chart, "draw", lambda rows, path, title, roof=None: titles.append(title) or path)
    assert main(["bench", "--suite", str(SUITE), "--out", str(tmp_path), "--quick", "--rounds", "3", "--budget",
                 "0.1", "--filter", "tiny_gemm"]) == 0
    (title,) = titles
    import opt_einsum
    import torch
    assert f"torch {torch.__version__} with {torch.get_num_threads()} thread(s)" in title
    assert f"opt_einsum {opt_einsum.__version__}" in title and "cores" in title and "--quick" in title
    load = fake_load(1.9)
    load.actions.append("quick run on a busy machine")
    assert "not trustworthy" in load.warning()


def test_a_quick_dispatch_run_writes_its_own_files(tmp_path):
    from einc.tools.benchmark import dispatch
    (tmp_path / "dispatch.csv").write_text("the full run's")
    assert dispatch.run(tmp_path, rounds=1, quick=True) == 0
    assert (tmp_path / "dispatch.csv").read_text() == "the full run's"
    assert len((tmp_path / "dispatch_quick.csv").read_text().splitlines()) == 1 + len(dispatch.SIZES)


@pytest.mark.parametrize("wid,variant", [("mps_inner_product", "gpu"), ("randreg_tn", "cpu")])
def test_tensor_network_operands_give_a_result_float32_can_hold(wid, variant):
    """Normalized alone, the 32 tensors of the gpu variant of mps_inner_product contract
    to 1e-41, below float32's normal range, where torch.einsum itself is 1 % off float64.
    The runner scales them alike so the result's largest magnitude is 1, and float32 then
    agrees with float64 to rounding."""
    import torch
    w = next(w for w in json.loads(SUITE.read_text())["workloads"] if w["id"] == wid)
    ops = runner.operands(w, "cpu", variant)
    wide = torch.complex128 if ops[0].is_complex() else torch.float64
    ref = torch.einsum(w["equation"], *[o.to(wide) for o in ops])
    assert abs(float(ref.abs().max()) - 1.0) < 1e-6
    got = torch.einsum(w["equation"], *ops).to(wide)
    assert float(((got - ref).abs() / ref.abs()).max()) < 1e-4
    if variant == "gpu":
        bare = [o / o.norm() for o in ops]
        tiny = torch.einsum(w["equation"], *[o.to(wide) for o in bare])
        assert float(tiny.abs().max()) < torch.finfo(torch.float32).tiny       # what the scaling avoids
