"""The suite benchmark: torch.einsum vs opt_einsum.contract vs einc.einsum, per workload.

Used by ``einc bench`` and ``python bench/run.py``.  For each workload of the suite
(the ``cpu`` variant on the CPU, the ``gpu`` variant on CUDA) the three methods get
the same operands; einc's and opt_einsum's results are checked against
torch.einsum's, then the three are timed with :func:`~einc.benchmark.timing.interleaved`.
Writes ``suite_<device>.md`` and ``.csv`` (and, through :mod:`einc.benchmark.chart`,
``.png``).  See bench/README.md for the method.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import opt_einsum
import torch

import einc

from ..errors import ArgumentError
from . import report
from .progress import Progress
from .suite import variant_name
from .timing import interleaved

METHODS = ("torch", "opt_einsum", "einc")
RTOL = 1e-3
# (rtol, atol as a fraction of max|ref|) for the comparison with torch.einsum's result
TOLERANCES = {"float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2), "float32": (RTOL, 1e-4),
              "complex64": (RTOL, 1e-4), "float64": (1e-7, 1e-9), "complex128": (1e-7, 1e-9)}


@dataclass
class Options:
    """What to run and how long: ``rounds`` per workload within ``budget`` seconds (at
    least ``min_rounds``)."""

    device: str = "cpu"
    rounds: int = 31
    budget: float = 4.0
    min_rounds: int = 5


def methods(eq: str, ops) -> dict:
    """The three callables compared, each bound to the same operands."""
    return {"torch": partial(torch.einsum, eq, *ops),
            "opt_einsum": partial(opt_einsum.contract, eq, *ops, backend="torch"),
            "einc": partial(einc.einsum, eq, *ops)}


def operands(w: dict, device: str = "cpu") -> list[torch.Tensor]:
    """The workload's operands for ``device``: ``torch.randn`` with seed 0 in the variant's dtype."""
    v = w["variants"][variant_name(device)]
    torch.manual_seed(0)
    dtype = getattr(torch, v["dtype"])
    ops = [torch.randn(*s, dtype=dtype, device=device) for s in v["shapes"]]
    if w["category"] == "tensor_network":           # keep products of ~30 tensors in float32 range
        ops = [o / o.norm() for o in ops]
    return ops


def check(out, ref) -> str:
    """'ok' or a description of how ``out`` differs from the torch.einsum result ``ref``.

    allclose with the dtype's rtol (1e-3 for float32) and atol scaled to the output's
    magnitude (1e-4 * max|ref| for float32).
    """
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return f"MISMATCH shape/dtype {tuple(out.shape)}/{out.dtype} vs {tuple(ref.shape)}/{ref.dtype}"
    rtol, atol = TOLERANCES.get(str(ref.dtype).replace("torch.", ""), (RTOL, 1e-4))
    scale = ref.abs().max().item() if ref.numel() else 0.0
    if torch.allclose(out, ref, rtol=rtol, atol=atol * scale + 1e-30, equal_nan=True):
        return "ok"
    return f"MISMATCH max abs diff {(out - ref).abs().max().item():.3g} (max abs ref {scale:.3g})"


def _sync(device: str):
    return torch.cuda.synchronize if device == "cuda" else None


def bench_workload(w: dict, rounds: int, budget: float, min_rounds: int, device: str = "cpu") -> dict:
    """Check and time the three methods on one workload; a dict with medians and checks."""
    row = {"w": w, "variant": w["variants"][variant_name(device)], "med": dict.fromkeys(METHODS),
           "timings": {}, "rounds": 0, "first": {}, "einc_check": "ok", "oe_check": "ok"}
    sync = _sync(device)
    try:
        eq, ops = w["equation"], operands(w, device)
    except Exception as e:                          # noqa: BLE001 -- e.g. out of memory: report it
        row["einc_check"] = f"ERROR creating operands: {type(e).__name__}: {str(e).splitlines()[0]}"
        print(f"!!! {w['id']}: {row['einc_check']}", file=sys.stderr)
        return row
    fns, status, results = methods(eq, ops), {}, {}
    for name, fn in fns.items():                    # warm-up (einc plans here), untimed
        t0 = time.perf_counter()
        try:
            results[name] = fn()
            if sync:
                sync()
        except Exception as e:                      # noqa: BLE001 -- report, don't abort the suite
            status[name] = f"ERROR {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        row["first"][name] = time.perf_counter() - t0
    ref = results.get("torch")
    for name in ("opt_einsum", "einc"):
        if name in results:
            status[name] = check(results[name], ref) if ref is not None else "unchecked: torch.einsum failed"
    for name, s in status.items():
        if s != "ok":
            print(f"!!! {w['id']}: {name}: {s}", file=sys.stderr)
    del results, ref
    timed = {name: fn for name, fn in fns.items() if not status.get(name, "ok").startswith("ERROR")}
    if timed:
        timings, row["rounds"] = interleaved(timed, rounds, budget, min_rounds, sync=sync)
        row["timings"] = timings
        row["med"] = {name: (timings[name].median if name in timings else None) for name in METHODS}
    row["einc_check"], row["oe_check"] = status.get("einc", "ok"), status.get("opt_einsum", "ok")
    if device == "cuda":
        del ops, fns, timed
        torch.cuda.empty_cache()
    return row


def short(eq: str, n: int = 48) -> str:
    return eq if len(eq) <= n else eq[: n - 1] + "…"


def cell(text: str) -> str:
    """Text made safe for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def run(workloads: list[dict], opts: Options, progress: Progress | None = None) -> list[dict]:
    """Benchmark ``workloads`` in order; one row per workload (see :func:`bench_workload`)."""
    rows = []
    for w in workloads:
        if progress:
            progress.start(w["id"])
        rows.append(bench_workload(w, opts.rounds, opts.budget, opts.min_rounds, opts.device))
        if progress:
            progress.advance()
    return rows


def _rate(flops, seconds):
    return flops / seconds if flops and seconds else None


def report_suite(rows: list[dict], out_dir, opts: Options, load, roofline=None, quiet=False):
    """Write OUT/suite_<device>.md and .csv (and print the Markdown unless ``quiet``);
    returns (md path, csv path, summary lines)."""
    gpu = opts.device == "cuda"
    cols = ["id", "category", "equation", "torch µs", "opt_einsum µs", "einc µs", "einc/torch",
            "einc/opt_einsum"] + (["einc TFLOP/s", "einc % roofline"] if gpu else []) + ["check"]
    table, data = [], []
    for r in rows:
        w, m, v = r["w"], r["med"], r["variant"]
        et, eo = report.ratio(m["einc"], m["torch"]), report.ratio(m["einc"], m["opt_einsum"])
        r["et"], r["eo"] = et, eo
        r["rates"] = {k: _rate(v.get("flops"), m[k]) for k in METHODS}
        r["roof"] = roofline.bound(v) if roofline else None
        chk = "ok" if r["einc_check"] == "ok" else f"**{cell(r['einc_check'])}**"
        if r["oe_check"] != "ok":
            chk += f" (opt_einsum: {cell(r['oe_check'])})"
        extra = []
        if gpu:
            rate, roof = r["rates"]["einc"], r["roof"]
            extra = ["—" if rate is None else f"{rate / 1e12:.3g}",
                     "—" if rate is None or not roof else f"{100 * rate / roof:.0f}"]
        table.append([w["id"], w["category"], f"`{short(w['equation'])}`", *map(report.us, m.values()),
                      report.fmt_ratio(et), report.fmt_ratio(eo), *extra, chk])
        data.append([w["id"], w["category"], w["equation"], v["dtype"],
                     *[None if x is None else round(x * 1e6, 3) for x in m.values()],
                     None if et is None else round(et, 4), None if eo is None else round(eo, 4),
                     r["einc_check"], r["rounds"], *[r["timings"][k].calls if k in r["timings"] else None
                                                     for k in METHODS],
                     None if "einc" not in r["first"] else round(r["first"]["einc"] * 1e6, 1),
                     v.get("flops"), v.get("min_bytes"),
                     *[None if r["rates"][k] is None else round(r["rates"][k] / 1e9, 3) for k in METHODS],
                     None if r["roof"] is None else round(r["roof"] / 1e9, 3)])
    ok = [r for r in rows if r["einc_check"] == "ok" and r["et"] is not None]
    gt, go = report.geomean(r["et"] for r in ok), report.geomean(r["eo"] for r in ok)
    worst = max(ok, key=lambda r: r["et"], default=None)
    bad = [r["w"]["id"] for r in rows if r["einc_check"] != "ok"]
    slow = [f"{r['w']['id']} ({r['et']:.2f})" for r in rows if r["et"] is not None and r["et"] > 1.1]
    dtypes = sorted({r["variant"]["dtype"] for r in rows})
    extra_header = [
        f"timing: median over rounds of per-call time; {opts.rounds} rounds requested, "
        f"budget {opts.budget:.1f} s/workload (min {opts.min_rounds} rounds), batches ≥ 2 ms, "
        f"methods interleaved in shuffled order; warm-up call untimed"
        + ("; CUDA synchronized before and after each batch" if gpu else "")]
    if roofline:
        extra_header.append(roofline.describe())
    md = report.header(f"einc suite benchmark ({variant_name(opts.device)} variants, device {opts.device})",
                       ", ".join(dtypes), load, extra_header, device=opts.device)
    md += report.markdown_table(cols, table)
    summary = [f"- workloads: {len(rows)} (einc matches torch.einsum on {len(ok)}; geomeans and max use those)",
               f"- geomean einc/torch: {report.fmt_ratio(gt)}",
               f"- geomean einc/opt_einsum: {report.fmt_ratio(go)}",
               f"- max einc/torch: {report.fmt_ratio(worst and worst['et'])} "
               f"({worst['w']['id'] if worst else '—'})",
               f"- einc/torch > 1.1: {', '.join(slow) or 'none'}",
               f"- einc MISMATCH / ERROR: {', '.join(bad) or 'none'}"]
    md += ["", "## Summary", ""] + summary + ["", "## By category (geomean of ratios; < 1: einc is faster)", ""]
    md += report.markdown_table(["category", "workloads", "einc/torch", "einc/opt_einsum", "best einc/torch",
                                 "worst einc/torch"], _by_category(ok))
    csv_cols = ["id", "category", "equation", "dtype", "torch_us", "opt_einsum_us", "einc_us", "einc_over_torch",
                "einc_over_opt_einsum", "einc_check", "rounds", "torch_calls_per_batch",
                "opt_einsum_calls_per_batch", "einc_calls_per_batch", "einc_first_call_us", "flops", "min_bytes",
                "torch_gflops", "opt_einsum_gflops", "einc_gflops", "roofline_gflops"]
    md_path, csv_path = report.write(out_dir, f"suite_{opts.device}", md, csv_cols, data, quiet=quiet)
    return md_path, csv_path, summary


def _by_category(rows: list[dict]) -> list[list[str]]:
    cats: dict[str, list[dict]] = {}
    for r in rows:
        cats.setdefault(r["w"]["category"], []).append(r)
    out = []
    for cat, rs in cats.items():
        best, worst = min(rs, key=lambda r: r["et"]), max(rs, key=lambda r: r["et"])
        out.append([cat, str(len(rs)), report.fmt_ratio(report.geomean(r["et"] for r in rs)),
                    report.fmt_ratio(report.geomean(r["eo"] for r in rs)),
                    f"{report.fmt_ratio(best['et'])} ({best['w']['id']})",
                    f"{report.fmt_ratio(worst['et'])} ({worst['w']['id']})"])
    return out


def exit_status(rows: list[dict]) -> int:
    """1 if einc's result differed from torch.einsum's (or failed) on any workload, else 0."""
    return 1 if any(r["einc_check"] != "ok" for r in rows) else 0


def default_out(suite_path) -> Path:
    """``results/`` beside the suite file (``bench/results/`` for the repository's suite)."""
    return Path(suite_path).resolve().parent / "results"


def bench_suite(suite_path, *, device: str = "cpu", text: str = "", out=None, rounds: int | None = None,
                budget: float | None = None, quick: bool = False, chart: bool = True) -> int:
    """Run the suite's workloads matching ``text`` on ``device``; write the Markdown, the
    CSV and (with matplotlib) the PNG chart under ``out``.  Returns the exit status:
    1 if einc's result differed from torch.einsum's anywhere, else 0."""
    from . import chart as charts
    from . import roofline as roofs
    from .suite import load as load_suite
    from .suite import select

    if device not in ("cpu", "cuda"):
        raise ArgumentError(f"unknown device {device!r}: expected cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ArgumentError("--device cuda: torch sees no CUDA device on this machine")
    work = select(load_suite(suite_path), text, device)
    if not work:
        raise ArgumentError(f"no workload of {suite_path} matches {text!r}")
    rounds = rounds or (7 if quick else 31)
    opts = Options(device, rounds, budget or (1.0 if quick else 4.0), min(rounds, 3 if quick else 5))
    out = Path(out) if out else default_out(suite_path)
    load = report.Load()
    roof = None
    if device == "cuda":
        print("measuring the roofline (torch.mm per dtype, a 1 GiB copy) ...", file=sys.stderr)
        roof = roofs.measure(w["variants"]["gpu"]["dtype"] for w in work)
    progress = Progress(len(work))
    rows = run(work, opts, progress)
    progress.close()
    md_path, _, _ = report_suite(rows, out, opts, load, roof)
    if chart:
        dtypes = ", ".join(sorted({r["variant"]["dtype"] for r in rows}))
        title = (f"einc vs torch.einsum and opt_einsum: {variant_name(device)} variants of {Path(suite_path).name} "
                 f"on {device} ({dtypes}), {time.strftime('%Y-%m-%d')}")
        try:
            png = charts.draw(rows, md_path.with_suffix(".png"), title, roof)
            print(f"wrote {png}")
        except charts.MissingMatplotlib as e:
            print(f"einc bench: {e}; the Markdown and CSV were written", file=sys.stderr)
    return exit_status(rows)
