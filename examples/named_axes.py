"""Named and composite axes: the reshapes around an einsum written in its equation.

Three layers as models write them -- multi-head attention on merged heads, grouped-query
attention, a rotation of complex pairs that ends in ``torch.view_as_complex`` -- each
checked against the same computation written with views and torch.einsum.
Runs on a CPU in a second: ``python examples/named_axes.py``.
"""

import torch

import einc

torch.manual_seed(0)
b, n, h, d = 2, 16, 4, 8

# 1. Multi-head attention on merged heads: the projections' (b, n, h*d) layout in and out,
#    no view / permute / reshape around the einsums, and a contiguous (b, n, h*d) result.
q, k, v = (torch.randn(b, n, h * d) for _ in range(3))
scores = einc.einsum("b q (h d), b k (h d) -> b h q k", q, k, h=h) / d ** 0.5
attn = scores.softmax(dim=-1)
out = einc.einsum("b h q k, b k (h d) -> b q (h d)", attn, v, h=h)

heads = lambda t: t.view(b, n, h, d)      # noqa: E731 - the same with views and torch.einsum
ref = torch.einsum("bhqk,bkhd->bqhd", torch.einsum("bqhd,bkhd->bhqk", heads(q), heads(k)).div(d ** 0.5)
                   .softmax(-1), heads(v)).reshape(b, n, h * d)
assert out.shape == (b, n, h * d) and out.is_contiguous()
torch.testing.assert_close(out, ref)
print("multi-head attention, merged heads in and out:", tuple(out.shape), "contiguous:", out.is_contiguous())

# 2. Grouped-query attention: g key/value heads, each shared by r query heads (h = g * r).
#    The query's heads are (g r) inside its last dimension; no repeat_interleave of k and v.
g, r = 2, 2
kv = torch.randn(2, b, n, g * d)
k, v = kv[0], kv[1]
scores = einc.einsum("b q (g r d), b k (g d) -> b g r q k", q, k, g=g, r=r) / d ** 0.5
out = einc.einsum("b g r q k, b k (g d) -> b q (g r d)", scores.softmax(-1), v, g=g)

rep = lambda t: t.view(b, n, g, 1, d).expand(b, n, g, r, d).reshape(b, n, h, d)  # noqa: E731
ref = torch.einsum("bhqk,bkhd->bqhd", torch.einsum("bqhd,bkhd->bhqk", heads(q), rep(k)).div(d ** 0.5)
                   .softmax(-1), rep(v)).reshape(b, n, h * d)
torch.testing.assert_close(out, ref)
print("grouped-query attention, 2 kv heads for 4 query heads:", tuple(out.shape))

# 3. A rotation of complex pairs (rotary position embedding): x holds (re, im) pairs inside
#    its last dimension; a 2x2 rotation per position and pair rotates them, and einc's
#    contiguous result goes straight into torch.view_as_complex.
p = d // 2
x = torch.randn(b, n, h * p * 2)
theta = torch.arange(n)[:, None] * 10000 ** (-torch.arange(p) / p)          # (n, p)
cos, sin = theta.cos(), theta.sin()
rot = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)   # (n, p, i, j)
z = torch.view_as_complex(einc.einsum("b n (h p i), n p i j -> b n h p j", x, rot, h=h, i=2))

ref = torch.view_as_complex(x.view(b, n, h, p, 2)) * torch.polar(torch.ones(n, p), theta)[:, None]
torch.testing.assert_close(z, ref)
print("rotation of complex pairs -> view_as_complex:", tuple(z.shape), z.dtype)

# How the names resolved, and what each split and merge costs:
print(einc.explain("b q (g r d), b k (g d) -> b g r q k", q, k, g=g, r=r))
