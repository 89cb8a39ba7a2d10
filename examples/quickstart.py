"""Quickstart: einc.einsum as a drop-in for torch.einsum, and what it planned.

Run: python examples/quickstart.py
"""

import time

import torch

import einc

torch.manual_seed(0)

# 1. Drop-in: same call, same result as torch.einsum.
q = torch.randn(2, 128, 4, 32)          # batch, sequence, heads, dim: sequence-major layout
k = torch.randn(2, 128, 4, 32)
scores = einc.einsum("bqhd,bkhd->bhqk", q, k)
torch.testing.assert_close(scores, torch.einsum("bqhd,bkhd->bhqk", q, k))
print("attention scores:", tuple(scores.shape), "contiguous:", scores.is_contiguous())

# 2. The result is always contiguous, even where torch.einsum returns a permuted view.
out = einc.einsum("bqhd,bkhd->bqkh", q, k)
print("permuted output contiguous in einc:", out.is_contiguous(),
      "| in torch.einsum:", torch.einsum("bqhd,bkhd->bqkh", q, k).is_contiguous())

# 3. Multi-operand: einc plans once per shape; torch.einsum searches on every call.
mats = [torch.randn(64, 8), torch.randn(8, 64), torch.randn(64, 8), torch.randn(8, 64), torch.randn(64, 8)]
eq = "ab,bc,cd,de,ef->af"
einc.einsum(eq, *mats)                  # the first call plans and caches
for name, fn in [("torch.einsum", torch.einsum), ("einc.einsum", einc.einsum)]:
    t0 = time.perf_counter()
    for _ in range(200):
        fn(eq, *mats)
    print(f"{name:13s} {1e6 * (time.perf_counter() - t0) / 200:8.1f} us per call")

# 4. What einc will run: the plan, step by step.
print()
print(einc.explain(eq, *mats))
print()
print(einc.cache_info())
