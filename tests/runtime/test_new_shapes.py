"""Which calls einc plans and which torch's einsum op answers (einc/runtime/admission.py):
a rule on the call itself, never on what ran before; and the accuracy of long sums."""

import warnings

import pytest
import torch
import torch.utils.checkpoint

import einc
from einc.errors import ShapeError
from einc.planner.equation import parse
from einc.planner.options import Options
from einc.runtime import admission, engine
from einc.runtime.reference import torch_einsum

pytestmark = pytest.mark.usefixtures("cleared_caches")


@pytest.fixture
def torch_mode(monkeypatch):
    """EINC_NEW_SHAPES=torch: small calls are torch's op."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "torch")


def _plans():
    return einc.cache_info().plans.currsize


SIZES = range(100, 116)


def test_every_shape_is_planned_by_default():
    make = lambda n: [torch.randn(n, 3), torch.randn(n, 3)]     # noqa: E731
    for n in SIZES:
        einc.einsum("bi,bi->b", *make(n))
    assert _plans() == len(SIZES)
    einc.einsum("bi,bi->b", *make(3))
    assert _plans() == len(SIZES) + 1


def test_a_bad_setting_is_refused(monkeypatch):
    monkeypatch.setenv("EINC_NEW_SHAPES", "sometimes")
    with pytest.raises(einc.errors.ConfigError, match="EINC_NEW_SHAPES"):
        einc.einsum("bi,bi->b", torch.randn(4, 3), torch.randn(4, 3))


@pytest.mark.parametrize("eq,make,sizes", [
    ("bij,bjk->bik", lambda n: [torch.randn(n, 3, 4), torch.randn(n, 4, 5)], (60, 0, 1, 70)),
    ("ij->ji", lambda n: [torch.randn(n, 3)], (60, 0, 1)),                  # torch returns a view of the operand
    ("ii->i", lambda n: [torch.randn(n, n)], (60, 0, 1)),
    ("bhid,bhjd->bhij", lambda n: [torch.randn(1, 2, 1, 8), torch.randn(1, 2, n, 8)], (60, 0, 1)),  # permuted view
    ("zuvw,zu,zvj->zwj", lambda n: [torch.randn(n, 3, 3, 3), torch.randn(n, 3), torch.randn(n, 3, 2)], (120, 127)),
])
def test_torch_mode_runs_torchs_op_for_small_calls(eq, make, sizes, torch_mode):
    """Under EINC_NEW_SHAPES=torch a small call is exactly torch's result, a fresh
    contiguous tensor, every time and whatever ran before; nothing is planned but shapes
    with a size 0 (a sum over nothing is zeros beside an inf)."""
    for n in sizes:
        ops = make(n)
        out = einc.einsum(eq, *ops)
        expected = torch_einsum(eq, *ops)
        assert out.is_contiguous() and out.dtype == expected.dtype and out.shape == expected.shape
        assert all(out.untyped_storage().data_ptr() != o.untyped_storage().data_ptr() for o in ops) or \
            out.numel() == 0
        torch.testing.assert_close(out, expected, rtol=0, atol=0)       # exactly torch's result
        torch.testing.assert_close(einc.einsum(eq, *ops), out, rtol=0, atol=0)     # and again: never planned
    assert _plans() == sizes.count(0)


def test_torch_mode_plans_calls_past_the_bound(torch_mode, monkeypatch):
    monkeypatch.setattr(admission, "SMALL_CALL", 100)
    einc.einsum("ij,jk->ik", torch.randn(4, 5), torch.randn(5, 5))      # 100 multiply-adds: torch's
    assert _plans() == 0
    einc.einsum("ij,jk->ik", torch.randn(4, 5), torch.randn(5, 6))      # 120: planned
    assert _plans() == 1


def test_torch_mode_gives_three_operands_the_path_of_their_size_class(torch_mode):
    """torch's op gets the path einc finds for the call's size class, searched at the
    class's own sizes: the same for every shape of the class, whichever came first."""
    eq = "ab,bc,cd,de->ae"
    shapes = [(30, 2), (2, 40), (40, 3), (3, 50)]
    ops = [torch.randn(s) for s in shapes]
    path = einc.explain(eq, *[admission.class_sizes(s) for s in shapes]).plan.path
    flat = [i for pair in path for i in pair]
    torch.testing.assert_close(einc.einsum(eq, *ops), torch._VF.einsum(eq, ops, path=flat), rtol=0, atol=0)
    other = [torch.randn(s) for s in [(31, 3), (3, 41), (41, 2), (2, 60)]]      # the same class
    torch.testing.assert_close(einc.einsum(eq, *other), torch._VF.einsum(eq, other, path=flat), rtol=0, atol=0)
    assert _plans() == 0


def test_a_bad_call_raises_einc_s_error_in_torch_mode(torch_mode):
    with pytest.raises(ShapeError, match="operand 1"):
        einc.einsum("ij,jk->ik", torch.randn(2, 3), torch.randn(5, 4))


@pytest.mark.parametrize("new_shapes", ["plan", "torch"])
def test_checkpoint_recomputes_with_the_same_ops(new_shapes, monkeypatch):
    """A checkpointed block runs its forward again in the backward and checks that it saves
    the same tensors: a call runs the same ops every time."""
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    w = torch.randn(6, 6, requires_grad=True)
    block = lambda x: einc.einsum("bi,ij->bj", x, w).tanh()     # noqa: E731
    for b in [1, 2] + list(SIZES):
        x = torch.randn(b, 6, requires_grad=True)
        torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False).sum().backward()
        torch.testing.assert_close(x.grad, ((1 - (x @ w).tanh() ** 2) @ w.t()).detach())


def test_small_calls_under_autograd_give_torchs_gradients(torch_mode):
    eq = "zuvw,zu,zvj->zwj"
    for n in (120, 121):
        ops = [torch.randn(n, 3, 3, 3, requires_grad=True), torch.randn(n, 3, requires_grad=True),
               torch.randn(n, 3, 2, requires_grad=True)]
        ref = [o.detach().clone().requires_grad_() for o in ops]
        einc.einsum(eq, *ops).square().sum().backward()
        torch_einsum(eq, *ref).square().sum().backward()
        for o, r in zip(ops, ref):
            torch.testing.assert_close(o.grad, r.grad)
    assert _plans() == 0


def test_memory_limited_calls_are_always_planned(torch_mode, monkeypatch):
    monkeypatch.setenv("EINC_SLICE_OVERHEAD", "off")
    einc.einsum("ab,bc,cd->ad", torch.randn(6, 4), torch.randn(4, 4), torch.randn(4, 6), memory_limit=8)
    assert _plans() > 0


def test_a_path_is_the_call_s_own_whatever_came_before():
    """The default search is run for the call's own sizes: the path of a shape does not
    depend on which shapes of its equation were planned first."""
    eq = "ab,bc,cd,de->ae"
    shapes = [(31, 2), (2, 41), (41, 3), (3, 52)]
    alone = einc.explain(eq, *shapes).plan.path
    einc.cache_clear()
    for n in range(30, 60, 3):
        einc.explain(eq, (n, 2), (2, n + 10), (n + 10, 3), (3, n + 20))
    assert einc.explain(eq, *shapes).plan.path == alone
    assert "Path reused" not in str(einc.explain(eq, *shapes))


def test_a_named_strategy_searches_every_shape():
    """optimize="optimal" means this shape's optimal path, reported and run: no path of
    another shape of its size class (1666 flops at these sizes for the path "optimal" finds
    at the class's canonical sizes, where every order ties; the optimum is 1470)."""
    import opt_einsum
    eq, shapes = "ab,bc,cd,de->ae", [(7, 7), (7, 7), (7, 7), (7, 5)]
    einc.contract_path(eq, (4, 6), (6, 4), (4, 6), (6, 7), optimize="optimal")
    best = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize="optimal")[1].opt_cost
    path, info = einc.contract_path(eq, *shapes, optimize="optimal")
    assert info.opt_cost == best == 1470
    ops = [torch.randn(s) for s in shapes]
    torch.testing.assert_close(einc.einsum(eq, *ops, optimize="optimal"), torch.einsum(eq, *ops))
    ran = engine._plans.peek(engine._key(parse(eq), ops, Options.of("optimal")))
    assert ran.size_class is None and ran.plan.path == tuple(path)


# ---------------------------------------------------------------- long sums

@pytest.mark.parametrize("eq,shapes,broadcast", [
    ("abc,abcd->d", [(40, 41, 42), (40, 41, 42, 1)], True),         # the library case: 68,880 terms
    ("abc,abcd->d", [(40, 41, 42), (40, 41, 42, 4)], False),        # einops' case: 4 sums of 68,880 terms
    ("abc,abc->", [(40, 41, 42), (40, 41, 42)], False),
    ("bk,bk->b", [(3, 50000), (3, 50000)], False),
    ("kb,kb->b", [(50000, 3), (50000, 3)], False),
])
@pytest.mark.parametrize("executor", ["torch", pytest.param("kernels", marks=[pytest.mark.kernels])])
def test_long_float32_sums_are_as_accurate_as_torchs(eq, shapes, broadcast, executor, request):
    device = request.getfixturevalue("kernel_device") if executor == "kernels" else torch.device("cpu")
    torch.manual_seed(0)
    ops = [torch.rand(s, device=device) for s in shapes]
    if broadcast:
        ops[1] = ops[1].expand(*shapes[1][:-1], 5)[..., :1]
    exact = torch_einsum(eq, *[o.double() for o in ops])
    err = lambda x: ((x.double() - exact).abs() / exact.abs()).max().item()    # noqa: E731
    # as accurate as torch's best (inductor's blocked reduction; eager torch.einsum's matrix
    # product on the CPU misses this on the 4-output case: 8.9e-6), and never less accurate
    # than eager torch, down to 3 float32 ulps: these sums are ~17,000, where one ulp is
    # 1.1e-7 of the value.  A generated kernel's float32 product is a chain of FMAs per
    # program (Triton folds a block's product added apart back into the chain), so its
    # error grows with each program's share of K: on an H200 cuBLAS landed at 1.35e-7 and
    # einc's kernel at 1.65e-7; on an H100 cuBLAS at 0.6e-7, the kernel at 2.8e-7
    floor = 3 * torch.finfo(torch.float32).eps
    assert err(einc.einsum(eq, *ops)) <= min(max(err(torch_einsum(eq, *ops)), floor), 1e-6)
    if executor == "kernels":
        assert all(b.startswith("triton") for b in einc.explain(eq, *ops).backends)


@pytest.mark.parametrize("eq,shapes", [("ij,jk->ik", [(4, 3), (3, 5)]), ("ij->ji", [(4, 3)]), ("ii->i", [(4, 4)])])
def test_a_small_call_under_fake_tensor_mode_takes_no_data_pointer(eq, shapes, torch_mode):
    # torch.compile's fake kernel probes the result dtype on fake tensors, and shape-inference
    # code runs einsum under FakeTensorMode: torch's op must not read storage
    from torch._subclasses.fake_tensor import FakeTensorMode
    bigger = [tuple(n + 100 for n in s) for s in shapes]         # not planned: torch's op
    with FakeTensorMode(), warnings.catch_warnings():
        warnings.simplefilter("error")      # "Accessing the data pointer of FakeTensor is deprecated"
        out = einc.einsum(eq, *[torch.empty(s) for s in bigger])
        expected = torch_einsum(eq, *[torch.empty(s) for s in bigger])
    assert out.shape == expected.shape and out.dtype == expected.dtype


def test_torch_compile_with_dynamic_shapes_and_a_parameter():
    # einops' test_torch_compile_for_layers with einc as torch.einsum: the recompile for a
    # dynamic size probes a new shape of a known equation inside the fake kernel
    torch._dynamo.reset()
    weight = torch.nn.Parameter(torch.randn(3, 16, 8))

    def f(x):
        return einc.einsum("aeb,dbc->daec", x.reshape(x.shape[0], -1, 16), weight)

    compiled = torch.compile(f, fullgraph=True)
    for size in (16, 32, 64):
        x = torch.rand(size, size)
        torch.testing.assert_close(compiled(x), torch_einsum("aeb,dbc->daec", x.reshape(size, -1, 16), weight))


@pytest.mark.parametrize("name,value", [("EINC_NEW_SHAPES", "sometimes"), ("EINC_SELECT", "fastest"),
                                        ("EINC_SLICE_OVERHEAD", "lots")])
def test_a_bad_setting_is_reported_when_a_key_is_first_planned(monkeypatch, name, value):
    """A setting a rare path reads (a 17th shape, a kernel entry, a costly slicing) is
    still checked when any key is planned, not hours into a run."""
    einc.cache_clear()
    monkeypatch.setenv(name, value)
    with pytest.raises(einc.errors.ConfigError, match=name):
        einc.einsum("ij,jk->ik", torch.randn(2, 3), torch.randn(3, 4))
    monkeypatch.delenv(name)
    einc.cache_clear()


def test_torch_mode_keeps_one_path_per_size_class(torch_mode):
    """Many shapes of one size class keep one path (a bounded memo), and no plan."""
    eq = "zuvw,zu,zvj->zwj"
    for n in range(64, 128):
        einc.einsum(eq, torch.randn(n, 3, 3, 3), torch.randn(n, 3), torch.randn(n, 3, 2))
    assert len(admission._paths._data) == 1 and _plans() == 0


def test_a_named_strategy_in_torch_mode_runs_torchs_op_with_its_own_search(torch_mode):
    """Under "greedy" a small call is torch's op with the path opt_einsum's greedy search
    finds for that shape."""
    import opt_einsum
    eq = "ij,jk,kl->il"
    make = lambda n: [torch.randn(n, 3), torch.randn(3, n + 1), torch.randn(n + 1, 2)]     # noqa: E731
    for n in (30, 31, 50):
        ops = make(n)
        path = opt_einsum.contract_path(eq, *ops, optimize="greedy")[0]
        want = torch._VF.einsum(eq, ops, path=[i for p in path for i in p])
        torch.testing.assert_close(einc.einsum(eq, *ops, optimize="greedy"), want, rtol=0, atol=0)
    assert _plans() == 0


def test_narrow_integers_stay_exact_in_torch_mode(torch_mode):
    """torch's op wraps uint8 ab,ab,c-> where its path multiplies before it sums: narrow
    integers are planned whatever their size."""
    eq = "ab,ab,c->"
    make = lambda n: [torch.full((n, 2), 200, dtype=torch.uint8), torch.full((n, 2), 200, dtype=torch.uint8),  # noqa: E731
                      torch.full((3,), 200, dtype=torch.uint8)]
    ops = make(120)
    assert einc.einsum(eq, *ops) == torch.einsum(eq, *[o.long() for o in ops]) == 120 * 2 * 200 * 200 * 3 * 200


def test_several_dtypes_are_contracted_in_the_result_dtype_in_torch_mode(torch_mode):
    """torch's op multiplies the two float16 scalars of ``,,->`` in float16 before it meets
    the float64 one: calls of several dtypes are planned, contracted in float64."""
    ops = [torch.tensor(0.1, dtype=torch.float16), torch.tensor(0.3, dtype=torch.float16),
           torch.tensor(1 / 3, dtype=torch.float64)]
    exact = ops[0].double() * ops[1].double() * ops[2]
    assert torch.einsum(",,->", *ops) != exact      # what torch's op gives
    out = einc.einsum(",,->", *ops)
    assert out.dtype == torch.float64 and out == exact


def test_torch_mode_results_share_no_memory_with_the_operands(torch_mode):
    """torch's op returns a view of a lone operand (copied); of two or more it multiplies,
    which makes a new tensor, so those are not compared: checked here over fuzzer cases."""
    import random

    import fuzz
    checked = 0
    for seed in range(300):
        case = fuzz.make_case(random.Random(seed))
        ops = fuzz.operands(case, seed)
        try:
            out = einc.einsum(*case.args(ops))
        except Exception:       # noqa: BLE001 - calls torch and einc refuse are not the point here
            continue
        checked += 1
        if out.numel():
            assert all(not torch._C._is_alias_of(out, o) for o in ops), (case.equation, case.shapes)
    assert checked > 200


def test_a_scaled_call_in_torch_mode_leaves_no_plan_behind(torch_mode):
    """The custom op's scaled form (what the dynamo backend emits) of a small call is torch's
    op times the scale, and plans nothing: a plan it left would answer the plain call from
    then on, so the plain call's answer would depend on what ran before."""
    import einc.custom_op  # noqa: F401  (registers the op)
    a, b = torch.randn(1, 2, 9, 16), torch.randn(1, 2, 11, 16)
    want = torch._VF.einsum("bhid,bhjd->bhij", [a, b]).contiguous()
    scaled = torch.ops.einc.einsum.default("bhid,bhjd->bhij", [a, b], "auto", "", scale=0.5)
    assert torch.equal(scaled, want * 0.5) and _plans() == 0
    assert torch.equal(einc.einsum("bhid,bhjd->bhij", a, b), want)
