"""The TMA variant of 16-bit matrix products (persistent tiles over tensor descriptors).

On a GPU the launcher takes it on compute capability 9+ only; here Triton's interpreter
runs it (the interpreter runs device-side descriptors, checking their alignment rules as
the hardware's), by letting the launcher take it on CPU tensors (``tma.ANYWHERE``): the
same choice, arguments, constexprs and kernel as on Hopper, against float64 oracles.
That it compiles to bulk tensor copies and wgmma is ``bench/ptx_report.py``'s (and
``tests/codegen/test_kernel_compile.py``'s) to check.
"""

import threading

import pytest
import torch
from oracle import assert_close, reference

import einc
from einc.codegen import matmul_tma, render
from einc.codegen.lower import lower_program
from einc.planner.equation import parse
from einc.planner.graph import build
from einc.planner.plan import build_plan
from einc.runtime import triton_executor
from einc.runtime.triton_executor import loader, tma

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.interpreter
HALF = [torch.float16, torch.bfloat16]


@pytest.fixture
def anywhere(monkeypatch, tmp_path):
    """The TMA variant taken under the interpreter, einc's caches fresh."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EINC_BACKEND", "triton")
    monkeypatch.setattr(tma, "ANYWHERE", True)
    einc.cache_clear()
    triton_executor.use_interpreter()
    yield
    einc.cache_clear()


def _kernel(equation, shapes, dtype, strides=None):
    plan = build_plan(build(parse(equation), shapes), equation)
    (kernel,) = lower_program(plan, triton_executor.dtype_name(dtype), shapes, strides)
    return kernel


def _module(equation, shapes, dtype, strides=None):
    kernel = _kernel(equation, shapes, dtype, strides)
    return loader.load(kernel.name, render(kernel))


def _operand(shape, dtype, g, order=None, offset=0):
    """A tensor of ``shape`` whose memory runs along ``order`` (dims slowest first; default
    row-major), starting ``offset`` elements into its storage."""
    order = order or list(range(len(shape)))
    base = torch.randn([shape[d] for d in order], generator=g, dtype=torch.float64).to(dtype)
    if offset:
        base = torch.cat([torch.zeros(offset, dtype=dtype), base.flatten()])[offset:].view(base.shape)
    return base.permute([order.index(d) for d in range(len(shape))])


def _layout(module):
    (known,) = module.launcher.layouts.values()
    return known


# equation, shapes, the operands' memory orders, the descriptors' axes (A, B, C)
CASES = [
    ("ij,jk->ik", [(70, 40), (40, 72)], [None, None], (1, 1, 1)),              # M remainder
    ("ij,jk->ik", [(64, 29), (29, 64)], [[1, 0], None], (2, 1, 1)),            # A along M, odd K
    ("bij,bjk->bik", [(3, 70, 24), (3, 24, 65)], [None, [0, 2, 1]], (1, 2, 0)),  # B along K, odd N: masked store
    ("bij,bjk->bik", [(1, 64, 16), (1, 16, 80)], [None, None], (1, 1, 1)),      # a batch of size 1
    ("bhqd,bhkd->bhqk", [(2, 2, 72, 32), (2, 2, 96, 32)], [None, None], (1, 2, 1)),  # two batch indices
    # groups that are no single stride in a tensor: an axis per index (GETT)
    ("abc,dce->abde", [(2, 40, 32), (3, 32, 64)], [None, None], (1, 1, 1)),      # B's N = de, K between
    ("bqhd,bkhd->bhqk", [(2, 64, 3, 32), (2, 80, 3, 32)], [None, None], (1, 2, 1)),  # the batch bh, q between
    ("ade,abc->dbec", [(8, 4, 64), (8, 3, 64)], [None, None], (2, 1, 0)),      # rows and columns split in C,
    ("ade,abc->dbec", [(8, 2, 128), (8, 3, 256)], [None, None], (2, 1, 1)),    # stored masked, or where every
]                                                                                # block divides e and c, through C's


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("equation,shapes,orders,axes", CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_variant_against_float64(anywhere, equation, shapes, orders, axes, dtype):
    """The variant runs the step (the descriptors' axes as expected) and answers as
    torch.einsum on float64 copies, in both calling conventions."""
    g = torch.Generator().manual_seed(1)
    ops = [_operand(s, dtype, g, o) for s, o in zip(shapes, orders)]
    m = _module(equation, shapes, dtype, [o.stride() for o in ops])
    out = m.launch(*ops)
    known = _layout(m)
    assert known.variant is m.launcher.tma and (known.meta["TMA_A"], known.meta["TMA_B"], known.meta["TMA_C"]) == axes
    assert "SPLIT_K" not in known.meta
    expected = reference(equation, *ops)
    extent = shapes[0][-1]
    assert_close(out.reshape(expected.shape), expected, dtype, extent=extent)
    scaled = m.launch(*ops, scale=0.5)             # the epilogue's scale
    assert_close(scaled.reshape(expected.shape), expected * 0.5, dtype, extent=extent)
    inputs, output = equation.split("->")
    letters = {c: i for i, c in enumerate(sorted(set(inputs) - {","}))}
    sublists = [x for op, term in zip(ops, inputs.split(",")) for x in (op, [letters[c] for c in term])]
    for result in (einc.einsum(equation, *ops), einc.einsum(*sublists, [letters[c] for c in output])):
        assert_close(result, expected, dtype, extent=extent)


@pytest.mark.parametrize("case", ["misaligned stride", "misaligned base", "few rows", "size one", "split K",
                                  "not hopper", "straddling tile", "gathered tile"])
def test_module_kernel_where_no_descriptor_fits(anywhere, monkeypatch, case):
    """Where the variant does not apply the module's own kernel runs the layout, and
    answers right: strides or a base off 16 bytes, fewer than 64 rows, a size-1 index whose
    stride breaks the rule, K split, a device without TMA, a group read index by index
    whose last index no block divides (a tile would straddle two of its outer indices), an
    operand whose unit-stride index lies inside K (its tile a gather, no descriptor's)."""
    dtype = torch.float16
    g = torch.Generator().manual_seed(2)
    if case == "gathered tile":            # aebf,dfce: B's unit-stride e inside K = (e, f), ordered for A
        shapes = [(8, 8, 8, 16), (8, 16, 8, 8)]
        ops = [_operand(s, dtype, g) for s in shapes]
        m = _module("aebf,dfce->abcd", shapes, dtype)
        out = m.launch(*ops)
        assert m.launcher.tma is not None and _layout(m).variant is None
        assert_close(out, reference("aebf,dfce->abcd", *ops), dtype, extent=128)
        return
    if case == "straddling tile":          # B = dce: N = de with e = 40, no multiple of 64
        shapes = [(2, 40, 32), (3, 32, 40)]
        ops = [_operand(s, dtype, g) for s in shapes]
        m = _module("abc,dce->abde", shapes, dtype)
        assert m.launcher.tma is not None and ("b", "n") in _kernel("abc,dce->abde", shapes, dtype).split
        out = m.launch(*ops)
        assert _layout(m).variant is None
        assert_close(out, reference("abc,dce->abde", *ops), dtype, extent=32)
        return
    shapes = {"misaligned stride": [(72, 30), (30, 64)], "few rows": [(40, 32), (32, 64)],
              "size one": [(64, 1), (1, 64)], "split K": [(64, 4096), (4096, 64)]}.get(case, [(64, 32), (32, 64)])
    ops = [_operand(s, dtype, g, offset=1 if case == "misaligned base" and i == 0 else 0)
           for i, s in enumerate(shapes)]
    if case == "not hopper":
        monkeypatch.setattr(tma, "ANYWHERE", False)
    m = _module("ij,jk->ik", shapes, dtype)
    assert m.launcher.tma is not None
    out = m.launch(*ops)
    known = _layout(m)
    assert known.variant is None and "TMA_A" not in known.meta
    assert (known.split > 1) == (case == "split K")
    assert_close(out, reference("ij,jk->ik", *ops), dtype, extent=shapes[0][1])


@pytest.mark.parametrize("dtype,equation,shapes", [
    (torch.float32, "ij,jk->ik", [(64, 32), (32, 64)]), (torch.float64, "ij,jk->ik", [(64, 32), (32, 64)]),
    (torch.float16, "ikb,kjb->ijb", [(64, 32, 8), (32, 64, 8)]),            # a batch index in the tile (T)
    (torch.float16, "ij,j->i", [(64, 32), (32,)]),                          # no columns
])
def test_no_variant_where_the_template_differs(dtype, equation, shapes):
    """fp32 and fp64 products, tiles with a T axis and products without rows, columns or K
    have no TMA kernel (nor a ``tma=`` in their module)."""
    plan = build_plan(build(parse(equation), shapes), equation)
    kernels = lower_program(plan, triton_executor.dtype_name(dtype), shapes)
    for k in kernels:
        assert not matmul_tma.eligible(k)
        assert "_tma(" not in render(k) and "tma=" not in render(k)


def test_axis_reads_groups_as_descriptors_do():
    """``axis``: which tile axis has unit stride (1 the last, 2 the one before), 0 where a
    stride breaks the 16-byte rule, -1 where a group is no single stride."""
    rows, cols = ((64,), (40,)), ((40,), (1,))
    assert tma.axis((((), ()), rows, cols), 2) == 1
    assert tma.axis((((), ()), ((64,), (1,)), ((40,), (64,))), 2) == 2
    assert tma.axis((((), ()), ((64,), (30,)), ((30,), (1,))), 2) == 0          # 60-byte rows
    assert tma.axis((((3,), (0,)), rows, cols), 2) == 0                   # a broadcast batch
    assert tma.axis((((), ()), ((4, 16), (40 * 16, 40)), cols), 2) == 1         # two indices, one stride
    assert tma.axis((((), ()), ((4, 16), (40 * 17, 40)), cols), 2) == -1        # two indices, two strides
    assert tma.axis((((), ()), ((64,), (2,)), ((40,), (128,))), 2) == 0         # no unit stride
    gett = (((), ()), ((32,), (64,)), ((3, 64), (32 * 64, 1)))                # N = de, K between: an axis each
    assert tma.axis(gett, 2) == -1 and tma.axis(gett, 2, (False, False, True)) == 1
    assert tma.axis((((), ()), ((32,), (64,)), ((3, 64), (30, 1))), 2, (False, False, True)) == 0   # 60 bytes


def test_allocator_set_where_none_is_and_never_replaced():
    """``ensure_allocator`` gives a thread without one torch's; a caller's stays (each
    thread has its own, as Triton keeps it in a context variable)."""
    from triton.runtime import _allocation
    seen = {}

    def fresh_thread():
        tma.ensure_allocator()
        seen["fresh"] = _allocation._allocator.get()

    def caller_thread():
        def mine(size, alignment, stream):
            raise AssertionError
        triton.set_allocator(mine)
        tma.ensure_allocator()
        seen["caller"] = (_allocation._allocator.get(), mine)

    for fn in (fresh_thread, caller_thread):
        t = threading.Thread(target=fn)
        t.start()
        t.join()
    assert seen["fresh"] is tma._scratch
    assert seen["caller"][0] is seen["caller"][1]


def test_lowering_names_the_groups_that_are_no_single_stride():
    """``Kernel.split``: the (tensor, group) pairs the TMA variant reads index by index, from
    the strides the kernel is lowered for."""
    half = torch.float16
    assert _kernel("abc,dce->abde", [(2, 40, 32), (3, 32, 64)], half).split == (("b", "n"),)
    assert _kernel("bij,bjk->bik", [(3, 64, 16), (3, 16, 64)], half).split == ()
    attn = _kernel("bqhd,bkhd->bhqk", [(2, 64, 3, 32), (2, 80, 3, 32)], half)
    assert set(attn.split) == {("a", "batch"), ("b", "batch")}
    a = (40 * 16, 16, 1)
    for memory, order in (((16, 64, 3), (1, 0, 2)), ((64, 3, 16), (0, 2, 1))):   # B kept as (c, d, e), (d, e, c)
        b = torch.empty(memory).permute(order).stride()                          # N = de walks it as one index
        assert _kernel("abc,dce->abde", [(2, 40, 16), (64, 16, 3)], half, [a, b]).split == ()


def test_the_compiled_launch_path_serves_the_variant(anywhere, monkeypatch):
    """As on a GPU (stand-ins for Triton's autotuner and compiled kernel, which launch the
    real kernel through the interpreter with the values they are handed): the first launch
    of a layout goes through the variant's autotuner, later ones call its compiled kernel
    directly with every argument in its place; the module kernel's autotuner is never
    asked, and the descriptors' allocator is seen to before every launch."""
    from types import SimpleNamespace

    from tests.runtime.test_launch import StandInAutotuner
    dtype = torch.float16
    shapes = [(72, 40), (40, 64)]
    m = _module("ij,jk->ik", shapes, dtype)
    launcher = m.launcher
    config = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=2)
    tuner = StandInAutotuner(launcher.tma.kernel, config, launcher.tma.tuned)
    monkeypatch.setattr(launcher, "interpret", False)
    monkeypatch.setattr(launcher, "compiled_launches", True)
    monkeypatch.setattr(launcher.tma, "tuned", tuner)
    monkeypatch.setattr(launcher, "tuned", None)                 # the module kernel's: never asked
    monkeypatch.setattr(launcher, "tma_device", lambda device: True)
    allocator = []
    monkeypatch.setattr(tma, "ensure_allocator", lambda: allocator.append(1))
    driver = SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda d: f"stream of device {d}")
    monkeypatch.setattr(triton.runtime, "driver", SimpleNamespace(active=driver))
    g = torch.Generator().manual_seed(6)
    ops = [_operand(s, dtype, g) for s in shapes]
    expected = reference("ij,jk->ik", *ops)
    for _ in range(3):
        assert_close(m.launch(*ops), expected, dtype, extent=40)
    known = _layout(m)
    assert known.variant is launcher.tma and known.compiled is not None
    assert (tuner.calls, tuner.kernel.launches, len(allocator)) == (1, 2, 3)
    assert known.grid(dict(known.meta, **config.kwargs)) == (2,)     # persistent: two tiles, four "processors"


def test_a_failing_variant_warns_and_the_module_kernel_answers(anywhere, monkeypatch):
    """Where the variant fails at its first launch (a Triton or driver without what it needs),
    einc says so once, the module's own kernel answers that call, and the variant is not
    taken again."""
    class Failing:
        def __getitem__(self, grid):
            def launch(*args, **meta):
                raise RuntimeError("no tensor descriptors here")
            return launch

    dtype = torch.float16
    shapes = [(64, 32), (32, 64)]
    m = _module("ij,jk->ik", shapes, dtype)
    monkeypatch.setattr(m.launcher.tma, "kernel", Failing())
    g = torch.Generator().manual_seed(8)
    ops = [_operand(s, dtype, g) for s in shapes]
    with pytest.warns(RuntimeWarning, match="TMA variant of .* failed .*no tensor descriptors here"):
        out = m.launch(*ops)
    assert_close(out, reference("ij,jk->ik", *ops), dtype, extent=32)
    assert m.launcher.tma is None and _layout(m).variant is None
    other = [_operand(s, dtype, g) for s in [(128, 32), (32, 64)]]
    assert_close(m.launch(*other), reference("ij,jk->ik", *other), dtype, extent=32)   # no warning: not tried
