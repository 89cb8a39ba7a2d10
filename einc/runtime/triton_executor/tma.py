"""The TMA variant of a 16-bit matrix product: persistent tiles read through tensor descriptors.

A generated 16-bit ``matmul`` module whose groups are plain rows, columns, K and batch
(no tile axis ``t``, no 2-D block, nothing summed in one operand only) holds a second
kernel, ``<name>_tma`` (:mod:`einc.codegen.matmul_tma`): the same arguments, but each
operand read through a device-side tensor descriptor (``tl.make_tensor_descriptor``;
on Hopper, ``cp.async.bulk.tensor`` copies into shared memory feeding ``wgmma``) and one
program per multiprocessor walking the tiles (a persistent grid, as Triton's persistent
matmul tutorial).  :class:`Variant` holds it for the module's
:class:`~einc.runtime.triton_executor.launch.Launcher`, which takes it for a layout
where :meth:`Variant.applies`: a device of compute capability 9 or more, no K split,
rows and columns of at least one 64x64 tile, and operands a descriptor can read
(:func:`axis`, computed by the module's ``layout`` as ``TMA``); the kernel of the
module's own template runs everywhere else (fp32/fp64, older GPUs, misaligned or
gathered operands, split K, Triton's interpreter unless :data:`ANYWHERE` says so).

Device-side descriptors rather than host-side ``TensorDescriptor`` objects: the kernel
keeps the module kernel's arguments (pointers and strides), so the layout cache, the
autotuner (block shapes are its constexprs, a host descriptor fixes them before the
config is known) and the compiled-launch path serve it unchanged, with triton 3.6 to
3.9 alike.  Their price is a small global scratch per program (the descriptors are
written there), which Triton takes from the allocator ``triton.set_allocator`` sets
for the calling thread: :func:`ensure_allocator` sets one (torch's caching allocator)
where none is, and never replaces a caller's.
"""

from __future__ import annotations

import functools
import warnings

import torch
import triton

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): the tiles of Triton's persistent TMA
# matmul tutorial and of the 16-bit list of the module's own kernel that reach wgmma (64x64
# and larger); pruned per shape as those are.
CONFIGS = [(128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 64, 64, 4, 4),
           (64, 128, 64, 4, 4), (64, 64, 64, 4, 4)]
MIN_TILE = 64           # rows and columns both at least this: the smallest tile above
LARGEST = (max(c[0] for c in CONFIGS), max(c[1] for c in CONFIGS))     # BLOCK_M, BLOCK_N
ANYWHERE = False        # tests: take the variant under Triton's interpreter too (it runs descriptors)


def configs() -> list:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
            for bm, bn, bk, w, s in CONFIGS]


def axis(groups, itemsize: int, split=(False, False, False)) -> int:
    """How a tensor descriptor reads a tensor whose tile axes are ``groups`` -- ``(sizes,
    strides)`` of each group's indices, slowest first: the batch (possibly no index), then
    the tile's two axes -- where the kernel gives each index of a ``split`` group an axis of
    its own and every other group one axis: 1 where the last axis runs along unit stride,
    2 where the one before does, 0 where no descriptor can read it (every stride but the
    unit one must be a positive multiple of 16 bytes), -1 where a group read as one axis
    does not walk memory as one index (each index's stride the next one's times its size)."""
    rest, last = [], []
    for (sizes, strides), own in zip(groups, split):
        if not own and any(s != n * t for s, n, t in zip(strides, sizes[1:], strides[1:])):
            return -1
        rest += list(strides[:-1]) if own else []
        last.append(strides[-1] if strides else None)
    batch, outer, inner = last
    unit = 1 if inner == 1 else 2 if outer == 1 else 0
    rest += [s for s in (batch, inner if unit == 2 else outer) if s is not None]
    if not unit or any(s <= 0 or (s * itemsize) % 16 for s in rest):
        return 0
    return unit


@functools.cache
def _hopper(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (9, 0)


def supported_device(device) -> bool:
    """Whether ``device`` has TMA: a CUDA device of compute capability 9 or more."""
    return device.type == "cuda" and _hopper(device.index if device.index is not None else torch.cuda.current_device())


def _scratch(size: int, alignment: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def ensure_allocator() -> None:
    """Give Triton an allocator for the descriptors' scratch where this thread has none
    (Triton keeps it per thread, in a context variable).  Asked before each launch of
    the variant: the context variable is read, the module found once."""
    allocation = _allocation[0]
    if allocation is None:
        from triton.runtime import _allocation as allocation
        _allocation[0] = allocation
    current = getattr(allocation, "_allocator", None)
    if current is None or isinstance(current.get(), allocation.NullAllocator):
        triton.set_allocator(_scratch)


_allocation = [None]    # triton.runtime._allocation, imported at the first launch


def fall_back(launcher, error, operands, scale, c):
    """After the TMA variant failed to compile or run here (a Triton or driver without what it
    needs): say so, never take it again, and launch the layout on the module's kernel into
    ``c``; returns that layout."""
    name = getattr(launcher.kernel, "__name__", "a kernel")
    warnings.warn(f"einc: the TMA variant of {name} failed ({type(error).__name__}: {str(error)[:200]}); "
                  "its module's own kernel runs instead", RuntimeWarning, stacklevel=3)
    launcher.tma = None
    known = launcher._set_up(operands, scale)[1]
    known.run((*operands, c), scale)
    return known


class Variant:
    """The TMA kernel of one module, its autotuner and its configs."""

    def __init__(self, kernel, key, prune, autotuner):
        self.kernel = kernel
        self.names = set(getattr(kernel, "arg_names", ()) or kernel.fn.__code__.co_varnames)
        self.configs = configs()
        self.tuned = autotuner(kernel, configs=self.configs, key=[n for n in key if n in self.names],
                               prune_configs_by={"early_config_prune": prune})

    def applies(self, meta, axes, splits, operands, where: bool) -> bool:
        """Whether a layout with these constexprs and operands runs this kernel: ``axes``
        are A's, B's and C's :func:`axis` and the sizes the blocks must divide (the module's
        ``layout`` computes them: each a multiple of the smallest block, 64), ``where``
        whether the device has TMA (:meth:`Launcher.tma_device`)."""
        a_axis, b_axis, _, quanta, _ = axes
        return bool(where and splits == 1 and a_axis > 0 and b_axis > 0
                    and meta["M"] >= MIN_TILE and meta["N"] >= MIN_TILE and all(q % MIN_TILE == 0 for q in quanta)
                    and all(t.data_ptr() % 16 == 0 for t in operands))

    def meta(self, meta, axes, interpret: bool, processors: int) -> tuple[dict, object]:
        """This kernel's constexprs (the module kernel's, less the K split, plus the
        descriptors' axes: C is stored through one where its axis is 1) and its persistent
        grid: one program per multiprocessor, or per tile where there are fewer."""
        mine = {k: v for k, v in meta.items() if k in self.names}
        (qm, qn, qk), c_quanta = axes[3:]
        c_desc = axes[2] == 1 and all(q % b == 0 for q, b in zip(c_quanta, LARGEST))   # whatever the config
        mine.update(TMA_A=axes[0], TMA_B=axes[1], TMA_C=int(c_desc), TMA_QM=qm, TMA_QN=qn, TMA_QK=qk)
        rows, cols, batch = meta["M"], meta["N"], meta["BATCH"]
        tiles = lambda m: batch * triton.cdiv(rows, m["BLOCK_M"]) * triton.cdiv(cols, m["BLOCK_N"])  # noqa: E731
        if interpret:      # one config, so one grid, as for the module's kernel
            mine.update(BLOCK_M=64, BLOCK_N=64, BLOCK_K=max(16, min(64, triton.next_power_of_2(meta["K"]))))
            return mine, (min(processors, tiles(mine)),)
        return mine, lambda m: (min(processors, tiles(m)),)


__all__ = ["Variant", "axis", "supported_device", "ensure_allocator", "fall_back", "CONFIGS", "ANYWHERE"]
