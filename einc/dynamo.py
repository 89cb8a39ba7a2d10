"""The ``einc`` backend for ``torch.compile``.

    torch.compile(model, backend="einc")                              # rest of the graph: inductor
    torch.compile(model, backend="einc", options={"inner": "eager"})  # rest of the graph: eager
    torch.compile(model, backend=einc.dynamo.make_backend(inner="eager"))

The backend runs :mod:`einc.fx_pass` on each graph dynamo captures (contractions and
the scalars around them become fused ``einc::einsum`` calls), then hands the graph
to inductor (``torch._inductor.compile_fx.compile_fx``) or runs it as it is.  Other
``options`` go to inductor as config patches, as with the inductor backend.

It is registered under the ``torch_dynamo_backends`` entry point (pyproject.toml), so
loading it must stay cheap: this module imports neither triton nor
``torch._inductor``; the FX pass and inductor are imported inside the backend call.

What it rewrote is logged (logger ``"einc.dynamo"``, INFO) and kept in
:data:`last_report`; :func:`explain_rewrites` compiles a model on example inputs and
returns the report without running inductor.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger("einc.dynamo")

INNER = ("inductor", "eager")


@dataclass
class Report:
    """The rewrites of one or more graphs: a list of :class:`einc.fx_pass.Rewrite`."""

    rewrites: list = field(default_factory=list)
    graphs: int = 0

    @property
    def fused(self) -> int:
        """How many contractions were merged away into others."""
        return sum(r.fused - 1 for r in self.rewrites)

    @property
    def scaled(self) -> int:
        """How many emitted einsums carry scalar factors."""
        return sum(r.scale_on != "-" for r in self.rewrites)

    def __len__(self) -> int:
        return len(self.rewrites)

    def __str__(self) -> str:
        head = (f"einc backend: {len(self.rewrites)} einsum(s) from {sum(r.fused for r in self.rewrites)} "
                f"contraction(s) in {self.graphs} graph(s); {self.fused} fused away, {self.scaled} with scalars")
        return "\n".join([head] + [f"  {r}" for r in self.rewrites])


last_report: Report = Report()
"""The report of the most recent graph the backend compiled."""


def make_backend(inner: str = "inductor", **inductor_options):
    """A backend like ``"einc"`` with the rest of the graph compiled by ``inner``
    (``"inductor"`` or ``"eager"``); ``inductor_options`` are inductor config patches."""
    if inner not in INNER:
        raise ValueError(f"einc backend: inner must be one of {INNER}, got {inner!r}")

    def einc_backend(gm, example_inputs, **kwargs):
        options = dict(inductor_options)
        options.update(kwargs.pop("options", None) or {})
        return backend(gm, example_inputs, options={"inner": inner, **options}, **kwargs)
    einc_backend.__name__ = f"einc_{inner}"
    return einc_backend


def backend(gm, example_inputs, options=None, mode=None):
    """The ``torch.compile`` backend: rewrite contractions to einc, then inductor or eager."""
    global last_report
    from . import fx_pass          # torch.fx and the planner: imported on first use only

    options = dict(options or {})
    inner = options.pop("inner", "inductor")
    if inner not in INNER:
        raise ValueError(f"einc backend: options['inner'] must be one of {INNER}, got {inner!r}")
    rewrites = fx_pass.rewrite(gm)
    last_report = Report(rewrites, 1)
    for r in rewrites:
        log.info("einc: %s", r)
    if not rewrites:
        log.info("einc: no contraction rewritten in this graph")
    if inner == "eager":
        if options or mode:
            raise ValueError(f"einc backend: options {sorted(options)} / mode {mode!r} apply to inductor only")
        return gm.forward
    from torch._inductor.compile_fx import compile_fx
    if mode and mode != "default":
        from torch._inductor import list_mode_options
        options = {**list_mode_options(mode), **options}
    return compile_fx(gm, example_inputs, config_patches=options or None)


def explain_rewrites(model, *example_inputs, dynamic=None) -> Report:
    """Compile ``model`` with the einc pass (eager inner) on ``example_inputs`` and return
    what was rewritten in every graph dynamo captured.

    >>> print(einc.dynamo.explain_rewrites(lambda a, b, c: a @ b @ c, *mats))  # doctest: +SKIP
    """
    import torch

    report = Report()

    def capture(gm, inputs, **kwargs):
        fn = backend(gm, inputs, options={"inner": "eager"})
        report.rewrites.extend(last_report.rewrites)
        report.graphs += 1
        return fn
    torch.compile(model, backend=capture, dynamic=dynamic)(*example_inputs)
    return report


__all__ = ["backend", "make_backend", "explain_rewrites", "Report", "last_report"]
