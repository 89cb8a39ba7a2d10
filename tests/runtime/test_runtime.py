"""Loader and dispatch: modules in real files, fallbacks that warn once and stay correct."""

import inspect
import sys
import warnings

import pytest
import torch
from compiler import uninterpreted_env

import einc
from einc import codegen, errors
from einc.runtime import triton_executor
from einc.runtime.triton_executor import loader

pytest.importorskip("triton")


@pytest.fixture
def triton_backend(monkeypatch, tmp_path):
    monkeypatch.setenv("EINC_BACKEND", "triton")
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    einc.cache_clear()          # also forgets the warnings given
    yield tmp_path
    einc.cache_clear()


def test_modules_live_in_files_and_are_imported_by_path(triton_backend):
    a, b = torch.randn(5, 6), torch.randn(6, 7)
    torch.testing.assert_close(einc.einsum("ij,jk->ik", a, b), a @ b)
    files = list((triton_backend / "kernels").glob("einc_mm_*.py"))
    assert len(files) == 1 and not list((triton_backend / "kernels").glob("*.tmp"))
    module = sys.modules[f"einc_kernels.{files[0].stem}"]
    assert module.__file__ == str(files[0])
    kernel = next(v for k, v in vars(module).items() if k.startswith("einc_mm_"))
    assert "tl.dot" in inspect.getsource(kernel.fn)           # Triton can read its source


def test_broken_kernel_falls_back_once_with_the_right_answer(triton_backend, monkeypatch):
    monkeypatch.setattr(codegen, "cache_source", lambda source: "def broken(:\n")
    a, b = torch.randn(4, 3), torch.randn(3, 2)
    with pytest.warns(RuntimeWarning, match="torch executor"):
        out = einc.einsum("ij,jk->ik", a, b)
    torch.testing.assert_close(out, a @ b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(einc.einsum("ij,jk->ik", a, b), a @ b)   # no second warning
    assert einc.explain("ij,jk->ik", a, b).backends == ("torch",)     # the entry fell back for good


def test_load_error_shows_numbered_source_and_path(tmp_path, monkeypatch):
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    with pytest.raises(errors.KernelLoadError) as err:
        loader.load("einc_broken_0", "x = 1\ndef broken(:\n")
    assert "   2  def broken(:" in str(err.value) and str(tmp_path) in str(err.value)


def test_missing_triton_falls_back(triton_backend, monkeypatch):
    monkeypatch.setattr(triton_executor, "installed", lambda: False)
    a = torch.randn(3, 3)
    with pytest.warns(RuntimeWarning, match="triton is not installed"):
        torch.testing.assert_close(einc.einsum("ij,jk->ik", a, a), a @ a)


def test_explain_names_the_backend_of_each_step(monkeypatch):
    monkeypatch.delenv("EINC_BACKEND", raising=False)
    gpu = einc.explain("bqhd,bkhd->bhqk", (2, 8, 4, 16), (2, 8, 4, 16), dtype=torch.float16, device="cuda")
    assert gpu.backends == ("torch",) and gpu.reasons[0].startswith("modelled")     # learn's first choice
    assert "do not merge into one stride" in gpu.reasons[0]     # why not cuBLAS as it is: a copy first
    kernel = einc.explain("bqhd,bkhd->bhqk", (2, 8, 4, 16), (2, 8, 4, 16), dtype=torch.float16, device="cuda",
                          select="model")
    assert kernel.backends[0].startswith("triton einc_mm_") and "through their strides" in str(kernel)
    cpu = einc.explain("bqhd,bkhd->bhqk", torch.randn(2, 8, 4, 16), torch.randn(2, 8, 4, 16))
    assert cpu.backends == ("torch",) and "torch executor" in str(cpu)
    c64 = einc.explain("ij,jk->ik", (2, 2), (2, 2), dtype=torch.complex64, device="cuda")
    assert c64.backends == ("torch",)


def test_explain_takes_a_dtype_by_name(monkeypatch):
    """explain and contract_path describe shapes in a dtype given as a torch dtype or its
    name (numpy's dtypes too), the same on every device; anything else is refused."""
    import numpy as np

    from einc.errors import DtypeError
    monkeypatch.delenv("EINC_BACKEND", raising=False)
    shapes = ((2, 8, 4, 16), (2, 8, 4, 16))
    for device in ("cuda", "cpu"):
        by_dtype = einc.explain("bqhd,bkhd->bhqk", *shapes, dtype=torch.float16, device=device)
        for name in ("float16", np.float16, np.dtype("float16")):
            by_name = einc.explain("bqhd,bkhd->bhqk", *shapes, dtype=name, device=device)
            assert by_name.backends == by_dtype.backends and str(by_name) == str(by_dtype)
        path, info = einc.contract_path("bqhd,bkhd->bhqk", *shapes, dtype="float16", device=device)
        assert path == [(0, 1)] and info.backends == by_dtype.backends
    for door in (einc.explain, einc.contract_path):
        with pytest.raises(DtypeError, match=rf"{door.__name__}\(\): dtype='float7' is not a dtype torch has"):
            door("ij,jk->ik", (2, 3), (3, 4), dtype="float7", device="cuda")


def test_explain_and_path_info_copy_and_pickle():
    """explain's answer and contract_path's PathInfo copy, deep-copy and pickle (as
    opt_einsum's PathInfo does), and print the same afterwards."""
    import copy
    import pickle
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 2)
    _, info = einc.contract_path("ij,jk,kl->il", a, b, c)
    explained = einc.explain("ij,jk,kl->il", a, b, c)
    for original in (info, explained):
        for again in (copy.copy, copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))):
            twin = again(original)
            assert type(twin) is type(original) and str(twin) == str(original)
            assert twin.path == original.path and twin.backends == original.backends


def test_einc_backend_triton_alone_runs_kernels_on_a_cpu(tmp_path):
    """EINC_BACKEND=triton with TRITON_INTERPRET unset, on a machine without a CUDA
    device: einc sets TRITON_INTERPRET=1 before its front door imports torch._dynamo
    (which imports triton), so the kernels run under the interpreter, without a warning."""
    import subprocess
    import sys
    if torch.cuda.is_available():
        pytest.skip("with a CUDA device einc leaves TRITON_INTERPRET to the user")
    script = ("import os, warnings, torch, einc\n"
              "warnings.simplefilter('error')\n"
              "a = torch.randn(4, 5)\n"
              "torch.testing.assert_close(einc.einsum('ij,jk->ik', a, a.T), a @ a.T)\n"
              "print(os.environ.get('TRITON_INTERPRET'), einc.explain('ij,jk->ik', a, a.T).backends[0].split()[0])\n")
    env = uninterpreted_env(EINC_BACKEND="triton", EINC_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    interpret, backend = done.stdout.split()
    assert (interpret, backend) == ("1", "triton")


def test_scale_is_fused_into_the_epilogue(triton_backend):
    """launch(..., scale=s) multiplies in the kernel's epilogue (how a call's scalars are folded in)."""
    from einc.planner.equation import parse
    from einc.planner.graph import build
    from einc.planner.plan import build_plan
    triton_executor.use_interpreter()
    for eq, shapes in [("bij,bjk->bik", [(2, 5, 6), (2, 6, 3)]), ("bij,bij->b", [(3, 4, 5), (3, 4, 5)])]:
        ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
        plan = build_plan(build(parse(eq), shapes))
        (kernel,) = triton_executor.kernels(plan, torch.float64, shapes)
        launch = loader.load(kernel.name, kernel.source).launch
        torch.testing.assert_close(launch(*ops, scale=0.25), 0.25 * torch.einsum(eq, *ops))
        torch.testing.assert_close(launch(*ops), torch.einsum(eq, *ops))


@pytest.mark.parametrize("select", ["kernel", "model", "measure"])
def test_operands_a_kernel_would_misread_run_on_torch(triton_backend, select):
    """A view with the negative bit (z.conj().imag: its values are the negated memory) and a
    zero tensor have no memory a kernel can read as they are: that call runs on torch, the
    kernels stay for the next."""
    triton_executor.use_interpreter()
    negated = torch.randn(6, 7, dtype=torch.complex128).conj().imag
    assert negated.is_neg()
    b = torch.randn(7, 5, dtype=torch.float64)
    for eq, ops in [("ij,jk->ik", (negated, b)), ("ij->i", (negated,)), ("ii->i", (negated[:, :6],)),
                    ("ij,jk->ik", (b.T, negated.T))]:
        torch.testing.assert_close(einc.einsum(eq, *ops, select=select), torch.einsum(eq, *ops))
    zero = torch._efficientzerotensor((6, 7), dtype=torch.float64)
    torch.testing.assert_close(einc.einsum("ij,jk->ik", zero, b, select=select), torch.zeros(6, 5, dtype=torch.float64))
    plain = torch.randn(6, 14, dtype=torch.float64)[:, ::2]     # strided as the negated view: the same entry
    torch.testing.assert_close(einc.einsum("ij,jk->ik", plain, b, select=select), plain @ b)
    explained = einc.explain("ij,jk->ik", plain, b, select=select)
    if select == "measure":     # measured on this call (the first kernels could read): any candidate may win
        assert "measured" in str(explained) and "failed" not in str(explained)
    else:
        assert explained.backends[0].startswith("triton einc_mm_")


def test_a_fake_first_call_leaves_the_kernels_to_real_ones(triton_backend):
    """A first call on fake tensors (a fake mode: no memory to launch on) runs on torch and
    does not move the entry off its kernels."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    triton_executor.use_interpreter()
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with FakeTensorMode() as mode, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")     # the launch asked a fake tensor for its data pointer: a warning
        for _ in range(2):                  # (and, on every call, failed before torch's ops ran)
            assert einc.einsum("ij,jk->ik", mode.from_tensor(a), mode.from_tensor(b), select="kernel").shape == (3, 5)
    assert not [str(w.message) for w in seen if "data pointer" in str(w.message)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # no "a generated kernel failed" warning either
        torch.testing.assert_close(einc.einsum("ij,jk->ik", a, b, select="kernel"), a @ b)
    assert einc.explain("ij,jk->ik", a, b, select="kernel").backends[0].startswith("triton einc_mm_")


def test_the_op_scales_a_sliced_plan():
    """torch.ops.einc.einsum(..., scale) on a plan sliced by memory_limit runs the slices and
    scales their sum, rather than raising TypeError."""
    import einc.custom_op  # noqa: F401 - registers the op
    a, b, c = (torch.randn(s, dtype=torch.float64) for s in [(8, 30), (30, 30), (30, 8)])
    out = torch.ops.einc.einsum("ij,jk,kl->il", [a, b, c], "auto", "100", scale=0.5)
    assert einc.explain("ij,jk,kl->il", a, b, c, memory_limit=100).slicing is not None
    torch.testing.assert_close(out, 0.5 * (a @ b @ c))


def test_select_in_any_case_as_einc_select():
    """select= takes any case, as EINC_SELECT does (it refused "KERNEL")."""
    a = torch.randn(3, 4)
    torch.testing.assert_close(einc.einsum("ij,jk->ik", a, a.T, select="KERNEL"), a @ a.T)
    assert einc.explain("ij,jk->ik", (3, 4), (4, 5), device="cuda", select="Kernel").backends == \
        einc.explain("ij,jk->ik", (3, 4), (4, 5), device="cuda", select="kernel").backends


def test_explain_names_the_device_where_kernels_were_asked_for_on_another(monkeypatch):
    """EINC_BACKEND=triton runs kernels on CPU and CUDA tensors; on meta tensors explain
    says the device is why, not that the kernels could not be built (with no warning)."""
    monkeypatch.setenv("EINC_BACKEND", "triton")
    a = torch.ones(2, 2, device="meta")
    note = einc.explain("ij,jk->ik", a, a).note
    assert "the operands are on the META" in note and "could not be built" not in note
