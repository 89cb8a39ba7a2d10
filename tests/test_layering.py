"""The parse, graph and plan stages import neither torch nor triton."""

import subprocess
import sys


def test_pure_stages_do_not_import_torch_or_triton():
    code = (
        "import sys, importlib.util, pathlib\n"
        "import einc.planner.equation, einc.planner.graph, einc.planner.plan, einc.errors, einc.config, einc.planner.fuse\n"
        "bad = [m for m in ('torch', 'triton') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "from einc.planner.equation import parse\n"
        "from einc.planner.graph import build\n"
        "from einc.planner.plan import build_plan\n"
        "print(build_plan(build(parse('ij,jk,kl->il'), [(2, 3), (3, 4), (4, 5)])).flops)\n"
        "assert 'torch' not in sys.modules\n"
    )
    # Import the submodules without running einc/__init__.
    env_code = (
        "import sys, types, importlib.util, pathlib\n"
        "spec = importlib.util.find_spec('einc')\n"
        "pkg = types.ModuleType('einc'); pkg.__path__ = list(spec.submodule_search_locations)\n"
        "sys.modules['einc'] = pkg\n" + code
    )
    out = subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) > 0


# ----------------------------------------------------------------------- imports run one way

import ast  # noqa: E402
from pathlib import Path  # noqa: E402

PACKAGE = Path(__file__).resolve().parent.parent / "einc"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The einc modules ``path`` imports (at any depth of the file), as dotted names."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("einc"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = ".".join(base[: len(base) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            if not mod.startswith("einc"):
                continue
            for a in node.names:        # ``from . import api`` names a module
                found.add(f"{mod}.{a.name}" if (PACKAGE.parent / f"{mod}.{a.name}".replace(".", "/")).with_suffix(
                    ".py").exists() or (PACKAGE.parent / f"{mod}.{a.name}".replace(".", "/")).is_dir() else mod)
    return found


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def test_only_the_package_face_and_the_cli_import_api():
    importers = sorted(m for m, deps in _graph().items() if "einc.api" in deps)
    assert importers == ["einc", "einc.cli"] or importers == ["einc.cli"], importers


def test_the_package_has_no_import_cycle():
    graph = {m: {d for d in deps if d != m and d != "einc"} for m, deps in _graph().items() if m != "einc"}
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack + [m, d]))
            if state.get(d) is None:
                visit(d, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
