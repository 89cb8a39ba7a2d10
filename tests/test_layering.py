"""The stages stand in pipeline order: planner -> codegen -> runtime -> doors -> tools.

The planner imports neither torch nor triton, and of einc only the base room (errors,
config, cachefiles); no
module imports a room above its own (at any depth of the file, lazy imports included);
planner and codegen never reach the runtime, even through other modules; the runtime's
two wings (torch_executor/, triton_executor/) never reach each other; and there is no
import cycle.  Run as a script, this file prints the import graph by room and the
rules' findings (``python tests/test_layering.py``)."""

import os
import subprocess
import sys
from pathlib import Path


def test_pure_stages_do_not_import_torch_or_triton():
    script = Path(__file__).resolve().parent / "support" / "scripts" / "planner_imports_no_torch.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) > 0


def test_cpu_calls_import_neither_the_code_generator_nor_triton():
    """The Triton executor imports ``einc.codegen`` where a call first wants kernels, so a
    process whose calls run on the torch executor never pays its import (nor triton's,
    statistics', the backend's or the tools')."""
    script = Path(__file__).resolve().parent / "support" / "scripts" / "cpu_calls_import_no_codegen.py"
    env = {k: v for k, v in os.environ.items() if k not in ("EINC_BACKEND", "EINC_SELECT")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "('torch',)" and int(out.stdout.splitlines()[1]) > 0


# ----------------------------------------------------------------------- imports run one way

import ast  # noqa: E402

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


def test_only_the_package_face_opt_einsums_door_and_the_cli_import_api():
    importers = sorted(m for m, deps in _graph().items() if "einc.api" in deps)
    assert set(importers) <= {"einc", "einc.tools.cli", "einc.opt_einsum_api"}, importers


# The rooms, bottom to top: a module may import its own room and the rooms below it only.
# A module at the top of einc/ is something a user imports, calls or configures (base,
# doors, face); a folder is a stage of the pipeline (planner, codegen, runtime), or a tool.
ROOMS = [
    ("base", ("einc.errors", "einc.config", "einc.cachefiles")),
    ("planner", ("einc.planner",)),
    ("codegen", ("einc.codegen",)),
    ("runtime", ("einc.runtime",)),
    ("doors", ("einc.named", "einc.sharing", "einc.autograd", "einc.custom_op", "einc.distributed", "einc.api",
               "einc.call_arguments", "einc.opt_einsum_api", "einc.numpy_keywords", "einc.pathinfo",
               "einc.traced_doors", "einc.op_flops", "einc.dynamo")),
    ("face", ("einc",)),
    ("tools", ("einc.tools", "einc.__main__")),
]
WINGS = ("einc.runtime.torch_executor", "einc.runtime.triton_executor")     # the runtime's two executors
PLANNER_MAY_IMPORT = ("einc.planner", *ROOMS[0][1])       # its own room and the base


def room(module: str) -> int:
    """The floor of ``module``'s room (the longest prefix that names a room)."""
    best, floor = -1, None
    for k, (_, prefixes) in enumerate(ROOMS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, floor = len(p), k
    assert floor is not None, f"{module} is in no room: add it to ROOMS"
    return floor


def back_arrows(graph) -> list[str]:
    """Every import of a room above the importer's, and every module of planner or codegen
    that reaches the runtime (or, for the planner, codegen) through any chain of imports."""
    bad = [f"{m} -> {d} ({ROOMS[room(m)][0]} imports {ROOMS[room(d)][0]})"
           for m, deps in sorted(graph.items()) for d in sorted(deps) if room(d) > room(m)]

    def reach(m, seen):
        for d in graph.get(m, ()):
            if d not in seen:
                seen.add(d)
                reach(d, seen)
        return seen
    for m in sorted(graph):
        above = {"planner": ("runtime", "codegen"), "codegen": ("runtime",)}.get(ROOMS[room(m)][0], ())
        for d in sorted(reach(m, set())):
            if ROOMS[room(d)][0] in above:
                bad.append(f"{m} reaches {d}")
    return bad


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _reach(graph, m, seen=None) -> set:
    """Every module ``m`` imports, directly or through a chain of imports."""
    seen = set() if seen is None else seen
    for d in graph.get(m, ()):
        if d not in seen:
            seen.add(d)
            _reach(graph, d, seen)
    return seen


def wing_crossings(graph) -> list[str]:
    """Every module of one executor wing that reaches the other wing through any chain."""
    bad = []
    for m in sorted(graph):
        for k, wing in enumerate(WINGS):
            if _within(m, wing):
                other = WINGS[1 - k]
                bad += [f"{m} reaches {d}" for d in sorted(_reach(graph, m)) if _within(d, other)]
    return bad


def planner_imports_beyond(graph) -> list[str]:
    """Every import of a planner module that is einc but not the planner or the base room."""
    return [f"{m} -> {d}" for m, deps in sorted(graph.items()) if _within(m, "einc.planner")
            for d in sorted(deps) if not any(_within(d, p) for p in PLANNER_MAY_IMPORT)]


def test_the_torch_wing_and_the_triton_wing_never_import_each_other():
    graph = _graph()
    assert any(_within(m, WINGS[0]) for m in graph) and any(_within(m, WINGS[1]) for m in graph)
    assert not wing_crossings(graph), "\n".join(wing_crossings(graph))


def test_the_planner_imports_nothing_of_einc_but_the_base_room():
    graph = _graph()
    assert not planner_imports_beyond(graph), "\n".join(planner_imports_beyond(graph))


def test_the_rules_catch_a_crossing():
    """A torch-wing module reaching the Triton wing through the hub, and a planner module
    importing the codegen's IR, drawn as synthetic graphs, are each found."""
    graph = {"einc.runtime.torch_executor.ttgt": {"einc.runtime.select"},
             "einc.runtime.select": {"einc.runtime.triton_executor.diskcache"},
             "einc.runtime.triton_executor.diskcache": {"einc.config"}}
    assert wing_crossings(graph) == ["einc.runtime.torch_executor.ttgt reaches einc.runtime.triton_executor.diskcache"]
    assert planner_imports_beyond({"einc.planner.fuse": {"einc.codegen.ir", "einc.errors", "einc.planner.plan"}}) == [
        "einc.planner.fuse -> einc.codegen.ir"]


def test_no_module_imports_a_room_above_its_own():
    graph = _graph()
    assert not back_arrows(graph), "\n".join(back_arrows(graph))


def test_a_back_arrow_fails_the_check():
    """Main's back arrows before the rooms (the slice planner running slices through the
    runtime; lowering naming kernels through codegen's renderer, in a planner), drawn as
    a synthetic graph, and a chain that reaches the runtime through a module of the same room."""
    assert back_arrows({"einc.planner.slicing": {"einc.runtime.dispatch"}, "einc.runtime.dispatch": set()}) == [
        "einc.planner.slicing -> einc.runtime.dispatch (planner imports runtime)",
        "einc.planner.slicing reaches einc.runtime.dispatch"]
    assert back_arrows({"einc.planner.fuse": {"einc.codegen.lower"}, "einc.codegen.lower": {"einc.codegen"},
                        "einc.codegen": set()})[0] == \
        "einc.planner.fuse -> einc.codegen.lower (planner imports codegen)"
    assert back_arrows({"einc.codegen.lower": {"einc.codegen.x"},
                        "einc.codegen.x": {"einc.runtime.triton_executor.loader"},
                        "einc.runtime.triton_executor.loader": set()}) == [
        "einc.codegen.x -> einc.runtime.triton_executor.loader (codegen imports runtime)",
        "einc.codegen.lower reaches einc.runtime.triton_executor.loader",
        "einc.codegen.x reaches einc.runtime.triton_executor.loader"]
    assert not back_arrows({"einc.runtime.engine": {"einc.planner.plan"}, "einc.planner.plan": {"einc.errors"},
                            "einc.errors": set()})


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


if __name__ == "__main__":      # the import graph by room, bottom to top
    g = _graph()
    for k, (name, _) in enumerate(ROOMS):
        print(f"{k} {name}")
        for m in sorted(x for x in g if room(x) == k):
            deps = sorted(d for d in g[m] if d != m)
            print(f"    {m} -> {', '.join(deps) if deps else '-'}")
    print("back arrows:", back_arrows(g) or "none")
    print("wings crossing:", wing_crossings(g) or "none")
    print("planner imports beyond the base room:", planner_imports_beyond(g) or "none")
