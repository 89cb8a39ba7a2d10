"""The ``einc`` command line (also ``python -m einc``): dump, explain, bench, tune, cache.

``einc dump`` runs only the pure stages (parse, graph, plan, lower, codegen), so it
works where neither torch nor triton is installed; ``explain`` and ``bench`` import
torch when they run.  Every import beyond the standard library is therefore made
inside the command that needs it.  Exit status: 0 on success, 2 on bad usage or a bad
equation (one error line, no traceback unless ``EINC_DEBUG`` is set), 1 when
``einc bench`` finds a wrong result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path, PurePath

from .. import config
from ..errors import ArgumentError, EincError, OperandCountError
from .arguments import (
    folder_name,
    non_negative_float,
    output_folder,
    parse_dtype,
    parse_shapes,
    parse_size,
    positive_float,
    positive_int,
)
from .helptext import CACHE_EXAMPLES, DUMP_EXAMPLES, EXPLAIN_EXAMPLES, FMT, bench_examples, fill
from .tune import add_parser as _add_tune

# ----------------------------------------------------------------------- shared by the commands

def _named(args):
    """A named equation (or ``--size``): the resolved equation and its shapes in ``args``,
    and the description of the names (None for an equation in torch's notation)."""
    from ..planner import notation

    sizes = dict(args.size or ())
    if not sizes and not notation.is_named(args.equation):
        return None
    args.equation, args.shapes, text = notation.for_cli(args.equation, args.shapes, sizes)
    return text


def _check_count(eq, shapes) -> None:
    if len(shapes) != eq.num_operands:
        raise OperandCountError(f"the equation names {eq.num_operands} operands but --shapes gives "
                                f"{len(shapes)}\n  {eq.text}")


# ----------------------------------------------------------------------- dump

def cmd_dump(args) -> int:
    if args.suite is not None:
        if args.equation:
            args.parser.error("give either an EQUATION or --suite, not both")
        given = [name for name, value in (("--shapes", args.shapes), ("--dtype", args.dtype), ("--size", args.size))
                 if value is not None]
        if given:       # (each of the suite's cases has its own)
            args.parser.error(f"{' and '.join(given)} {'go' if len(given) > 1 else 'goes'} with an EQUATION; "
                              "--suite dumps each case at its own shapes and dtypes")
        return _dump_suite(args)
    args.dtype = args.dtype or "float32"
    if not args.equation:
        args.parser.error("give an EQUATION (with --shapes) or --suite")
    if args.shapes is None:
        args.parser.error("--shapes is required with an EQUATION")
    from ..codegen.lower import supported
    from ..planner import plan_for
    from ..planner.equation import parse
    from . import dump

    named = _named(args)
    if named is not None:
        print(named)
    eq = parse(args.equation)
    _check_count(eq, args.shapes)
    if supported([args.dtype]):
        files = _one_off(dump.plan_files(args.equation, args.shapes, args.dtype), args)
        note = ""
    else:
        plan = plan_for(eq, args.shapes)
        files = {"plan.txt": str(plan) + "\n"}
        note = (f"no generated kernels for {args.dtype}: the torch executor runs this plan "
                "(kernels exist for float16, bfloat16, float32 and float64)")
    if args.out is not None:
        out = output_folder(args.out, "-o")
        for old in [*out.glob("step*_einc_*.py"), *out.glob("plan.txt")]:    # an earlier dump's files
            old.unlink()
        for name, text in files.items():
            (out / name).write_text(text)
        print(f"wrote plan.txt and {len(files) - 1} kernel module(s) to {out}/")
    else:
        for name, text in files.items():
            if name != "plan.txt":
                print(f"\n# {'=' * 24} {name} {'=' * 24}\n")
            print(text, end="")
    if note:
        print(note, file=sys.stderr)
    return 0


def _one_off(files: dict, args) -> dict:
    """The modules of a one-off dump, their first line naming the command that wrote them
    (the code generator's says ``einc dump --suite``, true of the golden kernels only)."""
    import shlex

    from ..codegen.common import SUITE_ORIGIN

    shapes = ",".join("x".join(map(str, s)) if s else "()" for s in args.shapes)
    origin = f"(regenerate: einc dump {shlex.quote(args.equation)} --shapes {shlex.quote(shapes)} --dtype {args.dtype})"
    return {name: text.replace(SUITE_ORIGIN, origin, 1) if name.endswith(".py") else text
            for name, text in files.items()}


def _dump_suite(args) -> int:
    from . import dump
    from .benchmark.suite import find_suite, load

    path = find_suite(args.suite or None)
    for w in load(path)["workloads"]:
        v = w["variants"].get("gpu")
        if not isinstance(v, dict) or "shapes" not in v or "dtype" not in v:
            raise ArgumentError(f"{path}: workload {w['id']!r} has no gpu variant with shapes and dtype")
    out = None if args.out is None else output_folder(args.out, "-o")
    tree = dump.golden(path)
    if out is None:
        for folder, files in sorted(tree.items()):
            for name, text in files.items():
                print(f"# {'=' * 24} {folder}/{name} {'=' * 24}\n")
                print(text)
        return 0
    if out.is_dir():       # dump.write replaces every folder under OUT: only generated ones may be there
        strays = [c.name for c in out.iterdir()
                  if c.is_dir() and (c.is_symlink() or not (c / "plan.txt").is_file())]
        if strays:
            raise ArgumentError(f"{out}/ holds folders (or links) that einc did not generate "
                                f"({', '.join(sorted(strays))}); "
                                "refusing to replace them: choose an empty or a generated kernels folder")
    dump.write(tree, out)
    print(f"wrote {sum(len(f) for f in tree.values())} files in {len(tree)} folders under {out}/ (from {path})")
    return 0


# ----------------------------------------------------------------------- explain

def cmd_explain(args) -> int:
    import opt_einsum
    import torch

    from .. import api

    named = _named(args)
    optimize = _optimize(args.optimize, opt_einsum)
    kw = dict(dtype=getattr(torch, args.dtype), device=args.device)
    plan = api.explain(args.equation, *args.shapes, optimize=optimize, **kw)
    plain = dict(kw, select="blas")     # the other orders as plain plans: no kernel fuses their steps
    left = api.explain(args.equation, *args.shapes, optimize=False, **plain)
    torch_default = _torch_default(args, api, opt_einsum, torch, plain)
    info = _explain_dict(args, plan, left, torch_default)
    if named is not None:
        info["named"] = named
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    if named is not None:
        print(named)
    print(plan)
    print()
    print("Cost of other contraction orders (flops as opt_einsum counts a step's: a multiply-add is 2):")
    rows = [("order", "flops", "largest intermediate", "einc's speedup")]
    # (a sum over a size 0: einc runs no step of either of its orders, as their backends "none" say)
    none = ("none", "-", "-") if plan.empty_sum is not None else None
    rows.append((f"einc (optimize={plan.optimizer!r})",
                 *(none or (f"{plan.flops:.4g}", f"{plan.largest_intermediate:.4g}", "1"))))
    td = info["torch_default"]
    if "flops" in td:
        rows.append((f"torch.einsum default ({td['order']})", f"{td['flops']:.4g}",
                     f"{td['largest_intermediate']:.4g}", _x(td["speedup"])))
    rows.append(("left to right", *(none or (f"{left.flops:.4g}", f"{left.largest_intermediate:.4g}",
                                             _x(info["left_to_right"]["speedup"])))))
    rows.append(("naive (one loop nest over all indices, einc's count)", f"{plan.naive_flops:.4g}", "-",
                 _x(info["naive"]["speedup"])))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    for r in rows:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    if "error" in td:
        print(f"  torch.einsum default: not computed ({td['error']})")
    if none:
        print(f"  einc runs no step of any order: the result is zeros, a sum over {plan.empty_sum}, of size 0")
    return 0


_LEFT_TO_RIGHT = ("left-to-right", "false", "none")      # the Python API's optimize=False (or None)


def _optimize(text: str, opt_einsum):
    """``--optimize``: an opt_einsum strategy, ``auto`` (also ``true``), ``cotengra``, or
    left to right (``left-to-right``, ``false``, ``none``), in any case; the Python
    API's other values (a PathOptimizer, an explicit path) have no command line spelling."""
    from ..planner.options import AUTO, COTENGRA

    name = text.strip().lower()
    if name in _LEFT_TO_RIGHT:
        return False
    if name == "true":
        return AUTO
    names = sorted(set(opt_einsum.paths._PATH_OPTIONS) | {AUTO, COTENGRA})
    if name not in names:
        raise ArgumentError(f"unknown optimize={text!r}; valid: {', '.join(names)}, or left-to-right "
                            "(also false or none; true is auto)")
    return name


def _x(speedup) -> str:
    return "-" if speedup is None else f"{speedup:.4g}"


def _torch_default(args, api, opt_einsum, torch, kw) -> dict:
    """The plan of the order torch.einsum picks: opt_einsum's configured strategy (``auto``
    unless changed) when opt_einsum is enabled, otherwise left to right."""
    oe = torch.backends.opt_einsum
    strategy = oe.strategy if oe.enabled and oe.is_available() else None
    if strategy is None:
        return {"strategy": None, "order": "left to right: torch.backends.opt_einsum is off", "plan": None}
    try:
        path, _ = opt_einsum.contract_path(args.equation, *args.shapes, shapes=True, optimize=strategy)
        path = [tuple(int(i) for i in c) for c in path]
        plan = api.explain(args.equation, *args.shapes, optimize=path, **kw)
    except Exception as e:      # noqa: BLE001 -- opt_einsum rejects equations einc accepts (non-ASCII, >52 indices)
        return {"strategy": strategy, "error": f"opt_einsum.contract_path failed: {type(e).__name__}: {e}"}
    return {"strategy": strategy, "order": f"opt_einsum {strategy!r} path {path}", "plan": plan}


def _speedup(other: int, flops: int):
    return other / flops if flops else None


def _explain_dict(args, plan, left, torch_default) -> dict:
    flops = 0 if plan.empty_sum is not None else plan.flops     # (what runs: for a sum over a size 0, nothing)
    td = {k: v for k, v in torch_default.items() if k != "plan"}
    tplan = torch_default.get("plan")
    if tplan is not None:
        td.update(path=[list(c) for c in tplan.path], flops=tplan.flops,
                  largest_intermediate=tplan.largest_intermediate, speedup=_speedup(tplan.flops, flops))
    info = plan.to_dict()
    info.update(shapes=[list(s) for s in args.shapes], dtype=args.dtype, device=args.device)
    info["naive"]["speedup"] = _speedup(plan.naive_flops, flops)
    info["left_to_right"] = {"path": [list(c) for c in left.path], "flops": left.flops,
                             "largest_intermediate": left.largest_intermediate,
                             "speedup": _speedup(left.flops, flops)}
    if left.empty_sum is not None:     # (zeros: no step runs, as the steps' backends "none" say)
        info["left_to_right"].update(flops=0, speedup=None, backend="none")
    info["torch_default"] = td
    return info


# ----------------------------------------------------------------------- bench

def cmd_bench(args) -> int:
    import torch

    from .benchmark.suite import find_suite

    if args.no_models and not args.train and not args.dispatch:     # (--dispatch says so below)
        raise ArgumentError("--no-models goes with --train (the forward suite times no models)")
    out = None if args.out is None else output_folder(args.out, "--out")     # before the run, not after it
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from .benchmark.runner import bench_suite, default_out

    if args.dispatch:
        from .benchmark import dispatch
        others = [flag for flag, given in (("--device cuda", args.device != "cpu"), ("--filter", bool(args.filter)),
                                           ("--budget", args.budget is not None), ("--train", args.train),
                                           ("--no-models", args.no_models), ("--wait", args.wait is not None),
                                           ("--no-chart", args.no_chart)) if given]
        if others:
            raise ArgumentError(f"--dispatch times 4x4 matrix chains on the CPU and takes --rounds, --quick, "
                                f"--threads and --out (--suite: where results go by default), not {', '.join(others)}")
        if out is None:
            try:
                out = default_out(find_suite(args.suite))
            except ArgumentError:           # the dispatch benchmark needs no suite
                out = Path("einc-bench")
        return dispatch.run(out, args.rounds, args.quick)
    return bench_suite(find_suite(args.suite), device=args.device, text=args.filter, out=out,
                       rounds=args.rounds, budget=args.budget, quick=args.quick, chart=not args.no_chart,
                       train=args.train, models=not args.no_models, wait=60.0 if args.wait is None else args.wait,
                       threads_set=args.threads is not None)


# ----------------------------------------------------------------------- cache

def cmd_cache(args) -> int:
    from ..runtime.triton_executor import diskcache  # standard library only, like config

    directory = diskcache.kernel_dir(create=False)
    if args.action == "path":
        print(directory)
        return 0
    modules = diskcache.modules(directory)
    if args.action == "list":
        used = diskcache.usage(directory)
        if not modules:
            print(f"no kernel modules in {directory} (bound {_mb(used.bound)}, EINC_CACHE_MAX_MB)")
            return 0
        width = max(len(m.stem) for m in modules)
        for m in modules:
            try:
                size = _kib(m.stat().st_size)
            except OSError:             # evicted by another process meanwhile
                continue
            print(f"{m.stem.ljust(width)}  {size:>10}  {_equation_of(m)}")
        print(f"{used.modules} module(s), {_kib(used.bytes)} in {directory}: {100 * used.bytes / used.bound:.1f}% "
              f"of the {_mb(used.bound)} bound (EINC_CACHE_MAX_MB; the least recently used modules are deleted "
              "beyond it)")
        return 0
    count, removed = diskcache.clear(directory)
    print(f"removed {count} kernel module(s) ({_kib(removed)}) from {directory}")
    print("The in-memory plan cache is per process: every new process starts with it empty, and "
          "einc.cache_clear() empties it in a running one (modules a running process has loaded stay loaded). "
          "Triton's own cache of compiled binaries (TRITON_CACHE_DIR, default ~/.triton/cache) is not touched.")
    return 0


def _mb(n: int) -> str:
    return f"{n / 10 ** 6:g} MB"


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


def _equation_of(module: Path) -> str:
    """What a module computes, from its header (the code generator's format)."""
    from ..codegen.common import summary
    try:
        with open(module, encoding="utf-8") as f:
            return summary("".join(next(f, "") for _ in range(4)))
    except (OSError, UnicodeDecodeError):
        return ""


# ----------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    parser = argparse.ArgumentParser(
        prog="einc", formatter_class=FMT,
        description=fill("einc, an einsum compiler for PyTorch: dump generated kernels, explain plans, "
                         "benchmark, tune the backends ahead of time, manage the kernel cache."),
        epilog="run 'einc COMMAND --help' for a command's options and examples; set EINC_DEBUG=1 for "
               "tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"einc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_dump(sub)
    _add_explain(sub)
    _add_bench(sub)
    _add_tune(sub)
    _add_cache(sub)
    return parser


def _add_dump(sub) -> None:
    p = sub.add_parser("dump", help="print or write the plan and the Triton source of every kernel",
                       description=fill("Print (or write to -o DIR) the plan and the generated Triton module "
                                        "of every step of an equation, or regenerate the golden kernels of a "
                                        "whole suite."),
                       epilog=DUMP_EXAMPLES, formatter_class=FMT)
    p.add_argument("equation", nargs="?", metavar="EQUATION", help="an einsum equation, e.g. 'ij,jk->ik'")
    p.add_argument("--shapes", type=parse_shapes, metavar="SHAPES", help="operand shapes, e.g. 8x64x32,8x32x16")
    p.add_argument("--dtype", type=parse_dtype, help="operand dtype (default float32)")
    p.add_argument("--suite", nargs="?", const="", default=None, metavar="PATH",
                   help="regenerate the golden kernels of a suite (default bench/suite.json, see bench --help)")
    p.add_argument("-o", "--out", type=folder_name, metavar="DIR",
                   help="write files to DIR (created if missing) instead of printing them")
    p.add_argument("--size", type=parse_size, action="append", metavar="NAME=N",
                   help="an axis size of a named equation, e.g. --size h=8 (repeat for more)")
    p.set_defaults(func=cmd_dump, parser=p)


def _add_explain(sub) -> None:
    p = sub.add_parser("explain", help="the plan's cost table, against torch.einsum's default order",
                       description=fill("Print the plan einc runs (per step: kind, operands, contraction, "
                                        "summed indices, flops, size, backend) and its cost against other "
                                        "orders."),
                       epilog=EXPLAIN_EXAMPLES, formatter_class=FMT)
    p.add_argument("equation", metavar="EQUATION", help="an einsum equation, e.g. 'ij,jk,kl->il'")
    p.add_argument("--shapes", type=parse_shapes, metavar="SHAPES", required=True,
                   help="operand shapes, e.g. 64x8,8x64,64x8")
    p.add_argument("--optimize", default="auto",
                   help="an opt_einsum strategy (auto, optimal, dp, greedy, branch-2, random-greedy, ...), "
                        "cotengra, or left-to-right (also false or none, as optimize=False; default auto)")
    p.add_argument("--dtype", type=parse_dtype, default="float32", help="operand dtype (default float32)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="operand device (default cpu)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of tables")
    p.add_argument("--size", type=parse_size, action="append", metavar="NAME=N",
                   help="an axis size of a named equation, e.g. --size h=8 (repeat for more)")
    p.set_defaults(func=cmd_explain, parser=p)


def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="time a workload suite against torch.einsum and opt_einsum",
                       description=fill("Time the workloads of a suite with torch.einsum, opt_einsum.contract "
                                        "and einc.einsum on the same operands; write Markdown, CSV and a PNG "
                                        "chart."),
                       epilog=bench_examples(), formatter_class=FMT)
    p.add_argument("--suite", metavar="PATH", help="the suite file (default: bench/suite.json, see below)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: the suite's cpu variants (float32); cuda: its gpu variants (default cpu)")
    p.add_argument("--filter", default="", metavar="TEXT", help="only workloads whose id or category contains TEXT")
    p.add_argument("--out", type=folder_name, metavar="DIR",
                   help="output folder, created if missing (default: results/ beside the suite file)")
    p.add_argument("--quick", action="store_true", help="7 rounds and 1 s per workload (a smoke test)")
    p.add_argument("--rounds", type=positive_int, metavar="N",
                   help="rounds per workload, at least 1 (default 31; --quick 7)")
    p.add_argument("--budget", type=positive_float, metavar="S",
                   help="seconds per workload, more than 0 (default 4; --quick 1)")
    p.add_argument("--threads", type=positive_int, metavar="N",
                   help="torch.set_num_threads(N), at least 1 (default: torch's, or 1 on a busy machine, see below)")
    p.add_argument("--wait", type=non_negative_float, metavar="S",
                   help="on a busy machine, seconds to wait for it to quieten; 0: do not wait (default 60)")
    p.add_argument("--no-chart", action="store_true", help="skip the PNG chart")
    p.add_argument("--dispatch", action="store_true",
                   help="run the per-call overhead micro-benchmark instead: 4x4 matrix chains on the CPU "
                        "(writes dispatch.md/.csv; takes --rounds, --quick, --threads and --out only, and "
                        "--suite for where results go by default)")
    p.add_argument("--train", action="store_true",
                   help="time forward + backward (torch.autograd.grad) instead of forward; writes "
                        "suite_<device>_train.* and models_train.* (see below)")
    p.add_argument("--no-models", action="store_true",
                   help="with --train: skip the models' training table (bench/models.py; it compiles with "
                        "inductor, minutes)")
    p.set_defaults(func=cmd_bench, parser=p)


def _add_cache(sub) -> None:
    p = sub.add_parser("cache", help="the kernel cache folder: path, list, clear",
                       description=fill("Show, list or clear the folder where einc writes generated kernel "
                                        "modules."),
                       epilog=CACHE_EXAMPLES, formatter_class=FMT)
    p.add_argument("action", choices=("path", "list", "clear"),
                   help="path: print the folder; list: its modules and their total; clear: delete them")
    p.set_defaults(func=cmd_cache, parser=p)


# ----------------------------------------------------------------------- main

def _debug() -> bool:
    """EINC_DEBUG through config (a bad value is reported by ``main`` before any command)."""
    try:
        return config.debug()
    except EincError:
        return False


def _equations_first(argv):
    """Mask the leading ``-`` of an equation such as ``"->"`` or ``"->i"`` (argparse would
    take it for an option); ``main`` unmasks it.  Only an argument that starts with ``->``
    is one (an equation's ``-`` is its arrow's): ``--out=a->b`` and ``-o->b`` are options."""
    return [a.replace("-", "\0", 1) if a.startswith("->") else a for a in argv]


def main(argv=None) -> int:
    """Run the command line; returns the exit status (argparse exits 2 itself on bad usage)."""
    parser = build_parser()
    args = parser.parse_args(_equations_first(sys.argv[1:] if argv is None else list(argv)))
    for name, value in vars(args).items():      # unmasked wherever it went: an equation, or a value (-o "->x")
        if isinstance(value, (str, PurePath)) and str(value).startswith("\0"):
            setattr(args, name, type(value)("-" + str(value)[1:]))
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    name = f"einc {args.command}"
    try:
        config.debug()                      # a bad EINC_DEBUG is an error like any other setting
        return args.func(args) or 0
    except EincError as e:
        _traceback_if_debug()
        print(f"{name}: error: {str(e).removeprefix('einsum(): ')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\n{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:                 # e.g. `einc dump ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:                    # a write that failed after the output folder was checked (disk full)
        _traceback_if_debug()
        print(f"{name}: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:                  # noqa: BLE001 -- one line, the traceback on request
        _traceback_if_debug()
        if isinstance(e, ModuleNotFoundError) and e.name in ("torch", "opt_einsum", "numpy"):
            print(f"{name}: error: this command needs {e.name}, which is not installed", file=sys.stderr)
            return 1
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"{name}: internal error: {type(e).__name__}: {first}"
              + ("" if _debug() else " (set EINC_DEBUG=1 for the traceback)"), file=sys.stderr)
        return 1


def _traceback_if_debug() -> None:
    if _debug():
        traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())
