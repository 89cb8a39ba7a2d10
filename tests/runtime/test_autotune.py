"""A layout's first launch on a GPU compiles the configs the autotuner will time side by
side, before it times them (``runtime/triton_executor/autotune.py``).

The whole path runs here with Triton's real JIT, autotuner and compiler (for sm_90) on a
stand-in driver that launches nothing (``bench/first_launch.py --child``, in a
subprocess without ``TRITON_INTERPRET``): with threads, every config the autotuner times
was compiled before its first timing, by more than one thread; with one thread, the
autotuner compiles each as it times it, as Triton's own does; where the autotuner's result is on
disk, nothing is timed and only the chosen config compiled."""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from compiler import needs_nvidia, uninterpreted_env

from einc import config
from einc.errors import ConfigError
from einc.runtime.triton_executor import autotune

triton = pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "first_launch.py"


def _first_launch(tmp_path, threads, *args, cache=None):
    env = uninterpreted_env(PYTHONPATH=str(ROOT), TRITON_DEFAULT_FP_FUSION="1", EINC_COMPILE_THREADS=str(threads),
                            TRITON_CACHE_DIR=str(tmp_path / (cache or f"triton-{threads}")))
    done = subprocess.run([sys.executable, str(SCRIPT), "--child", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


CASES = {   # equation, shapes, dtype, options: each a kind of first launch
    "matmul": ("ij,jk->ik", [[64, 64], [64, 64]], "bfloat16"),
    "split_k": ("ij,jk->ik", [[64, 8192], [8192, 64]], "float32"),      # the workspace's dtype is fp32
    "tma": ("ij,jk->ik", [[256, 256], [256, 256]], "bfloat16", "--tma"),
}


@pytest.mark.slow
@needs_nvidia
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_autotuner_times_only_compiled_configs(tmp_path, case):
    equation, shapes, dtype, *options = CASES[case]
    out = _first_launch(tmp_path, 4, equation, json.dumps(shapes), dtype, *options)
    events = out["events"]
    first_timing = events.index(["time"])
    timed = sum(e == ["time"] for e in events)
    before = [e for e in events[:first_timing] if e[0] == "compile"]
    assert timed >= 3, events
    assert len(before) == timed, events                         # each timed config, compiled first
    assert all(e[0] == "time" for e in events[first_timing:first_timing + timed]), events
    assert len({thread for _, thread in before}) >= 2, events    # side by side
    assert out["threads"] == [min(4, timed)], out               # every config in the pool
    assert out["tma"] == [case == "tma"], out


@pytest.mark.slow
@needs_nvidia
def test_one_thread_compiles_each_config_on_the_calling_thread_before_timing(tmp_path):
    equation, shapes, dtype = CASES["matmul"]
    out = _first_launch(tmp_path, 1, equation, json.dumps(shapes), dtype)
    events = out["events"]
    assert out["threads"] == [1], out
    timed = events.count(["time"])
    assert timed >= 3 and events == [["compile", "MainThread"]] * timed + [["time"]] * timed, events


@pytest.mark.slow
@needs_nvidia
def test_a_tuning_kept_on_disk_compiles_the_chosen_config_alone(tmp_path):
    """A second process finds the autotuner's result in Triton's cache folder: nothing is
    timed, so nothing more than the chosen config is compiled (read from that folder)."""
    equation, shapes, dtype = CASES["matmul"]
    first = _first_launch(tmp_path, 4, equation, json.dumps(shapes), dtype, cache="kept")
    again = _first_launch(tmp_path, 4, equation, json.dumps(shapes), dtype, cache="kept")
    assert first["threads"] == [4] and first["events"].count(["time"]) == 4, first
    assert again["threads"] == [] and again["events"] == [["compile", "MainThread"]], again


@pytest.mark.slow
@needs_nvidia
def test_background_jobs_run_side_by_side_and_time_one_launch_at_a_time(tmp_path):
    """Two first launches as learn mode's jobs on two threads (``first_launch.py
    --jobs-child``): both run at once, and one launch's timings never interleave with the
    other's."""
    env = uninterpreted_env(PYTHONPATH=str(ROOT), TRITON_DEFAULT_FP_FUSION="1", EINC_COMPILE_THREADS="2",
                            TRITON_CACHE_DIR=str(tmp_path / "jobs"))
    done = subprocess.run([sys.executable, str(SCRIPT), "--jobs-child", "bf16_batch_in_tile,fp32_reduce", "2", "50"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["errors"] == {}, out
    (a0, a1), (b0, b1) = out["spans"]["bf16_batch_in_tile"], out["spans"]["fp32_reduce"]
    assert b0 < a1 and a0 < b1, out["spans"]                             # side by side
    rows = [e[1] for e in out["events"] if e[0] == "time"]
    assert sorted(set(rows)) == ["bf16_batch_in_tile", "fp32_reduce"], out["events"]
    changes = sum(rows[i] != rows[i - 1] for i in range(1, len(rows)))
    assert changes == 1, rows                                           # one launch's timings, then the other's


@needs_nvidia
def test_the_callers_loop_runs_while_a_first_launch_compiles_beside_it(tmp_path):
    """``first_launch.py --caller-child``: the caller's loop of small torch ops runs the
    whole time a first launch compiles on another thread, and its stalls are part of it."""
    env = uninterpreted_env(PYTHONPATH=str(ROOT), TRITON_DEFAULT_FP_FUSION="1", EINC_COMPILE_THREADS="2",
                            TRITON_CACHE_DIR=str(tmp_path / "caller"))
    done = subprocess.run([sys.executable, str(SCRIPT), "--caller-child", "fp32_reduce", "2"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["seconds"] > 0.05, out
    assert 0.9 <= out["before"]["looped_s"] <= 1.1, out                 # a second alone
    assert 0.9 * out["seconds"] <= out["during"]["looped_s"] <= 1.1 * out["seconds"], out   # the whole launch
    for phase in ("before", "during"):
        assert 0 < out[phase]["median_us"] < 1000, out
    assert 0 <= out["during"]["stalled_s"] <= out["during"]["looped_s"], out
    assert out["during"]["longest_ms"] <= out["seconds"] * 1e3, out


class _Kernel:
    """Stands in for a ``triton.jit`` function: records each warmup's keywords and thread."""

    def __init__(self, fail=()):
        self.calls, self.fail = [], fail
        self.lock = threading.Lock()

    def warmup(self, *args, grid, **keywords):
        with self.lock:
            self.calls.append((args, grid, keywords, threading.current_thread().name))
        if keywords["BLOCK_M"] in self.fail:
            raise RuntimeError("out of resources")
        return self

    @property
    def run(self):
        return None


def _configs(*blocks):
    return [triton.Config({"BLOCK_M": m}, num_warps=4, num_stages=3) for m in blocks]


def test_each_config_is_compiled_with_the_autotuners_keywords():
    kernel, meta = _Kernel(), {"K": 64, "HAS_SCALE": False}
    configs = _configs(16, 32, 64)
    threads = autotune.precompile(kernel, configs, (1, 2), "grid", meta, torch.device("cpu"), threads=4)
    assert threads == 2
    assert sorted(c[2]["BLOCK_M"] for c in kernel.calls) == [16, 32, 64]
    for args, grid, keywords, _ in kernel.calls:
        (config,) = [c for c in configs if c.kwargs["BLOCK_M"] == keywords["BLOCK_M"]]
        assert (args, grid, keywords) == ((1, 2), "grid", dict(meta, **config.all_kwargs()))
    assert kernel.calls[0][3] == threading.current_thread().name     # the first on the calling thread: no
    assert all(c[3] != threading.current_thread().name for c in kernel.calls[1:])   # per-device state here


class _JitKernel(_Kernel):
    """Stands in for a ``triton.jit`` function that keeps state per device, made by the
    first compile on a device unless the caller makes it first."""

    def __init__(self):
        super().__init__()
        self.made = []
        self.device_caches = self

    def __missing__(self, device):
        self.made.append(threading.current_thread().name)
        return "binder"

    def __getitem__(self, device):
        return self.__missing__(device)


def test_a_kernel_whose_state_is_made_first_compiles_every_config_in_the_pool(monkeypatch):
    monkeypatch.setattr(autotune, "_current_device", lambda: 0)
    kernel = _JitKernel()
    threads = autotune.precompile(kernel, _configs(16, 32, 64), (), None, {}, torch.device("cpu"), threads=4)
    assert threads == 3
    assert kernel.made == [threading.current_thread().name]                  # made here, once
    assert sorted(c[2]["BLOCK_M"] for c in kernel.calls) == [16, 32, 64]
    assert all(c[3] != threading.current_thread().name for c in kernel.calls)   # none compiled here


def test_a_config_that_fails_leaves_the_others_compiled():
    kernel = _Kernel(fail=(32,))
    autotune.precompile(kernel, _configs(16, 32, 64, 128), (), None, {}, torch.device("cpu"), threads=2)
    assert sorted(c[2]["BLOCK_M"] for c in kernel.calls) == [16, 32, 64, 128]


def test_threads_compile_side_by_side():
    barrier = threading.Barrier(4, timeout=30)     # four compiles after the first must run at once to pass
    kernel, broken = _Kernel(), []

    def warmup(*args, grid, **keywords):
        if threading.current_thread() is not threading.main_thread():
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                broken.append(keywords)
        return kernel

    kernel.warmup = warmup
    assert autotune.precompile(kernel, _configs(16, 32, 64, 128, 256), (), None, {}, torch.device("cpu"),
                                 threads=4) == 4
    assert broken == [] and not barrier.broken


def test_one_config_compiles_nothing_here():
    kernel = _Kernel()
    assert autotune.precompile(kernel, _configs(16), (), None, {}, torch.device("cpu"), threads=4) == 1
    assert kernel.calls == []


def test_one_thread_compiles_every_config_here_one_after_another():
    kernel = _Kernel()
    assert autotune.precompile(kernel, _configs(16, 32, 64, 128, 256), (), None, {}, torch.device("cpu"),
                               threads=1) == 1
    assert [c[2]["BLOCK_M"] for c in kernel.calls] == [16, 32, 64, 128, 256]
    assert all(c[3] == threading.current_thread().name for c in kernel.calls)


def test_the_setting(monkeypatch):
    monkeypatch.delenv("EINC_COMPILE_THREADS", raising=False)
    assert 1 <= config.compile_threads() <= 8
    monkeypatch.setenv("EINC_COMPILE_THREADS", " 12 ")
    assert config.compile_threads() == 12
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("EINC_COMPILE_THREADS", bad)
        with pytest.raises(ConfigError, match="EINC_COMPILE_THREADS"):
            config.compile_threads()


def test_the_first_timing_compiles_once_and_only_under_before_timing(monkeypatch):
    monkeypatch.setattr(autotune, "_one_run_ms", lambda fn: (fn(), autotune.SLOW_MS)[1])
    compiled, runs = [], []
    autotune.tuning_bench(lambda: runs.append(1))                       # outside: nothing compiled
    with autotune.before_timing(lambda: compiled.append(len(runs))):
        for _ in range(3):                                              # three configs timed
            autotune.tuning_bench(lambda: runs.append(1))
    autotune.tuning_bench(lambda: runs.append(1))
    assert compiled == [2] and len(runs) == 10      # once, before the first config's runs (2 a config)


def test_a_failing_compile_leaves_the_timing_to_go_on(monkeypatch):
    monkeypatch.setattr(autotune, "_one_run_ms", lambda fn: (fn(), 7.0)[1])

    def fail():
        raise RuntimeError("no memory for the workspace")
    with autotune.before_timing(fail):
        assert autotune.tuning_bench(lambda: None, quantiles=(0.5, 0.2, 0.8)) == [7.0, 7.0, 7.0]


def test_two_launches_time_their_configs_one_after_the_other(monkeypatch):
    """Each thread's compile runs outside the lock, its timings inside: the second
    thread compiles while the first times, and no two timings overlap."""
    monkeypatch.setattr(autotune, "_one_run_ms", lambda fn: (fn(), autotune.SLOW_MS)[1])
    log, lock = [], threading.Lock()
    first_timing = threading.Event()

    def note(*what):
        with lock:
            log.append(what)

    def launch(name, configs, wait=None):
        def compile_all():
            if wait is not None:
                assert wait.wait(30)        # compiles while the other thread is timing
            note(name, "compile")
        with autotune.before_timing(compile_all):
            for _ in range(configs):
                def run():
                    note(name, "run", autotune.TIMING.locked())
                    first_timing.set()
                    time.sleep(0.01)
                autotune.tuning_bench(run)
        note(name, "done")

    a = threading.Thread(target=launch, args=("a", 4))
    b = threading.Thread(target=launch, args=("b", 3, first_timing))
    a.start(), b.start()
    a.join(30), b.join(30)
    assert not autotune.TIMING.locked()
    runs = [who for who, what, *_ in log if what == "run"]
    assert runs == ["a"] * 8 + ["b"] * 6, log            # 2 runs a config; a's all before b's
    assert all(e[2] for e in log if e[1] == "run")                    # each run under the lock
    compile_b = log.index(("b", "compile"))
    assert any(e[:2] == ("a", "run") for e in log[compile_b + 1:])    # b compiled while a timed


def test_a_launch_that_fails_while_timing_lets_the_next_one_time(monkeypatch):
    monkeypatch.setattr(autotune, "_one_run_ms", lambda fn: (fn(), autotune.SLOW_MS)[1])

    def fail():
        raise RuntimeError("out of resources")
    with pytest.raises(RuntimeError), autotune.before_timing(lambda: None):
        autotune.tuning_bench(fail)
    assert not autotune.TIMING.locked()
    with autotune.before_timing(lambda: None):
        autotune.tuning_bench(lambda: None)
        assert autotune.TIMING.locked()
    assert not autotune.TIMING.locked()


def test_kernels_compiling_at_once_share_the_process_pool(monkeypatch):
    """Two launches compiling at once (learn mode's two jobs) run at most the setting's
    number of compiles together: the GIL their Python parts hold stays the same."""
    monkeypatch.setattr(autotune, "_current_device", lambda: 0)
    lock, running, most = threading.Lock(), [0], [0]
    kernel = _JitKernel()

    def warmup(*args, grid, **keywords):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
            kernel.calls.append(keywords["BLOCK_M"])
        return kernel
    kernel.warmup = warmup
    both = [threading.Thread(target=autotune.precompile, args=(kernel, _configs(16, 32, 64, 128), (), None, {},
                                                               torch.device("cpu"), 2)) for _ in range(2)]
    for t in both:
        t.start()
    for t in both:
        t.join(30)
    assert sorted(kernel.calls) == [16, 16, 32, 32, 64, 64, 128, 128]
    assert most[0] == 2, most


class _Compiled:
    """Stands in for a compiled kernel, loaded: the driver's reading of its local memory."""

    run = None

    def __init__(self, n_spills):
        self.n_spills = n_spills


class _Tunable(_Kernel):
    """Stands in for a ``triton.jit`` function under Triton's real autotuner: its compiled
    kernel of config BLOCK_M spills ``spills[BLOCK_M]`` (None: no such attribute; absent:
    it fails to compile); a launch records its BLOCK_M."""

    arg_names = ["x"]

    def __init__(self, spills):
        super().__init__(fail=[m for m in (16, 32, 64, 128) if m not in spills])
        self.spills, self.ran = spills, []
        self.fn = lambda x: None

    def warmup(self, *args, grid, **keywords):
        super().warmup(*args, grid=grid, **keywords)
        n = self.spills[keywords["BLOCK_M"]]
        return _Compiled(n) if n is not None else object.__new__(_Compiled)

    def run(self, *args, **keywords):
        self.ran.append(keywords["BLOCK_M"])


def _tune(monkeypatch, spills, threads=2, blocks=(16, 32, 64)):
    """Tune ``_Tunable(spills)`` on one launch as ``Launcher.first`` does (its configs
    compiled at the first timing); the configs run while timed, and the timings."""
    monkeypatch.setattr(autotune, "_one_run_ms", lambda fn: (fn(), autotune.SLOW_MS)[1])
    kernel, configs = _Tunable(spills), _configs(*blocks)
    tuned = autotune.autotuner(kernel, configs=configs, key=["x"])
    with autotune.before_timing(lambda: autotune.precompile(kernel, configs, (7,), None, {},
                                                            torch.device("cpu"), threads=threads)):
        tuned.run(7)
    assert kernel.ran[-1] == tuned.best_config.kwargs["BLOCK_M"]        # (the launch after tuning)
    return kernel.ran[:-1], {c.kwargs["BLOCK_M"]: t for c, t in tuned.configs_timings.items()}


INF, SLOW = [float("inf")] * 3, [autotune.SLOW_MS] * 3


@pytest.mark.parametrize("threads", [1, 3])
def test_a_config_that_spills_is_not_timed_where_another_compiled_without(monkeypatch, threads):
    ran, timings = _tune(monkeypatch, {16: 0, 32: 144, 64: 0}, threads)
    assert ran == [16, 16, 64, 64]                              # 32 never ran
    assert timings == {16: SLOW, 32: INF, 64: SLOW}


def test_the_first_config_timed_is_skipped_too_where_it_spills(monkeypatch):
    ran, timings = _tune(monkeypatch, {16: 33, 32: 0, 64: 222})
    assert ran == [32, 32] and timings == {16: INF, 32: SLOW, 64: INF}


@pytest.mark.parametrize("spills", [{16: 3, 32: 18, 64: 1}, {16: None, 32: None, 64: None}])
def test_nothing_is_skipped_where_no_config_is_known_spill_free(monkeypatch, spills):
    ran, timings = _tune(monkeypatch, spills)
    assert ran == [16, 16, 32, 32, 64, 64] and timings == {16: SLOW, 32: SLOW, 64: SLOW}


def test_a_config_that_failed_to_compile_is_left_to_the_autotuner(monkeypatch):
    """32 fails to compile beforehand: its spills are not known, so the autotuner times it
    (and meets any error itself); 16 spills where 64 does not."""
    ran, timings = _tune(monkeypatch, {16: 50, 64: 0})
    assert ran == [32, 32, 64, 64] and timings == {16: INF, 32: SLOW, 64: SLOW}


def test_spills_found_outside_a_timed_launch_skip_nothing(monkeypatch):
    monkeypatch.setattr(autotune, "_one_run_ms", lambda fn: (fn(), autotune.SLOW_MS)[1])
    kernel, configs = _Tunable({16: 0, 32: 90, 64: 0}), _configs(16, 32, 64)
    autotune.precompile(kernel, configs, (7,), None, {}, torch.device("cpu"), threads=2)
    tuned = autotune.autotuner(kernel, configs=configs, key=["x"])
    tuned.run(7)
    assert kernel.ran == [16, 16, 32, 32, 64, 64, 16]


def test_spilling():
    configs = _configs(16, 32, 64)
    most = autotune.SPILL_WORDS
    assert autotune.spilling(configs, [0, most + 1, None]) == [configs[1]]
    assert autotune.spilling(configs, [most + 8, 0, most + 1]) == [configs[0], configs[2]]
    assert autotune.spilling(configs, [most + 8, 1, None]) == [] == autotune.spilling(configs, [None] * 3)
    assert autotune.spilling(configs, [0, most, 1]) == []       # spills up to the bound are timed


def test_a_spill_measured_fastest_is_still_timed(monkeypatch):
    """fp32 CCSD(T)'s second and third ``matmul-nt`` configs with triton 3.6: 18-20 words,
    the fastest on an H100 (bench/measured/ptx.md); those of triton 3.9 (144-222) are not."""
    ran, timings = _tune(monkeypatch, {16: 0, 32: 20, 64: 222})
    assert ran == [16, 16, 32, 32] and timings == {16: SLOW, 32: SLOW, 64: INF}
