"""What einc adds to Triton's autotuner, which times a generated kernel's configs on the
first launch of a layout (:class:`~.launch.Launcher`).

- **Its options** (:data:`OPTIONS`, for ``triton.autotune``, where the installed Triton
  takes them): results kept in Triton's cache folder across processes
  (``cache_results``), and :func:`tuning_bench` as its timer.
- **The timer** (:func:`tuning_bench`) times a slow config by one run, a fast one over
  fewer runs than Triton's default, and waits on its own events only, never on the whole
  device (:mod:`einc.runtime.capture`); pool threads leave the caller's CUDA graph
  captures alone (:func:`einc.runtime.capture.exempt`).
- **Compiling side by side** (:func:`precompile`).  The autotuner compiles a config when
  it first runs it, one config after another, and a first launch times up to a dozen
  (its table, pruned per shape): that launch paid as many compiles in a row, and on learn
  mode's background thread they are most of the wait before a kernel is ready.  Triton's
  compiler spends most of its time outside the GIL (its MLIR and LLVM passes, ``ptxas``),
  so threads compile configs side by side.  When the autotuner starts timing the configs
  of a first launch (:func:`before_timing`: not where a result it kept on disk answers),
  :func:`precompile` compiles each config with
  ``JITFunction.warmup`` (compile, no launch), given exactly the arguments and the
  config's keywords that the autotuner launches it with, so that the autotuner's run
  finds it in the kernel's cache; then it loads it (Triton builds a signature's launcher
  on the first load).  The calling thread first sets up what Triton keeps per kernel and
  device (the kernel's argument binder and the device's target, :func:`_prepare`); then
  every config goes to the process's pool of compile threads (``EINC_COMPILE_THREADS``,
  :func:`einc.config.compile_threads`), so a kernel's compiling
  takes about its slowest config's time where there are threads enough.  Kernels that
  compile at once (learn mode's two jobs) share that pool: the threads compiling, and
  the GIL their Python parts hold, stay within the setting.  Where the
  installed Triton keeps that state elsewhere, the first config compiles on the calling
  thread instead, which sets it up.
  With one thread (``EINC_COMPILE_THREADS=1``) the calling thread compiles them one
  after another, still before the first timing (so that their spills are known).
  A config that fails to compile or to load is left to the autotuner, which meets the
  same error and handles it as it does without einc (one over the device's resources is
  skipped).
  Triton's own ``AsyncCompileMode`` compiles in threads too, but it is private and
  loads nothing.
- **No config that spills much where a config compiles without** (:func:`spilling`, as
  inductor's ``spill_threshold``: :data:`SPILL_WORDS`).  A compiled and loaded kernel reports its
  registers and its local memory per thread (``n_regs``, ``n_spills``: the driver's
  local size in 4-byte words, triton 3.6 to 3.9), which for these kernels is their
  register spills.  Where :func:`precompile` compiled the configs of a launch being
  timed and at least one of them reads ``n_spills`` 0, the autotuner skips each config
  that reads more than :data:`SPILL_WORDS` (its timing is infinite, as for a config over
  the device's resources: :func:`autotuner`), so it never picks a config whose registers
  spill much to local memory when one of the same kernel does not.  Nothing is dropped where every config spills,
  nor a config that failed to compile (the autotuner meets its error); the config a
  kernel's first untuned run takes (``Launcher.first_config``) is left as it is.
- **One launch's timings at a time** (:data:`TIMING`).  Learn mode makes two kernels
  ready at once, so that one compiles while the other is timed; two launches timed at
  once would share the device and each time the other's runs too.  From its first timing
  to the end of the launch, a launch made under :func:`before_timing` holds a lock of the
  process; its compiling, before the first timing, holds nothing.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
import triton

from ... import config as _config
from .. import capture as _capture

SLOW_MS = 5.0      # a config whose run takes this long is timed by one run
REP_MS = 40        # ms of runs that time a faster config (inductor's CachingAutotuner's too)


def _one_run_ms(fn) -> float:
    """ms of one run of ``fn`` on the current CUDA stream."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop)


_tuning = threading.local()     # per thread: what to run when the autotuner starts timing
TIMING = threading.Lock()       # held by the launch whose configs are being timed


@contextlib.contextmanager
def before_timing(compile_all):
    """Run ``compile_all()`` when the autotuner starts timing configs for a launch made in
    this block on this thread; never where its cache answers (a result Triton kept on
    disk), which compiles the chosen config alone.  A failure there is ignored: the
    autotuner compiles each config itself.  From that first timing to the end of the
    block the thread holds :data:`TIMING`; the configs :func:`precompile` found spilling
    there are skipped (:func:`autotuner`) until its end."""
    _tuning.pending, _tuning.armed, _tuning.holds, _tuning.dropped = compile_all, True, False, ()
    try:
        yield
    finally:
        if _tuning.holds:
            TIMING.release()
        _tuning.pending, _tuning.armed, _tuning.holds, _tuning.dropped = None, False, False, ()


def _compile_pending() -> None:
    """Run this thread's ``compile_all`` of :func:`before_timing`, once (at the first timing)."""
    pending = getattr(_tuning, "pending", None)
    if pending is not None:
        _tuning.pending = None
        try:
            pending()
        except Exception:   # noqa: BLE001 - only time is lost: the autotuner compiles as it times
            pass


def autotuner(kernel, **options):
    """``triton.autotune(**options)`` of ``kernel`` with :data:`OPTIONS`, whose timing of a
    config first compiles the launch's configs (:func:`before_timing`) and skips a config
    :func:`precompile` found spilling (:func:`spilling`): infinite timings, which Triton's
    autotuner gives a config over the device's resources.  It wraps the autotuner's
    ``_bench(*args, config, **meta)`` (triton 3.6 to 3.9), where it has one."""
    tuned = triton.autotune(**options, **OPTIONS)(kernel)
    bench = getattr(tuned, "_bench", None)
    if bench is not None:
        tuned._bench = functools.partial(_bench, bench)
    return tuned


def _bench(bench, *args, config, **meta):
    """The autotuner's timing of ``config``: ``bench``'s, but none for a dropped config."""
    _compile_pending()
    if config in getattr(_tuning, "dropped", ()):
        return [math.inf] * 3
    return bench(*args, config=config, **meta)


def tuning_bench(kernel_call, quantiles=None):
    """The autotuner's timer (``triton.autotune(do_bench=...)``).

    Triton's ``do_bench`` runs a config at least 9 times however slow it is (a first run
    that compiles, 5 to estimate, a warm-up, then enough for its 100 ms, at least 1):
    on an H100 autotuning a kernel whose configs each run for tens of milliseconds took
    most of einc's first call (bench/measured/h100-2026-11-26/README.md).  Here a config
    runs once to compile, then once timed; where that run took :data:`SLOW_MS` or more, it
    is the measurement (one run of several ms is within a few percent of the median);
    faster configs are timed as Triton's ``do_bench`` times them, without its device-wide
    waits (:func:`_runs_ms`), over :data:`REP_MS` of runs, fewer than its default (tuning
    picks among tiles that differ by far more than that noise), as inductor's autotuner
    times its configs.  The first timing of a launch made under :func:`before_timing`
    first compiles every config side by side, then takes :data:`TIMING`."""
    _compile_pending()
    if getattr(_tuning, "armed", False) and not _tuning.holds:
        TIMING.acquire()
        _tuning.holds = True
    kernel_call()
    ms = _one_run_ms(kernel_call)
    if ms >= SLOW_MS:
        return [ms] * len(quantiles) if quantiles else ms
    return _runs_ms(kernel_call, REP_MS, quantiles)


WARMUP_MS = 25     # ms of runs before the timed ones (do_bench's)


def _flush_buffer():
    """The buffer ``do_bench`` zeroes before each timed run (Triton's, on the current device)."""
    from triton.runtime.driver import driver
    return driver.active.get_empty_cache_for_benchmark()


def _runs_ms(fn, rep_ms, quantiles=None):
    """Triton's ``do_bench`` on the current CUDA stream, every wait on its own events:
    five runs estimate a run's time, :data:`WARMUP_MS` of runs warm up, then ``rep_ms`` of
    runs are timed, each after the L2 cache is overwritten (Triton's buffer zeroed); the
    mean, or the ``quantiles``.  ``do_bench`` synchronizes the whole device instead, which
    no CUDA graph capture allows on any thread and which would break a capture the caller
    makes while learn mode times a kernel (:mod:`einc.runtime.capture`)."""
    flush = _flush_buffer()

    def events(n):
        return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    (start, stop), = events(1)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    stop.record()
    stop.synchronize()
    estimate = max(start.elapsed_time(stop) / 5, 1e-6)
    for _ in range(max(1, int(WARMUP_MS / estimate))):
        fn()
    timed = events(max(1, int(rep_ms / estimate)))
    for start, stop in timed:
        flush.zero_()
        start.record()
        fn()
        stop.record()
    timed[-1][1].synchronize()
    times = sorted(start.elapsed_time(stop) for start, stop in timed)
    if not quantiles:
        return sum(times) / len(times)
    return [_quantile(times, q) for q in quantiles]


def _quantile(ordered, q: float) -> float:
    """The ``q`` quantile of ``ordered`` (ascending), interpolated as ``torch.quantile``."""
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


_PARAMETERS = inspect.signature(triton.autotune).parameters
OPTIONS = {**({"cache_results": True} if "cache_results" in _PARAMETERS else {}),
           **({"do_bench": tuning_bench} if "do_bench" in _PARAMETERS else {})}


def _compile_in_pool(kernel, args, grid, keywords, device):
    """:func:`_compile` on a pool thread, set apart from the caller's CUDA graph captures."""
    _capture.exempt()
    return _compile(kernel, args, grid, keywords, device)


def _compile(kernel, args, grid, keywords, device):
    """Compile and load ``kernel`` for these arguments: the compiled kernel's ``n_spills``
    (None where it has none, or where it failed: a failure is the autotuner's to meet)."""
    try:
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            compiled = kernel.warmup(*args, grid=grid, **keywords)
            _ = compiled.run        # (loads it: the driver reads its registers and local memory)
    except Exception:   # noqa: BLE001 - the autotuner compiles it again and reports or skips it
        return None
    return getattr(compiled, "n_spills", None)


# The most a config may spill and still be timed, in the driver's 4-byte words a thread
# (``n_spills``).  Inductor skips past its ``spill_threshold`` and exempts hand-written
# kernels, where a spilling config may be the fastest: so were einc's fp32 CCSD(T)
# ``matmul-nt`` tiles with triton 3.6 on an H100 (bench/measured/ptx.md), whose spills this
# bound keeps timed, while the kilobytes later tritons spill in the same tiles are skipped.
SPILL_WORDS = 32


def spilling(configs, spills) -> list:
    """The ``configs`` the autotuner skips, given each one's compiled ``n_spills`` (None:
    not known): those that spill more than :data:`SPILL_WORDS`, where one of them compiled
    without spilling; none else."""
    if 0 not in spills:
        return []
    return [c for c, n in zip(configs, spills) if n is not None and n > SPILL_WORDS]


def _current_device():
    """The device Triton's launches go to on this thread: its key in ``device_caches``."""
    from triton.runtime.driver import driver
    return driver.active.get_current_device()


def _prepare(kernel, device) -> bool:
    """Set up, on this thread, what Triton keeps per kernel and device before its first
    compile (``JITFunction.device_caches``: the argument binder, the device's target and
    backend), so that the first compiles of the kernel may run side by side without each
    thread making its own; False where this Triton has no such state or it fails (the
    first config then compiles on this thread, which makes it)."""
    caches = getattr(kernel, "device_caches", None)
    if caches is None:
        return False
    try:
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            caches[_current_device()]
    except Exception:   # noqa: BLE001 - the first compile then sets it up, as the autotuner's would
        return False
    return True


def precompile(kernel, configs, args, grid, meta, device, threads=None) -> int:
    """Compile ``kernel`` (a ``triton.jit`` function) with each of ``configs`` (the
    ``triton.Config`` list the autotuner will time) for a launch on ``args`` with constexprs
    ``meta`` on ``device``, in at most ``threads`` threads (default
    :func:`einc.config.compile_threads`; one: on this thread, one after another).  Under
    :func:`before_timing`, the configs found spilling (:func:`spilling`) are skipped by the
    autotuner of that launch.  Returns how many threads compiled in the pool (1: none side
    by side, where there is one config, compiling nothing, or one thread)."""
    threads = _config.compile_threads() if threads is None else threads
    if len(configs) < 2:
        return 1
    jobs = [dict(meta, **c.all_kwargs()) for c in configs]
    if threads < 2:
        spills = [_compile(kernel, args, grid, keywords, device) for keywords in jobs]
        pooled = 1
    else:
        spills = [] if _prepare(kernel, device) else [_compile(kernel, args, grid, jobs[0], device)]
        rest = jobs[len(spills):]
        pool = _pool(threads)
        spills += [done.result() for done in
                   [pool.submit(_compile_in_pool, kernel, args, grid, keywords, device) for keywords in rest]]
        pooled = min(threads, len(rest))
    if getattr(_tuning, "armed", False):
        _tuning.dropped = spilling(configs, spills)
    return pooled


_shared: dict = {}              # threads -> the process's compile pool of that many
_shared_lock = threading.Lock()


def _pool(threads: int) -> ThreadPoolExecutor:
    """The process's one pool of ``threads`` compile threads, shared by every launch that
    compiles at once (learn mode's two jobs): however many kernels compile together, at
    most ``threads`` compiles run, and hold the GIL for their Python parts, at a time."""
    with _shared_lock:
        pool = _shared.get(threads)
        if pool is None:
            for old in _shared.values():        # (the setting changed: the old pool ends when idle)
                old.shutdown(wait=False)
            _shared.clear()
            pool = _shared[threads] = ThreadPoolExecutor(threads, thread_name_prefix="einc-compile")
        return pool


def _after_fork():
    _shared.clear()                 # the parent's pool threads do not exist in the child
    _shared_lock._at_fork_reinit()  # (a fork while another thread held it)


os.register_at_fork(after_in_child=_after_fork)


__all__ = ["OPTIONS", "SLOW_MS", "REP_MS", "TIMING", "tuning_bench", "before_timing", "precompile", "autotuner",
           "spilling"]
