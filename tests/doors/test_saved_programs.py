"""Programs saved with einc's op in them, loaded in a new process: traced, scripted and
exported code calling ``einc.einsum`` loads once ``einc.custom_op`` is imported, runs at
other sizes, and gives the bits of the same call made eagerly in the loading process."""

import os
import pathlib
import subprocess
import sys

import pytest
import torch

import einc

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _traced(a, b):
    return einc.einsum("ij,jk->ki", a, b, layout="any")


class _Scripted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(5, 6, dtype=torch.float64))

    def forward(self, x):
        return einc.einsum("...i,ij->...j", x, self.w)


class _Exported(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 3, 6, dtype=torch.float64))

    def forward(self, x, y):
        return einc.einsum("bi,ioj,bj->bo", x, self.w, y)


def _save(folder):
    torch.manual_seed(0)
    a, b = torch.randn(5, 17, dtype=torch.float64), torch.randn(17, 3, dtype=torch.float64)
    torch.jit.save(torch.jit.trace(_traced, (a, b)), os.path.join(folder, "traced.pt"))
    torch.jit.save(torch.jit.script(_Scripted()), os.path.join(folder, "scripted.pt"))
    m = _Exported()
    x, y = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    batch = torch.export.Dim("batch", min=1)
    ep = torch.export.export(m, (x, y), dynamic_shapes=({0: batch}, {0: batch}))
    torch.export.save(ep, os.path.join(folder, "exported.pt2"))


def _load(folder):
    import einc.custom_op  # noqa: F401  (registers einc::einsum, as docs/autograd-and-compile.md says)
    torch.manual_seed(1)
    f64 = dict(dtype=torch.float64)
    traced = torch.jit.load(os.path.join(folder, "traced.pt"))
    for i, j, k in ((5, 17, 3), (1, 9, 0), (7, 1, 4)):
        a, b = torch.randn(i, j, **f64), torch.randn(j, k, **f64)
        out = traced(a, b)
        assert torch.equal(out, einc.einsum("ij,jk->ki", a, b, layout="any")), (i, j, k)
        torch.testing.assert_close(out, torch.einsum("ij,jk->ki", a, b))
    scripted = torch.jit.load(os.path.join(folder, "scripted.pt"))
    for shape in ((2, 3, 5), (5,), (0, 5)):
        x = torch.randn(shape, **f64)
        out = scripted(x)
        assert torch.equal(out, einc.einsum("...i,ij->...j", x, scripted.w)), shape
        torch.testing.assert_close(out, torch.einsum("...i,ij->...j", x, scripted.w))
    exported = torch.export.load(os.path.join(folder, "exported.pt2")).module()
    w = exported.w
    for n in (3, 1, 8):
        x, y = torch.randn(n, 4, **f64), torch.randn(n, 6, **f64)
        out = exported(x, y)
        assert torch.equal(out, einc.einsum("bi,ioj,bj->bo", x, w, y)), n
        torch.testing.assert_close(out, torch.einsum("bi,ioj,bj->bo", x, w, y))
    print("loaded")


def _run(step, folder):
    code = f"from tests.doors.test_saved_programs import {step}; {step}({str(folder)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_programs_saved_in_one_process_load_and_run_in_another(tmp_path):
    saved = _run("_save", tmp_path)
    assert saved.returncode == 0, saved.stderr[-3000:]
    loaded = _run("_load", tmp_path)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.strip() == "loaded", loaded.stdout
