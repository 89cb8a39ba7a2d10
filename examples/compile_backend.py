"""The ``einc`` torch.compile backend on a small model: contractions become planned einc calls.

Run: python examples/compile_backend.py [--inductor]

``torch.compile(model, backend="einc")`` rewrites the contractions dynamo captures
(``torch.einsum``, ``@``/``matmul``, ``mm``, ``bmm``, ``tensordot``, bias-free
``linear``) into einc einsums -- fusing chains such as ``x @ A @ B`` into one planned
contraction and folding scalar factors in -- and hands the rest of the graph to
inductor.  This example passes ``options={"inner": "eager"}`` so that it runs in a few
seconds on a CPU (inductor's C++ compilation takes longer); ``--inductor`` uses the
default.
"""

import sys
import time

import torch

import einc.dynamo
from einc.benchmark.timing import interleaved


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
        return self.out(y) + 0.5 * (y @ self.lora_a @ self.lora_b)


torch.set_num_threads(1)       # on a shared machine, a parallel op waits for descheduled threads
torch.manual_seed(0)
model = Block().eval()
x = torch.randn(4, 64, 128)
options = {} if "--inductor" in sys.argv else {"inner": "eager"}

with torch.no_grad():
    compiled = torch.compile(model, backend="einc", options=options)
    t0 = time.perf_counter()
    y = compiled(x)                                   # dynamo traces, einc rewrites and plans
    first = time.perf_counter() - t0
    torch.testing.assert_close(y, model(x), rtol=1e-4, atol=1e-4)
    print(f"compiled with backend='einc' ({options.get('inner', 'inductor')} for the rest of the graph) "
          f"in {first:.1f} s; matches eager")
    print(einc.dynamo.last_report)                   # what was rewritten: equation <- original ops
    # Per-call time: median of interleaved batches (einc's benchmark harness), so that a
    # busy machine slows both alike.
    timings, _ = interleaved({"eager": lambda: model(x), "compiled": lambda: compiled(x)}, rounds=15, budget=1.5)
    for name, t in timings.items():
        print(f"{name:8s} {t.median * 1e3:7.2f} ms per call (median of {len(t.samples)} batches)")
