"""A new shape of a known equation: what einc reuses, what it runs, and when it plans
(einc/runtime/admission.py, einc/plan.py's size classes), and the accuracy of long sums."""

import warnings

import pytest
import torch

import einc
from einc.errors import ShapeError
from einc.runtime import admission
from einc.runtime.reference import torch_einsum


@pytest.fixture(autouse=True)
def _fresh_caches():
    einc.cache_clear()
    yield
    einc.cache_clear()


def _plans():
    return einc.cache_info().plans.currsize


ANY = (6, 0, 1, 7)
SAME_CLASS = (6, 7)     # three operands or more: the path is reused within the size class of 5 only


@pytest.mark.parametrize("eq,make,sizes", [
    ("bij,bjk->bik", lambda n: [torch.randn(n, 3, 4), torch.randn(n, 4, 5)], ANY),
    ("ij->ji", lambda n: [torch.randn(n, 3)], ANY),                     # torch returns a view of the operand
    ("ii->i", lambda n: [torch.randn(n, n)], ANY),
    ("bhid,bhjd->bhij", lambda n: [torch.randn(1, 2, 1, 8), torch.randn(1, 2, n, 8)], ANY),   # a permuted view
    ("zuvw,zu,zvj->zwj", lambda n: [torch.randn(n, 3, 3, 3), torch.randn(n, 3), torch.randn(n, 3, 2)], SAME_CLASS),
])
def test_a_new_shape_runs_torchs_op_first_and_is_planned_on_its_second_call(eq, make, sizes):
    einc.einsum(eq, *make(5))                   # the equation is known from now on
    assert _plans() == 1
    for n in sizes:
        ops = make(n)
        out = einc.einsum(eq, *ops)
        expected = torch_einsum(eq, *ops)
        assert _plans() == 1                    # not planned: torch's own op ran
        assert out.is_contiguous() and out.dtype == expected.dtype
        assert all(out.untyped_storage().data_ptr() != o.untyped_storage().data_ptr() for o in ops) or \
            out.numel() == 0
        torch.testing.assert_close(out, expected, rtol=0, atol=0)       # exactly torch's result
        again = einc.einsum(eq, *ops)           # the second call plans the shape
        assert _plans() == 2
        torch.testing.assert_close(again, expected)
        einc.cache_clear()
        einc.einsum(eq, *make(5))


def test_an_equation_with_varying_shapes_plans_a_shape_only_when_it_keeps_coming_back():
    eq = "bi,bi->b"
    einc.einsum(eq, torch.randn(1, 4), torch.randn(1, 4))
    for n in range(2, admission.STABLE_SHAPES + 8):        # more distinct shapes than a stable equation has
        ops = (torch.randn(n, 4), torch.randn(n, 4))
        einc.einsum(eq, *ops)
    planned = _plans()
    ops = (torch.randn(100, 4), torch.randn(100, 4))
    for _ in range(admission.VARYING_CALLS - 1):
        torch.testing.assert_close(einc.einsum(eq, *ops), (ops[0] * ops[1]).sum(1))
    assert _plans() == planned                  # a few calls of a new shape: torch's op each time
    einc.einsum(eq, *ops)
    assert _plans() == planned + 1              # it keeps coming back: planned


def test_a_bad_new_shape_raises_einc_s_error():
    einc.einsum("ij,jk->ik", torch.randn(2, 3), torch.randn(3, 4))
    with pytest.raises(ShapeError, match="operand 1"):
        einc.einsum("ij,jk->ik", torch.randn(2, 3), torch.randn(5, 4))


def test_new_shapes_under_autograd_give_torchs_gradients():
    eq = "zuvw,zu,zvj->zwj"
    einc.einsum(eq, torch.randn(4, 3, 3, 3), torch.randn(4, 3), torch.randn(4, 3, 2))
    for n in (5, 6):
        ops = [torch.randn(n, 3, 3, 3, requires_grad=True), torch.randn(n, 3, requires_grad=True),
               torch.randn(n, 3, 2, requires_grad=True)]
        ref = [o.detach().clone().requires_grad_() for o in ops]
        einc.einsum(eq, *ops).square().sum().backward()
        torch_einsum(eq, *ref).square().sum().backward()
        for o, r in zip(ops, ref):
            torch.testing.assert_close(o.grad, r.grad)


def test_three_operands_of_another_size_class_are_planned_at_once():
    eq = "zuvw,zu,zvj->zwj"
    einc.einsum(eq, torch.randn(5, 3, 3, 3), torch.randn(5, 3), torch.randn(5, 3, 2))
    einc.einsum(eq, torch.randn(9, 3, 3, 3), torch.randn(9, 3), torch.randn(9, 3, 2))     # 9: another octave
    assert _plans() == 2


def test_memory_limited_calls_are_always_planned():
    eq = "ab,bc,cd->ad"
    ops = lambda n: [torch.randn(n, 4), torch.randn(4, 4), torch.randn(4, n)]   # noqa: E731
    einc.einsum(eq, *ops(3), memory_limit=8)
    before = _plans()                           # the sliced plan and its slices' inner plan
    einc.einsum(eq, *ops(5), memory_limit=8)
    assert _plans() > before


def test_a_path_is_reused_within_a_size_class_and_explain_says_so():
    eq = "ab,bc,cd,de->ae"
    shapes = [(30, 2), (2, 40), (40, 3), (3, 50)]
    first = einc.explain(eq, *shapes)
    same_class = einc.explain(eq, (31, 2), (2, 41), (41, 3), (3, 52))
    other_class = einc.explain(eq, (300, 2), (2, 40), (40, 3), (3, 50))
    assert same_class.plan.path == first.plan.path
    assert "Path reused" in str(same_class) and "(30, 2, 40, 3, 50)" in str(same_class)
    assert "Path reused" not in str(first) and "Path reused" not in str(other_class)


# ---------------------------------------------------------------- long sums

@pytest.mark.parametrize("eq,shapes,broadcast", [
    ("abc,abcd->d", [(40, 41, 42), (40, 41, 42, 1)], True),         # the library case: 68,880 terms
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
    assert err(einc.einsum(eq, *ops)) <= max(err(torch_einsum(eq, *ops)), 1e-7)
    if executor == "kernels":
        assert all(b.startswith("triton") for b in einc.explain(eq, *ops).backends)


@pytest.mark.parametrize("eq,shapes", [("ij,jk->ik", [(4, 3), (3, 5)]), ("ij->ji", [(4, 3)]), ("ii->i", [(4, 4)])])
def test_a_new_shape_under_fake_tensor_mode_takes_no_data_pointer(eq, shapes):
    # torch.compile's fake kernel probes the result dtype on fake tensors, and shape-inference
    # code runs einsum under FakeTensorMode: torch's op on a new shape must not read storage
    from torch._subclasses.fake_tensor import FakeTensorMode
    einc.einsum(eq, *[torch.randn(s) for s in shapes])         # the equation is known
    bigger = [tuple(2 * n for n in s) for s in shapes]
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
