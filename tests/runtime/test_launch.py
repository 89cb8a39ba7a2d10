"""The generated modules' launch path: layouts set up once, then launched with little Python.

Under Triton's interpreter (CPU tensors) the interpreter runs every launch, but the
layout cache, the skipped 32-bit span check and the once-read fp32 precision are the
same code as on a GPU.  The GPU's compiled launches are exercised here too, on the
interpreter, by standing in for the autotuner and the compiled kernel: the stand-in
launches the real kernel with the arguments it is handed, so an argument in the wrong
place gives a wrong answer.
"""

import csv
import inspect
import sys
from types import SimpleNamespace

import pytest
import torch

import einc
from einc.codegen import render
from einc.codegen.lower import lower_program
from einc.planner.equation import parse
from einc.planner.fuse import FUSED, fuse_plan
from einc.planner.graph import build
from einc.planner.options import Options
from einc.planner.plan import build_plan
from einc.runtime import triton_executor
from einc.runtime.triton_executor import autotune, launch, loader

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
interpreter = pytest.mark.interpreter        # CPU tensors through Triton's interpreter


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """``module(equation, shapes, dtype, path=None)``: the generated module of a one-step plan
    (with ``path``, of the one fused step of the plan that path gives), loaded afresh (nothing
    set up yet), with its kernel run by Triton's interpreter."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    einc.cache_clear()
    triton_executor.use_interpreter()

    def module(equation, shapes, dtype=torch.float64, path=None):
        name = triton_executor.dtype_name(dtype)
        plan = build_plan(build(parse(equation), shapes), equation, Options.of(path) if path else None)
        if path:
            plan = fuse_plan(plan, name)
            assert [s.kind for s in plan.steps] == [FUSED]
            (kernel,) = lower_program(plan, name, shapes)
        else:
            (kernel,) = lower_program(plan, name, shapes)
        return loader.load(kernel.name, render(kernel))
    yield module
    einc.cache_clear()


def layouts(shape, dtype=torch.float64, seed=0):
    """The same values of ``shape`` as a contiguous, a transposed and a sliced tensor."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=dtype)
    transposed = x.t().contiguous().t()
    wide = torch.zeros((2 * shape[0], 2 * shape[1]), dtype=dtype)
    wide[::2, 1::2] = x
    sliced = wide[::2, 1::2]
    assert transposed.stride() != x.stride() != sliced.stride() != transposed.stride()
    return {"contiguous": x, "transposed": transposed, "sliced": sliced}


def count_calls(monkeypatch, module, name):
    """Wrap ``module.name`` (looked up at call time by the module's own code; ``module`` may
    be a launcher) with a counter."""
    calls = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)
    monkeypatch.setattr(module, name, counted)
    return calls


@interpreter
def test_results_stay_right_as_layouts_come_and_go(fresh):
    m = fresh("ij,jk->ik", [(5, 6), (6, 7)])
    a, b = layouts((5, 6), seed=1), layouts((6, 7), seed=2)
    expected = a["contiguous"] @ b["contiguous"]
    order = ["contiguous", "transposed", "sliced"] * 3 + ["sliced", "contiguous", "transposed"]
    for name_a, name_b in zip(order, reversed(order)):
        torch.testing.assert_close(m.launch(a[name_a], b[name_b]), expected)
    assert len(m.launcher.layouts) == len(set(zip(order, reversed(order))))    # one per pair of layouts met
    r = fresh("bij,bij->b", [(3, 4, 5), (3, 4, 5)])
    x, y = torch.randn(3, 4, 5, dtype=torch.float64), torch.randn(3, 5, 4, dtype=torch.float64).transpose(1, 2)
    for _ in range(3):
        torch.testing.assert_close(r.launch(x, y), (x * y).sum((1, 2)))
        torch.testing.assert_close(r.launch(y, x[:, :, :]), (x * y).sum((1, 2)))
    assert len(r.launcher.layouts) == 2


@interpreter
def test_the_span_check_runs_once_per_layout(fresh, monkeypatch):
    m = fresh("ij,jk->ik", [(5, 6), (6, 7)])
    assert "2**31" not in inspect.getsource(m.launch)           # the per-call path has no span check
    assert "2**31" in inspect.getsource(launch.Launcher._set_up)   # only the first launch of a layout
    first = count_calls(monkeypatch, m.launcher, "first")
    a, b = layouts((5, 6)), layouts((6, 7))
    for _ in range(4):
        m.launch(a["contiguous"], b["contiguous"])
    m.launch(a["contiguous"].clone(), b["contiguous"].clone())     # other data, same layout
    assert len(first) == 1
    m.launch(a["transposed"], b["contiguous"])                   # new strides: checked again
    assert len(first) == 2
    m.launch(a["transposed"], b["contiguous"])
    m.launch(a["contiguous"], b["contiguous"])
    assert len(first) == 2
    m.launch(a["sliced"], b["sliced"])
    assert len(first) == 3
    m.forget()
    m.launch(a["contiguous"], b["contiguous"])
    assert len(first) == 4


@interpreter
def test_views_beyond_32_bit_offsets_still_raise(fresh):
    m = fresh("ij,jk->ik", [(2, 2), (2, 2)], torch.float16)
    storage = torch.empty(2**31 + 2, dtype=torch.float16)        # virtual memory only: never touched
    far = storage.as_strided((2, 2), (2**31, 1))                 # spans 2^31 + 1 elements
    near = torch.ones(2, 2, dtype=torch.float16)
    for _ in range(2):                                           # refused every time, never set up
        with pytest.raises(OverflowError, match="32-bit offsets"):
            m.launch(far, near)
        assert not m.launcher.layouts
    torch.testing.assert_close(m.launch(near, near), torch.full((2, 2), 2.0, dtype=torch.float16))
    with pytest.raises(OverflowError):
        m.launch(near, far)
    assert len(m.launcher.layouts) == 1


@interpreter
def test_layout_keys_tell_alignment_and_unit_strides_apart(fresh):
    m = fresh("ij,jk->ik", [(4, 4), (4, 4)], torch.float32)
    b = torch.randn(4, 4)
    aligned = torch.randn(4, 4)
    flat = torch.randn(17)
    misaligned = flat[1:].view(4, 4)                             # 4 bytes past a 16-byte boundary
    assert aligned.data_ptr() % 16 == 0 and misaligned.data_ptr() % 16 == 4
    unit = torch.randn(4, 4)                                     # strides (4, 1)
    strided = torch.randn(4, 8)[:, ::2]                          # strides (8, 2): no unit stride
    for x in (aligned, misaligned, unit, strided):
        torch.testing.assert_close(m.launch(x, b), x @ b)
    keys = list(m.launcher.layouts)
    assert len(keys) == 3                                        # aligned and unit share a layout
    key_of = {id(x): next(k for k in keys if k[:2] == (x.shape, x.stride()) and k[3] == x.data_ptr() % 16)
              for x in (aligned, misaligned, unit, strided)}
    assert key_of[id(aligned)] == key_of[id(unit)]
    assert key_of[id(aligned)] != key_of[id(misaligned)]         # differ in the alignment only
    assert [i for i, (p, q) in enumerate(zip(key_of[id(aligned)], key_of[id(misaligned)])) if p != q] == [3]
    assert key_of[id(unit)] != key_of[id(strided)]               # differ in a's strides only
    assert [i for i, (p, q) in enumerate(zip(key_of[id(unit)], key_of[id(strided)])) if p != q] == [1]
    assert 1 in key_of[id(unit)][1] and 1 not in key_of[id(strided)][1]
    m.launch(aligned, b, scale=0.5)                              # a scale is part of the layout too
    assert len(m.launcher.layouts) == 4
    m.launch(aligned.double(), b.double())                      # and so are the dtypes
    assert len(m.launcher.layouts) == 5
    (wide,) = set(m.launcher.layouts) - set(keys) - {k for k in m.launcher.layouts if k[-1]}
    assert [i for i, (p, q) in enumerate(zip(key_of[id(aligned)], wide)) if p != q] == [2, 6]


@interpreter
def test_the_fp32_precision_is_read_once(fresh, monkeypatch):
    m = fresh("ij,jk->ik", [(5, 6), (6, 7)], torch.float32)
    reads = []
    monkeypatch.setattr(launch, "fp32_precision", lambda: reads.append(1) or "ieee")
    a, b = layouts((5, 6), torch.float32), layouts((6, 7), torch.float32)
    for name in ["contiguous", "transposed", "sliced"] * 3:
        torch.testing.assert_close(m.launch(a[name], b[name]), a["contiguous"] @ b["contiguous"])
    assert len(reads) == 1
    m.forget()                                                   # the explicit way to read it again
    m.launch(a["contiguous"], b["contiguous"])
    m.launch(a["contiguous"], b["contiguous"])
    assert len(reads) == 2
    f64 = fresh("ij,jk->ik", [(5, 6), (6, 7)], torch.float64)
    f64.launch(*(torch.randn(s, dtype=torch.float64) for s in [(5, 6), (6, 7)]))
    assert len(reads) == 2 and f64.launcher.precision is None   # only fp32 dots have a precision


@interpreter
def test_the_fp32_precision_reader_follows_torch_and_never_raises(fresh, monkeypatch):
    m = fresh("ij,jk->ik", [(5, 6), (6, 7)], torch.float32)
    matmul = torch.backends.cuda.matmul
    if _has_new_api(matmul):
        before = matmul.fp32_precision
        try:
            matmul.fp32_precision = "tf32"       # the new API set (torch 2.13 then refuses allow_tf32)
            assert launch.fp32_precision() == "tf32"
            a, b = torch.randn(5, 6), torch.randn(6, 7)
            torch.testing.assert_close(m.launch(a, b), a @ b)    # the first launch reads it, and runs
            assert m.launcher.precision == "tf32"
            matmul.fp32_precision = "ieee"
            assert launch.fp32_precision() == "ieee"
        finally:
            matmul.fp32_precision = before

    class Old:                                                   # a torch with only allow_tf32
        def __init__(self, allow):
            self.allow_tf32 = allow

    class Refusing:                                              # mixed settings: both reads raise
        def __getattr__(self, name):
            raise RuntimeError("mix of the legacy and new APIs")

    for fake, expected in [(Old(True), "tf32"), (Old(False), "ieee"), (Refusing(), "ieee")]:
        monkeypatch.setattr(torch.backends.cuda, "matmul", fake)
        assert launch.fp32_precision() == expected


def _has_new_api(matmul) -> bool:
    try:
        _ = matmul.fp32_precision
    except AttributeError:
        return False
    return True


# --- the GPU's compiled launches, with stand-ins for Triton's autotuner and compiled kernel ---


class StandInKernel:
    """A compiled kernel as ``JITFunction.run`` returns it: ``run(grid..., stream, function,
    packed metadata, launch metadata, hooks, *every parameter in order)`` launches the real
    kernel (interpreted) with the values it was handed."""

    def __init__(self, jit, params, config):
        self.jit, self.params = jit, params
        self.src = SimpleNamespace(signature={p.name: "?" for p in params})
        self.metadata = SimpleNamespace(num_warps=config.num_warps, num_stages=config.num_stages)
        self.function, self.packed_metadata = object(), object()
        self.launches, self.fail = 0, False

    def run(self, g0, g1, g2, stream, function, packed, launch_metadata, enter, exit_, *values):
        assert (function, packed, stream) == (self.function, self.packed_metadata, "stream of device 0")
        if self.fail:
            raise RuntimeError("CUDA error: invalid resource handle")
        assert len(values) == len(self.params)
        for p, v in zip(self.params, values):                    # each value in its parameter's place
            assert isinstance(v, torch.Tensor) == p.name.endswith("_ptr"), p.name
            assert isinstance(v, float) == (p.name == "scale"), p.name
        self.launches += 1
        positional = [v for p, v in zip(self.params, values) if not p.is_constexpr]
        constexprs = {p.name: v for p, v in zip(self.params, values) if p.is_constexpr}
        self.jit[(g0, g1, g2)](*positional, **constexprs)


class StandInAutotuner:
    """A launcher's ``tuned``: launches through the interpreter with one fixed config and returns the
    stand-in compiled kernel, as ``Autotuner.run`` returns ``JITFunction.run``'s kernel;
    ``keys`` holds the key the real autotuner ``real`` would have built for each call."""

    def __init__(self, jit, config, real):
        sig = inspect.signature(jit.fn)
        params = [SimpleNamespace(name=n, is_constexpr=p.annotation is tl.constexpr) for n, p in sig.parameters.items()]
        assert sum(p.is_constexpr for p in params) >= 2
        self.fn = SimpleNamespace(params=params)
        self.best_config = config
        self.jit, self.calls = jit, 0
        self.kernel = StandInKernel(jit, params, config)
        self.real, self.keys = real, []

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.calls += 1
            named = {**dict(zip(self.real.arg_names, args)), **meta}    # as Autotuner.run builds its key
            self.keys.append(tuple(named[k] for k in self.real.keys if k in named)
                             + tuple(str(v.dtype) for v in named.values() if hasattr(v, "dtype")))
            meta = {**meta, **self.best_config.kwargs}
            self.jit[grid(meta) if callable(grid) else grid](*args, **meta)
            return self.kernel
        return launch


def as_if_on_a_gpu(monkeypatch, m, config):
    tuner = StandInAutotuner(getattr(m, m.__name__.rsplit(".", 1)[1]), config, m.launcher.tuned)
    monkeypatch.setattr(m.launcher, "interpret", False)
    monkeypatch.setattr(m.launcher, "compiled_launches", True)
    monkeypatch.setattr(m.launcher, "tuned", tuner)
    driver = SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda d: f"stream of device {d}")
    monkeypatch.setattr(triton.runtime, "driver", SimpleNamespace(active=driver))
    return tuner


MM = ("ij,jk->ik", [(40, 6), (6, 35)], triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}, num_warps=4,
                                                     num_stages=2))
RED = ("bij,bij->b", [(3, 4, 5), (3, 4, 5)], triton.Config({"BLOCK_O": 2, "BLOCK_K": 8}, num_warps=4))  # grids > 1
FUSED_MM = ("bi,oij,bj->bo", [(20, 5), (18, 5, 4), (20, 4)], MM[2])     # a product step fused into the matmul
PATHS = {FUSED_MM[0]: [(0, 2), (0, 1)]}
ORDERS = {FUSED_MM[0]: (1, 0, 2)}     # the fused launch takes the factors of A, then B's, then the epilogue's


@interpreter
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", [MM, RED, FUSED_MM], ids=["mm", "red", "fused"])
def test_the_autotuners_key_tells_layouts_of_one_shape_apart(fresh, monkeypatch, case, dtype):
    """A config tuned for one layout is not reused for another of the same shape (the
    stride classes differ), and layouts of one class share it (no needless re-tuning)."""
    equation, shapes, config = case
    m = fresh(equation, shapes, dtype, PATHS.get(equation))
    assert set(m.launcher.tuned.keys) <= set(m.launcher.tuned.arg_names)        # triton 3.6 drops other names silently
    assert ("PRECISION" in m.launcher.tuned.keys) == (dtype == torch.float32 and case is not RED)   # fp32 dots only
    tuner = as_if_on_a_gpu(monkeypatch, m, config)
    g = torch.Generator().manual_seed(5)
    ops = [torch.randn(s, generator=g, dtype=dtype) for s in shapes]
    expected = torch.einsum(equation, *ops)
    ops = [ops[i] for i in ORDERS.get(equation, range(len(ops)))]
    first = ops[0]
    transposed = first.transpose(-1, -2).contiguous().transpose(-1, -2)     # a unit stride elsewhere
    spaced = torch.zeros((2 * first.shape[0],) + first.shape[1:], dtype=dtype)[::2]
    spaced.copy_(first)                                          # other strides, the same class
    for x in (first, transposed, spaced):
        torch.testing.assert_close(m.launch(x, *ops[1:]), expected)
    assert len(m.launcher.layouts) == 3 and tuner.calls == 3
    contiguous, other, same_class = tuner.keys
    assert contiguous != other
    assert contiguous == same_class


@interpreter
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", [MM, RED, FUSED_MM], ids=["mm", "red", "fused"])
def test_after_the_first_launch_the_compiled_kernel_is_called_directly(fresh, monkeypatch, case, dtype):
    equation, shapes, config = case
    m = fresh(equation, shapes, dtype, PATHS.get(equation))
    tuner = as_if_on_a_gpu(monkeypatch, m, config)
    g = torch.Generator().manual_seed(4)
    ops = [torch.randn(s, generator=g, dtype=dtype) for s in shapes]
    expected = torch.einsum(equation, *ops)
    ops = [ops[i] for i in ORDERS.get(equation, range(len(ops)))]
    views = [ops, [o.transpose(-1, -2).contiguous().transpose(-1, -2) for o in ops]]
    for n in range(1, 4):
        for v in views:
            torch.testing.assert_close(m.launch(*v), expected)
        assert tuner.calls == 2                                  # the autotuner: once per layout
        assert tuner.kernel.launches == 2 * (n - 1)              # then the compiled kernel
    torch.testing.assert_close(m.launch(*ops, scale=0.5), 0.5 * expected)
    torch.testing.assert_close(m.launch(*ops, scale=0.5), 0.5 * expected)
    assert (tuner.calls, tuner.kernel.launches) == (3, 5)
    assert all(known.compiled is not None for known in m.launcher.layouts.values())


@interpreter
@pytest.mark.parametrize("case", [MM, FUSED_MM], ids=["mm", "fused"])
def test_a_failing_compiled_launch_falls_back_for_good(fresh, monkeypatch, case):
    equation, shapes, config = case
    m = fresh(equation, shapes, torch.float64, PATHS.get(equation))
    tuner = as_if_on_a_gpu(monkeypatch, m, config)
    ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
    expected = torch.einsum(equation, *ops)
    a, *rest = [ops[i] for i in ORDERS.get(equation, range(len(ops)))]
    m.launch(a, *rest)
    m.launch(a.transpose(-1, -2).contiguous().transpose(-1, -2), *rest)
    m.launch(a, *rest)
    assert (tuner.calls, tuner.kernel.launches) == (2, 1)
    tuner.kernel.fail = True
    torch.testing.assert_close(m.launch(a, *rest), expected)    # answered through the autotuner
    assert m.launcher.compiled_launches is False
    assert all(known.compiled is None for known in m.launcher.layouts.values())
    tuner.kernel.fail = False
    for _ in range(3):
        torch.testing.assert_close(m.launch(a, *rest), expected)
    assert (tuner.calls, tuner.kernel.launches) == (6, 1)        # never again compiled launches


@interpreter
def test_launch_hooks_and_other_devices_take_tritons_own_path(fresh, monkeypatch):
    equation, shapes, config = MM
    m = fresh(equation, shapes)
    tuner = as_if_on_a_gpu(monkeypatch, m, config)
    hooks = SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)    # as in triton 3.6
    monkeypatch.setattr(triton.knobs, "runtime", hooks)
    current = {"device": 0}
    triton.runtime.driver.active.get_current_device = lambda: current["device"]
    a, b = (torch.randn(s, dtype=torch.float64) for s in shapes)
    m.launch(a, b)
    m.launch(a, b)
    assert (tuner.calls, tuner.kernel.launches) == (1, 1)
    hooks.launch_enter_hook = lambda metadata: None              # a profiler listening
    torch.testing.assert_close(m.launch(a, b), a @ b)
    assert (tuner.calls, tuner.kernel.launches) == (2, 1)
    hooks.launch_enter_hook = None
    m.launch(a, b)
    assert (tuner.calls, tuner.kernel.launches) == (2, 2)
    current["device"] = 1                                        # another current device
    torch.testing.assert_close(m.launch(a, b), a @ b)
    assert (tuner.calls, tuner.kernel.launches) == (3, 2)
    current["device"] = 0
    m.launch(a, b)
    assert (tuner.calls, tuner.kernel.launches) == (3, 3)
    assert m.launcher.compiled_launches is True                          # neither turns compiled launches off


@interpreter
def test_an_unexpected_triton_turns_compiled_launches_off(fresh, monkeypatch):
    equation, shapes, config = MM
    m = fresh(equation, shapes)
    tuner = as_if_on_a_gpu(monkeypatch, m, config)
    del tuner.kernel.packed_metadata                             # an attribute this Triton lacks
    a, b = (torch.randn(s, dtype=torch.float64) for s in shapes)
    for _ in range(3):
        torch.testing.assert_close(m.launch(a, b), a @ b)
    assert m.launcher.compiled_launches is False and tuner.calls == 3


@pytest.mark.gpu
def test_compiled_launches_on_a_gpu(monkeypatch, tmp_path):
    """On a real GPU: after a layout's first launch its compiled launcher is set up and used."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EINC_SELECT", "kernel")                 # the generated kernel, not cuBLAS
    einc.cache_clear()
    a, b = torch.randn(64, 32, device="cuda"), torch.randn(32, 48, device="cuda")
    for x in (a, a.t().contiguous().t(), a, a[:, :]):
        for _ in range(3):
            torch.testing.assert_close(einc.einsum("ij,jk->ik", x, b), x @ b, rtol=1e-2, atol=1e-2)
    (shown,) = einc.explain("ij,jk->ik", a, b).backends     # this equation's module (others may be loaded)
    module = sys.modules["einc_kernels." + shown.removeprefix("triton ")]
    assert module.launcher.compiled_launches is True
    assert len(module.launcher.layouts) == 2
    assert all(known.compiled is not None for known in module.launcher.layouts.values())
    einc.cache_clear()


@pytest.mark.gpu
def test_compiled_launches_of_a_fused_kernel_on_a_gpu(monkeypatch, tmp_path):
    """On a real GPU: a fused step's module sets up its compiled launcher after a layout's
    first launch, as the other modules do, and its answers stay right."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EINC_SELECT", "kernel")
    einc.cache_clear()
    equation, shapes, _ = FUSED_MM
    g = torch.Generator().manual_seed(6)
    ops = [torch.randn(s, generator=g, dtype=torch.float64).cuda() for s in shapes]
    expected = torch.einsum(equation, *ops)
    for x in (ops[0], ops[0].t().contiguous().t()):
        for _ in range(3):
            torch.testing.assert_close(einc.einsum(equation, x, *ops[1:], optimize=PATHS[equation]), expected)
    (shown,) = einc.explain(equation, *ops, optimize=PATHS[equation]).backends     # one fused kernel
    module = sys.modules["einc_kernels." + shown.removeprefix("triton ")]
    assert module.launcher.compiled_launches is True
    assert len(module.launcher.layouts) == 2
    assert all(known.compiled is not None for known in module.launcher.layouts.values())
    einc.cache_clear()


@interpreter
def test_the_overhead_benchmark_stubs_launches_and_puts_them_back(fresh, monkeypatch, tmp_path):
    from einc.tools.benchmark import dispatch
    monkeypatch.setenv("EINC_BACKEND", "triton")
    assert dispatch.run_kernels_noop(tmp_path / "out", rounds=1, quick=True) == 0
    with open(tmp_path / "out" / "dispatch_kernels_noop.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(dispatch.SIZES) and all(float(r["einc_us_per_step"]) > 0 for r in rows)
    modules = dispatch._generated_modules()
    assert modules and not any(isinstance(m.launcher.kernel, dispatch._NoopKernel) for m in modules.values())


@pytest.mark.parametrize("ms,timed_by_runs", [(80.0, False), (autotune.SLOW_MS, False), (0.2, True)])
def test_the_autotuner_times_a_slow_config_by_one_run(monkeypatch, ms, timed_by_runs):
    """Triton's do_bench runs each config 9 times or more; a config whose timed run takes
    SLOW_MS or more is measured by that run alone (2 runs in all, the first compiling),
    a faster one as do_bench times it (``_runs_ms``).  Every Launcher hands the autotuner
    this timer."""
    runs, more = [], []
    monkeypatch.setattr(autotune, "_one_run_ms", lambda fn: (fn(), ms)[1])
    monkeypatch.setattr(autotune, "_runs_ms", lambda fn, rep, quantiles=None:
                        more.append((rep, quantiles)) or [0.2, 0.19, 0.21])
    got = autotune.tuning_bench(lambda: runs.append(1), quantiles=(0.5, 0.2, 0.8))
    assert len(runs) == 2
    assert more == ([(autotune.REP_MS, (0.5, 0.2, 0.8))] if timed_by_runs else [])
    assert got == ([0.2, 0.19, 0.21] if timed_by_runs else [ms, ms, ms])
    if "do_bench" in inspect.signature(triton.autotune).parameters:
        launcher = launch.Launcher(triton.jit(_kernel_for_tuning), None, kind="reduce", dtype="float32",
                                   configs="reduce-k")
        assert launcher.tuned.do_bench is autotune.tuning_bench


# the parameters are named as the launcher passes them: O is the reduce kernel's output count
def _kernel_for_tuning(x_ptr, K: tl.constexpr, K_SPLIT: tl.constexpr, O: tl.constexpr,  # noqa: E741
                       BLOCK_O: tl.constexpr, BLOCK_K: tl.constexpr):
    pass


class FixedConfigKernel:
    """A launcher's ``kernel`` on a GPU as ``screen`` indexes it: records the arguments of
    each launch (a config's constexprs and ``num_warps``... among them) and launches the
    real kernel, interpreted, with them."""

    def __init__(self, jit):
        self.jit, self.calls = jit, []

    def __getitem__(self, grid):
        def run(*args, **meta):
            self.calls.append(meta)
            self.jit[grid(meta) if callable(grid) else grid](*args, **meta)
        return run


SPLIT_MM = ("ij,jk->ik", [(4, 1100), (1100, 5)], MM[2])          # K split in slices: a workspace and a second pass


@interpreter
@pytest.mark.parametrize("case", [MM, RED, FUSED_MM, SPLIT_MM], ids=["mm", "red", "fused", "split"])
def test_screen_launches_the_first_config_untuned_and_keeps_nothing(fresh, monkeypatch, case):
    """``screen`` (measure mode's first round) launches the kernel once with the first config
    the autotuner would time for the shape, never through the autotuner, sets up no layout,
    and answers right; the next ``launch`` of that layout is set up and tuned as usual.  Under
    the interpreter, ``screen`` is one interpreted launch."""
    equation, shapes, config = case
    m = fresh(equation, shapes, torch.float64, PATHS.get(equation))
    g = torch.Generator().manual_seed(7)
    ops = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    expected = torch.einsum(equation, *ops)
    ops = [ops[i] for i in ORDERS.get(equation, range(len(ops)))]
    torch.testing.assert_close(m.screen(*ops), expected)           # the interpreter's own path
    assert not m.launcher.layouts
    tuner = as_if_on_a_gpu(monkeypatch, m, config)
    fixed = FixedConfigKernel(m.launcher.kernel)
    monkeypatch.setattr(m.launcher, "kernel", fixed)
    torch.testing.assert_close(m.screen(*ops), expected)
    assert tuner.calls == 0 and not m.launcher.layouts
    # one launch (a split's second pass is another kernel)
    (meta,) = fixed.calls
    first = m.launcher.first_config(meta)
    assert first in m.launcher.configs and first.all_kwargs().items() <= meta.items()
    if case is MM:        # fp64, 40x35 over 6: the 64x64x16 tile, 4 warps, 2 stages
        assert (meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"], meta["num_warps"], meta["num_stages"]) == \
            (64, 64, 16, 4, 2)
        other = m.launcher.configs[-1]                             # a config named: that one (bench/gpu_variants.py)
        torch.testing.assert_close(m.launcher.screen(tuple(ops), 1.0, other), expected)
        assert other.all_kwargs().items() <= fixed.calls[-1].items() and other != first
        fixed.calls.pop()
    if case is SPLIT_MM:
        assert meta["SPLIT_K"] > 1
    torch.testing.assert_close(m.launch(*ops), expected)             # then tuned, as ever
    assert tuner.calls == 1 and len(m.launcher.layouts) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("shapes", [[(64, 32), (32, 48)], [(4, 4096), (4096, 5)]], ids=["mm", "split"])
def test_screen_on_a_gpu(monkeypatch, tmp_path, shapes):
    """On a real GPU: ``screen`` compiles and runs the first config untuned (a split-K layout
    through its workspace and second pass), answers right and keeps no layout; ``launch``
    then sets the layout up, tuned."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    einc.cache_clear()
    a, b = (torch.randn(s, dtype=torch.float64, device="cuda") for s in shapes)
    plan = einc.explain("ij,jk->ik", a, b, select="kernel").plan
    (kernel,) = triton_executor.kernels(plan, a.dtype, shapes)
    run = triton_executor.launch_of(kernel)
    module = sys.modules[run.__module__]
    torch.testing.assert_close(triton_executor.screen_of(run)(a, b), a @ b)
    assert not module.launcher.layouts
    torch.testing.assert_close(run(a, b), a @ b)
    assert len(module.launcher.layouts) == 1
    einc.cache_clear()


@interpreter
def test_layouts_are_set_up_and_interpreted_one_thread_at_a_time(fresh, monkeypatch):
    """Two threads launching one kernel on new layouts at once (learn mode sets kernels up
    on a background thread while the caller's thread may launch the same module): setting
    up a layout and Triton's interpreter run one at a time, and each answer is right."""
    import threading
    import time
    module = fresh("ij,jk->ik", [(5, 6), (6, 7)])
    launcher = module.launcher
    active, most, real = [0], [0], launcher._set_up

    def slow(*args):
        active[0] += 1
        most[0] = max(most[0], active[0])
        time.sleep(0.05)                     # (the other thread would enter here)
        try:
            return real(*args)
        finally:
            active[0] -= 1
    monkeypatch.setattr(launcher, "_set_up", slow)
    b = torch.randn(6, 7, dtype=torch.float64)
    pairs = [(a, b) for a in layouts((5, 6)).values()]
    results = [None] * len(pairs)

    def run(k):
        results[k] = module.launch(*pairs[k])
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(pairs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert most[0] == 1
    for (a, b), got in zip(pairs, results):
        torch.testing.assert_close(got, a @ b)


def test_a_module_naming_a_table_this_einc_lacks_says_to_regenerate_it():
    """A module dumped by another einc may name a config table this one has not (the 2-D K
    block's ``matmul-kt``): building its launcher fails with a message that says to
    regenerate it, not a bare KeyError; every table the code generator names exists."""
    from einc.codegen.launcher import table
    with pytest.raises(ValueError, match="regenerate it"):
        launch.config_table("matmul-kt", "float32")
    for equation, shapes in [("ij,jk->ik", [(4, 5), (5, 6)]), ("ikc,jkc->ijc", [(4, 5, 3), (6, 5, 3)]),
                             ("dega,gfbc->abcdef", [(3, 5, 2, 2), (2, 3, 4, 2)]), ("ij,ij->i", [(4, 5), (4, 5)])]:
        (kernel,) = lower_program(build_plan(build(parse(equation), shapes), equation), "float32", shapes)
        assert launch.config_table(table(kernel), "float32")
