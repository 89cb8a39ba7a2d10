"""How long a generated kernel's first launch of a layout spends compiling, with Triton's
real compiler for sm_90a and no GPU: einc compiling the configs one after another
(``EINC_COMPILE_THREADS=1``) against side by side, before the autotuner times them
(``einc/runtime/triton_executor/autotune.py``).

    python bench/first_launch.py [--rounds N] [--threads N] [--filter REGEX]
    python bench/first_launch.py --child EQUATION SHAPES DTYPE [--tma]   # one first launch: JSON
    python bench/first_launch.py --jobs N [--time-ms MS] [--rounds N] [--filter REGEX]
    python bench/first_launch.py --caller [--threads N] [--rounds N] [--filter REGEX]
    python bench/first_launch.py --spills [WORKLOAD ...]     # which configs the autotuner skips

Each row's one-step plan is lowered and its module's first launch (``launch()`` on zero
CPU tensors) runs in a fresh process with an empty Triton cache, on a stand-in CUDA
driver: an H100 that is not there, where compiles are real, loads and launches do
nothing and the autotuner's timed runs return at once.  What is timed is so the compiling
(and einc's and Triton's host work) of the configs the autotuner times; on a GPU their
timings and loads come on top.  Rounds alternate which setting goes first.  Prints
Markdown: per row, the configs timed, the seconds of each setting (median of the
rounds) and their ratio.

``--child`` is the one first launch (``--tma``: the TMA variant where it applies, as on
an H100); it prints one JSON object: the seconds, the events in order (``["compile",
thread name]`` per kernel Triton compiled, ``["time"]`` per config the autotuner timed),
what einc's ``precompile`` returned and whether the layout took the TMA variant
(``tests/runtime/test_autotune.py`` reads it).

``--jobs N`` runs the rows' first launches in one process as learn mode's background
jobs (:class:`einc.runtime.background.Worker`, the rows in order; the modules loaded
first) on one thread and on N, each config's timed run taking ``--time-ms`` (a stand-in
for the device's timing: nothing is timed on it), and prints the seconds until all are
done, how many compiles ran while another job's configs were being timed, and whether
two jobs' timings ever interleaved.

``--caller`` asks what kernels compiling in the background cost the caller's thread
meanwhile, as learn mode's jobs do while the caller's calls go on: in a fresh process a
round, the rows' first launches run one after another on a background thread (their
compiles in ``--threads`` threads on every CPU but the first), while the main thread, on
the first CPU, runs a loop of one small torch op (``torch.add`` of two 16-float tensors,
whose binding gives the GIL up and takes it back, as every torch op's does).  Prints per
round the launches' seconds, the op's median and mean µs alone (a second before) and
during the launches, and the share of that time the caller spent in stalls of 100 µs or
more (waiting for the GIL, which the compiles' Python parts hold), with the longest.

``--spills`` asks which configs the autotuner skips for spilling (``autotune.spilling``):
the stand-in driver then reads each compiled kernel's registers and local memory from its
cubin (the wheel's ``cuobjdump -res-usage``: its stack frame and local bytes, which a
real driver reports as ``CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`` and Triton as ``n_spills``,
in 4-byte words).  Each workload of ``bench/suite.json`` named (default: the fp32 CCSD(T)
terms and the kernels ``bench/measured/ptx.md`` found spilling) has its first launch in a
fresh process; prints per config its registers, local bytes and whether it was timed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# id, equation, operand shapes, dtype, the TMA variant: a kind of kernel each
ROWS = [
    ("bf16_nn_4096_tma", "mk,kn->mn", [[4096, 4096], [4096, 4096]], "bfloat16", True),
    ("bf16_nn_4096", "mk,kn->mn", [[4096, 4096], [4096, 4096]], "bfloat16", False),
    ("bf16_batch_in_tile", "ikc,jkc->ijc", [[64, 96, 32], [48, 96, 32]], "bfloat16", False),
    ("fp32_split_k", "ij,jk->ik", [[64, 8192], [8192, 64]], "float32", False),
    ("fp32_ccsdt_n_block", "dega,gfbc->abcdef", [[16, 16, 32, 32], [32, 16, 32, 32]], "float32", False),
    ("fp32_ccsd_gather", "aebf,dfce->abcd", [[24, 24, 24, 24], [24, 24, 24, 24]], "float32", False),
    ("fp32_reduce", "bij,bij->b", [[4, 300, 200], [4, 300, 200]], "float32", False),
]


SPILL_ROWS = ["pw_ccsdt_dega_gfbc", "pw_ccsdt_dfgb_geac", "pw_ccsdt_degb_gfac", "bcast_ntn_score_t",
              "perm_akbc_jk_cjba", "pw_ttm_abk_kj", "pw_ccsd_w_mbij"]


def resources(cubin: bytes) -> tuple[int, int]:
    """``(registers, local bytes a thread)`` of a one-kernel cubin, as the wheel's
    ``cuobjdump -res-usage`` reads them (local: its stack frame and local memory)."""
    import triton
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    usage = dict(re.findall(r"\b(REG|STACK|LOCAL):(\d+)", out))
    return int(usage["REG"]), int(usage["STACK"]) + int(usage["LOCAL"])


def _stand_in(events, returned, time_ms: float = 0.0, current=None, compiled=None):
    """Make this process's Triton drive an H100 that is not there (for good): compiles are
    real, loads and launches do nothing, and the autotuner's timed run takes ``time_ms``
    (a stand-in for the device's timing).  Appends ``["compile", thread name]`` per kernel
    Triton compiles and ``["time"]`` per timed run (``["time", current.row]`` where
    ``current``, a thread-local, names the job) to ``events``, and what einc's
    ``precompile`` returned to ``returned``.  Where ``compiled`` is a list, a load reads the
    kernel's registers and local memory (:func:`resources`), and each config einc's
    ``precompile`` compiles appends its keywords, registers and ``n_spills`` there."""
    import threading

    import torch
    import triton
    from triton.backends.compiler import GPUTarget

    from einc.runtime.triton_executor import autotune, launch

    loaded = threading.local()

    class Utils:
        def load_binary(self, name, kernel, shared, device):
            if compiled is None:
                return None, 1, 0, 0, 1024      # module, function, registers, spills, most threads a block
            loaded.registers, local = resources(kernel)
            return None, 1, loaded.registers, local // 4, 1024

        def get_device_properties(self, device):
            return {"max_shared_mem": 227 * 1024, "multiprocessor_count": 132, "max_num_regs": 65536,
                    "warpSize": 32, "sm_clock_rate": 1980000, "mem_clock_rate": 2619000, "mem_bus_width": 5120}

    class Driver:
        """Triton's active driver for an H100 that is not there."""
        utils = Utils()

        def get_current_device(self):
            return 0

        def set_current_device(self, device):
            pass

        def get_current_stream(self, device=None):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def get_active_torch_device(self):
            return torch.device("cpu")

        def launcher_cls(self, src, metadata):
            return lambda *args: None

    def one_run_ms(kernel_call):        # the autotuner's timed run: no device to time on
        events.append(["time"] if current is None else ["time", current.row])
        kernel_call()
        if time_ms:
            time.sleep(time_ms / 1000)
        return autotune.SLOW_MS             # (timed by this run alone)

    triton.runtime.driver.set_active(Driver())
    triton.knobs.runtime.jit_post_compile_hook = \
        lambda *args, **kwargs: events.append(["compile", threading.current_thread().name])
    autotune._one_run_ms = one_run_ms
    launch._precompile = lambda *a, **k: returned.append(autotune.precompile(*a, **k)) or returned[-1]
    if compiled is not None:
        original = autotune._compile

        def compile_noted(kernel, args, grid, keywords, device):
            loaded.registers = None
            n_spills = original(kernel, args, grid, keywords, device)
            compiled.append({"config": _config_name(keywords), "registers": loaded.registers, "n_spills": n_spills})
            return n_spills
        autotune._compile = compile_noted


def _config_name(keywords) -> str:
    """A config's tile, warps and stages: ``64x16x16x32 w4 s2`` (BLOCK_T, M, NT, N, K as it has)."""
    blocks = [str(keywords[b]) for b in ("BLOCK_T", "BLOCK_M", "BLOCK_NT", "BLOCK_N", "BLOCK_K", "BLOCK_O")
              if b in keywords]
    return f"{'x'.join(blocks)} w{keywords['num_warps']} s{keywords['num_stages']}"


def _module(equation: str, shapes, dtype: str, tma: bool):
    """The one-step plan's generated module, loaded, and zero operands for it."""
    import torch

    from bench.ptx_report import load_module
    from einc.codegen.lower import lower_program
    from einc.planner.equation import parse
    from einc.planner.graph import build
    from einc.planner.plan import build_plan

    plan = build_plan(build(parse(equation), shapes), equation)
    (kernel,) = lower_program(plan, dtype, shapes)
    module = load_module(kernel)
    if tma:
        module.launcher.tma_device = lambda device: True
    return module, [torch.zeros(s, dtype=getattr(torch, dtype)) for s in shapes]


def child(equation: str, shapes, dtype: str, tma: bool, spills: bool = False) -> dict:
    """One first launch on the stand-in driver (in this process, which it changes for good);
    ``spills``: with each compiled config's registers and ``n_spills`` read from its cubin,
    and the autotuner's timings (infinite: skipped)."""
    events, returned, compiled = [], [], [] if spills else None
    _stand_in(events, returned, compiled=compiled)
    module, operands = _module(equation, shapes, dtype, tma)
    start = time.perf_counter()
    module.launch(*operands)
    seconds = time.perf_counter() - start
    variants = [known.variant is not None for known in module.launcher.layouts.values()]
    out = {"seconds": seconds, "events": events, "threads": returned, "tma": variants}
    if spills:
        tuned = module.launcher.tma.tuned if any(variants) else module.launcher.tuned
        out["compiled"] = compiled
        out["timings"] = [[_config_name(c.all_kwargs()), t[0] if isinstance(t, list) else t]
                          for c, t in getattr(tuned, "configs_timings", {}).items()]
    return out


def spills_table(ids, threads: int) -> None:
    """Per workload (an id of bench/suite.json) and config of its first launch: registers,
    local bytes and whether the autotuner timed it (``--spills``)."""
    import triton

    from einc.tools.benchmark.suite import find_suite, load
    suite = {w["id"]: w for w in load(find_suite(None))["workloads"]}
    print(f"first launches on a stand-in H100, Triton's real compiler (triton {triton.__version__}); registers "
          f"and local memory from each config's cubin; {threads} compile threads\n")
    print("| workload | config | registers | local bytes | autotuner |")
    print("|---|---|---:|---:|---|")
    for name in ids:
        v = suite[name]["variants"]["gpu"]
        out = first_launch((name, suite[name]["equation"], v["shapes"], v["dtype"], False), threads, "--spills")
        timings = dict(out["timings"])
        for c in out["compiled"]:
            local = "-" if c["n_spills"] is None else 4 * c["n_spills"]
            timed = timings.get(c["config"])
            verdict = "not timed" if timed is None else "skipped" if timed == float("inf") else "timed"
            print(f"| {name} | {c['config']} | {c['registers']} | {local} | {verdict} |", flush=True)


def jobs_child(rows, jobs: int, time_ms: float) -> dict:
    """The first launches of ``rows`` (ids) as learn mode's background jobs: handed in order
    to a :class:`~einc.runtime.background.Worker` of ``jobs`` threads, on the stand-in
    driver with a timed run of ``time_ms``.  Returns the seconds until all are done, each
    job's start and end, and the events (timings named by row)."""
    import threading

    from einc.runtime.background import Worker

    events, returned, current = [], [], threading.local()
    _stand_in(events, returned, time_ms, current)
    modules = {r[0]: _module(r[1], r[2], r[3], r[4]) for r in ROWS if r[0] in rows}
    spans, worker = {}, Worker("first-launch-jobs", threads=jobs)

    def job(row):
        current.row = row
        module, operands = modules[row]
        begin = time.perf_counter()
        try:
            module.launch(*operands)
        except Exception as e:      # noqa: BLE001 - reported in the JSON
            errors[row] = f"{type(e).__name__}: {e}"[:500]
        spans[row] = [begin - start, time.perf_counter() - start]
    errors: dict = {}
    start = time.perf_counter()
    for row in rows:
        worker.submit(lambda row=row: job(row))
    worker.settle()
    return {"seconds": time.perf_counter() - start, "spans": spans, "events": events, "threads": returned,
            "errors": errors}


CALLER_OPS = 10            # torch ops a timed sample of the caller's loop runs
STALL_US = 100.0           # a sample's op slower than this waited for the GIL or a CPU


def caller_child(rows, threads: int) -> dict:
    """The first launches of ``rows`` (ids), one after another on a background thread as
    learn mode makes kernels ready (the stand-in driver, ``threads`` compile threads),
    while the main thread, on a CPU of its own, loops over a small torch op.  Returns the
    launches' seconds and the op's times alone (a second before) and during the launches
    (``looped_s``: the seconds the loop's timed calls took in all)."""
    import threading

    import torch

    torch.set_num_threads(1)
    _stand_in([], [])
    modules = [_module(*r[1:]) for r in ROWS if r[0] in rows]
    x, y = torch.randn(16), torch.randn(16)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
    if len(cpus) > 1:       # the caller on a CPU of its own, the compiles on the others
        os.sched_setaffinity(0, cpus[:1])

    def loop(until):
        samples = []
        while not until():
            t0 = time.perf_counter()
            for _ in range(CALLER_OPS):
                torch.add(x, y)
            samples.append((time.perf_counter() - t0) * 1e6 / CALLER_OPS)
        return samples

    end = time.perf_counter() + 1.0
    before = loop(lambda: time.perf_counter() >= end)
    done, span = threading.Event(), {}

    def job():
        if len(cpus) > 1:   # (the compile threads started from here inherit it)
            os.sched_setaffinity(0, cpus[1:])
        start = time.perf_counter()
        for module, operands in modules:
            module.launch(*operands)
        span["seconds"] = time.perf_counter() - start
        done.set()
    threading.Thread(target=job, name="learn-job").start()
    during = loop(done.is_set)

    def summary(samples):
        stalls = [t * CALLER_OPS for t in samples if t >= STALL_US]
        return {"median_us": statistics.median(samples), "mean_us": statistics.mean(samples),
                "looped_s": sum(samples) * CALLER_OPS / 1e6,
                "stalled_s": sum(stalls) / 1e6, "longest_ms": max(stalls, default=0.0) / 1e3}
    return {"seconds": span["seconds"], "before": summary(before), "during": summary(during)}


def caller_run(rows, threads: int) -> dict:
    """``caller_child`` in a fresh process with an empty Triton cache."""
    with tempfile.TemporaryDirectory(prefix="einc-first-launch-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env.update(TRITON_CACHE_DIR=cache, EINC_COMPILE_THREADS=str(threads), TRITON_DEFAULT_FP_FUSION="1",
                   PYTHONPATH=str(HERE.parent))
        done = subprocess.run([sys.executable, __file__, "--caller-child", ",".join(rows), str(threads)],
                              env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.splitlines()[-1])


def caller_table(rows, threads: int, rounds: int) -> None:
    """The caller's op while the rows' first launches compile, per round and the medians."""
    print(f"the caller's loop of `torch.add` (16 floats) on a CPU of its own while {len(rows)} first launches "
          f"({', '.join(rows)}) compile one after another on a thread, the compiles on the other CPUs; "
          f"stand-in H100, Triton's real compiler; {os.cpu_count()} CPUs; {threads} compile threads\n")
    print("| round | launches, s | op alone: median / mean µs | during: median / mean µs "
          "| stalls ≥ 100 µs, share of the launches | longest stall, ms |")
    print("|---|---:|---:|---:|---:|---:|")
    runs = []
    for r in range(rounds):
        runs.append(caller_run(rows, threads))
        _caller_row(str(r + 1), runs[-1:])
    if rounds > 1:
        _caller_row("median", runs)


def _caller_row(name: str, runs) -> None:
    def med(phase, what):
        return statistics.median(o[phase][what] for o in runs)
    stalled = statistics.median(o["during"]["stalled_s"] / o["seconds"] for o in runs)
    print(f"| {name} | {statistics.median(o['seconds'] for o in runs):.2f} "
          f"| {med('before', 'median_us'):.2f} / {med('before', 'mean_us'):.2f} "
          f"| {med('during', 'median_us'):.2f} / {med('during', 'mean_us'):.2f} "
          f"| {stalled:.3f} | {med('during', 'longest_ms'):.1f} |", flush=True)


def overlaps(events) -> int:
    """Compiles that ran while some job's configs were being timed: between a row's first
    and last timing (a job's own compiles all come before its first timing)."""
    timed = [i for i, e in enumerate(events) if e[0] == "time"]
    count = 0
    for row in {events[i][1] for i in timed}:
        mine = [i for i in timed if events[i][1] == row]
        count += sum(e[0] == "compile" for e in events[mine[0]:mine[-1]])
    return count


def interleaved(events) -> bool:
    """Whether two jobs' timings ever interleaved (they must not: one launch timed at a time)."""
    rows = [e[1] for e in events if e[0] == "time"]
    runs = [r for i, r in enumerate(rows) if i == 0 or rows[i - 1] != r]
    return len(runs) != len(set(runs))


def first_launch(row, threads: int, *options) -> dict:
    """``child`` of ``row`` in a fresh process with an empty Triton cache (``options``: the child's)."""
    _, equation, shapes, dtype, tma = row
    with tempfile.TemporaryDirectory(prefix="einc-first-launch-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env.update(TRITON_CACHE_DIR=cache, EINC_COMPILE_THREADS=str(threads), TRITON_DEFAULT_FP_FUSION="1",
                   PYTHONPATH=str(HERE.parent))
        done = subprocess.run([sys.executable, __file__, "--child", equation, json.dumps(shapes), dtype,
                               *(["--tma"] if tma else []), *options], env=env, capture_output=True, text=True,
                              timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{row[0]}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def jobs_run(rows, jobs: int, time_ms: float) -> dict:
    """``jobs_child`` in a fresh process with an empty Triton cache."""
    with tempfile.TemporaryDirectory(prefix="einc-first-launch-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env.update(TRITON_CACHE_DIR=cache, TRITON_DEFAULT_FP_FUSION="1", PYTHONPATH=str(HERE.parent))
        done = subprocess.run([sys.executable, __file__, "--jobs-child", ",".join(rows), str(jobs), str(time_ms)],
                              env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.splitlines()[-1])


def jobs_table(rows, jobs: int, rounds: int, time_ms: float) -> None:
    """The rows' first launches as background jobs, one thread against ``jobs`` threads."""
    print(f"first launches as background jobs on a stand-in H100, Triton's real compiler; {os.cpu_count()} "
          f"CPUs; {len(rows)} rows ({', '.join(rows)}); a timed run {time_ms:g} ms; {rounds} rounds\n")
    print("| job threads | seconds (median) | compiles while another job was timed | timings interleaved |")
    print("|---:|---:|---:|---|")
    seconds, results = {}, {1: [], jobs: []}
    for r in range(rounds):
        for setting in ((1, jobs) if r % 2 == 0 else (jobs, 1)):
            out = jobs_run(rows, setting, time_ms)
            if out["errors"]:
                raise RuntimeError(out["errors"])
            results[setting].append(out)
    for setting, outs in results.items():
        median = statistics.median(o["seconds"] for o in outs)
        seconds[setting] = median
        print(f"| {setting} | {median:.2f} | {statistics.median(overlaps(o['events']) for o in outs):g} | "
              f"{any(interleaved(o['events']) for o in outs)} |")
    print(f"\nratio ({jobs} threads / 1): {seconds[jobs] / seconds[1]:.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per row and setting (default 3)")
    parser.add_argument("--threads", type=int, default=None,
                        help="EINC_COMPILE_THREADS of the side-by-side runs (default: einc's default here)")
    parser.add_argument("--filter", default=None, help="regex on the row id")
    parser.add_argument("--child", nargs=3, metavar=("EQUATION", "SHAPES", "DTYPE"), help=argparse.SUPPRESS)
    parser.add_argument("--tma", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="the rows' first launches as learn mode's background jobs, on 1 and on N threads")
    parser.add_argument("--time-ms", type=float, default=0.0,
                        help="with --jobs: how long the stand-in's timed run of a config takes (default 0)")
    parser.add_argument("--jobs-child", nargs=3, metavar=("ROWS", "JOBS", "TIME_MS"), help=argparse.SUPPRESS)
    parser.add_argument("--caller", action="store_true",
                        help="the caller's loop of a small torch op while the rows' first launches compile")
    parser.add_argument("--caller-child", nargs=2, metavar=("ROWS", "THREADS"), help=argparse.SUPPRESS)
    parser.add_argument("--spills", nargs="*", metavar="WORKLOAD", default=None,
                        help="which configs of these workloads' first launches the autotuner skips for spilling "
                             f"(default: {', '.join(SPILL_ROWS)})")
    args = parser.parse_args(argv)
    if args.caller_child:
        print(json.dumps(caller_child(args.caller_child[0].split(","), int(args.caller_child[1]))))
        return 0
    if args.child:
        equation, shapes, dtype = args.child
        print(json.dumps(child(equation, json.loads(shapes), dtype, args.tma, args.spills is not None)))
        return 0
    if args.jobs_child:
        rows, jobs, time_ms = args.jobs_child
        print(json.dumps(jobs_child(rows.split(","), int(jobs), float(time_ms))))
        return 0
    from einc import config
    threads = args.threads or config.compile_threads()
    if args.spills is not None:
        spills_table(args.spills or SPILL_ROWS, threads)
        return 0
    rows = [r for r in ROWS if args.filter is None or re.search(args.filter, r[0])]
    if args.caller:     # (the TMA row's module is the next row's: one launcher, one layout)
        caller_table([r[0] for r in rows if not r[4]], threads, args.rounds)
        return 0
    if args.jobs:       # (the TMA row's module is the next row's: one launcher, one layout)
        jobs_table([r[0] for r in rows if not r[4]], args.jobs, args.rounds, args.time_ms)
        return 0
    print(f"first launches on a stand-in H100, Triton's real compiler; {os.cpu_count()} CPUs; "
          f"side by side: {threads} threads; {args.rounds} rounds\n")
    print("| row | configs timed | one thread, s | side by side, s | ratio |")
    print("|---|---:|---:|---:|---:|")
    ratios, totals = [], [0.0, 0.0]
    for row in rows:
        times = {1: [], threads: []}
        timed = None
        for r in range(args.rounds):
            for setting in ((1, threads) if r % 2 == 0 else (threads, 1)):
                out = first_launch(row, setting)
                times[setting].append(out["seconds"])
                timed = out["events"].count(["time"])
        one, side = statistics.median(times[1]), statistics.median(times[threads])
        ratios.append(side / one)
        totals[0] += one
        totals[1] += side
        print(f"| `{row[0]}` | {timed} | {one:.2f} | {side:.2f} | {side / one:.2f} |", flush=True)
    if ratios:
        geomean = statistics.geometric_mean(ratios)
        print(f"| all ({len(rows)}) | | {totals[0]:.2f} | {totals[1]:.2f} | {totals[1] / totals[0]:.2f} "
              f"(geomean {geomean:.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
