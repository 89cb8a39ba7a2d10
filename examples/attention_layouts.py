"""Attention with awkward layouts: einc's results are contiguous where torch.einsum's are not.

Run: python examples/attention_layouts.py

torch.einsum computes a contraction as a batched matrix product and returns the
product's memory order permuted to the requested output order: often a
non-contiguous view, on which ``.view()`` and ``torch.view_as_complex`` fail (the
caller must ``.reshape()``, a copy, or ``.contiguous()``).  einc always returns a
fresh tensor in the standard contiguous layout of the output it was asked for.  On
the CPU (this example) einc's torch executor makes that copy itself; on a GPU its
generated kernels read the operands through their strides and write the result in
that layout directly, with no copy on either side.
"""

import torch

import einc

torch.manual_seed(0)
b, s, h, d = 2, 64, 4, 16


def show(label, out):
    print(f"  {label:34s} shape {str(tuple(out.shape)):16s} contiguous: {out.is_contiguous()}")


# 1. Sequence-major ("bshd", as many models keep q/k/v): no transposes needed before the call.
q, k, v = (torch.randn(b, s, h, d) for _ in range(3))
print("1. sequence-major q, k, v (b, s, h, d)")
scores = einc.einsum("bqhd,bkhd->bhqk", q, k) / d**0.5
torch.testing.assert_close(scores, torch.einsum("bqhd,bkhd->bhqk", q, k) / d**0.5)
show("einc scores bhqk", scores)
probs = scores.softmax(-1)

# 2. Interleaved output: write the result back sequence-major ("bqhd") and merge the heads.
print("2. output back in sequence-major order, heads merged with .view()")
out_torch = torch.einsum("bhqk,bkhd->bqhd", probs, v)
out_einc = einc.einsum("bhqk,bkhd->bqhd", probs, v)
torch.testing.assert_close(out_einc, out_torch)
show("torch.einsum bqhd", out_torch)
show("einc bqhd", out_einc)
try:
    out_torch.view(b, s, h * d)
    print("  torch.einsum result .view(b, s, h*d): ok")
except RuntimeError as e:
    print(f"  torch.einsum result .view(b, s, h*d) fails: {str(e).split('.')[0]}")
merged = out_einc.view(b, s, h * d)              # no copy: einc's result is already in this layout
print(f"  einc result .view(b, s, h*d): ok, shape {tuple(merged.shape)}")

# 3. Batch-last operands (s, h, d, b): einc takes any strides; the output is still contiguous.
print("3. batch-last operands (s, h, d, b)")
qb, kb = q.permute(1, 2, 3, 0).contiguous(), k.permute(1, 2, 3, 0).contiguous()
scores_b = einc.einsum("qhdb,khdb->bhqk", qb, kb) / d**0.5
torch.testing.assert_close(scores_b, scores)
show("einc scores from batch-last", scores_b)

# 4. Real and imaginary parts stacked first, wanted interleaved last: view_as_complex.
print("4. stacked real/imaginary weights (2, i, j) applied to x (j, k), output (i, k, 2) as complex")
w = torch.randn(2, 32, s)                         # w[0] real part, w[1] imaginary part
x = torch.randn(s, 8)
z_torch = torch.einsum("cij,jk->ikc", w, x)
z_einc = einc.einsum("cij,jk->ikc", w, x)
torch.testing.assert_close(z_einc, z_torch)
try:
    torch.view_as_complex(z_torch)
    print("  torch.view_as_complex(torch.einsum result): ok")
except RuntimeError as e:
    print(f"  torch.view_as_complex(torch.einsum result) fails: {e}")
zc = torch.view_as_complex(z_einc)
torch.testing.assert_close(zc, torch.complex(w[0] @ x, w[1] @ x))
print(f"  torch.view_as_complex(einc result): ok, {zc.dtype} {tuple(zc.shape)}")

# 5. What runs: on CPU tensors the torch executor; for CUDA half-precision operands the
# generated Triton kernel (explain needs no GPU to say so).
print("5. the plan for CUDA float16 operands")
print(einc.explain("bhqk,bkhd->bqhd", probs.shape, v.shape, dtype=torch.float16, device="cuda"))
