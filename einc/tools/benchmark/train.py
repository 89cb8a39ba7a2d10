"""The training benchmark's targets and its models table.

``einc bench --train`` times the suite's workloads forward and backward with the runner
(:data:`~einc.tools.benchmark.calls.TRAIN`) and judges them here against the training
targets (:func:`train_verdicts`); then (:func:`bench_models_train`) it times the models
of ``bench/models.py`` under eager, inductor and ``torch.compile(backend="einc")``, one
training step each, and writes ``models_train.md``/``.csv`` (:func:`report_models_train`).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

from . import report
from .calls import CONTIGUOUS, Options, check_train, upstream
from .progress import Progress
from .report import cell
from .timing import interleaved, ratio_interval

# Targets of the training benchmark (issue 13), judged in the training report.
TRAIN_TARGET_MAX = 1.0         # einc/torch on every workload
TRAIN_TARGET_GEOMEAN = 0.7     # geomean einc/torch
MODELS_TARGET_MAX = 1.0        # einc backend / inductor on every model
# A model the backend left to inductor unchanged, compiled from inductor's FX-graph
# cache (its rewrites cell ends with this note), runs inductor's code in both columns.
SAME_CODE_NOTE = " (inductor's own graph: FX-graph cache hit)"


def verdict(passed: bool) -> str:
    return "PASS" if passed else "**FAIL**"


def _fine(r) -> str:
    """A ratio judged against a target, to 3 decimals (1.004 is above 1.0; "1.00" would not say so)."""
    return "—" if r is None else f"{r:.3f}"


def train_verdicts(rows: list[dict], geomean_et) -> list[str]:
    """The training targets' verdict lines: einc/torch ≤ 1.0 on every workload (a wrong or
    failed einc fails it), as measured and like for like (:func:`like_verdict`); geomean ≤ 0.7."""
    over = [f"{r['w']['id']} ({_fine(r['et'])})" for r in rows
            if r["einc_check"] != "ok" or r["et"] is None or r["et"] > TRAIN_TARGET_MAX]
    return [f"- target einc/torch ≤ {TRAIN_TARGET_MAX:.1f} on every workload, ratio of the medians as measured: "
            f"{verdict(not over)}"
            + (f" ({len(over)} of {len(rows)} above or not correct: {', '.join(over)})" if over else ""),
            like_verdict(rows, TRAIN_TARGET_MAX),
            f"- target geomean einc/torch ≤ {TRAIN_TARGET_GEOMEAN:.1f}: "
            f"{verdict(geomean_et is not None and geomean_et <= TRAIN_TARGET_GEOMEAN)} "
            f"({report.fmt_ratio(geomean_et)})"]


def like_verdict(rows: list[dict], target: float) -> str:
    """The same target like for like and beyond timing noise: einc against torch.einsum
    plus the ``.contiguous()`` copy where torch's result is a non-contiguous view (einc's
    never is), and a workload fails only where the 95 % interval of the paired per-round
    ratio lies wholly above ``target`` (or einc is wrong); each exception is named."""
    fail, within, copied = [], [], []
    for r in rows:
        like = r.get("like")
        if r["einc_check"] != "ok" or like is None:
            fail.append(f"{r['w']['id']} (not timed or not correct)")
            continue
        base, med, lo, hi = like
        if base == CONTIGUOUS:
            copied.append(f"{r['w']['id']} {med:.3f}")
        text = f"{r['w']['id']} ({med:.3f}, interval {lo:.3f}-{hi:.3f})"
        if lo > target:
            fail.append(text)
        elif med > target:
            within.append(text)
    return (f"- target einc/torch ≤ {target:.1f} on every workload, like for like (against torch.einsum + "
            f".contiguous() where torch returns a non-contiguous view: {', '.join(copied) or 'none'}) and beyond "
            f"timing noise (a workload fails where the 95 % interval of its per-round ratio lies above "
            f"{target:.1f}): {verdict(not fail)}"
            + (f"; above: {', '.join(fail)}" if fail else "")
            + (f"; above {target:.1f} but within the noise: {', '.join(within)}" if within else ""))


MODEL_METHODS = ("eager", "inductor", "einc")


def train_models(suite_path, text: str = "", device: str = "cpu") -> dict:
    """``{name: (module, inputs)}`` from ``models()`` of ``bench/models.py`` beside the
    suite file, the names containing ``text``; ``{}`` (with a note on stderr) where there
    is no such file, it has no ``models()``, or ``device`` is not the CPU (the models are
    CPU models).  The file is imported, not edited: its builders are the one definition."""
    import importlib.util

    path = Path(os.path.abspath(suite_path)).parent / "models.py"     # beside the link, not its target
    if not path.is_file():
        print(f"einc bench --train: no {path}, so no models' training table", file=sys.stderr)
        return {}
    if device != "cpu":
        print("einc bench --train: the models' training table is CPU-only; skipped", file=sys.stderr)
        return {}
    # run bench/models.py as `bench.models`, with its repository on sys.path
    root = str(path.parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    mod = sys.modules.get("bench.models")
    if mod is None or Path(getattr(mod, "__file__", "")).resolve() != path:
        spec = importlib.util.spec_from_file_location("bench.models", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    build = getattr(mod, "models", None)
    if not callable(build):
        print(f"einc bench --train: {path} has no models() builder; no models' training table", file=sys.stderr)
        return {}
    return {name: mi for name, mi in build().items() if text in name}


def _compile(model, method: str):
    if method == "eager":
        return model
    if method == "inductor":
        return torch.compile(model)
    return torch.compile(model, backend="einc")


def _model_step(f, inputs, params, g):
    def step():
        out = f(*inputs)
        return out, torch.autograd.grad(out, params, g)
    return step


def _fx_cache_hits() -> int:
    """Inductor's FX-graph cache hits so far in this process."""
    from torch._dynamo.utils import counters
    return counters["inductor"]["fxgraph_cache_hit"]


def bench_model_train(name: str, model, inputs, opts: Options) -> dict:
    """One model's training row: forward + backward (``torch.autograd.grad`` with respect to
    its parameters, upstream gradient :func:`upstream`) under :data:`MODEL_METHODS`; the first
    (compiling) call is untimed and its output and gradients are checked against eager's;
    then the methods are timed interleaved."""
    import torch._dynamo

    import einc.dynamo

    torch._dynamo.reset()
    params = [p for p in model.parameters() if p.requires_grad]
    row = {"name": name, "med": dict.fromkeys(MODEL_METHODS), "timings": {}, "rounds": 0, "first": {},
           "status": {}, "rewrites": "", "check": "ok"}
    with torch.no_grad():
        g = upstream(model(*inputs))
    fns, results = {}, {}
    for method in MODEL_METHODS:
        hits = _fx_cache_hits()
        t0 = time.perf_counter()
        try:
            fns[method] = _model_step(_compile(model, method), inputs, params, g)
            results[method] = fns[method]()
        except Exception as e:                      # noqa: BLE001 -- report, don't abort the table
            row["status"][method] = f"ERROR {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            fns.pop(method, None)
        row["first"][method] = time.perf_counter() - t0
        if method == "einc" and method in results:
            r = einc.dynamo.last_report
            row["rewrites"] = f"{len(r)} einsum(s) from {len(r) + r.fused} contraction(s)" + (
                f", {r.kept} left to inductor" if isinstance(getattr(r, "kept", None), int) else "")
            if not len(r) and _fx_cache_hits() > hits:
                # the graphs inductor got are the ones it compiled for the inductor column
                row["rewrites"] += SAME_CODE_NOTE
    ref = results.get("eager")
    for method in MODEL_METHODS[1:]:
        if method in results:
            row["status"][method] = check_train(results[method], ref) if ref is not None else "unchecked"
    bad = {k: s for k, s in row["status"].items() if s != "ok"}
    for k, s in bad.items():
        print(f"!!! model {name}: {k}: {s}", file=sys.stderr)
    row["check"] = "ok" if not bad else "; ".join(f"{k}: {s}" for k, s in bad.items())
    del results, ref
    timed = {k: f for k, f in fns.items() if not row["status"].get(k, "ok").startswith("ERROR")}
    if timed:
        row["timings"], row["rounds"] = interleaved(timed, opts.rounds, opts.budget, opts.min_rounds)
        row["med"] = {k: (row["timings"][k].median if k in row["timings"] else None) for k in MODEL_METHODS}
    return row


def bench_models_train(model_set: dict, opts: Options) -> list[dict]:
    """:func:`bench_model_train` for each of ``{name: (module, inputs)}``, in order."""
    progress, rows = Progress(len(model_set)), []
    for name, (model, inputs) in model_set.items():
        progress.start(f"model {name}")
        rows.append(bench_model_train(name, model, inputs, opts))
        progress.advance()
    progress.close()
    return rows


def report_models_train(rows: list[dict], out_dir, opts: Options, load, quiet=False):
    """Write OUT/models_train.md and .csv; returns (md path, csv path, summary lines)."""
    table, data = [], []
    for r in rows:
        m = r["med"]
        ei, ee = report.ratio(m["einc"], m["inductor"]), report.ratio(m["einc"], m["eager"])
        r["ei"] = ei
        chk = "ok" if r["check"] == "ok" else f"**{cell(r['check'])}**"
        first = r["first"]
        table.append([r["name"], *[report.us(m[k]) for k in MODEL_METHODS], report.fmt_ratio(ei),
                      report.fmt_ratio(ee), f"{first.get('inductor', 0):.1f} / {first.get('einc', 0):.1f}",
                      r["rewrites"], chk])
        data.append([r["name"], *[None if m[k] is None else round(m[k] * 1e6, 3) for k in MODEL_METHODS],
                     None if ei is None else round(ei, 4), None if ee is None else round(ee, 4),
                     *[None if k not in first else round(first[k], 3) for k in MODEL_METHODS], r["rewrites"],
                     r["check"], r["rounds"],
                     *[r["timings"][k].calls if k in r["timings"] else None for k in MODEL_METHODS]])
    # A model fails where einc's result is wrong, or where the 95 % interval of the paired
    # per-round ratio einc/inductor lies wholly above the target (as the suite's like-for-like
    # verdict); a ratio above it within the noise is named, with a note where the backend
    # rewrote nothing and its compile was inductor's own (an FX-graph cache hit): both
    # columns then run the same compiled code.
    over, within = [], []
    for r in rows:
        t = r["timings"]
        lo = ratio_interval(t["einc"], t["inductor"])[1] if "einc" in t and "inductor" in t else r["ei"]
        if r["check"] != "ok" or r["ei"] is None or lo > MODELS_TARGET_MAX:
            over.append(f"{r['name']} ({_fine(r['ei'])})")
        elif r["ei"] > MODELS_TARGET_MAX:
            within.append(f"{r['name']} {_fine(r['ei'])}, interval from {lo:.3f}"
                          + (": the same compiled code as inductor's" if r["rewrites"].endswith(SAME_CODE_NOTE)
                             else ""))
    summary = [f"- models: {len(rows)}; geomean einc/inductor: "
               f"{report.fmt_ratio(report.geomean(r['ei'] for r in rows if r['check'] == 'ok'))}",
               f"- target einc/inductor ≤ {MODELS_TARGET_MAX:.1f} on every model: {verdict(not over)}"
               + (f" ({', '.join(over)} above or not correct)" if over else "")
               + (f" (above {MODELS_TARGET_MAX:.1f} within the timing noise: {'; '.join(within)})" if within else "")]
    md = report.header("einc training benchmark: models (forward + backward)", "float32", load, [
        "timed: one training step `out = f(*inputs); torch.autograd.grad(out, parameters, g)` (`g` a fixed "
        "randn of the output's shape, seed 1; no .grad accumulated); eager = the module as written; "
        "inductor = torch.compile(model); einc = torch.compile(model, backend=\"einc\") (einc's FX pass, "
        "then inductor, which also compiles the backward)",
        f"timing: median over up to {opts.rounds} rounds (budget {opts.budget:g} s/model, min "
        f"{opts.min_rounds} rounds) of per-call time, batches ≥ 2 ms, methods interleaved in shuffled order; "
        "the first (compiling) call is untimed and checked: output and parameter gradients against eager's "
        "(float32 tolerances of the suite)",
        "compile s: the first call (dynamo + backend, forward and backward), inductor / einc",
        "models: `models()` of bench/models.py (imported, unchanged)"], device=opts.device)
    md += report.markdown_table(["model", *[f"{k} µs" for k in MODEL_METHODS], "einc/inductor", "einc/eager",
                                 "compile s", "einc rewrites", "grad check"], table)
    md += ["", "## Summary", ""] + summary
    cols = ["model", *[f"{k}_us" for k in MODEL_METHODS], "einc_over_inductor", "einc_over_eager",
            *[f"{k}_first_call_s" for k in MODEL_METHODS], "einc_rewrites", "grad_check", "rounds",
            *[f"{k}_calls_per_batch" for k in MODEL_METHODS]]
    md_path, csv_path = report.write(out_dir, f"models_train{opts.tag}", md, cols, data, quiet=quiet)
    return md_path, csv_path, summary
