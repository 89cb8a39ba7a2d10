"""The TMA variant of a 16-bit matrix product against the module's own kernel and cuBLAS.

    python bench/gpu_tma.py --out DIR [--deadline S] [--configs N] [--filter REGEX]
    python bench/gpu_tma.py --dry-run --out DIR        # CPU tensors, the interpreter

Per row of :data:`ROWS` (plain bf16/fp16 GEMMs of 4096^2 x 4096 and more, in the three
layouts a descriptor reads: A and B row-major, B read along K as in ``x @ W.T``, A read
along M; and a permuted step of the same size, ``gemma_q_proj``'s ``abc,dce->abde``,
whose weight the variant reads GETT-style, an axis per index), the generated module of
the one-step plan is loaded and timed three ways, each checked against an fp32
``torch.einsum`` of the same operands:

- ``cublas``: ``torch.einsum`` on the same tensors (cuBLAS, transposes folded into the
  call; for the permuted step, the copies it makes first and then cuBLAS);
- ``tma``: the module's TMA variant (``<name>_tma``, persistent tiles over tensor
  descriptors) in each of the first ``--configs`` configs its launcher keeps for the shape;
- ``kernel``: the module's own kernel (the launcher told the device has no TMA), likewise.

One config a run, no autotuning (a ``Layout`` set up once with the config fixed, then
launched directly: the figures are the kernels', not einc's host path), the configs
compiled before any timing; then :data:`ROUNDS` interleaved rounds of
``triton.testing.do_bench`` (median, L2 flushed), the best round kept.  Written to
``DIR/gpu_tma.csv`` (one line per row and candidate, rewritten after every row): µs,
TFLOP/s, the error and ``cublas_over`` (cuBLAS's time / this one's: the target is >= 0.9
for the best TMA config).  ``--deadline`` stops starting rows.  ``--dry-run`` runs small
shapes through Triton's interpreter with the variant let run on CPU tensors: a check
that the script starts, takes the variant and writes its CSV, not a measurement.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# id, equation, operand shapes (contiguous), dtype
ROWS = [
    ("bf16_nn_4096", "mk,kn->mn", [(4096, 4096), (4096, 4096)], "bfloat16"),
    ("bf16_gett_4096", "abc,dce->abde", [(4, 1024, 4096), (32, 4096, 128)], "bfloat16"),   # N = de, K between
    ("bf16_nt_4096", "mk,nk->mn", [(4096, 4096), (4096, 4096)], "bfloat16"),     # x @ W.T: B read along K
    ("bf16_tn_4096", "km,kn->mn", [(4096, 4096), (4096, 4096)], "bfloat16"),     # A read along M
    ("bf16_nn_8192", "mk,kn->mn", [(8192, 4096), (4096, 8192)], "bfloat16"),
    ("fp16_nn_4096", "mk,kn->mn", [(4096, 4096), (4096, 4096)], "float16"),
]
DRY = [("dry_nn", "mk,kn->mn", [(72, 40), (40, 64)], "bfloat16"),
       ("dry_nt", "mk,nk->mn", [(64, 24), (80, 24)], "float16"),
       ("dry_gett", "abc,dce->abde", [(2, 40, 32), (3, 32, 64)], "bfloat16")]
ROUNDS = 3
FIELDS = ["row", "equation", "shapes", "dtype", "candidate", "config", "us", "tflops", "err", "cublas_over", "error"]


def operands(shapes, dtype, device, seed=0):
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    return [(torch.randn(s, generator=g) / 8).to(getattr(torch, dtype)).to(device) for s in shapes]


def flops(equation, shapes) -> float:
    """2 x the product of every index's size (a contraction's multiply-adds)."""
    sizes = {c: n for term, shape in zip(equation.split("->")[0].split(","), shapes) for c, n in zip(term, shape)}
    total = 2.0
    for n in sizes.values():
        total *= n
    return total


def module_of(equation, ops):
    """The generated module of the one-step plan for ``ops`` (laid out as they are)."""
    from einc.codegen import render
    from einc.codegen.lower import lower_program
    from einc.planner.equation import parse
    from einc.planner.graph import build
    from einc.planner.plan import build_plan
    from einc.runtime.triton_executor import dtype_name, loader
    shapes = [tuple(o.shape) for o in ops]
    plan = build_plan(build(parse(equation), shapes), equation)
    (kernel,) = lower_program(plan, dtype_name(ops[0].dtype), shapes, [o.stride() for o in ops])
    return kernel, loader.load(kernel.name, render(kernel))


def fixed_runs(module, kernel, ops, tma: bool, how_many: int):
    """``[(config text, run(), output)]``: the TMA variant's (or the module kernel's) first
    ``how_many`` configs for this layout, each a Layout with its config fixed."""
    launcher = module.launcher
    launcher.tma_device = lambda device: tma        # the variant where the launcher would take it, or never
    roles = tuple(ops[kernel.params.index(op.name)] for op in kernel.inputs)
    c, known = launcher._set_up(roles, 1.0)         # (what launch() does on a new layout, kept here to time)
    if (known.variant is not None) != tma:
        raise RuntimeError(f"the launcher {'did not take' if tma else 'took'} the TMA variant here")
    configs = [None] if launcher.interpret else \
        launcher.prune(known.variant.configs if tma else launcher.configs, None, **known.meta)[:how_many]
    runs = []
    for config in configs:
        layout = launcher._set_up(roles, 1.0)[1]
        layout.config = config
        out = c.new_empty(c.shape)
        runs.append(("interpreter" if config is None else _config_text(config),
                     lambda layout=layout, out=out: layout.run((*roles, out), 1.0), out))
    return runs


def _config_text(config) -> str:
    k = config.kwargs
    return f"{k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']} w{config.num_warps} s{config.num_stages}"


def measure_row(row, device, how_many, bench):
    """The CSV lines of one row: cuBLAS, then each config of the variant and of the kernel."""
    import torch
    rid, equation, shapes, dtype = row
    ops = operands(shapes, dtype, device)
    expected = torch.einsum(equation, *[o.float() for o in ops])
    kernel, module = module_of(equation, ops)
    if module.launcher.tma is None:
        raise RuntimeError(f"{kernel.name} has no TMA variant")
    candidates = [("cublas", "torch.einsum", lambda: torch.einsum(equation, *ops), None)]
    for name, tma in (("tma", True), ("kernel", False)):
        candidates += [(name, text, run, out) for text, run, out in fixed_runs(module, kernel, ops, tma, how_many)]
    results = {}
    for name, text, run, out in candidates:          # compile (and check) everything before timing
        got = run() if out is None else (run(), out)[1]
        err = ((got.float() - expected).norm() / expected.norm()).item()
        results[(name, text)] = {"err": err, "us": float("inf")}
    for _ in range(ROUNDS):
        for name, text, run, _out in candidates:
            results[(name, text)]["us"] = min(results[(name, text)]["us"], bench(run))
    work = flops(equation, shapes)
    cublas = results[("cublas", "torch.einsum")]["us"]
    return [dict(row=rid, equation=equation, shapes=" ".join("x".join(map(str, s)) for s in shapes), dtype=dtype,
                 candidate=name, config=text, us=round(r["us"], 2), tflops=round(work / r["us"] / 1e6, 1),
                 err=f"{r['err']:.2e}",
                 cublas_over=round(cublas / r["us"], 3), error="")
            for (name, text), r in results.items()]


def write(lines, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(lines)


def summary(lines) -> str:
    """Per row: the best config of each candidate, its µs and cuBLAS's time over it."""
    out = [f"{'row':16} {'cublas us':>10} {'tma us':>9} {'kernel us':>10} {'tma/cublas':>11} "
           f"{'kernel/cublas':>14} {'tma vs kernel':>14}  best tma config"]
    for rid in dict.fromkeys(x["row"] for x in lines):
        rs = [x for x in lines if x["row"] == rid and not x["error"]]
        best = {c: min((x for x in rs if x["candidate"] == c), key=lambda x: x["us"], default=None)
                for c in ("cublas", "tma", "kernel")}
        if not all(best.values()):
            out.append(f"{rid:16} incomplete: {[x['error'] for x in lines if x['row'] == rid and x['error']]}")
            continue
        cb, tm, kn = (best[c]["us"] for c in ("cublas", "tma", "kernel"))
        out.append(f"{rid:16} {cb:10.1f} {tm:9.1f} {kn:10.1f} {cb / tm:11.3f} {cb / kn:14.3f} {kn / tm:14.3f}  "
                   f"{best['tma']['config']}")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=".", help="folder for gpu_tma.csv")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds: no row starts after this")
    parser.add_argument("--configs", type=int, default=2, help="configs of each kernel to time (the first kept)")
    parser.add_argument("--filter", default=None, help="regex on the row id")
    parser.add_argument("--dry-run", action="store_true", help="CPU tensors through the interpreter")
    args = parser.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from einc.runtime import triton_executor
    from einc.runtime.triton_executor import tma
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: use --dry-run for the CPU smoke test", file=sys.stderr)
        return 2
    if args.dry_run:
        triton_executor.use_interpreter()
        tma.ANYWHERE = True

        def bench(fn):
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e6
    else:
        from triton.testing import do_bench

        def bench(fn):
            return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
    start = time.monotonic()
    rows = [r for r in (DRY if args.dry_run else ROWS) if not args.filter or re.search(args.filter, r[0])]
    print(f"gpu_tma: {len(rows)} rows on {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, "
          f"deadline {args.deadline:.0f} s, {args.configs} configs per kernel", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "gpu_tma.csv"
    lines = []
    for row in rows:
        if time.monotonic() - start > args.deadline:
            print(f"deadline: {row[0]} and later rows not started", flush=True)
            break
        try:
            lines += measure_row(row, device, args.configs, bench)
        except Exception as e:  # noqa: BLE001 - a row that fails is a line with its error
            lines.append(dict(row=row[0], equation=row[1], dtype=row[3], error=f"{type(e).__name__}: {e}"[:300]))
        print(f"{row[0]} done at {time.monotonic() - start:.0f} s", flush=True)
        write(lines, path)
    print(summary(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
