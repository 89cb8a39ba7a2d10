"""Where the generated kernels run in the tests, and the markers that select tests.

On a machine with a CUDA GPU the kernel tests run CUDA tensors through kernels Triton
compiles for real.  Elsewhere they run CPU tensors through Triton's interpreter
(``EINC_BACKEND=triton``), which needs ``TRITON_INTERPRET=1`` before triton is first
imported: it is set here, before any test module imports einc's kernels, unless the
environment says otherwise.

Markers (``pytest -m``): ``kernels`` (tests that run generated kernels: the
``kernel_device`` fixture), ``interpreter`` (tests that need Triton's interpreter on CPU
tensors, skipped where it is off), ``gpu`` (tests that need CUDA, skipped without it),
``slow`` (runs of ten seconds and more: the examples, the wheel build, the patched battery,
Triton's real compiler, third-party suites, torch.compile with inductor, fresh
interpreters; ``-m "not slow"`` is the quick loop).

Layout: the test folders mirror the package (``planner/``, ``codegen/``, ``runtime/``,
``doors/``, ``dynamo/``, ``tools/``, ``fuzz/``) and are packages, so that two folders may
hold files of one name; ``support/`` holds the helpers the tests import by bare name
(``oracle``, ``fuzz``, ``networks``, ``entries``, ``threads``, ``compiler``), put on ``sys.path``
here, and the programs the tests run in subprocesses (``support/scripts/``, ``support/patched_battery.py``).
"""

import atexit
import os
import shutil
import sys
import tempfile

import pytest
import torch

GPU = torch.cuda.is_available()
if not GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# einc's cache folder for the session (and the processes its tests start): a fresh one,
# private as einc asks, never the user's, so that no test reads the paths, slicings or
# kernels another run remembered there, nor leaves its own behind
_CACHE = tempfile.mkdtemp(prefix="einc-tests-")
os.environ["EINC_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

# no compiled copies (runtime/torch_executor/compiled_copy.py) but in their own tests: a
# background compile would make a test's timing and its threads depend on earlier tests
os.environ["EINC_COPY_COMPILE"] = "off"

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "support"))


def _interpreter_on() -> bool:
    from einc import config
    return bool(config.triton_interpret())


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords and not GPU:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "interpreter" in item.keywords and not _interpreter_on():
            item.add_marker(pytest.mark.skip(reason="needs TRITON_INTERPRET=1 (Triton's CPU interpreter)"))


@pytest.fixture(autouse=True, scope="session")
def _dynamo_reads_torch_unpatched():
    """dynamo reads torch's functions into a table once a process, at its first compile: a
    test that compiles with ``torch.einsum = einc.einsum`` patched in before then makes
    einc.einsum torch's einsum to dynamo in every later test of the worker (as for a user
    who patches before the first compile: docs/autograd-and-compile.md), so the table is
    read here, unpatched, before any test."""
    from torch._dynamo import trace_rules
    trace_rules.get_torch_obj_rule_map()
    yield


@pytest.fixture
def cleared_caches():
    """einc's caches in memory emptied before the test and after it."""
    import einc
    einc.cache_clear()
    yield
    einc.cache_clear()


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    """An empty cache folder for one test: nothing an earlier test of the session
    remembered (a search long enough to be stored on a loaded machine) is read."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path / "einc-cache"))
    return tmp_path / "einc-cache"


@pytest.fixture
def kernel_device(monkeypatch, tmp_path_factory):
    """The device whose tensors run generated kernels: ``cuda:N`` (the current GPU, with its
    index, as a tensor's ``.device`` says) on a GPU machine, with ``EINC_SELECT=kernel`` so
    that every step runs its generated kernel (a GPU's default would time cuBLAS against
    it and might keep cuBLAS: test_select tests that choice), else ``cpu`` with
    ``EINC_BACKEND=triton`` (the interpreter, where ``kernel`` is the default already).
    A fresh cache folder, and einc's caches emptied before and after."""
    pytest.importorskip("triton")
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "einc-cache"))
    if GPU:
        monkeypatch.setenv("EINC_SELECT", "kernel")
    else:
        monkeypatch.setenv("EINC_BACKEND", "triton")
    import einc
    einc.cache_clear()
    yield torch.device("cuda", torch.cuda.current_device()) if GPU else torch.device("cpu")
    einc.cache_clear()


@pytest.fixture
def chunks_always(monkeypatch):
    """Every permuted last product and every multiply-and-sum cut, in chunks of 64 bytes
    per thread (runtime/torch_executor/chunked.py), einc's caches emptied before and after."""
    import einc
    from einc.runtime.torch_executor import chunked, summed
    monkeypatch.setattr(chunked, "MIN_BYTES", 0)
    monkeypatch.setattr(summed, "HALF_MIN_BYTES", 0)
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 64)
    einc.cache_clear()
    yield
    einc.cache_clear()


@pytest.fixture
def per_shape_plans(monkeypatch):
    """Every call planned per shape (``EINC_NEW_SHAPES=plan``: the per-shape executor's
    steps, not a size class's, runtime/sizeclass.py; nor torch's op, which
    ``EINC_NEW_SHAPES=torch`` gives a small call), einc's caches emptied before and after."""
    import einc
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    einc.cache_clear()
    yield
    einc.cache_clear()


@pytest.fixture(params=["plan", "class"])
def new_shapes(request, monkeypatch):
    """Each of the two ways einc runs a shape it has not planned (``EINC_NEW_SHAPES``): a
    plan of its own, or its size class's steps (runtime/sizeclass.py); the value is the
    mode, einc's caches emptied before and after.  (A test that names ``new_shapes`` in
    ``parametrize`` sets the variable itself.)"""
    import einc
    monkeypatch.setenv("EINC_NEW_SHAPES", request.param)
    einc.cache_clear()
    yield request.param
    einc.cache_clear()


@pytest.fixture
def calls(monkeypatch):
    """The equations einc's executor runs, in order."""
    from einc.runtime import engine
    seen = []
    run = engine.run

    def spy(eq, operands, options):
        seen.append(eq.text)
        return run(eq, operands, options)
    monkeypatch.setattr(engine, "run", spy)
    return seen


@pytest.fixture
def applied(monkeypatch):
    """``applied(cls)``: a function that says how many times ``cls.apply`` (an
    autograd.Function's) has run since, every call passed on."""
    def count(cls):
        seen = []
        apply = cls.apply
        monkeypatch.setattr(cls, "apply", lambda *args: seen.append(1) or apply(*args))
        return lambda: len(seen)
    return count
