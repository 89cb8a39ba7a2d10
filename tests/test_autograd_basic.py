"""Autograd and torch.func.vmap run through the torch executor's differentiable ops."""

import pytest
import torch

import einc

EQUATIONS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bqhd,bkhd->bhqk", [(2, 3, 2, 4), (2, 5, 2, 4)]),
    ("bij,bij->b", [(2, 3, 4), (2, 3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ii->i", [(3, 3)]),
    ("bi,oij,bj->bo", [(2, 3), (4, 3, 5), (2, 5)]),
    ("...ij,...jk", [(2, 3, 4), (4, 2)]),
]


@pytest.mark.parametrize("equation,shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_gradcheck(equation, shapes):
    ops = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    assert torch.autograd.gradcheck(lambda *x: einc.einsum(equation, *x), ops)


@pytest.mark.parametrize("equation,shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_vmap_matches_loop(equation, shapes):
    ops = [torch.randn((3,) + tuple(s), dtype=torch.float64) for s in shapes]
    out = torch.func.vmap(lambda *x: einc.einsum(equation, *x))(*ops)
    expected = torch.stack([torch.einsum(equation, *[o[b] for o in ops]) for b in range(3)])
    torch.testing.assert_close(out, expected)


def test_grad_of_strided_inputs():
    a = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    out = einc.einsum("ji,jk->ik", a, b)          # a used transposed
    out.sum().backward()
    torch.testing.assert_close(a.grad, b.sum(1, keepdim=True).expand(5, 3).detach())
