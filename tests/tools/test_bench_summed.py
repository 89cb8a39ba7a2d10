"""bench/summed.py: a multiply-and-sum's training step, einc against torch.einsum, its
bits with and without autograd and its gradients checked."""

import pytest
import torch

from bench import summed


def test_one_round_times_both_and_checks_the_bits():
    threads = torch.get_num_threads()
    try:
        got = summed.one_round(1, r"^bi,bi->b bfloat16")
    finally:
        torch.set_num_threads(threads)
    cases = {key.rsplit(", ", 1)[0] for key in got}
    assert cases == {"`bi,bi->b` bfloat16 16x256", "`bi,bi->b` bfloat16 4096x1024"}
    for case in cases:
        assert got[f"{case}, the same bits with and without autograd"] == 1.0
        assert got[f"{case}, einc"] > 0 and got[f"{case}, torch"] > 0


def test_a_wrong_gradient_is_caught(monkeypatch):
    from einc.runtime.torch_executor import summed as runtime
    monkeypatch.setattr(runtime, "_part", lambda grad, other, shape, dtype: torch.zeros(shape, dtype=dtype))
    threads = torch.get_num_threads()
    try:
        with pytest.raises(AssertionError, match="gradient differs"):
            summed.one_round(1, r"^bi,bi->b bfloat16")
    finally:
        torch.set_num_threads(threads)
