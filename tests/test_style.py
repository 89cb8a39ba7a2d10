"""The tree stays ruff-clean: the rules are pyproject.toml's [tool.ruff] (generated
kernels under kernels/ excluded there), checked as CI runs them.  And einc's comments
and docstrings say why, not what was measured: a timing, a speed ratio or a commit
belongs on its page under bench/measured/, to which the comment points."""

import ast
import importlib.util
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A measured figure: a number with a time unit (``5-15 us``, ``0.47 ms``, ``18-19 s``), a
# speed ratio (``1.5x``, ``0.86-1.02x``; not a shape, ``16x16`` or ``2 x 2``) or a commit
# named by its hash (``at ddf8303``).
_NUMBER = r"(?<![\w.])~?\d[\d,]*(?:\.\d+)?(?:\s?-\s?\d[\d,]*(?:\.\d+)?)?"
FIGURE = re.compile(
    rf"{_NUMBER}(?:\s?(?:µs|us|ms|ns)|\s(?:s|secs?|seconds?|minutes?))(?!\w)"
    rf"|{_NUMBER}[x×](?!\w)"
    r"|\b(?:at|since|until|before|after)\s(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
# (file, the text around the figure): figures that define something, not measurements.
DEFINING = {
    ("einc/errors.py", "within 2x"),                        # the suggested memory limit's criterion
    ("einc/planner/slicecost.py", "within 2x"),             # ... the same, where it is defined
    ("einc/runtime/triton_executor/autotune.py", "its 100 ms"),   # Triton's do_bench's rep, a setting
    ("einc/tools/benchmark/runner.py", "≥ 2 ms batches"),   # the timing's batch length, a setting
    ("einc/tools/benchmark/runner.py", "0.4 s of set-up"),  # the forecast's constant
    ("einc/tools/benchmark/load.py", "0.5 s sample"),       # the load sample's length, a setting
    ("einc/tools/benchmark/progress.py", "18 s  attn"),     # an example of the progress line
}


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                    reason="ruff is not installed (pip install -e '.[test]' brings it)")
def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]


def _prose(source: str):
    """``(line, text)`` of each comment and each docstring line (a statement that is only
    a string: module, class, function and attribute docstrings)."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for i, line in enumerate(node.value.value.splitlines()):
                yield node.value.lineno + i, line


def measured_figures(root: Path) -> list[str]:
    """``path:line: figure: text`` for each figure :data:`FIGURE` finds in the comments and
    docstrings of ``root``'s einc/, less :data:`DEFINING`'s."""
    found = []
    for path in sorted((root / "einc").rglob("*.py")):
        name = path.relative_to(root).as_posix()
        for line, text in _prose(path.read_text()):
            for m in FIGURE.finditer(text):
                if not any(f == name and m.group(0) in t and t in text for f, t in DEFINING):
                    found.append(f"{name}:{line}: {m.group(0)!r}: {text.strip()}")
    return found


def test_no_measured_figure_in_comments():
    found = measured_figures(ROOT)
    assert not found, ("a figure in a comment or docstring: move it to its page under bench/measured/ and "
                       "say why instead, pointing there (or, where it defines something, add it to DEFINING):\n"
                       + "\n".join(found))


def test_defining_figures_are_there():
    """Each :data:`DEFINING` entry still allows a figure, so that the list stays short."""
    for name, text in DEFINING:
        prose = [t for _, t in _prose((ROOT / name).read_text()) if text in t]
        assert any(FIGURE.search(t) for t in prose), (name, text)


@pytest.mark.parametrize("text", ["about 0.1 us plus 0.05 us per operand", "took 75-300 ms a launch",
                                  "a 28-32 s first call", "~20x slower", "0.86-1.02x at 12-16 MiB",
                                  "timings at ddf8303", "1.5x torch.einsum's time", "4× another's whole call"])
def test_figure_pattern_finds(text):
    assert FIGURE.search(text)


@pytest.mark.parametrize("text", ["ns per element", "a 16×16 product", "2 x 2 matrices", "int8 100s",
                                  "the size and 1s", "at 0x1f", "at a decade", "float16 at 64 KiB"])
def test_figure_pattern_passes(text):
    assert not FIGURE.search(text)
