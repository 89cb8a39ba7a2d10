"""Compiles generated kernels for Hopper (sm_90) with Triton's real compiler, printing a
``compiled ...`` line for each kernel and config it compiles (run by
``tests/codegen/test_kernel_compile.py``, without ``TRITON_INTERPRET``)."""

import linecache
import math
import types

import checkout  # noqa: F401
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from einc.codegen import matmul, reduce, render
from einc.codegen.ir import MATMUL, index_name
from einc.codegen.lower import lower_program
from einc.planner.equation import parse
from einc.planner.fuse import FUSED, fuse_plan
from einc.planner.graph import build
from einc.planner.options import Options
from einc.planner.plan import build_plan

TY = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}
CASES = [  # equation, shapes, dtype, extra constexprs
    ("ij,jk->ik", [(256, 512), (512, 384)], "bfloat16", {}),              # 2-D tile, wgmma; the TMA variant
    ("bij,bjk->bik", [(4, 256, 512), (4, 512, 384)], "float16", {}),      # the TMA variant with a batch axis
    ("abc,dce->abde", [(4, 64, 512), (8, 512, 128)], "bfloat16", {}),     # and with an axis per index of B's N
    ("ikc,jkc->ijc", [(64, 96, 32), (48, 96, 32)], "bfloat16", {}),       # batch index in the tile: 3-D dot
    ("ij,jk->ki", [(64, 8192), (8192, 64)], "float32", {}),               # swapped roles, split-K
    ("abc,bcd->ad", [(40, 6, 50), (6, 50, 24)], "float64", {"MERGED_K": False}),   # K split into indices
    ("abcd,cde->abe", [(4, 10, 6, 50), (6, 50, 24)], "float32", {"MERGED_K": False}),  # and rows split too
    ("abc,cd->ad", [(40, 6, 50), (50, 24)], "float16", {}),               # a one-operand sum before the product
    ("bij,bij->b", [(4, 300, 200), (4, 300, 200)], "float32", {"MERGED_K": True}),   # split reduction
    ("bij,bjk->b", [(4, 30, 20), (4, 20, 10)], "bfloat16", {}),           # reduce with one-operand sums
    ("i,j->ij", [(1000,), (64,)], "float32", {}),                         # elementwise
    ("dega,gfbc->abcdef", [(16, 16, 32, 32), (32, 16, 32, 32)], "float32", {}),   # write-bound: N as a 2-D block
    ("dega,gfbc->abcdef", [(16, 16, 32, 32), (32, 16, 32, 32)], "bfloat16", {}),  # the same on wgmma
    ("aebf,dfce->abcd", [(24, 24, 24, 24), (24, 24, 24, 24)], "float32",  # a summed stranded index:
     {"MERGED_K": False}),                                                # B's tile a gather
    ("dbea,ec->abcd", [(24, 24, 24, 24), (24, 24)], "float32", {}),      # a stranded column index in T
]
target = GPUTarget("cuda", 90, 32)


def module_of(k):
    """The kernel's generated module, run from its source (kept in linecache, so that Triton
    reads the kernel's text), and its @triton.jit function."""
    src = render(k)
    path = f"<compile check {k.name}>"
    linecache.cache[path] = (len(src), None, src.splitlines(True), path)
    mod = types.ModuleType(k.name)
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod, getattr(mod, k.name)


for equation, shapes, dtype, extra in CASES:
    plan = build_plan(build(parse(equation), shapes), equation)
    sizes = plan.graph.sizes
    (k,) = lower_program(plan, dtype, shapes)
    mod, fn = module_of(k)
    named = {f"size_{index_name(i)}": sizes[i] for _, g in k.groups for i in g}
    extents = matmul.extents(k) if k.kind == MATMUL else reduce.extents(k)
    ext = {g: eval(e, {}, dict(named)) for g, e in extents.items()}
    meta = dict(named, **ext, HAS_SCALE=True, LAYOUT="-1:DD")
    if k.kind == MATMUL:
        meta.update(GROUP_M=8, PRECISION="tf32", UPCAST=False)
        cols = ext.get("NT", 1) * ext["N"]
        tiles = ext["BATCH"] * ext["T"] * triton.cdiv(ext["M"], 128) * triton.cdiv(cols, 128)
        split = mod.launcher.split(tiles, ext["K"], ext["K"] >= 32 * max(ext["M"], cols), 132,
                                   math.prod(sizes[i] for i in k.output.dims))
    else:
        split = mod.launcher.split(triton.cdiv(ext["O"], 64), ext["K"], False, 132, ext["O"])
    meta.update(SPLIT_K=split[0], K_SPLIT=split[1], **extra)
    kept = mod.launcher.prune(mod.launcher.configs, {}, **meta)
    for config in {id(c): c for c in (kept[0], kept[-1])}.values():
        cex = {p: v for p, v in dict(meta, **config.kwargs).items() if p in fn.arg_names}
        sig = {p: "constexpr" if p in cex else ("*" + TY[k.acc if p == "c_ptr" and split[0] > 1 else dtype])
               if p.endswith("_ptr") else "fp32" if p == "scale" else "i32" for p in fn.arg_names}
        compiled = triton.compile(ASTSource(fn, sig, cex), target=target,
                                  options={"num_warps": config.num_warps, "num_stages": config.num_stages})
        assert compiled.metadata.shared <= 227 * 1024, (k.name, config, compiled.metadata.shared)
        print("compiled", k.name, config.kwargs, "split", split[0], "shared", compiled.metadata.shared)
    if split[0] > 1:
        fin = mod.launcher.finish                          # the shared split-K second pass
        cex = dict(NUMEL=math.prod(sizes[i] for i in k.output.dims), SPLIT=split[0], BLOCK=1024, HAS_SCALE=True)
        sig = dict(w_ptr="*" + TY[k.acc], c_ptr="*" + TY[dtype], scale="fp32", **{p: "constexpr" for p in cex})
        triton.compile(ASTSource(fin, sig, cex), target=target)
        print("compiled", k.name + "_finish", "split", split[0])
    tma = mod.launcher.tma
    for axes in ((1, 1, 1), (2, 2, 0)) if tma is not None else ():     # the TMA variant, as the launcher takes it
        roles = [torch.empty(shapes[k.params.index(op.name)], device="meta") for op in k.inputs]
        quanta = mod.layout(*roles)[2]["TMA"][3]
        tfn, taxes = tma.kernel, dict(TMA_A=axes[0], TMA_B=axes[1], TMA_C=axes[2], TMA_QM=quanta[0], TMA_QN=quanta[1],
                                      TMA_QK=quanta[2])
        config = mod.launcher.prune(tma.configs, {}, **dict(meta, **taxes))[0]
        cex = {p: v for p, v in dict(meta, **config.kwargs, **taxes).items() if p in tfn.arg_names}
        sig = {p: "constexpr" if p in cex else ("*" + TY[dtype]) if p.endswith("_ptr") else "fp32" if p == "scale"
               else "i32" for p in tfn.arg_names}
        compiled = triton.compile(ASTSource(tfn, sig, cex), target=target,
                                  options={"num_warps": config.num_warps, "num_stages": config.num_stages})
        ptx = compiled.asm["ptx"]
        assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx, (k.name, axes)
        assert compiled.metadata.shared <= 227 * 1024, (k.name, config, compiled.metadata.shared)
        print("compiled", k.name + "_tma", axes, config.kwargs, "shared", compiled.metadata.shared)

# Fused steps (a product step in the tile loads; a factor in the epilogue), as the fused launcher calls them.
for equation, shapes, path, dtype in [
        ("bi,oij,bj->bo", [(2048, 512), (512, 512, 512), (2048, 512)], [(0, 2), (0, 1)], "bfloat16"),
        ("nlhd,nhmd,nlh->nlhm", [(4, 256, 8, 64), (4, 8, 256, 64), (4, 256, 8)], [(0, 1), (0, 1)], "float32")]:
    plan = fuse_plan(build_plan(build(parse(equation), shapes), equation, Options.of(path)), dtype)
    (k,) = [k for k in lower_program(plan, dtype, shapes) if k.kind == FUSED]
    mod, fn = module_of(k)
    sizes = plan.graph.sizes
    named = {f"size_{index_name(i)}": sizes[i] for _, g in k.groups for i in g}
    ext = {g.upper() if g != "batch" else "BATCH": math.prod(sizes[i] for i in k.group(g))
           for g in ("batch", "m", "n", "k")}
    for config in (mod.launcher.configs[0], mod.launcher.configs[-1]):
        meta = dict(named, **ext, HAS_SCALE=True, GROUP_M=8, LAYOUT="-1:DD", PRECISION="tf32", UPCAST=False,
                    **config.kwargs)
        cex = {p: v for p, v in meta.items() if p in fn.arg_names}
        runtime = [p for p in fn.arg_names if p not in cex]
        assert fn.arg_names[:len(runtime)] == runtime       # runtime arguments first, as the compiled launch expects
        sig = {p: "constexpr" if p in cex else ("*" + TY[dtype]) if p.endswith("_ptr") else "fp32" if p == "scale"
               else "i32" for p in fn.arg_names}
        compiled = triton.compile(ASTSource(fn, sig, cex), target=target,
                                  options={"num_warps": config.num_warps, "num_stages": config.num_stages})
        assert compiled.metadata.shared <= 227 * 1024, (k.name, config, compiled.metadata.shared)
        print("compiled", k.name, config.kwargs, "shared", compiled.metadata.shared)
