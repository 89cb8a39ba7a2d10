"""Replay recorded einsum calls on random data: einc against torch.einsum on float64 /
complex128 copies, values and gradients.

A library's tolerance can hide a wrong answer, so ``bench/libraries.py --replay`` runs
each distinct call its suite made (recorded by ``bench/einc_patch_plugin.py`` under
``EINC_PATCH_RECORD``: equation, and each operand's shape, strides, storage offset, dtype
and ``requires_grad``) again here, on random operands laid out as recorded (an
``as_strided`` view of a random storage, so overlapping and expanded operands stay so).
A value is flagged where einc's error against the wide copy's answer, relative to the
largest term-magnitude sum (the einsum of the operands' absolute values), passes both 10x
torch.einsum's own error in the same dtype and 64 ulps of the dtype; a gradient (each
operand's storage, for a random result gradient: torch's conjugate Wirtinger convention
for complex) where its error relative to the reference gradient's largest magnitude
passes both 10x torch's and 1000 ulps.  Integers and booleans must equal torch.einsum's
answer exactly.  A call is flagged too where einc raises and torch answers, or gives
another shape or dtype; a call torch.einsum refuses as recorded is counted apart.
"""

from __future__ import annotations

import json
import math

import torch

MAX_ELEMENTS = 1 << 22      # a call whose operands' storages hold more is left out (counted)
REFUSED = "torch.einsum refused the call as recorded"      # nothing to compare: counted apart, not flagged


def _wide(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype.is_complex else torch.float64


def _storage(shape, stride, offset: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Random values for a storage holding the view (shape, stride, offset)."""
    size = offset + (1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0)
    if dtype == torch.bool:
        return torch.randint(0, 2, (size,), generator=gen).bool()
    if not (dtype.is_floating_point or dtype.is_complex):
        low = 0 if dtype == torch.uint8 else -3
        return torch.randint(low, 4, (size,), generator=gen).to(dtype)
    return torch.randn(size, generator=gen, dtype=_wide(dtype)).to(dtype)


def _error(got: torch.Tensor, want: torch.Tensor, scale: float) -> float:
    if got.numel() == 0:
        return 0.0
    return (got.to(want.dtype) - want).abs().max().item() / (scale or 1.0)


def _ulp(dtype: torch.dtype) -> float:
    return torch.finfo(torch.empty((), dtype=dtype).real.dtype).eps


def _leaves(bases, layouts, dtype_of, grad: bool):
    """Leaf storages (copies of ``bases`` in ``dtype_of(base)``, requiring grad where the
    call's operand did) and the views the call takes of them."""
    leaves = [b.to(dtype_of(b)).detach().requires_grad_(grad and rg and (b.is_floating_point() or b.is_complex()))
              for b, (_, _, _, _, rg) in zip(bases, layouts)]
    views = [leaf.as_strided(shape, stride, offset) for leaf, (shape, stride, offset, _, _) in zip(leaves, layouts)]
    return leaves, views


def _gradients(result, leaves, seed_grad):
    wanted = [leaf for leaf in leaves if leaf.requires_grad]
    return torch.autograd.grad(result, wanted, seed_grad.to(result.dtype), allow_unused=True)


def replay_call(einsum, text: str, layouts, gen: torch.Generator) -> str | None:
    """Why the call is flagged, or None.  ``layouts``: [shape, stride, offset, dtype name,
    requires_grad] for each operand, as the plugin records them."""
    dtypes = [getattr(torch, name) for _, _, _, name, _ in layouts]
    bases = [_storage(shape, stride, offset, dtype, gen)
             for (shape, stride, offset, _, _), dtype in zip(layouts, dtypes)]
    exact = not any(d.is_floating_point or d.is_complex for d in dtypes)
    grad = not exact and any(rg for *_, rg in layouts)
    narrow, narrow_views = _leaves(bases, layouts, lambda b: b.dtype, grad)
    try:
        expected = torch.einsum(text, *narrow_views)
    except Exception:
        return REFUSED
    try:
        got = einsum(text, *narrow_views)
    except Exception as error:
        return f"einc raised {type(error).__name__}: {str(error)[:120]}"
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return f"einc gave {tuple(got.shape)} {got.dtype}, torch {tuple(expected.shape)} {expected.dtype}"
    if exact:
        return None if torch.equal(got, expected) else "integers differ from torch.einsum's"
    wide, wide_views = _leaves(bases, layouts, lambda b: _wide(b.dtype), grad)
    reference = torch.einsum(text, *wide_views)
    with torch.no_grad():
        scale = torch.einsum(text, *[v.abs() for v in wide_views]).abs().max().item() if reference.numel() else 0.0
    want = reference.detach()
    error, torch_error = _error(got.detach(), want, scale), _error(expected.detach(), want, scale)
    if error > 10 * torch_error and error > 64 * _ulp(got.dtype):
        return f"value error {error:.2e} (torch {torch_error:.2e})"
    if not grad or not reference.requires_grad:
        return None
    seed_grad = torch.randn(reference.shape, generator=gen, dtype=reference.dtype)
    want = _gradients(reference, wide, seed_grad)
    for mine, theirs, ref in zip(_gradients(got, narrow, seed_grad), _gradients(expected, narrow, seed_grad), want):
        if ref is None or mine is None or theirs is None:
            if (mine is None) != (ref is None):
                return "a gradient missing or unexpected"
            continue
        scale = ref.abs().max().item() if ref.numel() else 0.0
        error, torch_error = _error(mine, ref, scale), _error(theirs, ref, scale)
        if error > 10 * torch_error and error > 1000 * _ulp(mine.dtype):
            return f"gradient error {error:.2e} (torch {torch_error:.2e})"
    return None


def replay(calls: dict, seed: int = 0) -> dict:
    """Each recorded call (the plugin's JSON keys) replayed: counts by dtype, and the
    flagged calls with their reason."""
    import einc
    gen = torch.Generator().manual_seed(seed)
    summary = {"replayed": 0, "left_out": 0, "torch_refused": 0, "with_gradients": 0, "dtypes": {}, "flagged": []}
    for key in calls:
        text, layouts = json.loads(key)
        if sum(math.prod(shape) for shape, *_ in layouts) > MAX_ELEMENTS:
            summary["left_out"] += 1
            continue
        kinds = ",".join(name for *_, name, _ in layouts)
        summary["dtypes"][kinds] = summary["dtypes"].get(kinds, 0) + 1
        summary["replayed"] += 1
        summary["with_gradients"] += any(rg and name.startswith(("float", "complex", "bfloat"))
                                         for *_, name, rg in layouts)
        why = replay_call(einc.einsum, text, layouts, gen)
        if why == REFUSED:
            summary["torch_refused"] += 1
        elif why is not None:
            summary["flagged"].append((key, why))
    return summary
