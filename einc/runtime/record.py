"""``EINC_RECORD=FILE``: each call that makes a new plan cache entry appended to FILE, one
JSON object a line, in the format ``einc tune --calls`` reads (:mod:`einc.tools.tune`).

A program run once with the setting leaves the file of its calls (where kernels run,
the einsums of their gradients too: they make entries of their own); ``einc tune --calls FILE`` then
times their steps ahead of time.  A line holds the equation (as torch would be handed
it), each operand's shape, the dtype, each operand's strides where one is not
contiguous, and the device (for the reader; ``einc tune`` times on its own
``--device``).  Only a miss writes, and a call already written by this process is not
written again.  A call whose operands differ in dtype is not written (``einc tune``
takes one dtype a call).  Each line is one ``write`` on a file opened for appending, so
that processes sharing the file do not interleave their lines.  A file that cannot be
written is reported with one warning, and recording stops.
"""

from __future__ import annotations

import json
import os
import threading

from .. import config
from ..errors import warn

_lock = threading.Lock()
_written: set = set()
_failed = False


def note(eq, operands) -> None:
    """Append the call of ``eq`` on ``operands`` to ``EINC_RECORD``'s file, if set."""
    path = config.record()
    if path is None or _failed:
        return
    dtypes = {o.dtype for o in operands}
    if len(dtypes) != 1:
        return
    shapes = [list(o.shape) for o in operands]
    call = {"equation": eq.torch_text, "shapes": shapes, "dtype": str(operands[0].dtype).removeprefix("torch.")}
    if not all(o.is_contiguous() for o in operands):
        call["strides"] = [list(o.stride()) for o in operands]
    call["device"] = str(operands[0].device)
    seen = (str(path), eq.canonical, json.dumps(shapes), call["dtype"], json.dumps(call.get("strides")),
            call["device"])
    with _lock:
        if seen in _written:
            return
        _written.add(seen)
        _append(path, json.dumps(call) + "\n")


def _append(path, line: str) -> None:
    global _failed
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError as e:
        _failed = True
        warn(f"einc: cannot append to EINC_RECORD's file {path} ({e.strerror or e}); calls are not recorded")


def forget() -> None:
    """Write every call again, and try a file that failed again (``einc.cache_clear``)."""
    global _failed
    with _lock:
        _written.clear()
        _failed = False


__all__ = ["note", "forget"]
