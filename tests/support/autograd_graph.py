"""Leaves that require grad, and the names of the autograd nodes behind a result."""

from __future__ import annotations

import torch


def leaves(shapes, seed=0, dtype=torch.float64):
    """Random tensors of ``shapes`` that require grad, the same for the same ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, dtype=dtype, generator=g).requires_grad_() for s in shapes]


def grad_fns(t) -> set[str]:
    """The names of every autograd node ``t``'s backward would run (``MmBackward0``, ...)."""
    seen, todo = set(), [t.grad_fn]
    while todo:
        f = todo.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        todo.extend(n for n, _ in f.next_functions)
    return {f.name() for f in seen}
