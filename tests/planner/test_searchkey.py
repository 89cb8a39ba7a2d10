"""The key of a remembered path and the search's figures it names (einc.planner.searchkey):
every figure changes the key, the search takes its figures from there, and a process that
finds its network's path on disk names and reads the entry without importing the search."""

import json
import os
import subprocess
import sys

import pytest

from einc.planner import anneal as A
from einc.planner import pathcache, searchkey
from einc.planner import search as S
from einc.planner.searchreport import Report, report_of

# the nominal costs of einc's torch executor: the key names their ratio (WRITE_FACTOR), which
# cotengra's trials weigh; their sizes set the budgets, and the budgets' own figures are named
NOMINAL = {"FLOP_SECONDS", "ELEMENT_SECONDS", "STEP_SECONDS"}
FIGURES = sorted(name for name, value in vars(searchkey).items() if name.isupper() and name not in NOMINAL | {"SEED"})


@pytest.fixture(autouse=True)
def cache_dir(monkeypatch, tmp_path):
    folder = tmp_path / "einc-cache"
    monkeypatch.setenv("EINC_CACHE_DIR", str(folder))
    return folder


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_changes_the_key(monkeypatch, name):
    before = searchkey.version()
    value = getattr(searchkey, name)
    monkeypatch.setattr(searchkey, name, value + 1 if isinstance(value, (int, float)) else repr(value) + "'")
    assert searchkey.version() != before


def test_the_seed_changes_the_key():
    assert searchkey.version(seed=searchkey.SEED + 1) != searchkey.version()
    network = ([{0, 1}, {1}], {0}, {0: 2, 1: 3})
    assert searchkey.entry(*network, seed=1) != searchkey.entry(*network)


def test_the_search_and_its_annealing_take_their_figures_from_the_key():
    taken = [name for name in FIGURES + sorted(NOMINAL) + ["SEED"] if hasattr(S, name) or hasattr(A, name)]
    assert len(taken) >= len(FIGURES) - 1          # all but the objective's version, which names a ranking
    for name in taken:
        assert getattr(S if hasattr(S, name) else A, name) is getattr(searchkey, name), name


def test_recall_misses_then_reads_what_the_search_remembered(monkeypatch):
    monkeypatch.setattr(S, "CAP", 0.2)
    inputs = [frozenset({k, k + 1}) for k in range(30)] + [frozenset({0, 30})]      # a ring of 31 matrices
    sizes = {k: 2 + k % 3 for k in range(31)}
    found, name, tag = searchkey.recall(inputs, set(), sizes)
    assert found is None and (name, tag) == searchkey.entry(inputs, set(), sizes)
    monkeypatch.setattr(pathcache, "STORE_SECONDS", 0)      # remembered however short the search
    path, report = S.search(inputs, set(), sizes)
    (again, was), name2, _ = searchkey.recall(inputs, set(), sizes)
    assert again == path and name2 == name and was.method.startswith("remembered") and "remembered" not in report.method
    assert searchkey.recall(inputs, set(), sizes, memory_limit=10 ** 6)[0] is None      # another entry


def test_a_network_past_16_operands_sized_by_numpys_integers_is_planned_and_remembered(monkeypatch):
    np = pytest.importorskip("numpy")
    from einc.planner import plan_for
    from einc.planner.options import Options
    monkeypatch.setattr(S, "CAP", 0.2)
    monkeypatch.setattr(pathcache, "STORE_SECONDS", 0)
    equation = ",".join(f"{chr(97 + k)}{chr(98 + k)}" for k in range(20)) + "->au"     # a chain of 20 matrices
    shapes = [(np.int64(2 + k % 3), np.int64(2 + (k + 1) % 3)) for k in range(20)]
    for limit in (None, "max_input"):       # (json cannot write numpy's integers, nor random seed by them)
        options = Options.of("auto", limit, None)
        plan = plan_for(equation, shapes, options)
        assert plan.path == plan_for(equation, [tuple(map(int, s)) for s in shapes], options).path


def test_a_report_reads_back_as_written():
    report = Report("hyper", 1.5, 12, "converged", 2.0, 1.0, 3e9, 4096.0, 2.5)
    assert report_of(json.loads(json.dumps(report._asdict()))) == report
    assert report_of(dict(report._asdict(), trials=12.0)) is None and report_of(dict(report._asdict(), x=1)) is None


SECOND = """
import json, sys
from einc.planner import plan_for
n = 31
eq = ",".join(chr(0x4e00 + k) + chr(0x4e00 + (k + 1) % n) for k in range(n)) + "->"
shapes = [(2 + k % 3, 2 + (k + 1) % n % 3) for k in range(n)]
before = set(sys.modules)
plan = plan_for(eq, shapes)
print(json.dumps([plan.notes[0], plan.path, sorted(set(sys.modules) - before)]))
"""


def test_a_second_process_plans_from_disk_without_importing_the_search(cache_dir):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), os.environ.get("PYTHONPATH", "")]))
    runs = []
    for first in (True, False):
        script = ("from einc.planner import pathcache\npathcache.STORE_SECONDS = 0\n" if first else "") + SECOND
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    (_, path, searched), (note, again, imported) = runs
    assert "einc.planner.search" in searched and "remembered (einc.planner.pathcache)" in note and again == path
    assert not {"einc.planner.search", "einc.planner.anneal", "einc.planner.objective", "cotengra",
                "tqdm"} & set(imported), imported


def test_the_key_looks_up_the_installed_libraries_once_a_process(monkeypatch):
    import importlib.util
    asked = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: asked.append(name) or real(name, *a))
    before = searchkey.version()
    searchkey.version()
    searchkey.entry([{0, 1}, {1}], {0}, {0: 2, 1: 3})
    assert asked.count("cotengra") <= 1 and asked.count("kahypar") <= 1
    assert all(m in before.split(":") for m in ("cotengra", "cotengrust", "kahypar") if real(m) is not None)
