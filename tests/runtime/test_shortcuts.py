"""The executor's newest shortcuts, tested as users call einc: a plan's run by a loop until
its ``CALLS_BEFORE_CODE``-th call then compiled (runtime/program.py, a size class's step in
torch_executor/classed.py).  It promises the same answer for every call and door."""

import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import einc
from einc.planner.equation import parse
from einc.planner.options import DEFAULT
from einc.runtime import dispatch, engine, program
from einc.runtime.torch_executor import classed, ttgt


@pytest.fixture(autouse=True)
def _fresh():
    einc.cache_clear()
    ttgt.cache_clear()
    yield
    einc.cache_clear()


class _Ops(TorchDispatchMode):
    """The aten ops called under it, in order."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _oracle(eq, ops):
    wide = [x.to(torch.complex128 if x.dtype.is_complex else torch.float64) for x in ops]
    return torch.einsum(eq, *wide)


CHAIN = "ab,bc,cd,de->ae"


def _chain(dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 6), (6, 7), (7, 1), (1, 3)]
    return [torch.randn(s, generator=g).to(dtype).requires_grad_(grad) for s in shapes]


def _calls(run, count):
    """``run()``'s results and aten ops, call by call."""
    results, ops = [], []
    for _ in range(count):
        with _Ops() as seen:
            results.append(run())
        ops.append(seen.ops)
    return results, ops


def _sublist(eq, ops):
    """``eq``'s sublist form (the other calling convention) with ``ops``."""
    ins, out = eq.split("->")
    args = []
    for term, x in zip(ins.split(","), ops):
        args += [x, [ord(c) - ord("a") for c in term]]
    return args + [[ord(c) - ord("a") for c in out]]


@pytest.mark.parametrize("new_shapes", ["plan", "class"])
@pytest.mark.parametrize("how", ["string", "sublist", "scale", "no_grad", "inference"])
def test_loop_and_compiled_runs_call_the_same_aten_ops_with_the_same_bits(new_shapes, how, monkeypatch):
    """Every call, before and after the switch to the compiled function, runs the same aten
    ops and gives the same bits, whichever calling convention or grad mode calls it."""
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    ops = _chain()
    entry = engine.entry(parse(CHAIN), ops, DEFAULT)
    calls = {
        "string": lambda: einc.einsum(CHAIN, *ops),
        "sublist": lambda: einc.einsum(*_sublist(CHAIN, ops)),
        "scale": lambda: engine.run_scaled(parse(CHAIN), ops, DEFAULT, 0.5),
        "no_grad": lambda: torch.no_grad()(lambda: einc.einsum(CHAIN, *ops))(),
        "inference": lambda: torch.inference_mode()(lambda: einc.einsum(CHAIN, *ops))(),
    }
    first = entry.run
    results, seen = _calls(calls[how], program.CALLS_BEFORE_CODE + 3)
    assert entry.run is not first, "the entry's run was not swapped for the compiled one"
    assert all(s == seen[0] for s in seen), [i for i, s in enumerate(seen) if s != seen[0]]
    assert all(torch.equal(r, results[0]) for r in results)
    want = _oracle(CHAIN, ops) * (0.5 if how == "scale" else 1)
    torch.testing.assert_close(results[0].double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("new_shapes", ["plan", "class"])
def test_loop_and_compiled_runs_give_the_same_gradients_and_backward_ops(new_shapes, monkeypatch):
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    ops = _chain(torch.float64, grad=True)
    weight = torch.rand(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def call():
        out = einc.einsum(CHAIN, *ops)
        return torch.autograd.grad((out * weight).sum(), ops)
    call()      # (its first call builds the entry and the backward's: torch is asked for dtypes there)
    results, seen = _calls(call, program.CALLS_BEFORE_CODE + 3)
    assert all(s == seen[0] for s in seen), [i for i, s in enumerate(seen) if s != seen[0]]
    assert all(all(map(torch.equal, r, results[0])) for r in results)
    wide = [x.detach().clone().requires_grad_() for x in ops]
    want = torch.autograd.grad((torch.einsum(CHAIN, *wide) * weight).sum(), wide)
    for g, w in zip(results[0], want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


TWO_KINDS = [(CHAIN, [(5, 6), (6, 7), (7, 1), (1, 3)]), ("bik,bkj->bji", [(3, 5, 4), (3, 4, 6)])]  # (a class's: 1 step)


@pytest.mark.parametrize("new_shapes", ["plan", "class"])
@pytest.mark.parametrize("eq,shapes", TWO_KINDS)
def test_two_threads_calling_a_new_plan_around_its_switch_agree(new_shapes, eq, shapes, monkeypatch):
    """Two threads call one plan from its 10th call to past its switch at once: every
    answer has the first call's bits, and the entry ends up running the compiled code."""
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    g = torch.Generator().manual_seed(2)
    ops = [torch.randn(s, generator=g) for s in shapes]
    entry = engine.entry(parse(eq), ops, DEFAULT)
    first = entry.run
    want = einc.einsum(eq, *ops)
    for _ in range(8):
        einc.einsum(eq, *ops)
    start, got, errors = threading.Barrier(2), [[], []], []

    def work(t):
        try:
            start.wait()
            for _ in range(2 * program.CALLS_BEFORE_CODE):
                got[t].append(einc.einsum(eq, *ops))
        except Exception as e:      # noqa: BLE001 - reported below, with its thread's answers
            errors.append(e)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(torch.equal(r, want) for r in got[0] + got[1])
    assert entry.run is not first
    assert einc.einsum(eq, *ops).data_ptr() != want.data_ptr() and torch.equal(einc.einsum(eq, *ops), want)


@pytest.mark.parametrize("eq,shapes", TWO_KINDS)
@pytest.mark.parametrize("new_shapes", ["plan", "class"])
def test_a_run_wrapped_in_a_cast_keeps_its_wrapper_and_bits_across_the_switch(new_shapes, eq, shapes, monkeypatch):
    """Where the entry's run is wrapped (a cast to torch's dtype, as dispatch wraps it where
    the executor's differs), the switch to compiled code happens underneath the wrapper,
    never in place of it: every call is cast, with the same bits and ops."""
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    g = torch.Generator().manual_seed(3)
    ops = [torch.randn(s, generator=g) for s in shapes]
    entry = engine.entry(parse(eq), ops, DEFAULT)
    wrapped = entry.run = dispatch._cast(entry.run, torch.float64)
    results, seen = _calls(lambda: einc.einsum(eq, *ops), program.CALLS_BEFORE_CODE + 3)
    assert entry.run is wrapped
    assert all(r.dtype == torch.float64 for r in results)
    assert all(s == seen[0] for s in seen) and all(torch.equal(r, results[0]) for r in results)
    torch.testing.assert_close(results[0], _oracle(eq, ops), rtol=1e-5, atol=1e-5)


def test_a_class_step_s_interpreted_and_compiled_runs_cast_and_scale_alike(monkeypatch):
    """A size class's one-step run of float16 operands (its result cast as torch's) with
    and without a scale, interpreted and compiled: the same bits and ops."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    g = torch.Generator().manual_seed(4)
    ops = [torch.randn(s, generator=g).half() for s in [(3, 5, 4), (3, 4, 6)]]
    eq = "bik,bkj->bji"
    entry = engine.entry(parse(eq), ops, DEFAULT)
    assert isinstance(entry.run, classed._Interpreted)
    results, seen = _calls(lambda: (entry.run(ops), entry.run(ops, 0.25)), classed.CALLS_BEFORE_CODE + 2)
    assert not isinstance(entry.run, classed._Interpreted)
    assert all(s == seen[0] for s in seen)
    assert all(torch.equal(r[0], results[0][0]) and torch.equal(r[1], results[0][1]) for r in results)
    assert results[0][0].dtype == torch.float16
    torch.testing.assert_close(results[0][0].double(), _oracle(eq, ops), rtol=2e-3, atol=2e-3)
