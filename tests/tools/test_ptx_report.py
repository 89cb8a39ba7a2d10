"""bench/ptx_report.py: the static verdict from Triton's real compiler and ptxas, on a few
kernels (no GPU needed; a subprocess without ``TRITON_INTERPRET``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from compiler import needs_nvidia, uninterpreted_env

triton = pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

FIELDS = {"workload", "step", "kernel", "dtype", "registers", "spill_bytes", "shared_bytes", "wgmma", "accumulator",
          "mma", "config", "global_load_widths", "vectorized_loads", "problems", "exceptions", "triton", "ptxas_log",
          "tma", "bulk_tensor_copies"}


@pytest.mark.slow
@needs_nvidia
def test_the_report_reads_registers_mma_and_accumulators_from_the_compiler(tmp_path):
    out = tmp_path / "ptx.json"
    env = uninterpreted_env(PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "ptx_report.py"), "--configs", "first", "--json",
                           str(out), "--filter", "attn_scores_bhqd", "--filter", "batched_frobenius"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = json.loads(out.read_text())
    assert all(set(r) >= FIELDS for r in rows)
    assert {r["workload"] for r in rows} == {"attn_scores_bhqd", "batched_frobenius"}
    assert all(r["triton"] == triton.__version__ and r["ptxas_log"] == "triton" for r in rows)

    (mm,) = [r for r in rows if r["workload"] == "attn_scores_bhqd"]
    # bf16 Q.K^T on a 128x128 tile, the TMA variant as an H100 launch takes it: bulk tensor
    # copies (no global loads), Hopper's warpgroup MMA, fp32 accumulator
    assert mm["dtype"] == "bfloat16" and mm["config"]["BLOCK_M"] * mm["config"]["BLOCK_N"] >= 64 * 64
    assert mm["tma"] is True and mm["kernel"].endswith("_tma") and mm["bulk_tensor_copies"] > 0
    assert mm["global_load_widths"] == {} and any("bulk.tensor.3d" in k for k in mm["bulk_tensor_kinds"])
    assert mm["wgmma"] is True and mm["mma"] == "wgmma" and mm["accumulator"] == "f32"
    assert any(".f32.bf16.bf16" in i for i in mm["mma_instructions"])
    assert 0 < mm["registers"] <= 255 and mm["spill_bytes"] == 0 and mm["shared_bytes"] > 0
    assert mm["problems"] == []

    red = [r for r in rows if r["workload"] == "batched_frobenius"]
    main = [r for r in red if r["kind"] == "red"]
    assert main and all(r["mma"] is None and r["wgmma"] is False and r["accumulator"] == "f32" for r in main)
    assert all(r["step"] == 1 and r["dtype"] == "float32" for r in red)
    tables = subprocess.run([sys.executable, str(ROOT / "bench" / "ptx_report.py"), "--tables", str(out)], env=env,
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert tables.returncode == 0, tables.stderr[-2000:]
    kernels = len({(r["workload"], r["step"], r["kernel"]) for r in rows})     # a split's second pass counts
    assert f"| {triton.__version__} | {kernels} | {len(rows)} | 0 |" in tables.stdout
    assert "`einc_mm_abcd_abed_abce_" in tables.stdout
    assert f"triton {triton.__version__}, sm_90a: {len({(r['workload'], r['kernel']) for r in rows})} kernels" \
        in done.stdout                                            # the summary line


def test_the_ptx_reader_finds_the_mma_its_accumulator_and_load_widths():
    before = dict(os.environ)
    import ptx_report
    assert dict(os.environ) == before                  # importing it leaves the interpreter setting alone
    ptx = """
	cp.async.cg.shared.global [ %r17 + 0 ], [ %rd5 + 0 ], 0x10, %r18;
	@%p3 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
	ld.global.b16 %rs1, [ %rd2 + 0 ];
	wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f1}, %rd3, %rd4, p, 1, 1, 0, 1;
	fma.rn.f32 %f2, %f3, %f4, %f5;
	@%p4 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r5], [%rd6, {%r7, %r8}], [%r9];
"""
    got = ptx_report.read_ptx(ptx)
    assert got["mma"] == "wgmma" and got["wgmma"] and got["accumulator"] == "f32"
    assert got["global_load_widths"] == {"2": 1, "16": 2} and got["vectorized_loads"] is False
    assert got["bulk_tensor_copies"] == 1 and got["bulk_tensor_kinds"][0].startswith("cp.async.bulk.tensor.2d.")
    bf16 = ptx_report.read_ptx("\tmma.sync.aligned.m16n8k16.row.col.bf16.bf16.bf16.bf16 {%r1}, {%r2}, {%r3}, {%r4};\n")
    assert bf16["mma"] == "mma.sync" and bf16["accumulator"] == "bf16"
    row = {"dtype": "bfloat16", "kind": "mm", "spill_bytes": 8, "wgmma": False, "accumulator": "bf16",
           "config": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}}
    assert len(ptx_report.problems(row)) == 3                     # spills, no wgmma, a bf16 accumulator
    assert ptx_report.exceptions(row) == []
    tile_t = dict(row, spill_bytes=0, accumulator="f32", config=dict(row["config"], BLOCK_T=1))
    assert ptx_report.problems(tile_t) == [] and "3-D dot" in ptx_report.exceptions(tile_t)[0]
    no_bulk = dict(row, spill_bytes=0, accumulator="f32", wgmma=True, tma=True, bulk_tensor_copies=0)
    assert ptx_report.problems(no_bulk) == ["a TMA variant without bulk tensor copies"]
    no_mma = ptx_report.read_ptx("\tadd.rn.bf16x2 %r1, %r2, %r3;\n\tadd.f32 %f1, %f2, %f3;\n")
    assert no_mma["mma"] is None and no_mma["accumulator"] == "f32"
