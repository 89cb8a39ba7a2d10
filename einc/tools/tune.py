"""``einc tune``: time every candidate of every step of a user's calls ahead of time, and
keep the winners where learn mode reads them.

Learn mode (the CUDA default) starts a key on the modelled choice and learns from later
calls; a decision already in ``decisions.json`` comes first.  This command makes those
decisions before the program runs: for each call (an equation, its operands' shapes,
optionally strides, and a dtype) it makes random operands on the device, runs the call
once in measure mode with every step timed afresh
(:func:`einc.runtime.select.tuning`: the same candidates, rounds and timer as
``EINC_SELECT=measure``), and prints what it decided.  Calls come from the command line
(``EQUATION --shapes``) or a file (:func:`read_calls`).

Only the standard library is imported at the top (the command line's rule); torch when
the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ArgumentError, EincError
from .arguments import parse_dtype, parse_shapes, parse_size, positive_int
from .helptext import FMT, TUNE_EXAMPLES, fill


@dataclass
class Call:
    """One call to tune: ``shapes`` per operand, ``strides`` per operand (None: contiguous),
    and where it came from (``source``: ``FILE:LINE`` or ``command line``)."""

    equation: str
    shapes: list
    dtype: str
    strides: list | None = None
    source: str = "command line"
    steps: list = field(default_factory=list)       # filled by tune()
    note: str = ""


# ----------------------------------------------------------------------- reading calls

def read_calls(path: str, dtype: str) -> list[Call]:
    """The calls of file ``path`` (``-``: standard input), ``dtype`` where a call names none.

    A JSON array of call objects, or one call a line: a JSON object
    ``{"equation": ..., "shapes": [[...], ...], "dtype": ..., "strides": [[...], ...]}``
    (``dtype`` and ``strides`` optional), or ``EQUATION SHAPES [DTYPE]`` with SHAPES as
    ``--shapes`` takes them.  Blank lines and lines starting with ``#`` are skipped."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ArgumentError(f"--calls {path}: cannot read the file ({getattr(e, 'strerror', None) or e})") from None
    name = "<stdin>" if path == "-" else path
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as e:
            raise ArgumentError(f"{name}: not valid JSON ({e})") from None
        if not items:
            raise ArgumentError(f"{name}: no calls in the file (an empty JSON array)")
        return [_from_json(item, f"{name}: call {k + 1}", dtype) for k, item in enumerate(items)]
    calls = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{name}:{number}"
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise ArgumentError(f"{where}: not a valid JSON object ({e})") from None
            calls.append(_from_json(item, where, dtype))
        else:
            calls.append(_from_text(line, where, dtype))
    if not calls:
        raise ArgumentError(f"{name}: no calls in the file (one a line: EQUATION SHAPES [DTYPE], or a JSON object)")
    return calls


def _from_text(line: str, where: str, dtype: str) -> Call:
    words = line.split()
    if len(words) >= 3:
        try:
            dtype, words = parse_dtype(words[-1]), words[:-1]
        except argparse.ArgumentTypeError:
            pass
    if len(words) < 2:
        raise ArgumentError(f"{where}: expected EQUATION SHAPES [DTYPE], e.g. ij,jk->ik 64x32,32x16 float16; "
                            f"got {line!r}")
    try:
        shapes = parse_shapes(words[-1])
    except argparse.ArgumentTypeError as e:
        raise ArgumentError(f"{where}: {e}") from None
    return _resolved(Call(" ".join(words[:-1]), shapes, dtype, None, where))


def _from_json(item, where: str, dtype: str) -> Call:
    if not isinstance(item, dict) or not isinstance(item.get("equation"), str):
        raise ArgumentError(f'{where}: a call is an object with "equation" and "shapes" '
                            '(and optionally "dtype", "strides" and a named equation\'s "sizes")')
    sizes = item.get("sizes") or {}
    if not isinstance(sizes, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in sizes.values()):
        raise ArgumentError(f'{where}: "sizes" is an object of a named equation\'s axis sizes, e.g. {{"h": 8}}')
    shapes, strides = _dims_lists(item.get("shapes"), where, "shapes"), item.get("strides")
    if strides is not None:
        strides = _dims_lists(strides, where, "strides")
        if [len(s) for s in strides] != [len(s) for s in shapes]:
            raise ArgumentError(f'{where}: "strides" needs one stride per dimension of each operand\'s shape')
    if "dtype" in item:
        try:
            dtype = parse_dtype(str(item["dtype"]).removeprefix("torch."))
        except argparse.ArgumentTypeError as e:
            raise ArgumentError(f"{where}: {e}") from None
    return _resolved(Call(item["equation"], shapes, dtype, strides, where), sizes)


def _resolved(call: Call, sizes=None) -> Call:
    """A named equation's call (:mod:`einc.planner.notation`) as the resolved equation's,
    its shapes and strides split as the operands' views are, as ``einc tune EQUATION`` and
    :func:`einc.einsum` resolve it (sizes the shapes do not give from ``"sizes"``)."""
    from ..planner import notation
    if not sizes and not notation.is_named(call.equation):
        return call
    try:
        named = notation.structure(call.equation)
        _, views = notation.resolve(named, call.shapes, dict(sizes or {}))
    except EincError as e:
        raise ArgumentError(f"{call.source}: {call.equation!r}: {str(e).removeprefix('einsum(): ')}") from None
    strides = None if call.strides is None else [tuple(st) if v is None else _view_strides(shape, st, v)
                                                 for shape, st, v in zip(call.shapes, call.strides, views)]
    shapes = [tuple(s) if v is None else tuple(v) for s, v in zip(call.shapes, views)]
    return Call(named.equation, shapes, call.dtype, strides, call.source)


def _view_strides(shape, strides, view) -> tuple:
    """One operand's strides in its view (a composite axis split into its parts), as torch's
    ``view`` gives them (on the meta device: no memory)."""
    import torch
    return torch.empty_strided(tuple(shape), tuple(strides), device="meta").view(tuple(view)).stride()


def _dims_lists(value, where: str, what: str) -> list:
    if not isinstance(value, list) or not all(
            isinstance(s, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in s)
            for s in value):
        raise ArgumentError(f'{where}: "{what}" is a list of lists of whole numbers >= 0, one list per operand')
    return [tuple(s) for s in value]


def _checked(call: Call) -> str:
    """``call``'s equation in canonical letters, parsed and resolved against its shapes
    (errors name its source)."""
    from ..planner.equation import parse
    from ..planner.graph import build
    try:
        eq = parse(call.equation)
        if len(call.shapes) != eq.num_operands:
            raise ArgumentError(f"the equation names {eq.num_operands} operands but the shapes give "
                                f"{len(call.shapes)}")
        build(eq, call.shapes)
    except EincError as e:
        raise ArgumentError(f"{call.source}: {call.equation!r}: {str(e).removeprefix('einsum(): ')}") from None
    return eq.canonical


# ----------------------------------------------------------------------- tuning

def operands(call: Call, device):
    """Random operands of ``call`` on ``device`` (of its strides where given: each a view of
    fresh memory)."""
    import torch

    dtype, device = getattr(torch, call.dtype), torch.device(device)
    g = torch.Generator(device).manual_seed(0)      # (made on the device: no copy of large operands)
    out = []
    for k, shape in enumerate(call.shapes):
        stride = call.strides[k] if call.strides else None
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if stride and all(shape) else None
        size = (extent,) if extent is not None else shape
        if dtype.is_floating_point or dtype.is_complex:
            t = torch.randn(size, generator=g, dtype=dtype, device=device)
        else:
            t = torch.randint(0, 2, size, generator=g, device=device).to(dtype)
        out.append(t.as_strided(shape, stride) if extent is not None else t)
    return out


def tune(calls: list[Call], device, repeats: int) -> OSError | None:
    """Time every step of every call (measure mode, ``repeats`` rounds), keep the winners in
    ``decisions.json``; fills ``calls``' ``steps`` (and ``note``).  Returns the error that
    kept a decision from the file, or None."""
    import einc
    from einc.runtime import select

    with select.tuning(repeats) as held:
        for call in calls:
            start = len(held.asked)
            before = set(held.decided)
            ops = []
            try:
                ops = operands(call, device)
                hits = einc.cache_info().plans.hits
                einc.einsum(call.equation, *ops, select="measure")
                if einc.cache_info().plans.hits > hits:     # an entry made for other strides of the same order
                    einc.cache_clear()
                    einc.einsum(call.equation, *ops, select="measure")
            except EincError:                           # a setting or a call einc refuses: the user's to fix
                raise
            except (RuntimeError, ValueError) as e:     # out of memory, a device error: the other calls go on
                first = str(e).splitlines()[0] if str(e) else ""
                call.note = f"failed: {type(e).__name__}: {first}"
            del ops
            for key in held.asked[start:]:
                call.steps.append(_row(key, held.decided.get(key), key not in before))
            if not call.steps and not call.note:
                call.note = _why_nothing(call, device)
    return held.unwritten


def _row(key: str, choice, timed: bool) -> dict:
    from einc.runtime import select

    part = select.step_of(key)
    row = {"step": part["step"], "layout": part["layout"], "kernels": part["kernels"], "timed": timed}
    if choice is None:
        row.update(winner=None, candidates={}, left_out=[])
    else:
        row.update(winner=choice.backend, candidates=dict(choice.timings), left_out=list(choice.left_out))
    return row


def _why_nothing(call: Call, device) -> str:
    import einc
    from einc import config

    if config.new_shapes() == "torch":
        return "nothing timed: EINC_NEW_SHAPES=torch answers calls this small with torch's einsum"
    note = einc.explain(call.equation, *operands(call, device), select="measure").note
    return f"nothing to choose: {note}" if note else "nothing to choose"


# ----------------------------------------------------------------------- the command

def cmd_tune(args) -> int:
    import torch

    calls = _calls_of(args)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.dry_run:
        return _dry_run(calls, device, args.json)
    _check_device(device)
    from einc.runtime import select
    repeats = args.repeats or select.REPEATS
    unwritten = tune(calls, torch.device(device), repeats)
    path = str(select.decisions_path())
    failed = 1 if _summary(calls)["calls_failed"] or unwritten is not None else 0
    if args.json:
        print(json.dumps({"device": device, "repeats": repeats, "decisions": path,
                          "unwritten": None if unwritten is None else str(unwritten),
                          "calls": [_as_dict(c) for c in calls], "summary": _summary(calls)}, indent=2))
        return failed
    for call in calls:
        _print_call(call, repeats)
    _print_summary(calls, device, path, unwritten)
    return failed


def _calls_of(args) -> list[Call]:
    calls = []
    if args.equation:
        if args.shapes is None:
            args.parser.error("--shapes is required with an EQUATION")
        from ..planner import notation
        equation, shapes = args.equation, args.shapes
        if args.size or notation.is_named(equation):        # (as einc dump resolves one)
            equation, shapes, _ = notation.for_cli(equation, shapes, dict(args.size or ()))
        calls.append(Call(equation, shapes, args.dtype))
    elif args.shapes is not None or args.size:
        args.parser.error("--shapes and --size go with an EQUATION")
    for path in args.calls or ():
        calls += read_calls(path, args.dtype)
    if not calls:
        args.parser.error("give an EQUATION with --shapes, or --calls FILE")
    unique = {}         # one call per plan cache entry: a call equal but for its letters is the same
    for call in calls:
        unique.setdefault((_checked(call), tuple(call.shapes), call.dtype, str(call.strides)), call)
    return list(unique.values())


_CPU = ("on the CPU every step runs torch's ops: generated kernels run on CUDA tensors, so there is nothing "
        "to choose. einc tune times each step's candidates on a CUDA device; --dry-run --device cuda shows the "
        "plans and learn mode's first choices for one here. "
        "EINC_BACKEND=triton runs the kernels through Triton's interpreter on the CPU (for testing: its timings "
        "say nothing about a GPU)")


def _check_device(device: str) -> None:
    import torch

    from einc import config

    if device == "cuda" and not torch.cuda.is_available():
        raise ArgumentError("--device cuda: torch sees no CUDA device on this machine (--dry-run shows the plans "
                            "without one)")
    if device == "cpu" and config.backend() != "triton":
        raise ArgumentError(_CPU)
    if device == "cpu":
        print("einc tune: timing kernels under Triton's interpreter (EINC_BACKEND=triton): for testing, the "
              "timings say nothing about a GPU; on the CPU learn mode is used only under EINC_SELECT=learn",
              file=sys.stderr)


def _dry_run(calls, device: str, as_json: bool) -> int:
    import einc

    shown = [einc.explain(c.equation, *c.shapes, dtype=c.dtype, device=device, select="learn") for c in calls]
    if as_json:
        print(json.dumps({"device": device, "dry_run": True,
                          "calls": [{"equation": c.equation, "shapes": [list(s) for s in c.shapes], "dtype": c.dtype,
                                     "source": c.source, "plan": e.to_dict()} for c, e in zip(calls, shown)]},
                         indent=2))
        return 0
    for call, e in zip(calls, shown):
        print(f"{_title(call)}\n{e}\n")
    print(f"{len(calls)} call(s) planned for {device}; nothing timed, nothing written (the backends shown are "
          "learn mode's first choices for contiguous operands, before any decision)")
    return 0


# ----------------------------------------------------------------------- output

def _title(call: Call) -> str:
    shapes = ",".join("x".join(map(str, s)) if s else "()" for s in call.shapes)
    strides = "" if not call.strides else " strides " + ";".join(",".join(map(str, s)) for s in call.strides)
    return f"{call.equation}  {shapes}{strides}  {call.dtype}  ({call.source})"


def _us(t: float) -> str:
    return f"{t:.0f}" if t >= 100 else f"{t:.3g}"


def _times(row: dict) -> str:
    return ", ".join(f"{n} {_us(t)}" + ("*" if n in row["left_out"] else "")
                     for n, t in sorted(row["candidates"].items(), key=lambda x: x[1]))


def _print_call(call: Call, repeats: int) -> None:
    print(_title(call))
    if call.note:
        print(f"  {call.note}\n")
        return
    rows = [("step", "indices", f"candidates, µs (median of {repeats}; *: left out after one untuned run)",
             "winner")]
    for s, row in enumerate(call.steps, 1):
        winner = row["winner"] or "- (not timed: a kernel failed, see the warning)"
        times = _times(row) if row["timed"] else "(timed above)"
        rows.append((str(s), row["step"], times, winner))
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    for r in rows:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[3])
    print()


def _summary(calls) -> dict:
    rows = [r for c in calls for r in c.steps if r["timed"]]
    winners: dict = {}
    for r in rows:
        if r["winner"]:
            winners[r["winner"]] = winners.get(r["winner"], 0) + 1
    return {"calls": len(calls), "steps_timed": len(rows), "winners": winners,
            "steps_shared": sum(not r["timed"] for c in calls for r in c.steps),
            "calls_without_choice": sum(not c.steps and not c.note.startswith("failed") for c in calls),
            "calls_failed": sum(c.note.startswith("failed") for c in calls)}


def _print_summary(calls, device: str, path: str, unwritten: OSError | None = None) -> None:
    s = _summary(calls)
    wins = ", ".join(f"{n} {k}" for n, k in sorted(s["winners"].items(), key=lambda x: -x[1])) or "none"
    print(f"{s['calls']} call(s), {s['steps_timed']} step(s) timed on {device}; winners: {wins}"
          + (f"; {s['steps_shared']} step(s) met again in a later call" if s["steps_shared"] else "")
          + (f"; {s['calls_without_choice']} call(s) with nothing to choose" if s["calls_without_choice"] else "")
          + (f"; {s['calls_failed']} call(s) FAILED (see above)" if s["calls_failed"] else ""))
    if not s["steps_timed"]:
        print("Nothing written.")
        return
    if unwritten is not None:
        print(fill(f"The decisions could NOT be written to {path} ({unwritten.strerror or unwritten}): they "
                   "lived in this process only. Make the cache folder writable (EINC_CACHE_DIR) and run again."))
        return
    print(fill(f"Decisions written to {path}. Learn mode (the CUDA default) and measure mode take them on a key's "
               "first call in any later process with the same device, driver and torch, triton and einc versions "
               "and the same operand shapes, strides and dtype; a step whose winner is a kernel runs cuBLAS or "
               "torch's ops until a background thread has loaded the kernel (its binary is in Triton's cache "
               "now)."))


def _as_dict(call: Call) -> dict:
    return {"equation": call.equation, "shapes": [list(s) for s in call.shapes], "dtype": call.dtype,
            "strides": call.strides and [list(s) for s in call.strides], "source": call.source,
            "steps": call.steps, "note": call.note}


# ----------------------------------------------------------------------- parser

def add_parser(sub) -> None:
    p = sub.add_parser("tune", help="time each step's candidates ahead of time; learn mode starts on the winners",
                       description=fill("Time every candidate of every step of the given calls, as "
                                        "EINC_SELECT=measure does, and keep the winners in decisions.json, where "
                                        "learn mode (the CUDA default) reads them on a key's first call."),
                       epilog=TUNE_EXAMPLES, formatter_class=FMT)
    p.add_argument("equation", nargs="?", metavar="EQUATION", help="an einsum equation, e.g. 'bij,bjk->bik'")
    p.add_argument("--shapes", type=parse_shapes, metavar="SHAPES", help="operand shapes, e.g. 8x64x32,8x32x16")
    p.add_argument("--size", type=parse_size, action="append", metavar="NAME=N",
                   help="an axis size of a named equation, e.g. --size h=8 (repeat for more)")
    p.add_argument("--calls", action="append", metavar="FILE",
                   help="a file of calls (see below; - reads standard input); repeat for more")
    p.add_argument("--dtype", type=parse_dtype, default="float32",
                   help="operand dtype of the calls that name none (default float32)")
    p.add_argument("--device", choices=("cpu", "cuda"),
                   help="where to time (default cuda where torch sees a CUDA device, else cpu)")
    p.add_argument("--repeats", type=positive_int, metavar="N",
                   help="timed rounds per candidate, the median kept (default 5, as measure mode)")
    p.add_argument("--dry-run", action="store_true",
                   help="plan the calls and show learn mode's first choices; time nothing, write nothing")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of tables")
    p.set_defaults(func=cmd_tune, parser=p)


__all__ = ["Call", "read_calls", "operands", "tune", "cmd_tune", "add_parser"]
