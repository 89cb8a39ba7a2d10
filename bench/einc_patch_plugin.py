"""pytest plugin: a test run with einc installed as ``torch.einsum``, counting the calls
that reach einc.

Loaded with ``-p einc_patch_plugin`` (this folder on ``PYTHONPATH``) by
``bench/libraries.py``.  It installs the patch when pytest loads it -- before any
conftest or test module imports the library under test, so code that binds
``torch.einsum`` at import (``from torch import einsum``, ``einsum = torch.einsum``)
binds einc's.  ``torch.einsum`` is ``einc.einsum`` itself, not a wrapper, so torch.fx
records, and TorchScript compiles, the function users would install.

Calls are counted inside einc instead: the entries of its computation --
``einc.runtime.engine.run`` / ``run_scaled`` (no autograd; also what the custom op's
kernel and the autograd Function's forward run) and ``einc.autograd.differentiable`` --
are wrapped with a per-thread depth guard, so a call counts once however many of them it
passes through (a gradient einsum run by backward counts as a call of its own).  Also
counted: ``torch_op``, the calls that einc's admission answered with torch's own einsum op
(under ``EINC_NEW_SHAPES=torch``, small calls: ``einc.runtime.admission``); ``torch_function``,
the calls handed to ``__torch_function__`` (fx proxies, modes, subclasses).  Calls made under
jit.trace / torch.compile become the custom op, and are counted when its kernel runs
einc (the wrappers dynamo can reach while it traces take no lock: it cannot enter one).  At the end of the
run the counts, and the dtypes of the counted calls' operands, are written as JSON to the file named by
``EINC_PATCH_COUNTS`` (if set); with ``EINC_PATCH_RECORD`` set, the distinct counted calls too (equation,
and each operand's shape, strides, storage offset, dtype and ``requires_grad``: what ``bench/libraries.py
--replay`` runs again on random data), to the file it names.
"""

from __future__ import annotations

import functools
import json
import os
import threading

import torch

import einc
import einc.api as _api
import einc.autograd as _autograd
from einc.runtime import admission as _admission
from einc.runtime import engine as _engine

COUNTS = {"calls": 0, "torch_op": 0, "torch_function": 0}
EQUATIONS: set = set()
DTYPES: dict = {}               # the operands' dtypes ("complex64,complex64") -> calls
CALLS: dict = {}                # a distinct call (its JSON description) -> calls; kept where EINC_PATCH_RECORD is set
RECORD_LIMIT = 50_000           # distinct calls kept at most (a suite of fresh shapes stays bounded)
_local = threading.local()
_lock = threading.Lock()


def _computing(fn):
    """``fn`` counted as one call where no counted call is already under way in this thread."""
    @functools.wraps(fn)
    def counted(eq, *args, **kwargs):
        depth = getattr(_local, "depth", 0)
        if depth == 0:
            with _lock:
                COUNTS["calls"] += 1
                text = getattr(eq, "text", eq)
                EQUATIONS.add(text)
                operands = args[0] if args else ()
                if isinstance(operands, (list, tuple)) and all(isinstance(o, torch.Tensor) for o in operands):
                    _tally(text, operands)
        _local.depth = depth + 1
        try:
            return fn(eq, *args, **kwargs)
        finally:
            _local.depth = depth
    return counted


def _tally(text, operands) -> None:
    """The operands' dtypes counted, and the call kept where recording."""
    kinds = ",".join(str(o.dtype).removeprefix("torch.") for o in operands)
    DTYPES[kinds] = DTYPES.get(kinds, 0) + 1
    if _RECORDING and all(o.layout is torch.strided for o in operands):
        key = describe(text, operands)
        if key in CALLS or len(CALLS) < RECORD_LIMIT:
            CALLS[key] = CALLS.get(key, 0) + 1


def describe(text, operands) -> str:
    """A call as JSON: its equation and each operand's layout, dtype and ``requires_grad``."""
    return json.dumps([text, [[list(o.shape), list(o.stride()), o.storage_offset(),
                               str(o.dtype).removeprefix("torch."), bool(o.requires_grad)] for o in operands]])


_RECORDING = bool(os.environ.get("EINC_PATCH_RECORD"))


def _tallied(name, fn, when=lambda result: True):
    """``fn`` counted under ``COUNTS[name]`` where ``when(result)``.  No lock: dynamo may
    trace through these wrappers and cannot enter one (a count lost to a thread race is
    the price)."""
    @functools.wraps(fn)
    def tallied(*args, **kwargs):
        result = fn(*args, **kwargs)
        if when(result):
            COUNTS[name] += 1
        return result
    return tallied


def install() -> None:
    """Install einc as ``torch.einsum`` and the counting wrappers (once)."""
    if getattr(_engine.run, "__wrapped__", None) is not None:
        return
    _engine.run = _computing(_engine.run)
    _engine.run_scaled = _computing(_engine.run_scaled)
    _autograd.differentiable = _computing(_autograd.differentiable)
    _admission.small_call = _tallied("torch_op", _admission.small_call, lambda result: result is not None)
    _api._torch_function = _tallied("torch_function", _api._torch_function)
    torch.einsum = einc.einsum
    torch.functional.einsum = einc.einsum


def report() -> dict:
    """The counts so far, whether the patch is still in place, and the distinct equations."""
    return {**COUNTS, "equations": len(EQUATIONS), "still_patched": torch.einsum is einc.einsum,
            "dtypes": dict(sorted(DTYPES.items(), key=lambda kv: -kv[1]))}


install()


def pytest_configure(config):
    install()       # already done at import; a no-op unless something undid it


def pytest_unconfigure(config):
    path = os.environ.get("EINC_PATCH_COUNTS")
    if path:
        with open(path, "w") as f:
            json.dump(report(), f)
    path = os.environ.get("EINC_PATCH_RECORD")
    if path:
        with open(path, "w") as f:
            json.dump(CALLS, f)
