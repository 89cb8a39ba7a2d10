"""Layout-aware lowering: every tile a generated kernel loads or stores has a unit-stride
axis, over the suite's GPU variants (plans built from the suite's shapes and dtypes, with
contiguous operands as the suite runs them; no GPU needed)."""

import json
import math
from pathlib import Path

import pytest
import torch

from einc.codegen.ir import KERNEL_DTYPES, MATMUL
from einc.codegen.lower import lower_program
from einc.planner.equation import parse
from einc.planner.graph import build
from einc.planner.plan import build_plan
from einc.planner.strides import contiguous, index_strides

ROOT = Path(__file__).resolve().parents[2]
SUITE = json.loads((ROOT / "bench" / "suite.json").read_text())
GPU = [(w["id"], w["equation"], [tuple(s) for s in w["variants"]["gpu"]["shapes"]], w["variants"]["gpu"]["dtype"])
       for w in SUITE["workloads"] if w["variants"]["gpu"]["dtype"] in KERNEL_DTYPES]


def tiles(kernel):
    """``(tensor name, dims, tile axes)`` for each tensor the kernel loads or stores; an
    axis is a group of indices, slowest first."""
    g = kernel.group
    if kernel.kind == MATMUL:
        a, b = kernel.inputs
        return [(a.name, a.dims, [g("t"), g("m"), g("k")]),
                (b.name, b.dims, [g("t"), g("k"), g("nt"), g("n")]),
                ("c", kernel.output.dims, [g("t"), g("m"), g("nt"), g("n")])]
    axes = [g("o"), g("k")] if g("k") else [g("o")]
    return [(op.name, op.dims, axes) for op in kernel.inputs] + [("c", kernel.output.dims, [g("o")])]


def unit_axis(dims, strides, axes, sizes) -> bool:
    """Whether some tile axis runs along unit stride in this tensor: the fastest index of
    the axis that the tensor varies along (broadcast indices repeat an element) has stride 1."""
    if not any(s == 1 for s in strides.values()):
        return True                 # one element, or no unit stride to follow (a diagonal: a gather anyway)
    for axis in axes:
        varying = [i for i in axis if strides.get(i, 0) != 0]
        if varying and strides[varying[-1]] == 1:
            return True
    return False


def kernel_tiles(equation, shapes, dtype, strides=None):
    eq = parse(equation)
    plan = build_plan(build(eq, shapes), eq.text)
    sizes = plan.graph.sizes
    values = {v: (tuple(s), tuple(strides[v]) if strides else contiguous(s)) for v, s in enumerate(shapes)}
    out = []
    for s, (step, kernel) in enumerate(zip(plan.steps, lower_program(plan, dtype, shapes, strides))):
        operands = dict(zip(kernel.params, step.operands))      # kernel name -> value id
        result = tuple(sizes[i] for i in step.output)
        values[step.result] = (result, contiguous(result))
        for name, dims, axes in tiles(kernel):
            shape, st = values[step.result] if name == "c" else values[operands[name]]
            out.append((s, kernel, name, unit_axis(dims, index_strides(dims, shape, st, sizes), axes, sizes)))
    return out


# Two-operand permuted contractions (the suite's pairwise family) can leave a tile with no
# unit-stride axis: a group shared by two tensors has one's unit-stride index last and the
# other's inside.  A row or column index stranded so rides in the tile's T axis
# (``dbea,ec->abcd``: B's d, inside N) where K is short, or in a write-bound step leads a
# second N axis of the tile (``dega,gfbc->abcdef``: B's g, inside N = (f, g, e), ends
# ``nt`` = (f, g)).  A summed one, or one in a step with a long K, stays a gather: the
# moves made for them ran slower than the gather on the GPUs (bench/measured).
GATHERS = {     # the suite's steps left a gather on purpose: workload -> the stranded index's place
    "pw_ccsd_aebf_dfce": "summed",                  # B's f (kernel: d) inside K = (e, f)
    "perm_aebf_dfce_abcd": "summed",
    "pw_sum3_abcde_fedc": "summed",
    "pw_ccsd_aebf_fdec": "a column, K = 7744",
}


@pytest.mark.parametrize("wid,equation,shapes,dtype", GPU, ids=[g[0] for g in GPU])
def test_every_suite_kernel_tile_has_a_unit_stride_axis(wid, equation, shapes, dtype):
    """Every tile has a unit-stride axis but in :data:`GATHERS`, where one tile is a gather
    and the lowering made no move (its ``plain`` kernel is the default one)."""
    bad = [(s + 1, k, name) for s, k, name, ok in kernel_tiles(equation, shapes, dtype) if not ok]
    if wid not in GATHERS:
        assert not bad, f"{wid}: tiles with no unit-stride axis (step, kernel, tensor): {bad}"
        return
    assert len(bad) == 1, bad
    (_, k, _), = bad
    assert not any(k.group(g) for g in ("t", "nt")), k.groups
    eq = parse(equation)
    (p,) = lower_program(build_plan(build(eq, shapes), eq.text), dtype, shapes, unit_tiles=False)
    assert p.name == k.name


def test_the_suite_has_unit_stride_batch_and_output_layouts():
    """The walk covers the cases a gather would otherwise take: a batch index with unit stride
    in the result or the operands rides in the tile, and C's unit stride lies along N."""
    by_id = {g[0]: g for g in GPU}
    for wid in ("af2_triangle_mult_outgoing", "txl_rel_attn_scores"):
        _, equation, shapes, dtype = by_id[wid]
        (k,) = {k for _, k, _, _ in kernel_tiles(equation, shapes, dtype)}
        assert k.kind == MATMUL and len(k.group("t")) == 1
    _, equation, shapes, dtype = by_id["af2_outer_product_mean"]         # acb,ade->dceb: C's unit index b
    (k,) = {k for _, k, _, _ in kernel_tiles(equation, shapes, dtype)}
    assert k.output.dims[-1] in k.group("n") and k.params == ("b", "a")  # A and B swapped


def test_a_kernel_with_fixed_roles_fails_the_walk():
    """The check can fail: a kernel with groups in output order and fixed roles (a lowering
    that makes no move for the unit stride) has tiles with no unit-stride axis."""
    import dataclasses
    _, equation, shapes, dtype = next(g for g in GPU if g[0] == "af2_triangle_mult_outgoing")
    eq = parse(equation)
    plan = build_plan(build(eq, shapes), eq.text)
    (k,) = lower_program(plan, dtype, shapes)
    old = dataclasses.replace(k, groups=(("batch", k.group("t")), ("t", ()), ("m", k.group("m")), ("n", k.group("n")),
                                         ("k", k.group("k")), ("ka", ()), ("kb", ())))
    sizes = plan.graph.sizes
    st = index_strides(old.inputs[0].dims, shapes[0], contiguous(shapes[0]), sizes)
    assert not unit_axis(old.inputs[0].dims, st, tiles(old)[0][2], sizes)


def test_strided_operands_reorder_the_groups():
    """The order inside a group follows the operands' strides as given (a transposed
    operand puts its own unit-stride index last)."""
    shapes = [(4, 8, 16), (16, 6)]
    rows = kernel_tiles("abk,kn->abn", shapes, "float32")
    assert all(ok for *_, ok in rows)
    (k,) = {k for _, k, _, _ in rows}
    assert k.group("m") == (0, 1)                                   # contiguous: b fastest
    rows = kernel_tiles("abk,kn->abn", shapes, "float32", [(1, 4, 32), (6, 1)])   # A's unit stride: a
    (k,) = {k for _, k, _, _ in rows}
    assert all(ok for *_, ok in rows) and k.group("m") == (1, 0)


STRANDED = [    # a tensor's unit-stride index inside a group: a row or column index moves into T,
    ("dega,gfbc->abcdef", [(3, 5, 6, 2), (6, 3, 4, 2)], "t"),   # B's g inside N = (f, g, e)
    ("dfgb,geac->abcdef", [(3, 5, 6, 4), (6, 5, 2, 2)], "t"),
    ("dbea,ec->abcd", [(5, 3, 6, 4), (6, 7)], "t"),             # B's d inside N
    ("efbad,cf->abcde", [(3, 5, 2, 4, 6), (3, 5)], "t"),
    ("aebf,fdec->abcd", [(3, 4, 5, 6), (6, 2, 4, 7)], "t"),
    ("dega,gfbc->abcdef", [(3, 5, 2, 2), (2, 3, 4, 2)], "nt"),  # write-bound (K = 2): N's first axis
    ("dfgb,geac->abcdef", [(3, 5, 2, 4), (2, 5, 2, 2)], "nt"),
    ("dega,gfbc->abcdef", [(3, 5, 3, 7), (3, 3, 19, 2)], "nt"),  # N's blocks masked on both axes
    ("dhega,gfbc->abcdef", [(3, 2, 5, 2, 2), (2, 3, 4, 2)], "t"),   # write-bound, but A sums h of its own
]
GATHERED = [    # a stranded unit-stride index left in its group: B's tile a gather
    ("aebf,dfce->abcd", [(3, 5, 6, 7), (2, 7, 4, 5)]),          # summed: B's b inside K = (b, d)
    ("abcde,fedc->bfa", [(3, 5, 2, 19, 37), (4, 37, 19, 2)]),   # summed, K's blocks masked
    ("aebf,fdec->abcd", [(3, 12, 5, 12), (12, 2, 12, 7)]),      # a column index, K = 144 > STRANDED_K
]


def test_a_column_index_rides_in_t_up_to_the_k_bound():
    """A stranded row or column index moves into T while K's extent is at most
    ``STRANDED_K``, and stays in its group (the plain lowering's kernel) above it."""
    from einc.codegen.lower import STRANDED_K
    for f, moved in ((STRANDED_K // 16, True), (STRANDED_K // 16 + 1, False)):
        shapes = [(3, 16, 5, f), (f, 2, 16, 7)]               # aebf,fdec: K = (e, f)
        (k,) = {k for _, k, _, _ in kernel_tiles("aebf,fdec->abcd", shapes, "float32")}
        assert bool(k.group("t")) is moved and not k.group("nt"), (f, k.groups)


@pytest.mark.kernels
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layouts", [("plain", "plain"), ("transposed", "permuted")])
@pytest.mark.parametrize("equation,shapes", GATHERED, ids=[f"{e}-{s[0][-1]}" for e, s in GATHERED])
def test_a_gathered_tile_is_the_plain_kernel_and_the_answer_is_exact(kernel_device, equation, shapes, layouts,
                                                                     dtype):
    """Where the stranded index is summed, or K is long, the default kernel is the plain
    one (no ``plain`` candidate differs), one tile is a gather, and the answer matches
    float64 for contiguous and permuted inputs, sizes that fill no block."""
    import fuzz
    from oracle import assert_close, reference

    import einc
    from einc.runtime import triton_executor
    rows = kernel_tiles(equation, shapes, str(dtype).removeprefix("torch."))
    (k,) = {k for _, k, _, _ in rows}
    assert not any(ok for *_, name, ok in rows if name == "b") and not (k.group("t") or k.group("nt")), k.groups
    eq = parse(equation)
    assert not triton_executor.plain_kernels(build_plan(build(eq, shapes), eq.text), dtype, shapes)
    g = torch.Generator().manual_seed(6)
    ops = [fuzz.lay_out(torch.randn(s, generator=g, dtype=torch.float64).to(dtype), lay).to(kernel_device)
           for s, lay in zip(shapes, layouts)]
    out = einc.einsum(equation, *ops)
    assert all(b.startswith("triton") for b in einc.explain(equation, *ops).backends)
    assert out.is_contiguous() and out.dtype == dtype
    assert_close(out.cpu(), reference(equation, *[o.cpu() for o in ops]), dtype, extent=_extent(equation, shapes))


@pytest.mark.kernels
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layouts", [("plain", "plain"), ("transposed", "permuted"), ("sliced", "expanded")])
@pytest.mark.parametrize("equation,shapes,group", STRANDED, ids=[f"{e}-{s[0][-1]}" for e, s, _ in STRANDED])
def test_a_stranded_unit_stride_index_rides_in_the_tile_and_the_answer_is_exact(kernel_device, equation, shapes, group,
                                                                                layouts, dtype):
    """Where the groups' orders leave a tensor no unit-stride tile axis, its unit-stride
    index leads a tile axis of its own (``nt`` for a column index, N loaded as a 2-D block;
    T for a row or column index where an operand sums an index of its own, a 3-D dot with
    the other operand broadcast along it),
    every tile then has a unit-stride axis, and the kernel's answer matches float64 for
    contiguous, permuted, sliced and expanded inputs, sizes that fill no block."""
    import fuzz
    from oracle import assert_close, reference

    import einc
    rows = kernel_tiles(equation, shapes, str(dtype).removeprefix("torch."))
    (k,) = {k for _, k, _, _ in rows}
    batch = set(parse(equation).inputs[0]) & set(parse(equation).inputs[1]) & set(parse(equation).output)
    assert k.group(group) and not batch and all(ok for *_, ok in rows), k.groups
    g = torch.Generator().manual_seed(5)
    ops = [fuzz.lay_out(torch.randn(s, generator=g, dtype=torch.float64).to(dtype), lay).to(kernel_device)
           for s, lay in zip(shapes, layouts)]
    out = einc.einsum(equation, *ops)
    assert all(b.startswith("triton") for b in einc.explain(equation, *ops).backends)
    assert out.is_contiguous()
    assert out.dtype == dtype
    assert_close(out.cpu(), reference(equation, *[o.cpu() for o in ops]), dtype, extent=_extent(equation, shapes))


def _extent(equation, shapes):
    """How many terms are summed into each element of the result."""
    eq = parse(equation)
    sizes = {i: n for term, shape in zip(eq.inputs, shapes) for i, n in zip(term, shape)}
    return math.prod(n for i, n in sizes.items() if i not in eq.output)


@pytest.mark.kernels
@pytest.mark.parametrize("equation,shapes,group", STRANDED, ids=[f"{e}-{s[0][-1]}" for e, s, _ in STRANDED])
def test_the_plain_lowering_leaves_the_stranded_index_in_its_group_and_is_exact(kernel_device, equation, shapes,
                                                                                group):
    """``unit_tiles=False`` (measure mode's ``plain`` candidate) makes no T axis or 2-D N
    block for the stranded index: the same indices in M, N and K as the default kernel's,
    a different kernel, and the float64 answer (for inputs in another layout too: a
    kernel reads any strides)."""
    import fuzz
    from oracle import assert_close, reference

    from einc.runtime import triton_executor
    eq = parse(equation)
    plan = build_plan(build(eq, shapes), eq.text)
    (k,) = lower_program(plan, "float32", shapes)
    (p,) = lower_program(plan, "float32", shapes, unit_tiles=False)
    assert k.group(group) and not p.group("t") and not p.group("nt") and p.name != k.name
    every = lambda x: sorted(i for g in ("t", "m", "nt", "n", "k", "ka", "kb") for i in x.group(g))  # noqa: E731
    assert every(p) == every(k)
    g = torch.Generator().manual_seed(3)
    ops = [fuzz.lay_out(torch.randn(s, generator=g, dtype=torch.float64), "permuted").to(kernel_device)
           for s in shapes]
    (kernel,) = triton_executor.plain_kernels(plan, torch.float64, shapes).values()
    launch = triton_executor.launch_of(kernel)
    out = launch(*ops)
    assert out.is_contiguous()
    assert_close(out.cpu(), reference(equation, *[o.cpu() for o in ops]), torch.float64,
                 extent=_extent(equation, shapes))


@pytest.mark.kernels
def test_a_stranded_index_in_t_with_k_split_sums_right(kernel_device, monkeypatch):
    """A long K over few outputs splits K across programs (partial sums, then the shared
    finish kernel).  Only a short K moves a row or column index into T, and the launcher
    splits only long ones; but the kernel splits K as every matmul kernel does: lowered
    with that index in T for a long K, the partial sums land where the result's strides
    say and add up to the float64 answer."""
    from oracle import assert_close, reference

    import einc
    from einc.codegen import lower
    from einc.runtime.triton_executor import launch
    monkeypatch.setattr(lower, "STRANDED_K", 4096)
    splits = []
    real = launch.split
    monkeypatch.setattr(launch, "split", lambda *a, **k: splits.append(real(*a, **k)) or splits[-1])
    equation = "km,kyxu->mxuy"          # B's unit-stride u inside N = (x, u, y), ordered for C's y
    g = torch.Generator().manual_seed(8)
    ops = [torch.randn(s, generator=g, dtype=torch.float64).to(kernel_device) for s in [(4096, 3), (4096, 3, 2, 5)]]
    (k,) = {k for _, k, _, _ in kernel_tiles(equation, [(4096, 3), (4096, 3, 2, 5)], "float64")}
    assert len(k.group("t")) == 1 and k.group("t")[0] not in k.group("batch")
    out = einc.einsum(equation, *ops)
    assert splits and splits[0][0] > 1, splits                  # (SPLIT_K, K_SPLIT)
    assert_close(out.cpu(), reference(equation, *[o.cpu() for o in ops]), torch.float64, extent=4096)


@pytest.mark.kernels
@pytest.mark.parametrize("equation", ["zdega,zgfbc->zabcdef", "zdega,zgfbc->abczdef"])
def test_n_as_a_2d_block_beside_a_batch_index(kernel_device, equation):
    """A write-bound step with a batch index (walked by the grid, leading or inside the
    result) and B's unit-stride index inside N: N loaded as a 2-D block, every tile with a
    unit-stride axis, and the float64 answer for contiguous and permuted operands."""
    import fuzz
    from oracle import assert_close, reference

    import einc
    shapes = [(3, 3, 5, 2, 2), (3, 2, 3, 4, 2)]
    rows = kernel_tiles(equation, shapes, "float64")
    (k,) = {k for _, k, _, _ in rows}
    assert k.group("batch") and k.group("nt") and not k.group("t") and all(ok for *_, ok in rows), k.groups
    g = torch.Generator().manual_seed(4)
    for layout in ("plain", "permuted"):
        ops = [fuzz.lay_out(torch.randn(s, generator=g, dtype=torch.float64), layout).to(kernel_device) for s in shapes]
        out = einc.einsum(equation, *ops)
        assert out.is_contiguous()
        assert_close(out.cpu(), reference(equation, *[o.cpu() for o in ops]), torch.float64, extent=2)


@pytest.mark.kernels
def test_n_as_a_2d_block_with_k_split_sums_right(kernel_device, monkeypatch):
    """Only write-bound steps (K short) load N as a 2-D block, and the launcher does not
    split their K; but the kernel splits K as every matmul kernel does: lowered so for a
    long K and forced to two slices, the partial sums land where the result's strides say
    and add up to the float64 answer."""
    from oracle import assert_close, reference

    import einc
    from einc.codegen import lower
    from einc.runtime.triton_executor import launch
    monkeypatch.setattr(lower, "WRITE_BOUND", 0)
    splits = []
    monkeypatch.setattr(launch, "split", lambda programs, K, *rest: splits.append(K) or (2, K // 2))
    equation, shapes = "dega,gfbc->abcdef", [(3, 5, 128, 2), (128, 3, 4, 2)]
    (k,) = {k for _, k, _, _ in kernel_tiles(equation, shapes, "float64")}
    assert k.group("nt")
    g = torch.Generator().manual_seed(9)
    ops = [torch.randn(s, generator=g, dtype=torch.float64).to(kernel_device) for s in shapes]
    out = einc.einsum(equation, *ops)
    assert splits == [128]                                      # one layout, split in two slices of 64
    assert_close(out.cpu(), reference(equation, *[o.cpu() for o in ops]), torch.float64, extent=128)


@pytest.mark.kernels
@pytest.mark.parametrize("equation,shapes,group", [STRANDED[0], STRANDED[5]], ids=["t", "nt"])
def test_the_64_bit_variant_of_a_stranded_kernel_computes_the_same(kernel_device, equation, shapes, group):
    """The variant for tensors of 2^31 elements or more casts every tile's offsets to
    64 bits, the T axis's and the 2-D N block's included, and gives the same answer on
    small operands."""
    import dataclasses

    from oracle import assert_close, reference

    from einc.codegen import render
    from einc.runtime.triton_executor import loader
    eq = parse(equation)
    (kernel,) = lower_program(build_plan(build(eq, shapes), eq.text), "float64", shapes)
    assert kernel.group(group)
    wide = dataclasses.replace(kernel, int64=True, name=kernel.name + "_wide")
    source = render(wide)
    aranges = [line for line in source.splitlines() if "tl.arange(" in line and "=" in line]
    assert aranges and all(".to(tl.int64)" in line for line in aranges), aranges
    g = torch.Generator().manual_seed(12)
    ops = [torch.randn(s, generator=g, dtype=torch.float64).to(kernel_device) for s in shapes]
    out = loader.load(wide.name, source).launch(*ops)
    assert_close(out.cpu(), reference(equation, *[o.cpu() for o in ops]), torch.float64)


@pytest.mark.parametrize("wid,equation,shapes,dtype", GPU, ids=[g[0] for g in GPU])
def test_every_suite_kernels_host_passes_only_names_its_kernel_takes(wid, equation, shapes, dtype):
    """``layout``'s sizes go to the kernel as keywords, each one the kernel takes: Triton's
    interpreter ignores one it does not take, its autotuner on a GPU refuses it, so a stray
    keyword (a 2-D K block's host passing ``MERGED_K``) would pass every interpreted test and
    fail only where the ptx report compiles.  Checked on meta tensors of the suite's shapes, no launch."""
    pytest.importorskip("triton")
    from einc.codegen import render
    from einc.runtime.triton_executor import launch, loader
    eq = parse(equation)
    plan = build_plan(build(eq, shapes), eq.text)
    values = dict(enumerate(shapes))
    for step, kernel in zip(plan.steps, lower_program(plan, dtype, shapes)):
        module = loader.load(kernel.name, render(kernel))
        operands = [torch.empty(values[v], device="meta") for v in step.operands]
        roles = [operands[kernel.params.index(op.name)] for op in kernel.inputs]
        _, _, sizes = module.layout(*roles)
        taken = set(launch._arg_names(module.launcher.kernel))
        variant = module.launcher.tma
        if variant is not None:   # the descriptors' axes, which the launcher takes out (and MERGED_K,
            # which the TMA kernel has no use for: its axes say whether K is one stride)
            assert {"TMA_A", "TMA_B", "TMA_C"} <= variant.names and sizes["TMA"] is not None
            assert set(sizes) - {"TMA", "MERGED_K"} <= variant.names, (kernel.name, set(sizes) - variant.names)
            taken.add("TMA")
        assert set(sizes) <= taken, (kernel.name, set(sizes) - taken)
        values[step.result] = tuple(plan.graph.sizes[i] for i in step.output)
