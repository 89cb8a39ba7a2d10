"""memory_limit honoured by sliced plans (einc.planner.slicing): results, memory, autograd, kernels,
explain, edge cases; and cotengra as a planner (with and without cotengra installed)."""

import math
import sys
import warnings
import weakref

import pytest
import torch
from oracle import assert_close, reference
from torch.utils._python_dispatch import TorchDispatchMode

import einc
from einc.errors import PathError
from einc.planner.options import Options
from einc.planner.plan import build_plan
from einc.planner.slicing import live_peak

CASES = [   # equation, shapes, memory_limit
    ("ij,jk,kl->il", [(8, 9), (9, 10), (10, 7)], 20),
    ("ij,jk,kl->il", [(8, 9), (9, 10), (10, 7)], 1),
    ("ab,bc,cd,da->", [(6, 7), (7, 8), (8, 5), (5, 6)], 10),
    ("abc,cde,efa->bdf", [(3, 4, 5), (5, 4, 3), (3, 2, 3)], 8),
    ("ij,kl,jk->il", [(6, 6), (6, 6), (6, 6)], 36),
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 6)], 12),
    ("ii,ij->j", [(5, 5), (5, 4)], 3),                  # a diagonal: the sliced index repeats in one operand
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 2)], 10),  # ellipsis and broadcasting
]


def _operands(shapes, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]


@pytest.mark.parametrize("eq,shapes,limit", CASES)
def test_sliced_result_matches_the_oracle_and_fits_the_limit(eq, shapes, limit):
    ops = _operands(shapes)
    out = einc.einsum(eq, *ops, memory_limit=limit)
    assert_close(out, reference(eq, *ops), torch.float64, extent=100)
    info = einc.explain(eq, *ops, memory_limit=limit)
    assert info.largest_intermediate <= limit
    assert all(step.size <= limit for step in info.steps)
    s = info.slicing
    if s is None:
        assert live_peak(info.steps, info.graph.sizes, info.graph.num_operands) <= limit
    else:       # the intermediates alive together fit, or each is one element and cannot shrink
        assert s.live <= limit or s.inner.largest_intermediate == 1
        assert s.live == live_peak(s.inner.steps, s.inner.graph.sizes, s.inner.graph.num_operands)
    unsliced = einc.explain(eq, *ops)
    if unsliced.largest_intermediate > limit:
        assert info.slicing is not None and info.slicing.num_slices > 1


def test_a_plan_that_fits_is_not_sliced():
    ops = _operands([(4, 5), (5, 6)])
    info = einc.explain("ij,jk->ik", *ops, memory_limit=1000)
    assert info.slicing is None
    assert "Sliced indices" not in str(info)


def test_explain_shows_sliced_indices_slice_count_and_overhead():
    ops = _operands([(8, 9), (9, 10), (10, 7)])
    info = einc.explain("ij,jk,kl->il", *ops, memory_limit=1)
    s = info.slicing
    text = str(info)
    assert f"({s.num_slices} slices, chosen by einc" in text
    # every index: the copies a step makes inside count too (a sum over j needs a j-slice's copy)
    assert s.num_slices == 8 * 9 * 10 * 7 and sorted(info.graph.term(s.indices)) == ["i", "j", "k", "l"]
    assert "Slicing FLOP overhead:  " + f"{s.overhead:.4g}x" in text
    # The limit, 1, cannot be met by what is alive together: explain says so.
    assert f"Live memory:  at most {s.live} elements at once per slice, intermediates and the copies" in text
    assert s.live > 1
    assert "is less than what must be alive together" in text
    assert s.overhead > 1.0
    # each slice's steps, and each slice's one-element result added into the accumulator
    assert info.flops == (s.inner.flops + 1) * s.num_slices
    d = info.to_dict()
    assert d["slicing"]["slices"] == s.num_slices and d["slicing"]["planner"] == "einc"


def test_slicing_every_summed_index_counts_the_adds_it_leaves_to_the_accumulator():
    # Each slice of a 40x40 product sliced everywhere is one multiply; its add into the
    # result is the sum the step does not do: the same flops as unsliced, not half.
    a, b = _operands([(40, 40), (40, 40)])
    info = einc.explain("ij,jk->ik", a, b, memory_limit=1)
    s = info.slicing
    assert s.num_slices == 40 ** 3
    assert info.flops == s.unsliced_flops == 2 * 40 ** 3 and s.overhead == 1.0
    assert "Slicing FLOP overhead:  1x" in str(info)
    # Where slicing i and k alone fits, it is preferred to slicing the summed j, whose adds
    # cost (a slicer blind to those adds takes j as often as k): windows written, nothing added.
    for limit in (1600, 2000):
        info = einc.explain("ij,jk->ik", a, b, optimize=[(0, 1)], memory_limit=limit)
        assert sorted(info.graph.term(info.slicing.indices)) == ["i", "k"]
        assert info.flops == info.slicing.unsliced_flops
    # Where j must be sliced too (400 elements: the step's copies count), its adds are counted
    info = einc.explain("ij,jk->ik", a, b, optimize=[(0, 1)], memory_limit=400)
    s = info.slicing
    assert sorted(info.graph.term(s.indices)) == ["i", "j", "k"]
    assert info.flops == s.unsliced_flops + s.num_slices * s.inner.steps[-1].size


class _Allocations(TorchDispatchMode):
    """``(numel, op)`` of each tensor an op allocated (views and in-place ops make none)."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        schema = func._schema
        if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
            return out
        for t in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(t, torch.Tensor):
                self.sizes.append((t.numel(), str(func)))
        return out


def test_no_op_allocates_more_than_the_limit_besides_operands_and_result():
    # An explicit path whose first step is a 6^4 outer product: 36 elements must slice it.
    ops = _operands([(6, 6), (6, 6), (6, 6)])
    eq, path, limit = "ij,kl,jk->il", [(0, 1), (0, 1)], 36
    expected = reference(eq, *ops)
    einc.einsum(eq, *ops, optimize=path, memory_limit=limit)       # plan and cache outside the mode
    with _Allocations() as seen:
        out = einc.einsum(eq, *ops, optimize=path, memory_limit=limit)
    assert_close(out, expected, torch.float64, extent=36)
    assert seen.sizes and max(n for n, _ in seen.sizes) <= max(limit, out.numel(), 36)
    with _Allocations() as unsliced:
        einc.einsum(eq, *ops, optimize=path)
    assert max(n for n, _ in unsliced.sizes) == 6 ** 4     # the test can see the big intermediate


class _Live(TorchDispatchMode):
    """Elements held by the storages ops allocated and that are still alive, after each op:
    ``peak``, the most at once.  A fresh allocation is an op's result that aliases no input
    (its schema says so) in a storage not seen yet (``reshape``'s ``_unsafe_view`` of its
    own copy is the same memory); it counts until every tensor on it (views included) is freed."""

    def __init__(self):
        super().__init__()
        self.now = self.peak = 0
        self.storages = {}          # data pointer -> [tensors on it, elements]

    def _release(self, key):
        held = self.storages[key]
        held[0] -= 1
        if not held[0]:
            self.now -= held[1]
            del self.storages[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        schema = func._schema
        if not schema.is_mutable and all(r.alias_info is None for r in schema.returns):
            for t in out if isinstance(out, (list, tuple)) else [out]:
                if isinstance(t, torch.Tensor) and t.numel():
                    key = t.untyped_storage().data_ptr()
                    if key not in self.storages:
                        self.storages[key] = [0, t.untyped_storage().nbytes() // t.element_size()]
                        self.now += self.storages[key][1]
                    self.storages[key][0] += 1
                    weakref.finalize(t, self._release, key)
        self.peak = max(self.peak, self.now)
        return out


@pytest.mark.parametrize("backend", ["torch", None])
def test_intermediates_alive_together_fit_the_limit(backend, monkeypatch):
    # The path makes ik, then km, keeps both, then im: 36 elements each, 108 alive at once.
    # Each fits a limit of 36 alone; together they must be sliced.
    if backend:
        monkeypatch.setenv("EINC_BACKEND", backend)
    einc.cache_clear()
    ops = _operands([(6, 6)] * 4)
    eq, path, limit = "ij,jk,kl,lm->im", [(0, 1), (0, 1), (0, 1)], 36
    expected = reference(eq, *ops)
    with _Live() as unsliced:
        einc.einsum(eq, *ops, optimize=path)
    assert unsliced.peak >= 3 * 36                  # the test sees the three alive together
    info = einc.explain(eq, *ops, optimize=path, memory_limit=limit)
    s = info.slicing
    assert s is not None and s.live <= limit and unsliced.peak <= s.unsliced_live
    assert f"Live memory:  at most {s.live} elements at once per slice, intermediates and the copies steps " \
        "make inside; the limit, 36" in str(info)
    einc.einsum(eq, *ops, optimize=path, memory_limit=limit)       # plan and cache outside the mode
    with _Live() as sliced:
        out = einc.einsum(eq, *ops, optimize=path, memory_limit=limit)
    assert_close(out, expected, torch.float64, extent=216)
    # Besides the accumulator (the result, counted apart), what is alive at once fits the
    # plan's live peak, so the limit: the slice loop keeps no slice's tensors for the next
    # (with EINC_BACKEND unset the Triton executor may run instead: it copies less).
    assert sliced.peak <= s.live + out.numel()
    assert sliced.now == out.numel()


COPYING = [     # equation, shapes, path, limit: steps of the torch executor that copy inside
    # k, summed, sits between i and j: the operand (a slice view of it) is copied for mm; the
    # result (l, j, i) is the product's (j, i, l) permuted, copied.
    ("ikj,kl->lji", [(6, 5, 7), (5, 8)], [(0, 1)], 100),
    ("ab,kij,kl,lm->mia", [(3, 3), (6, 5, 7), (6, 8), (8, 9)], [(1, 2), (1, 2), (0, 1)], 100),
    ("ijk,kji->i", [(4, 5, 6), (6, 5, 4)], [(0, 1)], 30),           # a dot step: a * b before the sum
    ("ij,jk,kl->li", [(8, 9), (9, 10), (10, 7)], [(0, 1), (0, 1)], 20),
    ("ikj,kl->lji", [(6, 5, 7), (5, 8)], [(0, 1)], None),            # not sliced: the same bound
    ("abc,cda,de->eb", [(4, 5, 6), (6, 3, 4), (3, 7)], [(0, 1), (0, 1)], None),
]


@pytest.mark.parametrize("eq,shapes,path,limit", COPYING)
def test_the_bound_counts_the_copies_a_step_makes_inside(eq, shapes, path, limit, monkeypatch):
    # The torch executor copies an operand that does not read as matrices and permutes the
    # last result into a contiguous copy: the bound counts those too, so what the executor
    # really holds at once (the accumulator aside) stays within it.
    monkeypatch.setenv("EINC_BACKEND", "torch")
    einc.cache_clear()
    ops = _operands(shapes)
    ops[-1] = ops[-1].mT.contiguous().mT if ops[-1].dim() == 2 else ops[-1]     # a strided operand too
    info = einc.explain(eq, *ops, optimize=path, memory_limit=limit)
    s = info.slicing
    bound = s.live if s else live_peak(info.steps, info.graph.sizes, info.graph.num_operands)
    assert (s is not None) == (limit is not None) and (limit is None or bound <= limit)
    einc.einsum(eq, *ops, optimize=path, memory_limit=limit)       # plan and cache outside the mode
    with _Live() as seen:
        out = einc.einsum(eq, *ops, optimize=path, memory_limit=limit)
    assert_close(out, reference(eq, *ops), torch.float64, extent=100)
    assert seen.peak - (out.numel() if s else 0) <= bound
    if s is None:       # the copies are there to see: more is held than the intermediates alive together
        assert seen.peak > max(sum(n for n in (st.size, *(info.steps[v - len(ops)].size for v in st.operands
                                                       if v >= len(ops)))) for st in info.steps)


@pytest.mark.interpreter
@pytest.mark.kernels
def test_the_measuring_first_call_frees_intermediates_too(kernel_device, monkeypatch, tmp_path):
    # The first call of a slice's entry times each step's candidates (a fake timer here);
    # it too frees each intermediate after its last use, so the first slice keeps to the bound.
    from einc.runtime import select
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(select, "timer", lambda fn, args: (fn(*args), 1.0)[1])
    einc.cache_clear()
    ops = [o.float().to(kernel_device) for o in _operands([(6, 6)] * 12)]
    eq, limit = "ab,bc,cd,de,ef,fg,gh,hi,ij,jk,kl,lm->am", 72     # a chain: 11 intermediates, 2 alive at once
    path = [(0, 1)] + [(0, k) for k in range(10, 0, -1)]
    s = einc.explain(eq, *ops, optimize=path, memory_limit=limit).slicing
    # all of a slice's intermediates kept until its end would exceed what is checked below
    assert s.live <= limit and sum(step.size for step in s.inner.steps) > s.live + s.inner.largest_intermediate
    with _Live() as first:
        out = einc.einsum(eq, *ops, optimize=path, memory_limit=limit, select="measure")
    assert_close(out.cpu(), reference(eq, *[o.cpu() for o in ops]), torch.float32, extent=6 ** 11)
    # live intermediates, a timed candidate's output beside the chosen one's, the accumulator
    assert first.peak <= s.live + s.inner.largest_intermediate + out.numel()
    einc.cache_clear()


def test_live_peak_counts_pending_branches_copies_and_frees_consumed_inputs():
    # i4 j3 k4 l5 m4.  ((AB)(CD)): AB (16) waits while CD (16) is made; each matrix product
    # counts a copy of both its inputs (laid out for mm), the last step the larger of that
    # and its result's permuted copy: AB 16 + 12+12 copies; CD 16 + AB 16 + 20+20 copies;
    # the last 16 + AB 16 + CD 16 + 16+16 copies.
    info = einc.explain("ij,jk,kl,lm->im", *_operands([(4, 3), (3, 4), (4, 5), (5, 4)]),
                        optimize=[(0, 1), (0, 1), (0, 1)])
    assert live_peak(info.steps, info.graph.sizes, 4) == max(16 + 24, 16 + 16 + 40, 16 + 16 + 16 + 32) == 80
    # A chain: each step's input is freed once its output exists: AB 16 + 24; ABC 20 + AB 16
    # + 16+20 copies; the last 16 + ABC 20 + 20+20 copies.
    info = einc.explain("ij,jk,kl,lm->im", *_operands([(4, 3), (3, 4), (4, 5), (5, 4)]),
                        optimize=[(0, 1), (0, 2), (0, 1)])
    assert live_peak(info.steps, info.graph.sizes, 4) == max(16 + 24, 20 + 16 + 36, 16 + 20 + 40) == 76
    # A dot step: its inputs' sums over what only one holds, and the elementwise product.
    info = einc.explain("ij,ij->", *_operands([(4, 3), (4, 3)]))
    assert live_peak(info.steps, info.graph.sizes, 2) == 1 + 12 + 12 + 12


def test_one_cached_plan_serves_every_slice():
    einc.cache_clear()
    ops = _operands([(8, 9), (9, 10), (10, 7)])
    einc.einsum("ij,jk,kl->il", *ops, memory_limit=1)
    info = einc.cache_info().plans
    assert info.currsize == 2                     # the sliced plan and the one slice's plan
    assert info.misses == 2                       # 504 slices, planned once


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64, torch.complex64])
def test_dtypes_accumulate_in_a_wide_enough_dtype(dtype):
    shapes = [(6, 40), (40, 5), (5, 6)]
    if dtype.is_floating_point or dtype.is_complex:
        ops = [o.to(dtype) for o in _operands(shapes)]
    else:
        g = torch.Generator().manual_seed(1)
        ops = [torch.randint(-5, 5, s, generator=g, dtype=dtype) for s in shapes]
    eq = "ij,jk,kl->il"
    out = einc.einsum(eq, *ops, memory_limit=4)
    assert out.dtype == torch.einsum(eq, *ops).dtype
    assert einc.explain(eq, *ops, memory_limit=4).slicing is not None
    assert_close(out, reference(eq, *ops), dtype, extent=40)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float32])
@pytest.mark.parametrize("eq, shapes", [("ij->ji", [(16, 16)]), ("ii->i", [(16, 16)]), ("i,j->ij", [(8,), (8,)])])
def test_slices_of_kept_indices_are_written_not_added(dtype, eq, shapes):
    # each element is one slice's: float8 (no addition in torch) sliced as torch.einsum answers
    # it unsliced, and a -0.0 of a product stays -0.0 (added into zeros it became +0.0)
    g = torch.Generator().manual_seed(3)
    ops = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    ops[0].view(-1)[0] = -0.0 if dtype.is_floating_point else 0
    out = einc.einsum(eq, *ops, memory_limit=8)
    assert einc.explain(eq, *ops, memory_limit=8).slicing is not None
    want = torch.einsum(eq, *ops)
    assert out.dtype == want.dtype
    assert torch.equal(out.float(), want.float()) and torch.equal(out.float().signbit(), want.float().signbit())


def test_gradients_of_a_sliced_contraction():
    ops = [o.requires_grad_() for o in _operands([(4, 5), (5, 6), (6, 3)])]
    eq = "ij,jk,kl->il"
    assert einc.explain(eq, *ops, memory_limit=3).slicing is not None
    assert torch.autograd.gradcheck(lambda *x: einc.einsum(eq, *x, memory_limit=3), ops)
    out = einc.einsum(eq, *ops, memory_limit=3)
    grad = torch.randn_like(out)
    mine = torch.autograd.grad(out, ops, grad)
    theirs = torch.autograd.grad(torch.einsum(eq, *ops), ops, grad)
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a, b)


@pytest.mark.interpreter
@pytest.mark.kernels
def test_sliced_slices_run_generated_kernels(kernel_device):
    ops = [o.to(torch.float32).to(kernel_device) for o in _operands([(8, 9), (9, 10), (10, 7)])]
    eq = "ij,jk,kl->il"
    out = einc.einsum(eq, *ops, memory_limit=20, select="kernel")
    assert_close(out.cpu(), reference(eq, *[o.cpu() for o in ops]), torch.float32, extent=90)
    info = einc.explain(eq, *ops, memory_limit=20, select="kernel")
    assert info.slicing is not None
    assert all(b.startswith("triton") for b in info.backends), info.backends


def test_torch_executor_runs_the_slices(monkeypatch):
    monkeypatch.setenv("EINC_BACKEND", "torch")
    einc.cache_clear()
    ops = _operands([(8, 9), (9, 10), (10, 7)])
    einc.einsum("ij,jk,kl->il", *ops, memory_limit=20)
    assert set(einc.explain("ij,jk,kl->il", *ops, memory_limit=20).backends) == {"torch"}


def test_sublist_form_and_max_input():
    ops = _operands([(6, 7), (7, 8), (8, 6)])
    out = einc.einsum(ops[0], [0, 1], ops[1], [1, 2], ops[2], [2, 3], [0, 3], memory_limit=10)
    assert_close(out, reference("ab,bc,cd->ad", *ops), torch.float64, extent=60)
    out = einc.einsum("ab,bc,cd->", *ops, memory_limit="max_input")
    assert_close(out, reference("ab,bc,cd->", *ops), torch.float64, extent=400)


def test_result_larger_than_the_limit_slices_output_indices():
    ops = _operands([(10, 3), (3, 12)])
    info = einc.explain("ij,jk->ik", *ops, memory_limit=12)
    assert info.slicing is not None
    assert set(info.graph.term(info.slicing.indices)) <= {"i", "k"}      # output indices, written in place
    out = einc.einsum("ij,jk->ik", *ops, memory_limit=12)
    assert_close(out, reference("ij,jk->ik", *ops), torch.float64, extent=3)


def test_size_zero_and_size_one_indices():
    ops = _operands([(4, 0), (0, 5), (5, 3)])
    out = einc.einsum("ij,jk,kl->il", *ops, memory_limit=2)
    assert torch.equal(out, torch.zeros(4, 3, dtype=torch.float64))
    ops = _operands([(1, 6, 7), (7, 1, 8), (8, 6)])
    info = einc.explain("aij,jbk,ki->ab", *ops, memory_limit=5)
    assert all(info.graph.sizes[i] > 1 for i in info.slicing.indices)   # a size-1 index is never sliced
    out = einc.einsum("aij,jbk,ki->ab", *ops, memory_limit=5)
    assert_close(out, reference("aij,jbk,ki->ab", *ops), torch.float64, extent=60)


def test_a_limit_below_one_element_is_an_error():
    """As in opt_einsum: -1 (or None) is no limit, any other number below 1 an error, named
    as given; numpy's integers are numbers."""
    import numpy as np
    ops = _operands([(4, 5), (5, 6)])
    for limit in (0, -5, 0.5, float("nan")):
        with pytest.raises(PathError, match=rf"memory_limit={limit!r} elements .* at least 1"):
            einc.einsum("ij,jk->ik", *ops, memory_limit=limit)
    assert_close(einc.einsum("ij,jk->ik", *ops, memory_limit=-1), reference("ij,jk->ik", *ops), torch.float64)
    three = _operands([(4, 5), (5, 6), (6, 3)])
    assert einc.explain("ij,jk,kl->il", *three, memory_limit=np.int64(5)).slicing is not None


def test_contract_expression_with_constants_and_a_limit():
    ops = _operands([(6, 7), (7, 8), (8, 5)])
    expr = einc.contract_expression("ab,bc,cd->ad", (6, 7), ops[1], (8, 5), constants=[1], memory_limit=6)
    assert expr.plan.slicing is not None
    assert_close(expr(ops[0], ops[2]), reference("ab,bc,cd->ad", *ops), torch.float64, extent=60)


# ----------------------------------------------------------------------- cotengra

def test_without_cotengra_the_cotengra_option_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cotengra", None)     # import cotengra -> ImportError
    einc.cache_clear()
    ops = _operands([(4, 5), (5, 6), (6, 3)])
    with pytest.raises(PathError, match=r"pip install 'einc\[tn\]'"):
        einc.einsum("ij,jk,kl->il", *ops, optimize="cotengra")
    out = einc.einsum("ij,jk,kl->il", *ops, memory_limit=3)     # einc's own rule still slices
    assert_close(out, reference("ij,jk,kl->il", *ops), torch.float64, extent=30)
    assert einc.explain("ij,jk,kl->il", *ops, memory_limit=3).slicing.planner == "einc"
    einc.cache_clear()


NETWORK = ("ab,bcd,def,fg,cei,ihj,gj->ah", [(4, 5), (5, 4, 6), (6, 4, 5), (5, 6), (4, 4, 5), (5, 3, 6), (6, 6)])


def test_cotengra_plans_and_slices_by_name():
    pytest.importorskip("cotengra")
    eq, shapes = NETWORK
    ops = _operands(shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = einc.einsum(eq, *ops, optimize="cotengra", memory_limit=100)
        info = einc.explain(eq, *ops, optimize="cotengra", memory_limit=100)
    assert_close(out, reference(eq, *ops), torch.float64, extent=1000)
    assert info.slicing is not None and info.slicing.planner.startswith("cotengra")
    assert info.largest_intermediate <= 100
    text = str(info)
    assert "einc auto path:" in text and "cotengra path:" in text and "Optimizer:  cotengra" in text


@pytest.mark.parametrize("kind", ["HyperOptimizer", "ReusableHyperOptimizer"])
def test_cotengra_optimizer_objects(kind):
    ctg = pytest.importorskip("cotengra")
    eq, shapes = NETWORK
    ops = _operands(shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = getattr(ctg, kind)(methods=["greedy"], max_repeats=4, progbar=False, parallel=False)
        out = einc.einsum(eq, *ops, optimize=opt, memory_limit=100)
        info = einc.explain(eq, *ops, optimize=opt, memory_limit=100)
        unlimited = einc.explain(eq, *ops, optimize=opt)
    assert_close(out, reference(eq, *ops), torch.float64, extent=1000)
    assert info.largest_intermediate <= 100 and info.slicing.planner.startswith("cotengra")
    assert info.slicing.live <= 100
    assert unlimited.slicing is None and "cotengra path:" in str(unlimited)


def test_cotengra_slices_agree_with_its_tree():
    ctg = pytest.importorskip("cotengra")
    eq, shapes = NETWORK
    ops = _operands(shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = ctg.HyperOptimizer(methods=["greedy"], max_repeats=4, progbar=False, parallel=False,
                                 slicing_opts={"target_size": 16})
        info = einc.explain(eq, *ops, optimize=opt)
    # cotengra sliced without an einc limit: its own slicing is used as is.
    assert info.slicing is not None and info.slicing.memory_limit is None
    assert_close(einc.einsum(eq, *ops, optimize=opt), reference(eq, *ops), torch.float64, extent=1000)


def test_cotengra_slices_are_checked_against_the_live_bound(tmp_path):
    ctg = pytest.importorskip("cotengra")
    eq, shapes = NETWORK
    ops = _operands(shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = ctg.ReusableHyperOptimizer(methods=["greedy"], max_repeats=4, progbar=False, parallel=False,
                                         slicing_opts={"target_size": 100}, directory=str(tmp_path))
        theirs = einc.explain(eq, *ops, optimize=opt).slicing          # cotengra's slicing as is
        mine = einc.explain(eq, *ops, optimize=opt, memory_limit=100)   # the same tree, then the live bound
        out = einc.einsum(eq, *ops, optimize=opt, memory_limit=100)
    s = mine.slicing
    assert set(theirs.indices) <= set(s.indices) and s.live <= 100
    if theirs.live > 100:        # each of cotengra's intermediates fits alone, not all together
        assert len(s.indices) > len(theirs.indices) and s.planner == "cotengra and einc"
        assert "chosen by cotengra and einc" in str(mine)
    else:
        assert s.indices == theirs.indices and s.planner == "cotengra"
    assert_close(out, reference(eq, *ops), torch.float64, extent=1000)


def test_under_torch_compile_the_op_runs_the_sliced_plan():
    ops = [o.float() for o in _operands([(8, 9), (9, 10), (10, 7)])]
    f = torch.compile(lambda *x: einc.einsum("ij,jk,kl->il", *x, memory_limit=20), backend="eager", fullgraph=True)
    assert_close(f(*ops), reference("ij,jk,kl->il", *ops), torch.float32, extent=90)


@pytest.mark.parametrize("eq,shapes", [("ii,ij->j", [(5, 5), (5, 4)]), ("ij,ij,ij->i", [(4, 5)] * 3),
                                       ("ij->j", [(4, 5)]), ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 2)])])
@pytest.mark.parametrize("limit", [None, 3])
def test_cotengra_on_diagonals_hyperedges_one_operand_and_ellipsis(eq, shapes, limit):
    pytest.importorskip("cotengra")
    ops = _operands(shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = einc.einsum(eq, *ops, optimize="cotengra", memory_limit=limit)
    assert_close(out, reference(eq, *ops), torch.float64, extent=25)


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8])
@pytest.mark.parametrize("eq", ["ij,jk->ik", "ij,jk->i", "ij,jk->k"])
def test_integer_results_keep_the_unsliced_dtype(eq, dtype):
    g = torch.Generator().manual_seed(2)
    a, b = torch.randint(0, 3, (4, 5), generator=g, dtype=dtype), torch.randint(0, 3, (5, 6), generator=g, dtype=dtype)
    unsliced, sliced = einc.einsum(eq, a, b), einc.einsum(eq, a, b, memory_limit=1)
    assert einc.explain(eq, a, b, memory_limit=1).slicing is not None
    assert sliced.dtype == unsliced.dtype and torch.equal(sliced, unsliced)


def test_narrow_integers_no_slice_cuts_are_widened_once_per_call(monkeypatch):
    # ijx,k->ik in int8 has an int64 result (torch sums x and j alone); i sliced: the
    # k operand, read whole by every slice, is made int64 once per call, not per slice.
    from einc.runtime import sliced
    widened, real = [], sliced.widened
    monkeypatch.setattr(sliced, "widened", lambda ts: widened.extend(t.shape for t in ts if t.dtype != torch.int64)
                        or real(ts))
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 100, (40, 30, 3), generator=g, dtype=torch.int8)
    b = torch.randint(0, 100, (20,), generator=g, dtype=torch.int8)
    info = einc.explain("ijx,k->ik", a, b, memory_limit=200)
    assert info.graph.term(info.slicing.indices) == "i" and info.slicing.num_slices > 4
    out = einc.einsum("ijx,k->ik", a, b, memory_limit=200)
    assert out.dtype == torch.int64 and torch.equal(out, torch.einsum("ijx,k->ik", a.long(), b.long()))
    assert widened.count((20,)) == 1                                        # was once per slice
    assert sum(shape[1:] == (30, 3) for shape in widened) == info.slicing.num_slices      # a's slices, each


def test_slice_invariant_steps_run_once_per_call(monkeypatch):
    # x is sliced: ab,bc does not hold it, so that step runs once per call, not once per slice.
    from einc.runtime.sliced import Runner
    calls = []
    hoisted = Runner.hoisted

    def counting(self, operands):
        values = hoisted(self, operands)
        calls.append(len(values))
        return values
    monkeypatch.setattr(Runner, "hoisted", counting)
    eq = "ab,bc,cx,xy,yd->ad"
    shapes = [(3, 3), (3, 3), (3, 30), (30, 30), (30, 3)]
    ops = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    info = einc.contract_path(eq, *ops, memory_limit=100)[1]
    assert info.slicing.num_slices > 1 and info.slicing.live <= 100
    out = einc.einsum(eq, *ops, memory_limit=100)
    assert calls == [1]             # one hoisted result, computed once for all the slices
    assert_close(out.detach(), reference(eq, *[o.detach() for o in ops]), torch.float64)
    grads = torch.autograd.grad(out.sum(), ops)
    expected = torch.autograd.grad(torch.einsum(eq, *ops).sum(), ops)
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e)


# ----------------------------------------------------------------------- cost, chunks, refusal (#24)

def _grid(rows=4, cols=5, bond=4):
    from networks import grid
    return grid(rows, cols, bond)


def _chunked(eq, ops, indices, chunks, limit=None):
    """The sliced plan of ``eq`` with ``indices`` (names) cut into ``chunks``, its runner."""
    from einc.planner.equation import parse
    from einc.planner.graph import build
    from einc.planner.options import Options
    from einc.planner.plan import build_plan
    from einc.planner.slicing import sliced_plan
    from einc.runtime import engine
    from einc.runtime.sliced import Runner
    graph = build(parse(eq), [o.shape for o in ops])
    base = build_plan(graph, eq, Options.of())
    ids = tuple(graph.names.index(n) for n in indices)
    plan = sliced_plan(graph, eq, base, ids, limit, "einc", chunks)
    return plan, Runner(plan, ops[0].dtype, None, engine.entry)


@pytest.mark.parametrize("eq,shapes,indices,chunks", [
    ("ij,jk,kl->il", [(7, 9), (9, 10), (10, 5)], "ijk", (3, 4, 1)),     # output, summed; last chunks shorter
    ("ii,ij->j", [(7, 7), (7, 4)], "ij", (3, 2)),                      # a chunked index repeated in one operand
    ("abc,cde,efa->bdf", [(5, 4, 5), (5, 4, 3), (3, 2, 5)], "ace", (2, 1, 2)),
    ("ab,bc,cx,xy,yd->ad", [(3, 3), (3, 3), (3, 7), (7, 7), (7, 3)], "x", (3,)),   # a hoisted step beside
])
def test_chunked_slices_are_exact(eq, shapes, indices, chunks):
    ops = _operands(shapes)
    plan, runner = _chunked(eq, ops, indices, chunks)
    s = plan.slicing
    sizes = [plan.graph.sizes[i] for i in s.indices]
    assert s.chunks == chunks and s.num_slices == math.prod(-(-d // c) for d, c in zip(sizes, chunks))
    # every value of every sliced index is in exactly one slice
    covered = [sorted(v for k in range(s.num_slices) for v in range(*(lambda w: (w[0], w[0] + w[1]))(s.windows(k)[j])))
               for j in range(len(sizes))]
    assert all(c == sorted(list(range(d)) * (s.num_slices // -(-d // ch))) for c, d, ch in zip(covered, sizes, chunks))
    assert_close(runner(ops), reference(eq, *ops), torch.float64, extent=100)
    # a chunked index stays in the slice's equation at its chunk size; a one-value index leaves it
    inner = s.inner.graph
    for name, c in zip(indices, chunks):
        assert (name in inner.names) == (c > 1) and (c == 1 or inner.sizes[inner.names.index(name)] == c)


def test_the_live_bound_counts_the_chunk_size():
    ops = _operands([(12, 10), (10, 12)])
    plan, _ = _chunked("ij,jk->ik", ops, "i", (4,))
    # i in chunks of 4: the slice's result is 4 x 12, its operand 4 x 10, both copied for mm
    assert plan.slicing.live == live_peak(plan.slicing.inner.steps, plan.slicing.inner.graph.sizes, 2)
    assert plan.slicing.live >= 4 * 12 + 4 * 10 + 10 * 12
    assert plan.largest_intermediate == 4 * 12


def test_cost_model_prefers_chunks_to_single_values():
    # 64-wide indices: meeting the limit needs a fraction of i or k, not one value at a time.
    ops = _operands([(64, 48), (48, 64)])
    limit = 64 * 64
    info = einc.explain("ij,jk->ik", *ops, memory_limit=limit)
    s = info.slicing
    assert s is not None and s.live <= limit and s.bound == "live"
    assert any(c > 1 for c in s.chunks) and s.num_slices < 16
    # the same indices one value at a time: many more slices, a higher estimate
    single, _ = _chunked("ij,jk->ik", ops, info.graph.term(s.indices), (1,) * len(s.indices), limit)
    assert single.slicing.num_slices > 4 * s.num_slices and single.slicing.seconds > s.seconds
    # no chunk is smaller than the bound forces: the next larger one breaks it or costs more
    from einc.planner.slicing import _larger_chunks
    for k, (i, c) in enumerate(zip(s.indices, s.chunks)):
        larger = _larger_chunks(info.graph.sizes[i], c)
        chunks = s.chunks[:k] + (larger[0],) + s.chunks[k + 1:]
        if larger[0] < info.graph.sizes[i]:
            wider, _ = _chunked("ij,jk->ik", ops, info.graph.term(s.indices), chunks, limit)
            assert wider.slicing.live > limit or wider.slicing.seconds >= s.seconds
    assert_close(einc.einsum("ij,jk->ik", *ops, memory_limit=limit), reference("ij,jk->ik", *ops), torch.float64,
                 extent=48)
    text = str(info)
    assert " in chunks of " in text and "Estimated time:" in text and "per-slice overhead" in text
    assert info.to_dict()["slicing"]["chunks"] == list(s.chunks)


def test_the_estimate_counts_per_slice_steps_and_hoisted_steps_once():
    from einc.planner import slicecost
    eq = "ab,bc,cx,xy,yd->ad"
    ops = _operands([(3, 3), (3, 3), (3, 30), (30, 30), (30, 3)])
    plan, _ = _chunked(eq, ops, "x", (10,))
    s = plan.slicing
    cost = slicecost.EXECUTOR_COSTS[slicecost.PLANNING]
    # ab,bc runs once; the 3 other steps run in each of the 3 slices, each slice one step more
    assert s.num_slices == 3
    assert s.overhead_seconds == pytest.approx(3 * (3 + 1) * cost.step_seconds)
    assert s.seconds == pytest.approx(s.flops * cost.flop_seconds + 1 * cost.step_seconds + s.overhead_seconds)
    assert s.unsliced_seconds == pytest.approx(s.unsliced_flops * cost.flop_seconds + 4 * cost.step_seconds)
    for name, c in slicecost.EXECUTOR_COSTS.items():        # each executor's figures (Triton's for CUDA)
        total, fixed, unsliced = s.estimate(name)
        assert fixed == pytest.approx(3 * 4 * c.step_seconds)
        assert total == pytest.approx(s.flops * c.flop_seconds + c.step_seconds + fixed)
        assert unsliced == pytest.approx(s.unsliced_flops * c.flop_seconds + 4 * c.step_seconds)
    assert s.estimate("triton") != s.estimate("torch")
    # the steps holding x split their flops over the slices; those after x is summed repeat per slice
    per_slice = [st for st in plan.steps if 3 not in set().union(*st.inputs)][1:]      # ab,bc (hoisted) aside
    # and each slice's 3x3 result is added into the accumulator (x is summed)
    assert s.flops == s.unsliced_flops + 2 * sum(st.flops for st in per_slice) + 3 * 9
    assert s.overhead == s.flops / 6048


def test_max_input_bounds_each_intermediate_as_opt_einsum_does():
    import opt_einsum
    eq, ops = _grid()
    info = einc.explain(eq, *ops, memory_limit="max_input")
    biggest = max(o.numel() for o in ops)
    s = info.slicing
    assert s is not None and s.bound == "intermediate" and s.memory_limit == biggest
    assert info.largest_intermediate <= biggest
    assert s.seconds <= 3 * s.unsliced_seconds      # a few slices, not hundreds of thousands
    assert "opt_einsum's meaning" in str(info)
    out = einc.einsum(eq, *ops, memory_limit="max_input")
    expected = opt_einsum.contract(eq, *ops, memory_limit="max_input", backend="torch")
    assert_close(out, reference(eq, *ops), torch.float64, extent=4 ** 8)
    torch.testing.assert_close(out, expected)
    # where opt_einsum's path keeps every intermediate within the largest input: not sliced
    small = _operands([(6, 7), (7, 8), (8, 6)])
    assert einc.explain("ab,bc,cd->ad", *small, memory_limit="max_input").slicing is None


def test_a_limit_that_cannot_pay_raises_naming_a_workable_limit():
    import time

    from einc.errors import EincError, MemoryLimitError
    eq, ops = _grid()
    einc.cache_clear()
    t = time.perf_counter()
    with pytest.raises(MemoryLimitError) as caught:
        einc.einsum(eq, *ops, memory_limit=64)
    assert time.perf_counter() - t < 20
    e = caught.value
    assert isinstance(e, ValueError) and isinstance(e, EincError)
    text = str(e)
    info = einc.explain(eq, *ops, memory_limit=64)      # explain shows the plan, and the refusal
    s = info.slicing
    assert f"{s.num_slices} slices, estimated at" in text and s.seconds > 100 * s.unsliced_seconds
    assert "Refused:  einsum raises MemoryLimitError" in str(info)
    suggested = int(text.split("estimated within 2x of the unsliced time is memory_limit=")[1].split(";")[0]
                    .split(" ")[0])
    assert (suggested == s.unsliced_live) == ("what this path holds unsliced" in text)
    assert suggested > 64
    ok = einc.explain(eq, *ops, memory_limit=suggested).slicing
    assert ok is None or ok.seconds <= 2 * ok.unsliced_seconds
    if suggested // 2 > 64:          # the smallest power of two that does on this path: half of it does not
        half = einc.explain(eq, *ops, memory_limit=suggested // 2, optimize=[tuple(c) for c in info.path]).slicing
        assert half is not None and half.seconds > 2 * half.unsliced_seconds
    assert_close(einc.einsum(eq, *ops, memory_limit=suggested), reference(eq, *ops), torch.float64, extent=4 ** 8)


def test_the_refusal_threshold_and_its_switch(monkeypatch):
    from einc.errors import ConfigError, MemoryLimitError
    from einc.planner import slicecost
    ops = _operands([(8, 9), (9, 10), (10, 7)])
    eq = "ij,jk,kl->il"
    monkeypatch.setattr(slicecost, "FLOOR_SECONDS", 0.0)        # 5040 slices: far over 100x, but fast
    einc.cache_clear()
    with pytest.raises(MemoryLimitError, match="5040 slices"):
        einc.einsum(eq, *ops, memory_limit=1)
    monkeypatch.setenv("EINC_SLICE_OVERHEAD", "off")
    einc.cache_clear()
    assert_close(einc.einsum(eq, *ops, memory_limit=1), reference(eq, *ops), torch.float64, extent=90)
    for large in ("100000000", "1e9", "None", "INF"):      # an exponent too; no bound in any case
        monkeypatch.setenv("EINC_SLICE_OVERHEAD", large)
        einc.cache_clear()
        assert_close(einc.einsum(eq, *ops, memory_limit=1), reference(eq, *ops), torch.float64, extent=90)
    monkeypatch.setenv("EINC_SLICE_OVERHEAD", "lots")
    einc.cache_clear()
    with pytest.raises(ConfigError, match="EINC_SLICE_OVERHEAD"):
        einc.einsum(eq, *ops, memory_limit=1)
    einc.cache_clear()


def test_an_interrupt_leaves_out_and_the_cache_untouched(monkeypatch):
    from einc.runtime.sliced import Runner
    ops = _operands([(8, 9), (9, 10), (10, 7)])
    eq = "ij,jk,kl->il"
    einc.cache_clear()
    assert einc.explain(eq, *ops, memory_limit=20).slicing.num_slices > 2
    original, calls = Runner.add, []

    def interrupted(self, acc, operands, start, stop):
        original(self, acc, operands, start, start + 1)      # the first slice is written into acc
        calls.append(start)
        raise KeyboardInterrupt
    monkeypatch.setattr(Runner, "add", interrupted)
    out = torch.full((8, 7), 5.0, dtype=torch.float64)
    with pytest.raises(KeyboardInterrupt):
        einc.einsum(eq, *ops, memory_limit=20, out=out)
    assert calls == [0] and torch.equal(out, torch.full((8, 7), 5.0, dtype=torch.float64))
    monkeypatch.setattr(Runner, "add", original)
    einc.einsum(eq, *ops, memory_limit=20, out=out)          # the cached entry runs every slice next time
    assert_close(out, reference(eq, *ops), torch.float64, extent=90)


def test_long_runs_report_progress_to_the_log_or_a_terminal(monkeypatch, caplog):
    import io
    import logging

    from einc.runtime import sliced
    ops = _operands([(8, 9), (9, 10), (10, 7)])
    eq = "ij,jk,kl->il"
    einc.cache_clear()
    n = einc.explain(eq, *ops, memory_limit=20).slicing.num_slices
    einc.einsum(eq, *ops, memory_limit=20)
    assert not [r for r in caplog.records if r.name == "einc"]      # a short run says nothing
    monkeypatch.setattr(sliced, "PROGRESS_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="einc"):
        out = einc.einsum(eq, *ops, memory_limit=20)
    lines = [r.getMessage() for r in caplog.records if r.name == "einc"]
    assert lines and f"{n} slices" in lines[0] and f"{n} / {n} slices" in lines[-1]
    assert_close(out, reference(eq, *ops), torch.float64, extent=90)

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    einc.einsum(eq, *ops, memory_limit=20)
    assert f"0/{n} [" in terminal.getvalue() and "slice/s" in terminal.getvalue()     # tqdm's bar, on stderr


def test_the_suggested_limit_slices_where_the_flops_outweigh_the_overhead():
    from einc.errors import MemoryLimitError
    ops = _operands([(300, 300), (300, 300)])
    eq = "ij,jk->ik"
    einc.cache_clear()
    with pytest.raises(MemoryLimitError) as caught:
        einc.einsum(eq, *ops, memory_limit=1)           # every index to one value: 27M slices
    text = str(caught.value)
    suggested = int(text.split("is memory_limit=")[1].split(";")[0].split(" ")[0])
    s = einc.explain(eq, *ops, memory_limit=suggested).slicing
    # big slices: this network can be sliced within 2x, below what its path holds unsliced
    assert s is not None and suggested < s.unsliced_live and "holds unsliced" not in text
    assert s.live <= suggested and s.seconds <= 2 * s.unsliced_seconds and any(c > 1 for c in s.chunks)
    half = einc.explain(eq, *ops, memory_limit=suggested // 2).slicing
    assert half.seconds > 2 * half.unsliced_seconds or half.live > suggested // 2
    assert_close(einc.einsum(eq, *ops, memory_limit=suggested), reference(eq, *ops), torch.float64, extent=300)


def test_explain_after_a_sliced_run_with_steps_hoisted_out_of_the_slices():
    """A step that holds no sliced index runs once per call, apart from the slices; explain
    after the run still gives one row per step of the plan, and to_dict each step its own
    backend, rather than an IndexError or backends on the wrong steps."""
    from networks import grid
    eq_grid = grid(4, 5, 4)[0]
    cases = [("abc,cd,de->abe", [(6, 7, 8), (8, 9), (9, 5)], 200),
             (eq_grid, [(4,) * len(t) for t in eq_grid.split("->")[0].split(",")], "max_input")]
    for eq, shapes, limit in cases:
        ops = _operands(shapes)
        einc.einsum(eq, *ops, memory_limit=limit)
        info = einc.explain(eq, *ops, memory_limit=limit)
        assert info.slicing is not None
        assert len(info.backends) == len(info.steps) == len(info.to_dict()["steps"])
        assert str(info).count("\n") > len(info.steps)


@pytest.mark.parametrize("name", ["uint16", "uint32", "uint64"])
@pytest.mark.parametrize("eq,shapes", [("ii->i", [(4, 4)]), ("ij->ji", [(4, 4)]), ("i,j->ij", [(4,), (4,)])])
def test_sliced_unsigned_integers_wider_than_a_byte(name, eq, shapes):
    """torch has no addition for uint16/32/64: their slices add up in int64, to the same bits."""
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip(f"torch {torch.__version__} has no {name}")
    ops = [torch.randint(0, 100, s, generator=torch.Generator().manual_seed(1)).to(dtype) for s in shapes]
    want = torch.einsum(eq, *ops)
    got = einc.einsum(eq, *ops, memory_limit=2)
    assert einc.explain(eq, *ops, memory_limit=2).slicing is not None
    assert got.dtype == want.dtype and torch.equal(got.to(torch.int64), want.to(torch.int64))


@pytest.mark.parametrize("name,value", [("uint16", 300), ("uint32", 70000)])
@pytest.mark.parametrize("eq,shapes", [("ef,acf->a", [(2, 2), (3, 2, 2)]), ("ij,jk->", [(3, 4), (4, 2)])])
def test_sliced_wide_unsigned_products_do_not_wrap(name, value, eq, shapes):
    """Where the result is int64, uint16/32 operands are contracted in int64 in a slice too:
    a slice that is a bare product (every index sliced) multiplied two uint16 300s in uint16
    (24464) before the int64 accumulator saw them (195712 for 720000)."""
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip(f"torch {torch.__version__} has no {name}")
    ops = [torch.full(s, value).to(dtype) for s in shapes]
    want = torch.einsum(eq, *[o.to(torch.int64) for o in ops])
    assert torch.equal(torch.einsum(eq, *ops), want)        # torch's own result is exact here
    for limit in (1, 2, None):
        got = einc.einsum(eq, *ops, memory_limit=limit)
        assert got.dtype == torch.int64 and torch.equal(got, want), limit
    assert einc.explain(eq, *ops, memory_limit=1).slicing is not None


def test_a_max_input_refusal_names_max_input():
    """The refusal of a slicing that costs too much names the limit as the caller gave it:
    'max_input' (with the number it stood for), not only the number."""
    from types import SimpleNamespace

    from einc.planner import slicecost
    costly = dict(memory_limit=200, num_slices=40000, estimate=lambda executor: (50.0, 40.0, 0.1))
    live = slicecost.refusal(SimpleNamespace(bound="live", **costly))
    given = slicecost.refusal(SimpleNamespace(bound="intermediate", **costly))
    assert live.startswith("memory_limit=200 elements is met only by 40000 slices")
    assert given.startswith("memory_limit='max_input' (each intermediate within the largest operand or the output, "
                            "200 elements) "
                            "is met only by 40000 slices")


@pytest.mark.parametrize("eq,shapes", [("i,j,k->ijk", [(16,), (16,), (16,)]), ("bi,bj,bk->bijk", [(32, 8)] * 3),
                                       ("ii,ij,jk->k", [(6, 6), (6, 3), (3, 2)]),
                                       ("ij,jk,kl->il", [(8, 9), (9, 10), (10, 7)])])
def test_max_input_counts_the_output_and_repeated_indices_as_opt_einsum(eq, shapes):
    """opt_einsum's 'max_input' is the largest of the operands' and the output's sizes (a
    repeated index counted as often as it appears), and so is einc's: the operands' alone
    (``ii`` as n) would cut an outer product into 256 slices (n=16; a MemoryLimitError from
    n=160) where opt_einsum runs one contraction."""
    import opt_einsum as oe
    ops = _operands(shapes)
    info = einc.explain(eq, *ops, memory_limit="max_input")
    assert info.slicing is None             # a path keeps every intermediate within it
    assert_close(einc.einsum(eq, *ops, memory_limit="max_input"), reference(eq, *ops), torch.float64)
    seen = []

    class Recording(oe.paths.PathOptimizer):
        def __call__(self, inputs, output, size_dict, memory_limit=None):
            seen.append(memory_limit)
            return oe.paths.greedy(inputs, output, size_dict, memory_limit)
    optimizer = Recording()
    _, theirs = oe.contract_path(eq, *ops, optimize=optimizer, memory_limit="max_input")
    einc.einsum(eq, *ops, optimize=optimizer, memory_limit="max_input")
    assert len(seen) == 2 and seen[1] == seen[0] == max([o.numel() for o in ops] + [math.prod(
        info.graph.sizes[i] for i in info.graph.output)])



@pytest.mark.parametrize("executor", ["torch", "kernels"])
@pytest.mark.parametrize("equation,operands,limit", [
    ("ij,jk->ik", lambda: (torch.full((2, 1000), 30.), torch.cat([torch.full((500, 3), 30.),
                                                                  torch.full((500, 3), -30.)])), 1000),
    ("i,i->", lambda: (torch.full((1000,), 300.), torch.cat([torch.full((500,), 300.),
                                                             torch.full((500,), -300.)])), 100),
    (",aa->", lambda: (torch.tensor(300.), torch.diag(torch.tensor([300., -300., -100.]))), 1),
    ("b,a->a", lambda: (torch.tensor([300., -300., 200.]), torch.full((4,), 300.)), 1),
])
def test_float16_slices_reach_the_accumulator_unrounded(equation, operands, limit, executor, request):
    """Each slice of a float16 sum contracts in float32 and reaches the float32 accumulator
    unrounded: a slice's part rounded to float16 may overflow where the whole does not, and
    +inf - inf across slices gives NaN where torch.einsum gives 0; a slice that multiplies
    what torch sums first would overflow in its product (``,aa->``: NaN for -30000)."""
    device = request.getfixturevalue("kernel_device") if executor == "kernels" else torch.device("cpu")
    ops = [o.half().to(device) for o in operands()]
    assert einc.explain(equation, *ops, memory_limit=limit).slicing is not None
    got = einc.einsum(equation, *ops, memory_limit=limit)
    want = torch.einsum(equation, *[o.cpu() for o in ops])
    assert got.dtype == torch.float16 and torch.equal(got.cpu(), want), (got, want)
    assert torch.equal(want, torch.einsum(equation, *[o.cpu().double() for o in ops]).half())


@pytest.mark.parametrize("eq,shapes,limit,other", [
    ("ab,adf,bfe,bda,db->def", [(32, 8), (32, 32, 4), (8, 4, 8), (8, 32, 32), (32, 8)], 4096, {1: 1, 2: 11}),
    ("cab,cbd,cda->bc", [(8, 4, 32), (8, 32, 2), (8, 2, 4)], 512, {0: 3, 3: 1}),
])
def test_the_slicer_finds_the_cheaper_mix_of_summed_and_kept_indices(eq, shapes, limit, other):
    """Counting the adds into the accumulator steered the greedy cuts away from summed
    indices, to a slicing the model itself prices above a mix that also fits (1.4x slower
    measured): the cuts are also guided by the model without the adds."""
    from einc.planner import slicing
    p = einc.explain(eq, *shapes, memory_limit=limit).plan
    model = slicing._Model(build_plan(p.graph, eq, Options.of(p.path)), "live")
    chosen = dict(zip(p.slicing.indices, p.slicing.chunks))
    assert model.peak(other, limit)[0] <= limit and model.peak(chosen, limit)[0] <= limit
    assert model.cost(chosen)[1] <= model.cost(other)[1] * 1.0001


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_slices_keep_to_the_bound(dtype, monkeypatch):
    """Each slice of a 16-bit float plan contracts in float32; the copies are its steps'
    inputs, made as each step reads them (all of a slice's operand views copied up front
    held 15072 elements at a limit of 4096 on an 8-matrix chain)."""
    monkeypatch.setenv("EINC_BACKEND", "torch")
    einc.cache_clear()
    ops = [o.to(dtype) for o in _operands([(6, 6)] * 8)]
    eq, path, limit = "ab,bc,cd,de,ef,fg,gh,hi->ai", [(0, 1)] * 7, 36
    s = einc.explain(eq, *ops, optimize=path, memory_limit=limit).slicing
    assert s is not None and s.live <= limit
    einc.einsum(eq, *ops, optimize=path, memory_limit=limit)       # plan and cache outside the mode
    with _Live() as sliced:
        out = einc.einsum(eq, *ops, optimize=path, memory_limit=limit)
    assert out.dtype == dtype
    assert_close(out, reference(eq, *ops), dtype, extent=6 ** 7)
    assert sliced.peak <= s.live + 2 * out.numel()          # besides the float32 accumulator and the result


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_slicing_only_kept_indices_accumulates_in_the_results_dtype(dtype):
    """Each element is one slice's: a float32 accumulator beside the float16 result (3x the
    result's memory, 51 MiB against torch's 17 for ij,jk->ik at 3000 x 64 x 3000) buys
    nothing; a sliced summed index still sums in float32."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(300, 8, generator=g).to(dtype), torch.randn(8, 300, generator=g).to(dtype)
    info = einc.explain("ij,jk->ik", a, b, memory_limit=20000)
    assert info.slicing is not None and not set(info.slicing.indices) - set(info.graph.output)
    einc.einsum("ij,jk->ik", a, b, memory_limit=20000)
    with _Allocations() as seen:
        out = einc.einsum("ij,jk->ik", a, b, memory_limit=20000)
    assert out.dtype == dtype and max(n for n, _ in seen.sizes) <= out.numel()
    assert [n for n, _ in seen.sizes].count(out.numel()) == 1      # the result, no accumulator beside it
    assert_close(out, reference("ij,jk->ik", a, b), dtype, extent=8)


def test_explain_says_why_16_bit_float_slices_run_the_torch_executor(monkeypatch):
    monkeypatch.setenv("EINC_BACKEND", "triton")
    a, b = torch.randn(32, 8).half(), torch.randn(8, 32).half()
    info = einc.explain("ij,jk->ik", a, b, memory_limit=300)
    assert info.slicing is not None and set(info.backends) == {"torch"}
    assert "contracts in float32" in info.note and "could not be built" not in info.note


def test_more_than_sixteen_scalars_under_a_limit():
    # the limited search's trials are timed per index: with none at all it divided by zero
    n = 17
    ops = [torch.tensor(2.0, dtype=torch.float64)] * n
    eq = ",".join([""] * n) + "->"
    for limit in (1000, "max_input"):
        assert einc.einsum(eq, *ops, memory_limit=limit).item() == 2.0 ** n
    assert einc.contract_path(eq, *[()] * n, memory_limit=1000)[1].opt_cost >= 0


def test_an_operands_sum_counts_what_it_keeps_not_the_operand():
    # i,j->i sums b over j before the product: one element, not b's 10,000 (counted as a
    # copy of b, the limit of 100 sliced j into 105 slices; the sum reads b where it is)
    a, b = torch.randn(4, dtype=torch.float64), torch.randn(10000, dtype=torch.float64)
    info = einc.explain("i,j->i", a, b, memory_limit=100)
    assert info.slicing is None, info
    assert torch.allclose(einc.einsum("i,j->i", a, b, memory_limit=100), a * b.sum())


LONE_SUMS = [("i,j->i", [(4,), (8,)], "j"), ("j,i->i", [(8,), (4,)], "j"), ("ik,jk->ik", [(4, 4), (8, 4)], "j"),
             ("ijl,k->k", [(3, 8, 2), (4,)], "jl"), ("i,k,kj->ik", [(4,), (3,), (3, 8)], "j")]


@pytest.mark.parametrize("eq, shapes, lone", LONE_SUMS, ids=[e for e, _, _ in LONE_SUMS])
def test_an_index_one_operand_alone_sums_is_never_sliced(eq, shapes, lone):
    # torch.einsum (and einc unsliced) sums it in its operand before any product: an inf
    # of another operand meets the whole sum (inf * 7: inf); a slice of it multiplied the
    # inf by one 0 of the sum's terms first (NaN)
    values = torch.tensor([1.0, 0.0, -0.0, 2.0, 1.0, float("inf"), 1.0, 3.0])
    ops = [values.roll(k).repeat(math.prod(s) // 8 + 1)[:math.prod(s)].reshape(s) for k, s in enumerate(shapes)]
    want = torch.einsum(eq, *ops)
    assert torch.equal(einc.einsum(eq, *ops).isnan(), want.isnan())
    for limit in (1, 2, 4, 8, 16):
        info = einc.explain(eq, *ops, memory_limit=limit)
        assert info.slicing is None or not set(info.graph.term(info.slicing.indices)) & set(lone), (limit, info)
        out = einc.einsum(eq, *ops, memory_limit=limit)
        assert torch.equal(out.isnan(), want.isnan()), (limit, out, want)
        assert torch.equal(out.nan_to_num(), want.nan_to_num()), (limit, out, want)
