"""The differential fuzzer: random einsum calls, every executor, against torch.einsum.

Each test draws :class:`fuzz.Case` s (see tests/support/fuzz.py for what they cover) and runs
them through one way of calling einc: the torch executor (``einc.einsum`` on CPU
tensors; also with each contraction step in a layout drawn among those its copy-cost
model weighs, not only the cheapest), the generated Triton kernels under Triton's interpreter, a
``contract_expression``, autograd (gradients against torch's on float64), and the
compiled op (``torch.compile(fullgraph=True)``), and ``vmap``.  Where torch.einsum raises, einc
must raise the same built-in type; inputs must be unchanged either way.

Quick and deterministic by default; the long run before a release is
``EINC_FUZZ_EXAMPLES=20000 python -m pytest tests/fuzz/test_fuzz.py --hypothesis-show-statistics``.
"""

import contextlib
import math
import os
import warnings

import fuzz
import pytest
import torch
from hypothesis import assume, event, given, note
from hypothesis import strategies as st

import einc
from einc.errors import UnsupportedDtypeError


@pytest.fixture(autouse=True)
def _plan_every_shape(monkeypatch):
    """Every case runs einc's own plans, whatever the environment says: under
    EINC_NEW_SHAPES=torch a small call would run torch's op (runtime/admission.py), which
    needs no fuzzing.  The default's (``class``: a small call runs its size class's plan,
    the path most small calls take), or each shape's own with ``EINC_FUZZ_NEW_SHAPES=plan``."""
    monkeypatch.setenv("EINC_NEW_SHAPES", os.environ.get("EINC_FUZZ_NEW_SHAPES", "class"))


def _torch_answer(case, ops):
    """torch.einsum's result on the operands as they are, or the exception it raises."""
    try:
        return torch.einsum(case.oracle_equation, *ops), None
    except Exception as e:      # noqa: BLE001
        return None, e


def _differential(case, ops, run):
    """``run(case, ops)`` against torch.einsum: same error type, or the oracle's answer."""
    note(f"{case.equation}  shapes={case.shapes}  dtype={case.dtype}  layouts={case.layouts}  "
         f"oracle: torch.einsum({case.oracle_equation!r}, ...)")
    before = [o.clone() for o in ops]
    expected, error = _torch_answer(case, ops)
    if error is not None and fuzz.trips_on_int64_promotion(error):
        # torch.einsum trips over its own int64 promotion of a summed integer operand;
        # einc contracts in the wider dtype instead.
        event("torch trips on its int64 promotion")
        try:
            out = run(case, ops)
        except UnsupportedDtypeError:
            # bool operands: which of torch's two refusals comes first (its promotion, or no bool
            # product) follows the sizes, and einc asks at stand-in sizes, as the compiled op must:
            # both refuse the call (bench/measured/fuzz-runs.md, the second new seed)
            assert case.dtype == torch.bool, case.dtype
            event("bool: both refuse")
        else:
            fuzz.check_result(case, out, ops)
    elif error is not None:
        event(f"torch raises {type(error).__name__}")
        with pytest.raises(type(error)):
            run(case, ops)
    else:
        event(f"{len(ops)} operand(s), {'sublist' if case.sublist else 'string'}")
        fuzz.check_result(case, run(case, ops), ops, expected.dtype)
    for o, b in zip(ops, before):
        assert torch.equal(o, b), "an input was changed"


def _einsum(case, ops):
    return einc.einsum(*case.args(ops))


def _expression(case, ops):
    if case.sublist:
        interleaved = []
        for shape, sub in zip(case.shapes, case.args(ops)[1::2]):
            interleaved += [shape, sub]
        if case.output is not None:
            interleaved.append(case.args(ops)[-1])
        expr = einc.contract_expression(*interleaved)
    else:
        expr = einc.contract_expression(case.args(ops)[0], *case.shapes)
    return expr(*ops)


# ---------------------------------------------------------------- the torch executor

@fuzz.profile(quick=1000, share=1.0)
@given(case=fuzz.cases(), seed=st.integers(0, 2**16))
def test_torch_executor(case, seed):
    _differential(case, fuzz.operands(case, seed), _einsum)


@fuzz.profile(quick=1000, share=0.25)
@given(case=fuzz.cases(max_operands=4), seed=st.integers(0, 2**16), choice=st.integers(0, 2**16))
def test_torch_executor_in_every_layout(case, seed, choice):
    """Each contraction step in a layout drawn among those the copy-cost model weighs
    (runtime/torch_executor/ttgt.py: which operand is left, which indices are batch, their order),
    not only the cheapest; a last product whose result is permuted made in chunks of a
    drawn size (runtime/torch_executor/chunked.py), as only large ones are."""
    from einc.runtime.torch_executor import chunked, ttgt
    real, drawn = ttgt.pick, []

    def pick(found):
        drawn.append(len(found))
        return found[choice % len(found)]
    einc.cache_clear()
    ttgt.pick, small, ttgt.SMALL = pick, ttgt.SMALL, 0        # every layout, as large steps weigh them
    least, chunk = chunked.MIN_BYTES, chunked.CHUNK_BYTES
    chunked.MIN_BYTES, chunked.CHUNK_BYTES = 0, 2 << (choice % 10)
    try:
        _differential(case, fuzz.operands(case, seed), _einsum)
    finally:
        ttgt.pick, ttgt.SMALL = real, small
        chunked.MIN_BYTES, chunked.CHUNK_BYTES = least, chunk
        einc.cache_clear()
    if drawn:
        event(f"a layout among {min(drawn)}-{max(drawn)}")


def _in_drawn_layouts(choice, check):
    """``check()`` with each contraction step in a layout drawn among those the copy-cost
    model weighs (every one, as large steps weigh them), and the training layout where it
    differs; the numbers of layouts drawn among."""
    from einc.runtime.torch_executor import ttgt
    real, drawn = ttgt.pick, []

    def pick(found):
        drawn.append(len(found))
        return found[choice % len(found)]
    einc.cache_clear()
    ttgt.pick, small, ttgt.SMALL = pick, ttgt.SMALL, 0
    try:
        check()
    finally:
        ttgt.pick, ttgt.SMALL = real, small
        einc.cache_clear()
    return drawn


@fuzz.profile(quick=300, share=0.1)
@given(case=fuzz.broadcast_cases(), seed=st.integers(0, 2**16), choice=st.integers(0, 2**16))
def test_broadcast_operands_in_every_layout(case, seed, choice):
    """Two operands whose size-1 dimensions broadcast, in every orientation
    (fuzz.broadcast_cases), each step in a drawn layout: the broadcast operand read with
    stride 0 or copied once (runtime/torch_executor/ttgt.py)."""
    drawn = _in_drawn_layouts(choice, lambda: _differential(case, fuzz.operands(case, seed), _einsum))
    for found in sorted(fuzz.broadcasts(case)):
        event(found)
    if drawn:
        event(f"a layout among {min(drawn)}-{max(drawn)}")


@fuzz.profile(quick=120, share=0.05)
@given(case=fuzz.broadcast_cases(dtypes=[torch.float64]), seed=st.integers(0, 2**16),
       choice=st.integers(0, 2**16))
def test_broadcast_gradients_in_every_layout(case, seed, choice):
    """The same cases' gradients, against torch's: a broadcast operand's gradient sums its
    partial ones (autograd's ``expand`` backward)."""
    _in_drawn_layouts(choice, lambda: _check_gradients(case, seed))
    for found in sorted(fuzz.broadcasts(case)):
        event(found)


def test_broadcast_cases_cover_every_orientation():
    """The broadcast pairs the fuzzer draws hold every side and role, and each side at once."""
    import random
    drawn = [fuzz.make_broadcast_case(random.Random(s)) for s in range(200)]
    seen = set().union(*(fuzz.broadcasts(c) for c in drawn))
    assert seen == set(fuzz.BROADCASTS), seen
    assert any({b.split("/")[0] for b in fuzz.broadcasts(c)} == {"left", "right"} for c in drawn)
    assert all(fuzz.broadcasts(c) for c in drawn)


@fuzz.profile(quick=120, share=0.25)
@given(case=fuzz.cases(), seed=st.integers(0, 2**16))
def test_contract_expression(case, seed):
    _differential(case, fuzz.operands(case, seed), _expression)


# ---------------------------------------------------------------- generated kernels

@pytest.mark.kernels
@fuzz.profile(quick=40, share=0.05)
@given(case=fuzz.cases(dtypes=[torch.float32, torch.float64, torch.float16, torch.bfloat16], max_operands=4),
       seed=st.integers(0, 2**16))
def test_generated_kernels(kernel_device, case, seed):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")   # a fallback to the torch executor fails
        _differential(case, fuzz.operands(case, seed, kernel_device), _einsum)


@st.composite
def permuted_pairs(draw):
    """``(equation, shapes)``: one contraction of two operands with row, column and summed
    indices (one to three each, sizes 1-5) in drawn orders in both operands and the
    result, the kind whose unit-stride index is often stranded inside another's group."""
    letters = iter("abcdefghij")
    m, n, k = ([next(letters) for _ in range(draw(st.integers(1, 3)))] for _ in range(3))
    a, b, out = (draw(st.permutations(x)) for x in (m + k, k + n, m + n))
    sizes = {i: draw(st.integers(1, 5)) for i in m + n + k}
    return f"{''.join(a)},{''.join(b)}->{''.join(out)}", [tuple(sizes[i] for i in t) for t in (a, b)]


@st.composite
def write_bound_pairs(draw):
    """``(equation, shapes)`` as :func:`permuted_pairs`, biased to the write-bound steps
    whose default kernel loads N as a 2-D block: two or three row and column indices
    (sizes 3-5), one summed index of size 1-2, B's last dimension a column index and the
    result's last another (so B's unit-stride index lies inside N)."""
    letters = iter("abcdefghij")
    m, n = ([next(letters) for _ in range(draw(st.integers(2, 3)))] for _ in range(2))
    k = [next(letters)]
    a = draw(st.permutations(m + k))
    b = draw(st.permutations(k + n).filter(lambda t: t[-1] in n))
    out = draw(st.permutations(m + n).filter(lambda t: t[-1] in n and t[-1] != b[-1]))
    sizes = {i: draw(st.integers(3, 5)) for i in m + n}
    sizes[k[0]] = draw(st.integers(1, 2))
    return f"{''.join(a)},{''.join(b)}->{''.join(out)}", [tuple(sizes[i] for i in t) for t in (a, b)]


@pytest.mark.kernels
@fuzz.profile(quick=40, share=0.05)
@given(pair=permuted_pairs(), dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
       layouts=st.tuples(*[st.sampled_from(fuzz.LAYOUTS)] * 2), seed=st.integers(0, 2**16))
def test_both_lowerings_of_permuted_pairs(kernel_device, pair, dtype, layouts, seed):
    """A two-operand permuted contraction through the default kernel (a stranded
    unit-stride index moved into the tile's T axis or a 2-D N block, where the lowering
    moves it) and through the kernel lowered without that move (measure mode's
    ``plain``, the default kernel where a summed index or a long K is stranded): both give
    the float64 answer, for operands in drawn layouts."""
    _both_lowerings(kernel_device, pair, dtype, layouts, seed)


@pytest.mark.kernels
@fuzz.profile(quick=20, share=0.02)
@given(pair=write_bound_pairs(), dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
       layouts=st.tuples(*[st.sampled_from(fuzz.LAYOUTS)] * 2), seed=st.integers(0, 2**16))
def test_both_lowerings_of_write_bound_pairs(kernel_device, pair, dtype, layouts, seed):
    """The same for drawn write-bound pairs with B's unit-stride index inside N, where the
    default kernel loads N as a 2-D block (``nt``) unless a drawn layout moved the unit
    strides."""
    _both_lowerings(kernel_device, pair, dtype, layouts, seed)


def _both_lowerings(kernel_device, pair, dtype, layouts, seed):
    from oracle import assert_close, reference

    from einc.runtime import triton_executor
    equation, shapes = pair
    g = torch.Generator().manual_seed(seed)
    ops = [fuzz.lay_out(torch.randn(s, generator=g, dtype=torch.float64).to(dtype), lay).to(kernel_device)
           for s, lay in zip(shapes, layouts)]
    expected = reference(equation, *[o.cpu() for o in ops])
    extent = math.prod(n for i, n in zip(equation.split(",")[0], shapes[0]) if i in equation.split(",")[1])
    kernels = triton_executor.kernels
    for unit_tiles in (True, False):
        with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
            mp.setattr(triton_executor, "kernels", lambda plan, dt, sh, st=None, unit_tiles=unit_tiles:
                       kernels(plan, dt, sh, st, unit_tiles))
            warnings.filterwarnings("error", message="einc:")   # a fallback to the torch executor fails
            einc.cache_clear()
            try:
                out = einc.einsum(equation, *ops)
            finally:
                einc.cache_clear()
        assert out.is_contiguous() and out.dtype == dtype
        assert_close(out.cpu(), expected, dtype, extent=extent)
    plan = einc.explain(equation, *ops).plan
    laid = [o.shape for o in ops], [o.stride() for o in ops]
    moved = sorted({g for k, _ in kernels(plan, dtype, *laid) for g in ("t", "nt") if k.group(g)})
    differs = triton_executor.plain_kernels(plan, dtype, *laid)
    event(f"the plain kernel differs: the default has {'/'.join(moved)}" if differs
          else "the plain kernel is the default")


@st.composite
def lonely_pairs(draw):
    """``(equation, shapes)``: two operands with one or two indices summed in one of them
    only (in A, B or both) beside row, column and shared summed indices (none to two
    each), in drawn orders, of sizes 0-4."""
    letters = iter("abcdefghijkl")
    m, n, k, la, lb = ([next(letters) for _ in range(draw(st.integers(0, 2)))] for _ in range(5))
    if not (la or lb):
        la = [next(letters)]
    a, b = draw(st.permutations(m + k + la)), draw(st.permutations(k + n + lb))
    assume(a and b)
    out = draw(st.permutations(m + n))
    sizes = {i: draw(st.integers(0, 4)) for i in m + n + k + la + lb}
    return f"{''.join(a)},{''.join(b)}->{''.join(out)}", [tuple(sizes[i] for i in t) for t in (a, b)]


@pytest.mark.kernels
@fuzz.profile(quick=30, share=0.03)
@given(pair=lonely_pairs(), dtype=st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]),
       layouts=st.tuples(*[st.sampled_from(fuzz.LAYOUTS)] * 2), sublist=st.booleans(), seed=st.integers(0, 2**16))
def test_sums_in_one_operand_made_first_by_the_launch(kernel_device, monkeypatch, pair, dtype, layouts, sublist,
                                                     seed):
    """Indices summed in one operand only, summed by the module's launch before the kernel
    wherever the lowering allows it (the threshold at 0: the path any size may take), in
    every dtype, drawn layouts and both calling conventions, against the float64 oracle."""
    from oracle import assert_close, reference

    from einc.codegen import lower
    monkeypatch.setattr(lower, "PRESUM_WASTE", 0)
    equation, shapes = pair
    g = torch.Generator().manual_seed(seed)
    ops = [fuzz.lay_out(torch.randn(s, generator=g, dtype=torch.float64).to(dtype), lay).to(kernel_device)
           for s, lay in zip(shapes, layouts)]
    before = [o.clone() for o in ops]
    terms, out = equation.split("->")
    if sublist:
        ids = lambda t: [ord(c) - ord("a") for c in t]  # noqa: E731
        args = [ops[0], ids(terms.split(",")[0]), ops[1], ids(terms.split(",")[1]), ids(out)]
    else:
        args = [equation, *ops]
    summed = {c for c in terms if c not in out and c != ","}
    extent = max(1, math.prod(n for t, sh in zip(terms.split(","), shapes) for c, n in zip(t, sh) if c in summed))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")   # a fallback to the torch executor fails
        got = einc.einsum(*args)
    assert got.dtype == dtype
    assert_close(got.cpu(), reference(equation, *[o.cpu() for o in ops]), dtype, extent=extent)
    assert all(torch.equal(o, b) for o, b in zip(ops, before)), "an input was changed"
    event("summed first by the launch" if any(getattr(m.kernel, "presum", ()) for m in _kernels_of(equation, ops))
          else "summed in the kernel")


def _kernels_of(equation, ops):
    """The modules einc's kernels for this call are lowered to."""
    from einc.runtime import triton_executor
    plan = triton_executor.program(einc.explain(equation, *ops).plan, ops[0].dtype)
    return triton_executor.kernels(plan, ops[0].dtype, [o.shape for o in ops], [o.stride() for o in ops])


# ---------------------------------------------------------------- autograd

def _check_gradients(case, seed):
    """The result and the gradients of ``sum(out * w)`` for a random ``w`` through einc,
    against torch's (or the error torch.einsum raises); the number of operands."""
    base = [v.requires_grad_() for v in fuzz.values(case, seed)]
    laid = [fuzz.lay_out(b, lay) for b, lay in zip(base, case.layouts)]
    try:
        expected = torch.einsum(case.oracle_equation, *base)
    except Exception as e:     # noqa: BLE001
        with pytest.raises(type(e)):
            einc.einsum(*case.args(laid))
        return len(base)
    w = torch.randn(expected.shape, dtype=expected.dtype, generator=torch.Generator().manual_seed(seed))
    want = torch.autograd.grad((expected * w).real.sum(), base, allow_unused=True)
    out = einc.einsum(*case.args(laid))
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-9 * case.summed_extent())
    got = torch.autograd.grad((out * w).real.sum(), base, allow_unused=True)
    for g, e in zip(got, want):
        if e is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-9 * case.summed_extent())
    return len(base)


@fuzz.profile(quick=60, share=0.1)
@given(case=fuzz.cases(dtypes=[torch.float64, torch.complex128], max_operands=4), seed=st.integers(0, 2**16))
def test_gradients(case, seed):
    """Gradients of ``sum(out * w)`` for a random ``w``, against torch's, through every layout."""
    event(f"{_check_gradients(case, seed)} operand(s)")


@contextlib.contextmanager
def _drawn_layouts(choice: int):
    """Every step weighed, its layout drawn by ``choice`` among those the copy-cost model
    weighs, and the training layout ``training_layout.for_training`` may take made to differ from the
    forward's where it can for odd ``choice``; yields a list that says, per step that asked,
    whether it did."""
    from einc.runtime.torch_executor import training_layout, ttgt
    real, partial, training, small = ttgt.pick, ttgt.GRAD_PARTIAL, training_layout.for_training, ttgt.SMALL
    switched = []

    def for_training(lay, *args, **kw):
        found = training(lay, *args, **kw)
        switched.append(found is not lay)
        return found
    einc.cache_clear()
    ttgt.pick, ttgt.SMALL = (lambda found: found[choice % len(found)]), 0
    ttgt.GRAD_PARTIAL, training_layout.for_training = (1e9 if choice % 2 else 0.0), for_training
    try:
        yield switched
    finally:
        ttgt.pick, ttgt.SMALL, ttgt.GRAD_PARTIAL, training_layout.for_training = real, small, partial, training
        einc.cache_clear()


@contextlib.contextmanager
def _cut(on: bool):
    """Every product and multiply-and-sum cut into 64-byte chunks where ``on``
    (runtime/torch_executor/chunked.py), einc's caches emptied around it."""
    from einc.runtime.torch_executor import chunked, summed
    if not on:
        yield
        return
    saved = chunked.MIN_BYTES, chunked.CHUNK_BYTES, summed.HALF_MIN_BYTES
    chunked.MIN_BYTES, chunked.CHUNK_BYTES, summed.HALF_MIN_BYTES = 0, 64, 0
    einc.cache_clear()
    try:
        yield
    finally:
        chunked.MIN_BYTES, chunked.CHUNK_BYTES, summed.HALF_MIN_BYTES = saved
        einc.cache_clear()


@fuzz.profile(quick=60, share=0.05)
@given(case=fuzz.cases(dtypes=[torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
                                torch.complex128], max_operands=4),
       seed=st.integers(0, 2**16), cut=st.booleans(), choice=st.integers(0, 2**16),
       new_shapes=st.sampled_from(["plan", "class"]))
def test_autograd_leaves_the_bits_alone(case, seed, cut, choice, new_shapes, monkeypatch):
    """One answer per call (docs/semantics.md): the same bits whether or not autograd records
    the call, planned per shape through every layout the copy-cost model weighs (a training
    layout of its own half the time) or by its size class, with products and
    multiply-and-sums cut into chunks half the time."""
    base = fuzz.values(case, seed)
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    with _drawn_layouts(choice) as switched, _cut(cut):
        try:
            with torch.no_grad():
                plain = einc.einsum(*case.args([fuzz.lay_out(b, lay) for b, lay in zip(base, case.layouts)]))
        except Exception:       # noqa: BLE001 - errors are test_differential's
            return
        leaves = [b.requires_grad_() for b in base]
        tracked = einc.einsum(*case.args([fuzz.lay_out(x, lay) for x, lay in zip(leaves, case.layouts)])).detach()
    assert tracked.dtype == plain.dtype and tracked.shape == plain.shape
    assert bool(((tracked == plain) | (tracked.isnan() & plain.isnan())).all()), (tracked, plain)
    event(f"{new_shapes}, cut: {cut}, " + ("a training layout of its own" if any(switched) else "the forward's layout"))


@fuzz.profile(quick=300, share=0.05)
@given(case=fuzz.cases(dtypes=[torch.float64], max_operands=3), seed=st.integers(0, 2**16),
       choice=st.integers(0, 2**16))
def test_gradients_in_every_layout(case, seed, choice):
    """Gradients through a layout drawn among those the copy-cost model weighs, and where it
    broadcasts an operand, through the training layout ``training_layout.for_training`` may take
    instead (made to switch half the time), against torch's."""
    with _drawn_layouts(choice) as switched:
        _check_gradients(case, seed)
    event("a training layout of its own" if any(switched) else "the forward's layout")


@contextlib.contextmanager
def _looped_layouts(choice: int):
    """Every step weighed, its layout drawn by ``choice`` among its looped ones where it has
    any (one product per value of the result's first index: runtime/torch_executor/looped.py),
    else among all; a slab of the result may start at any byte (``ttgt.SLAB_ALIGN`` 1: the
    fuzzer's small sizes seldom make the 64 bytes the model asks for, and a slab's start
    moves no value beyond rounding); where a gradient is taken, a looped step trained as its
    own products stacked (odd ``choice``) or as its one product behind them
    (``training_layout.for_looped``).  Yields ``(looped layouts taken, per looped step trained:
    whether as its one product)``."""
    from einc.runtime.torch_executor import training_layout, ttgt
    saved = ttgt.pick, ttgt.SMALL, ttgt.SLAB_ALIGN, training_layout._looped_ns, training_layout.for_looped
    taken, trained = [], []

    def pick(found):
        pool = [f for f in found if f.outer] or found
        lay = pool[choice % len(pool)]
        if lay.outer:
            taken.append(lay)
        return lay

    def for_looped(lay, *args, **kw):
        found = saved[4](lay, *args, **kw)
        trained.append(found is not lay)
        return found
    stacked = choice % 2
    einc.cache_clear()
    ttgt.cache_clear()      # (its candidates are kept without SLAB_ALIGN in their keys)
    ttgt.pick, ttgt.SMALL, ttgt.SLAB_ALIGN = pick, 0, 1
    training_layout._looped_ns = lambda *args: -math.inf if stacked else math.inf
    training_layout.for_looped = for_looped
    try:
        yield taken, trained
    finally:
        ttgt.pick, ttgt.SMALL, ttgt.SLAB_ALIGN, training_layout._looped_ns, training_layout.for_looped = saved
        einc.cache_clear()
        ttgt.cache_clear()


@fuzz.profile(quick=300, share=0.1)
@given(case=fuzz.looped_cases(), seed=st.integers(0, 2**16), choice=st.integers(0, 2**16))
def test_looped_steps(case, seed, choice, monkeypatch):
    """Steps in a looped layout where they have one (one product per value of the result's
    first index, written into its slab of the result: fuzz.looped_cases), every dtype,
    layout and calling convention, against torch.einsum: the model takes such a layout only
    for some shapes of 64-byte slabs, which the other cases' sizes seldom make.  Each shape
    planned as its own (a size class's plan runs no looped step)."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    with _looped_layouts(choice) as (taken, _):
        _differential(case, fuzz.operands(case, seed), _einsum)
    event(f"{len(taken)} looped step(s)" if taken else "no looped step")


@fuzz.profile(quick=150, share=0.05)
@given(case=fuzz.looped_cases(dtypes=[torch.float64, torch.complex128]), seed=st.integers(0, 2**16),
       choice=st.integers(0, 2**16))
def test_looped_gradients(case, seed, choice, monkeypatch):
    """Gradients through looped steps, trained as their own products stacked or as their one
    product (``training_layout.for_looped``), against torch's."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    with _looped_layouts(choice) as (_, trained):
        _check_gradients(case, seed)
    event(", ".join(sorted({"trained as its one product" if one else "trained as its products stacked"
                            for one in trained})) or "no looped step trained")


@fuzz.profile(quick=100, share=0.02)
@given(case=fuzz.looped_cases(dtypes=[torch.float64, torch.complex128]), seed=st.integers(0, 2**16),
       choice=st.integers(0, 2**16))
def test_looped_steps_under_transforms(case, seed, choice, monkeypatch):
    """Looped steps where ``torch.func`` records them (their products stacked, not written into
    slabs): ``vmap`` over the first operand, two draws, and ``jvp``, against torch's."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    ops = fuzz.operands(case, seed)
    try:
        torch.einsum(case.oracle_equation, *ops)
    except Exception:       # noqa: BLE001 - errors are test_looped_steps'
        event("torch raises")
        return
    tol = {"rtol": 1e-9, "atol": 1e-9 * case.summed_extent()}
    mine = lambda *xs: einc.einsum(*case.args(list(xs)))      # noqa: E731
    theirs = lambda *xs: torch.einsum(case.oracle_equation, *xs)      # noqa: E731
    stacked = torch.stack([ops[0], 2 * ops[0]])
    tangents = tuple(torch.randn(o.shape, dtype=o.dtype, generator=torch.Generator().manual_seed(seed + k))
                     for k, o in enumerate(ops))
    with _looped_layouts(choice) as (taken, _):
        batched = torch.func.vmap(mine, in_dims=(0,) + (None,) * (len(ops) - 1))(stacked, *ops[1:])
        _, derivative = torch.func.jvp(mine, tuple(ops), tangents)
    torch.testing.assert_close(batched, torch.stack([theirs(x, *ops[1:]) for x in stacked]), **tol)
    torch.testing.assert_close(derivative, torch.func.jvp(theirs, tuple(ops), tangents)[1], **tol)
    event(f"{len(taken)} looped step(s)" if taken else "no looped step")


def test_looped_cases_reach_looped_steps(monkeypatch):
    """A fifth or more of the looped cases run a looped step, in float64 and float32 alike,
    with the looped label in either operand: the tests above fuzz what they are named for."""
    import random
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    reached = {}
    for s in range(200):
        case = fuzz.make_looped_case(random.Random(s), [torch.float64, torch.float32])
        with _looped_layouts(s) as (taken, _):
            try:
                einc.einsum(*case.args(fuzz.operands(case, s)))
            except Exception:       # noqa: BLE001 - errors are test_looped_steps'
                continue
        side = "left" if 0 in case.terms[0] else "right"
        reached.setdefault((case.dtype, side), []).append(bool(taken))
    assert len(reached) == 4, sorted(reached)
    assert all(sum(got) >= len(got) / 5 for got in reached.values()), {k: sum(v) / len(v) for k, v in reached.items()}


def test_gradcheck_sample():
    """torch's gradcheck (numerical against analytical) on a few fixed cases."""
    for eq, shapes in [("ij,jk->ik", [(2, 3), (3, 1)]), ("ii,i...->...", [(2, 2), (2, 1, 3)]),
                       ("bi,bj->", [(1, 3), (1, 2)]), ("i,i,i->i", [(3,), (1,), (3,)])]:
        ops = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
        assert torch.autograd.gradcheck(lambda *xs: einc.einsum(eq, *xs), ops)
        assert torch.autograd.gradgradcheck(lambda *xs: einc.einsum(eq, *xs), ops)


# ---------------------------------------------------------------- vmap

def _vmapped_operands(case, seed, dims, b):
    """Per operand: ``b`` draws of the case's operand stacked along ``dims[k]`` (None:
    one draw, not batched), in the case's layout; and the per-element operands."""
    draws = [fuzz.values(case, seed + e) for e in range(b)]
    ops, elements = [], [[] for _ in range(b)]
    for k, (d, lay) in enumerate(zip(dims, case.layouts)):
        if d is None:
            op = fuzz.lay_out(draws[0][k], lay)
            for e in range(b):
                elements[e].append(op)
        else:
            op = fuzz.lay_out(torch.stack([draws[e][k] for e in range(b)], d), lay)
            for e in range(b):
                elements[e].append(op.select(d, e))
        ops.append(op)
    return ops, elements


@fuzz.profile(quick=300, share=0.1)
@given(case=fuzz.cases(max_operands=4), seed=st.integers(0, 2**16), choice=st.integers(0, 2**16),
       b=st.integers(1, 3))
def test_vmapped(case, seed, choice, b):
    """``vmap`` over random operand dimensions (some operands not batched), every dtype
    and layout: each batch element against the oracle on it, errors of torch's type, and
    no op that torch's vmap runs as a loop (its slow fallback warns).  One or two operands
    batched outermost run their plan's ops under torch's batching rules; the others (a
    batch inside an operand, three or more operands), the Function's vmap rule."""
    dims = [None if (choice >> (2 * k)) % 4 == 0 else (choice >> (2 * k)) % (len(s) + 1)
            for k, s in enumerate(case.shapes)]
    if all(d is None for d in dims):
        dims[0] = 0
    ops, elements = _vmapped_operands(case, seed, dims, b)
    note(f"{case.equation}  shapes={case.shapes}  dtype={case.dtype}  layouts={case.layouts}  in_dims={dims}  b={b}")
    before = [o.clone() for o in ops]
    expected, error = _torch_answer(case, elements[0])
    run = torch.func.vmap(lambda *xs: einc.einsum(*case.args(xs)), in_dims=tuple(dims))
    if error is not None and not fuzz.trips_on_int64_promotion(error):
        event(f"torch raises {type(error).__name__}")
        with pytest.raises(type(error)):
            run(*ops)
    else:
        fallback = torch._C._functorch._set_vmap_fallback_warning_enabled
        fallback(True)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = run(*ops)
        finally:
            fallback(False)
        assert not [w for w in caught if "performance drop" in str(w.message)], [str(w.message) for w in caught]
        assert out.is_contiguous() and out.shape[0] == b
        for e in range(b):
            fuzz.check_result(case, out[e], elements[e], None if expected is None else expected.dtype)
        event(f"{len(ops)} operand(s), {sum(d is not None for d in dims)} batched")
    for o, c in zip(ops, before):
        assert torch.equal(o, c), "an input was changed"


# ---------------------------------------------------------------- the compiled op

@fuzz.profile(quick=8, share=0.005)
@given(case=fuzz.cases(dtypes=[torch.float32, torch.float64, torch.int64], max_operands=3),
       seed=st.integers(0, 2**16))
def test_compiled(case, seed):
    ops = fuzz.operands(case, seed)
    torch._dynamo.reset()
    compiled = torch.compile(lambda *xs: einc.einsum(*case.args(xs)), fullgraph=True, backend="eager")
    _differential(case, ops, lambda c, xs: compiled(*xs))


# ---------------------------------------------------------------- named and composite axes

def _named_differential(named, ops, run):
    """A named case against torch.einsum on the split views, its result merged."""
    case = named.case
    note(f"{named.text}  sizes={named.sizes}  merged shapes={[tuple(o.shape) for o in ops]}  dtype={case.dtype}  "
         f"layouts={case.layouts}  oracle: torch.einsum({case.oracle_equation!r}, ...)")
    before = [o.clone() for o in ops]
    expected, error = _torch_answer(case, named.split(ops))
    if error is not None and not fuzz.trips_on_int64_promotion(error):
        event(f"torch raises {type(error).__name__}")
        with pytest.raises(type(error)):
            run(named, ops)
    else:
        out = run(named, ops)
        split = named.split(ops)
        assert out.is_contiguous()
        if expected is not None:
            assert out.dtype == expected.dtype
        ref = named.merge_output(torch.einsum(case.oracle_equation, *[fuzz.upcast(o) for o in split]))
        assert tuple(out.shape) == tuple(ref.shape), (out.shape, ref.shape)
        fuzz.check_result(case, out.reshape(torch.einsum(case.oracle_equation, *[fuzz.upcast(o) for o in split])
                                            .shape), split)
        event(f"{len(ops)} operand(s), {named.text.count('(')} composite(s)")
    for o, b in zip(ops, before):
        assert torch.equal(o, b), "an input was changed"


@fuzz.profile(quick=400, share=0.3)
@given(case=fuzz.cases(sublist=False), seed=st.integers(0, 2**16), shape_seed=st.integers(0, 2**16))
def test_named_composite_axes(case, seed, shape_seed):
    """Composite axes drawn over the fuzzer's cases: einc.einsum on the merged operands (every
    layout of them, keyword sizes where needed) against torch.einsum on their split views."""
    import random
    named = fuzz.named_case(case, random.Random(shape_seed))
    _named_differential(named, named.operands(seed), lambda n, xs: einc.einsum(n.text, *xs, **n.sizes))


@fuzz.profile(quick=30, share=0.05)
@given(case=fuzz.cases(dtypes=[torch.float64, torch.complex128], max_operands=3, sublist=False),
       seed=st.integers(0, 2**16), shape_seed=st.integers(0, 2**16))
def test_named_gradients(case, seed, shape_seed):
    """Gradients through the views and the merge, against torch's on the split views."""
    import random
    named = fuzz.named_case(case, random.Random(shape_seed))
    base = [v.reshape(m).requires_grad_() for v, m in zip(fuzz.values(case, seed), named.merged)]
    try:
        expected = named.merge_output(torch.einsum(case.oracle_equation, *named.split(base)))
    except Exception as e:     # noqa: BLE001
        with pytest.raises(type(e)):
            einc.einsum(named.text, *base, **named.sizes)
        return
    w = torch.randn(expected.shape, dtype=expected.dtype, generator=torch.Generator().manual_seed(seed))
    want = torch.autograd.grad((expected * w).real.sum(), base, allow_unused=True)
    laid = [fuzz.lay_out(b, lay) for b, lay in zip(base, case.layouts)]
    got = torch.autograd.grad((einc.einsum(named.text, *laid, **named.sizes) * w).real.sum(), base,
                              allow_unused=True)
    for g, e in zip(got, want):
        if e is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-9 * case.summed_extent())


@pytest.mark.kernels
@fuzz.profile(quick=15, share=0.02)
@given(case=fuzz.cases(dtypes=[torch.float32, torch.float64], max_operands=3, sublist=False),
       seed=st.integers(0, 2**16), shape_seed=st.integers(0, 2**16))
def test_named_through_generated_kernels(kernel_device, case, seed, shape_seed):
    """Composite axes whose split operands the generated kernels read through their strides."""
    import random
    named = fuzz.named_case(case, random.Random(shape_seed))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")   # a fallback to the torch executor fails
        _named_differential(named, named.operands(seed, kernel_device),
                            lambda n, xs: einc.einsum(n.text, *xs, **n.sizes))


@fuzz.profile(quick=6, share=0.005)
@given(case=fuzz.cases(dtypes=[torch.float32, torch.float64], max_operands=3, sublist=False),
       seed=st.integers(0, 2**16), shape_seed=st.integers(0, 2**16))
def test_named_compiled(case, seed, shape_seed):
    """Named cases under torch.compile(fullgraph=True, dynamic=True): views, the op, the reshape."""
    import random
    named = fuzz.named_case(case, random.Random(shape_seed))
    torch._dynamo.reset()
    compiled = torch.compile(lambda *xs: einc.einsum(named.text, *xs, **named.sizes), fullgraph=True, dynamic=True,
                             backend="eager")
    _named_differential(named, named.operands(seed), lambda n, xs: compiled(*xs))
