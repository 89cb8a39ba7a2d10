"""The ``einc`` torch.compile backend next to plain inductor: where it wins, where it does not.

Run: python examples/compile_backend.py        (compiles with inductor: ~10-30 s on a CPU the first time)

``torch.compile(model, backend="einc")`` looks at the contractions dynamo captures
(``torch.einsum``, ``@``/``matmul``, ``mm``, ``bmm``, ``tensordot``, bias-free
``linear``) and rewrites one -- or a chain of them, fused into one planned
contraction, with the scalar factors around it -- into an einc einsum only where
einc's plan needs fewer flops than the code as written.  Everything else, and every
graph where nothing pays, goes to inductor exactly as ``torch.compile(model)`` would
compile it.  Two models:

- ``Factored``: layers with factored weights written ``x @ (U @ V)`` and as a chain
  of two einsums.  As written, torch forms the full weight on every call; einc's
  plan contracts ``(x @ U) @ V`` instead, a fraction of the flops.  Here the backend
  wins over inductor, which keeps the order as written.
- ``Block``: attention and a low-rank (LoRA) update already written in the cheapest
  order.  No contraction saves a flop, so the backend rewrites nothing and inductor
  compiles the graph it would have compiled anyway: no gain, no loss.  On a CPU einc
  runs each step on the same BLAS calls as torch, so rewriting such contractions would
  only add a few microseconds of Python per call (``options={"rewrite": "all"}`` does
  it anyway).
"""

import torch

import einc.dynamo
from einc.tools.benchmark.timing import interleaved


class Factored(torch.nn.Module):
    """Two layers with weights factored U @ V (rank 16), written the expensive way."""

    def __init__(self, d=512, rank=16):
        super().__init__()
        p = lambda *s: torch.nn.Parameter(torch.randn(s) / s[0] ** 0.5)    # noqa: E731
        self.u1, self.v1, self.u2, self.v2 = p(d, rank), p(rank, d), p(d, rank), p(rank, d)

    def forward(self, x):
        h = torch.relu(x @ (self.u1 @ self.v1))                           # the merged weight, every call
        w2 = torch.einsum("ir,ro->io", self.u2, self.v2)                   # the same, as a chain of einsums
        return torch.einsum("bi,io->bo", h, w2)


class Block(torch.nn.Module):
    """Attention on sequence-major heads, then a linear layer with a low-rank (LoRA) update."""

    def __init__(self, d=128, heads=4, rank=8):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.out = torch.nn.Linear(d, d, bias=False)
        self.lora_a = torch.nn.Parameter(torch.randn(d, rank) / d**0.5)
        self.lora_b = torch.nn.Parameter(torch.randn(rank, d) / rank**0.5)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        att = (torch.einsum("bqhd,bkhd->bhqk", q, k) / (d // self.heads) ** 0.5).softmax(-1)
        y = torch.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, n, d)
        return self.out(y) + 0.5 * (y @ self.lora_a @ self.lora_b)       # (y @ A) @ B: already cheapest


torch.set_num_threads(1)       # on a shared machine, a parallel op waits for descheduled threads
torch.manual_seed(0)
cases = {"Factored": (Factored().eval(), torch.randn(32, 512)),
         "Block": (Block().eval(), torch.randn(4, 64, 128))}

with torch.no_grad():
    for name, (model, x) in cases.items():
        torch._dynamo.reset()
        inductor = torch.compile(model)                              # torch.compile's default: inductor
        einc_backend = torch.compile(model, backend="einc")          # einc's pass, then inductor
        torch.testing.assert_close(inductor(x), model(x), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(einc_backend(x), model(x), rtol=1e-4, atol=1e-4)
        print(f"{name}: backend='einc' matches eager (and so does inductor)")
        print(einc.dynamo.last_report)        # rewritten: equation <- original ops; or left, and why
        # Per-call time: median of interleaved batches (einc's benchmark harness), so that a
        # busy machine slows all three alike.
        timings, _ = interleaved({"eager": lambda: model(x), "inductor": lambda: inductor(x),
                                  "einc": lambda: einc_backend(x)}, rounds=15, budget=1.5)
        med = {k: t.median * 1e3 for k, t in timings.items()}
        print("  " + "   ".join(f"{k} {v:.3f} ms" for k, v in med.items())
              + f"   einc/inductor {med['einc'] / med['inductor']:.2f}")
        if len(einc.dynamo.last_report):
            print("  the backend wins: einc's plan of the chain needs far fewer flops than the order as written\n")
        else:
            print("  no help here: nothing saves a flop, so inductor compiled the graph unchanged "
                  "(any difference above is timing noise)\n")
