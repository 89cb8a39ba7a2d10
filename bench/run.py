"""Suite benchmark: torch.einsum vs opt_einsum.contract vs einc.einsum on the CPU variants.

    python bench/run.py [--filter TEXT] [--rounds N] [--out DIR] [--quick] [--dispatch]

See bench/README.md for the method.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

if __package__ in (None, ""):                      # run as a script: make `bench` and `einc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import opt_einsum
import torch

import einc
from bench import report
from bench.timing import interleaved

HERE = Path(__file__).resolve().parent
SUITE = HERE / "suite.json"
DEFAULT_OUT = HERE / "results"
METHODS = ("torch", "opt_einsum", "einc")
RTOL = 1e-3


def methods(eq: str, ops) -> dict:
    """The three callables compared, each bound to the same operands."""
    return {"torch": partial(torch.einsum, eq, *ops),
            "opt_einsum": partial(opt_einsum.contract, eq, *ops, backend="torch"),
            "einc": partial(einc.einsum, eq, *ops)}


def operands(w: dict) -> list[torch.Tensor]:
    v = w["variants"]["cpu"]
    torch.manual_seed(0)
    ops = [torch.randn(*s, dtype=getattr(torch, v["dtype"])) for s in v["shapes"]]
    if w["category"] == "tensor_network":           # keep products of ~30 tensors in float32 range
        ops = [o / o.norm() for o in ops]
    return ops


def check(out, ref) -> str:
    """'ok' or a description of how ``out`` differs from the torch.einsum result ``ref``.

    allclose with rtol=1e-3 and atol scaled to the output's magnitude (1e-4 * max|ref|).
    """
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return f"MISMATCH shape/dtype {tuple(out.shape)}/{out.dtype} vs {tuple(ref.shape)}/{ref.dtype}"
    scale = ref.abs().max().item() if ref.numel() else 0.0
    if torch.allclose(out, ref, rtol=RTOL, atol=1e-4 * scale + 1e-30, equal_nan=True):
        return "ok"
    return f"MISMATCH max abs diff {(out - ref).abs().max().item():.3g} (max abs ref {scale:.3g})"


def bench_workload(w: dict, rounds: int, budget: float, min_rounds: int) -> dict:
    eq, ops = w["equation"], operands(w)
    fns, status, first = methods(eq, ops), {}, {}
    results = {}
    for name, fn in fns.items():                    # warm-up (einc plans here), untimed
        t0 = time.perf_counter()
        try:
            results[name] = fn()
        except Exception as e:                      # noqa: BLE001 -- report, don't abort the suite
            status[name] = f"ERROR {type(e).__name__}: {e}"
        first[name] = time.perf_counter() - t0
    ref = results.get("torch")
    for name in ("opt_einsum", "einc"):
        if name in results:
            status[name] = check(results[name], ref) if ref is not None else "unchecked: torch.einsum failed"
    for name, s in status.items():
        if s != "ok":
            print(f"!!! {w['id']}: {name}: {s}", file=sys.stderr)
    del results, ref
    timed = {name: fn for name, fn in fns.items() if not status.get(name, "ok").startswith("ERROR")}
    timings, n_rounds = interleaved(timed, rounds, budget, min_rounds)
    med = {name: (timings[name].median if name in timings else None) for name in METHODS}
    return {"w": w, "med": med, "timings": timings, "rounds": n_rounds, "first": first,
            "einc_check": status.get("einc", "ok"), "oe_check": status.get("opt_einsum", "ok")}


def short(eq: str, n: int = 48) -> str:
    return eq if len(eq) <= n else eq[: n - 1] + "…"


def cell(text: str) -> str:
    """Text made safe for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def report_suite(rows: list[dict], out_dir, args, load) -> None:
    cols = ["id", "category", "equation", "torch µs", "opt_einsum µs", "einc µs", "einc/torch",
            "einc/opt_einsum", "check"]
    table, data = [], []
    for r in rows:
        w, m = r["w"], r["med"]
        et, eo = report.ratio(m["einc"], m["torch"]), report.ratio(m["einc"], m["opt_einsum"])
        r["et"], r["eo"] = et, eo
        chk = "ok" if r["einc_check"] == "ok" else f"**{cell(r['einc_check'])}**"
        if r["oe_check"] != "ok":
            chk += f" (opt_einsum: {cell(r['oe_check'])})"
        table.append([w["id"], w["category"], f"`{short(w['equation'])}`", *map(report.us, m.values()),
                      report.fmt_ratio(et), report.fmt_ratio(eo), chk])
        data.append([w["id"], w["category"], w["equation"],
                     *[None if v is None else round(v * 1e6, 3) for v in m.values()],
                     None if et is None else round(et, 4), None if eo is None else round(eo, 4),
                     r["einc_check"], r["rounds"], *[r["timings"][k].calls if k in r["timings"] else None
                                                     for k in METHODS],
                     round(r["first"]["einc"] * 1e6, 1)])
    ok = [r for r in rows if r["einc_check"] == "ok"]
    gt, go = report.geomean(r["et"] for r in ok), report.geomean(r["eo"] for r in ok)
    worst = max((r for r in ok if r["et"] is not None), key=lambda r: r["et"], default=None)
    bad = [r["w"]["id"] for r in rows if r["einc_check"] != "ok"]
    slow = [f"{r['w']['id']} ({r['et']:.2f})" for r in rows if r["et"] is not None and r["et"] > 1.1]
    md = report.header("einc suite benchmark (cpu variants)", "float32", load, [
        f"timing: median over rounds of per-call time; {args.rounds} rounds requested, "
        f"budget {args.budget:.1f} s/workload (min {args.min_rounds} rounds), batches ≥ 2 ms, "
        f"methods interleaved in shuffled order; warm-up call untimed"])
    md += report.markdown_table(cols, table)
    md += ["", f"- workloads: {len(rows)} (einc matches torch.einsum on {len(ok)}; geomeans and max use those)",
           f"- geomean einc/torch: {report.fmt_ratio(gt)}",
           f"- geomean einc/opt_einsum: {report.fmt_ratio(go)}",
           f"- max einc/torch: {report.fmt_ratio(worst and worst['et'])} ({worst['w']['id'] if worst else '—'})",
           f"- einc/torch > 1.1: {', '.join(slow) or 'none'}",
           f"- einc MISMATCH / ERROR: {', '.join(bad) or 'none'}"]
    csv_cols = ["id", "category", "equation", "torch_us", "opt_einsum_us", "einc_us", "einc_over_torch",
                "einc_over_opt_einsum", "einc_check", "rounds", "torch_calls_per_batch",
                "opt_einsum_calls_per_batch", "einc_calls_per_batch", "einc_first_call_us"]
    report.write(out_dir, "suite_cpu", md, csv_cols, data)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--filter", default="", help="only workloads whose id or category contains TEXT")
    p.add_argument("--rounds", type=int, default=None, help="rounds per workload (default 31, quick 7)")
    p.add_argument("--budget", type=float, default=None, help="seconds per workload (default 4, quick 1)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (default bench/results/)")
    p.add_argument("--quick", action="store_true", help="fewer rounds and a smaller budget (smoke test)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads(N) (default: torch's)")
    p.add_argument("--dispatch", action="store_true", help="run the dispatch micro-benchmark instead")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.dispatch:
        from bench import dispatch
        return dispatch.main(["--out", args.out] + ["--quick"] * args.quick +
                             (["--rounds", str(args.rounds)] if args.rounds else []))
    args.rounds = args.rounds or (7 if args.quick else 31)
    args.budget = args.budget or (1.0 if args.quick else 4.0)
    args.min_rounds = min(args.rounds, 3 if args.quick else 5)

    suite = json.loads(SUITE.read_text(encoding="utf-8"))
    work = [w for w in suite["workloads"] if args.filter in w["id"] or args.filter in w["category"]]
    if not work:
        print(f"no workload matches {args.filter!r}", file=sys.stderr)
        return 2
    load, rows = report.Load(), []
    t0 = time.perf_counter()
    for k, w in enumerate(work, 1):
        print(f"[{k}/{len(work)}] {w['id']} ...", file=sys.stderr, flush=True)
        rows.append(bench_workload(w, args.rounds, args.budget, args.min_rounds))
    print(f"suite done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    report_suite(rows, args.out, args, load)
    return 1 if any(r["einc_check"] != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
