"""runtime/torch_executor/compiled_copy.py: a transposing copy runs compiled only once its
compile, check and timing have finished in the background; a key that fails or is slower
is marked and never raises; keys follow torch's thread count; only plain, untraced CPU
tensors of the admitted dtypes and sizes take it; every bit is kept (inductor's real
compiles: marked slow)."""

import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import einc
from einc.errors import ConfigError
from einc.runtime.torch_executor import compiled_copy as cc
from einc.runtime.torch_executor.permute_copy import permuted_copy

SHAPE, SRC, DST = (6, 5, 4, 3), "abcd", "dcab"     # the source's unit-stride index moved outermost
PERM = tuple(SRC.index(i) for i in DST)


@pytest.fixture
def compiling(monkeypatch):
    """Compiled copies on, every size admitted, no compiled copy left from before or after."""
    monkeypatch.setenv("EINC_COPY_COMPILE", "on")
    monkeypatch.setattr(cc, "MIN_BYTES", 0)
    monkeypatch.setattr(cc, "CALLS", 1)
    cc.forget()
    yield
    cc.forget()


@pytest.fixture
def fake(monkeypatch, compiling):
    """``compile_copy`` replaced by torch's own copy, counting compiles and runs."""
    counts = {"compiles": 0, "runs": 0}

    def compile_copy(perm, shape, dtype, threads):
        counts["compiles"] += 1
        counts["threads"] = threads

        def run(x):
            counts["runs"] += 1
            return x.permute(perm).contiguous()
        return run
    monkeypatch.setattr(cc, "compile_copy", compile_copy)
    monkeypatch.setattr(cc, "faster", lambda fn, own, x: True)
    return counts


def _copy(shape=SHAPE, src=SRC, dst=DST):
    return permuted_copy(list(src), list(dst), dict(zip(src, shape)))


def _x(shape=SHAPE, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


# ------------------------------------------------------------------------------ mechanics

def test_the_first_call_runs_einc_copy_and_later_calls_the_compiled_one(fake):
    f, x = _copy(), _x()
    assert torch.equal(f(x), x.permute(PERM).contiguous())
    assert cc.state(PERM, SHAPE, x.dtype) in (cc.PENDING, "ready")
    assert cc.settle(60)
    assert cc.state(PERM, SHAPE, x.dtype) == "ready" and fake["compiles"] == 1
    runs = fake["runs"]                         # (the background check ran it once)
    assert torch.equal(f(x), x.permute(PERM).contiguous())
    assert fake["runs"] == runs + 1
    _copy()(x)                                  # another copy of the same key: no second compile
    assert cc.settle(60) and fake["compiles"] == 1 and fake["runs"] == runs + 2


def test_a_tensor_of_another_shape_with_the_same_strides_runs_einc_copy(fake):
    """The compiled kernel is made for one shape: a tensor whose leading size differs (its
    contiguous strides are the same) must not reach it."""
    f, x = _copy(), _x()
    f(x)
    assert cc.settle(60) and cc.state(PERM, SHAPE, x.dtype) == "ready"
    other = _x((9,) + SHAPE[1:])
    assert other.stride() == x.stride()
    runs = fake["runs"]
    assert torch.equal(f(other), other.permute(PERM).contiguous())
    assert fake["runs"] == runs


def test_a_key_is_handed_over_on_its_third_call(fake, monkeypatch):
    monkeypatch.setattr(cc, "CALLS", 3)
    f, x = _copy(), _x()
    for _ in range(2):
        f(x)
        assert cc.settle(60) and cc.state(PERM, SHAPE, x.dtype) is None and cc.seen() == 0
    f(x)
    assert cc.settle(60) and cc.state(PERM, SHAPE, x.dtype) == "ready" and fake["compiles"] == 1


def test_nothing_is_compiled_when_the_setting_is_off(fake, monkeypatch):
    monkeypatch.setenv("EINC_COPY_COMPILE", "off")
    _copy()(_x())
    assert cc.settle(60) and fake["compiles"] == 0 and cc.state(PERM, SHAPE, torch.float32) is None


def test_a_bad_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv("EINC_COPY_COMPILE", "maybe")
    with pytest.raises(ConfigError, match="EINC_COPY_COMPILE"):
        einc.config.copy_compile()


def test_a_compile_that_fails_marks_the_key_and_never_raises(compiling, monkeypatch):
    def broken(perm, shape, dtype, threads):
        raise RuntimeError("no C++ compiler")
    monkeypatch.setattr(cc, "compile_copy", broken)
    f, x = _copy(), _x()
    for _ in range(3):
        assert torch.equal(f(x), x.permute(PERM).contiguous())
        assert cc.settle(60)
    assert cc.state(PERM, SHAPE, x.dtype) == cc.FAILED


def test_after_a_failed_compile_no_other_key_is_handed_over(compiling, monkeypatch):
    """What failed one compile (no compiler, another inductor) would fail the next: a
    process that cannot compile stops asking."""
    calls = []

    def broken(perm, shape, dtype, threads):
        calls.append(shape)
        raise RuntimeError("no C++ compiler")
    monkeypatch.setattr(cc, "compile_copy", broken)
    f, x = _copy(), _x()
    f(x)
    assert cc.settle(60) and cc.state(PERM, SHAPE, x.dtype) == cc.FAILED
    other = (7, 5, 4, 3)
    g, y = _copy(other), _x(other)
    for _ in range(3):
        assert torch.equal(g(y), y.permute(PERM).contiguous())
    assert cc.settle(60) and calls == [SHAPE] and cc.state(PERM, other, y.dtype) is None
    cc.forget()                                 # (forgetting starts over)
    g(y)
    assert cc.settle(60) and calls == [SHAPE, other]


def test_at_most_most_keys_are_handed_over(fake, monkeypatch):
    monkeypatch.setattr(cc, "MOST", 2)
    shapes = [(n, 5, 4, 3) for n in (2, 3, 4)]
    for shape in shapes:
        _copy(shape)(_x(shape))
    assert cc.settle(60) and fake["compiles"] == 2
    assert [cc.state(PERM, shape, torch.float32) for shape in shapes] == ["ready", "ready", None]


def test_a_compiled_copy_that_changes_bits_is_never_used(compiling, monkeypatch):
    monkeypatch.setattr(cc, "compile_copy",
                        lambda perm, shape, dtype, threads: lambda x: x.permute(perm).contiguous() + 1)
    monkeypatch.setattr(cc, "faster", lambda fn, own, x: True)
    f, x = _copy(), _x()
    f(x)
    assert cc.settle(60) and cc.state(PERM, SHAPE, x.dtype) == cc.FAILED
    assert torch.equal(f(x), x.permute(PERM).contiguous())


def test_a_slower_compiled_copy_is_marked_and_einc_copy_stays(fake, monkeypatch):
    monkeypatch.setattr(cc, "faster", lambda fn, own, x: False)
    f, x = _copy(), _x()
    f(x)
    assert cc.settle(60) and cc.state(PERM, SHAPE, x.dtype) == cc.SLOWER
    runs = fake["runs"]
    f(x)
    assert fake["runs"] == runs


@pytest.mark.parametrize("mark", ["slower", "failed", "spent"])
def test_a_settled_key_is_spared_the_checks(fake, monkeypatch, mark):
    """Once no compiled copy can run on a key (timed slower, failed, or never handed over
    and no more keys will be), later calls go straight to einc's copy: ``admits`` is not
    asked again, and the bits are torch's."""
    f, x = _copy(), _x()
    if mark == "spent":
        monkeypatch.setattr(cc, "_handed", cc.MOST)
    else:
        monkeypatch.setattr(cc, "faster", lambda fn, own, x: False)
        if mark == "failed":
            monkeypatch.setattr(cc, "compile_copy", lambda *args: 1 / 0)
        f(x)
        assert cc.settle(60) and cc.state(PERM, SHAPE, x.dtype) == mark
    asked = []
    monkeypatch.setattr("einc.runtime.torch_executor.permute_copy.admits", lambda x: asked.append(x) or True)
    assert torch.equal(f(x), x.permute(PERM).contiguous())
    assert asked == [] and cc.settled(PERM, SHAPE, x)
    # another dtype is another key: still open where keys are still handed over
    assert cc.settled(PERM, SHAPE, x.double()) == (mark != "slower")


def test_faster_compares_the_fastest_runs():
    x = torch.zeros(4)
    assert cc.faster(lambda t: None, lambda t: sum(range(20000)), x)
    assert not cc.faster(lambda t: sum(range(20000)), lambda t: None, x)


def test_keys_follow_the_thread_count(fake):
    f, x = _copy(), _x()
    threads = torch.get_num_threads()
    other = 2 if threads == 1 else 1
    f(x)
    assert cc.settle(60)
    try:
        torch.set_num_threads(other)
        assert cc.state(PERM, SHAPE, x.dtype) is None
        compiles = fake["compiles"]
        f(x)
        assert cc.settle(60) and fake["compiles"] == compiles + 1 and fake["threads"] == other
        assert cc.state(PERM, SHAPE, x.dtype) == "ready"
    finally:
        torch.set_num_threads(threads)
    assert cc.state(PERM, SHAPE, x.dtype, threads) == "ready"


@pytest.mark.parametrize("case", ["forward_ad", "func", "conj", "complex", "small", "strided", "make_fx"])
def test_only_plain_admitted_copies_are_handed_over(fake, monkeypatch, case):
    f, x = _copy(), _x()
    if case == "forward_ad":
        import torch.autograd.forward_ad as fwad
        with fwad.dual_level():
            got = fwad.unpack_dual(f(fwad.make_dual(x, torch.ones_like(x)))).tangent
        assert torch.equal(got, torch.ones(SHAPE).permute(PERM)) and cc.settle(60) and fake["compiles"] == 0
        return
    if case == "func":
        got = torch.func.grad(lambda t: (f(t) * torch.arange(t.numel()).view(SHAPE).permute(PERM)).sum())(x)
        assert torch.equal(got, torch.arange(x.numel(), dtype=x.dtype).view(SHAPE))
        assert cc.settle(60) and fake["compiles"] == 0
        return
    if case == "conj":
        x = torch.randn(SHAPE, dtype=torch.complex64).conj()
    elif case == "complex":
        x = torch.randn(SHAPE, dtype=torch.complex64)
    elif case == "small":
        monkeypatch.setattr(cc, "MIN_BYTES", x.numel() * 4 + 1)
    elif case == "strided":
        x = torch.randn(SHAPE[::-1]).permute(3, 2, 1, 0)
    want = x.detach().resolve_conj().permute(PERM).contiguous()
    got = make_fx(f)(x)(x) if case == "make_fx" else f(x)      # (the graph make_fx records, run)
    assert torch.equal(got.detach().resolve_conj(), want)
    assert cc.settle(60) and fake["compiles"] == 0


def test_a_copy_autograd_records_runs_compiled_and_differentiates_as_torch_does(fake):
    """A training step's copy: the compiled copy runs in the forward, and the gradient is
    the incoming one permuted back, twice differentiable, as torch's permute and copy."""
    f, x = _copy(), _x().requires_grad_(True)
    f(x)
    assert cc.settle(60) and cc.state(PERM, SHAPE, x.dtype) == "ready"
    runs = fake["runs"]
    y = f(x)
    assert fake["runs"] == runs + 1 and y.is_contiguous() and y.grad_fn is not None
    assert torch.equal(y, x.detach().permute(PERM).contiguous())
    g = torch.randn(y.shape, dtype=torch.float64).float().requires_grad_(True)
    w = x.detach().clone().requires_grad_(True)
    want = w.permute(PERM).contiguous()
    (got,) = torch.autograd.grad(y, x, g, create_graph=True)
    (ref,) = torch.autograd.grad(want, w, g, create_graph=True)
    assert torch.equal(got, ref)
    (gg,) = torch.autograd.grad((got * got).sum(), g)       # (through the gradient: twice)
    (rr,) = torch.autograd.grad((ref * ref).sum(), g)
    assert torch.equal(gg, rr)


def test_a_copy_that_moves_only_size_one_indices_stays_a_view(fake):
    x = _x((6, 5, 4, 1))
    f = _copy(x.shape, "abcd", "adbc")
    assert not f.compiles and f(x).data_ptr() == x.data_ptr()
    assert cc.settle(60) and fake["compiles"] == 0
    assert _copy((6, 5, 1, 3), "abcd", "adbc").compiles and not _copy((1, 1, 1, 1), "abcd", "dcba").compiles


def test_a_size_zero_copy_never_compiles(fake):
    x = torch.zeros((6, 0, 4, 3))
    got = _copy(x.shape)(x)
    assert got.shape == (3, 4, 6, 0) and cc.settle(60) and fake["compiles"] == 0


def test_a_child_process_starts_with_no_compiled_copy(fake):
    _copy()(_x())
    assert cc.settle(60) and cc.state(PERM, SHAPE, torch.float32) == "ready"
    cc._after_fork()
    assert cc.state(PERM, SHAPE, torch.float32) is None


# ------------------------------------------------------------------------------ inductor's copies

EXITS = r"""
import time, torch
from einc.runtime.torch_executor import compiled_copy as cc
from einc.runtime.torch_executor.permute_copy import permuted_copy
cc.MIN_BYTES = 0
permuted_copy(list("abc"), list("cba"), dict(a=64, b=32, c=16))(torch.randn(64, 32, 16))
time.sleep(0.5)
assert cc._server is not None or cc.state((2, 1, 0), (64, 32, 16), torch.float32) != cc.PENDING
print("exiting", flush=True)
"""


def test_an_exit_during_a_compile_kills_it_and_exits_cleanly(monkeypatch):
    """A compile still running at exit is killed: the process exits at once, with status 0
    (a thread stopped inside torch's C++ code at exit would abort it)."""
    env = dict(os.environ, EINC_COPY_COMPILE="on", PYTHONPATH=str(Path(einc.__file__).parent.parent))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", EXITS], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "exiting" in out.stdout, out.stderr[-2000:]
    assert time.perf_counter() - t0 < 60


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="niceness is POSIX's")
def test_the_compiling_process_runs_nicer_than_the_program(monkeypatch):
    """The compiling process (and the compilers it starts, which inherit it) runs NICE
    steps nicer than this one: where the CPUs are busy, the program's calls come first."""
    cc._stop()
    server = cc._serving()
    try:
        want, deadline = min(os.getpriority(os.PRIO_PROCESS, 0) + cc.NICE, 19), time.monotonic() + 60
        while os.getpriority(os.PRIO_PROCESS, server.pid) != want and time.monotonic() < deadline:
            time.sleep(0.01)    # (it sets its niceness first thing, before importing torch)
        assert os.getpriority(os.PRIO_PROCESS, server.pid) == want > os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        cc._stop()


@pytest.mark.slow
def test_an_inductor_copy_for_two_threads_keeps_every_bit(compiling, monkeypatch):
    monkeypatch.setattr(cc, "faster", lambda fn, own, x: True)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        f, x = _copy((64, 48, 40, 8), "abcd", "dcab"), cc.stand_in((64, 48, 40, 8), torch.float32)
        f(x)
        assert cc.settle(600) and cc.state((3, 2, 0, 1), (64, 48, 40, 8), torch.float32) == "ready"
        assert cc.same_bits(f(x), x.permute(3, 2, 0, 1).contiguous())
    finally:
        torch.set_num_threads(threads)

@pytest.mark.slow
@pytest.mark.parametrize("dtype", sorted(cc.ADMITTED, key=str), ids=str)
def test_inductor_copies_keep_every_bit(compiling, monkeypatch, dtype):
    monkeypatch.setattr(cc, "faster", lambda fn, own, x: True)     # (kept whatever its time)
    f = _copy((9, 1, 7, 5), "abcd", "dcab")
    x = cc.stand_in((9, 1, 7, 5), dtype)
    if dtype.is_floating_point:
        specials = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf"),
                                 torch.finfo(dtype).tiny / 4], dtype=dtype)
        x.view(-1)[:5] = specials
        x.view(-1)[5:8] = x.view(-1)[5:8].view(torch.int8 if dtype.itemsize == 1 else
                                                 {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
                                                 ).bitwise_xor(1).view(dtype)      # NaN payloads and others
    f(x)
    assert cc.settle(600)
    if not (shutil.which("g++") or shutil.which("c++")):
        pytest.skip("no C++ compiler")
    assert cc.state((3, 2, 0, 1), (9, 1, 7, 5), dtype) == "ready"
    for y in (x, torch.cat([x.view(-1)[:1], x.view(-1)])[1:].view(x.shape)):      # (and from an offset)
        assert cc.same_bits(f(y), y.permute(3, 2, 0, 1).contiguous())


@pytest.mark.slow
def test_einc_results_through_compiled_copies_match_torch(compiling, monkeypatch):
    monkeypatch.setattr(cc, "faster", lambda fn, own, x: True)
    runs, compile_copy = [], cc.compile_copy

    def counted(perm, shape, dtype, threads):
        fn = compile_copy(perm, shape, dtype, threads)
        return lambda x: runs.append(perm) or fn(x)
    monkeypatch.setattr(cc, "compile_copy", counted)
    eq = "dega,gfbc->abcdef"
    ops = [torch.randn(s) for s in [(16, 12, 8, 10), (8, 8, 9, 6)]]     # (over 2**20 multiply-adds: planned)
    want = torch.einsum(eq, *[o.double() for o in ops])
    first = einc.einsum(eq, *ops)
    assert cc.settle(600) and runs              # (run once in the background, against einc's copy)
    ran = len(runs)
    again = einc.einsum(eq, *ops)
    assert len(runs) > ran                      # (the compiled copies ran in the call)
    assert torch.equal(first, again) and again.is_contiguous()
    assert torch.allclose(again.double(), want, rtol=1e-5, atol=1e-5 * math.sqrt(8))
    leaves = [o.clone().requires_grad_(True) for o in ops]      # (a training step: the copy autograd records)
    g = torch.randn(want.shape)
    for _ in range(cc.CALLS):
        einc.einsum(eq, *leaves)
    assert cc.settle(600)
    ran = len(runs)
    grads = torch.autograd.grad(einc.einsum(eq, *leaves), leaves, g)
    assert len(runs) > ran
    doubles = [o.double().requires_grad_(True) for o in ops]
    wants = torch.autograd.grad(torch.einsum(eq, *doubles), doubles, g.double())
    for got, ref in zip(grads, wants):
        assert torch.allclose(got.double(), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_the_compiling_process_reports_errors_serves_on_and_ends_idle(monkeypatch):
    monkeypatch.setattr(cc, "IDLE_S", 2)
    # (no nicer than the tests: on CPUs busy with other work a process 10 steps nicer gets
    # about a ninth of the CPU a process of the tests' niceness gets (the kernel's weights,
    # 110 against 1024), and its exit, seconds of CPU, outlasts the bound below)
    monkeypatch.setattr(cc, "NICE", 0)
    cc._stop()                                  # (a process started with the shorter idle time)
    with pytest.raises(RuntimeError, match="compile failed"):
        cc.compile_copy((0, 0), (4, 4), torch.float32, 1)     # not a permutation
    x = cc.stand_in((8, 6, 4), torch.float32)
    assert cc.same_bits(cc.compile_copy((2, 0, 1), (8, 6, 4), torch.float32, 1)(x), x.permute(2, 0, 1).contiguous())
    server = cc._server
    # Its exit (torch's shutdown) can take seconds on a loaded machine; well under the
    # default IDLE_S, so a process that ignored the shorter idle time still fails here.
    assert server.wait(timeout=cc.IDLE_S + 15) == 0     # ended, idle
    assert cc.same_bits(cc.compile_copy((1, 2, 0), (8, 6, 4), torch.float32, 1)(x), x.permute(1, 2, 0).contiguous())
    assert cc._server is not server
    assert server.stdin.closed and server.stdout.closed     # (its pipes closed, not left to the collector)
    cc._stop()


def test_a_copy_too_small_for_any_admitted_dtype_is_spared_the_checks(compiling, monkeypatch):
    """``_Copy`` decides once, by its element count, whether a compiled copy could ever
    run (at the widest admitted dtype, 8 bytes), so that a small copy pays nothing for them."""
    monkeypatch.setattr(cc, "MIN_BYTES", 8 * math.prod(SHAPE) + 8)
    assert not _copy().compiles
    monkeypatch.setattr(cc, "MIN_BYTES", 8 * math.prod(SHAPE))
    assert _copy().compiles
