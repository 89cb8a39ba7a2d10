"""Every example in examples/ runs on the CPU and prints what it is about."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

EXAMPLES = {   # file -> lines (substrings) its output must contain
    "quickstart.py": ["attention scores: (2, 4, 128, 128) contiguous: True", "Complete contraction:"],
    "attention_layouts.py": ["torch.view_as_complex(einc result): ok", "einc result .view(b, s, h*d): ok",
                             "triton einc_mm_"],
    "tensor_network.py": ["einc cached call:", "planning (contract_expression):", "Complete contraction:"],
    "dump_kernel.py": ["torch imported: False | triton imported: False", "the CLI wrote the same source: True",
                       "def launch("],
    "compile_backend.py": ["matches eager", "einc backend:", "<- matmul + matmul_1"],
    "named_axes.py": ["multi-head attention, merged heads in and out: (2, 16, 32) contiguous: True",
                      "grouped-query attention", "view_as_complex: (2, 16, 4, 4) torch.complex64",
                      "(g r d) split into g=2 r=2 d=8 by strides: a view, no copy"],
    "sliced_network.py": ["Sliced indices:", "2 ranks agree with one process: True", "rank slice times:",
                          "peak growth"],
}


# Test tools a plain install (README's first command: pip install -e .) lacks, though the test
# environment has them: each is made unimportable for the examples, which that install runs.
TEST_ONLY = ("pytest", "hypothesis", "onnx")


def _without_test_tools(folder: Path) -> str:
    """A folder of stand-ins that raise ImportError for TEST_ONLY, to put first on PYTHONPATH."""
    folder.mkdir()
    for name in TEST_ONLY:
        (folder / f"{name}.py").write_text(f"raise ImportError('{name} is a test tool: pip install -e . lacks it')\n")
    return os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))


def test_every_example_is_tested():
    assert sorted(p.name for p in (ROOT / "examples").glob("*.py")) == sorted(EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs(name, tmp_path):
    """Each example runs as a user runs it (einc's default cache folder, under XDG_CACHE_HOME) and
    leaves nothing behind: not in that folder, the working folder or the temporary folder (torch's
    own caches aside)."""
    cache, tmp, cwd = (tmp_path / n for n in ("cache", "tmp", "cwd"))
    tmp.mkdir(), cwd.mkdir()
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), TMPDIR=str(tmp),
               PYTHONPATH=_without_test_tools(tmp_path / "plain"))
    env.pop("EINC_BACKEND", None), env.pop("EINC_CACHE_DIR", None)
    done = subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for line in EXAMPLES[name]:
        assert line in done.stdout, f"{name}: {line!r} not in its output:\n{done.stdout[-3000:]}"
    left = ([p for p in cache.rglob("*") if p.is_file()] + list(cwd.iterdir())
            + [p for p in tmp.iterdir() if not p.name.startswith("torchinductor_")])
    assert not left, f"{name} left {left}"
