"""Learn mode, the CUDA default: the first call runs the modelled choice at once, kernels
are made ready on a background thread, later calls time one candidate per step (a
stand-in timer here), the fastest is kept and remembered across processes under a key
of versions and kernel source hashes.  Kernels run under Triton's interpreter."""

import functools
import json
import os
import subprocess
import sys
import threading
import time
import warnings

import pytest
import torch
from threads import errors_in_threads

import einc
from einc.runtime import learn, select, triton_executor

pytestmark = pytest.mark.kernels
PERMUTED = "dega,gfbc->abcdef"      # a permuted result: the model's first choice is the kernel


def _kind(fn) -> str:
    return "kernel" if getattr(fn, "__module__", "").startswith("einc_kernels") else "other"


@pytest.fixture
def learning(kernel_device, monkeypatch, tmp_path):
    """Kernels possible (the interpreter on CPU), learn mode, a cache folder of the test's
    own, and a stand-in timer: a kernel takes ``us["kernel"]`` µs, anything else
    ``us["other"]``; ``seen`` lists what it timed."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EINC_SELECT", "learn")
    seen, us = [], {"kernel": 1.0, "other": 5.0}

    def fake(fn, args):
        out, kind = fn(*args), _kind(fn)
        seen.append(kind)
        return out, lambda: us[kind]
    monkeypatch.setattr(learn, "timer", fake)
    einc.cache_clear()
    yield kernel_device, seen, us, tmp_path
    einc.cache_clear()


def _operands(device, shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(device) for s in shapes]


def _learn(equation, ops, calls=20):
    """Call until the steps are decided (each call's answer checked); how many calls it took."""
    expected = torch.einsum(equation, *ops)
    for n in range(1, calls + 1):
        torch.testing.assert_close(einc.einsum(equation, *ops), expected)
        learn.settle()
        if all(r.startswith(("learned", "measured earlier")) for r in einc.explain(equation, *ops).reasons):
            return n
    raise AssertionError(f"not decided after {calls} calls: {einc.explain(equation, *ops).reasons}")


def test_the_default_on_cuda_is_learn_and_the_cpu_keeps_its_own(monkeypatch):
    monkeypatch.delenv("EINC_SELECT", raising=False)
    assert select.mode_for(None, "cuda") == "learn"
    assert select.mode_for(None, "cpu") == "kernel"
    assert select.mode_for("measure", "cuda") == "measure"          # the opt-in of before


def test_the_first_call_neither_times_nor_waits_for_a_kernel(learning, monkeypatch):
    """The first call runs the modelled choice: a kernel's step runs torch's step while the
    kernel is loaded on the background thread (held here until the call has returned), a
    copy-free GEMM runs cuBLAS; nothing is timed.  The kernel runs only once it is ready."""
    device, seen, _, _ = learning
    gate, loading = threading.Event(), []
    real = triton_executor.launch_of

    def held(kernel):
        loading.append(threading.current_thread() is threading.main_thread())
        assert gate.wait(60)
        return real(kernel)
    monkeypatch.setattr(triton_executor, "launch_of", held)
    x, y = _operands(device, [(2, 3, 4, 5), (4, 2, 3, 2)])
    a, b = _operands(device, [(2, 3, 4), (2, 4, 5)])
    done = {}

    def first():
        done["permuted"] = einc.einsum(PERMUTED, x, y)
        done["gemm"] = einc.einsum("bij,bjk->bik", a, b)
    caller = threading.Thread(target=first)
    caller.start()
    caller.join(60)
    try:
        assert not caller.is_alive(), "the first call waited for the kernel"
        torch.testing.assert_close(done["permuted"], torch.einsum(PERMUTED, x, y))
        torch.testing.assert_close(done["gemm"], a @ b)
        assert not seen                                                   # nothing timed
        for _ in range(600):                        # (the thread may not have reached the kernel yet)
            if loading:
                break
            time.sleep(0.1)
        assert loading and not any(loading)                               # loading: the background's
        shown = einc.explain(PERMUTED, x, y)
        assert shown.backends[0].startswith("triton ") and shown.reasons[0].startswith("modelled")
        assert einc.explain("bij,bjk->bik", a, b).backends == ("blas bmm/mm",)
        assert all(r.endswith("; learning from the calls") for r in einc.explain("bij,bjk->bik", a, b).reasons)
    finally:
        gate.set()
    learn.settle()
    for _ in range(5):              # one candidate a call: torch, each kernel's untimed first run, its timed one
        torch.testing.assert_close(einc.einsum(PERMUTED, x, y), torch.einsum(PERMUTED, x, y))
    assert seen.count("kernel") == 2 and seen.count("other") == 1     # ready: each timed from its second run


@pytest.mark.parametrize("faster", ["kernel", "other"])
def test_the_faster_candidate_is_kept_after_a_few_calls(learning, faster):
    """Each call times one candidate per step; once each has SAMPLES timings the faster
    (by the stand-in timer) runs from then on, untimed, and is remembered."""
    device, seen, us, folder = learning
    us.update({faster: 1.0, "other" if faster == "kernel" else "kernel": 2.0})
    x, y = _operands(device, [(2, 3, 4, 5), (4, 2, 3, 2)])
    calls = _learn(PERMUTED, [x, y])
    assert calls <= 20
    (name,) = einc.explain(PERMUTED, x, y).backends
    assert name.startswith("triton ") == (faster == "kernel")
    assert seen.count("kernel") >= 2 * learn.SAMPLES                 # the kernel and the plain kernel
    assert seen.count("other") >= learn.SAMPLES
    timed = len(seen)
    for _ in range(3):
        torch.testing.assert_close(einc.einsum(PERMUTED, x, y), torch.einsum(PERMUTED, x, y))
    assert len(seen) == timed                                        # decided: no more timing
    ((key, decision),) = json.loads((folder / "decisions.json").read_text())["steps"].items()
    assert (decision["backend"] in ("triton", "plain")) == (faster == "kernel")
    assert set(decision["us"]) == {"triton", "plain", "torch"}


def test_a_kernel_far_behind_is_left_out_after_one_timing(learning):
    """A kernel whose first timing is SCREEN times torch's step or more is not timed again
    (each of its calls would cost that much more); torch's step is kept, the reason and the
    file keep the kernels' timings."""
    device, seen, us, folder = learning
    us.update({"kernel": 10.0, "other": 1.0})
    x, y = _operands(device, [(2, 3, 4, 5), (4, 2, 3, 2)])
    _learn(PERMUTED, [x, y])
    assert seen.count("kernel") == 2 and seen.count("other") == learn.SAMPLES     # the kernel and the plain one
    shown = einc.explain(PERMUTED, x, y)
    assert shown.backends == ("torch",) and "left out after one timing: triton 10 µs, plain 10 µs" in shown.reasons[0]
    ((key, decision),) = json.loads((folder / "decisions.json").read_text())["steps"].items()
    assert decision == {"backend": "torch", "us": {"torch": 1.0, "triton": 10.0, "plain": 10.0}}


def test_a_candidates_first_run_in_the_caller_is_not_timed(learning, monkeypatch):
    """A kernel's first launch on the caller's thread pays one-time host costs, which the
    events count where the device waits for the host: that run is not timed, so a kernel
    slow only on its first run is not left out, and it wins on its later runs."""
    device, seen, us, _ = learning
    us.update({"kernel": 1.0, "other": 5.0})
    runs = {}
    real = triton_executor.launch_of

    def counted(kernel):
        fn = real(kernel)

        @functools.wraps(fn)
        def launch(*args, **kwargs):
            if threading.current_thread() is threading.main_thread():     # (not the background's warm-up)
                runs[launch] = runs.get(launch, 0) + 1
            return fn(*args, **kwargs)
        return launch
    monkeypatch.setattr(triton_executor, "launch_of", counted)

    def fake(fn, args):
        cold = not runs.get(fn)
        out, kind = fn(*args), _kind(fn)
        seen.append((kind, cold))
        return out, lambda: 100.0 if cold and kind == "kernel" else us[kind]
    monkeypatch.setattr(learn, "timer", fake)
    x, y = _operands(device, [(2, 3, 4, 5), (4, 2, 3, 2)])
    _learn(PERMUTED, [x, y])
    assert ("kernel", False) in seen and ("kernel", True) not in seen    # timed, never on a first run
    assert sorted(runs.values()) == [1 + learn.SAMPLES] * 2                 # both kernels: one untimed run more
    shown = einc.explain(PERMUTED, x, y)
    assert shown.backends[0].startswith("triton ") and "left out" not in shown.reasons[0]


def test_a_fused_plan_learns_with_the_scale_and_gradients(learning):
    """A plan with a fused step, called through the op with a scale (into the last
    kernel's epilogue, on stand-ins of the scaled launch too) and differentiated: right on
    every call while learning and after."""
    import einc.custom_op  # noqa: F401
    from einc.planner.options import encode
    device, _, _, _ = learning
    equation, shapes, path = "bi,oij,bj->bo", [(6, 5), (7, 5, 4), (6, 4)], [(0, 2), (0, 1)]
    ops = [o.requires_grad_() for o in _operands(device, shapes, seed=3)]
    optimize, memory = encode(path, None)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")
        for _ in range(12):
            out = torch.ops.einc.einsum.default(equation, ops, optimize, memory, scale=0.5)
            torch.testing.assert_close(out, 0.5 * torch.einsum(equation, *ops))
            grads = torch.autograd.grad(out.sum(), ops)
            for got, want in zip(grads, torch.autograd.grad((0.5 * torch.einsum(equation, *ops)).sum(), ops)):
                torch.testing.assert_close(got, want)
            learn.settle()
    shown = einc.explain(equation, *ops, optimize=path)
    assert any(s.kind == "fused" for s in shown.steps) and shown.reasons[0].startswith("learned"), shown.reasons


def test_threads_calling_while_learning_get_right_answers(learning, monkeypatch):
    """Calls from several threads while kernels are made ready and timed: every answer is
    right, and the caller's threads never launch a kernel before its background launch on
    that layout has finished."""
    device, _, _, _ = learning
    real_warm, warmed, early = learn._warm, set(), []

    def warm(fn, layout):
        real_warm(fn, layout)
        warmed.add(fn)

    def watched(fn):
        def launch(*args, **kwargs):
            if threading.current_thread().name != "einc-kernels" and launch not in warmed:
                early.append(fn)
            return fn(*args, **kwargs)
        launch.__module__ = fn.__module__
        return launch
    real_launch = triton_executor.launch_of
    monkeypatch.setattr(learn, "_warm", warm)
    monkeypatch.setattr(triton_executor, "launch_of", lambda kernel: watched(real_launch(kernel)))
    x, y = _operands(device, [(2, 3, 4, 5), (4, 2, 3, 2)])
    expected, wrong = torch.einsum(PERMUTED, x, y), []

    def work(_):
        for _ in range(8):
            if not torch.allclose(einc.einsum(PERMUTED, x, y), expected):
                wrong.append(1)
    assert errors_in_threads(work, range(3)) == []
    assert not wrong and not early
    assert _learn(PERMUTED, [x, y]) <= 20
    assert warmed and not early


def test_a_kernel_that_fails_in_the_background_is_dropped_with_one_warning(learning, monkeypatch):
    """A kernel that does not load (a generator bug) is left out; the step learns among
    the others, the answers stay right, and the caller is told once."""
    device, seen, us, _ = learning
    real = triton_executor.launch_of

    def broken(kernel):
        if threading.current_thread().name == "einc-kernels" and "_mm_" in kernel.name:
            raise SyntaxError("a generator bug")
        return real(kernel)
    monkeypatch.setattr(triton_executor, "launch_of", broken)
    a, b = _operands(device, [(3, 4), (4, 5)])
    q, k = _operands(device, [(2, 5, 3, 4), (2, 6, 3, 4)])
    equation = "bqhd,bkhd->bhqk"        # no copy-free GEMM: the kernel against torch's step
    with pytest.warns(RuntimeWarning, match="failed .*SyntaxError: a generator bug.*cuBLAS or torch ops") as got:
        _learn(equation, [q, k])
    assert len([w for w in got if "generator bug" in str(w.message)]) == 1
    assert einc.explain(equation, q, k).backends == ("torch",) and "kernel" not in seen


def test_a_remembered_kernel_that_fails_to_load_is_learned_again(learning, monkeypatch):
    """A decision read from the file names a kernel that now fails to load (another
    machine's compiler, a generator bug): the step runs torch's step meanwhile, says so
    once, and learns again among the candidates left."""
    device, seen, us, folder = learning
    x, y = _operands(device, [(2, 3, 4, 5), (4, 2, 3, 2)])
    _learn(PERMUTED, [x, y])
    (remembered,) = einc.explain(PERMUTED, x, y).backends
    assert remembered.startswith("triton ")
    einc.cache_clear()                                               # as a new process
    seen.clear()
    real = triton_executor.launch_of

    def broken(kernel):
        if threading.current_thread().name == "einc-kernels":
            raise RuntimeError("no such GPU")
        return real(kernel)
    monkeypatch.setattr(triton_executor, "launch_of", broken)
    with pytest.warns(RuntimeWarning, match="no such GPU") as got:
        torch.testing.assert_close(einc.einsum(PERMUTED, x, y), torch.einsum(PERMUTED, x, y))
        learn.settle()
        torch.testing.assert_close(einc.einsum(PERMUTED, x, y), torch.einsum(PERMUTED, x, y))
        assert einc.explain(PERMUTED, x, y).reasons[0].endswith(learn.LEARNING)     # undecided again
        _learn(PERMUTED, [x, y])
    assert len([w for w in got if "no such GPU" in str(w.message)]) == 1
    assert einc.explain(PERMUTED, x, y).backends == ("torch",) and set(seen) == {"other"}


def test_calls_a_kernel_cannot_read_run_on_torch_and_learning_goes_on(learning):
    """Fake tensors (no memory) and a view with the negative bit (its values are the
    negated memory) run on torch, and the entry learns from the calls that kernels can read."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    device, seen, _, _ = learning
    negated = torch.randn(6, 7, dtype=torch.complex128).conj().imag.to(device)
    b = _operands(device, [(7, 5)])[0]
    real = negated.resolve_neg()
    with FakeTensorMode() as mode:
        assert einc.einsum("ij,jk->ik", mode.from_tensor(real), mode.from_tensor(b)).shape == (6, 5)
    for _ in range(3):
        torch.testing.assert_close(einc.einsum("ij,jk->ik", negated, b), torch.einsum("ij,jk->ik", negated, b))
    assert not seen
    plain = torch.randn(6, 14, dtype=torch.float64)[:, ::2].to(device)    # strided as the negated view
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _learn("ij,jk->ik", [plain, b])


def test_nothing_runs_in_the_background_for_cpu_tensors_by_default(monkeypatch, tmp_path):
    """Without EINC_BACKEND=triton a CPU tensor runs the torch executor: no kernel, no job."""
    monkeypatch.delenv("EINC_BACKEND", raising=False)
    monkeypatch.delenv("EINC_SELECT", raising=False)
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    jobs = []
    monkeypatch.setattr(learn._worker, "submit", lambda job, later=False: jobs.append(job))
    einc.cache_clear()
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    for _ in range(3):
        torch.testing.assert_close(einc.einsum("ij,jk->ik", a, b), a @ b)
    assert einc.explain("ij,jk->ik", a, b).backends == ("torch",) and not jobs
    einc.cache_clear()


def test_nothing_is_timed_or_compiled_while_a_graph_is_captured(learning, monkeypatch):
    device, seen, _, _ = learning
    jobs = []
    monkeypatch.setattr(learn._worker, "submit", lambda job, later=False: jobs.append(job))
    monkeypatch.setattr(select, "capturing", lambda: True)
    x, y = _operands(device, [(2, 3, 4, 5), (4, 2, 3, 2)])
    for _ in range(4):
        torch.testing.assert_close(einc.einsum(PERMUTED, x, y), torch.einsum(PERMUTED, x, y))
    assert not seen and not jobs


def test_no_timing_is_read_while_a_graph_is_captured(learning, monkeypatch):
    """Reading a timing queries a CUDA event, which CUDA forbids the thread that captures
    a graph (and which would break the capture): the readings wait for a later call."""
    device, _, _, _ = learning
    capturing, passed, reads = [False], [False], []

    def fake(fn, args):
        kind = _kind(fn)

        def reading():
            reads.append(capturing[0])
            return {"kernel": 1.0, "other": 5.0}[kind] if passed[0] else None    # (the device not there yet)
        return fn(*args), reading
    monkeypatch.setattr(learn, "timer", fake)
    monkeypatch.setattr(select, "capturing", lambda: capturing[0])
    x, y = _operands(device, [(2, 3, 4, 5), (4, 2, 3, 2)])
    expected = torch.einsum(PERMUTED, x, y)
    for _ in range(4):                              # timings left pending by these calls
        torch.testing.assert_close(einc.einsum(PERMUTED, x, y), expected)
        learn.settle()
    assert reads
    read_before, passed[0], capturing[0] = len(reads), True, True
    for _ in range(3):
        torch.testing.assert_close(einc.einsum(PERMUTED, x, y), expected)
    assert len(reads) == read_before and not any(reads)
    capturing[0] = False
    assert _learn(PERMUTED, [x, y], calls=30) >= 1
    assert len(reads) > read_before and not any(reads)


_SCRIPT = """
import json, sys, torch, einc
from einc.runtime import learn
timed = []
def fake(fn, args):
    out = fn(*args)
    timed.append(fn)
    return out, lambda: 1.0 if getattr(fn, "__module__", "").startswith("einc_kernels") else 5.0
learn.timer = fake
g = torch.Generator().manual_seed(0)
x, y = torch.randn(2, 3, 4, 5, generator=g), torch.randn(4, 2, 3, 2, generator=g)
first = None
for n in range(20):
    torch.testing.assert_close(einc.einsum("dega,gfbc->abcdef", x, y), torch.einsum("dega,gfbc->abcdef", x, y))
    first = first or einc.explain("dega,gfbc->abcdef", x, y).reasons[0]
    learn.settle()
shown = einc.explain("dega,gfbc->abcdef", x, y)
print(json.dumps({"timed": len(timed), "first": first, "backend": shown.backends[0], "reason": shown.reasons[0]}))
"""


@pytest.mark.slow
def test_a_decision_survives_a_new_process_and_goes_stale_with_a_version_or_kernel(tmp_path):
    """A second process takes the first's decision without timing anything; a key whose
    einc version or kernel source hash differs from the current one is not taken: the
    step is learned again."""
    env = {**os.environ, "EINC_CACHE_DIR": str(tmp_path), "EINC_BACKEND": "triton", "EINC_SELECT": "learn",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}

    def run():
        done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])
    learned = run()
    assert learned["timed"] > 0 and learned["reason"].startswith("learned") and learned["backend"].startswith("triton")
    again = run()
    assert again["timed"] == 0 and "decisions.json" in again["first"] and again["backend"] == learned["backend"]
    path = tmp_path / "decisions.json"
    text = path.read_text()
    path.write_text(text.replace(f"einc {einc.__version__}|", "einc 0.0.0-older|"))
    assert run()["timed"] > 0                                        # another einc's decision: learned again
    saved = json.loads(path.read_text())["steps"]
    current = next(k for k in saved if f"einc {einc.__version__}|" in k)
    kernel = current.rsplit("|", 1)[1].split(",")[0]
    path.write_text(json.dumps({"format": select.FORMAT,
                                "steps": {current.replace(kernel, kernel[:-8] + "00000000"): saved[current]}}))
    assert run()["timed"] > 0                                        # another kernel source: learned again


_FIRST_CALL_IMPORTS = """
import json, sys, torch, einc
from einc.runtime import learn, select
jobs = []
learn._worker.submit = lambda job, later=False: jobs.append(job)  # the background thread, which imports triton, held
x, y = torch.randn(2, 3, 4, 5), torch.randn(4, 2, 3, 2)
out = einc.einsum("dega,gfbc->abcdef", x, y)
imported = "triton" in sys.modules
import triton
print(json.dumps({"imported": imported, "jobs": len(jobs), "right": bool(torch.allclose(
    out, torch.einsum("dega,gfbc->abcdef", x, y))), "key": select._environment(x.device),
    "version": triton.__version__}))
"""


def test_a_first_call_does_not_import_triton_on_the_callers_thread(tmp_path):
    """Importing triton is slow, and a first call must not wait for it: the call that
    hands a kernel to the background thread reads triton's version for its decisions key
    from the package's metadata, and leaves the import to that thread.  The key names
    the version triton itself reports."""
    pytest.importorskip("triton")
    env = {**os.environ, "EINC_CACHE_DIR": str(tmp_path), "EINC_BACKEND": "triton", "EINC_SELECT": "learn",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _FIRST_CALL_IMPORTS], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["right"] and got["jobs"] >= 1 and not got["imported"]
    assert f"|triton {got['version']}|" in got["key"]


def test_two_kernels_are_made_ready_at_once_unless_compiling_is_one_at_a_time(monkeypatch):
    monkeypatch.setenv("EINC_COMPILE_THREADS", "4")
    assert learn._jobs() == learn.JOBS == 2
    monkeypatch.setenv("EINC_COMPILE_THREADS", "1")
    assert learn._jobs() == 1


def test_while_a_kernel_is_made_ready_calls_run_the_fastest_candidate_so_far():
    """Once every ready candidate has its timings and a kernel is still being made ready,
    a call runs the fastest so far, untimed, instead of going on timing each in turn."""
    learner = learn.Learner([select.Choice("torch", "modelled")], load=None)
    learner.setup(0, {"torch": lambda: "torch", "chunks": lambda: "chunks"}, ("triton",), "key", None)
    us, ran = {"torch": 5.0, "chunks": 2.0}, []
    args = [torch.zeros(2)]
    for _ in range(20):
        name, _, timed = learner.pick(0, args, False, timing=True, submit=False)    # the kernel never ready
        ran.append((name, timed))
        if timed:
            learner.record(0, name, lambda name=name: us[name])
        assert learner.after_call() == (None, [])
    first = 2 * (1 + learn.SAMPLES)                 # each: an untimed first run, then its timings
    assert sorted(ran[:first]) == sorted([("torch", False), ("chunks", False)] +
                                         [("torch", True), ("chunks", True)] * learn.SAMPLES)
    assert ran[first:] == [("chunks", False)] * (20 - first)
    assert not learner.steps[0].decided              # still waiting for the kernel's timings


def test_a_job_out_of_device_memory_beside_another_is_tried_again_behind_the_queue(monkeypatch):
    """Two jobs' stand-ins may not fit where one's does: a kernel whose job ran out of
    device memory while another job ran is made ready again after the queue, not dropped;
    alone, it is dropped as any failure."""
    monkeypatch.setenv("EINC_COMPILE_THREADS", "4")           # two jobs at once
    monkeypatch.setattr(learn, "_worker", learn._Worker(threads=learn._jobs))
    tries, gate, started = [], threading.Event(), threading.Event()

    def warm(fn, layout):
        tries.append(layout)
        if len(tries) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (stand-in)")
    monkeypatch.setattr(learn, "_warm", warm)
    learner = learn.Learner([select.Choice("torch", "modelled")], load=lambda s, name: "launch")
    learner.setup(0, {"torch": lambda: None}, ("triton",), "key", None)
    learn._worker.submit(lambda: (started.set(), gate.wait(30)))        # another job, running
    assert started.wait(30)
    learner.pick(0, [torch.zeros(2)], False, timing=False)              # hands the kernel over
    deadline = time.time() + 30
    while len(tries) < 1 and time.time() < deadline:
        time.sleep(0.01)
    gate.set()
    assert learn._worker.settle(30)
    assert len(tries) == 2 and learner.steps[0].failed == {}
    assert learner.steps[0].loaded == {"triton": "launch"}
    tries.clear()
    learner.steps[0].ready.clear()
    learner.pick(0, [torch.zeros(3)], False, timing=False)              # alone: dropped
    assert learn._worker.settle(30)
    assert len(tries) == 1 and "triton" in learner.steps[0].failed
