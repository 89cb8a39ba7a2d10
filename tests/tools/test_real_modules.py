"""``bench/real_modules.py`` without the libraries: the patch, the paired ratio and its
interval, the table, the answer check, and the whole two-worker run on its torch-only
module.  The libraries' modules run only under ``slow``, and only where installed."""

import importlib.util
import math
import subprocess
import sys

import pytest

from bench import real_modules as rm


def test_the_patch_is_in_place_before_a_library_binds_einsum():
    # a module that binds torch.einsum at import, as x-transformers does (`from torch import einsum`)
    code = (
        f"import sys; sys.path.insert(0, {str(rm.REPO)!r}); from bench import real_modules as rm; rm.patch(); "
        "import torch, einc; from torch import einsum; "
        "print(einsum is einc.einsum, torch.functional.einsum is einc.einsum)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap and its page-fault counts")
def test_a_settled_heap_keeps_the_pages_of_a_steps_temporaries():
    # a fresh process: a "step" of eight temporaries of a few MiB, allocated, written, freed;
    # without the settling allocation glibc maps each one afresh (its thresholds start
    # below them) and the step faults its pages in every time
    code = (
        f"import sys, resource; sys.path.insert(0, {str(rm.REPO)!r}); from bench import real_modules as rm; "
        "import torch; rm.settle_heap()\n"
        "def step():\n    xs = [torch.ones(2**19) for _ in range(8)]\n    del xs\n"
        "step(); step(); before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "for _ in range(5): step()\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 5)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) < 512   # fewer than one temporary's pages a step


def test_summarize_pairs_the_rounds():
    # patched twice as fast in every round but the last: the median ratio is 0.5 and the
    # interval (9 rounds, 95 %) reaches from the smallest kept ratio to the 8th
    unpatched = [2.0] * 9
    patched = [1.0] * 8 + [4.0]
    row = rm.summarize("m", unpatched, patched, first=(0.1, 0.3), calls=7)
    assert row["ratio"] == 0.5 and row["low"] == 0.5 and row["high"] == 0.5
    assert row["unpatched_s"] == 2.0 and row["patched_s"] == 1.0
    assert math.isclose(row["first_ratio"], 3.0) and row["rounds"] == 9
    spread = rm.summarize("m", [1.0] * 9, [0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3], first=(1.0, 1.0))
    assert spread["ratio"] == 0.9 and spread["low"] == 0.6 and spread["high"] == 1.2


def test_table_rows_skips_and_geomean():
    rows = [
        rm.summarize("a", [1e-3] * 5, [0.5e-3] * 5, (2e-3, 4e-3), 3),
        rm.summarize("b", [1e-3] * 5, [2e-3] * 5, (2e-3, 2e-3)),
        {"module": "c", "skipped": "c is not installed"},
    ]
    text = rm.table(rows)
    lines = text.splitlines()
    assert lines[2] == "| a | 1 | 0.5 | 0.50 (0.50-0.50) | 2 / 4 | 2.00 | 3 |"
    assert lines[3].startswith("| b | 1 | 2 | 2.00 (2.00-2.00) |")
    assert lines[4] == "| c | skipped: c is not installed | | | | | |"
    assert text.endswith("Geomean of the ratios: 1.00 over 2 modules.")


def test_same_answers_tolerates_rounding_only():
    assert rm.same_answers([1.0, 1000.0], [1.0 + 1e-5, 1000.05])
    assert not rm.same_answers([1.0, 1000.0], [1.0, 1002.0])
    assert not rm.same_answers([1.0], [1.0, 2.0])


def test_a_missing_library_is_skipped_with_its_install_command():
    case = rm.Case("demo", "build_bilinear", "pykeen", "demo", importable="no_such_module_here")
    why = rm.missing(case)
    assert "pykeen is not installed" in why and "--install demo" in why
    assert rm.missing(rm.CASES["torch-bilinear"]) is None


def test_every_case_has_its_builder_and_install():
    for case in rm.CASES.values():
        assert callable(getattr(rm, case.build))
        assert case.library == "" or case.library in rm.INSTALLS


def test_lettered_keeps_the_structure_with_letters_only():
    eq = "ab×,×c->abc"
    out = rm.lettered(eq)
    assert out == "ABC,CD->ABD" and all(
        c.isalpha() or c in ",->" for c in rm.lettered("".join(map(chr, range(40, 400))))
    )


def test_record_calls_counts_each_call_once_with_its_layout():
    import torch

    import einc
    from einc import autograd
    from einc.runtime import engine

    before = (engine.run, engine.run_scaled, autograd.differentiable)
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(5, 4).t()  # b: a transposed view

    def step():
        for _ in range(2):
            einc.einsum("ij,jk->ik", a, b).sum().backward()
        einc.einsum("ii->i", torch.randn(2, 2))

    calls = rm.record_calls(step)
    assert calls == {
        ("ij,jk->ik", (((3, 4), (4, 1), torch.float32, True), ((4, 5), (1, 4), torch.float32, False))): 2,
        ("ii->i", (((2, 2), (2, 1), torch.float32, False),)): 1,
    }
    assert (engine.run, engine.run_scaled, autograd.differentiable) == before  # the wrappers are gone


def test_time_call_times_forward_and_backward_of_a_recorded_call():
    import torch

    ops = (((3, 4), (4, 1), torch.float32, True), ((4, 5), (1, 4), torch.float32, False))
    timed = rm.time_call("ij,jk->ik", ops, torch.functional.einsum, budget=0.05)
    assert len(timed) == 2
    for median, ratio, low, high in timed:
        assert median > 0 and 0 < low <= ratio <= high


def test_time_call_in_cpu_time_runs_its_rounds():
    import torch

    ops = (((3, 4), (4, 1), torch.float32, True), ((4, 5), (1, 4), torch.float32, False))
    timed = rm.time_call("ij,jk->ik", ops, torch.functional.einsum, budget=0.05, clock="cpu")
    assert len(timed) == 2
    for median, ratio, low, high in timed:
        assert median > 0 and 0 < low <= ratio <= high


def _bilinear_row(tmp_path, *options) -> dict:
    """The row of ``real_modules.py torch-bilinear`` in three short rounds, with ``options``;
    the script must exit 0."""
    out = subprocess.run(
        [sys.executable, str(rm.HERE / "real_modules.py"), "torch-bilinear", "--rounds", "3", "--target", "0.005",
         *options, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    (row,) = __import__("json").loads((tmp_path / "real-modules.json").read_text())
    return row


def test_two_workers_time_the_torch_only_module(tmp_path):
    row = _bilinear_row(tmp_path)
    assert row["rounds"] == 3 and row["note"] == ""  # the same answers both ways
    assert row["unpatched_s"] > 0 and row["patched_s"] > 0 and row["low"] <= row["ratio"] <= row["high"]
    assert row["calls"] >= 1  # einc ran in the patched worker
    assert "| torch-bilinear |" in (tmp_path / "real-modules.md").read_text()


def test_measure_gives_the_workers_an_empty_cache_folder_of_their_own(monkeypatch):
    # a path remembered on disk by an earlier run would make einc's first step look cheap
    import os

    seen = []

    class FakeWorker:
        def __init__(self, case, patched, cache_dir, settle=False):
            seen.append((patched, cache_dir, os.listdir(cache_dir)))
            self.first = {"first": 0.002 if patched else 0.001, "check": [1.0]}

        def ask(self, command):
            return {"n": 1} if command.startswith("calibrate") else {"per_call": 1e-3, "calls": 1}

        def close(self):
            pass

    monkeypatch.setattr(rm, "Worker", FakeWorker)
    row = rm.measure(rm.CASES["torch-bilinear"], rounds=3, target=0.001)
    assert [p for p, _, _ in seen] == [False, True] and seen[0][1] == seen[1][1]
    assert seen[0][2] == [] and not os.path.exists(seen[0][1])  # empty while used, gone after
    assert seen[0][1] != os.environ.get("EINC_CACHE_DIR")
    assert row["first_ratio"] == 2.0 and row["ratio"] == 1.0 and row["calls"] == 1


def test_first_steps_run_each_in_a_fresh_process_with_a_cache_folder_of_its_own(monkeypatch):
    # one process's first step is noise: several a side, each new, each with nothing cached
    import os

    seen = []
    times = iter([0.010, 0.030, 0.012, 0.020, 0.011, 0.026])  # in the order the workers start

    class FakeWorker:
        def __init__(self, case, patched, cache_dir, collect=True):
            seen.append((patched, cache_dir, os.listdir(cache_dir)))
            t = next(times)
            self.first = {"first": t, "first_cpu": t / 2, "check": [1.0]}
            self.closed = False

        def close(self):
            self.closed = True

    monkeypatch.setattr(rm, "Worker", FakeWorker)
    row = rm.first_steps(rm.CASES["torch-bilinear"], runs=3)
    assert len(seen) == 6 and sorted(p for p, _, _ in seen) == [False] * 3 + [True] * 3
    assert len({d for _, d, _ in seen}) == 6 and all(listing == [] and not os.path.exists(d) for _, d, listing in seen)
    first = {True: [], False: []}
    for (patched, _, _), t in zip(seen, [0.010, 0.030, 0.012, 0.020, 0.011, 0.026]):
        first[patched].append(t)
    assert row["first_unpatched_s"] == sorted(first[False])[1] and row["first_patched_s"] == sorted(first[True])[1]
    assert row["first_ratio"] == row["first_patched_s"] / row["first_unpatched_s"] and row["runs"] == 3
    assert row["pair_low"] <= row["pair_median"] <= row["pair_high"] and row["note"] == ""
    assert row["cpu_patched_s"] == row["first_patched_s"] / 2 and row["cpu_unpatched_s"] == row["first_unpatched_s"] / 2
    assert rm.first_row(row).startswith("| torch-bilinear | 3 | ") and rm.first_row(row).count("|") == 8


def test_first_steps_with_the_collector_paused_pause_it_in_each_worker(monkeypatch):
    asked = []

    class FakeWorker:
        def __init__(self, case, patched, cache_dir, collect=True):
            asked.append(collect)
            self.first = {"first": 0.01, "check": [1.0]}

        def close(self):
            pass

    monkeypatch.setattr(rm, "Worker", FakeWorker)
    rm.first_steps(rm.CASES["torch-bilinear"], runs=2, collect=False)
    assert asked == [False] * 4


def test_a_worker_reports_the_collections_of_its_first_step(tmp_path):
    """With the collector paused (``--collect off``) none runs in the first step, and the
    worker runs on with it on; each worker says which generations were collected in it."""
    paused = rm.Worker("torch-bilinear", True, str(tmp_path), collect=False)
    try:
        assert paused.first["collections"] == []
        assert paused.ask("calibrate 0.001")["n"] >= 1
    finally:
        paused.close()
    plain = rm.Worker("torch-bilinear", False, str(tmp_path))
    plain.close()
    assert isinstance(plain.first["collections"], list)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in rm.CASES if n != "torch-bilinear"])
def test_each_real_module_gives_the_same_answers_patched(name, request):
    # two fresh interpreters a module (~30 s): only when asked for, with -m slow
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("run with -m slow")
    case = rm.CASES[name]
    if importlib.util.find_spec(case.importable) is None:
        pytest.skip(rm.missing(case))
    row = rm.measure(case, rounds=1, target=0.001)
    assert row["note"] == "" and row["calls"] >= 1


def test_the_modules_rounds_run_in_cpu_time_where_asked(tmp_path):
    """``--clock cpu`` times each worker's batches in its thread's CPU time (a shared
    machine's other jobs move it less than the wall clock), and the row says so."""
    row = _bilinear_row(tmp_path, "--clock", "cpu")
    assert row["clock"] == "cpu" and row["rounds"] == 3 and row["note"] == ""
    assert row["unpatched_s"] > 0 and row["patched_s"] > 0 and row["low"] <= row["ratio"] <= row["high"]


def test_settled_copies_are_those_of_every_step_the_later_ones_too(monkeypatch):
    """A step that copies one tensor from its first call and another only from its fourth:
    both copies are handed over and compiled before the rounds, and the steps stop once a
    round of them hands over none."""
    import torch

    from einc.runtime.torch_executor import compiled_copy as cc
    from einc.runtime.torch_executor.permute_copy import permuted_copy

    monkeypatch.setenv("EINC_COPY_COMPILE", "on")
    monkeypatch.setattr(cc, "MIN_BYTES", 0)
    monkeypatch.setattr(cc, "compile_copy", lambda perm, shape, dtype, threads: lambda x: x.permute(perm).contiguous())
    monkeypatch.setattr(cc, "faster", lambda fn, own, x: True)
    cc.forget()
    first, later = torch.randn(6, 5, 4), torch.randn(3, 7, 2)
    copy_first, copy_later = (permuted_copy(list("abc"), list("cab"), dict(zip("abc", x.shape)))
                              for x in [first, later])
    steps = []

    def step():
        steps.append(1)
        copy_first(first)
        if len(steps) > cc.CALLS:
            copy_later(later)

    try:
        assert rm.settle_copies(step) == 2
        assert cc.state((2, 0, 1), first.shape, first.dtype) == cc.state((2, 0, 1), later.shape, later.dtype) == "ready"
        assert len(steps) == 3 * cc.CALLS   # a round handing the first, one the later, one none
    finally:
        cc.forget()


def test_a_settling_patched_worker_says_how_many_copies_it_settled(tmp_path):
    # (the tests run with EINC_COPY_COMPILE off: the worker hands over none and says so)
    assert _bilinear_row(tmp_path, "--settle")["settled"] == 0
    assert _bilinear_row(tmp_path)["settled"] is None


def test_a_cpu_batch_counts_the_threads_time_only():
    """A batch of steps that sleep takes wall time but next to no CPU time."""
    import time

    assert rm.cpu_batch(lambda: time.sleep(0.01), 3) < 0.005
