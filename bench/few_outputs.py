"""Few outputs of long sums on the CPU: time and error against torch.einsum and opt_einsum
(``einc/runtime/torch_executor/blocked.py``: a matrix product over blocks of the sum; 16-bit
floats one matrix product).

    python bench/few_outputs.py [--rounds 5] [--repeat 15] [--filter REGEX] [--train] [--against /tmp/einc-before]
    python bench/few_outputs.py --blocks [--repeat 21]    # the block length: torch alone

Per case (below; ``--filter``: those whose equation and dtype match), in a fresh process
(1 thread, thread CPU time): each method's call, the median of ``--repeat`` after one warm
call (einc planned per shape, ``EINC_NEW_SHAPES=plan``, and in its size class where the
call is small enough for one: the ``class`` rows), and its largest error relative to the
exact sums (float64 products added by torch's cascade sum), in units of the dtype's
epsilon (float16's first operand scaled by 1/64, so that the sums stay in its range).
With ``--train`` each call is a training step instead: the result and both operands'
gradients (``torch.autograd.grad`` against a fixed gradient), its error the result's.
With ``--against DIR`` (another checkout, e.g. a ``git archive`` of an older
commit) each round runs one process per checkout in alternating order
(``bench/checkouts.py``), and the paired per-round ratios (this checkout / the other) are
given as their median with a 95 % interval.  Markdown on stdout.

``--blocks`` sweeps the block length that ``blocked.BLOCK``, ``SHORTEST`` and ``LONGEST``
fix, on torch alone, in this process: a row vector of K terms times K x N (float32 and
float64, ``torch.rand`` and ``torch.randn``), as one matrix product and as a batch of
K / L products of L terms whose partials ``sum`` adds, for L from 16 to 4096: the median
time of ``--repeat`` calls and the largest error relative to the largest exact sum, in
epsilons.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [("abc,abcd->d", [(64, 64, 64), (64, 64, 64, 8)]),       # few outputs, a broadcast operand
          ("abc,abcd->d", [(40, 41, 42), (40, 41, 42, 4)]),       # einops' case, a size class's
          ("k,kn->n", [(1 << 20,), (1 << 20, 2)]),
          ("bk,bkn->bn", [(64, 8192), (64, 8192, 4)]),
          ("ij,ijk->k", [(512, 512), (512, 512, 16)]),
          ("kn,k->n", [(1 << 18, 8), (1 << 18,)]),
          ("ab,abc->c", [(256, 256), (256, 256, 3)])]              # a size class's
CASES = [(eq, shapes, dtype) for dtype in ("float32", "float64", "bfloat16", "float16") for eq, shapes in SHAPES]


def one_round(repeat: int, pattern: str, train: bool = False) -> dict:
    """One process's figures per case (whose equation and dtype match ``pattern``) and
    method: the median time in seconds, and the error in epsilons."""
    import opt_einsum
    import torch
    from checkouts import median_time

    import einc
    torch.set_num_threads(1)
    out = {}
    for eq, shapes, dtype in [c for c in CASES if re.search(pattern, f"{c[0]} {c[2]}")]:
        g = torch.Generator().manual_seed(0)
        ops = [torch.rand(s, generator=g, dtype=torch.float64).to(getattr(torch, dtype)) for s in shapes]
        if dtype == "float16":
            ops[0] = ops[0] / 64
        if train:
            ops = [o.requires_grad_() for o in ops]
        ins, kept = eq.split("->")
        summed = "".join(sorted(set(ins) - set(kept) - {","}))
        exact = torch.einsum(f"{ins}->{kept}{summed}", *[o.double() for o in ops]).flatten(len(kept)).sum(-1)
        eps = torch.finfo(ops[0].dtype).eps
        case = f"`{eq}` {dtype} {'x'.join(map(str, shapes[0]))}"
        methods = [("einc", einc.einsum, "plan"), ("einc class", einc.einsum, "class"),
                   ("torch.einsum", torch.einsum, None), ("opt_einsum", opt_einsum.contract, None)]
        for name, fn, new_shapes in methods:
            if new_shapes:
                os.environ["EINC_NEW_SHAPES"] = new_shapes
                einc.cache_clear()
                if new_shapes == "class" and einc.explain(eq, *ops).size_class is None:
                    continue
            res = fn(eq, *ops)
            out[f"{case}, {name}: error, eps"] = float(((res.detach().double() - exact).abs()
                                                        / exact.abs()).max()) / eps
            w = torch.ones_like(res)
            call = (lambda: torch.autograd.grad(fn(eq, *ops), ops, w)) if train else (lambda: fn(eq, *ops))
            call()
            out[f"{case}, {name}: us"] = median_time(call, repeat)
    return out


def blocks(repeat: int) -> list[str]:
    """Markdown rows of the ``--blocks`` sweep (the module's docstring)."""
    import torch
    from checkouts import median_time
    torch.set_num_threads(1)
    lengths = (16, 64, 256, 1024, 2048, 4096)
    rows = ["| K x N, dtype, values | one product: us, error | " + " | ".join(f"blocks of {n}" for n in lengths)
            + " |", "|---" * (len(lengths) + 2) + "|"]
    for (k, n), dtype, values in [(s, d, v) for s in ((65536, 3), (262144, 8), (1 << 20, 2))
                                  for d in ("float32", "float64") for v in ("rand", "randn")]:
        g = torch.Generator().manual_seed(0)
        a = getattr(torch, values)(k, generator=g, dtype=torch.float64)
        b = getattr(torch, values)(k, n, generator=g, dtype=torch.float64)
        exact = (a[:, None] * b).sum(0)
        a, b = a.to(getattr(torch, dtype)), b.to(getattr(torch, dtype))
        eps = torch.finfo(a.dtype).eps

        def cell(fn):
            fn()
            median = median_time(fn, repeat)
            err = float((fn().double() - exact).abs().max() / exact.abs().max()) / eps
            return f"{median * 1e6:.0f}, {err:.1f}"
        cells = [cell(lambda: a @ b)]
        for length in lengths:
            cells.append(cell(lambda m=k // length, length=length: torch.bmm(a.view(m, 1, length),
                                                                              b.view(m, length, n)).sum(0)))
        rows.append(f"| {k} x {n}, {dtype}, {values} | " + " | ".join(cells) + " |")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--against", type=Path, help="another einc checkout, timed in alternate processes")
    p.add_argument("--filter", default="", help="cases whose 'equation dtype' matches this regex")
    p.add_argument("--train", action="store_true", help="time a training step (forward + backward)")
    p.add_argument("--blocks", action="store_true", help="sweep the block length on torch alone")
    p.add_argument("--one", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        sys.path.insert(0, str(Path.cwd()))
        repeat, train, pattern = a.one.split(":", 2)
        print(json.dumps(one_round(int(repeat), pattern, train == "1")))
        return 0
    if a.blocks:
        print(f"the median of {a.repeat} calls, thread CPU time, 1 thread; error in epsilons of the largest sum")
        print("\n".join(blocks(a.repeat)))
        return 0
    from checkouts import rounds, table
    roots = [ROOT] + ([a.against.resolve()] if a.against else [])
    rows = rounds(ROOT / "bench" / "few_outputs.py", roots, a.rounds, f"{a.repeat}:{int(a.train)}:{a.filter}",
                  EINC_COPY_COMPILE="off")
    what = "training steps" if a.train else "calls"
    print(f"{a.rounds} rounds, the median of {a.repeat} {what} a round, thread CPU time, 1 thread")
    print("\n".join(table(rows, roots, "case, method: figure",
                           cell=lambda key, m: f"{m:.1f}" if "error" in key else f"{m * 1e6:.0f}",
                           paired=lambda key: "error" not in key)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
