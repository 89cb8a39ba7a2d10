"""The generated source: structure, determinism, and the committed golden kernels."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from einc.codegen import render
from einc.codegen.lower import lower_program
from einc.planner.equation import parse
from einc.planner.graph import build
from einc.planner.plan import build_plan
from einc.tools import dump

ROOT = Path(__file__).resolve().parents[2]


def kernels_for(equation, shapes, dtype="float32"):
    plan = build_plan(build(parse(equation), shapes))
    return lower_program(plan, dtype, shapes)


def launcher_of(source):
    return source[source.index("def launch("):]


def test_matmul_emits_exactly_one_dot():
    (k,) = kernels_for("ij,jk->ik", [(64, 32), (32, 16)])
    src = render(k)
    assert k.kind == "matmul" and src.count("tl.dot(") == 1
    (r,) = kernels_for("bij,bij->b", [(4, 8, 8), (4, 8, 8)])
    assert r.kind == "reduce" and "tl.dot(" not in render(r)


@pytest.mark.parametrize("equation,shapes", [
    ("bqhd,bkhd->bhqk", [(2, 8, 4, 16), (2, 8, 4, 16)]),
    ("ibnd,jbnd->ijbn", [(8, 2, 2, 16), (8, 2, 2, 16)]),
    ("abcd,dcbe->ae", [(2, 3, 4, 5), (5, 4, 3, 6)]),
    ("iij,jk->ik", [(3, 3, 4), (4, 5)]),
    ("ii->i", [(8, 8)]),
])
def test_launchers_never_copy_permute_or_reshape(equation, shapes):
    for k in kernels_for(equation, shapes):
        host = launcher_of(render(k))
        for call in (".contiguous(", ".permute(", ".reshape(", ".view(", ".clone(", ".transpose(", ".t()",
                     ".copy_(", ".expand("):
            assert call not in host, (call, host)


def test_diagonal_is_a_stride_sum_and_lonely_index_has_stride_zero():
    (k,) = kernels_for("iij,jk->ik", [(3, 3, 4), (4, 5)])
    src = render(k)
    assert "a.stride(0) + a.stride(1)" in src
    (k,) = kernels_for("ij,jk->k", [(3, 4), (4, 5)])        # i summed in A only: summed before the product
    assert k.group("k") == (1,) and k.group("ka") == (0,) and "stride_b_a" not in render(k)
    assert "for l in range(KA):" in render(k) and render(k).count("tl.dot(") == 1


def test_half_precision_and_tf32_and_64_bit_offsets():
    (k16,) = kernels_for("ij,jk->ik", [(64, 32), (32, 16)], "float16")
    assert "dtype=tl.float32)" in render(k16)                            # fp32 accumulator
    (k32,) = kernels_for("ij,jk->ik", [(64, 32), (32, 16)], "float32")
    assert "input_precision=PRECISION" in render(k32) and "PRECISION: tl.constexpr" in render(k32)
    assert "PRECISION" not in render(k64 := kernels_for("ij,jk->ik", [(64, 32), (32, 16)], "float64")[0])
    assert "dtype=tl.float64)" in render(k64) and "out_dtype=tl.float64" in render(k64)
    (small,) = kernels_for("ij,jk->ik", [(2**15, 2**15), (2**15, 2)])
    (big,) = kernels_for("ij,jk->ik", [(2**16, 2**15), (2**15, 2)])      # 2^31 elements
    assert not small.int64 and ".to(tl.int64)" not in render(small)
    assert big.int64 and ".to(tl.int64)" in render(big)


def test_renaming_gives_identical_source():
    a = kernels_for("bqhd,bkhd->bhqk", [(2, 8, 4, 16), (2, 8, 4, 16)])
    b = kernels_for("nlhe,nshe->nhls", [(2, 8, 4, 16), (2, 8, 4, 16)])
    assert [render(k) for k in a] == [render(k) for k in b]


def test_every_golden_module_parses_and_names_are_python_identifiers():
    files = list((ROOT / "kernels").rglob("*.py"))
    assert len(files) > 30
    for f in files:
        tree = ast.parse(f.read_text())
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert "launch" in names and any(re.fullmatch(r"einc_(mm|red|fused)_\w+_[0-9a-f]{8}", n) for n in names)


def test_every_golden_module_keeps_a_short_host_side_over_the_shared_launcher():
    """A module holds its @triton.jit kernel(s) and a short description of how to launch
    them (``layout``, the ``Launcher`` line, ``launch`` and ``screen``): the host machinery is in
    einc/runtime/triton_executor/launch.py, once, not printed into every module."""
    for f in (ROOT / "kernels").rglob("*.py"):
        source = f.read_text()
        tree = ast.parse(source)
        functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        host = [n.name for n in functions if not any(getattr(d, "attr", None) == "jit" for d in n.decorator_list)]
        assert host == ["layout", "launch", "screen"], (f.name, host)
        assert not [n for n in tree.body if isinstance(n, ast.ClassDef)], f.name
        assert "from einc.runtime.triton_executor.launch import Launcher" in source
        first_host = min(n.lineno for n in functions if n.name == "layout")
        assert len(source.splitlines()) - first_host < 50, f.name


def test_golden_kernels_are_current(tmp_path):
    """kernels/ is what `einc dump --suite -o kernels` writes today."""
    tree = dump.golden(ROOT / "bench" / "suite.json")
    committed = {p.parent.name: {} for p in (ROOT / "kernels").rglob("*")
                 if p.is_file() and p.parent != ROOT / "kernels"}
    for p in (ROOT / "kernels").rglob("*"):
        if p.is_file() and p.parent != ROOT / "kernels":
            committed[p.parent.name][p.name] = p.read_text()
    assert committed == tree, "kernels/ is stale: run einc dump --suite -o kernels"


def test_generation_is_identical_across_processes(tmp_path):
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        env = dict(os.environ, PYTHONHASHSEED=seed)
        subprocess.run([sys.executable, "-m", "einc", "dump", "--suite", str(ROOT / "bench" / "suite.json"),
                        "-o", str(out)], check=True, env=env, capture_output=True, cwd=ROOT)
        outs.append({p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()})
    assert outs[0] == outs[1] and len(outs[0]) > 30


def test_codegen_does_not_import_torch_or_triton():
    script = ROOT / "tests" / "support" / "scripts" / "codegen_imports_no_torch.py"
    subprocess.run([sys.executable, str(script)], check=True, cwd=ROOT)


def test_one_module_per_structure_named_by_its_source():
    """Sizes are compile-time constants Triton specializes on, so a module does not depend
    on the shape or the plan around the step: the same structure at another size, or in
    another plan, is the same module; the name hashes exactly the source."""
    import hashlib

    from einc.codegen import NAME_PLACEHOLDER
    (a,) = kernels_for("bij,bjk->bik", [(8, 128, 64), (8, 64, 32)])
    (b,) = kernels_for("bij,bjk->bik", [(8, 129, 64), (8, 64, 32)])
    assert a.name == b.name and render(a) == render(b)
    (one,) = kernels_for("ij,jk->ik", [(4, 5), (5, 6)])
    plan = build_plan(build(parse("ij,jk,kl->il"), [(4, 5), (5, 6), (6, 7)]), "ij,jk,kl->il")
    first = lower_program(plan, "float32", [(4, 5), (5, 6), (6, 7)])[0]
    assert first.step != one.step and first.name == one.name and render(first) == render(one)
    src = render(one)
    digest = hashlib.sha256(src.replace(one.name, NAME_PLACEHOLDER).encode()).hexdigest()[:8]
    assert one.name.endswith("_" + digest)
    (other,) = kernels_for("ij,jk->ik", [(4, 5), (5, 6)], "float64")      # another source, another name
    assert other.name != one.name
    assert "size_a: tl.constexpr" in src and "M: tl.constexpr" in src and "EVEN_K = K % BLOCK_K == 0" in src


def test_k_loop_advances_pointers_and_masks_only_where_uneven():
    (k,) = kernels_for("ij,jk->ik", [(64, 32), (32, 16)])
    loop = render(k).split("for k0 in range(")[1].split("# Epilogue")[0]
    assert "a_ptrs += BLOCK_K * stride_a_b" in loop and "% " not in loop and "//" not in loop
    assert "if EVEN_K:\n            a = tl.load(a_ptrs)\n" in loop
