"""A cached call's work around its ops: the plan cache's key built once a call, the order
each operand is read in (part of that key) asked only where it changes a step, and a size
class's one op called without its entry's function around it; and ``einsum``'s own work on
a call without keywords."""

import dis
import sys

import pytest
import torch

import einc
from einc.errors import ArgumentError, OperandTypeError
from einc.planner.equation import parse
from einc.planner.options import DEFAULT
from einc.runtime import engine
from einc.runtime import torch_executor as tx
from einc.runtime.torch_executor import ttgt


def _ops(fn, overloads=False):
    """``(result, the aten ops fn() runs, by name)``; with ``overloads``, named with their
    overload (``squeeze.dim``)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            names.append(func.__name__ if overloads else func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))
    names = []
    with Log():
        out = fn()
    return out, names


def _window(rows, cols, width, dtype=torch.float64):
    """``(rows, cols, 1)`` cut from a ``(rows, width)`` buffer, as e3nn's tensor products cut
    their inputs: strides ``(width, 1, 1)``, not contiguous, its size-1 dimension innermost
    where memory order would put it outermost."""
    return torch.randn(rows, width, dtype=dtype)[:, :cols].reshape(rows, cols, 1)


def test_size_one_dimensions_out_of_memory_order_leave_an_operand_read_as_it_is(monkeypatch):
    """A size-1 dimension holds nothing and the copy-cost model moves none: where it alone
    stands out of memory order, the operand is read as it is, with no pair of permutes
    (e3nn's ``edb,eca->ecdab`` on a (256, 16, 1) window ran two, a cost torch.einsum does
    not pay).  An operand whose larger dimensions are out of order is
    still read in that order."""
    monkeypatch.setattr(ttgt, "SMALL", 1 << 12)
    b = _window(256, 16, 144)
    assert b.stride() == (144, 1, 1) and not b.is_contiguous() and b.numel() >= ttgt.SMALL
    assert tx.memory_orders([b]) is None
    assert tx.memory_orders([b.permute(1, 0, 2)]) == ((2, 1, 0),)
    einc.cache_clear()
    for a in (_window(256, 1, 9), _window(256, 3, 9).transpose(1, 2)):     # (256, 1, 1) and (256, 1, 3)
        a = a.requires_grad_()
        w = b.detach().requires_grad_()
        einc.einsum("edb,eca->ecdab", a, w)
        out, ops = _ops(lambda: einc.einsum("edb,eca->ecdab", a, w))
        assert "permute" not in ops, ops
        want = torch.einsum("edb,eca->ecdab", a, w)
        torch.testing.assert_close(out, want)
        g = torch.randn_like(want)
        torch.testing.assert_close(torch.autograd.grad(out, (a, w), g), torch.autograd.grad(want, (a, w), g))
    # a contraction over such an operand, and over its contiguous copy: neither copied
    x, m = _window(64, 128, 130), torch.randn(128, 8, dtype=torch.float64)
    for v in (x, x.contiguous()):
        out, ops = _ops(lambda: einc.einsum("bkz,kj->bjz", v, m))
        assert "clone" not in ops and "copy_" not in ops, ops
        torch.testing.assert_close(out, torch.einsum("bkz,kj->bjz", v, m))


@pytest.mark.parametrize("door", ["gradient", "scaled"])
def test_a_cached_call_builds_its_key_once(door, monkeypatch):
    """The key of a cached call that takes a gradient (or a scale) is built once, as one hit:
    the order of a permuted operand, part of the key, is read once, not for a peek at torch's op
    and again for the entry's lookup."""
    monkeypatch.setattr(ttgt, "SMALL", 1 << 12)
    x = torch.randn(64, 128, dtype=torch.float64).T         # read in its memory order
    w = torch.randn(64, 8, dtype=torch.float64, requires_grad=door == "gradient")

    def call():
        if door == "scaled":
            return engine.run_scaled(parse("ij,jk->ik"), (x, w), DEFAULT, 2.0)
        return einc.einsum("ij,jk->ik", x, w)
    einc.cache_clear()
    call()
    real, asked = engine.read_order, []
    monkeypatch.setattr(engine, "read_order", lambda t: asked.append(t.shape) or real(t))
    hits = einc.cache_info().plans.hits
    out = call()
    assert asked == [x.shape]
    assert einc.cache_info().plans.hits == hits + 1
    want = torch.einsum("ij,jk->ik", x, w) * (2.0 if door == "scaled" else 1.0)
    torch.testing.assert_close(out, want)
    if door == "gradient":
        torch.testing.assert_close(torch.autograd.grad(out.sum(), w), torch.autograd.grad(want.sum(), w))


def test_one_size_one_dimension_is_squeezed_as_one_dimension():
    """An operand's one size-1 dimension summed alone is dropped by ``squeeze.dim``, not by
    ``squeeze.dims`` with a list of one, whose list costs about as much again as the op
    (mace's and e3nn's ``cab,cb->ca``, ``dbc,dba->dca``); two such dimensions take one
    ``squeeze.dims``.  Planned per shape and by size class, each as torch.einsum answers."""
    for mode in ("plan", "class"):
        x, y = torch.randn(388, 16, 1, dtype=torch.float64), torch.randn(388, 9, dtype=torch.float64)[:, :1]
        z = torch.randn(388, 1, 16, 1, dtype=torch.float64)
        for eq, a, b, want in [("cab,cb->ca", x, y, ["squeeze.dim", "squeeze.dim"]),
                               ("cdab,cb->ca", z, y, ["squeeze.dims", "squeeze.dim"])]:
            with pytest.MonkeyPatch.context() as m:
                m.setenv("EINC_NEW_SHAPES", mode)
                einc.cache_clear()
                for _ in range(20):     # past a class's first calls, run op by op
                    einc.einsum(eq, a, b)
                out, ops = _ops(lambda: einc.einsum(eq, a, b), overloads=True)
            assert [op for op in ops if op.startswith("squeeze")] == want, (mode, eq, ops)
            torch.testing.assert_close(out, torch.einsum(eq, a, b))


def _entry_of(eq, *operands):
    """The plan cache's entry of a call (made by calling it)."""
    einc.einsum(eq, *operands)
    return engine.entry(parse(eq), operands, DEFAULT)


_MM, _BMM = ("ij,jk->ik", [0, 1], [1, 2], [0, 2]), ("bij,bjk->bik", [0, 1, 2], [0, 2, 3], [0, 1, 3])
_ONE_OP = [     # (equation and sublists, operands): a class whose step is one op on its operands as they lie
    (_MM, lambda d: (torch.randn(4, 4, dtype=d), torch.randn(4, 4, dtype=d))),
    (_MM, lambda d: (torch.randn(3, 5, dtype=d), torch.randn(5, 1, dtype=d))),
    (_MM, lambda d: (torch.randn(5, 3, dtype=d).T, torch.randn(5, 2, dtype=d))),    # a transposed operand
    (_BMM, lambda d: (torch.randn(3, 4, 5, dtype=d), torch.randn(3, 5, 6, dtype=d))),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize("case", range(len(_ONE_OP)))
def test_a_cached_one_op_call_runs_its_op_without_the_entry_s_function(case, dtype, monkeypatch):
    """A size class whose step is one torch op on the two operands as they come (``mm`` of a
    matrix product read as it lies) is run on a hit by calling that op, not through the
    entry's ``run`` around it (a Python frame, a third of the rest of a 4x4 call); the
    answer, the hit count and every other door (a scale, a gradient) as before."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    einc.cache_clear()
    (eq, sa, sb, so), make = _ONE_OP[case]
    a, b = make(dtype)
    entry = _entry_of(eq, a, b)
    assert entry.direct in (torch.mm, torch.bmm)
    monkeypatch.setattr(entry, "run", None)         # a hit that reached it would raise
    hits = einc.cache_info().plans.hits
    for out in (einc.einsum(eq, a, b), einc.einsum(eq, [a, b]), einc.einsum(a, sa, b, sb, so)):
        torch.testing.assert_close(out, torch.einsum(eq, a, b))
        assert out.is_contiguous() and out.dtype == dtype
    assert einc.cache_info().plans.hits == hits + 3
    monkeypatch.undo()
    x, w = a.clone().requires_grad_(), b.clone().requires_grad_()
    out = einc.einsum(eq, x, w)
    g = torch.randn_like(out)
    torch.testing.assert_close(torch.autograd.grad(out, (x, w), g),
                               torch.autograd.grad(torch.einsum(eq, x, w), (x, w), g))
    with torch.no_grad():
        assert not einc.einsum(eq, x, w).requires_grad
    with torch.inference_mode():
        torch.testing.assert_close(einc.einsum(eq, a, b), torch.einsum(eq, a, b))
    torch.testing.assert_close(engine.run_scaled(parse(eq), (a, b), DEFAULT, 2.0), torch.einsum(eq, a, b) * 2)


@pytest.mark.parametrize("eq, shapes", [
    ("ij,kj->ik", [(4, 4), (4, 4)]),                # a permute first
    ("ij,jk->ki", [(4, 4), (4, 4)]),                # a permute and a copy after
    ("bhid,bhjd->bhij", [(1, 2, 32, 16), (1, 2, 32, 16)]),
    ("ij,jk->ik", [(1, 4), (4, 1)]),                # a multiply and sum
    ("ij,j->i", [(4, 4), (4,)]),
    ("ij->j", [(4, 4)]),
])
def test_an_entry_that_does_more_than_one_op_runs_through_its_function(eq, shapes, monkeypatch):
    """Where the step views, copies or casts around its op, or the op takes the operands in
    another order, there is no op to call directly: the entry's ``run`` answers."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    einc.cache_clear()
    ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
    entry = _entry_of(eq, *ops)
    assert entry.direct is None
    calls = []
    real = entry.run
    monkeypatch.setattr(entry, "run", lambda o, scale=None: calls.append(1) or real(o, scale))
    torch.testing.assert_close(einc.einsum(eq, *ops), torch.einsum(eq, *ops))
    assert calls == [1]



def _instructions(fn, code):
    """The instructions of ``code`` that ``fn()`` runs, in order."""
    ran, old = [], sys.gettrace()

    def trace(frame, event, arg):
        frame.f_trace_opcodes = True
        if event == "opcode" and frame.f_code is code:
            ran.append(frame.f_lasti)
        return trace
    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(old)
    at = {i.offset: i for i in dis.get_instructions(code)}
    return [at[k] for k in ran]


def test_a_call_without_keywords_makes_no_cell_and_reads_no_option():
    """``einsum``'s own work on a cached call without keywords: no cell made for its keyword
    dict (as a comprehension over the dict would make on every call) and no option read one by
    one (none was passed: one identity test stands for the four)."""
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    einc.einsum("ij,jk->ik", a, b)
    code = einc.einsum.__code__
    assert code.co_cellvars == ()
    ran = _instructions(lambda: einc.einsum("ij,jk->ik", a, b), code)
    read = [i.argrepr for i in ran if i.opname.startswith("LOAD_FAST")]
    assert read and not [r for r in read if any(o in r for o in ("optimize", "memory_limit", "select", "layout"))]
    out = einc.einsum("ij,jk->ik", a, b, optimize="greedy", layout="any", memory_limit=None)    # options still read
    torch.testing.assert_close(out, a @ b)


def test_a_cached_two_operand_call_calls_only_its_reads_its_lookup_and_its_op():
    """The engine's hit of a two-operand call calls no builtin but the operands' contiguity
    reads, the plan cache's lookup and the op: the count of operands is not asked (two are
    unpacked; any other count fails to, and takes ``_key``), and other counts and operands
    that are not tensors answer and raise as before."""
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    einc.einsum("ij,jk->ik", a, b)
    calls, code = [], engine.run.__code__

    def profile(frame, event, arg):
        if event == "c_call" and frame.f_code is code:
            calls.append(arg.__name__)
    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        einc.einsum("ij,jk->ik", a, b)
    finally:
        sys.setprofile(old)
    assert calls == ["is_contiguous", "is_contiguous", "get", "mm"]
    for eq, ops in [("ij->ji", (a,)), ("ij,jk,kl->il", (a, b, a)), ("ij,jk->ik", [a, b])]:
        torch.testing.assert_close(einc.einsum(eq, *ops) if ops.__class__ is tuple else einc.einsum(eq, ops),
                                   torch.einsum(eq, *ops))
    for bad in [(a, 2.0), (a, None, b)]:
        with pytest.raises(OperandTypeError) as raised:
            engine.run(parse("ij,jk->ik" if len(bad) == 2 else "ij,jk,kl->il"), bad, DEFAULT)
        assert "element 1" in str(raised.value)
    with pytest.raises(ArgumentError):
        engine.run(parse("ij->ij"), (), DEFAULT)


def test_a_cached_call_of_other_counts_raises_nothing_in_the_engine():
    """A hit of a call of one or three operands builds its key with ``_key`` and does not
    try to unpack two operands first: the ValueError that raises, caught, cost such a
    cached call microseconds; the answers are as before."""
    a = torch.randn(4, 4)
    calls = [("ij,jk,kl->il", (a, a, a)), ("ij,jk->ik", (a, a)), ("ij->ji", (a,))]
    for eq, ops in calls:
        einc.einsum(eq, *ops)
    raised, ran, code = [], [], engine.run.__code__

    def local(frame, event, arg):
        if event == "exception":
            raised.append(arg[0])
        return local

    def trace(frame, event, arg):
        if frame.f_code is code:
            ran.append(frame.f_locals["eq"].text)
            return local
        return None
    old = sys.gettrace()
    sys.settrace(trace)
    try:
        out = [einc.einsum(eq, *ops) for eq, ops in calls]
    finally:
        sys.settrace(old)
    assert "ij,jk,kl->il" in ran and raised == []
    for (eq, ops), got in zip(calls, out):
        torch.testing.assert_close(got, torch.einsum(eq, *ops))
