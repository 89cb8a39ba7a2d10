"""A call's dead intermediates' memory, written again by its later steps (CPU only).

On the CPU torch takes a tensor's memory from ``malloc``, and glibc maps a large block (32
MiB or more, or past its dynamic mmap threshold) afresh for each tensor and unmaps it when
the tensor dies: the pages of a contraction's large intermediates are faulted in and
zeroed by the kernel on every call.  Inside one call the program
(:func:`einc.runtime.program.unroll`) knows when an intermediate is read for the last
time, so a later step's new tensor (a product's result, a transposing copy) may take that
memory instead.  The program opens :class:`Blocks` for a call
(:func:`einc.runtime.program.reused`) and keeps them current on its thread for every step
but the last; the ops that make a step's large new tensors ask :func:`spare` for their
memory.

What may be handed out, and when:

- only memory that :func:`spare` allocated in this call: never an operand's, nor a view
  of one, nor anything made before the call;
- only where nothing holds it but the record here (torch's use count of the storage): no
  live intermediate, view of one, or temporary of a running step does, nor anything a
  step gave away;
- with the same dtype and device as the request and at least its size (the smallest such
  block); where none is, the free blocks are dropped before a new one is made;
- held only across steps whose large new tensors all come from here (a matrix-product
  step with no sum or diagonal taken first and not made in chunks: its function's
  ``spares``): before any other step (a sum, an elementwise product, a reduction, a step
  in blocks, loops or chunks) and before the last, the free blocks are dropped, so that
  no free block is held while the call allocates a tensor of :data:`MIN_BYTES` or more
  of its own, and the memory it holds then is never more than without these blocks
  (a smaller allocation comes from glibc's heap, and an op's own temporaries inside a
  kernel are torch's);
- never in the last step: the call's result is memory nobody else has seen;
- a call's blocks are its own (made per call, current on the calling thread only), so
  threads running the same program at once share none, and they go with the call;
- a call runs without where autograd records it (grad enabled and an operand that
  requires grad: the tensors it saves must keep their values), under forward AD,
  tracing, ``torch.func`` or a tensor subclass (fake tensors under ``torch.compile``;
  :func:`~einc.runtime.torch_executor.permute_copy.unwatched`), or under a dispatch or
  function mode (which would see the ops' ``out=`` forms); and off the CPU: CUDA's
  caching allocator already serves a freed block to the next tensor of its size, within
  a call and across calls, with no fault.

Blocks below :data:`MIN_BYTES` are not handed out: glibc serves those from its heap's free
lists.  The writes are the ops' own, into other memory (``out=``, ``copy_``): the same
bits as the ops' fresh results.

A new block of :data:`HUGE_BYTES` (32 MiB) or more is one glibc maps afresh and the kernel
faults in, 4 KiB at a time, on its first write.  Before that write :func:`huge_pages` asks
Linux (4.6 or newer) for transparent huge pages under it (``madvise(MADV_HUGEPAGE)`` on its
2 MiB-aligned part), as NumPy does for its arrays (of 4 MiB or more there: below 32 MiB a
running process's blocks come from glibc's heap, already faulted in, where the advice gains
nothing and costs; bench/measured/page-faults-2026-12-07.md): it faults in 2 MiB at a time
where the kernel's transparent huge pages are in ``madvise`` or ``always`` mode, and changes
nothing where they are ``never``.  So does a new tensor of that size the last step makes through
:func:`spare` (a product's result, a transposing copy), and the one step of a one-step plan,
where the call could hold blocks (:data:`FRESH`): the same fresh memory the op would
allocate, made here.  ``EINC_HUGE_PAGES=off`` (or a system without the advice) leaves
those allocations to the ops.
"""

from __future__ import annotations

import ctypes
import functools
import math
import mmap
import platform
import re
import sys
import threading

import torch

from ... import config

MIN_BYTES = 1 << 20     # the smallest block handed out or recorded
MIN_ELEMENTS = MIN_BYTES // 8   # a program with no tensor this large opens no blocks (unroll)
HUGE_BYTES = 1 << 25    # a new tensor this large asks for huge pages: glibc maps it afresh (its largest
                        # mmap threshold); below it a running process's blocks come from its heap, already faulted
HUGE_PAGE = 1 << 21     # a transparent huge page on x86-64 and arm64 (4 KiB base pages)

_use_count = getattr(torch._C, "_storage_Use_Count", None)
_local = threading.local()


class Blocks:
    """The memory one call's :func:`spare` allocated: ``(storage, dtype)`` pairs.  Made
    only where ``usable`` (torch tells a storage's use count)."""

    usable = _use_count is not None

    __slots__ = ("held",)

    def __init__(self):
        self.held = []

    def take(self, shape, dtype, device):
        """A tensor of ``shape`` on a free block of ``dtype`` and ``device``, or a new one
        (recorded)."""
        need = dtype.itemsize
        for d in shape:
            need *= d
        best = None
        for storage, held_dtype in self.held:
            if (held_dtype == dtype and storage.device == device and storage.nbytes() >= need
                    and (best is None or storage.nbytes() < best.nbytes()) and _use_count(storage._cdata) == 1):
                best = storage
        if best is None:
            self.drop_free()
            out = torch.empty(shape, dtype=dtype, device=device)
            self.held.append((out.untyped_storage(), dtype))
            huge_pages(out)
            return out
        return torch.empty((0,), dtype=dtype, device=device).set_(best, 0, shape)

    def drop_free(self):
        """Let go of the blocks nothing else holds (their memory goes back to ``free``)."""
        self.held = [(storage, dtype) for storage, dtype in self.held if _use_count(storage._cdata) > 1]


@functools.cache
def _madvise():
    """libc's ``madvise`` where this is Linux 4.6 or newer (older kernels compacted memory
    for huge pages slowly enough that NumPy leaves them out too), else None."""
    version = re.match(r"(\d+)\.(\d+)", platform.release())
    if sys.platform != "linux" or not hasattr(mmap, "MADV_HUGEPAGE") or not version \
            or tuple(map(int, version.groups())) < (4, 6):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int
    return fn


def _advised(nbytes) -> bool:
    """Whether a new CPU tensor of ``nbytes`` asks for huge pages: :data:`HUGE_BYTES` or
    more, the advice there to give, ``EINC_HUGE_PAGES`` not off."""
    return nbytes >= HUGE_BYTES and _madvise() is not None and config.huge_pages()


def huge_pages(block) -> bool:
    """Ask for transparent huge pages under the 2 MiB-aligned part of ``block``'s memory (a
    CPU tensor not yet written) where :func:`_advised`; whether the kernel took the advice
    (a kernel built without them refuses it, which changes nothing)."""
    storage = block.untyped_storage()
    if block.device.type != "cpu" or not _advised(storage.nbytes()):
        return False
    start = storage.data_ptr()
    first, end = -(-start // HUGE_PAGE) * HUGE_PAGE, (start + storage.nbytes()) // HUGE_PAGE * HUGE_PAGE
    return end > first and _madvise()(first, end - first, mmap.MADV_HUGEPAGE) == 0


class Fresh:
    """What the last step of a call that could hold blocks has current instead (and the one
    step of a one-step plan with a large result): no block is handed out, but a new tensor
    of :data:`HUGE_BYTES` or more is made here, with huge pages asked for under it
    (:func:`huge_pages`), rather than by the op; None (the op's own allocation) otherwise."""

    held = ()

    @staticmethod
    def take(shape, dtype, device):
        if not _advised(math.prod(shape) * dtype.itemsize):
            return None
        out = torch.empty(shape, dtype=dtype, device=device)
        huge_pages(out)
        return out

    @staticmethod
    def drop_free():
        pass


FRESH = Fresh()


def current():
    """The blocks of the call running on this thread, or None."""
    return getattr(_local, "blocks", None)


def make_current(blocks):
    """Make ``blocks`` (or None) this thread's current; return the ones it replaces."""
    before = getattr(_local, "blocks", None)
    _local.blocks = blocks
    return before


def spare(shape, dtype, device):
    """An uninitialized tensor of ``shape`` (contiguous) for an op to write, from the
    current call's blocks (or, where :data:`FRESH` is current, a new one on huge pages),
    or None where neither is current (then the op allocates its own result, as it would
    without)."""
    blocks = getattr(_local, "blocks", None)
    if blocks is None or device.type != "cpu" or math.prod(shape) * dtype.itemsize < MIN_BYTES:
        return None
    return blocks.take(shape, dtype, device)


def sparing(fn):
    """``fn``, a step's function, marked as one whose large new tensors all come from
    :func:`spare` (``fn.spares``; the program holds free blocks across it), where it can
    carry the mark (not a builtin such as ``torch.bmm`` itself)."""
    if hasattr(fn, "__dict__"):
        fn.spares = True
    return fn


def into(op):
    """``op(a, b)`` (``torch.mm`` or ``torch.bmm``) writing its result into :func:`spare`'s
    tensor where a call's blocks are current."""
    def run(a, b):
        shape = (a.shape[0], b.shape[1]) if a.dim() == 2 else (a.shape[0], a.shape[1], b.shape[2])
        out = spare(shape, a.dtype, a.device)
        return op(a, b) if out is None else op(a, b, out=out)
    return run


def contiguous(x):
    """``x.contiguous()``, copied into :func:`spare`'s tensor where a call's blocks are
    current (a conjugate or negative view as ``contiguous`` keeps it: its own copy)."""
    if x.is_contiguous() or x.is_conj() or x.is_neg():
        return x.contiguous()
    out = spare(x.shape, x.dtype, x.device)
    return x.contiguous() if out is None else out.copy_(x)


def reshaped(x, shape):
    """``x.reshape(shape)``, its copy (where no view has ``shape``) made by :func:`contiguous`."""
    if getattr(_local, "blocks", None) is None:
        return x.reshape(shape)
    try:
        return x.view(shape)
    except RuntimeError:
        return contiguous(x).view(shape)
