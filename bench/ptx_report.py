"""A static verdict on every generated kernel of the suite, from the real compiler.

    python bench/ptx_report.py --json ptx.json            # every kernel of bench/suite.json's gpu variants
    python bench/ptx_report.py --filter gemma --configs first --markdown

For each workload's gpu variant this builds the plan the generated kernels run (steps
fused as at run time), loads each step's module, and runs its host side (``launch``)
on meta tensors of the workload's shapes with the autotuner and the split-K second
pass replaced by a recorder: so the arguments, constants, K split and grid are the
ones a launch on an H100 (132 SMs) computes -- the TMA variant of a 16-bit matrix product
(``<name>_tma``) where the launcher takes it on such a device.  Each recorded kernel is compiled for
sm_90a (``GPUTarget("cuda", 90, 32)``) with the installed Triton's compiler — its own
argument specialization (integers equal to 1 become constants, multiples of 16 and
16-byte-aligned pointers are marked divisible, as on a GPU) — in each config the
autotuner would time (its launcher's ``prune`` of its ``configs``; ``--configs first``:
only the first it keeps, the largest tile), and the PTX goes through the wheel's
ptxas (``-v --gpu-name sm_90a``).  No GPU is needed.

Per kernel and config it reports registers, spill bytes (stores + loads) and stack
frame from ptxas, shared memory as Triton allocates it, the MMA instruction
(``wgmma.mma_async`` or ``mma.sync``; none for kernels without a matrix product or with
an FMA dot), the accumulator type (the MMA's D type; for kernels without MMA the widest
float type of the adds and FMAs), the widths of the global loads (``ld.global`` and
``cp.async``) and the count of bulk tensor copies (``cp.async.bulk.tensor``: TMA).
``problems`` lists what the targets condemn: spills; a 16-bit matrix
product with a tile of at least 64x64 (2-D, 4+ warps) not on wgmma; a 16-bit kernel
not accumulating in fp32; a TMA variant without bulk tensor copies.  ``exceptions`` lists
where a target does not apply: a 3-D dot (a batch index inside the tile) is never on
wgmma, which takes 2-D tiles.  The exit status is 0 even where problems are found (it
is a report); ``--strict`` makes it 1.
"""

from __future__ import annotations

import argparse
import collections
import json
import linecache
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SMS = 132                                  # H100 SXM's multiprocessors: what the launchers' split-K reads
SIXTEEN_BIT = ("float16", "bfloat16")


# ----------------------------------------------------------------- what each kernel is launched with

class _Recorder:
    """Stands in for a module's autotuner (``launcher.tuned[grid](...)``) or a kernel called
    directly (``fn[grid](...)``): keeps the call instead of launching it."""

    def __init__(self, fn, calls, finish=False):
        self.fn, self.calls, self.finish = fn, calls, finish

    def __getitem__(self, grid):
        def call(*args, **meta):
            self.calls.append((self.fn, args, meta, self.finish))
        return call


def load_module(kernel):
    """The generated module of ``kernel``, executed from its source (kept in linecache for Triton)."""
    from einc.codegen import render
    src = render(kernel)
    path = f"<ptx report {kernel.name}>"
    linecache.cache[path] = (len(src), None, src.splitlines(True), path)
    mod = types.ModuleType(kernel.name)
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod


def launches(equation, shapes, dtype):
    """``(step, kernel, module, recorded calls)`` for each step of the plan the generated
    kernels run, launched on meta tensors as on an H100."""
    import torch

    from einc.codegen.lower import lower_program
    from einc.planner.equation import parse
    from einc.planner.fuse import fuse_plan
    from einc.planner.graph import build
    from einc.planner.plan import build_plan

    eq = parse(equation)
    plan = fuse_plan(build_plan(build(eq, shapes), eq.text), dtype)
    kernels = lower_program(plan, dtype, shapes)
    values = {v: torch.empty(s, dtype=getattr(torch, dtype), device="meta") for v, s in enumerate(shapes)}
    out = []
    for s, (step, kernel) in enumerate(zip(plan.steps, kernels)):
        mod = load_module(kernel)
        calls = []
        fn = getattr(mod, kernel.name)
        launcher = mod.launcher
        launcher.tuned = _Recorder(fn, calls)
        if launcher.tma is not None:         # the TMA variant, taken as on an H100 where it applies
            launcher.tma.tuned = _Recorder(launcher.tma.kernel, calls)
            launcher.tma_device = lambda device: True
        if launcher.finish is not None:
            launcher.finish = _Recorder(launcher.finish, calls, finish=True)
        launcher.processors = lambda device: SMS
        values[step.result] = mod.launch(*(values[v] for v in step.operands))
        out.append((s + 1, kernel, mod, calls))
    return out


# ----------------------------------------------------------------- compiling and reading the PTX

def _target():
    from triton.backends.compiler import GPUTarget
    return GPUTarget("cuda", 90, 32)


def compile_call(fn, args, meta, num_warps, num_stages):
    """Compile ``fn`` for sm_90 as Triton's JIT would for these arguments."""
    import triton
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(_target())
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(meta, num_warps=num_warps, num_stages=num_stages)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=_target(), options=options.__dict__)


class _PtxasLog:
    """Stands in for ``subprocess`` in Triton's NVIDIA backend while it compiles: runs
    its commands unchanged and keeps the log of its ``ptxas -v`` (registers, spills)."""

    def __init__(self):
        self.logs = []

    def __getattr__(self, name):
        return getattr(subprocess, name)

    def run(self, cmd, *args, **kwargs):
        done = subprocess.run(cmd, *args, **kwargs)
        log = kwargs.get("stderr")
        if "ptxas" in Path(str(cmd[0])).name and hasattr(log, "name"):
            self.logs.append(Path(log.name).read_text())
        return done


def _ptxas_fallback(ptx: str) -> str:
    """``ptxas -v`` run here on the PTX (where this Triton's backend could not be watched):
    the wheel's ptxas for sm_90 (``ptxas-blackwell`` where there is one: the newer), as the backend picks."""
    import triton
    folder = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    errors = []
    for name in ("ptxas-blackwell", "ptxas"):
        if not (folder / name).exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "k.ptx").write_text(ptx)
            done = subprocess.run([str(folder / name), "-v", "--gpu-name=sm_90a", str(Path(tmp) / "k.ptx"),
                                   "-o", str(Path(tmp) / "k.cubin")], capture_output=True, text=True, timeout=600)
        if done.returncode == 0:
            return done.stderr + done.stdout
        errors.append(done.stderr[-1000:])
    raise RuntimeError(f"ptxas failed: {errors}")


def compile_with_log(fn, args, meta, num_warps, num_stages):
    """(compiled kernel, the log of the ptxas run that built its cubin, ``"triton"``) or, where
    that run could not be watched, (..., the log of :func:`_ptxas_fallback`, ``"rerun"``)."""
    import triton.backends.nvidia.compiler as nvidia
    watch = _PtxasLog()
    saved = nvidia.subprocess
    nvidia.subprocess = watch
    try:
        compiled = compile_call(fn, args, meta, num_warps, num_stages)
    finally:
        nvidia.subprocess = saved
    if watch.logs:
        return compiled, watch.logs[-1], "triton"
    return compiled, _ptxas_fallback(compiled.asm["ptx"]), "rerun"


def ptxas_info(log: str) -> dict:
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return {"registers": int(regs.group(1)), "stack_bytes": int(spill.group(1)),
            "spill_bytes": int(spill.group(2)) + int(spill.group(3))}


_BULK = re.compile(r"^\s*(?:@!?%p\d+\s+)?cp\.async\.bulk\.tensor\.\d+d\.[\w:.]*", re.M)
_MMA = re.compile(r"^\s*(wgmma\.mma_async|mma\.sync)\.[\w.]*", re.M)
_ARITH = re.compile(r"^\s*(?:add|fma|sub)(?:\.rn|\.rz|\.rm|\.rp)?(?:\.ftz)?(?:\.sat)?"
                    r"\.(f64|f32|bf16x2|bf16|f16x2|f16)\b", re.M)
_LOAD = re.compile(r"^\s*(?:@!?%p\d+\s+)?(ld\.global[\w.]*|cp\.async\.c[ag]\.shared\.global[\w.]*)\s+[^;]*;", re.M)
_WIDTH = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
          "b32": 4, "u32": 4, "s32": 4, "f32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8}


def read_ptx(ptx: str) -> dict:
    """The MMA instruction and its accumulator type, the arithmetic types, the load widths."""
    mmas = sorted({m.group(0).strip() for m in _MMA.finditer(ptx)})
    kinds = {m.split(".")[0] for m in mmas}
    mma = "wgmma" if "wgmma" in kinds else "mma.sync" if "mma" in kinds else None
    accumulators = set()
    for m in mmas:
        parts = m.split(".")
        if parts[0] == "wgmma":          # wgmma.mma_async.sync.aligned.mXnYkZ.D.A.B
            shape = next(i for i, p in enumerate(parts) if re.fullmatch(r"m\d+n\d+k\d+", p))
            accumulators.add(parts[shape + 1])
        else:                            # mma.sync.aligned.mXnYkZ[.row.col].D.A.B.C
            types_ = [p for p in parts if p in ("f64", "f32", "f16", "bf16", "tf32", "s32")]
            accumulators.add(types_[0])
    arith = collections.Counter(m.group(1) for m in _ARITH.finditer(ptx))
    if not accumulators:                 # no MMA: the widest float type the kernel adds in
        for t in ("f64", "f32", "f16x2", "f16", "bf16x2", "bf16"):
            if arith.get(t):
                accumulators.add(t.replace("x2", ""))
                break
    widths = collections.Counter()
    for m in _LOAD.finditer(ptx):
        op, text = m.group(1), m.group(0)
        if op.startswith("cp.async"):
            size = re.search(r"\],\s*(0x[0-9a-fA-F]+|\d+)", text)
            widths[int(size.group(1), 0) if size else 0] += 1
        else:
            parts = op.split(".")
            lanes = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d", p)), 1)
            width = next((_WIDTH[p] for p in reversed(parts) if p in _WIDTH), 0)
            widths[lanes * width] += 1
    bulk = [m.group(0).split()[-1] for m in _BULK.finditer(ptx)]
    return {"mma": mma, "wgmma": mma == "wgmma", "mma_instructions": mmas,
            "bulk_tensor_copies": len(bulk), "bulk_tensor_kinds": sorted(set(bulk)),
            "accumulator": "/".join(sorted(accumulators)) or None,
            "arith_types": dict(sorted(arith.items())),
            "global_load_widths": {str(k): v for k, v in sorted(widths.items())},
            "vectorized_loads": bool(widths) and all(w >= 8 for w in widths)}


# ----------------------------------------------------------------- the report

def _big_16bit_product(row: dict) -> bool:
    c = row["config"]
    return row["dtype"] in SIXTEEN_BIT and row["kind"] in ("mm", "fused") and c.get("BLOCK_M", 0) >= 64 \
        and c.get("BLOCK_N", 0) >= 64 and c["num_warps"] >= 4 and not row["wgmma"]


def problems(row: dict) -> list[str]:
    """What the targets condemn: spills; a 16-bit 2-D product on a >=64x64 tile off wgmma; a
    16-bit kernel accumulating in anything but fp32."""
    found = []
    if row["spill_bytes"]:
        found.append(f"spills {row['spill_bytes']} bytes")
    if _big_16bit_product(row) and "BLOCK_T" not in row["config"]:
        found.append("a 16-bit product on a >=64x64 tile without wgmma")
    if row["dtype"] in SIXTEEN_BIT and row["kind"] != "finish" and row["accumulator"] != "f32":
        found.append(f"16-bit kernel accumulating in {row['accumulator']}")
    if row.get("tma") and not row["bulk_tensor_copies"]:
        found.append("a TMA variant without bulk tensor copies")
    return found


def exceptions(row: dict) -> list[str]:
    """Where a target does not apply, and why."""
    if _big_16bit_product(row) and "BLOCK_T" in row["config"]:
        return ["3-D dot (a batch index inside the tile, here BLOCK_T = "
                f"{row['config']['BLOCK_T']}): Triton lowers 3-D dots to mma.sync, wgmma takes 2-D tiles"]
    return []


def _configs(mod, fn, meta, which):
    launcher = mod.launcher      # fused kernels are not pruned (their autotuner has no pruning)
    configs = launcher.tma.configs if launcher.tma is not None and fn is launcher.tma.kernel else launcher.configs
    pruned = list(configs) if launcher.kind == "fused" else launcher.prune(configs, {}, **meta)
    return pruned[:1] if which == "first" else pruned


def report(workloads, which="all", log=print) -> list[dict]:
    import triton

    rows = []
    for w in workloads:
        v = w["variants"]["gpu"]
        shapes = [tuple(s) for s in v["shapes"]]
        for step, kernel, mod, calls in launches(w["equation"], shapes, v["dtype"]):
            kind = kernel.name.split("_")[1]
            for fn, args, meta, finish in calls:
                if finish:
                    configs = [None]
                else:
                    configs = _configs(mod, fn, meta, which)
                for config in configs:
                    warps, stages = (4, 3) if config is None else (config.num_warps, config.num_stages)
                    full = dict(meta, **({} if config is None else config.kwargs))
                    start = time.monotonic()
                    compiled, ptxas_log, ptxas_source = compile_with_log(fn, args, full, warps, stages)
                    ptx = compiled.asm["ptx"]
                    row = {"workload": w["id"], "step": step, "kernel": fn.__name__,
                           "kind": "finish" if finish else kind, "dtype": v["dtype"],
                           "tma": fn.__name__.endswith("_tma"),
                           "config": {**({} if config is None else config.kwargs),
                                      "num_warps": warps, "num_stages": stages},
                           "split_k": meta.get("SPLIT_K", meta.get("SPLIT", 1)),
                           "triton": triton.__version__, "target": "sm_90a", "ptxas_log": ptxas_source,
                           **ptxas_info(ptxas_log), "shared_bytes": compiled.metadata.shared, **read_ptx(ptx),
                           "compile_seconds": round(time.monotonic() - start, 2)}
                    row["problems"] = problems(row)
                    row["exceptions"] = exceptions(row)
                    rows.append(row)
                    log(_line(row))
    return rows


def _tile(row):
    c = row["config"]
    if "BLOCK_M" in c:
        t = f"{c.get('BLOCK_T', 1)}x" if c.get("BLOCK_T", 1) > 1 else ""
        return f"{t}{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']}"
    if "BLOCK_O" in c:
        return f"O{c['BLOCK_O']}xK{c['BLOCK_K']}"
    return "-"


def _line(row):
    return (f"{row['workload']:28} {row['step']} {row['kernel'][:44]:44} {row['dtype']:8} {_tile(row):12} "
            f"w{row['config']['num_warps']} s{row['config']['num_stages']} regs {row['registers']:3} "
            f"spill {row['spill_bytes']} smem {row['shared_bytes']:6} {row['mma'] or '-':8} "
            f"acc {row['accumulator']} loads {row['global_load_widths']} bulk {row['bulk_tensor_copies']} "
            f"{'; '.join(row['problems'])}"
            f"{' (exception: ' + '; '.join(row['exceptions']) + ')' if row['exceptions'] else ''}")


def markdown(rows) -> str:
    """Per kernel (workload, step, kernel): its configs summed up in one row."""
    groups = collections.OrderedDict()
    for r in rows:
        groups.setdefault((r["workload"], r["step"], r["kernel"]), []).append(r)
    out = ["| workload | step | kernel | dtype | configs | registers | spill bytes | shared KiB | MMA | accumulator "
           "| global loads (bytes: count, largest tile) | bulk tensor copies | problems |",
           "|---|---:|---|---|---:|---|---:|---|---|---|---|---:|---|"]
    for (workload, step, kernel), rs in groups.items():
        regs = sorted(r["registers"] for r in rs)
        smem = sorted(r["shared_bytes"] for r in rs)
        mmas = sorted({r["mma"] or "none" for r in rs})
        accs = sorted({r["accumulator"] or "-" for r in rs})
        loads = ", ".join(f"{k}: {n}" for k, n in rs[0]["global_load_widths"].items())
        found = sorted({p for r in rs for p in r["problems"]}) + \
            sorted({"exception: " + e.split(":")[0] for r in rs for e in r["exceptions"]})
        span = lambda xs: f"{xs[0]}" if xs[0] == xs[-1] else f"{xs[0]}-{xs[-1]}"  # noqa: E731
        out.append(f"| {workload} | {step} | `{kernel}` | {rs[0]['dtype']} | {len(rs)} | {span(regs)} | "
                   f"{max(r['spill_bytes'] for r in rs)} | {span([round(s / 1024, 1) for s in smem])} | "
                   f"{', '.join(mmas)} | {', '.join(accs)} | {loads} | {rs[0].get('bulk_tensor_copies', 0)} | "
                   f"{'; '.join(found) or 'none'} |")
    return "\n".join(out)


def summary(rows) -> str:
    import triton
    kernels = {(r["workload"], r["step"], r["kernel"]) for r in rows}
    sixteen_mm = [r for r in rows if r["dtype"] in SIXTEEN_BIT and r["kind"] in ("mm", "fused")]
    tma = [r for r in rows if r.get("tma")]
    return (f"triton {triton.__version__}, sm_90a: {len(kernels)} kernels of {len({r['workload'] for r in rows})} "
            f"workloads, {len(rows)} compiled configs; spilling configs: {sum(r['spill_bytes'] > 0 for r in rows)}; "
            f"16-bit matrix-product configs on wgmma: {sum(r['wgmma'] for r in sixteen_mm)} of {len(sixteen_mm)}; "
            f"accumulators of 16-bit kernels: "
            f"{dict(collections.Counter(r['accumulator'] for r in rows if r['dtype'] in SIXTEEN_BIT))}; "
            f"TMA variant configs with bulk tensor copies and wgmma: "
            f"{sum(bool(r['bulk_tensor_copies']) and r['wgmma'] for r in tma)} of {len(tma)}; "
            f"configs with problems: {sum(bool(r['problems']) for r in rows)}; "
            f"configs with explained exceptions: {sum(bool(r['exceptions']) for r in rows)}")


def _compiler_environment() -> None:
    """The real compiler, not the interpreter (set before triton is imported: a script's
    process), with Triton's default FP fusion said out loud (3.9 warns otherwise) and a
    cache folder of its own, so that every kernel is compiled here and its ptxas log read."""
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("run bench/ptx_report.py as a script: triton was imported with TRITON_INTERPRET=1")
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="einc-ptx-report-")


def versions_table(reports) -> str:
    """One row per report (a triton version): the summary in bench/measured/ptx.md, from the JSON files."""
    out = ["| triton | kernels | configs compiled | spilling configs | 16-bit products on >=64x64 2-D tiles on wgmma "
           "| 3-D tiles (mma.sync, exception) | 16-bit accumulators | configs with 16-byte loads "
           "| TMA variant configs with bulk tensor copies and wgmma | problems |",
           "|---|---:|---:|---:|---|---:|---|---|---|---:|"]
    for rows in reports:
        big = [r for r in rows if r["dtype"] in SIXTEEN_BIT and r["kind"] in ("mm", "fused")
               and r["config"].get("BLOCK_M", 0) >= 64 and r["config"].get("BLOCK_N", 0) >= 64
               and r["config"]["num_warps"] >= 4 and "BLOCK_T" not in r["config"]]
        accs = collections.Counter(r["accumulator"] for r in rows
                                   if r["dtype"] in SIXTEEN_BIT and r["kind"] != "finish")
        wide = sum("16" in r["global_load_widths"] for r in rows)
        tma = [r for r in rows if r.get("tma")]
        bulk = sum(bool(r["bulk_tensor_copies"]) and r["wgmma"] for r in tma)
        out.append(f"| {rows[0]['triton']} | {len({(r['workload'], r['step'], r['kernel']) for r in rows})} | "
                   f"{len(rows)} | {sum(r['spill_bytes'] > 0 for r in rows)} | "
                   f"{sum(r['wgmma'] for r in big)} of {len(big)} | {sum(bool(r['exceptions']) for r in rows)} | "
                   f"{', '.join(f'{a}: {n}' for a, n in sorted(accs.items()))} | {wide} of {len(rows)} | "
                   f"{bulk} of {len(tma)} | "
                   f"{sum(bool(r['problems']) for r in rows)} |")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="write one object per kernel and config to FILE")
    parser.add_argument("--markdown", action="store_true",
                        help="print bench/measured/ptx.md's table (one row per kernel)")
    parser.add_argument("--suite", default=None, help="the suite file (default: bench/suite.json)")
    parser.add_argument("--filter", action="append", default=[], metavar="TEXT",
                        help="only workloads whose id contains TEXT (repeatable: any of them)")
    parser.add_argument("--configs", choices=("all", "first"), default="all",
                        help="all: every config the autotuner would time (default); first: the first one it keeps")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 where a kernel has problems")
    parser.add_argument("--tables", nargs="+", metavar="JSON",
                        help="compile nothing: print bench/measured/ptx.md's tables from reports written with --json "
                             "(a summary row per file, then the first file's kernels)")
    args = parser.parse_args(argv)
    if args.tables:
        reports = [json.loads(Path(f).read_text()) for f in args.tables]
        print(versions_table(reports) + "\n\n" + markdown(reports[0]))
        return 0
    _compiler_environment()

    from einc.codegen.ir import KERNEL_DTYPES
    from einc.tools.benchmark.suite import find_suite, load

    suite = load(find_suite(args.suite))
    workloads = [w for w in suite["workloads"] if (not args.filter or any(t in w["id"] for t in args.filter))
                 and w["variants"]["gpu"]["dtype"] in KERNEL_DTYPES]
    if not workloads:
        parser.error(f"no workload with generated kernels matches {args.filter!r}")
    rows = report(workloads, args.configs, log=lambda line: print(line, flush=True))
    if args.json:
        # one kernel config a line
        Path(args.json).write_text("[\n" + ",\n".join(json.dumps(r, separators=(",", ":")) for r in rows) + "\n]\n")
    if args.markdown:
        print(markdown(rows))
    print(summary(rows))
    return 1 if args.strict and any(r["problems"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
