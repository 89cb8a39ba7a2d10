"""Which backend runs each step of a plan that may run generated kernels.

Per step the candidates are a generated Triton kernel (``triton``) and torch: cuBLAS
with no copy where the step is one strided-batched matrix product on its operands as
they are (``blas``, :mod:`einc.runtime.torch_executor.blas`), and the torch executor's step
(``torch``: for a contraction, copies and then cuBLAS in the layout the copy-cost model
chose, :mod:`einc.runtime.torch_executor.ttgt`), which is the other candidate where there is no
``blas`` one, and a third beside it where its layout copies something; where that
step's product (16 MiB or more) is copied, permuted, into the result, the same made a
chunk of half the L2 cache at a time (``chunks``, :mod:`einc.runtime.torch_executor.chunked`), so
that the product is never written whole to memory.  Where the default kernel moved a
stranded unit-stride index into the tile's T axis or a 2-D N block
(:mod:`einc.codegen.lower`), the kernel lowered without that move (``plain``: M, N and K
ordered as the result and the other operand want, the stranded tensor's tile a gather)
is a candidate too: which of the two is faster depends on the shapes and the device.
The mode (``EINC_SELECT`` or the ``select=`` keyword) decides:

- ``learn`` (the default on CUDA): a first call that waits for no timing and no
  tuning.  Each step starts on the model's choice (:func:`einc.runtime.dispatch.static_choices`:
  cuBLAS for a copy-free matrix product, the kernel where it fuses or writes a permuted
  result, copies and cuBLAS otherwise); a step whose kernel is not compiled yet runs
  cuBLAS or the torch step meanwhile, while a background thread loads the kernel and
  compiles and tunes it on stand-in tensors of the same layout
  (:mod:`einc.runtime.learn`).  From the second call on, each call times one candidate
  per step with CUDA events (read on a later call: no synchronization), and once every
  candidate has :data:`einc.runtime.learn.SAMPLES` timings the fastest is kept and
  remembered, as measure mode's decisions are.
- ``measure``: on the first call of a key each step's candidates
  are timed on that call's own operands and intermediates (CUDA events, a few runs
  each, interleaved, after a first round that leaves out a candidate far behind, a
  kernel before it is autotuned: :func:`measure`; never while a CUDA graph is being
  captured) and the fastest is kept, as inductor's algorithm selection does with ATen.
  It costs the first call seconds where kernels are tuned.
- Decisions (``learn`` and ``measure``) are remembered in the cache folder
  (``decisions.json``), keyed by device, driver, CUDA, torch, triton and einc versions,
  the step's signature (indices, shapes, strides, dtype) and the names of its kernel
  candidates, which end in a hash of their source (:func:`signature`): a new process does
  not time again, and a changed kernel or version is timed afresh.  A damaged or foreign
  file is ignored with one warning; an older einc's file (format 1, whose keys lacked
  einc's version and the kernels) is replaced without one.  ``einc tune``
  (:mod:`einc.tools.tune`) makes them ahead of time, timing each step as ``measure``
  does under :func:`tuning`.
- ``model``: no timing: ``blas`` where the step is a copy-free matrix product, else the
  kernel (which reads any strides and fuses what torch would run as several ops).
- ``blas``: never a generated kernel.  ``kernel``: always one (the default under
  Triton's CPU interpreter, where timings mean nothing).

:data:`timer` times one run of one candidate; tests replace it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.metadata
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field

import torch

from .. import cachefiles, config
from ..errors import warn
from ..planner.equation import text_of
from . import capture
from .torch_executor.chunked import l2_bytes

REPEATS = 5
SCREEN = 4.0        # a screened kernel this many times the first round's fastest, or slower, is left out
# GPU cycles the stream sleeps before a kernel's first-round run (about a millisecond on an
# H100): a kernel's one-config run there is set up and launched through Triton's JIT path,
# whose host time (many times a small kernel's run: bench/measured/h100-2026-11-26/README.md)
# CUDA events would count and the kernel's usual launch does not pay
HIDE_HOST_CYCLES = 2_000_000
BACKENDS = ("blas", "triton", "torch", "chunks", "plain")
OPTIONAL = ("plain",)       # a candidate that fails its first run is dropped, not an error


@dataclass
class Choice:
    """What runs one step, why, and the measured µs per candidate (if measured)."""

    backend: str                    # one of BACKENDS
    reason: str
    timings: dict = field(default_factory=dict)
    left_out: tuple = ()            # the timed candidates left out after one untuned run


def median(values) -> float:
    """The median of ``values``: :mod:`statistics` is imported where a step is first timed,
    which a process whose calls time nothing never does."""
    import statistics
    return statistics.median(values)


def mode_for(select: str | None, device_type: str) -> str:
    """The mode in force: the keyword, else ``EINC_SELECT``; ``auto`` resolved by device."""
    mode = select or config.select()
    if mode == "auto":
        return "learn" if device_type == "cuda" else "kernel"
    return mode


# ----------------------------------------------------------------------- timing

def _cuda_time(fn, args, hide_host=False) -> float:
    """µs of one run of ``fn(*args)`` between CUDA events on the current stream of the
    operands' device.  ``hide_host``: the stream is kept busy first
    (:data:`HIDE_HOST_CYCLES`), so the host's work before the launch overlaps that instead
    of showing between the events: the device's time alone."""
    device = next(a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda)
    with torch.cuda.device(device):     # (events on another device's stream would time nothing)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sleep = getattr(torch.cuda, "_sleep", None) if hide_host else None
        if sleep is not None:
            sleep(HIDE_HOST_CYCLES)
        start.record()
        fn(*args)
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) * 1000.0


def _host_time(fn, args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - t0) * 1e6


def default_timer(fn, args, host: bool = True) -> float:
    """µs of one run of ``fn(*args)``: CUDA events on CUDA tensors (with ``host=False``, the
    host's work before the launch hidden: :func:`_cuda_time`), the host clock elsewhere."""
    on_cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    return _cuda_time(fn, args, hide_host=not host) if on_cuda else _host_time(fn, args)


timer = default_timer


def _screen_time(fn, args) -> float:
    """The first round's time of a kernel's one-config run: the device's alone where
    :data:`timer` is the default one (a replaced timer, a test's, times it as every other
    run).  Only the screen's: the other candidates pay their host time on every call, and
    it counts."""
    return default_timer(fn, args, host=False) if timer is default_timer else timer(fn, args)


def capturing() -> bool:
    """Whether a CUDA graph is being captured now (no timing then)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


# ----------------------------------------------------------------------- decisions on disk

_lock = threading.Lock()
os.register_at_fork(after_in_child=_lock._at_fork_reinit)   # a fork while another thread holds it
_decisions: dict | None = None
_warned = False


def _path():
    from .triton_executor import diskcache
    return diskcache.cache_root() / "decisions.json"


def decisions_path():
    """The decisions file (``decisions.json`` in the cache folder)."""
    return _path()


FORMAT = 2      # decisions.json's format: 1 keyed steps without einc's version and kernels
MAX_BYTES = 64 << 20    # a decisions file larger than this is not einc's


def _read(path) -> object:
    """The decisions file's JSON, read as every cache file is (:func:`einc.cachefiles.read`:
    a regular file, never through a link, never waiting on a FIFO, of bounded size);
    FileNotFoundError where there is none, ValueError where it is something else."""
    data = cachefiles.read(path, MAX_BYTES)
    if data is None:
        if not os.path.lexists(path):
            raise FileNotFoundError(path)
        raise ValueError(f"not a regular file of at most {MAX_BYTES} bytes")
    return json.loads(data.decode("utf-8"))


@functools.cache
def _driver() -> str:
    """The CUDA driver's version (``cuDriverGetVersion``), or ``?`` where it cannot be read."""
    version, lib = ctypes.c_int(), capture.driver()
    get = getattr(lib, "cuDriverGetVersion", None)
    if get is not None and get(ctypes.byref(version)) == 0:
        return str(version.value)
    return "?"


@functools.cache
def _triton_version() -> str:
    """Triton's installed version, from its package's metadata: a first call must not wait
    for triton's import (its kernels are compiled on background threads, which import
    it there)."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:                        # (installed under another name: pytorch-triton, a source build)
        import triton
        return triton.__version__
    except ImportError:
        return "none"


def _environment(device) -> str:
    version = getattr(sys.modules.get("einc"), "__version__", "?")   # (the package this module is in)
    tv = _triton_version()
    if device.type == "cuda":
        name = f"{torch.cuda.get_device_name(device)}|driver {_driver()}|cuda {torch.version.cuda}"
    else:
        name = device.type
    return f"{name}|torch {torch.__version__}|triton {tv}|einc {version}"


def signature(step, device, operands, kernels=()) -> str:
    """A step's key in the decisions file: device, driver and versions, indices, shapes,
    strides, dtype, and ``kernels``, the names of the step's kernel candidates (each ends in
    a hash of its source, so a changed kernel is a new key)."""
    terms = text_of(step.inputs, step.output)
    layout = ";".join(f"{tuple(o.shape)}:{tuple(o.stride())}" for o in operands)
    return f"{_environment(device)}|{terms}|{layout}|{operands[0].dtype}|{','.join(kernels)}"


def _load() -> dict:
    global _decisions, _warned
    if _decisions is None:
        try:
            data = _read(_path())
            if isinstance(data, dict) and data.get("format") == 1 and isinstance(data.get("steps"), dict):
                data = {"format": FORMAT, "steps": {}}      # an older einc's keys: stale, replaced
            if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("steps"), dict):
                raise ValueError("not an einc decisions file")
            _decisions = data["steps"]
        except FileNotFoundError:
            _decisions = {}
        except Exception as e:      # noqa: BLE001 - a damaged or foreign file: start afresh
            if not _warned:
                _warned = True
                warn(f"einc: ignoring the backend decisions file {_path()} ({type(e).__name__}: {e}); "
                     "steps will be timed again")
            _decisions = {}
    return _decisions


def step_of(key: str) -> dict:
    """The parts of a :func:`signature` that describe its step: ``step`` (its indices),
    ``layout`` (each operand's shape and strides), ``dtype`` and ``kernels``."""
    head, layout, dtype, kernels = key.rsplit("|", 3)
    return {"step": head.rsplit("|", 1)[-1], "layout": layout, "dtype": dtype,
            "kernels": kernels.split(",") if kernels else []}


class Tuning:
    """What :func:`tuning` holds: ``repeats``, the rounds :func:`measure` times; ``asked``,
    each step key :func:`remembered` was asked for, in order; ``decided``, key -> the
    :class:`Choice` kept under it; ``unwritten``, the error that kept one from the file."""

    def __init__(self, repeats: int):
        self.repeats = repeats
        self.asked: list = []
        self.decided: dict = {}
        self.unwritten: OSError | None = None     # why the decisions file could not be written, if it could not


_tuning: Tuning | None = None


@contextlib.contextmanager
def tuning(repeats: int = REPEATS):
    """``einc tune``: while held, :func:`remembered` answers only the decisions kept under it,
    so measure mode times every step afresh (once, however many calls meet it),
    :func:`measure` times ``repeats`` rounds, and the keys asked and the decisions kept
    are listed in the :class:`Tuning` it yields.  Decisions go to ``decisions.json`` as
    always.  One at a time, in one thread (a command line's)."""
    global _tuning
    if _tuning is not None:
        raise RuntimeError("select.tuning() is already held")
    _tuning = Tuning(repeats)
    try:
        yield _tuning
    finally:
        _tuning = None


def remembered(key: str) -> Choice | None:
    """The decision kept for a step signature, if any (under :func:`tuning`, only one
    kept under it)."""
    held = _tuning
    if held is not None:
        held.asked.append(key)
        return held.decided.get(key)
    with _lock:
        found = _load().get(key)
    if not isinstance(found, dict) or found.get("backend") not in BACKENDS:
        return None
    timings = found.get("us")
    return Choice(found["backend"], "measured earlier (decisions.json)",
                  dict(timings) if isinstance(timings, dict) else {})


def remember(key: str, choice: Choice) -> None:
    """Keep a decision, in memory and in the decisions file (merged with what other
    processes wrote meanwhile; written atomically)."""
    from .triton_executor import diskcache
    held = _tuning
    if held is not None:
        held.decided[key] = choice
    with _lock:
        decisions = _load()
        decisions[key] = {"backend": choice.backend, "us": choice.timings}
        try:
            path = _path()
            try:
                data = _read(path)
                on_disk = data["steps"] if data["format"] == FORMAT else {}
            except Exception:       # noqa: BLE001 - absent or damaged: ours replaces it
                on_disk = {}
            if not isinstance(on_disk, dict):   # a foreign file's "steps": ours replaces it
                on_disk = {}
            on_disk.update(decisions)
            diskcache.write(path, json.dumps({"format": FORMAT, "steps": on_disk}, indent=1, sort_keys=True).encode())
        except OSError as e:        # an unwritable folder: the decision lives in this process only
            if held is not None:
                held.unwritten = e


def forget() -> None:
    """Forget the decisions read from disk (read again on next use) and the warning given."""
    global _decisions, _warned
    with _lock:
        _decisions = None
        _warned = False


@contextlib.contextmanager
def cold_cache(args):
    """``clear()``, which overwrites the L2 cache of the CUDA devices ``args`` are on (a
    buffer of twice its size zeroed; 256 MB where torch does not tell the L2's size, as
    Triton's ``do_bench``), so a timed run does not find in L2 what the run before left
    there: uncleared, the candidates of ``gshard_combine`` ranked otherwise than
    ``do_bench`` ranks them (an H100: bench/measured/h100-2026-11-26/README.md).  A no-op
    for CPU tensors, and where the
    device has no room for the buffer.  The buffers are freed on exit."""
    buffers = []
    for d in {a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda}:
        try:
            buffers.append(torch.empty((2 * l2_bytes(d) or 256 * 10**6) // 4, dtype=torch.int32, device=d))
        except torch.OutOfMemoryError:      # a full device: timed warm rather than not at all
            pass

    def clear():
        for b in buffers:
            b.zero_()
    try:
        yield clear
    finally:
        buffers.clear()


def measure(candidates: dict, args, screens=None) -> Choice:
    """Time each candidate function on ``args``; the fastest, with every timing.

    A first round runs each candidate once untimed (compile, allocate), then times one
    run of it; a generated kernel runs there as its ``screens`` function has it (one
    config, untuned: :meth:`einc.runtime.triton_executor.launch.Launcher.screen`), so that it is not
    autotuned before it has shown it could win.  A kernel so screened whose time is
    :data:`SCREEN` times the round's fastest or more is left out (its time is kept among
    the timings): a kernel that loses by far would otherwise be autotuned, most of a
    first call (``pw_ccsd_aebf_*`` on an H100).  Its one-config run is timed on the
    device alone (:func:`_screen_time`): with the host's time counted, small kernels'
    one-config runs (set up and launched through Triton's JIT path) read many times the
    kernels' own time and were all left out, so steps the kernel had won (``ab,bc->ac``
    at 16×16) went to cuBLAS (both measured in bench/measured/h100-2026-11-26/README.md).
    The other candidates' first runs count the host time they pay on every call, so a
    kernel is left out only where its device time alone is :data:`SCREEN` times another's
    whole call; and they are never left out (on device time a host-bound
    step may look far behind a kernel it beats per call, or the other way).  The rest
    (a kernel: autotuned by its untimed run) are then timed in :data:`REPEATS` rounds, a
    call's time, one run of each a round, the order rotated every round (two candidates
    run A B, B A, A B, ...), and each keeps its median.  Timed one after the other
    instead, a clock or power drift of the device over the candidates' runs (hundreds of ms for
    large float64 products) favours whichever ran first.  Where one candidate is left,
    it is chosen without the rounds.  Before each timed run on a CUDA device its L2 cache
    is cleared (:func:`cold_cache`), as ``triton.testing.do_bench`` and inductor's
    autotuning clear it.  An :data:`OPTIONAL` candidate that raises is left out; any
    other's error is raised.
    """
    candidates, screens = dict(candidates), screens or {}

    def runs(name, fn) -> bool:
        try:
            fn(*args)
            return True
        except Exception:
            if name not in OPTIONAL:
                raise
            del candidates[name]        # (a plain kernel that does not compile: not a candidate)
            return False

    first, screened = {}, set()
    with cold_cache(args) as clear:
        for name in list(candidates):
            fn = screens.get(name)
            try:
                if fn is not None:
                    fn(*args)
                    screened.add(name)
            except Exception:           # the kernel's own launch will say whether it runs
                fn = None
            if fn is None:
                fn = candidates[name]
                if not runs(name, fn):
                    continue
            clear()
            first[name] = _screen_time(fn, args) if name in screened else timer(fn, args)
        fastest = min(first.values())
        left_out = {n: t for n, t in first.items() if n in screened and t > fastest and t >= SCREEN * fastest}
        for name in left_out:
            del candidates[name]
        for name in [n for n in candidates if n in screened]:
            runs(name, candidates[name])        # the kernel as it will run: autotuned
        names = list(candidates)
        samples = {name: [] for name in names}
        repeats = REPEATS if _tuning is None else _tuning.repeats
        for r in range(repeats if len(names) > 1 else 0):
            for name in names[r % len(names):] + names[:r % len(names)]:
                clear()
                samples[name].append(timer(candidates[name], args))
    timings = {name: round(median(samples[name]) if samples[name] else first[name], 3) for name in names}
    best = min(timings, key=timings.get)
    others = ", ".join(f"{n} {t:.4g} µs" for n, t in timings.items())
    if left_out:
        others += "; after the first round (kernels: one config, untuned, the device's time alone), left out: " + \
            ", ".join(f"{n} {t:.4g} µs" for n, t in left_out.items())
        timings.update({n: round(t, 3) for n, t in left_out.items()})
    return Choice(best, f"measured: {others}", timings, tuple(left_out))


__all__ = ["BACKENDS", "FORMAT", "Choice", "mode_for", "timer", "default_timer", "measure", "signature", "remembered",
           "remember", "forget", "capturing", "step_of", "tuning", "Tuning",
           "decisions_path"]
