"""Permuting copies compiled by TorchInductor, made off the critical path.

torch copies a permuted view in the destination's order, one element at a time along
the destination's innermost index; where that index is not the source's unit-stride one
(a transposing copy), each element read is a line of the source, and the copy costs
many times a plain copy of the same bytes; :mod:`~einc.runtime.torch_executor.permute_copy`'s
tiles and wide elements recover part of it.  The C++ loop TorchInductor (torch's own
code generator) writes for ``x.permute(p).contiguous()`` transposes 16 x 16 blocks in
vector registers, and runs near a plain copy's time on many copies where einc's does
not (bench/measured/permute-copy-2026-12-02.md).  Compiling one takes seconds, so:

- **A copy's first calls run einc's own copy**; its :data:`CALLS`-th (a copy run once
  or twice is never compiled: a script's) hands the copy's key (permutation,
  source shape, dtype, torch's thread count: the generated code is serial for one
  thread, an OpenMP loop for more) to a background daemon thread
  (:class:`~einc.runtime.background.Worker`), one job at a time, in order.
- **The job** asks a Python process of einc's (started by the first compile, ended
  after :data:`IDLE_S` without one, so that a burst of compiles pays its imports once;
  run :data:`NICE` steps nicer than this one, so that where the CPUs are busy the
  program's own work gets them first and the compile waits)
  to compile the FX graph ``x.permute(p).contiguous()`` with ``torch._inductor.compile``
  on an example of that shape and dtype, under that thread count (inductor's on-disk
  caches make a second compile of a key cheap); it checks the one kernel inductor
  built, ``kernel(const T* in, T* out)``, on random bits, and names its library.  Back in this process the job loads
  that library (``ctypes``: no inductor here, and no Python of the compile holding this
  interpreter's lock), runs it on a stand-in of random bits against einc's copy (every
  bit equal, or the key is marked failed), and times both :data:`ROUNDS` times,
  alternately: the compiled copy is kept where its fastest run is at most :data:`GAIN`
  times einc's, else the key is marked slower.  A compile that fails (no C++ compiler,
  a dtype or a torch it cannot do, inductor's internals changed) marks the key failed
  and hands over no other key in this process (what failed one would fail the next);
  nothing is raised into a call.  At most :data:`MOST` keys are handed over in a
  process, so that shapes which keep changing do not keep a compiling process busy.
- **Later calls** on that key run the compiled copy: a fresh contiguous tensor that
  the kernel writes.

Only where that is safe and worth it: ``EINC_COPY_COMPILE`` on (the default), a
:func:`~einc.runtime.torch_executor.permute_copy.untracked` CPU tensor (no autograd,
forward AD, ``torch.func``, tracing; no tensor subclass: fake tensors under
``torch.compile``), or one that only autograd records
(:func:`~einc.runtime.torch_executor.permute_copy.unwatched`: the copy is then a
:func:`recorded_copy`, whose gradient is the incoming one permuted back, as
``x.permute(p).contiguous()``'s), with no dispatch or function mode active (``make_fx``
records the ops a call runs, and a compiled copy's kernel is none), with the contiguous
strides the copy plans for, no lazy conjugate or negative bit, of a dtype in
:data:`ADMITTED`, and of at least :data:`MIN_BYTES`.  A copy moves bits and does no
arithmetic, so whichever copy ran, every bit of the result is the same.

Nothing of inductor's or dynamo's is imported or configured in this process: the
compile runs in the other one, under inductor's defaults and the environment's
settings.  At exit a compile still running is killed (a thread stopped inside torch's
C++ code at exit would abort the process, and a compile takes seconds); a forked child
starts with no compiled copy and a worker of its own.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import math
import os
import select
import subprocess
import sys
import threading
import time

import torch

from ... import config
from ..background import Worker
from . import reuse

MIN_BYTES = 1 << 18     # smaller copies: einc's own
CALLS = 3               # a key's calls before it is compiled (a copy run once or twice never is)
ROUNDS = 5              # timings of each copy in the background
GAIN = 0.8              # the compiled copy is kept where it takes at most this fraction of einc's
EXIT_WAIT_S = 2.0       # at exit, how long to wait for the job whose compile was killed
COMPILE_TIMEOUT_S = 600 # a compile running longer is killed (the key marked failed)
IDLE_S = 30             # the compiling process ends after this long without a compile
NICE = 10               # the compiling process's niceness over this one's: on busy CPUs the calls come first
MOST = 256              # keys handed over in a process at most (shapes that keep changing compile no more)
ADMITTED = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.uint8,
                      torch.int8, torch.int16, torch.int32, torch.int64))
PENDING, FAILED, SLOWER = "pending", "failed", "slower"     # a key's states, besides its compiled copy

_kernels: dict = {}     # key -> its calls so far (below CALLS), PENDING, FAILED, SLOWER or the compiled copy
_handed = 0             # keys handed over so far, or MOST once a compile failed (this process cannot compile)
_lock = threading.Lock()
_worker = Worker("einc-copies")
atexit.register(lambda: _stop())
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled


def _after_fork():
    global _worker, _server
    _worker, _server = Worker("einc-copies"), None
    _kernels.clear()    # (a job the parent had queued never runs here)


os.register_at_fork(after_in_child=_after_fork)


def admits(x) -> bool:
    """Whether a compiled copy may run on ``x`` (besides its strides, the caller's to check):
    see the module's docstring."""
    return (x.dtype in ADMITTED and x.numel() * x.element_size() >= MIN_BYTES and not x.is_conj()
            and not x.is_neg() and not _dispatch_modes() and not _function_modes() and config.copy_compile())


def ready(perm, shape, x, own):
    """The compiled copy of ``x`` (of ``shape``, copied as ``x.permute(perm).contiguous()``),
    or None while it is not ready, failed or slower; the :data:`CALLS`-th call of a key
    hands it to the background thread (``own``: einc's copy, to check and time it
    against)."""
    global _handed
    key = (perm, shape, x.dtype, torch.get_num_threads())
    fn = _kernels.get(key)
    if fn is None or fn.__class__ is int:
        with _lock:
            calls = _kernels.get(key, 0)
            if calls.__class__ is not int or _handed >= MOST:
                return None
            _kernels[key] = PENDING if calls + 1 >= CALLS else calls + 1
            _handed += calls + 1 >= CALLS
        if calls + 1 >= CALLS:
            _worker.submit(lambda: _make(key, own))
        return None
    return None if fn.__class__ is str else fn


def settled(perm, shape, x) -> bool:
    """Whether no compiled copy will run on ``x`` (of ``shape``, copied as
    ``x.permute(perm).contiguous()``) in this process: its key failed or was timed slower, or
    was never handed over and no more keys will be.  Checked first, it spares a large copy's
    later calls :func:`admits`' checks, which run on caches the copy's data has evicted."""
    state = _kernels.get((perm, shape, x.dtype, torch.get_num_threads()))
    return state is FAILED or state is SLOWER or (_handed >= MOST and (state is None or state.__class__ is int))


class _Recorded(torch.autograd.Function):
    """A compiled copy autograd records: the gradient of ``x.permute(perm).contiguous()``,
    the incoming gradient permuted back (a view, as autograd's own permute gives it)."""

    @staticmethod
    def forward(ctx, x, fn, perm):
        ctx.perm = perm
        return fn(x)

    @staticmethod
    def backward(ctx, grad):
        inverse = [0] * len(ctx.perm)
        for i, p in enumerate(ctx.perm):
            inverse[p] = i
        return grad.permute(inverse), None, None


def recorded_copy(fn, x, perm):
    """``fn(x)``, a compiled copy, where autograd records ``x``: differentiable (twice too)."""
    return _Recorded.apply(x, fn, perm)


def _make(key, own) -> None:
    """Compile, check and time ``key``'s copy (on the background thread)."""
    global _handed
    perm, shape, dtype, threads = key
    try:
        fn = compile_copy(perm, shape, dtype, threads)
    except Exception:       # noqa: BLE001 - no compiler, or an inductor that differs: none will compile
        with _lock:
            _kernels[key], _handed = FAILED, MOST
        return
    try:
        x = stand_in(shape, dtype)
        if not same_bits(fn(x), own(x)):
            raise AssertionError(f"inductor's copy {perm} of {shape} {dtype} changed bits")
        state = fn if faster(fn, own, x) else SLOWER
    except Exception:       # noqa: BLE001 - the key is marked; a call never sees the error
        state = FAILED
    with _lock:
        _kernels[key] = state


# The compiles, in a process of its own (started on the first, gone after IDLE_S without
# one): inductor's Python work never holds this process's interpreter lock, its imports
# and set-up are paid once for a burst of compiles, and a compile still running at exit
# is killed, not waited for.  Per request line ``[perm, shape, dtype, threads]`` it
# replies with the library inductor built and loaded for the graph's one kernel,
# ``kernel(const T* in, T* out)``, checked there on random bits, or the error.
_SERVER = r"""
import ctypes, json, os, re, select, sys
if hasattr(os, "nice"):
    os.nice(int(sys.argv[2]))       # (its compilers too: they inherit it)
replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)                       # (anything inductor prints goes where stderr goes)
import torch
import torch._inductor, torch.fx
from torch._inductor import codecache
paths, done, bindings = [], {}, codecache.CppPythonBindingsCodeCache
inner = bindings._load_library_inner.__func__
bindings._load_library_inner = classmethod(lambda cls, path, key: paths.append(path) or inner(cls, path, key))
KERNEL = re.compile(r'extern "C"\s+void\s+kernel\(const [\w:]+\* in_ptr0,\s*[\w:]+\* out_ptr0\)')


def build(perm, shape, dtype, threads):
    dtype = getattr(torch, dtype)
    torch.set_num_threads(threads)
    paths.clear()
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_method("contiguous", (graph.call_method("permute", (x, tuple(perm))),)))
    torch._inductor.compile(torch.fx.GraphModule(torch.nn.Module(), graph), [torch.empty(shape, dtype=dtype)])
    assert len(paths) == 1 and paths[0].endswith(".so"), paths
    with open(paths[0][:-3] + ".cpp") as source:
        assert KERNEL.search(source.read())
    x = torch.empty(shape, dtype=dtype)
    x.view(torch.uint8).random_(0, 2 if dtype == torch.bool else 256)
    out = torch.empty([shape[p] for p in perm], dtype=dtype)
    ctypes.CDLL(paths[0]).kernel(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(out.data_ptr()))
    assert torch.equal(out.view(torch.uint8), x.permute(perm).contiguous().view(torch.uint8))
    return paths[0]


while select.select([sys.stdin], [], [], float(sys.argv[1]))[0]:
    line = sys.stdin.readline()
    if not line:
        break
    try:
        if line not in done:
            done[line] = build(*json.loads(line))
        reply = {"path": done[line]}
    except Exception as e:
        reply = {"error": repr(e)[-2000:]}
    replies.write(json.dumps(reply) + "\n")
    replies.flush()
"""
_server = None          # the compiling process, while one runs


class _Kernel:
    """A compiled copy: a fresh contiguous tensor, written by ``kernel(in, out)``."""

    __slots__ = ("lib", "kernel", "shape", "dtype")

    def __init__(self, path, shape, dtype):
        self.lib = ctypes.CDLL(path)
        self.kernel = self.lib.kernel
        self.kernel.argtypes, self.kernel.restype = (ctypes.c_void_p, ctypes.c_void_p), None
        self.shape, self.dtype = shape, dtype

    def __call__(self, x):
        out = reuse.spare(self.shape, self.dtype, x.device)     # (a call's dead intermediate's memory)
        out = torch.empty(self.shape, dtype=self.dtype) if out is None else out
        self.kernel(x.data_ptr(), out.data_ptr())
        return out


def compile_copy(perm, shape, dtype, threads):
    """``x.permute(perm).contiguous()`` for contiguous tensors ``x`` of ``shape`` and ``dtype``,
    as inductor compiles it for ``threads`` of torch's threads (a serial loop for one, an
    OpenMP loop for more), in the compiling process (seconds)."""
    request = json.dumps([list(perm), list(shape), str(dtype).removeprefix("torch."), threads])
    for _ in range(2):      # (again where the process had just ended, idle)
        server = _serving()
        try:
            server.stdin.write(request + "\n")
            server.stdin.flush()
            line = server.stdout.readline() if select.select([server.stdout], [], [], COMPILE_TIMEOUT_S)[0] else ""
        except OSError:
            line = ""
        if line:
            break
        idle = server.poll() == 0
        _end(server)
        if not idle:
            raise RuntimeError("inductor's compiling process stopped or took too long")
    reply = json.loads(line)
    if "path" not in reply:
        raise RuntimeError(f"inductor's compile failed: {reply.get('error')}")
    return _Kernel(reply["path"], tuple(shape[p] for p in perm), dtype)


def _serving():
    """The compiling process, started where none runs."""
    global _server
    with _lock:
        if _server is None or _server.poll() is not None:
            if _server is not None:
                _end(_server)
            _server = subprocess.Popen([sys.executable, "-c", _SERVER, str(IDLE_S), str(NICE)], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        return _server


def _end(server, timeout=None) -> None:
    """Kill the compiling process ``server``, wait for it (at most ``timeout`` s) and close
    its pipes."""
    server.kill()
    try:
        server.wait(timeout)
    except subprocess.TimeoutExpired:
        return
    for pipe in (server.stdin, server.stdout):
        try:
            pipe.close()
        except (OSError, ValueError):   # (a pipe the killed process left broken)
            pass


def _stop() -> None:
    """At exit: drop the queued compiles, kill the compiling process, wait briefly for the job."""
    with _worker.cond:
        _worker.jobs.clear()
    server = _server
    if server is not None:
        _end(server, EXIT_WAIT_S)
    _worker.stop(EXIT_WAIT_S)


def stand_in(shape, dtype):
    """A contiguous tensor of random bits (NaN payloads, -0.0, subnormals among them; 0 or
    1 for bool)."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, dtype=torch.uint8).bool()
    return torch.randint(0, 256, (math.prod(shape) * dtype.itemsize,), dtype=torch.uint8).view(dtype).view(shape)


def same_bits(a, b) -> bool:
    """Whether ``a`` and ``b`` hold the same bits in the same shape and strides."""
    return (a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
            and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def faster(fn, own, x) -> bool:
    """Whether ``fn(x)``'s fastest of :data:`ROUNDS` runs takes at most :data:`GAIN` times
    ``own(x)``'s, timed alternately: in the thread's CPU time where torch runs one thread
    (other processes' time slices not counted), else on the wall clock (the copies run on
    several threads)."""
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    best = {fn: float("inf"), own: float("inf")}
    for _ in range(ROUNDS):
        for f in best:
            t0 = clock()
            f(x)
            best[f] = min(best[f], clock() - t0)
    return best[fn] <= GAIN * best[own]


def settle(timeout=None) -> bool:
    """Wait for the copies being compiled in the background (tests, benchmarks)."""
    return _worker.settle(timeout)


def seen() -> int:
    """How many keys have been handed over so far (benchmarks: whether a call handed one)."""
    return sum(v.__class__ is not int for v in list(_kernels.values()))


def state(perm, shape, dtype, threads=None):
    """A key's state: None (not handed over), ``PENDING``, ``FAILED``, ``SLOWER`` or ``"ready"``."""
    fn = _kernels.get((tuple(perm), tuple(shape), dtype, torch.get_num_threads() if threads is None else threads))
    return None if fn is None or fn.__class__ is int else fn if fn.__class__ is str else "ready"


def forget() -> None:
    """Wait for the background compiles, then drop every compiled copy (``einc.cache_clear``)."""
    global _handed
    _worker.settle()
    with _lock:
        _kernels.clear()
        _handed = 0


__all__ = ["ADMITTED", "CALLS", "EXIT_WAIT_S", "FAILED", "GAIN", "MIN_BYTES", "MOST", "PENDING", "ROUNDS", "SLOWER",
           "admits", "compile_copy", "faster", "forget", "ready", "recorded_copy", "same_bits", "seen", "settle",
           "settled", "stand_in", "state"]
