"""Size budget: no module of einc/ over 600 lines, no function over 80.

A long module or function is where a second concern hides.  The kernel templates are
long because each is one kernel's text, read top to bottom; they are named here, with
the size they may reach, so that growing one is a decision made in this file.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULE_LINES = 600
FUNCTION_LINES = 80

# function (module path:qualified name) -> the most lines it may have
ALLOWED_FUNCTIONS: dict[str, int] = {
    "einc/codegen/matmul.py:kernel_source": 140,     # the matmul kernel template
}
ALLOWED_MODULES: dict[str, int] = {
}


def _functions(path: pathlib.Path):
    tree = ast.parse(path.read_text(), filename=str(path))

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child.end_lineno - child.lineno + 1
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")

    yield from walk(tree, "")


def _modules():
    return sorted((ROOT / "einc").rglob("*.py"))


def test_no_module_over_budget():
    over = {}
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > ALLOWED_MODULES.get(rel, MODULE_LINES):
            over[rel] = lines
    assert not over, f"modules over {MODULE_LINES} lines (split them, or allow them in this file): {over}"


def test_no_function_over_budget():
    over = {}
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        for name, lines in _functions(path):
            key = f"{rel}:{name}"
            if lines > ALLOWED_FUNCTIONS.get(key, FUNCTION_LINES):
                over[key] = lines
    assert not over, f"functions over {FUNCTION_LINES} lines (split them, or allow them in this file): {over}"


def test_allow_lists_name_what_exists():
    """An entry for a module or function that is gone, or back under budget, is removed."""
    sizes = {}
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        sizes[rel] = len(path.read_text().splitlines())
        sizes.update({f"{rel}:{name}": lines for name, lines in _functions(path)})
    stale = [k for k in (*ALLOWED_MODULES, *ALLOWED_FUNCTIONS) if k not in sizes]
    assert not stale, f"allow-list entries naming nothing: {stale}"
    under = [k for k, limit in ALLOWED_MODULES.items() if k in sizes and sizes[k] <= MODULE_LINES]
    under += [k for k, limit in ALLOWED_FUNCTIONS.items() if k in sizes and sizes[k] <= FUNCTION_LINES]
    assert not under, f"allow-list entries already within budget (remove them): {under}"
