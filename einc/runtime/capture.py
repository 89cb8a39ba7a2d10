"""einc's own threads and the CUDA graphs a caller captures.

While any thread of a process captures a CUDA graph in the global mode (the default of
``torch.cuda.graph``), CUDA forbids every other thread whose own mode is global (every
thread's, unless set) the calls it deems potentially unsafe (allocating memory, loading
a module, waiting on an event), and such a call fails and invalidates that capture.
einc's threads make those calls while they make a kernel ready (learn mode's jobs,
:mod:`einc.runtime.learn`; the compile pool, :mod:`~.triton_executor.autotune`), which
may well be while the caller captures: a model run for a few calls to warm up, then
captured, while its kernels still compile.  So each of them sets its own mode to
thread-local (:func:`exempt`) before its first CUDA call: a capture on another thread
then neither forbids its calls nor counts them, and its work, on streams of its own,
is no part of that capture.  What no mode allows during any capture, synchronizing
the whole device, those threads never do: a timing waits on its own events.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import torch

THREAD_LOCAL = 1        # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: only this thread's own captures count

_set = threading.local()    # .done: this thread's mode is set


@functools.cache
def driver():
    """The CUDA driver library (the one torch loaded), through ctypes, or None."""
    for name in ("libcuda.so.1", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _exchange():
    """The driver's ``cuThreadExchangeStreamCaptureMode``, or None."""
    fn = getattr(driver(), "cuThreadExchangeStreamCaptureMode", None)
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.POINTER(ctypes.c_int)], ctypes.c_int
    return fn


def exempt() -> bool:
    """Set the calling thread's stream-capture mode to thread-local, once a thread, where
    CUDA is initialized; whether it is set.  Never on a caller's thread: only einc's own,
    which capture nothing."""
    if getattr(_set, "done", False):
        return True
    if not torch.cuda.is_initialized():
        return False            # (nothing of this thread can touch a capture yet)
    fn = _exchange()
    if fn is None:
        return False
    mode = ctypes.c_int(THREAD_LOCAL)
    if fn(ctypes.byref(mode)) != 0:
        return False
    _set.done = True
    return True


__all__ = ["exempt", "driver", "THREAD_LOCAL"]
