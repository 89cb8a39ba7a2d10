"""Generated Triton kernels against the float64 oracle: compiled for CUDA tensors on a
GPU machine, run by Triton's interpreter on CPU tensors elsewhere (``kernel_device``
in conftest.py).  A fallback to the torch executor fails a test here."""

import warnings

import pytest
import torch
from oracle import assert_close, reference

import einc
from einc.runtime.reference import torch_einsum
from tests.doors.test_einsum import FAMILY

pytest.importorskip("triton")
pytestmark = pytest.mark.kernels
DEV = torch.device("cpu")


@pytest.fixture(autouse=True)
def on_kernels(kernel_device):
    global DEV
    DEV = kernel_device
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="einc:")   # a fallback to torch warns: fail instead
        yield


def _backends(equation, ops):
    """What ran each step of the plan einc built for these operands."""
    return einc.explain(equation, *ops).backends


def _run(equation, ops, dtype, extent=64):
    out = einc.einsum(equation, *ops)
    expected = torch.einsum(equation, *ops)
    assert out.dtype == expected.dtype and out.shape == expected.shape and out.device == DEV
    assert out.is_contiguous()
    assert_close(out.cpu(), reference(equation, *[o.cpu() for o in ops]), dtype, extent=extent)
    return _backends(equation, ops)


FLOAT_FAMILY = [f for f in FAMILY]


@pytest.mark.parametrize("equation,shapes", FLOAT_FAMILY, ids=[f[0].replace(" ", "_") or "_" for f in FLOAT_FAMILY])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_family_through_kernels(equation, shapes, dtype):
    g = torch.Generator().manual_seed(0)
    ops = [torch.randn(s, generator=g, dtype=torch.float64).to(dtype).to(DEV) for s in shapes]
    backends = _run(equation, ops, dtype)
    # (a sum over an index of size 0 runs nothing: its result is zeros)
    assert all(b.startswith("triton ") for b in backends) or "the result is zeros" in einc.explain(equation, *ops).note


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(20, 33), (33, 17)]), ("bqhd,bkhd->bhqk", [(2, 5, 3, 8), (2, 7, 3, 8)]),
    ("bij,bij->b", [(3, 9, 5), (3, 9, 5)]), ("i,j->ij", [(6,), (5,)]), ("ij->j", [(7, 4)]),
])
def test_half_precision_accumulates_in_float32(equation, shapes, dtype):
    g = torch.Generator().manual_seed(1)
    ops = [torch.rand(s, generator=g, dtype=torch.float64).to(dtype).to(DEV) for s in shapes]
    out = einc.einsum(equation, *ops).cpu()
    ref = reference(equation, *[o.cpu() for o in ops])
    assert out.dtype == dtype
    # one rounding of the float32 sum to the output dtype: within an output ulp or two
    eps = torch.finfo(dtype).eps
    assert ((out.double() - ref).abs() <= 2 * eps * ref.abs() + 1e-6).all()


LAYOUT_EQUATIONS = [
    ("ij,jk->ik", [(6, 5), (5, 7)]),
    ("bqhd,bkhd->bhqk", [(2, 3, 2, 4), (2, 5, 2, 4)]),
    ("ibnd,jbnd->ijbn", [(3, 2, 2, 4), (5, 2, 2, 4)]),
    ("abcd,dcbe->ae", [(2, 3, 4, 5), (5, 4, 3, 6)]),
    ("bij,bij->b", [(3, 4, 5), (3, 4, 5)]),
    ("ij->j", [(6, 5)]),
    ("i,j->ij", [(5,), (6,)]),
]


@pytest.mark.parametrize("equation,shapes", LAYOUT_EQUATIONS, ids=[e for e, _ in LAYOUT_EQUATIONS])
@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded"])
def test_strided_inputs(equation, shapes, layout):
    g = torch.Generator().manual_seed(2)
    ops = []
    for s in shapes:
        if layout == "transposed":
            t = torch.randn(tuple(reversed(s)), generator=g, dtype=torch.float64).to(DEV)
            t = t.permute(*reversed(range(len(s))))
        elif layout == "sliced":
            t = torch.randn(tuple(2 * x + 1 for x in s), generator=g, dtype=torch.float64).to(DEV)
            t = t[tuple(slice(1, None, 2) for _ in s)]
        else:   # stride 0 along the first dimension
            t = torch.randn((1,) + tuple(s[1:]), generator=g, dtype=torch.float64).to(DEV).expand(*s)
        assert tuple(t.shape) == tuple(s)
        ops.append(t)
    _run(equation, ops, torch.float64)


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk,kl->il", [(4, 5), (5, 6), (6, 3)]),
    ("ijk,ai,bj,ck->abc", [(3, 4, 5), (2, 3), (2, 4), (2, 5)]),
    ("ab,bc,cd,de,ef->af", [(3, 4), (4, 5), (5, 2), (2, 6), (6, 3)]),
    ("ab,ac,dcf,dbe,gfi,geh,jil,jhk->", [(2, 2), (2, 3), (2, 3, 2), (2, 2, 3), (2, 2, 2), (2, 3, 2), (2, 2, 2),
                                         (2, 2, 2)]),
])
def test_many_operands(equation, shapes):
    g = torch.Generator().manual_seed(3)
    ops = [torch.randn(s, generator=g, dtype=torch.float64).to(DEV) for s in shapes]
    _run(equation, ops, torch.float64)


def test_complex_and_integer_run_on_torch():
    a = torch.randn(3, 4, dtype=torch.complex64, device=DEV)
    out = einc.einsum("ij,jk->ik", a, a.T.contiguous())
    torch.testing.assert_close(out, a @ a.T)
    assert _backends("ij,jk->ik", [a, a.T.contiguous()]) == ("torch",)
    i = torch.arange(12, dtype=torch.int32, device=DEV).reshape(3, 4)
    try:
        expected = torch_einsum("ij,kj->ik", i, i)
    except NotImplementedError:             # CUDA has no integer matrix product: the same error
        with pytest.raises(NotImplementedError, match="not implemented for 'Int'"):
            einc.einsum("ij,kj->ik", i, i)
    else:
        assert torch.equal(einc.einsum("ij,kj->ik", i, i), expected)


def test_zero_sizes():
    out = einc.einsum("ij,jk->ik", torch.randn(0, 4, device=DEV), torch.randn(4, 5, device=DEV))
    assert out.shape == (0, 5)
    out = einc.einsum("ij,jk->ik", torch.randn(3, 0, device=DEV), torch.randn(0, 5, device=DEV))
    assert torch.equal(out, torch.zeros(3, 5, device=DEV))


# Random equations through the generated kernels: tests/fuzz/test_fuzz.py (test_generated_kernels).


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    pytest.param("bqhd,bkhd->bhqk", [(2, 2, 2, 3), (2, 3, 2, 3)], marks=pytest.mark.slow),
    ("iij,j->i", [(3, 3, 4), (4,)]), ("bij,bij->b", [(2, 3, 4), (2, 3, 4)]),
])
def test_autograd_and_vmap_through_kernels(equation, shapes):
    """Gradients (einsums themselves) and vmap (one more index) run on generated kernels too."""
    ops = [torch.randn(s, dtype=torch.float64, device=DEV, requires_grad=True) for s in shapes]
    assert torch.autograd.gradcheck(lambda *x: einc.einsum(equation, *x), ops)
    batched = [torch.randn((3,) + s, dtype=torch.float64, device=DEV) for s in shapes]
    out = torch.func.vmap(lambda *x: einc.einsum(equation, *x))(*batched)
    torch.testing.assert_close(out, torch.stack([torch.einsum(equation, *[b[i] for b in batched])
                                                 for i in range(3)]))
    assert all(b.startswith("triton ") for b in _backends(equation, [o.detach() for o in ops]))
