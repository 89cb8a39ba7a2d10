"""The suite benchmark: torch.einsum vs opt_einsum.contract vs einc.einsum, per workload.

Used by ``einc bench`` and ``python bench/run.py``.  For each workload of the suite
(the ``cpu`` variant on the CPU, the ``gpu`` variant on CUDA) the three methods get
the same operands; einc's and opt_einsum's results are checked against
torch.einsum's, then the three are timed with :func:`~einc.tools.benchmark.timing.interleaved`.
Writes ``suite_<device>.md`` and ``.csv`` (and, through :mod:`einc.tools.benchmark.chart`,
``.png``).  See bench/README.md for the method.

Training mode (``einc bench --train``): the same runner with another *call*: each
method's timed call is ``out = method(eq, *ops); torch.autograd.grad(out, float_ops, g)``
(forward and backward, a fixed random upstream gradient ``g``), and einc's output and
gradients are checked against torch.einsum's (:data:`TRAIN`).  It writes
``suite_<device>_train.md``/``.csv``/``.png`` beside the forward files, and
(:mod:`einc.tools.benchmark.train`) ``models_train.md``/``.csv``: forward + backward of
the models of ``bench/models.py`` under eager, inductor and ``torch.compile(backend="einc")``.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from pathlib import Path

import torch

from ...errors import ArgumentError
from ...runtime.reference import torch_einsum
from . import report
from .calls import (  # noqa: F401 -- re-exported
    CONTIGUOUS,
    FORWARD,
    METHODS,
    MODES,
    RTOL,
    TOLERANCES,
    TRAIN,
    Mode,
    Options,
    check,
    check_train,
    differentiable,
    forward_call,
    methods,
    train_prepare,
    train_step,
    upstream,
)
from .load import Load, fits, measure, other_cores, settle
from .load import _cpu_sample as cpu_sample
from .progress import Progress
from .report import cell
from .suite import variant_name
from .timing import interleaved, ratio_interval
from .train import bench_models_train, report_models_train, train_models, train_verdicts


def operands(w: dict, device: str = "cpu", variant: str | None = None, seed: int = 0) -> list[torch.Tensor]:
    """The workload's operands on ``device``: ``torch.randn`` with seed ``seed`` in the
    dtype of ``variant`` (default: the variant for ``device``); a tensor network's put in
    range (:func:`in_range`)."""
    v = w["variants"][variant or variant_name(device)]
    torch.manual_seed(seed)
    dtype = getattr(torch, v["dtype"])
    if dtype.is_floating_point or dtype.is_complex:
        ops = [torch.randn(tuple(s), dtype=dtype, device=device) for s in v["shapes"]]
    else:                           # integers and bool: small values (-3..3; bool 0 or 1)
        low = 0 if dtype in (torch.bool, torch.uint8) else -3
        ops = [torch.randint(low, 2 if dtype == torch.bool else 4, tuple(s), device=device).to(dtype)
               for s in v["shapes"]]
    return in_range(w["equation"], ops) if w["category"] == "tensor_network" else ops


def in_range(equation: str, ops) -> list[torch.Tensor]:
    """Tensor-network operands, normalized and then all scaled by one factor so that the
    result's largest magnitude is about 1.  Normalized alone, a product of ~30 tensors
    can fall below float32's normal range (the gpu variant of ``mps_inner_product``:
    1e-41, where float32 keeps two or three digits and any order of the sum is 1 % off
    float64), and then rounding, not the contraction, is what a check measures (and
    subnormal arithmetic what a CPU timing measures)."""
    ops = [o / o.norm() for o in ops]
    wide = torch.complex128 if ops[0].is_complex() else torch.float64
    with torch.no_grad():
        peak = float(torch_einsum(equation, *[o.to(wide) for o in ops]).abs().max())
    if peak > 0 and math.isfinite(peak):
        ops = [o * peak ** (-1.0 / len(ops)) for o in ops]
    return ops


def _sync(device: str):
    return torch.cuda.synchronize if device == "cuda" else None


def bench_workload(w: dict, rounds: int, budget: float, min_rounds: int, device: str = "cpu",
                   mode: Mode = FORWARD) -> dict:
    """Check and time the three methods on one workload; a dict with medians and checks.
    ``mode`` says what is timed (:data:`FORWARD` or :data:`TRAIN`)."""
    row = {"w": w, "variant": w["variants"][variant_name(device)], "med": dict.fromkeys(METHODS),
           "like": None, "timings": {}, "rounds": 0, "first": {}, "einc_check": "ok", "oe_check": "ok"}
    sync = _sync(device)
    try:
        eq, ops = w["equation"], operands(w, device)
        call = mode.prepare(eq, ops)
    except Exception as e:                          # noqa: BLE001 -- e.g. out of memory: report it
        row["einc_check"] = f"ERROR creating operands: {type(e).__name__}: {str(e).splitlines()[0]}"
        print(f"!!! {w['id']}: {row['einc_check']}", file=sys.stderr)
        return row
    fns, status, results = methods(eq, ops, call), {}, {}
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
            status[name] = mode.compare(results[name], ref) if ref is not None else "unchecked: torch.einsum failed"
    for name, s in status.items():
        if s != "ok":
            print(f"!!! {w['id']}: {name}: {s}", file=sys.stderr)
    del results, ref
    timed = {name: fn for name, fn in fns.items() if not status.get(name, "ok").startswith("ERROR")}
    if timed:
        timings, row["rounds"] = interleaved(timed, rounds, budget, min_rounds, sync=sync)
        row["timings"] = timings
        row["med"] = {name: (timings[name].median if name in timings else None) for name in METHODS}
        row["like"] = like_for_like(timings)
    row["einc_check"], row["oe_check"] = status.get("einc", "ok"), status.get("opt_einsum", "ok")
    if device == "cuda":
        del ops, fns, timed, call
        torch.cuda.empty_cache()
    return row


def like_for_like(timings: dict):
    """einc against the like-for-like baseline -- torch.einsum, plus ``.contiguous()`` where
    its result is a view that is not (:data:`CONTIGUOUS`) -- as ``(baseline name, median,
    low, high)`` of the paired per-round ratio (:func:`~einc.tools.benchmark.timing.ratio_interval`,
    95 %), or None where either was not timed."""
    base = CONTIGUOUS if CONTIGUOUS in timings else "torch"
    if "einc" not in timings or base not in timings:
        return None
    return (base, *ratio_interval(timings["einc"], timings[base]))


def short(eq: str, n: int = 48) -> str:
    return eq if len(eq) <= n else eq[: n - 1] + "…"


def run(workloads: list[dict], opts: Options, progress: Progress | None = None,
        load: Load | None = None) -> list[dict]:
    """Benchmark ``workloads`` in order; one row per workload (see :func:`bench_workload`).
    With a ``load`` and ``opts.guard``, a workload timed while other processes kept too
    many cores busy for torch's threads is timed again once the machine is quiet (waiting
    up to ``opts.wait`` s); if it is still busy, the row is flagged ``noisy`` (named in
    ``load.noisy``) and left out of the summary."""
    rows = []
    for w in workloads:
        if progress:
            progress.start(w["id"])
        for attempt in (1, 2):
            a = cpu_sample()
            row = bench_workload(w, opts.rounds, opts.budget, opts.min_rounds, opts.device, MODES[opts.mode])
            row["other_cores"] = other_cores(a, cpu_sample())
            if load is None or not opts.guard or fits(row["other_cores"], torch.get_num_threads()):
                break
            if attempt == 1:
                print(f"\neinc bench: {w['id']} was timed while other processes kept {row['other_cores']:.1f} "
                      "cores busy; timing it again when the machine is quiet", file=sys.stderr)
                t0 = time.monotonic()
                while time.monotonic() - t0 < opts.wait and not fits(measure(2.0), torch.get_num_threads()):
                    pass
            else:
                row["noisy"] = True
                load.noisy.append(w["id"])
        rows.append(row)
        if progress:
            progress.advance()
    return rows


def run_tag(quick: bool, text: str) -> str:
    """The end of a partial run's file stems, so that it never overwrites a full run's
    files: ``_quick`` for --quick, ``_<filter>`` for --filter (``suite_cpu_quick_small.md``)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") if text else ""
    return ("_quick" if quick else "") + (f"_{slug or 'filter'}" if text else "")


def expected_seconds(workloads: list[dict], opts: Options) -> float:
    """A forecast of the run's seconds on an idle machine, from each workload's flops and
    bytes: per workload, rounds of three ≥ 2 ms batches within the budget, plus about
    0.4 s of set-up, warm-up and calibration.  The rates (40 GFLOP/s, 10 GB/s; a
    training step three forward calls) reproduce the timing phase of an idle
    2-core run (bench/measured/cpu-suite.md)."""
    total = 0.0
    for w in workloads:
        v = w["variants"][variant_name(opts.device)]
        call = max(20e-6, (v.get("flops") or 0) / 4e10 + (v.get("min_bytes") or 0) / 1e10)
        call *= 3 if opts.mode == "train" else 1
        round_s = 3 * max(2e-3, call)
        total += max(opts.min_rounds * round_s, min(opts.rounds * round_s, opts.budget)) + 0.4 + 4 * call
    return total


def _rate(flops, seconds):
    return flops / seconds if flops and seconds else None


def report_suite(rows: list[dict], out_dir, opts: Options, load, roofline=None, quiet=False):
    """Write OUT/suite_<device>.md and .csv (``suite_<device>_train`` in training mode;
    and print the Markdown unless ``quiet``); returns (md path, csv path, summary lines)."""
    gpu = opts.device == "cuda"
    mode = MODES[opts.mode]
    train = mode is TRAIN
    cols = ["id", "category", "equation", "torch µs", "opt_einsum µs", "einc µs", "einc/torch",
            "einc/opt_einsum", "einc/(torch + .contiguous())"] + \
        (["einc TFLOP/s", "einc % roofline"] if gpu else []) + ["grad check" if train else "check"]
    table, data = _suite_rows(rows, gpu, roofline)
    ok = [r for r in rows if r["einc_check"] == "ok" and r["et"] is not None and not r.get("noisy")]
    gt, go = report.geomean(r["et"] for r in ok), report.geomean(r["eo"] for r in ok)
    worst = max(ok, key=lambda r: r["et"], default=None)
    bad = [r["w"]["id"] for r in rows if r["einc_check"] != "ok"]
    slow = [f"{r['w']['id']} ({r['et']:.2f})" for r in rows if r["et"] is not None and r["et"] > 1.1]
    dtypes = sorted({r["variant"]["dtype"] for r in rows})
    extra_header = [
        f"timed: {mode.timed}",
        f"timing: median over rounds of per-call time; {opts.rounds} rounds requested, "
        f"budget {opts.budget:g} s/workload (min {opts.min_rounds} rounds), batches ≥ 2 ms, "
        f"methods interleaved in shuffled order; warm-up call untimed"
        + ("; CUDA synchronized before and after each batch" if gpu else "")]
    if roofline:
        extra_header.append(roofline.describe())
    md = report.header(f"{mode.title} ({variant_name(opts.device)} variants, device {opts.device})",
                       ", ".join(dtypes), load, extra_header, device=opts.device)
    md += report.markdown_table(cols, table)
    noisy = [r["w"]["id"] for r in rows if r.get("noisy")]
    summary = [f"- workloads: {len(rows)} (einc matches torch.einsum on "
               f"{len([r for r in rows if r['einc_check'] == 'ok'])}; geomeans and max use those"
               + (f", less the {len(noisy)} timed on a busy machine" if noisy else "") + ")",
               f"- geomean einc/torch: {report.fmt_ratio(gt)}",
               f"- geomean einc/opt_einsum: {report.fmt_ratio(go)}",
               f"- max einc/torch: {report.fmt_ratio(worst and worst['et'])} "
               f"({worst['w']['id'] if worst else '—'})",
               f"- einc/torch > 1.1: {', '.join(slow) or 'none'}",
               f"- einc MISMATCH / ERROR: {', '.join(bad) or 'none'}"]
    if noisy:
        summary.append(f"- timed on a busy machine, left out of the summary: {', '.join(noisy)}")
    if train:
        summary += train_verdicts([r for r in rows if not r.get("noisy")], gt)
    md += ["", "## Summary", ""] + summary + ["", "## By category (geomean of ratios; < 1: einc is faster)", ""]
    md += report.markdown_table(["category", "workloads", "einc/torch", "einc/opt_einsum", "best einc/torch",
                                 "worst einc/torch"], _by_category(ok))
    csv_cols = ["id", "category", "equation", "dtype", "torch_us", "opt_einsum_us", "einc_us", "einc_over_torch",
                "einc_over_opt_einsum", "einc_grad_check" if train else "einc_check", "rounds", "torch_calls_per_batch",
                "opt_einsum_calls_per_batch", "einc_calls_per_batch", "einc_first_call_us", "flops", "min_bytes",
                "torch_gflops", "opt_einsum_gflops", "einc_gflops", "roofline_gflops", "other_cores_busy",
                "busy_left_out", "torch_contiguous_us", "like_for_like_ratio", "like_for_like_low95",
                "like_for_like_high95"]
    md_path, csv_path = report.write(out_dir, f"suite_{opts.device}{mode.suffix}{opts.tag}", md, csv_cols, data,
                                     quiet=quiet)
    return md_path, csv_path, summary


def _suite_rows(rows: list[dict], gpu: bool, roofline) -> tuple[list, list]:
    """The report's table rows and CSV rows, one per workload; sets each row's ratios
    (``et``, ``eo``), ``rates`` and ``roof``, which the summary reads."""
    table, data = [], []
    for r in rows:
        w, m, v = r["w"], r["med"], r["variant"]
        et, eo = report.ratio(m["einc"], m["torch"]), report.ratio(m["einc"], m["opt_einsum"])
        r["et"], r["eo"] = et, eo
        contiguous = r["timings"].get(CONTIGUOUS)
        ec = report.ratio(m["einc"], contiguous and contiguous.median)
        like = r.get("like")
        r["rates"] = {k: _rate(v.get("flops"), m[k]) for k in METHODS}
        r["roof"] = roofline.bound(v) if roofline else None
        chk = "ok" if r["einc_check"] == "ok" else f"**{cell(r['einc_check'])}**"
        if r["oe_check"] != "ok":
            chk += f" (opt_einsum: {cell(r['oe_check'])})"
        if r.get("noisy"):
            chk += f" **(timed while other processes kept {r['other_cores']:.1f} cores busy: left out)**"
        extra = []
        if gpu:
            rate, roof = r["rates"]["einc"], r["roof"]
            extra = ["—" if rate is None else f"{rate / 1e12:.3g}",
                     "—" if rate is None or not roof else f"{100 * rate / roof:.0f}"]
        table.append([w["id"], w["category"], f"`{short(w['equation'])}`", *map(report.us, m.values()),
                      report.fmt_ratio(et), report.fmt_ratio(eo), report.fmt_ratio(ec), *extra, chk])
        data.append([w["id"], w["category"], w["equation"], v["dtype"],
                     *[None if x is None else round(x * 1e6, 3) for x in m.values()],
                     None if et is None else round(et, 4), None if eo is None else round(eo, 4),
                     r["einc_check"], r["rounds"], *[r["timings"][k].calls if k in r["timings"] else None
                                                     for k in METHODS],
                     None if "einc" not in r["first"] else round(r["first"]["einc"] * 1e6, 1),
                     v.get("flops"), v.get("min_bytes"),
                     *[None if r["rates"][k] is None else round(r["rates"][k] / 1e9, 3) for k in METHODS],
                     None if r["roof"] is None else round(r["roof"] / 1e9, 3),
                     _cores(r.get("other_cores")), "yes" if r.get("noisy") else "",
                     None if contiguous is None else round(contiguous.median * 1e6, 3),
                     *([None] * 3 if like is None else [round(x, 4) for x in like[1:]])])
    return table, data


def _cores(x):
    """Cores kept busy by other processes, for the CSV ('' where unknown)."""
    return "" if x is None or x != x else round(x, 2)


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
    """``results/`` beside the suite file (``bench/results/`` for the repository's suite);
    ``einc-bench/`` under the current directory for the suite installed with the package."""
    from .suite import PACKAGED

    path = Path(os.path.abspath(suite_path))       # not resolve(): bench/suite.json is a link to PACKAGED
    return Path("einc-bench") if path == PACKAGED else path.parent / "results"


def bench_suite(suite_path, *, device: str = "cpu", text: str = "", out=None, rounds: int | None = None,
                budget: float | None = None, quick: bool = False, chart: bool = True, train: bool = False,
                models: bool = True, wait: float = 60.0, threads_set: bool = False) -> int:
    """Run the suite's workloads matching ``text`` on ``device``; write the Markdown, the
    CSV and (with matplotlib) the PNG chart under ``out``.  Returns the exit status:
    1 if einc's result differed from torch.einsum's anywhere, else 0.

    ``train``: time forward + backward (:data:`TRAIN`) and write ``suite_<device>_train.*``;
    then, unless ``models`` is false, also the models of ``bench/models.py`` (beside the
    suite file) whose name contains ``text``
    (:func:`~einc.tools.benchmark.train.bench_models_train`).  In training
    mode ``text`` may match models only.

    A partial run (``quick``, or a ``text`` filter) writes under other names
    (:func:`run_tag`), never over a full run's files.  On a busy machine the run waits
    up to ``wait`` s, pins torch to one thread (unless ``threads_set``) or refuses
    (:func:`~einc.tools.benchmark.load.settle`), and re-times or flags workloads timed while
    it was busy (:func:`run`)."""
    from . import chart as charts
    from . import roofline as roofs
    from .suite import load as load_suite
    from .suite import select

    if device not in ("cpu", "cuda"):
        raise ArgumentError(f"unknown device {device!r}: expected cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ArgumentError("--device cuda: torch sees no CUDA device on this machine")
    work = select(load_suite(suite_path), text, device)
    model_set = {}
    if train and models:
        model_set = train_models(suite_path, text, device)
    if not work and not model_set:
        raise ArgumentError(f"no workload of {suite_path} matches {text!r}"
                            + (" (nor does a model of bench/models.py)" if train and models else ""))
    rounds = rounds or (7 if quick else 31)
    mode = TRAIN if train else FORWARD
    tag = run_tag(quick, text)
    opts = Options(device, rounds, budget or (1.0 if quick else 4.0), min(rounds, 3 if quick else 5), mode.name,
                   tag, wait, guard=not quick and device == "cpu")       # CUDA timings do not share the cores
    out = Path(out) if out else default_out(suite_path)
    load = Load()
    if device == "cpu":
        settle(load, torch, wait=wait, threads_set=threads_set, quick=quick)
    eta = expected_seconds(work, opts)
    print(f"einc bench: {len(work)} workload(s) on {device}, {torch.get_num_threads()} torch thread(s); expected "
          f"duration about {eta:.0f} s" + (" (on an idle machine; this one is busy)" if load.warning() else "")
          + (f", plus {len(model_set)} model(s) (inductor compiles: up to minutes)" if model_set else "")
          + (f"; files {out}/*{tag}.*" if tag else f"; files in {out}/"), file=sys.stderr)
    status = 0
    if work:
        roof = None
        if device == "cuda":
            print("measuring the roofline (torch.mm per dtype, a 1 GiB copy) ...", file=sys.stderr)
            roof = roofs.measure(w["variants"]["gpu"]["dtype"] for w in work)
        progress = Progress(len(work))
        rows = run(work, opts, progress, load)
        progress.close()
        md_path, _, _ = report_suite(rows, out, opts, load, roof)
        if chart:
            dtypes = ", ".join(sorted({r["variant"]["dtype"] for r in rows}))
            what = "forward + backward" if train else "einc vs torch.einsum and opt_einsum"
            title = (f"{what}: {variant_name(device)} variants of {Path(suite_path).name} "
                     f"on {device} ({dtypes}), {time.strftime('%Y-%m-%d')}"
                     + (" (--quick)" if quick else "") + (f" (--filter {text})" if text else ""))
            lines = [report.environment(device)]
            if load.warning():
                lines.append(f"WARNING: {load.warning()}")
            try:
                png = charts.draw(rows, md_path.with_suffix(".png"), "\n".join([title, *lines]), roof)
                print(f"wrote {png}")
            except charts.MissingMatplotlib as e:
                print(f"einc bench: {e}; the Markdown and CSV were written", file=sys.stderr)
        status = exit_status(rows)
    if model_set:
        mopts = Options(device, rounds, budget or (1.0 if quick else 6.0), min(rounds, 3 if quick else 5), "train",
                        tag, wait, False)
        mrows = bench_models_train(model_set, mopts)
        report_models_train(mrows, out, mopts, load)
        status = max(status, 1 if any(r["check"] != "ok" for r in mrows) else 0)
    return status
