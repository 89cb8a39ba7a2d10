"""Fused steps: which steps fuse (einc/fuse.py, by bytes saved), how explain and dump show
them, and the fused kernels (codegen/fused.py) against the float64 oracle under Triton's
interpreter (or compiled, on a GPU machine): every kernel dtype, sizes 0 and 1,
non-contiguous and broadcast operands, autograd."""

import json
import warnings
from pathlib import Path

import pytest
import torch
from oracle import assert_close, reference

import einc
from einc.codegen.lower import lower_program
from einc.planner.equation import parse
from einc.planner.fuse import FUSED, fuse_plan
from einc.planner.graph import build
from einc.planner.options import Options
from einc.planner.plan import CONTRACT, PRODUCT, build_plan
from einc.runtime.program import unit_functions
from einc.tools import dump

ROOT = Path(__file__).resolve().parents[2]
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# (equation, shapes, path): paths that put a product step next to a contraction
BILINEAR = ("bi,oij,bj->bo", [(6, 5), (7, 5, 4), (6, 4)], [(0, 2), (0, 1)])              # prologue
LINEAR_ATTN = ("nlhd,nhmd,nlh->nlhm", [(2, 8, 3, 4), (2, 3, 5, 4), (2, 8, 3)], [(0, 1), (0, 1)])  # epilogue
BOTH = ("bi,oij,bj,bo->bo", [(6, 5), (7, 5, 4), (6, 4), (6, 7)], [(0, 2), (0, 2), (0, 1)])  # prologue + epilogue
TWO_SIDES = ("ai,aj,bi,bj->ab", [(5, 3), (5, 4), (6, 3), (6, 4)], [(0, 1), (0, 1), (0, 1)])  # a product per side
DIAGONAL = ("bii,oij,bj->bo", [(6, 5, 5), (7, 5, 4), (6, 4)], [(0, 2), (0, 1)])           # a diagonal factor
COLUMNS = ("nlhd,nhmd,nhm->nlhm", [(2, 8, 3, 4), (2, 3, 5, 4), (2, 3, 5)], [(0, 1), (0, 1)])  # factor along N only
FULL = ("nlhd,nhmd,nlhm->nlhm", [(2, 8, 3, 4), (2, 3, 5, 4), (2, 8, 3, 5)], [(0, 1), (0, 1)])  # factor over M and N
CASES = [BILINEAR, LINEAR_ATTN, BOTH, TWO_SIDES, DIAGONAL, COLUMNS, FULL]
IDS = ["prologue", "epilogue", "prologue_epilogue", "two_sides", "diagonal", "epilogue_columns", "epilogue_full"]


def _plan(equation, shapes, path=None):
    return build_plan(build(parse(equation), shapes), equation, Options.of(path) if path else None)


# ----------------------------------------------------------------------- the planner (pure)

def test_torch_bilinear_fuses_its_product_into_the_contraction():
    p = _plan("bi,oij,bj->bo", [(2048, 512), (512, 512, 512), (2048, 512)])
    assert [s.kind for s in p.steps] == [PRODUCT, CONTRACT]
    f = fuse_plan(p, "bfloat16")
    (step,) = f.steps
    assert step.kind == FUSED and step.numbers == (1, 2) and step.parts == p.steps
    assert step.sides == (1, 2, 0)                       # W on one side, x * y on the other
    # unfused: x + y + T (product) + R*T (reads of T, R = 512/128 passes); fused: R*(x + y)
    t, xy, passes = 2048 * 512 * 512, 2 * 2048 * 512, 4
    assert step.saved == 2 * ((1 + passes) * t - (passes - 1) * xy)
    assert step.flops == p.flops and f.largest_intermediate == 2048 * 512   # the 2^29-element T is gone


def test_linear_attn_output_fuses_its_factor_into_the_epilogue():
    p = _plan("nlhd,nhmd,nlh->nlhm", [(16, 4096, 16, 64), (16, 16, 64, 64), (16, 4096, 16)])
    assert [s.kind for s in p.steps] == [CONTRACT, PRODUCT]
    (step,) = fuse_plan(p, "bfloat16").steps
    assert step.kind == FUSED and step.sides == (1, 1, 1) and step.output == p.steps[-1].output
    assert step.saved == 2 * 2 * 16 * 4096 * 16 * 64     # T written and read back, 2 bytes each


def test_an_elementwise_product_read_many_times_does_not_fuse():
    """``ab,ab->ab`` then ``ab,cb->ac``: fused, each of the contraction's passes reads two
    tensors where it read one; with 4 passes (c = 512) that costs more than it saves."""
    many = _plan("ab,ab,cb->ac", [(64, 32), (64, 32), (512, 32)], [(0, 1), (0, 1)])
    assert [s.kind for s in many.steps] == [PRODUCT, CONTRACT]
    assert fuse_plan(many, "float32") is many
    few = _plan("ab,ab,cb->ac", [(64, 32), (64, 32), (100, 32)], [(0, 1), (0, 1)])
    assert [s.kind for s in fuse_plan(few, "float32").steps] == [FUSED]
    tie = _plan("ab,ab,cb->ac", [(64, 32), (64, 32), (384, 32)], [(0, 1), (0, 1)])   # 3 passes: equal bytes
    (step,) = fuse_plan(tie, "float32").steps
    assert step.kind == FUSED and step.saved == 0                                     # one launch fewer wins


def test_no_fusion_for_dtypes_without_kernels_or_without_a_product():
    p = _plan(*BILINEAR)
    assert fuse_plan(p, "complex64") is p and fuse_plan(p, "int32") is p
    chain = _plan("ij,jk,kl->il", [(4, 5), (5, 6), (6, 7)])
    assert fuse_plan(chain, "float32") is chain


def test_a_fused_step_runs_where_its_last_part_ran_and_keeps_other_steps():
    """``bi,bj`` product, an unrelated contraction, then the consumer: the fused step takes
    the consumer's place; the other step stays."""
    p = _plan("bi,bj,oij,ok->bk", [(6, 5), (6, 4), (7, 5, 4), (7, 3)], [(0, 1), (0, 1), (0, 1)])
    kinds = [s.kind for s in p.steps]
    f = fuse_plan(p, "float32")
    assert kinds == [PRODUCT, CONTRACT, CONTRACT]
    assert [s.kind for s in f.steps] == [CONTRACT, FUSED]
    assert f.steps[0] is p.steps[1] and f.steps[1].numbers == (1, 3)


def test_unit_functions_run_a_fused_steps_parts_in_turn():
    p = _plan(*BILINEAR)
    f = fuse_plan(p, "float32")
    calls = []

    def part(name):
        def fn(*args):
            calls.append((name, args))
            return f"{name}({','.join(args)})"
        return fn
    (unit,) = unit_functions(f, p, [part("mul"), part("mm")])
    assert unit("W", "x", "y") == "mm(W,mul(x,y))"
    assert [c[0] for c in calls] == ["mul", "mm"]


def test_a_fused_kernel_is_named_by_a_hash_of_its_exact_source():
    """One naming rule for every kernel: the name is the hash of the module source (rendered
    with the placeholder), so one name never carries two sources; the module says nothing
    of the plan or the shapes, so the same structure at other sizes is the same module."""
    import dataclasses
    import hashlib

    from einc.codegen import NAME_PLACEHOLDER, render
    f = fuse_plan(_plan(*BOTH), "float32")
    (k,) = lower_program(f, "float32", BOTH[1])
    source = render(dataclasses.replace(k, name=""))
    assert NAME_PLACEHOLDER in source and k.name.endswith("_" + hashlib.sha256(source.encode()).hexdigest()[:8])
    assert render(k) == source.replace(NAME_PLACEHOLDER, k.name)
    bigger = [(12, 5), (9, 5, 4), (12, 4), (12, 9)]
    (k2,) = lower_program(fuse_plan(_plan(BOTH[0], bigger, BOTH[2]), "float32"), "float32", bigger)
    assert k2.name == k.name and k2.shapes != k.shapes       # another shape: the same module


def test_the_fused_lowering_takes_the_operands_strides():
    """A fused step's groups are ordered by the operands' strides, as a plain step's:
    bi,oij,bj->bo (the contraction's A is ``oij``, B the product of ``bi`` and ``bj``) with
    ``oij`` stored as (o, j, i), i fastest, sums j before i, so the K tile runs along A's
    unit stride; the runtime lowers with the operands' strides
    (test_fused_kernels_on_random_sizes_and_layouts runs such kernels)."""
    f = fuse_plan(_plan(*BILINEAR), "float32")
    (plain,) = lower_program(f, "float32", BILINEAR[1])
    (contiguous,) = lower_program(f, "float32", BILINEAR[1], [(5, 1), (20, 4, 1), (4, 1)])
    (laid,) = lower_program(f, "float32", BILINEAR[1], [(5, 1), (20, 1, 5), (4, 1)])
    i, j = plain.group("k")                                      # i then j: j is A's unit stride
    assert contiguous == plain and [op.dims for op in plain.a] == [(plain.group("m")[0], i, j)]
    assert laid.group("k") == (j, i) and laid.name != plain.name


def test_fused_kernels_are_deterministic_and_name_their_parts():
    f = fuse_plan(_plan(*BOTH), "float32")
    (k1,), (k2,) = lower_program(f, "float32", BOTH[1]), lower_program(f, "float32", BOTH[1])
    assert k1 == k2 and k1.name.startswith("einc_fused_")
    assert [len(k1.a), len(k1.b), len(k1.e)] == [1, 2, 1]
    files = dump.plan_files(BILINEAR[0], [(2048, 512), (512, 512, 512), (2048, 512)], "bfloat16")
    (module,) = [n for n in files if n != "plan.txt"]
    assert module.startswith("step1_einc_fused_")
    source = files[module]
    compile(source, module, "exec")
    assert source.count("tl.dot(") == 1 and "never written to memory" in source
    assert "plan steps 1+2 fused into one kernel" in files["plan.txt"]


# ----------------------------------------------------------------------- explain, dump, the suite

def _suite():
    return json.loads((ROOT / "bench" / "suite.json").read_text())["workloads"]


def test_suite_gpu_variants_fused_workloads_launch_fewer_kernels_than_plan_steps():
    """Over the suite's gpu variants as explain shows them for CUDA: a fused step is one
    kernel; torch_bilinear and linear_attn_output (at least) launch fewer kernels than
    their plans have steps, and nothing else changes its step count."""
    fewer = {}
    for w in _suite():
        v = w["variants"]["gpu"]
        if v["dtype"] not in ("float16", "bfloat16", "float32", "float64"):
            continue
        shapes = [tuple(s) for s in v["shapes"]]
        plan = _plan(w["equation"], shapes)
        shown = einc.explain(w["equation"], *shapes, dtype=getattr(torch, v["dtype"]), device="cuda")
        launches = len(shown.backends)
        kernels = {b for b in shown.backends if b.startswith("triton ")}
        assert launches == len(shown.steps) <= len(plan.steps)
        fused = [s for s in shown.steps if s.kind == FUSED]
        assert launches == len(plan.steps) - sum(len(s.parts) - 1 for s in fused)
        if launches < len(plan.steps):
            fewer[w["id"]] = (launches, len(plan.steps))
            assert all("triton einc_fused_" in b for b, s in zip(shown.backends, shown.steps) if s.kind == FUSED)
            assert len(kernels) >= len(fused)
            assert "fused into one kernel" in str(shown)
    assert fewer["torch_bilinear"] == (1, 2) and fewer["linear_attn_output"] == (1, 2)


def test_explain_fuses_only_where_kernels_run():
    shapes = [(2048, 512), (512, 512, 512), (2048, 512)]
    cpu = einc.explain("bi,oij,bj->bo", *shapes, dtype=torch.bfloat16)          # torch executor
    assert [s.kind for s in cpu.steps] == [PRODUCT, CONTRACT] and cpu.backends == ("torch", "torch")
    blas = einc.explain("bi,oij,bj->bo", *shapes, dtype=torch.bfloat16, device="cuda", select="blas")
    assert [s.kind for s in blas.steps] == [PRODUCT, CONTRACT]                  # never a kernel: no fusion
    kern = einc.explain("bi,oij,bj->bo", *shapes, dtype=torch.bfloat16, device="cuda", select="kernel")
    assert [s.kind for s in kern.steps] == [FUSED] and kern.backends[0].startswith("triton einc_fused_")
    assert kern.to_dict()["steps"][0]["kind"] == FUSED


def test_the_torch_executor_keeps_its_steps():
    """CPU tensors without EINC_BACKEND=triton: the plan runs unfused on torch ops."""
    eq, shapes, path = BILINEAR
    ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
    out = einc.einsum(eq, *ops, optimize=path)
    shown = einc.explain(eq, *ops, optimize=path)
    if shown.backends[0] == "torch":
        assert [s.kind for s in shown.steps] == [PRODUCT, CONTRACT]
    assert_close(out, reference(eq, *ops), torch.float64, extent=20)


# ----------------------------------------------------------------------- the kernels

@pytest.fixture
def on_kernels(kernel_device):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")   # a fallback to torch warns: fail instead
        yield kernel_device


def _check(equation, ops, path, dtype, extent=32):
    """einc's result against the float64 oracle, and that one fused kernel ran."""
    out = einc.einsum(equation, *ops, optimize=path)
    expected = torch.einsum(equation, *ops)
    assert out.dtype == expected.dtype and out.shape == expected.shape and out.is_contiguous()
    assert_close(out.cpu(), reference(equation, *[o.cpu() for o in ops]), dtype, extent=extent)
    shown = einc.explain(equation, *ops, optimize=path)
    assert any(s.kind == FUSED for s in shown.steps), str(shown)
    assert all(b.startswith("triton ") for b in shown.backends), shown.backends
    return out


def _randn(shape, dtype, device, g):
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).to(device)


@pytest.mark.kernels
@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=str)
@pytest.mark.parametrize("equation,shapes,path", CASES, ids=IDS)
def test_fused_kernels_match_the_oracle(on_kernels, equation, shapes, path, dtype):
    g = torch.Generator().manual_seed(0)
    ops = [_randn(s, dtype, on_kernels, g) for s in shapes]
    _check(equation, ops, path, dtype)


@pytest.mark.kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("equation,shapes,path", CASES, ids=IDS)
def test_fused_kernels_read_any_layout(on_kernels, equation, shapes, path, dtype):
    """Transposed, sliced-with-step and expanded (stride 0) operands, read in place."""
    g = torch.Generator().manual_seed(1)
    ops = []
    for k, s in enumerate(shapes):
        if k == 0:              # a transposed copy viewed back: same shape, permuted strides
            t = _randn(tuple(reversed(s)), dtype, on_kernels, g).permute(*reversed(range(len(s))))
        elif k == 1:            # every other element along the first dimension
            t = _randn((2 * s[0],) + tuple(s[1:]), dtype, on_kernels, g)[::2]
        else:                   # broadcast along the first dimension: stride 0
            t = _randn((1,) + tuple(s[1:]), dtype, on_kernels, g).expand(*s)
        assert tuple(t.shape) == tuple(s)
        ops.append(t)
    assert not ops[0].is_contiguous() and ops[-1].stride(0) == 0
    _check(equation, ops, path, dtype)


@pytest.mark.kernels
@pytest.mark.parametrize("sizes", [dict(b=0), dict(o=0), dict(i=0), dict(b=1, o=1, i=1, j=1), dict(j=1)],
                         ids=["b0", "o0", "i0", "all1", "j1"])
def test_fused_kernels_at_sizes_0_and_1(on_kernels, sizes):
    size = {"b": 6, "o": 7, "i": 5, "j": 4, **sizes}
    g = torch.Generator().manual_seed(2)
    for equation, path in [(BILINEAR[0], BILINEAR[2]), (BOTH[0], BOTH[2])]:
        shapes = [tuple(size[c] for c in term) for term in equation.split("->")[0].split(",")]
        ops = [_randn(s, torch.float32, on_kernels, g) for s in shapes]
        out = einc.einsum(equation, *ops, optimize=path)
        assert_close(out.cpu(), reference(equation, *[o.cpu() for o in ops]), torch.float32, extent=32)
    attn = {"n": 2, "l": 8, "h": 3, "d": 4, "m": 5}
    for n0 in ("l", "d", "m"):
        for v in (0, 1):
            s = {**attn, n0: v}
            shapes = [tuple(s[c] for c in term) for term in ("nlhd", "nhmd", "nlh")]
            ops = [_randn(sh, torch.float64, on_kernels, g) for sh in shapes]
            out = einc.einsum(LINEAR_ATTN[0], *ops, optimize=LINEAR_ATTN[2])
            assert_close(out.cpu(), reference(LINEAR_ATTN[0], *[o.cpu() for o in ops]), torch.float64)


@pytest.mark.kernels
def test_a_size_1_broadcast_dimension_fuses_and_is_read_at_0(on_kernels):
    """``x`` of shape (1, i) against b = 6: the graph gives its first dimension an index
    of its own, summed away (size 1); the product still fuses."""
    g = torch.Generator().manual_seed(3)
    x, w, y = _randn((1, 5), torch.float32, on_kernels, g), _randn((7, 5, 4), torch.float32, on_kernels, g), \
        _randn((6, 4), torch.float32, on_kernels, g)
    _check("bi,oij,bj->bo", [x, w, y], [(0, 2), (0, 1)], torch.float32)


@pytest.mark.kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("equation,shapes,path", CASES, ids=IDS)
def test_gradients_through_fused_plans(on_kernels, equation, shapes, path, dtype):
    g = torch.Generator().manual_seed(4)
    ops = [_randn(s, dtype, on_kernels, g).requires_grad_() for s in shapes]
    out = einc.einsum(equation, *ops, optimize=path)
    grad = _randn(tuple(out.shape), dtype, on_kernels, g)
    grads = torch.autograd.grad(out, ops, grad)
    ref_ops = [o.detach().cpu().double().requires_grad_() for o in ops]
    ref_grads = torch.autograd.grad(torch.einsum(equation, *ref_ops), ref_ops, grad.cpu().double())
    for got, want in zip(grads, ref_grads):
        assert got.shape == want.shape and got.dtype == dtype
        assert_close(got.detach().cpu(), want, dtype, extent=64)
    shown = einc.explain(equation, *[o.detach() for o in ops], optimize=path)
    assert any(s.kind == FUSED for s in shown.steps)      # the forward ran the fused kernel


@pytest.mark.kernels
def test_measured_selection_times_the_fused_kernel_against_its_parts_on_torch(on_kernels, monkeypatch):
    """``select="measure"``: the fused step's candidates are its kernel and its parts run
    by the torch executor (one after the other); both give the oracle's answer."""
    from einc.runtime import select
    for winner in ("triton", "torch"):
        einc.cache_clear()
        fast = winner                                   # the kernel is the function called ``launch``
        monkeypatch.setattr(select, "timer", lambda fn, args, fast=fast: 1.0 if (
            getattr(fn, "__name__", "") == "launch") == (fast == "triton") else 2.0)
        monkeypatch.setattr(select, "remember", lambda key, choice: None)
        monkeypatch.setattr(select, "remembered", lambda key: None)
        eq, shapes, path = BILINEAR
        g = torch.Generator().manual_seed(5)
        ops = [_randn(s, torch.float64, on_kernels, g) for s in shapes]
        out = einc.einsum(eq, *ops, optimize=path, select="measure")
        assert_close(out.cpu(), reference(eq, *[o.cpu() for o in ops]), torch.float64)
        again = einc.einsum(eq, *ops, optimize=path, select="measure")
        assert torch.equal(out, again)
        shown = einc.explain(eq, *ops, optimize=path, select="measure")
        assert [s.kind for s in shown.steps] == [FUSED]
        assert shown.backends[0].split()[0] == winner


# ----------------------------------------------------------------------- scalar factors in the epilogue

def _spy_launches(monkeypatch, equation, shapes, dtype, path=None):
    """The scales each of the plan's generated kernels is launched with (a list per kernel)."""
    from einc.runtime import triton_executor
    from einc.runtime.triton_executor import loader
    plan = triton_executor.program(_plan(equation, shapes, path), dtype)
    seen = []
    for k in triton_executor.kernels(plan, dtype, shapes):
        module = loader.load(k.name, k.source)
        original, scales = module.launch, []
        seen.append(scales)

        def launch(*args, scale=1.0, _original=original, _scales=scales):
            _scales.append(scale)
            return _original(*args, scale=scale)
        monkeypatch.setattr(module, "launch", launch)
    return seen


@pytest.mark.kernels
@pytest.mark.parametrize("equation,shapes,path", [("ij,jk->ik", [(5, 6), (6, 7)], None), BILINEAR, LINEAR_ATTN,
                                                  ("bij,bij->b", [(3, 4, 5), (3, 4, 5)], None)],
                         ids=["matmul", "fused_prologue", "fused_epilogue", "reduce"])
def test_the_ops_scale_goes_into_the_last_kernels_epilogue(on_kernels, monkeypatch, equation, shapes, path):
    import einc.custom_op  # noqa: F401  (registers torch.ops.einc.einsum)
    seen = _spy_launches(monkeypatch, equation, shapes, torch.float32, path)
    g = torch.Generator().manual_seed(6)
    ops = [_randn(s, torch.float32, on_kernels, g) for s in shapes]
    from einc.planner.options import encode
    optimize, memory = encode(path or "auto", None)
    out = torch.ops.einc.einsum.default(equation, ops, optimize, memory, scale=0.125)
    assert_close(out.cpu(), 0.125 * reference(equation, *[o.cpu() for o in ops]), torch.float32, extent=32)
    assert seen[-1] == [0.125] and all(s == [1.0] for s in seen[:-1])
    plain = torch.ops.einc.einsum.default(equation, ops, optimize, memory)
    assert seen[-1] == [0.125, 1.0]
    assert_close(out.cpu(), 0.125 * plain.cpu().double(), torch.float32, extent=32)


def test_the_ops_scale_on_the_torch_executor_and_under_autograd():
    import einc.custom_op  # noqa: F401
    a, b = torch.randn(5, 6, dtype=torch.float64, requires_grad=True), torch.randn(6, 7, dtype=torch.float64)
    out = torch.ops.einc.einsum.default("ij,jk->ik", [a, b], "auto", "", scale=-0.5)
    torch.testing.assert_close(out, -0.5 * (a @ b))
    (grad,) = torch.autograd.grad(out.sum(), [a])
    torch.testing.assert_close(grad, -0.5 * b.sum(1).expand(5, 6))
    batched = torch.func.vmap(lambda x: torch.ops.einc.einsum.default("ij,jk->ik", [x, b], "auto", "", scale=3.0))
    xs = torch.randn(4, 5, 6, dtype=torch.float64)
    torch.testing.assert_close(batched(xs), 3.0 * (xs @ b))


@pytest.mark.kernels
def test_backend_passes_constant_factors_to_the_kernel(on_kernels, monkeypatch):
    """torch.compile(backend=einc): ``(a @ b) * 0.5 / 4`` where kernels run becomes one
    einc::einsum with scale 0.125 and no multiply or divide of its own; the kernel gets
    the scale.  On the torch executor the factors stay graph ops (scale_on != epilogue)."""
    import einc.dynamo
    seen = _spy_launches(monkeypatch, "ab,bc->ac", [(5, 6), (6, 7)], torch.float32)
    graphs = []

    def capture(gm, inputs, **kw):
        fn = einc.dynamo.backend(gm, inputs, options={"inner": "eager", "rewrite": "all"})
        graphs.append(gm)
        return fn
    g = torch.Generator().manual_seed(7)
    a, b = _randn((5, 6), torch.float32, on_kernels, g), _randn((6, 7), torch.float32, on_kernels, g)
    fn = lambda a, b: (a @ b) * 0.5 / 4        # noqa: E731
    torch._dynamo.reset()
    out = torch.compile(fn, backend=capture)(a, b)
    assert_close(out.cpu(), 0.125 * reference("ij,jk->ik", a.cpu(), b.cpu()), torch.float32, extent=8)
    (r,) = einc.dynamo.last_report.rewrites
    assert r.scale_on == "epilogue"
    (node,) = [n for n in graphs[0].graph.nodes
               if n.op == "call_function" and n.target is torch.ops.einc.einsum.default]
    assert node.args[5] == 0.125
    import operator
    scalar_ops = (operator.mul, operator.truediv, torch.mul, torch.div)
    assert not [n for n in graphs[0].graph.nodes if n.target in scalar_ops or n.target in ("mul", "div")]
    assert seen[0] and set(seen[0]) == {0.125}
    if on_kernels.type == "cpu":        # the same on the torch executor: factors stay in the graph
        monkeypatch.delenv("EINC_BACKEND")
        einc.cache_clear()
        torch._dynamo.reset()
        out = torch.compile(fn, backend=einc.dynamo.make_backend(inner="eager", rewrite="all"))(a, b)
        assert_close(out.cpu(), 0.125 * reference("ij,jk->ik", a.cpu(), b.cpu()), torch.float32, extent=8)
        (r,) = einc.dynamo.last_report.rewrites
        assert r.scale_on in ("operand 0", "operand 1", "output")


# ----------------------------------------------------------------------- random sizes and layouts

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


def _layout(t, how):
    """``t``'s values as a view of another layout: 0 as is, 1 transposed, 2 every other
    element along dim 0, 3 broadcast (stride 0) along dim 0 (values of row 0)."""
    if t.dim() == 0 or how == 0:
        return t
    if how == 1:
        return t.permute(*reversed(range(t.dim()))).contiguous().permute(*reversed(range(t.dim())))
    if how == 2:
        return torch.stack([t, torch.full_like(t, float("nan"))], 1).flatten(0, 1)[::2] if t.shape[0] else t
    return t[:1].expand(*t.shape) if t.shape[0] else t


@pytest.mark.kernels
@hypothesis.settings(max_examples=25, deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(case=st.sampled_from(CASES), sizes=st.lists(st.integers(0, 5), min_size=6, max_size=6),
                  dtype=st.sampled_from(KERNEL_DTYPES), layouts=st.lists(st.integers(0, 3), min_size=4, max_size=4),
                  seed=st.integers(0, 2**16))
def test_fused_kernels_on_random_sizes_and_layouts(kernel_device, case, sizes, dtype, layouts, seed):
    equation, _, path = case
    letters = sorted(set(equation) - set(",->"))
    size = dict(zip(letters, sizes))
    terms = equation.split("->")[0].split(",")
    g = torch.Generator().manual_seed(seed)
    ops = [_layout(_randn(tuple(size[c] for c in term), dtype, kernel_device, g), how)
           for term, how in zip(terms, layouts)]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")
        out = einc.einsum(equation, *ops, optimize=path)
    assert out.dtype == dtype and out.is_contiguous()
    assert_close(out.cpu(), reference(equation, *[o.cpu() for o in ops]), dtype, extent=32)
    explained = einc.explain(equation, *ops, optimize=path)
    assert any(s.kind == FUSED for s in explained.steps) or not out.numel() or "the result is zeros" in explained.note


@pytest.mark.kernels
def test_a_failing_fused_kernel_falls_back_to_the_torch_executor(kernel_device, monkeypatch):
    """A fused kernel that fails (here: a broken module) warns once and the torch executor
    answers, with the plan's own (unfused) steps; never a wrong answer."""
    from einc.codegen import fused
    original = fused.render
    monkeypatch.setattr(fused, "render", lambda k, name: original(k, name).replace("tl.dot(", "tl.no_such_dot("))
    eq, shapes, path = BILINEAR
    g = torch.Generator().manual_seed(8)
    ops = [_randn(s, torch.float32, kernel_device, g) for s in shapes]
    with pytest.warns(RuntimeWarning, match="einc: a generated kernel"):
        out = einc.einsum(eq, *ops, optimize=path)
    assert_close(out.cpu(), reference(eq, *[o.cpu() for o in ops]), torch.float32, extent=32)
    shown = einc.explain(eq, *ops, optimize=path)
    assert shown.backends == ("torch", "torch") and [s.kind for s in shown.steps] == [PRODUCT, CONTRACT]


@pytest.mark.kernels
@pytest.mark.parametrize("equation,shapes,path", [BOTH, TWO_SIDES], ids=["prologue_epilogue", "two_sides"])
def test_the_64_bit_offset_variant_computes_the_same(kernel_device, equation, shapes, path):
    """The variant for tensors of 2^31 elements or more (64-bit offsets, no span check),
    run on small operands: the same answer."""
    import dataclasses

    from einc.codegen import render
    from einc.runtime.triton_executor import loader
    (kernel,) = lower_program(fuse_plan(_plan(equation, shapes, path), "float64"), "float64", shapes)
    wide = dataclasses.replace(kernel, int64=True, name=kernel.name + "_wide")
    source = render(wide)
    assert ".to(tl.int64)" in source and "offsets=64)" in source         # no span check at the first launch
    assert ".to(tl.int64)" not in render(kernel) and "offsets=32)" in render(kernel)
    step = fuse_plan(_plan(equation, shapes, path), "float64").steps[0]
    g = torch.Generator().manual_seed(9)
    values = {v: _randn(s, torch.float64, kernel_device, g) for v, s in enumerate(shapes)}
    out = loader.load(wide.name, source).launch(*[values[v] for v in step.operands])
    assert_close(out.cpu(), reference(equation, *[values[v].cpu() for v in range(len(shapes))]), torch.float64)
