"""Learn mode (``EINC_SELECT=learn``, the CUDA default): what runs each step, learned from
the caller's own calls, with nothing on the first call's critical path.

Per entry a :class:`Learner` holds each step's candidates (the same ones measure mode
times: :func:`einc.runtime.dispatch.candidates`) and its state:

- **The first call** runs each step's modelled choice (or the one ``decisions.json``
  remembers: learned by an earlier process, or timed ahead of time by ``einc tune``); a
  step whose choice is a kernel runs its fallback (cuBLAS or the torch step) until the
  kernel is ready.  Nothing is timed, nothing waits.
- **Kernels are made ready off the critical path**: a kernel candidate that a call would
  run on a layout (shapes, strides, dtype, 16-byte alignment, device, scale) not ready
  yet is handed to a background thread (:class:`_Worker`), which loads its module
  and launches it on stand-in tensors of that layout, on a stream of its own, so that
  Triton compiles and autotunes it there; only when that launch has finished does a call
  run the kernel on that layout.  Jobs start in order, :data:`JOBS` at a time, so that
  one kernel's configs compile while another's are timed (the timings themselves one
  launch at a time: :data:`~einc.runtime.triton_executor.autotune.TIMING`); one at a
  time where ``EINC_COMPILE_THREADS`` is 1.  A ``plain`` kernel (rarely the fastest)
  waits behind every other kernel queued, and so does, once, a job that ran out of
  device memory beside another.  A kernel that fails to load or to run there is dropped
  (the step keeps its other candidates); the error is reported on the caller's next
  call.
- **Each later call times one candidate per step** (the one with the fewest timings,
  among those ready) with :data:`timer` -- CUDA events around the step, read on a later
  call once the device has passed them, so no call synchronizes -- and once every
  candidate has :data:`SAMPLES` timings the one with the least median is kept and
  remembered (:func:`einc.runtime.select.remember`).  While every ready candidate has
  its timings and a kernel is still being made ready, calls run the fastest so far,
  untimed.  A candidate's first run on a layout in the caller is not timed: it pays
  one-time host costs (a kernel's first launch on the caller's thread, a library's first
  use of a shape) that the events count where the device waits for the host, and that
  no later call pays.
- **The decided program** is installed as the entry's run once a call ran every step's
  chosen function (each kernel ready on the layout it meets there): from then on a call
  is the unrolled program, as in every other mode.

A call that finds another thread learning on the same entry runs the torch executor
(:mod:`einc.runtime.dispatch` holds the per-entry lock); nothing is timed or handed to the
threads while a CUDA graph is being captured, and the threads set their CUDA calls apart
from such a capture (:mod:`einc.runtime.capture`).  Every candidate computes the same values, so
which one ran never changes an answer beyond rounding.
"""

from __future__ import annotations

import atexit
import os
import threading
import time

import torch

from . import capture as _capture
from .background import Worker as _Worker
from .select import SCREEN, Choice, median

SAMPLES = 3                     # timings of each candidate before a step's choice is kept
LEARNING = "; learning from the calls"      # the end of an undecided step's reason (explain)
KERNELS = ("triton", "plain")   # the candidates that must be made ready off the critical path
EXIT_WAIT_S = 30.0              # at exit, how long to wait for a job already running
JOBS = 2                        # kernels made ready at once: one compiling while one is timed


# ----------------------------------------------------------------------- timing a step in a call

def _event_timing(fn, args):
    device = next(a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda)
    stream = torch.cuda.current_stream(device)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    out = fn(*args)
    stop.record(stream)

    def reading():
        return start.elapsed_time(stop) * 1000.0 if stop.query() else None
    return out, reading


def _host_timing(fn, args):
    t0 = time.perf_counter()
    out = fn(*args)
    us = (time.perf_counter() - t0) * 1e6
    return out, lambda: us


def default_timer(fn, args):
    """``(fn(*args), reading)``: ``reading()`` is the run's µs, or None while it is not known
    yet.  CUDA events on the operands' device's current stream for CUDA tensors (known once
    the device has passed the second event; nothing waits for it), the host's clock
    elsewhere."""
    if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        return _event_timing(fn, args)
    return _host_timing(fn, args)


timer = default_timer


# ----------------------------------------------------------------------- the background threads

def _jobs() -> int:
    """How many kernels the background threads make ready at once."""
    from .. import config
    return JOBS if config.compile_threads() > 1 else 1


_worker = _Worker(threads=_jobs)
atexit.register(lambda: _worker.stop(EXIT_WAIT_S))


def _after_fork():
    global _worker, _streams
    _worker = _Worker(threads=_jobs)    # the parent's threads do not exist in the child
    _streams = threading.local()


os.register_at_fork(after_in_child=_after_fork)


def settle(timeout=None) -> bool:
    """Wait for the kernels being made ready in the background (tests; ``einc.cache_clear``)."""
    return _worker.settle(timeout)


def forget() -> None:
    """Wait for the background threads' jobs (``einc.cache_clear``).  None is dropped: an
    entry still held elsewhere (a ``contract_expression``) waits for its kernels' jobs."""
    _worker.settle()


# ----------------------------------------------------------------------- layouts and stand-ins

def layout_of(args, scaled: bool) -> tuple:
    """What a generated kernel compiles and tunes one launch for: each operand's shape,
    strides, dtype, 16-byte alignment and device, and whether the launch scales."""
    return tuple((tuple(a.shape), a.stride(), a.dtype, a.data_ptr() % 16, a.device) for a in args) + (scaled,)


def stand_ins(layout) -> list:
    """Zero-filled tensors of ``layout`` (fresh memory: a caller's tensors are never read)."""
    out = []
    for shape, stride, dtype, misaligned, device in layout[:-1]:
        itemsize = torch.empty((), dtype=dtype).element_size()
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0
        offset = misaligned // itemsize
        out.append(torch.zeros(extent + offset, dtype=dtype, device=device).as_strided(shape, stride, offset))
    return out


_streams = threading.local()    # per background thread: device -> its stream there


def _warm(fn, layout) -> None:
    """Launch ``fn`` once on stand-ins of ``layout`` and wait for it: on a CUDA device, on a
    stream of this thread's own, so the caller's stream never waits for the compile, nor
    this thread for another's."""
    scale = {"scale": 2.0} if layout[-1] else {}
    device = layout[0][4] if len(layout) > 1 else torch.device("cpu")
    if device.type != "cuda":
        fn(*stand_ins(layout), **scale)
        return
    mine = getattr(_streams, "by_device", None)
    if mine is None:
        mine = _streams.by_device = {}
    stream = mine.get(device)
    if stream is None:
        stream = mine[device] = torch.cuda.Stream(device)
    with torch.cuda.device(device), torch.cuda.stream(stream):     # (the stand-ins made on it too)
        fn(*stand_ins(layout), **scale)
    stream.synchronize()


# ----------------------------------------------------------------------- one entry's learning

class _Step:
    __slots__ = ("candidates", "kernels", "key", "choice", "decided", "samples", "pending", "ready", "waiting",
                 "failed", "fallback", "loaded", "left_out", "ran")

    def __init__(self):
        self.decided = False
        self.loaded: dict = {}      # kernel name -> its launch function, once loaded in the background
        self.samples: dict = {}     # name -> µs
        self.pending: list = []     # (name, reading)
        self.ready: set = set()     # (name, layout) whose kernel has been launched in the background
        self.waiting: set = set()   # (name, layout) handed to the background threads
        self.failed: dict = {}      # kernel name -> the error (reported on the next call)
        self.left_out: dict = {}    # kernel name -> its first timing, far behind another's
        self.ran: set = set()       # (name, layout) that has run in a call: its next run is warm


class Learner:
    """One entry's learning: per step its candidates, timings, and what is ready."""

    def __init__(self, static, load):
        """``static``: the modelled :class:`~einc.runtime.select.Choice` per step; ``load(s,
        name)``: the launch function of step ``s``'s kernel candidate ``name`` (loading
        its module), run on a background thread only."""
        self.static = static
        self.load = load
        self.steps: list = []             # a _Step per step set up so far
        self.lock = threading.Lock()        # one learning call at a time (dispatch takes it)
        self.state = threading.Lock()       # the steps' state, shared with the background threads
        self.whole = True                   # this call ran every step's decided function so far

    def setup(self, s, candidates, kernels, key, remembered) -> None:
        """Set up step ``s`` on the first call that reaches it: ``candidates``, the functions
        that need no background work; ``kernels``, the kernel candidates' names; ``key``,
        its decisions key; ``remembered``, the decision read from disk (or None)."""
        st = _Step()
        st.candidates, st.kernels, st.key = dict(candidates), tuple(kernels), key
        static = self.static[s].backend
        st.fallback = static if static in st.candidates else "blas" if "blas" in st.candidates else "torch"
        if remembered is not None and remembered.backend in set(st.candidates) | set(st.kernels):
            st.choice, st.decided = remembered, True
        else:
            st.choice = self.static[s]
        self.steps.append(st)

    def pick(self, s, args, scaled: bool, timing: bool, submit: bool = True):
        """``(name, function, timed)`` to run step ``s`` on ``args`` in this call (``scaled``:
        the launch scales its result); ``timing``: time a candidate; ``submit``: hand a
        kernel not ready on this layout to the background threads."""
        st = self.steps[s]
        if s == 0:
            self.whole = True
        with self.state:
            if not st.decided:
                self.whole = False
            else:
                name = st.choice.backend
                if name in KERNELS:
                    layout = layout_of(args, scaled)
                    if not self._ready(s, st, name, layout, submit):
                        self.whole = False
                        return st.fallback, st.candidates[st.fallback], False
                return name, self._function(st, name), False
            layout = layout_of(args, scaled) if st.kernels else None
            usable = list(st.candidates)
            usable += [k for k in st.kernels if self._ready(s, st, k, layout, submit)]
            if not timing:
                name = st.choice.backend if st.choice.backend in usable else st.fallback
                st.ran.add((name, layout))
                return name, self._function(st, name), False
            counts = {n: len(st.samples.get(n, ())) + sum(p == n for p, _ in st.pending) for n in usable}
            if min(counts.values()) >= SAMPLES:     # the step waits for a kernel: the fastest so far
                medians = {n: median(st.samples[n]) for n in usable if st.samples.get(n)}
                if medians:
                    name = min(medians, key=medians.get)
                    st.ran.add((name, layout))
                    return name, self._function(st, name), False
            name = min(usable, key=lambda n: counts[n])
            cold = (name, layout) not in st.ran     # a first run pays one-time host costs: not timed
            st.ran.add((name, layout))
            return name, self._function(st, name), not cold

    def _function(self, st, name):
        return st.candidates[name] if name in st.candidates else st.loaded[name]

    def _ready(self, s, st, name, layout, submit) -> bool:
        """Whether kernel ``name`` has run on ``layout`` in the background; if not, and it is
        not on its way, hand it to the background threads where ``submit`` (under ``self.state``)."""
        if name in st.failed:
            return False
        if (name, layout) in st.ready:
            return True
        if submit and (name, layout) not in st.waiting:
            st.waiting.add((name, layout))
            _worker.submit(lambda: self._make_ready(s, name, layout), later=name == "plain")
        return False

    def _make_ready(self, s, name, layout, again: bool = True) -> None:
        st = self.steps[s]
        _capture.exempt()       # (the caller may capture a CUDA graph meanwhile)
        try:
            fn = self.load(s, name)
            _warm(fn, layout)
        except Exception as e:      # noqa: BLE001 - reported on the next call, the candidate dropped
            if again and isinstance(e, torch.cuda.OutOfMemoryError) and _worker.running > 1:
                # another job's stand-ins may hold the memory: once more, behind the queue
                _worker.submit(lambda: self._make_ready(s, name, layout, again=False), later=True)
                return
            with self.state:
                self._lose(st, name, e)
                st.waiting.discard((name, layout))
            return
        with self.state:
            st.loaded[name] = fn
            st.ready.add((name, layout))
            st.waiting.discard((name, layout))

    def record(self, s, name, reading) -> None:
        with self.state:
            self.steps[s].pending.append((name, reading))

    def drop(self, s, name, error) -> None:
        """A kernel candidate that failed in a call: never run again here."""
        with self.state:
            self._lose(self.steps[s], name, error)

    def _lose(self, st, name, error) -> None:
        """Drop kernel candidate ``name`` (``error``: reported once; None: left out quietly);
        a step that had chosen it learns again among the others (under ``self.state``)."""
        st.failed[name] = error
        if st.decided and st.choice.backend == name:
            st.decided = False
            st.choice = Choice(st.fallback, f"the remembered {name} failed{LEARNING}")

    def failures(self) -> list:
        """``(step, name, error)`` of the background failures not reported yet (each once)."""
        found = []
        with self.state:
            for s, st in enumerate(self.steps):
                for name, e in st.failed.items():
                    if e is not None:
                        found.append((s, name, e))
                        st.failed[name] = None
        return found

    def after_call(self, read: bool = True):
        """Read the timings known by now, keep a step's choice once every candidate has
        :data:`SAMPLES` of them; the functions to install where every step is decided and
        this call ran them all, else None.  Also returns the steps decided in this call.
        ``read=False`` (while the caller captures a CUDA graph) reads none: querying an
        event is a call CUDA forbids the capturing thread, and it would break the capture."""
        decided = []
        with self.state:
            for st in self.steps:
                if read:
                    still = []
                    for name, reading in st.pending:
                        us = reading()
                        if us is None:
                            still.append((name, reading))
                        else:
                            st.samples.setdefault(name, []).append(us)
                    st.pending = still
                if st.decided:
                    continue
                self._screen(st)
                names = list(st.candidates) + [k for k in st.kernels if k not in st.failed]
                if all(len(st.samples.get(n, ())) >= SAMPLES for n in names):
                    medians = {n: round(median(st.samples[n]), 3) for n in names}
                    best = min(medians, key=medians.get)
                    shown = ", ".join(f"{n} {t:.4g} µs" for n, t in medians.items())
                    if st.left_out:
                        shown += "; left out after one timing: " + \
                            ", ".join(f"{n} {t:.4g} µs" for n, t in st.left_out.items())
                        medians.update(st.left_out)
                    st.choice = Choice(best, f"learned from the calls (median of {SAMPLES}): {shown}", medians)
                    st.decided = True
                    decided.append((st.key, st.choice))
            whole, self.whole = self.whole, True
            done = whole and len(self.steps) == len(self.static) and all(st.decided for st in self.steps)
            functions = [self._function(st, st.choice.backend) for st in self.steps] if done else None
        return functions, decided

    def _screen(self, st) -> None:
        """Leave out a kernel whose first timing is :data:`~einc.runtime.select.SCREEN` times
        another candidate's fastest or more: its calls would cost the caller that much more
        for the timings still to come (measure mode's first round does the same)."""
        timed = {n: min(t) for n, t in st.samples.items() if t}
        for k in st.kernels:
            if k in timed and k not in st.failed and any(timed[k] >= SCREEN * t for n, t in timed.items() if n != k):
                self._lose(st, k, None)
                st.left_out[k] = round(timed[k], 3)

    def choices(self) -> list:
        return [st.choice for st in self.steps]


__all__ = ["Learner", "SAMPLES", "LEARNING", "KERNELS", "JOBS", "timer", "default_timer", "settle", "forget",
           "layout_of", "stand_ins"]
