"""torch.einsum's result dtype, asked of torch itself.

einc's executors compute in the operands' dtype (integer sums in int64).  Where
torch.einsum's result dtype depends on which of its internal ops run -- integer and
bool operands (a sum promotes to int64, a matrix product does not, a size-1 or size-0
dimension changes which runs), and autocast, which casts per op -- einc does not
re-derive torch's rules: it asks ``torch.einsum`` once per plan and casts its result to
the answer.  The question is put to tiny tensors (sizes 0, 1 or 2 standing in for each
size, which keeps torch's choice of ops; with three operands or more, along the path
torch.einsum would take for the real shapes) on the CPU, or under autocast on the
operands' device with the autocast state of the call.  Meta tensors would not do: their matrix
product checks dtypes that the CPU's does not.
"""

from __future__ import annotations

import functools

import torch

from ..errors import DtypeError, UnsupportedDtypeError


def torch_dtype(dtype, door: str) -> torch.dtype:
    """A torch dtype from a torch dtype or a dtype's name (``"float64"``, numpy's dtypes);
    :class:`~einc.errors.DtypeError`, naming ``door`` (``"contract()"``), for anything else."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = _numpy_name(dtype)   # as numpy reads it: float is float64, "f8", "<i4"
    if name is None:            # (not numpy's: "bfloat16")
        name = dtype if isinstance(dtype, str) else getattr(dtype, "name", None) or getattr(dtype, "__name__", None)
    found = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(found, torch.dtype):
        raise DtypeError(f"{door}: dtype={dtype!r} is not a dtype torch has; pass a torch dtype such as "
                         "torch.float64")
    return found


def _numpy_name(dtype):
    """The name of numpy's dtype for ``dtype``, or None where numpy has none (or is absent)."""
    try:
        import numpy
        return numpy.dtype(dtype).name
    except (ImportError, TypeError, ValueError):
        return None


# Integer dtypes narrower than int64, and bool.  Where the result is int64, einc contracts
# them in int64 (:func:`in_int64`: each operand made int64 by the step that reads it, after
# the sums that promote it anyway, ``torch_executor.step_functions``; in a sliced plan,
# :func:`widened`, each slice's views per slice and an operand no slice cuts once per
# call), so no step wraps in the narrow dtype before the result's: torch.einsum promotes
# only where its path happens to sum an index alone, so with three or more operands its
# values wrap or not as that path falls (uint8 ``ad,b,a,a,a->``), and a slice's smaller
# equation may not promote at all.
NARROW_INTEGRAL = frozenset((torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32))
# Unsigned integers wider than 8 bits: torch has no promotion or addition between them and
# int64 (einc meets them in int64 where a sum promoted one side, or in a sliced accumulator).
WIDE_UNSIGNED = frozenset(getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name))
# What einc contracts in int64 where the result is int64: the narrow integers, and the wide
# unsigned ones, which a slice's product would otherwise multiply in their own dtype
# (uint16 300 * 300 wrapped to 24464 before the int64 accumulator; uint64 as int64 keeps
# the bits: the result is int64 arithmetic, as torch's).
INT64_EXACT = NARROW_INTEGRAL | WIDE_UNSIGNED
# 16-bit floats and the dtype their sums and sliced parts are kept in (float16 overflows at
# 65504; bfloat16 keeps 8 bits).
FLOAT32_OF = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64}


def in_int64(dtypes, result_dtype) -> bool:
    """Whether operands of ``dtypes`` are contracted in int64: one narrow integer dtype
    (operands of several dtypes raise einc's DtypeError, as torch's ops do), where
    ``result_dtype`` is int64 (None: torch cannot say, so einc answers in int64)."""
    kinds = set(dtypes)
    return len(kinds) == 1 and kinds <= INT64_EXACT and result_dtype in (torch.int64, None)


def widened(tensors):
    """``tensors``, those of a dtype :data:`INT64_EXACT` holds made int64."""
    return [t.to(torch.int64) if t.dtype in INT64_EXACT else t for t in tensors]


def _stand_in(shape) -> tuple[int, ...]:
    return tuple(0 if s == 0 else 1 if s == 1 else 2 for s in shape)


# One of these throughout: torch.einsum returns it and has every kernel it needs.  Other
# floating dtypes are asked of torch (float8: torch's matrix product has no kernel for it
# on every device; complex32 none at all on the CPU).
COMPUTED = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
                      torch.complex128))


_QUANTIZED = frozenset((torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4))


def result_dtype(equation: str, shapes, dtypes):
    """The dtype torch.einsum returns for operands of ``shapes`` and ``dtypes``; None when
    torch cannot say (the equation uses letters torch does not take, or torch trips on its
    own int64 promotion, which einc answers in int64).  Raises
    :class:`~einc.errors.DtypeError` where torch refuses floating operands of several
    dtypes (one of its matrix products would mix them), as torch.einsum does, and
    :class:`~einc.errors.UnsupportedDtypeError` where torch has no kernel for the dtype.

    >>> result_dtype("ij->j", [(1, 4)], [torch.int32])
    torch.int64
    """
    dtypes = tuple(dtypes)
    if len(set(dtypes)) == 1 and dtypes[0] in COMPUTED:
        return dtypes[0]
    quantized = sorted({str(d) for d in dtypes if d in _QUANTIZED})
    if quantized:
        # (torch.einsum runs only its views on them, a transpose; its products have no kernel)
        raise UnsupportedDtypeError(f"einsum(): einc does not contract quantized tensors ({', '.join(quantized)}): "
                                    "dequantize() them first, or call torch.einsum for a transpose")
    stand_ins, path = tuple(_stand_in(s) for s in shapes), _torch_path(equation, shapes)
    answer = _probe(equation, stand_ins, dtypes, torch.device("cpu"), None, path)
    if isinstance(answer, NotImplementedError):
        # torch has no kernel for one of its steps on this dtype (a matrix product of
        # bool): raise as torch.einsum does, rather than answer where it cannot.
        _no_kernel(answer, equation, dtypes, "")
    if isinstance(answer, RuntimeError) and any(d.is_floating_point or d.is_complex for d in dtypes):
        try:
            one = functools.reduce(torch.promote_types, dtypes)
        except RuntimeError:    # (no promotion between them at all: float8)
            one = None
        # torch refuses the mix along its path (a product of two dtypes), not one of the dtypes
        if one is None or isinstance(_probe(equation, stand_ins, (one,) * len(dtypes), torch.device("cpu"),
                                            None, path), torch.dtype):
            raise naming(DtypeError(f"einsum(): {answer}: torch.einsum's path for {equation!r} contracts "
                                    f"operands of dtypes {', '.join(str(d) for d in dtypes)} in one step, which it "
                                    "refuses; convert them to one dtype first"), equation) from None
    return answer if isinstance(answer, torch.dtype) else None


def _autocast_answer(equation: str, operands):
    """What torch.einsum returns for ``operands`` under the autocast now in force on their
    device: its dtype, or the exception it raises."""
    device = operands[0].device
    # torch's opt_einsum settings (read slowly) choose its path from three operands on
    settings = (torch.backends.opt_einsum.enabled, torch.backends.opt_einsum.strategy) if len(operands) > 2 else ()
    shapes = tuple([o.shape for o in operands])
    if any(isinstance(n, torch.SymInt) for s in shapes for n in s):     # (torch.compile's dynamic sizes)
        shapes = _traced_sizes(shapes)
    return _autocast_probe(equation, shapes, tuple([o.dtype for o in operands]), device,
                           torch.get_autocast_dtype(device.type), settings)


def _traced_sizes(shapes) -> tuple:
    """Symbolic ``shapes`` as numbers a probe can key on: for one or two operands their
    stand-ins (what the probe runs at), for more their values, which the tracer then guards
    on (torch's path for three operands or more, and so the ops that autocast, depends on
    the sizes: torch.einsum's own trace asks opt_einsum with them too)."""
    if len(shapes) < 3:
        return tuple(_stand_in(s) for s in shapes)
    return tuple(tuple(int(n) for n in s) for s in shapes)


@functools.lru_cache(maxsize=1024)
def _autocast_probe(equation, shapes, kinds, device, autocast, settings):
    # (asked on every call under autocast: once per key here, torch's opt_einsum settings in it)
    return _probe(equation, tuple(_stand_in(s) for s in shapes), kinds, device, autocast, _torch_path(equation, shapes))


def autocast_operands(equation: str, operands, device_type: str):
    """``operands`` as einc computes them under the autocast in force on ``device_type``:
    those autocast would cast (floating, not float64) cast to the dtype torch.einsum
    returns there, else as they are.  That is the autocast dtype where torch's ops all
    autocast; on a CPU only its matrix products do, so ``ij,ij->ij`` stays float32, and
    where a product's 16-bit result meets a step that does not autocast (a size-1 sum
    runs as a multiply) torch promotes the two, to float32 for float16 beside bfloat16,
    from operands that alone it would refuse to mix."""
    if not torch.is_autocast_enabled(device_type):
        return list(operands)
    answer = _autocast_answer(equation, operands)
    if isinstance(answer, torch.dtype):
        return [o.to(answer) if autocast_eligible(o, answer) else o for o in operands] \
            if answer.is_floating_point else list(operands)
    kinds = [o.dtype for o in operands]
    if isinstance(answer, NotImplementedError):     # (a matrix product of bool, as without autocast)
        _no_kernel(answer, equation, kinds, " under autocast")
    if isinstance(answer, RuntimeError) and any(d.is_floating_point or d.is_complex for d in kinds):
        raise naming(DtypeError(f"einsum(): {answer}: torch.einsum refuses {equation!r} under autocast on "
                                f"operands of dtypes {_names(kinds)}; convert them to one dtype first"),
                     equation) from None
    return list(operands)


def _names(kinds) -> str:
    return ", ".join(sorted({str(d) for d in kinds}))


def _no_kernel(answer, equation: str, kinds, where: str):
    raise naming(UnsupportedDtypeError(f"{answer}: torch.einsum cannot evaluate {equation!r}{where} on operands "
                                       f"of dtype {_names(kinds)}; convert them to an integer or floating dtype "
                                       "first"), equation) from None


def naming(error, equation: str):
    """``error``, whose message names ``equation`` (as its ``repr``), with ``equation`` kept as
    its attribute ``equation``: a door that called einsum on another spelling of the caller's
    equation (a named equation's resolved letters) names the caller's in its place
    (:func:`einc.named.as_written`)."""
    error.equation = equation
    return error


def _torch_path(equation: str, shapes):
    """The contraction order torch.einsum takes for operands of these (real) shapes: with
    three or more, opt_einsum's path for torch's strategy, flattened as torch passes it;
    None where torch contracts left to right.  The probe follows it, so that it runs the
    same ops on its stand-in sizes."""
    settings = torch.backends.opt_einsum
    if len(shapes) < 3 or not (settings.enabled and settings.is_available()):
        return None
    return _opt_einsum_path(equation, tuple(tuple(s) for s in shapes), settings.strategy)


@functools.lru_cache(maxsize=1024)
def _opt_einsum_path(equation, shapes, strategy):
    # (once per equation, shapes and strategy: a call under autocast asks on every call)
    try:
        import opt_einsum
        path, _ = opt_einsum.contract_path(equation, *shapes, shapes=True, optimize=strategy)
    except Exception:   # noqa: BLE001 - torch would raise too; the probe says so
        return None
    return tuple(i for pair in path for i in pair)


@functools.lru_cache(maxsize=1024)
def _probe(equation, shapes, dtypes, device, autocast, path):
    try:
        # Real tensors even while a dispatch mode (fake tensors, tracing) is active.
        with torch._C._DisableTorchDispatch(), torch.no_grad():
            probes = [torch.zeros(s, dtype=d, device=device) for s, d in zip(shapes, dtypes)]
            with torch.autocast(device.type, dtype=autocast or torch.get_autocast_dtype(device.type),
                                enabled=autocast is not None):
                # torch's own op, never the ``torch.einsum`` attribute: a user may have made
                # that einc, which would ask itself (and wait on its own plan's lock).
                if path is None:
                    return torch._VF.einsum(equation, probes).dtype
                return torch._VF.einsum(equation, probes, path=list(path)).dtype
    except Exception as e:      # noqa: BLE001 - the caller decides what torch's failure means
        # Kept in the cache: without its traceback, which would keep every frame of the
        # call that asked alive (the caller's operands and locals) until the cache is cleared.
        e.__context__ = e.__cause__ = None
        return e.with_traceback(None)


def cache_info():
    return _probe.cache_info()


def cache_clear() -> None:
    _probe.cache_clear()
    _opt_einsum_path.cache_clear()
    _autocast_probe.cache_clear()


def autocast_eligible(tensor: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether autocast would cast ``tensor`` to ``dtype``: floating, not float64 (as in
    torch's ``at::autocast::is_eligible``)."""
    return tensor.is_floating_point() and tensor.dtype not in (dtype, torch.float64)


__all__ = ["result_dtype", "autocast_operands", "autocast_eligible", "cache_info", "cache_clear"]
