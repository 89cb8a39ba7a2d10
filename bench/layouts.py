"""The copy-cost model's layouts with a setting changed, against its defaults, on the CPU.

    python bench/layouts.py --set NAME=VALUE [--set ...] [--filter REGEX] [--variant cpu|gpu]
                            [--threads 2] [--rounds 4] [--budget 20] [--all] [--train] [--clock cpu]
                            [--equation EQ SHAPES]

``NAME`` is one of the model's constants in ``einc/runtime/torch_executor/ttgt.py`` (``FAR_MOST``,
``COPY_KEEP``, ...; ``inf`` allowed).  Per workload of the suite (or per ``--equation``,
a call of one's own on float32 operands of the shapes given, ``AxBxC,DxE``), ids matching ``REGEX``;
``--variant gpu``: the GPU variants' shapes and dtypes, still on the CPU), einc's plan is
built twice, once with the settings and once with the defaults, and every layout the
model picks is logged (each step's, and where it differs the one for training:
``training_layout.for_training``).  A workload whose layouts do not change is
listed as such and not timed (``--all`` times it anyway).  One that changes gets its steps
printed (operands -> result: the batch | M | N | K groups, and which of the left, right
and result tensors are copied) and both entries are timed on the same operands in
interleaved rounds (``einc.tools.benchmark.timing``; ``--clock cpu``: in this thread's CPU time, as
bench/pairwise.py times, for a shared machine; ``--train``: a training step, the result
and its gradients as autograd takes them through the torch executor's ops): medians,
and the median of the paired per-round ratios setting/default with its 95 % interval.  Before timing, both results are
checked against torch.einsum on float64 copies where that result is at most 512 MiB, else
against each other.  This is how a change of the model's constants is weighed: what moves,
and by how much (bench/measured/pairwise.md cites its runs).  Standard library, torch
and einc.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

import einc
from bench.pairwise import cpu_interleaved
from einc.planner.equation import letter, parse
from einc.planner.options import DEFAULT
from einc.runtime import engine
from einc.runtime.torch_executor import training_layout, ttgt
from einc.tools.benchmark.runner import operands
from einc.tools.benchmark.suite import find_suite, load
from einc.tools.benchmark.timing import interleaved, ratio_interval

_ORACLE_MOST = 512 << 20     # bytes of a float64 result checked against torch.einsum


def setting(text):
    """``NAME=VALUE`` -> (name, value), for a numeric constant of ``einc.runtime.torch_executor.ttgt``."""
    name, _, value = text.partition("=")
    now = getattr(ttgt, name, None)
    if not name.isupper() or isinstance(now, bool) or not isinstance(now, (int, float)):
        known = ", ".join(n for n, v in vars(ttgt).items() if n.isupper() and isinstance(v, (int, float)))
        raise argparse.ArgumentTypeError(f"{name!r} is not a constant of einc/runtime/torch_executor/ttgt.py ({known})")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the value must be a number or inf") from None
    return name, int(number) if isinstance(now, int) and number.is_integer() else number


def _term(t):
    return "".join(letter(i) for i in t)


def _shown(ta, tb, out, lay, note=""):
    return (f"{_term(ta)},{_term(tb)}->{_term(out)}{note}: " + " | ".join(_term(g) or "-" for g in lay.groups)
            + f" copies {lay.copies or '-'}")


def built(eq, ops, settings, options=DEFAULT):
    """(the entry, the layouts the model picked while building it: the torch executor
    chooses each step's layout then, and on a first call that takes a gradient, which this
    makes, another one for training if :func:`~einc.runtime.torch_executor.training_layout.for_training`
    says so), with ``settings`` in force (and the call's ``options``)."""
    saved = {name: getattr(ttgt, name) for name, _ in settings}
    picked, real_training = [], training_layout.for_training

    def for_training(lay, ta, tb, out, *rest, **kw):
        found = real_training(lay, ta, tb, out, *rest, **kw)
        picked.append(_shown(ta, tb, out, lay))
        if found is not lay:
            picked.append(_shown(ta, tb, out, found, " (training)"))
        return found
    try:
        for name, value in settings:
            setattr(ttgt, name, value)
        training_layout.for_training = for_training
        ttgt.cache_clear()
        einc.cache_clear()
        entry = engine.entry(parse(eq), ops, options)
        # a step weighs its training layout on the first call that takes a gradient: one, here
        leaves = [o.detach().requires_grad_() if o.is_floating_point() or o.is_complex() else o for o in ops]
        if any(o.requires_grad for o in leaves):
            entry.run(leaves)
    finally:
        for name, value in saved.items():
            setattr(ttgt, name, value)
        training_layout.for_training = real_training
        ttgt.cache_clear()
        einc.cache_clear()
    return entry, picked


def check(outs, eq, ops):
    """'ok' (both match torch.einsum on float64 copies), 'agree' (the result too large for
    that: both match each other) or 'MISMATCH'."""
    a, b = outs
    if a.numel() * 8 <= _ORACLE_MOST:
        ref = torch.einsum(eq, *[_wide(o) for o in ops])
        tol = 1e-2 if a.dtype in (torch.float16, torch.bfloat16) else 1e-4
        good = all(torch.allclose(_wide(o), ref, rtol=tol, atol=tol * float(ref.abs().max())) for o in outs)
        return "ok" if good else "MISMATCH"
    tol = 1e-2 if a.dtype in (torch.float16, torch.bfloat16) else 1e-4
    return "agree" if torch.allclose(a, b, rtol=tol, atol=tol * float(a.abs().max())) else "MISMATCH"


def _wide(t):
    """``t`` in float64, or complex128 where it is complex (``double()`` drops the imaginary part)."""
    return t.to(torch.complex128) if t.is_complex() else t.double()


def _training_step(ops):
    """``fn(entry)``: a training step through ``entry``, as einc runs one on the CPU (the
    torch executor's ops recorded by autograd): its result and the floating and complex
    operands' gradients for a fixed upstream gradient."""
    leaves = [o.requires_grad_() for o in ops if o.is_floating_point() or o.is_complex()]
    upstream = []

    def step(entry):
        out = entry.run(ops)
        if not upstream:
            upstream.append(torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype))
        return torch.autograd.grad(out, leaves, upstream[0])
    return step


def _workloads(args):
    """``(id, equation, a function making its operands)`` of each call to weigh: those of
    ``--equation`` where given, else the suite's workloads of ``args.variant``."""
    if args.equation:
        def made(shapes):
            gen = torch.Generator().manual_seed(0)
            return lambda: [torch.randn(tuple(map(int, s.split("x"))), generator=gen) for s in shapes.split(",")]
        return [(f"{eq} {shapes}", eq, made(shapes)) for eq, shapes in args.equation]
    return [(w["id"], w["equation"], lambda w=w: operands(w, "cpu", args.variant))
            for w in load(find_suite())["workloads"] if args.variant in w["variants"]]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="The copy-cost model's layouts with a setting changed, against "
                                            "its defaults (einc/runtime/torch_executor/ttgt.py), on the CPU.")
    p.add_argument("--set", dest="settings", type=setting, action="append", required=True,
                   metavar="NAME=VALUE",
                   help="a constant of einc/runtime/torch_executor/ttgt.py and its value (repeatable)")
    p.add_argument("--filter", default="", help="a regular expression over workload ids")
    p.add_argument("--variant", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--budget", type=float, default=20.0, help="seconds of timing per workload")
    p.add_argument("--all", action="store_true", help="time workloads whose layouts do not change too")
    p.add_argument("--train", action="store_true", help="time a training step (forward and the gradients)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="cpu: time in this thread's CPU time (bench/pairwise.py's cpu_interleaved; with --threads 1)")
    p.add_argument("--equation", nargs=2, action="append", metavar=("EQ", "SHAPES"), default=[],
                   help="a call of one's own instead of the suite's, float32, e.g. 'bij,bjk->bik' 64x128x1,64x32x96 "
                        "(size-1 dimensions broadcast; repeatable)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    wanted = re.compile(args.filter)
    named = ", ".join(f"{n}={v}" for n, v in args.settings)
    print(f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__} "
          f"with {args.threads} thread(s), the suite's {args.variant} variants; setting: {named}\n")
    rows, same = [], []
    for wid, eq, make in _workloads(args):
        if not wanted.search(wid):
            continue
        ops = make()
        new, new_layouts = built(eq, ops, args.settings)
        old, old_layouts = built(eq, ops, [])
        if new_layouts == old_layouts and not args.all:
            same.append(wid)
            continue
        only_old = [line for line in old_layouts if line not in new_layouts]
        only_new = [line for line in new_layouts if line not in old_layouts]
        print(f"**{wid}** `{eq}`: {len(only_old)} layout(s) only with the defaults, {len(only_new)} only "
              f"with the setting")
        for line in only_old:
            print(f"- default: `{line}`")
        for line in only_new:
            print(f"- setting: `{line}`")
        status = check([new.run(ops), old.run(ops)], eq, ops)
        step = _training_step(ops) if args.train else (lambda entry: entry.run(ops))
        fns = {"default": lambda: step(old), "setting": lambda: step(new)}
        if args.clock == "cpu":
            for fn in fns.values():
                fn()
            t, n = cpu_interleaved(fns, args.rounds), args.rounds
        else:
            t, n = interleaved(fns, rounds=args.rounds, budget=args.budget, min_rounds=min(args.rounds, 3))
        r = ratio_interval(t["setting"], t["default"])
        rows.append((wid, t["default"].median, t["setting"].median, r, n, status))
        print(flush=True)
        ops = None  # not `del`: ruff reads a later del as undefining the lambdas' names
    if rows:
        print("| id | default ms | setting ms | setting/default | rounds | check |")
        print("|---|---:|---:|---:|---:|---|")
        for wid, a, b, r, n, status in rows:
            print(f"| {wid} | {a * 1e3:.4g} | {b * 1e3:.4g} | {r[0]:.2f} [{r[1]:.2f}-{r[2]:.2f}] | {n} | {status} |")
        print(f"\ngeomean setting/default: {math.exp(sum(math.log(r[3][0]) for r in rows) / len(rows)):.3f}")
    print(f"\nlayouts unchanged ({len(same)}): {', '.join(same) if same else 'none'}")
    return 1 if any(r[5] == "MISMATCH" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
