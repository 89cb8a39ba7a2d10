"""A multiply and sum's training step, forward + backward, on the CPU
(``einc/runtime/torch_executor/summed.py``: one made in blocks, one of float16 or bfloat16
operands multiplied in float32).

    python bench/summed.py [--rounds 5] [--repeat 15] [--filter REGEX] [--against /tmp/einc-before]

Per case (below: float32 and float64 products of 16 MiB and more, made in blocks; 16-bit
ones from 16 KiB to 32 MiB of float32 products; ``--filter``: those whose equation and
dtype match), in a fresh process (1 thread, thread CPU time): whether einc's result has the
same bits with and without autograd; einc's forward + backward (``torch.autograd.grad`` of
the result against a fixed gradient), the median of ``--repeat`` after one warm call, and
torch.einsum's the same way, in the same process; the gradients are checked against
torch.einsum's on float64 copies first.  With ``--against DIR`` (another checkout of
einc, e.g. a ``git archive`` of an older commit) each round runs one process per
checkout, in alternating order (``bench/checkouts.py``), and the paired per-round ratios
(this checkout / the other) are given as their median with a 95 % interval.  Markdown on
stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = [("bij,bij->b", [(64, 256, 256), (64, 256, 256)], "float32"),
         ("bij,bji->b", [(32, 256, 512), (32, 512, 256)], "float32"),
         ("bij,bij->b", [(32, 256, 256), (32, 256, 256)], "float64"),
         ("bi,bi->b", [(16, 256), (16, 256)], "bfloat16"),
         ("bi,bi->b", [(4096, 1024), (4096, 1024)], "bfloat16"),
         ("bi,bi->b", [(4096, 1024), (4096, 1024)], "float16"),
         ("ij,ij->", [(3000, 3000), (3000, 3000)], "float16"),
         ("abc,abcd->d", [(64, 64, 64), (64, 64, 64, 8)], "bfloat16")]


def one_round(repeat: int, pattern: str) -> dict:
    """One process's medians, in seconds, per case (whose equation and dtype match
    ``pattern``) and method."""
    import torch
    from checkouts import median_time

    import einc
    torch.set_num_threads(1)
    out = {}
    for eq, shapes, dtype in [c for c in CASES if re.search(pattern, f"{c[0]} {c[2]}")]:
        g = torch.Generator().manual_seed(0)
        ops = [torch.randn(s, generator=g).to(getattr(torch, dtype)).requires_grad_() for s in shapes]
        with torch.no_grad():
            plain = einc.einsum(eq, *ops)
        tracked = einc.einsum(eq, *ops).detach()
        case = f"`{eq}` {dtype} {'x'.join(map(str, shapes[0]))}"
        out[f"{case}, the same bits with and without autograd"] = float(
            bool(((tracked == plain) | (tracked.isnan() & plain.isnan())).all()))
        w = None
        for name, fn in (("einc", einc.einsum), ("torch", torch.einsum)):
            res = fn(eq, *ops)
            w = torch.randn(res.shape, generator=g).to(res.dtype) if w is None else w
            grads = torch.autograd.grad(res, ops, w)
            if name == "einc":
                wide = [o.detach().double().requires_grad_() for o in ops]
                want = torch.autograd.grad(torch.einsum(eq, *wide), wide, w.double())
                for got, ref in zip(grads, want):
                    scale = float(ref.abs().max()) or 1.0
                    if float((got.double() - ref).abs().max()) > 2e-2 * scale:
                        raise AssertionError(f"{eq} {dtype}: einc's gradient differs")
            out[f"{case}, {name}"] = median_time(lambda: torch.autograd.grad(fn(eq, *ops), ops, w), repeat)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--against", type=Path, help="another einc checkout, timed in alternate processes")
    p.add_argument("--filter", default="", help="cases whose 'equation dtype' matches this regex")
    p.add_argument("--one", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        sys.path.insert(0, str(Path.cwd()))
        repeat, pattern = a.one.split(":", 1)
        print(json.dumps(one_round(int(repeat), pattern)))
        return 0
    from checkouts import rounds, table
    roots = [ROOT] + ([a.against.resolve()] if a.against else [])
    rows = rounds(ROOT / "bench" / "summed.py", roots, a.rounds, f"{a.repeat}:{a.filter}",
                  EINC_COPY_COMPILE="off")
    print(f"{a.rounds} rounds, the median of {a.repeat} forward + backward a round, thread CPU time, 1 thread")
    bits = "the same bits"
    print("\n".join(table(rows, roots, "case, method: us",
                           cell=lambda key, m: ("yes" if m == 1 else "no") if bits in key else f"{m * 1e6:.0f}",
                           paired=lambda key: bits not in key)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
