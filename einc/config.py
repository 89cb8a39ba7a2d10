"""Environment settings, parsed and validated in one place.

Each setting is read from the environment when it is asked for (so a test or a
program can change it between calls) and checked then: a bad value raises
:class:`~einc.errors.ConfigError` naming the variable, its value and what is
accepted.  An empty value counts as unset.  The settings a plan or its run reads are
also all checked whenever a key is planned (``runtime/engine.py``'s ``check_settings``),
so a bad one is refused by the call that plans, not deep in a later one.

``EINC_CACHE_SIZE``    how many plans the in-memory cache keeps: a positive integer
                       (default 4096); read once, when the engine is imported
                       (``einc.set_cache_size`` changes it afterwards).
``EINC_CACHE_DIR``     the cache folder: generated kernel modules (its ``kernels``
                       folder), remembered contraction paths (``paths``) and learn
                       mode's decisions (``decisions.json``): an absolute path, ``~``
                       expanded.  Default
                       ``$XDG_CACHE_HOME/einc``, or ``~/.cache/einc`` where
                       ``XDG_CACHE_HOME`` is unset, empty or relative (the XDG rules
                       say to ignore a relative value).
``EINC_CACHE_MAX_MB``  the bound on the kernel modules on disk, in megabytes (10^6
                       bytes): a positive number, decimals allowed (default 100).  The
                       least recently used modules are deleted beyond it.
``EINC_BACKEND``       ``auto`` (default): generated Triton kernels for CUDA tensors, the
                       torch executor otherwise; ``torch``: always the torch executor;
                       ``triton``: generated kernels for CPU tensors too, run by Triton's
                       interpreter (einc sets ``TRITON_INTERPRET=1`` for that where it
                       is unset, before it imports triton, where no CUDA device is present).
``EINC_SELECT``        where generated kernels may run, what runs each step: ``auto``
                       (default: ``learn`` on CUDA, ``kernel`` under the interpreter),
                       ``learn`` (the first call runs the model's choice at once while
                       kernels compile in background threads; later calls time one
                       candidate each, the fastest is kept and remembered in the cache
                       folder), ``measure`` (time cuBLAS / torch ops and the kernel on
                       the first call of a key, keep the faster, remember it),
                       ``model`` (decide without timing), ``blas`` (never a generated
                       kernel), ``kernel`` (always one).  The keyword ``select=`` of
                       ``einc.einsum`` overrides it.
``EINC_LAYOUT``        the result's layout where a call does not pass ``layout=``:
                       ``contiguous`` (default: a fresh standard-contiguous tensor) or
                       ``any`` (a fresh dense, non-overlapping tensor in whatever order
                       einc's cheapest plan writes it, as torch.einsum and opt_einsum
                       return; never a view of an operand).  Read when a key is first
                       planned: call ``einc.cache_clear()`` after changing it.
``EINC_SLICE_OVERHEAD`` the most a ``memory_limit`` may cost: a sliced plan estimated at
                       more than this many times the unsliced contraction's time (and
                       more than a second) raises :class:`~einc.errors.MemoryLimitError`;
                       a positive number (default 100), or ``off`` (``none``, ``inf``,
                       any case) to run whatever it costs.
``EINC_NEW_SHAPES``    how einc plans a new shape: ``class`` (default) runs a small call
                       of up to eight operands on the plan of its size class, planned
                       once per class (see ``runtime/sizeclass.py``), and plans every
                       other call per shape; ``plan`` plans every call per shape, each
                       new shape on its first call; ``torch`` gives a call of at most
                       2**20 multiply-adds to torch's own einsum op, every time, so a
                       shape that changes every call costs no plan (each a rule on the
                       call, never on what ran before: see ``runtime/admission.py``).
``EINC_COPY_COMPILE``  ``on`` (default): a large transposing copy of the torch executor,
                       on the CPU, runs as C++ code TorchInductor compiles for it in a
                       background thread, once that is ready and timed faster than
                       einc's own copy (``runtime/torch_executor/compiled_copy.py``);
                       ``off``: never (no compile, no thread).
``EINC_HUGE_PAGES``    ``on`` (default): a tensor of 32 MiB or more that the torch executor
                       makes for a call on the CPU that nothing records (an intermediate's
                       block, a product's result) asks Linux for transparent huge pages
                       before its first write, as NumPy does for its arrays
                       (``runtime/torch_executor/reuse.py``); ``off``: never (the ops
                       allocate their results).
``EINC_COMPILE_THREADS`` how many threads (one pool for the process) compile generated
                       kernels' configs side by side on a first launch of a layout,
                       before Triton's autotuner times them
                       (``runtime/triton_executor/autotune.py``): a
                       positive integer (default: the CPUs this process may run on, at
                       most 8); ``1`` leaves each config to the autotuner, one at a time,
                       and learn mode makes one kernel ready at a time (else two: one
                       compiling while another is timed).
``EINC_RECORD``        a file to which each call that makes a new plan cache entry is
                       appended, one JSON object a line, for ``einc tune --calls``:
                       an absolute path, ``~`` expanded (default: none, nothing
                       recorded; see ``runtime/record.py``).
``EINC_DEBUG``         ``1``/``true``/``yes``/``on`` print tracebacks in the command
                       line; ``0``/``false``/``no``/``off`` (default) do not.

``TRITON_INTERPRET`` is Triton's, not einc's: :func:`triton_interpret` reads it the way
Triton does (true for ``1``, ``true``, ``yes``, ``on``, ``y`` in any case, false for
anything else), so that einc and Triton never disagree about it.

This module uses the standard library only (the command line imports it without
torch).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import ConfigError

BACKENDS = ("auto", "torch", "triton")
DEFAULT_CACHE_SIZE = 4096
DEFAULT_CACHE_MAX_MB = 100
DEFAULT_SLICE_OVERHEAD = 100
NO_SLICE_BOUND = ("off", "none", "inf")    # EINC_SLICE_OVERHEAD's words for no bound (any case)
MB = 10 ** 6

# Triton 3.x (knobs.env_bool -> getenv_bool): the lower-cased value is one of these.
TRITON_TRUE = ("1", "true", "yes", "on", "y")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

_INTEGER = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")     # 100, 2.5, .5, 1e9


def _raw(name: str) -> str | None:
    """The variable's value, or None where it is unset or empty (blank).  Settings are read
    on every call that plans (a new tiny shape of a size class among them), so the read
    skips ``os.environ.get``'s Mapping frames and key encoding: the encoded key is kept,
    and the value looked up in the environment's own dict, which every change through
    ``os.environ`` updates."""
    environ = os.environ
    try:
        raw = environ._data.get(_ENCODED.get(name) or _encoded(environ, name))
    except AttributeError:              # an environment replaced by a plain mapping
        value = environ.get(name)
    else:
        value = None if raw is None else environ.decodevalue(raw)
    if value is None or not value.strip():
        return None
    return value


_ENCODED: dict = {}


def _encoded(environ, name: str):
    _ENCODED[name] = environ.encodekey(name)
    return _ENCODED[name]


def _default_where_unset(name: str, default):
    """A setting's reader made to answer ``default`` where the variable is not in the
    environment at all, in its own one frame (a setting read on every miss of the plan
    cache -- each new tiny shape of a size class -- is almost always unset); set, even blank,
    the reader answers, as it would have."""
    def decorate(read):
        def reader():
            environ = os.environ
            try:
                raw = environ._data.get(_ENCODED.get(name) or _encoded(environ, name))
            except AttributeError:      # an environment replaced by a plain mapping
                return read()
            return default if raw is None else read()
        reader.__name__, reader.__qualname__, reader.__doc__ = read.__name__, read.__qualname__, read.__doc__
        return reader
    return decorate


def _bad(name: str, value: str, expected: str) -> ConfigError:
    return ConfigError(f"{name}={value!r}: expected {expected}")


def cache_size() -> int:
    """``EINC_CACHE_SIZE``: how many plans the in-memory cache keeps (default 4096)."""
    value = _raw("EINC_CACHE_SIZE")
    if value is None:
        return DEFAULT_CACHE_SIZE
    text = value.strip()
    if not _INTEGER.fullmatch(text) or int(text) < 1:
        raise _bad("EINC_CACHE_SIZE", value,
                   f"a positive integer (the number of plans kept in memory; default {DEFAULT_CACHE_SIZE})")
    return int(text)


DEFAULT_COMPILE_THREADS = 8      # the most threads by default


def compile_threads() -> int:
    """``EINC_COMPILE_THREADS``: threads compiling a new layout's configs side by side
    (default: the CPUs this process may run on, at most 8)."""
    value = _raw("EINC_COMPILE_THREADS")
    if value is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return max(1, min(DEFAULT_COMPILE_THREADS, cpus))
    text = value.strip()
    if not _INTEGER.fullmatch(text) or int(text) < 1:
        raise _bad("EINC_COMPILE_THREADS", value,
                   "a positive integer (threads compiling a kernel's configs; 1: one at a time)")
    return int(text)


def slice_overhead() -> float:
    """``EINC_SLICE_OVERHEAD``: the largest estimated sliced / unsliced time einc runs
    (default 100; ``off``, ``none`` or ``inf``: no bound, read as ``inf``)."""
    value = _raw("EINC_SLICE_OVERHEAD")
    if value is None:
        return DEFAULT_SLICE_OVERHEAD
    text = value.strip().lower()
    if text in NO_SLICE_BOUND:
        return float("inf")
    if not _DECIMAL.fullmatch(text) or float(text) <= 0:
        raise _bad("EINC_SLICE_OVERHEAD", value,
                   "a positive number (the most a memory_limit may cost, in times the unsliced contraction's "
                   f"estimated time; default {DEFAULT_SLICE_OVERHEAD}), or off, none or inf (no bound)")
    return float(text)


def cache_max_bytes() -> int:
    """``EINC_CACHE_MAX_MB`` in bytes: the bound on the kernel modules on disk."""
    value = _raw("EINC_CACHE_MAX_MB")
    if value is None:
        return DEFAULT_CACHE_MAX_MB * MB
    text = value.strip()
    if not _DECIMAL.fullmatch(text) or not 0 < float(text) < float("inf"):
        raise _bad("EINC_CACHE_MAX_MB", value,
                   "a positive number of megabytes, decimals allowed (the bound on the kernel modules on disk; "
                   f"default {DEFAULT_CACHE_MAX_MB})")
    return max(1, round(float(text) * MB))


def _expand(value: str) -> str:
    return os.path.expanduser(value)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/einc``, or ``~/.cache/einc`` (a relative XDG_CACHE_HOME is ignored)."""
    xdg = _raw("XDG_CACHE_HOME")
    if xdg is not None and os.path.isabs(_expand(xdg)):
        return Path(_expand(xdg)) / "einc"
    home = os.path.expanduser("~")
    if not os.path.isabs(home):
        raise ConfigError("einc cannot find your home folder for its kernel cache (~/.cache/einc): "
                          "set EINC_CACHE_DIR to an absolute path")
    return Path(home) / ".cache" / "einc"


def cache_dir_is_default() -> bool:
    """Whether the cache folder is the default one (einc's by name), not ``EINC_CACHE_DIR``."""
    return _raw("EINC_CACHE_DIR") is None


def cache_dir() -> Path:
    """``EINC_CACHE_DIR`` (``~`` expanded, absolute), else :func:`default_cache_dir`."""
    value = _raw("EINC_CACHE_DIR")
    if value is None:
        return default_cache_dir()
    path = _expand(value)
    if not os.path.isabs(path):
        raise _bad("EINC_CACHE_DIR", value,
                   "an absolute path (~ is expanded; a relative path would depend on the working folder)")
    return Path(path)


def _choice(name: str, choices, expected: str) -> str:
    """The variable's value among ``choices`` (any case; the first is the default)."""
    value = _raw(name)
    if value is None:
        return choices[0]
    mode = value.strip().lower()
    if mode not in choices:
        raise _bad(name, value, expected)
    return mode


def backend() -> str:
    """``EINC_BACKEND``: ``auto`` (default), ``torch`` or ``triton`` (any case)."""
    return _choice("EINC_BACKEND", BACKENDS, "one of auto (kernels for CUDA tensors), torch (never kernels), "
                   "triton (kernels for CPU tensors too, under Triton's interpreter)")


NEW_SHAPES = ("class", "plan", "torch")


@_default_where_unset("EINC_NEW_SHAPES", NEW_SHAPES[0])
def new_shapes() -> str:
    """``EINC_NEW_SHAPES``: ``class`` (default), ``plan`` or ``torch`` (any case)."""
    return _choice("EINC_NEW_SHAPES", NEW_SHAPES, "class (a small call of up to eight operands runs its size "
                   "class's plan), plan (every call is planned per shape) or torch (a call of at most 2**20 "
                   "multiply-adds runs torch's einsum op, every time)")


SELECT = ("auto", "learn", "measure", "model", "blas", "kernel")


def select() -> str:
    """``EINC_SELECT``: how each step's backend is chosen (default ``auto``)."""
    return _choice("EINC_SELECT", SELECT, "one of auto, learn (learn from later calls), measure (time on the "
                   "first call), model (no timing), blas (cuBLAS or torch ops, no generated kernel), "
                   "kernel (generated kernels)")


LAYOUTS = ("contiguous", "any")


def layout() -> str:
    """``EINC_LAYOUT``: the result's layout, ``contiguous`` (default) or ``any`` (any case)."""
    return _choice("EINC_LAYOUT", LAYOUTS, "contiguous (a fresh standard-contiguous result) or any (a fresh dense "
                   "result in the order einc's plan writes it)")


@_default_where_unset("EINC_RECORD", None)
def record() -> Path | None:
    """``EINC_RECORD``: the file that calls making new entries are appended to, or None."""
    value = _raw("EINC_RECORD")
    if value is None:
        return None
    path = _expand(value)
    if not os.path.isabs(path):
        raise _bad("EINC_RECORD", value,
                   "an absolute path (~ is expanded; a relative path would depend on the working folder)")
    return Path(path)


def _flag(name: str, default: bool, on: str, off: str) -> bool:
    """A yes/no setting: ``default`` where unset; ``on``/``off`` say what each means in the error."""
    value = _raw(name)
    if value is None:
        return default
    flag = value.strip().lower()
    if flag in _TRUE:
        return True
    if flag in _FALSE:
        return False
    raise _bad(name, value, f"one of {', '.join(_TRUE)} ({on}) or {', '.join(_FALSE)} ({off})")


def debug() -> bool:
    """``EINC_DEBUG``: whether the command line prints tracebacks."""
    return _flag("EINC_DEBUG", False, "tracebacks", "none")


def copy_compile() -> bool:
    """``EINC_COPY_COMPILE``: whether large transposing copies may run compiled (default on)."""
    return _flag("EINC_COPY_COMPILE", True, "compiled copies, the default", "never")


def huge_pages() -> bool:
    """``EINC_HUGE_PAGES``: whether the torch executor's large new tensors on the CPU ask
    Linux for transparent huge pages (default on)."""
    return _flag("EINC_HUGE_PAGES", True, "huge pages asked for, the default", "never")


def triton_interpret() -> bool | None:
    """``TRITON_INTERPRET`` as Triton reads it; None where it is unset or empty.

    True exactly where Triton runs its interpreter: the lower-cased value is one of
    :data:`TRITON_TRUE`.  Any other value (``0``, ``false``, ``2``, ``" 1"``) is false,
    as it is for Triton.
    """
    value = os.environ.get("TRITON_INTERPRET")
    if value is None or value == "":
        return None
    return value.lower() in TRITON_TRUE
