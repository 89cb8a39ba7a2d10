"""Model benchmark: torch.compile(backend="einc") against inductor and eager on small models (CPU).

    python bench/models.py [--filter TEXT] [--rounds N] [--budget S] [--out DIR] [--quick] [--threads N]
                           [--device cuda]

Each model runs forward under ``torch.no_grad()`` in four ways: eager; ``torch.compile``
with its default backend (inductor); ``backend="einc"`` (einc's FX pass, which rewrites
only the contractions where einc's plan saves flops, then inductor); and the einc pass
with the rest of the graph left eager (``options={"inner": "eager"}``), which separates
what the rewrite does from what inductor does.  Same interleaved,
median-of-batches timing as the other benchmarks (einc/tools/benchmark/timing.py); see
bench/README.md.  Writes OUT/models.md and OUT/models.csv.  ``--device cuda`` moves the
modules and inputs to the GPU and synchronizes around each timed batch (a GPU run's
``models`` part, bench/gpu.md).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

if __package__ in (None, ""):                      # run as a script: make `bench` and `einc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import einc.dynamo  # noqa: E402
from einc.tools.benchmark import report  # noqa: E402
from einc.tools.benchmark.timing import interleaved  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
METHODS = ("eager", "inductor", "einc", "einc+eager")


def _param(g, *shape):
    return torch.nn.Parameter(torch.randn(shape, generator=g) / math.sqrt(shape[0]))


class Attention(torch.nn.Module):
    """Multi-head self-attention written with matmuls: projections, scaled scores, softmax."""

    def __init__(self, d=128, heads=4):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.heads = heads
        self.wq, self.wk, self.wv, self.wo = (_param(g, d, d) for _ in range(4))

    def forward(self, x):
        b, s, d = x.shape
        h, dh = self.heads, d // self.heads
        q = (x @ self.wq).view(b, s, h, dh).transpose(1, 2)
        k = (x @ self.wk).view(b, s, h, dh).transpose(1, 2)
        v = (x @ self.wv).view(b, s, h, dh).transpose(1, 2)
        att = (q @ k.transpose(-2, -1) / math.sqrt(dh)).softmax(-1)
        return (att @ v).transpose(1, 2).reshape(b, s, d) @ self.wo


class Bilinear(torch.nn.Module):
    """``torch.nn.Bilinear`` as an einsum: y[b,o] = x1[b,i] W[o,i,j] x2[b,j] + bias[o]."""

    def __init__(self, n1=64, n2=64, out=64):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.weight = _param(g, out, n1, n2)
        self.bias = torch.nn.Parameter(torch.zeros(out))

    def forward(self, x1, x2):
        return torch.einsum("bi,oij,bj->bo", x1, self.weight, x2) + self.bias


class TensorTrain(torch.nn.Module):
    """A tensor-train (TT) linear layer, 8*8*8 -> 8*8*8 with TT-ranks 4, as one einsum."""

    def __init__(self, n=8, rank=4):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.n = n
        self.g1 = _param(g, n, rank, n)            # [i, a, x]
        self.g2 = _param(g, rank, n, rank, n)      # [a, j, c, y]
        self.g3 = _param(g, rank, n, n)            # [c, k, z]

    def forward(self, x):
        b, n = x.shape[0], self.n
        y = torch.einsum("bijk,iax,ajcy,ckz->bxyz", x.view(b, n, n, n), self.g1, self.g2, self.g3)
        return y.reshape(b, n * n * n)


class LowRankMLP(torch.nn.Module):
    """An MLP whose layers are factored weights U @ V, written ``x @ (U @ V)`` (the merged
    weight, formed on every call); the einc pass reassociates each to ``(x @ U) @ V``."""

    def __init__(self, d=512, rank=32):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.u1, self.v1, self.u2, self.v2 = _param(g, d, rank), _param(g, rank, 4 * d), \
            _param(g, 4 * d, rank), _param(g, rank, d)

    def forward(self, x):
        return torch.relu(x @ (self.u1 @ self.v1)) @ (self.u2 @ self.v2) * 0.5


def models():
    """``{name: (module, inputs)}``; float32, seed 0."""
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(s, generator=g)    # noqa: E731
    return {
        "attention": (Attention(), (r(4, 128, 128),)),
        "bilinear": (Bilinear(), (r(256, 64), r(256, 64))),
        "tensor_train": (TensorTrain(), (r(512, 512),)),
        "lowrank_mlp": (LowRankMLP(), (r(512, 512),)),
    }


def _compiled(model, method):
    if method == "eager":
        return model
    if method == "inductor":
        return torch.compile(model)
    inner = "eager" if method == "einc+eager" else "inductor"
    return torch.compile(model, backend=einc.dynamo.make_backend(inner=inner))


def bench_model(name, model, inputs, rounds, budget, sync=None):
    """Compile (timed once), check against eager, then time all methods interleaved
    (``sync``: called around each timed batch and the compiling call)."""
    fns, compile_s, status, rewrites = {}, {}, {}, ""
    with torch.no_grad():
        ref = model(*inputs)
        for method in METHODS:
            fn = _compiled(model, method)
            hits = counters["inductor"]["fxgraph_cache_hit"]
            if sync:
                sync()
            t0 = time.perf_counter()
            out = fn(*inputs)
            if sync:
                sync()
            compile_s[method] = time.perf_counter() - t0
            if method == "einc":
                r = einc.dynamo.last_report
                rewrites = f"{len(r)} einsum(s) from {len(r) + r.fused} contraction(s), {r.kept} left to inductor"
                if not len(r) and counters["inductor"]["fxgraph_cache_hit"] > hits:
                    # the graph inductor got is the one it compiled for the inductor column
                    rewrites += " (inductor's own graph: FX-graph cache hit)"
            ok = torch.allclose(out, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
            status[method] = "ok" if ok else "MISMATCH"
            if not ok:
                print(f"!!! {name}: {method} differs from eager by {float((out - ref).abs().max()):.3g}",
                      file=sys.stderr)
            fns[method] = (lambda f: lambda: f(*inputs))(fn)
        timings, n_rounds = interleaved(fns, rounds, budget, min_rounds=min(rounds, 5), sync=sync)
    return timings, n_rounds, compile_s, status, rewrites


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--filter", default="", help="only models whose name contains TEXT")
    p.add_argument("--rounds", type=int, default=None, help="rounds per model (default 31, quick 7)")
    p.add_argument("--budget", type=float, default=None, help="timing seconds per model (default 6, quick 1)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (default bench/results/)")
    p.add_argument("--quick", action="store_true", help="fewer rounds (smoke test)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads(N) (default: torch's)")
    p.add_argument("--device", default="cpu", help="where the models run (cpu, cuda)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rounds = args.rounds or (7 if args.quick else 31)
    budget = args.budget or (1.0 if args.quick else 6.0)

    load, table, data, bad = report.Load(), [], [], False
    sync = torch.cuda.synchronize if torch.device(args.device).type == "cuda" else None
    for name, (model, inputs) in models().items():
        if args.filter not in name:
            continue
        print(f"{name} ...", file=sys.stderr, flush=True)
        torch._dynamo.reset()
        model, inputs = model.to(args.device), tuple(x.to(args.device) for x in inputs)
        timings, n_rounds, compile_s, status, rewrites = bench_model(name, model, inputs, rounds, budget, sync)
        m = {k: timings[k].median for k in METHODS}
        bad |= any(s != "ok" for s in status.values())
        checks = "ok" if all(s == "ok" for s in status.values()) else \
            ", ".join(f"**{k}: {s}**" for k, s in status.items() if s != "ok")
        table.append([name, *[report.us(m[k]) for k in METHODS],
                      report.fmt_ratio(report.ratio(m["einc"], m["inductor"])),
                      report.fmt_ratio(report.ratio(m["einc"], m["eager"])),
                      f"{compile_s['inductor']:.1f} / {compile_s['einc']:.1f}", rewrites, checks])
        data.append([name, *[round(m[k] * 1e6, 3) for k in METHODS],
                     round(m["einc"] / m["inductor"], 4), round(m["einc"] / m["eager"], 4),
                     *[round(compile_s[k], 3) for k in METHODS], rewrites, checks, n_rounds,
                     *[timings[k].calls for k in METHODS]])

    md = report.header(f"einc torch.compile backend: models ({args.device})", "float32", load, [
        "forward under torch.no_grad(); eager = the module as written; inductor = torch.compile(model); "
        "einc = torch.compile(model, backend=\"einc\") (einc's FX pass, then inductor); einc+eager = the "
        "einc pass with the rest of the graph eager",
        f"timing: median over up to {rounds} rounds (budget {budget:.0f} s/model) of per-call time, batches "
        "≥ 2 ms, methods interleaved in shuffled order; the first (compiling) call is untimed",
        "compile s: the first call (dynamo + backend), inductor / einc"])
    md += report.markdown_table(["model", *[f"{k} µs" for k in METHODS], "einc/inductor", "einc/eager",
                                 "compile s", "einc rewrites", "check"], table)
    report.write(args.out, "models", md,
                 ["model", *[f"{k.replace('+', '_')}_us" for k in METHODS], "einc_over_inductor", "einc_over_eager",
                  *[f"{k.replace('+', '_')}_first_call_s" for k in METHODS], "einc_rewrites", "check", "rounds",
                  *[f"{k.replace('+', '_')}_calls_per_batch" for k in METHODS]], data)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
