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
import threading

import torch

THREAD_LOCAL = 1        # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: only this thread's own captures count

_set = threading.local()    # .done: this thread's mode is set
_lock = threading.Lock()
_exchange = None            # the driver's cuThreadExchangeStreamCaptureMode, once looked up (False: none)


def _driver_exchange():
    """``cuThreadExchangeStreamCaptureMode`` of the CUDA driver torch loaded, or None."""
    global _exchange
    with _lock:
        if _exchange is None:
            _exchange = False
            for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
                try:
                    fn = ctypes.CDLL(name).cuThreadExchangeStreamCaptureMode
                except (OSError, AttributeError):
                    continue
                fn.argtypes, fn.restype = [ctypes.POINTER(ctypes.c_int)], ctypes.c_int
                _exchange = fn
                break
        return _exchange or None


def exempt() -> bool:
    """Set the calling thread's stream-capture mode to thread-local, once a thread, where
    CUDA is initialized; whether it is set.  Never on a caller's thread: only einc's own,
    which capture nothing."""
    if getattr(_set, "done", False):
        return True
    if not torch.cuda.is_initialized():
        return False            # (nothing of this thread can touch a capture yet)
    fn = _driver_exchange()
    if fn is None:
        return False
    mode = ctypes.c_int(THREAD_LOCAL)
    if fn(ctypes.byref(mode)) != 0:
        return False
    _set.done = True
    return True


__all__ = ["exempt", "THREAD_LOCAL"]
