"""einc's own threads (learn mode's jobs, the compile pool) set their CUDA stream-capture
mode to thread-local, so a CUDA graph the caller captures meanwhile neither forbids
their calls nor is broken by them; the caller's thread is never changed; and the
autotuner's timer waits on its own events, never on the whole device.  Here the
driver's call and CUDA's events are stand-ins: the GPU check is bench/gpu_capture.py."""

import threading

import pytest
import torch

from einc.runtime import capture, learn, select
from einc.runtime.triton_executor import autotune


@pytest.fixture
def driver(monkeypatch):
    """A stand-in ``cuThreadExchangeStreamCaptureMode``: ``calls`` lists (thread, mode)."""
    calls, result = [], [0]

    def exchange(mode):
        calls.append((threading.current_thread().name, mode._obj.value))
        mode._obj.value = 0                 # (the driver hands back the old mode: global)
        return result[0]
    monkeypatch.setattr(capture, "_exchange", lambda: exchange)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(capture, "_set", threading.local())
    return calls, result


def _in_thread(fn, name="einc-test"):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()), name=name)
    t.start()
    t.join(30)
    return out[0]


def test_a_thread_is_set_thread_local_once(driver):
    calls, _ = driver
    assert _in_thread(lambda: (capture.exempt(), capture.exempt(), capture.exempt()), "a") == (True, True, True)
    assert _in_thread(capture.exempt, "b") is True
    assert calls == [("a", capture.THREAD_LOCAL), ("b", capture.THREAD_LOCAL)]


def test_nothing_is_set_before_cuda_is_initialized_nor_where_the_driver_refuses(driver, monkeypatch):
    calls, result = driver

    def later():
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
        first = capture.exempt()                    # no CUDA yet: nothing to set apart, not set
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        result[0] = 201                             # CUDA_ERROR_INVALID_CONTEXT
        second = capture.exempt()
        result[0] = 0
        return first, second, capture.exempt(), capture.exempt()
    assert _in_thread(later) == (False, False, True, True)
    assert len(calls) == 2                          # refused, then set; then never again


def test_without_a_cuda_driver_nothing_is_set(monkeypatch):
    monkeypatch.setattr(capture, "driver", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(capture, "_set", threading.local())
    assert capture.exempt() is False
    assert select._driver.__wrapped__() == "?"      # the decisions key's driver: unknown


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA's driver")
def test_the_driver_lookup_finds_nothing_on_a_machine_without_cuda():
    assert capture.driver() is None


def test_learn_modes_jobs_are_set_apart_and_the_callers_thread_is_not(monkeypatch):
    where = []
    monkeypatch.setattr(capture, "exempt", lambda: where.append(threading.current_thread().name) or True)
    monkeypatch.setattr(learn, "_worker", learn._Worker(threads=1))
    monkeypatch.setattr(learn, "_warm", lambda fn, layout: None)
    learner = learn.Learner([select.Choice("torch", "modelled")], load=lambda s, name: "launch")
    learner.setup(0, {"torch": lambda: None}, ("triton",), "key", None)
    learner.pick(0, [torch.zeros(2)], False, timing=False)             # hands the kernel over
    assert learn._worker.settle(30)
    assert learner.steps[0].loaded == {"triton": "launch"}
    assert where == ["einc-kernels"], where


def test_the_compile_pools_threads_are_set_apart_and_the_callers_thread_is_not(monkeypatch):
    where = []
    monkeypatch.setattr(capture, "exempt", lambda: where.append(threading.current_thread().name) or True)
    monkeypatch.setattr(autotune, "_current_device", lambda: 0)
    monkeypatch.setattr(autotune, "_compile", lambda *a: None)
    kernel = type("Kernel", (), {"device_caches": {0: "binder"}})()
    configs = [autotune.triton.Config({"BLOCK_M": m}) for m in (16, 32, 64)]
    assert autotune.precompile(kernel, configs, (), None, {}, torch.device("cpu"), 2) == 2
    assert len(where) == 3 and all(name.startswith("einc-compile") for name in where), where


class _Event:
    """Stands in for ``torch.cuda.Event``: a run of the timed function takes 0.5 ms, and
    zeroing the flush buffer 0.1 ms, on a clock the recorded events read."""
    clock = [0.0]

    def __init__(self, enable_timing=False):
        self.at = None

    def record(self, stream=None):
        self.at = self.clock[0]

    def synchronize(self):
        assert self.at is not None

    def elapsed_time(self, other):
        return other.at - self.at


class _Buffer:
    def zero_(self):
        _Event.clock[0] += 0.1


def test_the_tuning_timer_waits_on_its_own_events_only(monkeypatch):
    """Triton's ``do_bench`` synchronizes the whole device, which breaks a CUDA graph
    another thread captures; the autotuner's timer waits on its own events."""
    def never():
        raise AssertionError("the whole device synchronized")
    monkeypatch.setattr(torch.cuda, "synchronize", never)
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(autotune, "_flush_buffer", _Buffer)
    runs = []

    def run():
        runs.append(_Event.clock[0])
        _Event.clock[0] += 0.5
    fast = autotune.tuning_bench(run, quantiles=(0.5, 0.2, 0.8))
    assert fast == pytest.approx([0.5, 0.5, 0.5])
    # a compile run and a timed one, then 5 to estimate (0.6 ms each with the flush),
    # 25 ms of warm-up and REP_MS of timed runs at that estimate
    assert len(runs) == 2 + 5 + int(autotune.WARMUP_MS / 0.6) + int(autotune.REP_MS / 0.6)
    assert autotune._runs_ms(run, 10) == pytest.approx(0.5)             # no quantiles: the mean


def test_the_quantiles_are_torchs():
    g = torch.Generator().manual_seed(3)
    for n in (1, 2, 7, 50):
        times = sorted(torch.rand(n, generator=g, dtype=torch.float64).tolist())
        qs = (0.5, 0.2, 0.8)
        expected = torch.quantile(torch.tensor(times, dtype=torch.float64), torch.tensor(qs, dtype=torch.float64))
        assert [autotune._quantile(times, q) for q in qs] == pytest.approx(expected.tolist())


def test_a_slow_config_is_still_timed_by_one_run(monkeypatch):
    monkeypatch.setattr(autotune, "_one_run_ms", lambda fn: (fn(), 2 * autotune.SLOW_MS)[1])
    monkeypatch.setattr(autotune, "_runs_ms", lambda *a, **k: pytest.fail("timed again"))
    assert autotune.tuning_bench(lambda: None) == 2 * autotune.SLOW_MS
