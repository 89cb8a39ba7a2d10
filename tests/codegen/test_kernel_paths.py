"""The generated kernels' paths, each checked against the float64 oracle under Triton's
interpreter: the batch index carried in a 3-D tile, swapped operands, sums within one
operand before the product, split-K and split reductions (deterministic: the same bits
run to run), for every kernel dtype, with sizes 0, 1 and sizes no block divides."""

import pytest
import torch
from oracle import assert_close, reference

import einc
from einc.codegen import render
from einc.codegen.lower import lower_program
from einc.planner.equation import parse
from einc.planner.graph import build
from einc.planner.plan import build_plan
from einc.runtime import triton_executor
from einc.runtime.triton_executor import autotune, loader

pytest.importorskip("triton")
pytestmark = pytest.mark.interpreter
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.fixture
def module(monkeypatch, tmp_path):
    """``module(equation, shapes, dtype, strides=None)``: the generated module of a one-step
    plan (its kernel lowered for ``strides``), loaded afresh."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    einc.cache_clear()
    triton_executor.use_interpreter()

    def load(equation, shapes, dtype=torch.float64, strides=None):
        plan = build_plan(build(parse(equation), shapes), equation)
        (kernel,) = lower_program(plan, triton_executor.dtype_name(dtype), shapes, strides)
        return kernel, loader.load(kernel.name, render(kernel))
    yield load
    einc.cache_clear()


def operands(shapes, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]


def check(m, equation, ops, dtype, extent=64, **kw):
    out = m.launch(*ops, **kw)
    expected = reference(equation, *ops) * kw.get("scale", 1.0)
    assert out.shape == expected.shape and out.dtype == dtype and out.is_contiguous()
    assert_close(out, expected, dtype, extent=extent)
    return out


def the_layout(m):
    (known,) = m.launcher.layouts.values()
    return known


CASES = [  # (equation, shapes, what the lowering must do)
    ("ikc,jkc->ijc", [(5, 19, 6), (7, 19, 6)], "tile"),           # af2: c, unit stride everywhere, in the tile
    ("ibnd,jbnd->ijbn", [(5, 3, 4, 17), (6, 3, 4, 17)], "tile"),   # txl: C's unit index n is a batch index
    ("acb,ade->dceb", [(9, 3, 5), (9, 4, 3)], "swap"),             # C's unit index b is A's: A, B swapped
    ("abc,cd->ad", [(6, 5, 7), (7, 9)], "lonely"),                 # b summed in A only
    ("ab,bcd->ad", [(6, 7), (7, 5, 9)], "lonely"),                 # c summed in B only
    ("bij,bjk->b", [(3, 6, 70), (3, 70, 5)], "lonely"),            # a dot: i and k summed before the product
    ("ij,kl->ik", [(4, 7), (5, 6)], "lonely"),                     # an outer product of two sums
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("equation,shapes,kind", CASES, ids=[c[0] for c in CASES])
def test_layout_paths(module, equation, shapes, kind, dtype):
    k, m = module(equation, shapes, dtype)
    if kind == "tile":
        assert len(k.group("t")) == 1 and "tl.dot(a, b, acc" in render(k)
    elif kind == "swap":
        assert k.params == ("b", "a")
    else:
        assert k.group("ka") or k.group("kb")
    ops = operands(shapes, dtype)
    check(m, equation, ops, dtype)
    check(m, equation, [o.transpose(0, -1).contiguous().transpose(0, -1) for o in ops], dtype)   # other strides
    check(m, equation, ops, dtype, scale=0.5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 1100), (1100, 2)]),          # K-dominant: split-K
    ("bij,bjk->bik", [(2, 3, 700), (2, 700, 5)]),   # batched, K not a multiple of the slice
    ("ikc,jkc->ijc", [(3, 600, 2), (2, 600, 2)]),   # the 3-D tile, split
    ("bij,bij->b", [(2, 70, 90), (2, 70, 90)]),     # few outputs, long K: split reduction
    ("ij->j", [(4500, 3)]),                         # column sum, few columns
])
def test_split_k_is_right_and_deterministic(module, equation, shapes, dtype):
    _, m = module(equation, shapes, dtype)
    ops = operands(shapes, dtype, seed=3)
    first = check(m, equation, ops, dtype, extent=max(max(s) for s in shapes))
    assert the_layout(m).split > 1                                   # the split path ran
    for _ in range(2):
        again = m.launch(*ops)
        assert torch.equal(again.view(torch.uint8) if again.dtype != torch.bool else again,
                           first.view(torch.uint8))                  # the same bits
    scaled = m.launch(*ops, scale=2.0)
    assert_close(scaled, 2.0 * reference(equation, *ops), dtype, extent=max(max(s) for s in shapes))


def test_short_k_is_not_split(module):
    _, m = module("ij,jk->ik", [(40, 30), (30, 20)])
    m.launch(*operands([(40, 30), (30, 20)], torch.float64))
    assert the_layout(m).split == 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(1, 1), (1, 1)]),
    ("ij,jk->ik", [(17, 0), (0, 3)]),              # K = 0: zeros
    ("ij,jk->ik", [(0, 5), (5, 3)]),               # no output
    ("ikc,jkc->ijc", [(1, 1, 1), (1, 1, 1)]),
    ("ikc,jkc->ijc", [(2, 0, 3), (2, 0, 3)]),
    ("abc,cd->ad", [(2, 0, 3), (3, 4)]),           # a one-operand sum over nothing
    ("bij,bij->b", [(3, 0, 2), (3, 0, 2)]),
    ("bij,bij->b", [(1, 1, 1), (1, 1, 1)]),
    ("ij->j", [(0, 4)]),
    ("i,j->ij", [(1,), (0,)]),
    ("ij,jk->ik", [(0, 1200), (1200, 2)]),
    ("ij,jk->ik", [(1, 1300), (1300, 1)]),         # split-K with one output
])
def test_sizes_zero_and_one(module, equation, shapes, dtype):
    _, m = module(equation, shapes, dtype)
    check(m, equation, operands(shapes, dtype), dtype, extent=max(2, max(max(s, default=1) for s in shapes)))


def test_einsum_runs_these_through_kernels(monkeypatch, tmp_path):
    """Through einc.einsum: operands as given (strided, swapped roles, tile batch) with no
    fallback to torch."""
    import warnings
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EINC_BACKEND", "triton")
    monkeypatch.setenv("EINC_SELECT", "kernel")
    einc.cache_clear()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")
        for equation, shapes, _ in CASES:
            ops = operands(shapes, torch.float32, seed=5)
            ops[0] = ops[0].transpose(0, 1).contiguous().transpose(0, 1)
            assert_close(einc.einsum(equation, *ops), reference(equation, *ops), torch.float32)
            assert all(b.startswith("triton ") for b in einc.explain(equation, *ops).backends)
    einc.cache_clear()


def test_configs_are_pruned_by_extent_and_shared_memory(module):
    _, m = module("ij,jk->ik", [(16, 32), (32, 16)], torch.bfloat16)
    assert any(c.kwargs == {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64} for c in m.launcher.configs)
    sizes = dict(T=1, K_SPLIT=4096)
    kept = m.launcher.prune(m.launcher.configs, {}, M=16, N=4096, K=4096, **sizes)
    assert kept and all(c.kwargs["BLOCK_M"] <= 16 for c in kept)             # no 128-row tile for 16 rows
    assert len(m.launcher.prune(m.launcher.configs, {}, M=4096, N=4096, K=4096, **sizes)) > len(kept)
    assert m.launcher.prune(m.launcher.configs, {}, M=1, N=1, K=1, **sizes)                  # never empty
    _, m64 = module("ij,jk->ik", [(16, 32), (32, 16)], torch.float64)
    # fp64 stages fit shared memory
    for c in m64.launcher.prune(m64.launcher.configs, {}, M=4096, N=4096, K=4096, **sizes):
        assert c.num_stages * 8 * c.kwargs["BLOCK_K"] * (c.kwargs["BLOCK_M"] + c.kwargs["BLOCK_N"]) <= 200 * 1024
    assert autotune.OPTIONS["cache_results"] is True                         # tuning persists (triton >= 3.2)


def test_split_thresholds(module):
    """Split-K where K dominates or tiles do not fill the GPU; split reductions for few
    outputs; never a split whose partial sums would pass 2^31 elements."""
    _, m = module("ij,jk->ik", [(16, 32), (32, 16)])
    splits, chunk = m.launcher.split(1, 8192, True, 132, 64 * 64)       # matrix_chain_4 step 1: one 128x128 tile
    assert splits > 8 and chunk % 256 == 0 and (splits - 1) * chunk < 8192 <= splits * chunk
    assert m.launcher.split(64 * 64 * 8, 4096, False, 132, 2**24) == (1, 4096)      # a big GEMM: no split
    assert m.launcher.split(1, 100, True, 132, 1) == (1, 100)                       # short K: no split
    assert m.launcher.split(1, 2**20, True, 132, 2**30)[0] == 2
    assert m.launcher.split(1, 2**20, True, 132, 2**31)[0] == 1
    _, r = module("bij,bij->b", [(2, 3, 4), (2, 3, 4)])
    assert r.launcher.split(1, 2048 * 2048, False, 132, 64)[0] == 64               # batched_frobenius: 64 outputs
    assert r.launcher.split(64, 65536, False, 132, 4096)[0] > 1                    # column_sum: 4096 outputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("equation,shapes", [
    ("abc,bcd->ad", [(5, 3, 7), (3, 7, 6)]),        # K = (b, c): one stride in A and B when contiguous
    ("bij,bij->b", [(3, 5, 9), (3, 5, 9)]),         # a reduction over (i, j)
])
def test_several_k_indices_merge_where_the_strides_allow(module, equation, shapes, dtype):
    _, m = module(equation, shapes, dtype)
    ops = operands(shapes, dtype, seed=7)
    check(m, equation, ops, dtype)
    assert the_layout(m).meta["MERGED_K"] is True                     # pointers advance by one stride
    m.launcher.layouts.clear()
    check(m, equation, [o.transpose(-1, -2).contiguous().transpose(-1, -2) for o in ops], dtype)
    assert the_layout(m).meta["MERGED_K"] is False                    # the K indices split every iteration


PRESUMMED = [  # (equation, shapes, the operand whose indices its launch sums first)
    ("bij,bjk->bik", [(2, 3, 1), (2, 4, 5)], "b"),      # bcast_summed_left: A's j of size 1, B's j summed in B
    ("bi,bjk->bik", [(2, 3), (2, 4, 5)], "b"),          # j summed in B only, folded into K before
    ("ab,bcd->ad", [(6, 7), (7, 5, 9)], "b"),           # a matrix product: c summed in B only
    ("abc,cd->ad", [(6, 5, 7), (7, 9)], "a"),           # ... b summed in A only
    ("bij,bjk->b", [(3, 6, 70), (3, 70, 5)], "ab"),     # a dot: i and k summed first
    ("ij,kl->ik", [(4, 7), (5, 6)], "ab"),              # an outer product of two sums
    ("ab,bcd->ad", [(1, 7), (7, 3, 1)], "b"),           # sizes 1: nothing repeated, summed first all the same
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("equation,shapes,summed", PRESUMMED, ids=[f"{c[0]}-{c[1]}" for c in PRESUMMED])
def test_indices_summed_in_one_operand_are_summed_once_by_the_launch(module, monkeypatch, equation, shapes, summed,
                                                                      dtype):
    """Where an operand's own sums would be read again for many outputs, the launch sums
    them once (a torch sum) and the kernel never sees them; every size, stride and dtype
    (the threshold set to 0 here, so small shapes take that path)."""
    from einc.codegen import lower
    monkeypatch.setattr(lower, "PRESUM_WASTE", 0)
    k, m = module(equation, shapes, dtype)
    assert "".join(sorted(name for name, _ in k.presum)) == summed
    assert not k.group("ka") and not k.group("kb") and ".sum((" in render(k)
    ops = operands(shapes, dtype)
    check(m, equation, ops, dtype)
    check(m, equation, [o.transpose(0, -1).contiguous().transpose(0, -1) for o in ops], dtype)   # other strides
    check(m, equation, ops, dtype, scale=0.5)


def test_a_size_one_index_summed_in_one_operand_is_dropped_by_the_launch(module):
    """An index of size 1 summed in one operand only (a dimension broadcast against the
    other operand's) never reaches the kernel: a layout is set up on a view without it,
    and later launches, a lookup and a launch, pass the caller's tensor (the same memory);
    a 16-bit matrix product of plain groups gets its TMA variant; the answer is
    torch.einsum's in float64, first call and cache hit alike, for any strides; the module
    launched where that dimension is not of size 1 refuses, rather than answer wrong."""
    from einc.codegen import matmul_tma
    from einc.runtime.triton_executor.launch import dropped
    equation, shapes = "bij,bjk->bik", [(1, 96, 64), (4, 64, 80)]       # bcast_shared_left, small
    k, m = module(equation, shapes, torch.bfloat16)
    assert k.drop == (("a", (0,)),) and k.presum == () and not k.group("ka") and matmul_tma.eligible(k), k.groups
    launch = render(k).split("def launch(")[1].split("def screen(")[0]
    assert launch.count("dropped(") == 1 and "return launcher.first(key, (dropped(a, (0,)), b), scale)" in launch
    x = torch.randn(1, 96, 64)
    assert dropped(x, (0,)).data_ptr() == x.data_ptr() and dropped(x, (0,)).shape == (96, 64)
    for dtype in DTYPES:
        mod = m if dtype == torch.bfloat16 else module(equation, shapes, dtype)[1]
        ops = operands(shapes, dtype)
        first = check(mod, equation, ops, dtype)
        assert torch.equal(check(mod, equation, ops, dtype), first)             # the layout's cache hit
    ops = operands(shapes, torch.bfloat16)
    check(m, equation, [o.transpose(1, 2).contiguous().transpose(1, 2) for o in ops], torch.bfloat16)
    with pytest.raises(ValueError, match="lowered for dimensions"):
        m.launch(torch.randn(4, 96, 64, dtype=torch.bfloat16), ops[1])


def test_only_sums_read_again_past_the_threshold_are_made_first():
    """The suite's ``bcast_summed_left`` at its gpu sizes sums B over j once, ahead of the kernel,
    rather than in the kernel for each of the 2048 values of i (A's j, of size 1, is dropped); at
    small sizes, where an operand has a repeated index, and in a matrix product of one tile of
    rows, the kernel does the sums itself."""
    def lowered(equation, shapes):
        plan = build_plan(build(parse(equation), shapes), equation)
        (kernel,) = lower_program(plan, "float32", shapes)
        return kernel
    big = lowered("bij,bjk->bik", [(32, 2048, 1), (32, 1024, 2048)])
    assert big.presum == (("b", (1,)),) and big.drop == (("a", (2,)),)          # A's j: size 1
    assert [len(op.dims) for op in big.inputs] == [2, 2]                             # A: b, i; B: b, k
    small = lowered("bij,bjk->bik", [(2, 30, 1), (2, 30, 40)])
    assert small.presum == () and small.drop == (("a", (2,)),)                      # B's j left to the kernel
    assert lowered("bjj,bk->bk", [(64, 1024, 1024), (64, 96)]).presum == ()          # a diagonal: left alone
    # a matrix product reads B's tile once per tile of rows: 8 rows are one tile, 4096 are 32
    assert lowered("ab,bcd->ad", [(8, 64), (64, 512, 256)]).presum == ()
    assert lowered("ab,bcd->ad", [(4096, 64), (64, 512, 256)]).presum == (("b", (1,)),)
