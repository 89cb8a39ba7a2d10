"""The ``einc`` backend for ``torch.compile``.

    torch.compile(model, backend="einc")                              # rest of the graph: inductor
    torch.compile(model, backend="einc", options={"inner": "eager"})  # rest of the graph: eager
    torch.compile(model, backend=einc.dynamo.make_backend(inner="eager"))
    torch.compile(model, backend="einc", options={"rewrite": "all"})  # every contraction to einc

The backend runs :mod:`einc.dynamo.fx_pass` on each graph dynamo captures, then hands the
graph to inductor (``torch._inductor.compile_fx.compile_fx``) or runs it as it is.
The pass rewrites a contraction (or a chain of them, fused, with the scalars around
them) into one ``einc::einsum`` call only where einc's plan needs fewer flops than
the original nodes as torch runs them; every other node is left exactly as dynamo
captured it, and a graph where nothing pays goes to the inner compiler unchanged, so
that ``backend="einc"`` compiles it as ``torch.compile``'s default does.
``options={"rewrite": "all"}`` (or ``make_backend(rewrite="all")``) rewrites every
contraction found.  Other ``options`` go to inductor as config patches, as with the
inductor backend.

It is registered under the ``torch_dynamo_backends`` entry point (pyproject.toml), so
loading it must stay cheap: this module imports neither triton nor
``torch._inductor``; the FX pass and inductor are imported inside the backend call.

What it rewrote, and which contractions it left as written and why, is logged
(logger ``"einc.dynamo"``, INFO) and kept in :data:`last_report`;
:func:`explain_rewrites` compiles a model on example inputs and returns the report
without running inductor.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger("einc.dynamo")

INNER = ("inductor", "eager")
REWRITE = ("fewer_flops", "all")      # einc.dynamo.fx_pass.POLICIES, without importing it


@dataclass
class Report:
    """What the pass did to one or more graphs: ``rewrites``, the emitted einsums (a list of
    :class:`einc.dynamo.fx_pass.Rewrite`), and ``left``, the contractions it left as written for
    the ``inner`` compiler, with the reason (:class:`einc.dynamo.fx_pass.Left`)."""

    rewrites: list = field(default_factory=list)
    graphs: int = 0
    left: list = field(default_factory=list)
    inner: str = "inductor"

    @property
    def fused(self) -> int:
        """How many contractions were merged away into others."""
        return sum(r.fused - 1 for r in self.rewrites)

    @property
    def scaled(self) -> int:
        """How many emitted einsums carry scalar factors."""
        return sum(r.scale_on != "-" for r in self.rewrites)

    @property
    def kept(self) -> int:
        """How many contractions were left as written (for the inner compiler)."""
        return sum(x.fused for x in self.left)

    def __len__(self) -> int:
        return len(self.rewrites)

    def __str__(self) -> str:
        head = (f"einc backend: {len(self.rewrites)} einsum(s) from {sum(r.fused for r in self.rewrites)} "
                f"contraction(s) in {self.graphs} graph(s); {self.fused} fused away, {self.scaled} with scalars; "
                f"{self.kept} contraction(s) left to {self.inner}")
        return "\n".join([head] + [f"  {r}" for r in self.rewrites] + [f"  {x}" for x in self.left])


last_report: Report = Report()
"""The report of the most recent graph the backend compiled."""


def make_backend(inner: str = "inductor", rewrite: str = "fewer_flops", **inductor_options):
    """A backend like ``"einc"`` with the rest of the graph compiled by ``inner``
    (``"inductor"`` or ``"eager"``); ``rewrite``: ``"fewer_flops"`` (only where einc's
    plan saves flops) or ``"all"`` (every contraction); ``inductor_options`` are inductor
    config patches."""
    if inner not in INNER:
        raise ValueError(f"einc backend: inner must be one of {INNER}, got {inner!r}")
    if rewrite not in REWRITE:
        raise ValueError(f"einc backend: rewrite must be one of {REWRITE}, got {rewrite!r}")

    def einc_backend(gm, example_inputs, **kwargs):
        options = dict(inductor_options)
        options.update(kwargs.pop("options", None) or {})
        return backend(gm, example_inputs, options={"inner": inner, "rewrite": rewrite, **options}, **kwargs)
    einc_backend.__name__ = f"einc_{inner}" if rewrite == "fewer_flops" else f"einc_{inner}_{rewrite}"
    return einc_backend


def backend(gm, example_inputs, options=None, mode=None):
    """The ``torch.compile`` backend: rewrite the contractions where einc's plan saves
    flops, then inductor (or eager) for the graph."""
    global last_report
    from . import fx_pass  # torch.fx and the planner: imported on first use only

    options = dict(options or {})
    inner = options.pop("inner", "inductor")
    if inner not in INNER:
        raise ValueError(f"einc backend: options['inner'] must be one of {INNER}, got {inner!r}")
    policy = options.pop("rewrite", "fewer_flops")
    if policy not in REWRITE:
        raise ValueError(f"einc backend: options['rewrite'] must be one of {REWRITE}, got {policy!r}")
    left: list = []
    rewrites = fx_pass.rewrite(gm, policy=policy, left=left)
    last_report = Report(rewrites, 1, left, inner)
    for r in rewrites:
        log.info("einc: %s", r)
    for x in left:
        log.info("einc: %s", x)
    if not rewrites:
        log.info("einc: no contraction rewritten in this graph; %s gets it unchanged", inner)
    if inner == "eager":
        if options or mode:
            raise ValueError(f"einc backend: options {sorted(options)} / mode {mode!r} apply to inductor only")
        return gm.forward
    return inductor(gm, example_inputs, mode, options)


def inductor(gm, example_inputs, mode=None, options=None):
    """``gm`` compiled by inductor exactly as ``torch.compile(model, mode=mode,
    options=options)`` compiles a graph: through torch's own inductor wrapper, so that
    the config patches, mode options and arguments of ``compile_fx`` are the same (an
    unchanged graph then gets inductor's code, from its FX-graph cache where it already
    compiled it)."""
    import torch

    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    if wrapper is not None:
        return wrapper(mode, options or None, None)(gm, example_inputs)
    from torch._inductor.compile_fx import compile_fx  # torch without the wrapper (not seen in 2.11-2.13)
    if mode and mode != "default":
        from torch._inductor import list_mode_options
        options = {**list_mode_options(mode), **(options or {})}
    return compile_fx(gm, example_inputs, config_patches=options or None)


def explain_rewrites(model, *example_inputs, dynamic=None, rewrite="fewer_flops") -> Report:
    """Compile ``model`` with the einc pass (eager inner) on ``example_inputs`` and return
    what ``backend="einc"`` would rewrite, and leave to inductor, in every graph dynamo
    captured.

    >>> print(einc.dynamo.explain_rewrites(lambda a, b, c: a @ b @ c, *mats))  # doctest: +SKIP
    """
    import torch

    report = Report()

    def capture(gm, inputs, **kwargs):
        fn = backend(gm, inputs, options={"inner": "eager", "rewrite": rewrite})
        report.rewrites.extend(last_report.rewrites)
        report.left.extend(last_report.left)
        report.graphs += 1
        return fn
    torch.compile(model, backend=capture, dynamic=dynamic)(*example_inputs)
    return report


__all__ = ["backend", "inductor", "make_backend", "explain_rewrites", "Report", "last_report"]
