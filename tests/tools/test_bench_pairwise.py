"""bench/pairwise.py's result check: values against torch.einsum on float64 copies, and the
layout ``EINC_LAYOUT`` asks for (contiguous; under ``any`` fresh, dense and non-overlapping)."""

import pytest
import torch

import einc
from bench import pairwise


@pytest.fixture
def fresh():
    threads = torch.get_num_threads()
    einc.cache_clear()
    yield
    einc.cache_clear()
    torch.set_num_threads(threads)


def _operands():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) for s in ((6, 5, 4), (5, 3))]


@pytest.mark.parametrize("layout", ["any", "contiguous"])
def test_the_table_says_ok_under_either_layout(layout, fresh, monkeypatch, capsys):
    """``bda,dc->abc`` comes back permuted under ``any``: right values, so ``ok``."""
    monkeypatch.setenv("EINC_LAYOUT", layout)
    assert pairwise.main(["--filter", "pw_ttm_bda_dc", "--rounds", "2", "--budget", "0.05"]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("| pw_ttm_bda_dc")]
    assert row.endswith("| ok |") and f"result layout {layout}" in out


def test_the_check_refuses_wrong_values_a_wrong_layout_and_a_view_of_an_operand(fresh, monkeypatch):
    eq, ops = "bda,dc->abc", _operands()
    right = torch.einsum(eq, *ops)
    permuted = right.permute(2, 0, 1).contiguous().permute(1, 2, 0)     # dense, another order
    strided = torch.zeros(*right.shape, 2)[..., 0]                      # not dense
    strided.copy_(right)
    for layout, result, ok in [("any", permuted, True), ("any", right, True), ("any", right + 1e-2, False),
                               ("any", strided, False), ("contiguous", permuted, False), ("contiguous", right, True)]:
        monkeypatch.setenv("EINC_LAYOUT", layout)
        monkeypatch.setattr(einc, "einsum", lambda *args, result=result: result)
        assert pairwise.check(eq, ops) == ok, (layout, result.stride())
    monkeypatch.setenv("EINC_LAYOUT", "any")
    view = ops[0].permute(2, 0, 1)          # the operand itself, seen in another order: right values, dense
    monkeypatch.setattr(einc, "einsum", lambda *args: view)
    assert not pairwise.check("bda->abd", ops[:1])


def test_cpu_rounds_draw_their_order_anew_by_default():
    """A method run right after another of the same shapes finds the memory that one
    freed: a fixed order would charge that to one method every round."""
    order = []
    fns = {name: (lambda name=name: order.append(name)) for name in "abcd"}
    pairwise.cpu_interleaved(fns, rounds=8, target=0)
    rounds = [tuple(order[4 + 4 * r:8 + 4 * r]) for r in range(8)]     # (after one warm-up call each)
    assert all(sorted(r) == list("abcd") for r in rounds) and len(set(rounds)) > 1
    order.clear()
    pairwise.cpu_interleaved(fns, rounds=3, target=0, seed=None)
    assert order[4:] == list("abcd") * 3
