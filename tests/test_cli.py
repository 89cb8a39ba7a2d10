"""The ``einc`` command line: dump, explain, bench, cache; exit codes and error output."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from einc.cli import main, parse_shapes
from einc.codegen import golden

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "bench" / "suite.json"


def run_cli(*args, env=None, code=None):
    """``python -m einc ARGS`` (or ``python -c CODE``) in a subprocess; the CompletedProcess."""
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "einc", *args]
    full_env = {k: v for k, v in os.environ.items() if k != "EINC_DEBUG"}
    full_env.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=ROOT, timeout=300)


def tree_of(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*")
            if p.is_file() and p.parent != root and "__pycache__" not in p.parts}


# ----------------------------------------------------------------------- dump

def test_dump_prints_plan_and_kernel_source(capsys):
    assert main(["dump", "bij,bjk->bik", "--shapes", "8x64x32,8x32x16", "--dtype", "float16"]) == 0
    out = capsys.readouterr().out
    assert "Complete contraction:  bij,bjk->bik" in out
    assert "@triton.jit" in out and "def launch(" in out
    assert "float16 operands and output, float32 accumulator" in out


def test_dump_writes_the_files_golden_writes(tmp_path, capsys):
    (tmp_path / "step9_einc_mm_stale_00000000.py").write_text("old")   # an earlier dump's file is replaced
    assert main(["dump", "ij,jk,kl->il", "--shapes", "64x8,8x64,64x8", "--dtype", "bfloat16", "-o",
                 str(tmp_path)]) == 0
    files = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert files == golden.plan_files("ij,jk,kl->il", [(64, 8), (8, 64), (64, 8)], "bfloat16")
    assert "wrote plan.txt and 2 kernel module(s)" in capsys.readouterr().out


def test_dump_of_a_dtype_without_kernels_prints_the_plan(capsys):
    assert main(["dump", "ij,jk->ik", "--shapes", "4x4,4x4", "--dtype", "complex64"]) == 0
    out, err = capsys.readouterr()
    assert "Complete contraction" in out and "@triton.jit" not in out
    assert "no generated kernels for complex64" in err


def test_dump_suite_equals_the_committed_kernels(tmp_path, capsys):
    """`einc dump --suite -o DIR` writes exactly kernels/ (so the CLI and kernels/ never disagree)."""
    assert main(["dump", "--suite", str(SUITE), "-o", str(tmp_path)]) == 0
    generated = tree_of(tmp_path)
    assert len(generated) > 30
    assert generated == tree_of(ROOT / "kernels"), "kernels/ is stale: run einc dump --suite -o kernels"
    assert all("regenerate: einc dump --suite" in text for name, text in generated.items() if name.endswith(".py"))


def test_dump_suite_refuses_to_replace_folders_it_did_not_write(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    assert main(["dump", "--suite", str(SUITE), "-o", str(tmp_path)]) == 2
    assert "refusing to replace" in capsys.readouterr().err
    assert (tmp_path / "mine").is_dir()


def test_dump_imports_neither_torch_nor_triton(tmp_path):
    code = ("import runpy, sys\n"
            "sys.argv = ['einc', 'dump', 'bqhd,bkhd->bhqk', '--shapes', '2x8x4x16,2x8x4x16', "
            f"'-o', {str(tmp_path)!r}]\n"
            "try:\n"
            "    runpy.run_module('einc', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "from einc.cli import main\n"
            f"assert main(['dump', '--suite', {str(SUITE)!r}, '-o', {str(tmp_path / 'suite')!r}]) == 0\n"
            "assert main(['cache', 'path']) == 0\n"
            "bad = [m for m in ('torch', 'triton') if m in sys.modules]\n"
            "assert not bad, bad\n")
    done = run_cli(code=code)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "plan.txt").is_file() and (tmp_path / "suite" / "classic_matmul").is_dir()


# ----------------------------------------------------------------------- errors and exit codes

@pytest.mark.parametrize("argv, message", [
    (["dump", "ij,jk->iz", "--shapes", "2x3,3x4"], "output subscript z does not appear in the equation for any input operand"),
    (["dump", "ij,jk->ik", "--shapes", "2x3"], "names 2 operands but --shapes gives 1"),
    (["dump", "ij,jk->ik", "--shapes", "2x3,4x5"], "subscript 'j' has size 4"),
    (["explain", "ij,jk->ik", "--shapes", "2x3,3x4", "--optimize", "nope"], "unknown optimize='nope'"),
    (["bench", "--suite", str(SUITE), "--filter", "no-such-workload"], "matches 'no-such-workload'"),
    (["dump", "--suite", "/no/such/suite.json"], "no suite file"),
])
def test_bad_equations_and_arguments_exit_2_with_one_error_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"einc {argv[0]}: error: ") and message in err.splitlines()[0]
    assert "Traceback" not in err


def test_a_bad_equation_points_at_the_index(capsys):
    assert main(["dump", "ij,jk->iz", "--shapes", "2x3,3x4"]) == 2
    assert capsys.readouterr().err.splitlines()[1:] == ["  ij,jk->iz", "          ^"]


@pytest.mark.parametrize("argv", [
    [], ["dump"], ["dump", "ij,jk->ik"], ["dump", "ij->i", "--shapes", "2xq"], ["dump", "ij->i", "--shapes", "2x-1"],
    ["dump", "ij->i", "--shapes", "2x2", "--dtype", "float8"], ["dump", "ij->i", "--suite"], ["nope"],
    ["cache", "remove"], ["explain", "ij->i"], ["bench", "--device", "tpu"],
])
def test_bad_usage_exits_2(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_traceback_only_with_einc_debug():
    quiet = run_cli("dump", "ij,jk->iz", "--shapes", "2x3,3x4")
    loud = run_cli("dump", "ij,jk->iz", "--shapes", "2x3,3x4", env={"EINC_DEBUG": "1"})
    assert quiet.returncode == loud.returncode == 2
    assert "Traceback" not in quiet.stderr
    assert quiet.stderr.splitlines()[0] == "einc dump: error: output subscript z does not appear in the equation for any input operand"
    assert "Traceback" in loud.stderr and "EquationError" in loud.stderr


def test_help_of_each_command_has_worked_examples(capsys):
    for command in ("dump", "explain", "bench", "cache"):
        with pytest.raises(SystemExit) as e:
            main([command, "--help"])
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert "examples:" in out and f"einc {command}" in out
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "bench/suite.json" in capsys.readouterr().out


def test_parse_shapes():
    assert parse_shapes("8x64x32,8x32x16") == [(8, 64, 32), (8, 32, 16)]
    assert parse_shapes("5, (), 0x3") == [(5,), (), (0, 3)]


@pytest.mark.skipif(shutil.which("einc") is None, reason="the einc script is installed by pip install -e .")
def test_the_console_script_runs():
    done = subprocess.run(["einc", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("einc ")


# ----------------------------------------------------------------------- explain

def test_explain_prints_the_cost_table(capsys):
    assert main(["explain", "ij,jk,kl->il", "--shapes", "64x8,8x64,64x8"]) == 0
    out = capsys.readouterr().out
    assert "backend" in out and "torch.einsum default (opt_einsum 'auto'" in out
    assert "left to right" in out and "naive (one loop nest over all indices)" in out


def test_explain_json(capsys):
    assert main(["explain", "ab,bc,cd,de->ae", "--shapes", "8x512,512x8,8x512,512x8", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["equation"] == "ab,bc,cd,de->ae" and info["dtype"] == "float32" and info["device"] == "cpu"
    assert len(info["steps"]) == 3
    for step in info["steps"]:
        assert {"kind", "operands", "contraction", "summed", "flops", "size", "backend"} <= set(step)
        assert step["backend"] == "torch"
    assert info["totals"]["flops"] == sum(s["flops"] for s in info["steps"])
    assert info["naive"]["flops"] > info["totals"]["flops"]
    assert info["torch_default"]["strategy"] == "auto"
    assert info["torch_default"]["flops"] >= info["totals"]["flops"]
    assert info["left_to_right"]["flops"] >= info["totals"]["flops"]


def test_explain_shows_the_backend_of_each_step_for_cuda_operands(capsys, monkeypatch):
    """On a machine without a GPU, --device cuda shows the cost model's decision: cuBLAS for
    a copy-free batched matrix product, a generated kernel where torch would copy."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    monkeypatch.delenv("EINC_SELECT", raising=False)
    assert main(["explain", "bij,bjk->bik", "--shapes", "8x64x32,8x32x16", "--dtype", "float16", "--device", "cuda",
                 "--json"]) == 0
    (step,) = json.loads(capsys.readouterr().out)["steps"]
    assert step["backend"].startswith("blas") and "measured on the first call" in step["reason"]
    assert main(["explain", "ibnd,jbnd->ijbn", "--shapes", "4x2x3x8,5x2x3x8", "--dtype", "float16", "--device",
                 "cuda", "--json"]) == 0
    (step,) = json.loads(capsys.readouterr().out)["steps"]
    assert step["backend"].startswith("triton einc_mm_") and "result's index order" in step["reason"]


# ----------------------------------------------------------------------- cache

def test_cache_path_list_clear(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    assert main(["cache", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "kernels")
    assert main(["cache", "list"]) == 0
    assert "no kernel modules" in capsys.readouterr().out
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    source = golden.plan_files("ij,jk->ik", [(4, 4), (4, 4)], "float32")
    (name,) = [n for n in source if n != "plan.txt"]
    module = name.split("_", 1)[1]
    (kernels / module).write_text(source[name])
    (kernels / "notes.txt").write_text("not einc's")
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert module[:-3] in out and "ab,bc->ac" in out and "1 module(s)" in out
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 kernel module(s)" in out and "in-memory plan cache is per process" in out
    assert not (kernels / module).exists() and (kernels / "notes.txt").exists()


# ----------------------------------------------------------------------- bench

QUICK = ["--quick", "--rounds", "3", "--budget", "0.2", "--filter", "small"]


def test_bench_quick_writes_csv_markdown_and_chart(tmp_path, capsys):
    assert main(["bench", "--suite", str(SUITE), "--out", str(tmp_path), *QUICK]) == 0
    out, err = capsys.readouterr()
    assert "geomean einc/torch" in out and "tiny_gemm_16" in out
    assert "[1/4]" in err or "4/4" in err                   # the progress bar
    csv = (tmp_path / "suite_cpu.csv").read_text().splitlines()
    assert csv[0].startswith("id,category,equation,dtype,torch_us") and len(csv) == 5
    assert "## By category" in (tmp_path / "suite_cpu.md").read_text()
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "suite_cpu.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_without_matplotlib_still_writes_csv_and_markdown(tmp_path):
    code = ("import sys\n"
            "sys.modules['matplotlib'] = None            # as if it were not installed\n"
            "from einc.cli import main\n"
            f"sys.exit(main(['bench', '--suite', {str(SUITE)!r}, '--out', {str(tmp_path)!r}, "
            "'--quick', '--rounds', '3', '--budget', '0.1', '--filter', 'tiny_gemm']))\n")
    done = run_cli(code=code)
    assert done.returncode == 0, done.stderr
    assert "matplotlib is not installed" in done.stderr and "pip install" in done.stderr
    assert (tmp_path / "suite_cpu.csv").is_file() and (tmp_path / "suite_cpu.md").is_file()
    assert not (tmp_path / "suite_cpu.png").exists()


def test_bench_scripts_are_thin_wrappers(tmp_path):
    done = subprocess.run([sys.executable, "bench/run.py", "--quick", "--rounds", "3", "--budget", "0.1",
                           "--filter", "tiny_gemm", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "suite_cpu.md").is_file()
    code = ("import sys; sys.path.insert(0, 'bench')\n"
            "import timing, report\n"
            "from bench import run, dispatch\n"
            "assert timing.interleaved and timing.calibrate and timing.time_batch and timing.Timing\n"
            "assert report.Load and report.header and report.write and report.markdown_table and report.geomean\n"
            "assert run.check and run.methods and run.METHODS and dispatch.chain(3) == 'ab,bc,cd->ad'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr


def test_chart_with_a_roofline(tmp_path):
    """The GPU chart's roofline panel, drawn from synthetic rows (no GPU needed)."""
    pytest.importorskip("matplotlib")
    from einc.benchmark.chart import draw
    from einc.benchmark.roofline import Roofline

    roof = Roofline(bandwidth=3e12, peaks={"bfloat16": 7e14, "float32": 5e13})
    rows = [{"w": {"id": f"w{k}", "category": "c"}, "einc_check": "ok", "et": et, "eo": 0.9,
             "variant": {"dtype": dtype, "flops": flops, "min_bytes": 1e8},
             "rates": {"einc": flops / 1e-3, "torch": flops / 2e-3}}
            for k, (dtype, flops, et) in enumerate([("bfloat16", 1e11, 0.5), ("float32", 1e9, 2.0)])]
    assert roof.bound(rows[0]["variant"]) == 7e14 and roof.bound(rows[1]["variant"]) == 3e13
    path = draw(rows, tmp_path / "chart.png", "test", roof)
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_gpu_report_columns_from_cpu_rows(tmp_path):
    """The CUDA report (throughput and % of roofline columns), fed with CPU rows and a synthetic roofline."""
    from einc.benchmark import report, runner, suite
    from einc.benchmark.roofline import Roofline

    (w,) = [w for w in suite.load(SUITE)["workloads"] if w["id"] == "tiny_gemm_16"]
    row = runner.bench_workload(w, rounds=3, budget=0.1, min_rounds=1)
    row["variant"] = w["variants"]["cpu"]
    opts = runner.Options(device="cuda", rounds=3, budget=0.1, min_rounds=1)
    load = report.Load.__new__(report.Load)             # skip the 0.5 s idle sample
    load.before, load.start = 0.0, None
    md, csv, summary = runner.report_suite([row], tmp_path, opts, load, Roofline(1e10, {"float32": 1e11}),
                                           quiet=True)
    text = md.read_text()
    assert "einc TFLOP/s" in text and "einc % roofline" in text and "roofline (measured" in text
    assert csv.read_text().splitlines()[1].split(",")[-1] == str(round(min(1e11, 8192 / 3072 * 1e10) / 1e9, 3))


def test_bench_on_cuda_without_a_device_is_a_usage_error(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert main(["bench", "--suite", str(SUITE), "--device", "cuda", "--filter", "small"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_an_equation_that_starts_with_a_dash_needs_no_double_dash(capsys):
    assert main(["explain", "->", "--shapes", "()"]) == 0
    assert "Complete contraction:  ->" in capsys.readouterr().out
    assert main(["explain", "->", "--shapes", "()", "--json"]) == 0     # options after it too
    assert json.loads(capsys.readouterr().out)["equation"] == "->"
    assert main(["dump", "->", "--shapes", "()"]) == 0


def test_an_output_that_names_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "a_file"
    target.write_text("keep me")
    assert main(["dump", "ij->j", "--shapes", "2x3", "-o", str(target)]) == 2
    assert "takes a folder" in capsys.readouterr().err.splitlines()[0]
    assert target.read_text() == "keep me"


def test_dir_of_the_package_shows_only_public_names():
    import einc
    assert dir(einc) == sorted(einc.__all__) and "importlib" not in dir(einc)
