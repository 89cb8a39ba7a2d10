"""What the suite benchmark times and how it checks it: each method's call on a
workload's operands (forward, or a training step), the comparison with torch.einsum's
result, and the runner's options.  Used by :mod:`einc.tools.benchmark.runner` and
:mod:`einc.tools.benchmark.train`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import opt_einsum
import torch

import einc

from ...runtime.reference import torch_einsum

METHODS = ("torch", "opt_einsum", "einc")
RTOL = 1e-3
# (rtol, atol as a fraction of max|ref|) for the comparison with torch.einsum's result
TOLERANCES = {"float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2), "float32": (RTOL, 1e-4),
              "complex64": (RTOL, 1e-4), "float64": (1e-7, 1e-9), "complex128": (1e-7, 1e-9)}


@dataclass
class Options:
    """What to run and how long: ``rounds`` per workload within ``budget`` seconds (at
    least ``min_rounds``); ``mode`` is ``"forward"`` or ``"train"`` (a key of :data:`MODES`)."""

    device: str = "cpu"
    rounds: int = 31
    budget: float = 4.0
    min_rounds: int = 5
    mode: str = "forward"
    tag: str = ""              # ends the file stems of a partial run (--quick, --filter): see run_tag
    wait: float = 60.0         # seconds to wait for an idle machine (before the run and before a re-time)
    guard: bool = True         # re-time, then flag, a workload timed while other processes kept cores busy


def forward_call(fn, eq: str, ops, **kwargs):
    """The forward suite's timed call: ``fn(eq, *ops, **kwargs)``."""
    return partial(fn, eq, *ops, **kwargs)


def methods(eq: str, ops, call=forward_call) -> dict:
    """The three callables compared, each bound to the same operands by ``call(fn, eq,
    ops, **kwargs)`` (:func:`forward_call`, or a training step from :func:`train_prepare`);
    and, where torch.einsum's result is not contiguous, :data:`CONTIGUOUS`: torch.einsum
    followed by the ``.contiguous()`` copy that einc's result includes."""
    fns = {"torch": call(torch_einsum, eq, ops),
           "opt_einsum": call(opt_einsum.contract, eq, ops, backend="torch"),
           "einc": call(einc.einsum, eq, ops)}
    try:
        with torch.no_grad():
            if not torch_einsum(eq, *ops).is_contiguous():
                fns[CONTIGUOUS] = call(_contiguous_einsum, eq, ops)
    except Exception:               # noqa: BLE001 -- torch.einsum's own call reports it (bench_workload)
        pass
    return fns


# torch.einsum may return a permuted or strided view (``ii->i``: the diagonal of its
# operand); einc always returns a fresh contiguous tensor, which costs a copy there.  The
# like-for-like baseline of such a workload is torch.einsum plus that copy.
CONTIGUOUS = "torch_contiguous"


def _contiguous_einsum(eq, *ops):
    return torch_einsum(eq, *ops).contiguous()


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


def differentiable(t: torch.Tensor) -> bool:
    """Whether autograd can take a gradient with respect to ``t`` (floating or complex)."""
    return t.is_floating_point() or t.is_complex()


def train_step(fn, eq: str, ops, wrt, g, **kwargs):
    """One training step of ``fn``: ``out = fn(eq, *ops); torch.autograd.grad(out, wrt, g)``;
    returns ``(out, grads)`` (no ``.grad`` is accumulated)."""
    grad = torch.autograd.grad

    def step():
        out = fn(eq, *ops, **kwargs)
        return out, grad(out, wrt, g)
    return step


def upstream(out: torch.Tensor) -> torch.Tensor:
    """The fixed random upstream gradient for an output like ``out``: ``randn``, seed 1."""
    gen = torch.Generator(device=out.device).manual_seed(1)
    return torch.randn(out.shape, dtype=out.dtype, device=out.device, generator=gen)


def train_prepare(eq: str, ops):
    """Training mode's set-up: the floating and complex operands require grad (in place),
    ``g`` is :func:`upstream` of torch.einsum's output; returns the call for :func:`methods`."""
    wrt = [o.requires_grad_(True) for o in ops if differentiable(o)]
    if not wrt:
        raise ValueError("no floating-point operand to differentiate")
    with torch.no_grad():
        g = upstream(torch_einsum(eq, *ops))
    return lambda fn, eq, ops, **kwargs: train_step(fn, eq, ops, wrt, g, **kwargs)


def check_train(result, ref) -> str:
    """:func:`check` of the output and then of each operand's gradient of a :func:`train_step`
    result against torch.einsum's; 'ok' or the first difference."""
    (out, grads), (ref_out, ref_grads) = result, ref
    s = check(out, ref_out)
    if s != "ok":
        return s.replace("MISMATCH", "MISMATCH in the output:", 1)
    for k, (a, b) in enumerate(zip(grads, ref_grads)):
        if a is None or b is None:
            if a is not b:
                return f"MISMATCH gradient of operand {k}: {'None' if a is None else 'a tensor'} vs " \
                       f"{'None' if b is None else 'a tensor'}"
            continue
        s = check(a, b)
        if s != "ok":
            return s.replace("MISMATCH", f"MISMATCH gradient of operand {k}:", 1)
    return "ok"


@dataclass(frozen=True)
class Mode:
    """What the runner times: ``prepare(eq, ops)`` returns the ``call`` that binds each
    method to the operands (see :func:`methods`); ``compare(result, torch_result)`` says
    'ok' or how einc's (or opt_einsum's) result differs; ``suffix`` ends the file stem."""

    name: str
    prepare: Callable
    compare: Callable
    suffix: str
    title: str
    timed: str                 # what one timed call does, for the report's header


FORWARD = Mode("forward", lambda eq, ops: forward_call, check, "", "einc suite benchmark",
               "one call `method(eq, *ops)`")
TRAIN = Mode("train", train_prepare, check_train, "_train", "einc training benchmark (forward + backward)",
             "one call `out = method(eq, *ops); torch.autograd.grad(out, float_ops, g)` (forward and "
             "backward; every floating/complex operand requires grad; `g` a fixed randn of the output's "
             "shape, seed 1; no .grad accumulated); check: einc's output and every gradient against "
             "torch.einsum's")
MODES = {m.name: m for m in (FORWARD, TRAIN)}


__all__ = ["METHODS", "RTOL", "TOLERANCES", "Options", "forward_call", "methods", "CONTIGUOUS", "check",
           "differentiable", "train_step", "upstream", "train_prepare", "check_train", "Mode", "FORWARD", "TRAIN",
           "MODES"]
