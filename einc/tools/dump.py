"""Regenerate ``kernels/``: the generated source for the benchmark suite and a few
classic equations, committed so that a change to the code generator shows up in
review as a diff of kernels.

    einc dump --suite -o kernels        (the command line: einc/tools/cli.py)

Pure Python: needs neither torch nor triton (nor a GPU).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..codegen.ir import KERNEL_DTYPES
from ..codegen.lower import modules
from ..planner import plan_for
from ..planner.equation import parse
from ..planner.fuse import fuse_plan, notes

CLASSICS = [  # (name, equation, shapes, dtype)
    ("matmul", "ij,jk->ik", [(512, 256), (256, 128)], "float16"),
    ("batched_matmul", "bij,bjk->bik", [(8, 128, 64), (8, 64, 32)], "bfloat16"),
    ("transposed_output", "ij,jk->ki", [(256, 64), (64, 128)], "float32"),
    ("permuting_contraction", "abcd,dcbe->ae", [(16, 8, 8, 16), (16, 8, 8, 32)], "float32"),
    ("dot_per_batch", "bij,bij->b", [(16, 256, 256), (16, 256, 256)], "float32"),
    ("trace", "ii->", [(1024, 1024)], "float64"),
    ("outer", "i,j->ij", [(4096,), (64,)], "float32"),
]


def plan_files(equation: str, shapes, dtype: str) -> dict[str, str]:
    """File name -> text: the plan table and one module per step, as generated kernels run
    it (steps that fuse are one step, one module; the table's notes name their parts)."""
    eq = parse(equation)
    plan = fuse_plan(plan_for(eq, shapes), dtype)
    empty = plan.empty_sum
    skipped = None if empty is None else (f"The steps above do not run: the result is zeros, a sum over {empty}, of "
                                          "size 0, whatever the other operands hold; no kernel is generated.")
    files = {"plan.txt": "\n".join(filter(None, [str(plan), notes(plan), skipped])) + "\n"}
    if empty is not None:
        return files
    for s, module in enumerate(modules(plan, dtype, shapes)):
        files[f"step{s + 1}_{module.name}.py"] = module.source
    return files


def golden(suite_path: Path) -> dict[str, dict[str, str]]:
    """Folder name -> files, for every suite workload (gpu variant) and classic equation."""
    from .benchmark.suite import load  # checked: plain ids (folder names), dtypes by name

    out: dict[str, dict[str, str]] = {}
    suite = load(suite_path)
    for w in suite["workloads"]:
        v = w["variants"]["gpu"]
        if v["dtype"] in KERNEL_DTYPES:      # complex workloads run on torch: no kernels
            out[w["id"]] = plan_files(w["equation"], [tuple(s) for s in v["shapes"]], v["dtype"])
    for name, equation, shapes, dtype in CLASSICS:
        out[f"classic_{name}"] = plan_files(equation, shapes, dtype)
    return out


def write(tree: dict[str, dict[str, str]], root: Path) -> None:
    """Replace the generated folders under ``root`` with ``tree``."""
    root.mkdir(parents=True, exist_ok=True)
    for child in root.iterdir():
        if child.is_dir():
            shutil.rmtree(child)
    for folder, files in sorted(tree.items()):
        (root / folder).mkdir()
        for name, text in files.items():
            (root / folder / name).write_text(text)
