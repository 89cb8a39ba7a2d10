"""``explain`` names exactly the kernels that run: lowering is layout-aware (the order of
indices inside a group follows the operands' strides), so the kernel for a strided
operand is not the one for a contiguous operand of the same shape."""

import pytest
import torch

import einc
from einc.runtime import triton_executor
from einc.runtime.triton_executor import loader

pytestmark = pytest.mark.kernels

EQ = "abc,cd->abd"


def _operands(device):
    x = torch.randn(4, 3, 5, device=device).permute(2, 1, 0)     # shape (5, 3, 4), strides (1, 5, 15)
    y = torch.randn(4, 6, device=device)
    return x, y


def _named(shown):
    return [b.removeprefix("triton ") for b in shown.backends if b.startswith("triton ")]


def _lowered(plan, x, y, strides):
    return [k.name for k in triton_executor.kernels(plan, x.dtype, [x.shape, y.shape], strides)]


def test_explain_names_the_kernels_for_the_tensors_strides(kernel_device):
    x, y = _operands(kernel_device)
    shown = einc.explain(EQ, x, y, select="kernel")
    strided = _lowered(shown.plan, x, y, [x.stride(), y.stride()])
    assert strided != _lowered(shown.plan, x, y, None)      # the layout changes the kernel here
    assert _named(shown) == strided
    # shapes alone: contiguous operands
    assert _named(einc.explain(EQ, x.shape, y.shape, select="kernel", device=kernel_device.type)) == \
        _lowered(shown.plan, x, y, None)


def test_explain_names_the_kernels_an_entry_runs(kernel_device):
    x, y = _operands(kernel_device)
    einc.cache_clear()
    out = einc.einsum(EQ, x, y, select="kernel")
    torch.testing.assert_close(out, torch.einsum(EQ, x, y))
    ran = set(loader._modules)           # the modules this einsum loaded (cache_clear dropped the rest)
    assert len(ran) == 1
    shown = einc.explain(EQ, x, y, select="kernel")
    assert set(_named(shown)) == ran
    # contiguous copies of the same shapes: the entry einc would run for them, whose kernels
    # are the ones it runs (lowered for the strides it was built on, if it is the same entry)
    xc = x.contiguous()
    einc.einsum(EQ, xc, y, select="kernel")
    assert set(_named(einc.explain(EQ, xc, y, select="kernel"))) <= set(loader._modules)


def test_explain_of_a_sliced_plan_names_the_kernel_each_slice_runs(kernel_device):
    """A sliced plan whose slices run a fused kernel: explain names it on each plan step it
    runs, before the first call (what would run) and after (what ran), and prints."""
    equation, path = "bi,oij,bj->bo", [(0, 2), (0, 1)]
    g = torch.Generator().manual_seed(2)
    ops = [torch.randn(s, generator=g).to(kernel_device) for s in [(6, 5), (7, 5, 4), (6, 4)]]
    einc.cache_clear()
    before = einc.explain(equation, *ops, optimize=path, memory_limit=100, select="kernel")
    assert before.plan.slicing is not None and len(before.backends) == len(before.plan.steps) == 2
    out = einc.einsum(equation, *ops, optimize=path, memory_limit=100, select="kernel")
    torch.testing.assert_close(out, torch.einsum(equation, *ops))
    (ran,) = loader._modules                     # one fused kernel ran every slice
    assert ran.startswith("einc_fused_")
    after = einc.explain(equation, *ops, optimize=path, memory_limit=100, select="kernel")
    for shown in (before, after):
        assert list(shown.backends) == [f"triton {ran}"] * 2
        assert str(shown).count(ran) >= 2
