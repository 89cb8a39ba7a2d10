"""The paths of einc's search of 6-16 operands remembered on disk (einc.planner.options._remembered,
in einc.planner.pathcache's folder): a long search's path is read back, by a later call or a
later process, instead of searched again; a quick one is not stored; a bad entry is ignored;
the key names the memory limit, the search's version and the order the search iterates in;
and a small call never looks at the folder."""

import hashlib
import inspect
import json
import os
import subprocess
import sys

import entries
import opt_einsum
import pytest
import torch

import einc
from einc.planner import options as O
from einc.planner import pathcache, pathcost
from einc.planner.options import _auto
from einc.planner.pathcost import path_cost
from einc.planner.plan import path_cache_clear

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# a 4-regular network of 10 tensors (einsum_benchmark's regular(10, 4, d_min=2, d_max=8, seed=1); of 14-16
# such tensors the dp takes far longer than reading its path back, in every new process)
EQUATION = "abcd,efgh,gijk,cflm,bjln,aiop,depq,oqrs,hnst,kmrt"
DENSE = [(3, 6, 8, 8), (8, 2, 4, 2), (4, 5, 8, 5), (8, 2, 5, 7), (6, 8, 5, 5), (3, 5, 8, 3), (8, 8, 3, 2),
         (8, 2, 5, 2), (2, 5, 2, 8), (5, 7, 5, 8)]

def _network(equation=EQUATION, shapes=DENSE):
    """``(inputs, output, sizes)`` with int labels in order of appearance, as einc's planner gives them."""
    label: dict = {}
    terms = [tuple(label.setdefault(c, len(label)) for c in t) for t in equation.split(",")]
    sizes = {}
    for t, s in zip(terms, shapes):
        sizes.update(zip(t, s))
    return [set(t) for t in terms], set(), dict(sorted(sizes.items()))


@pytest.fixture(autouse=True)
def cache_dir(monkeypatch, tmp_path):
    folder = tmp_path / "einc-cache"
    monkeypatch.setenv("EINC_CACHE_DIR", str(folder))
    path_cache_clear()
    yield folder
    path_cache_clear()


@pytest.fixture
def searches(monkeypatch):
    """The searches ``_exact`` runs, counted."""
    count = []
    real = O._exact
    monkeypatch.setattr(O, "_exact", lambda *a: count.append(1) or real(*a))
    return count


def _entries(cache_dir):
    folder = cache_dir / "paths"
    return sorted(folder.iterdir()) if folder.exists() else []


def test_a_long_dp_search_is_read_back_instead_of_searched_again(monkeypatch, cache_dir, searches):
    monkeypatch.setattr(O, "DP_STORE_SECONDS", 0)       # however quick this machine
    inputs, output, sizes = _network()
    path = _auto(inputs, output, sizes)
    (entry,) = _entries(cache_dir)
    record = json.loads(entry.read_text())
    assert record["version"] == O.dp_version() and record["path"] == [list(c) for c in path]
    again = _auto(inputs, output, sizes)
    assert again == path and len(searches) == 1
    # the path a search finds, flops and all
    monkeypatch.setattr(O, "DP_STORE_SECONDS", 1e9)
    pathcache.clear()
    assert O._exact(inputs, output, sizes, None) == path
    assert path_cost(inputs, output, sizes, again) == path_cost(inputs, output, sizes, path)


def test_plan_for_reads_the_remembered_path_with_its_caches_cleared(monkeypatch, searches):
    monkeypatch.setattr(O, "DP_STORE_SECONDS", 0)
    shapes = [tuple(s) for s in DENSE]
    first = einc.planner.plan_for(EQUATION + "->", shapes)
    path_cache_clear()
    einc.cache_clear()
    second = einc.planner.plan_for(EQUATION + "->", shapes)
    assert second.path == first.path and second.flops == first.flops and len(searches) == 1


def test_sizes_given_as_numpys_integers_name_the_same_entry(monkeypatch, searches):
    np = pytest.importorskip("numpy")
    monkeypatch.setattr(O, "DP_STORE_SECONDS", 0)
    first = einc.planner.plan_for(EQUATION + "->", [tuple(s) for s in DENSE])
    path_cache_clear()
    again = einc.planner.plan_for(EQUATION + "->", [tuple(np.int64(d) for d in s) for s in DENSE])
    assert again.path == first.path and len(searches) == 1


def test_a_quick_search_stores_nothing(monkeypatch, cache_dir, searches):
    monkeypatch.setattr(O, "DP_STORE_SECONDS", 1e9)     # every search quicker than that
    inputs, output, sizes = _network()
    path = _auto(inputs, output, sizes)
    assert _auto(inputs, output, sizes) == path and len(searches) == 2
    assert _entries(cache_dir) == []


def test_the_memory_limit_is_part_of_the_key(monkeypatch, cache_dir, searches):
    monkeypatch.setattr(O, "DP_STORE_SECONDS", 0)
    inputs, output, sizes = _network("ab,bc,cd,de,ef,fa", [(4, 5), (5, 6), (6, 7), (7, 8), (8, 9), (9, 4)])
    free = _auto(inputs, output, sizes)
    limited = _auto(inputs, output, sizes, memory_limit=40)
    assert len(_entries(cache_dir)) == 2 and len(searches) == 2
    assert _auto(inputs, output, sizes) == free and _auto(inputs, output, sizes, memory_limit=40) == limited
    assert len(searches) == 2


def test_the_key_names_the_search_its_version_and_the_order_it_iterates_in(monkeypatch):
    inputs, output, sizes = _network()
    tag = O.dp_version()
    name = O.dp_entry(inputs, output, sizes, None, tag)[0]
    assert O.DP_VERSION in tag and str(O.CAP_TRIALS) in tag and opt_einsum.__version__ in tag
    # another search past 16 operands, another version: never the dp's entry
    from einc.planner import searchkey
    assert searchkey.entry(inputs, output, sizes)[0] != name
    with monkeypatch.context() as m:
        m.setattr(O, "DP_VERSION", "einc-dp-0")
        assert O.dp_version() != tag
    with monkeypatch.context() as m:
        m.setattr(O, "CAP_TRIALS", O.CAP_TRIALS + 1)
        assert O.dp_version() != tag
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "cotengrust", None)       # as where it is not installed: opt_einsum's dp
        assert O.dp_version() != tag and O.dp_version().endswith(":none")
    assert O.dp_version() == tag
    # the searches break ties in the order they meet indices: one set, iterated otherwise, is another key
    a, b = set(), set()
    for i in (1, 9):
        a.add(i)
    for i in (9, 1):
        b.add(i)
    assert a == b and list(a) != list(b)
    assert O.dp_entry([a], set(), {1: 2, 9: 3}, None, tag)[0] != O.dp_entry([b], set(), {1: 2, 9: 3}, None, tag)[0]
    assert O.dp_entry(inputs, output, sizes, 10 ** 6, tag)[0] != name


# the search's source, as DP_VERSION names it: (DP_VERSION, the first 16 hex digits of its SHA-256)
SEARCH = ("einc-dp-1", "afad72c78bf35b40")


def test_a_change_to_the_search_takes_a_new_version():
    # a path read back must be the one the search finds: a changed search misses the old entries
    text = "".join(inspect.getsource(f) for f in (O._exact, O._optimal, O._shared, O._dynamic_programming, O._cap,
                                                  O._cheapest)) + inspect.getsource(pathcost)
    found = (O.DP_VERSION, hashlib.sha256(text.encode()).hexdigest()[:16])
    assert found == SEARCH, (f"the search of 3-16 operands changed ({found}): give options.DP_VERSION a new name, "
                             "so that the paths remembered on disk are missed, and record both in SEARCH")


@pytest.mark.parametrize("damage", [k for k in entries.KINDS if k != "bad report"])     # (it keeps no report)
def test_a_corrupt_entry_is_ignored_and_written_again(monkeypatch, cache_dir, searches, damage):
    monkeypatch.setattr(O, "DP_STORE_SECONDS", 0)
    inputs, output, sizes = _network()
    path = _auto(inputs, output, sizes)
    (entry,) = _entries(cache_dir)
    record = entries.damage(entry, damage, "einc-dp-0")
    assert _auto(inputs, output, sizes) == path and len(searches) == 2      # searched again, the same path
    if damage != "link":
        again = json.loads(entry.read_text())                              # and written again, whole
        assert again.pop("seconds") > 0 and again == {k: v for k, v in record.items() if k != "seconds"}


def test_a_network_not_remembered_checks_no_folder(monkeypatch, cache_dir, searches):
    # one look at a file's name, where the folder is there with other entries or not
    def refused(*args, **kwargs):
        raise AssertionError("the path cache's folder was checked")
    inputs, output, sizes = _network()
    monkeypatch.setattr(O, "DP_STORE_SECONDS", 1e9)
    for there in (False, True):
        if there:
            pathcache.store("0" * 64, "v", ((0, 1),), {})
        with monkeypatch.context() as m:
            m.setattr(pathcache, "folder", refused)
            assert _auto(inputs, output, sizes) == O._exact(inputs, output, sizes, None)
    assert len(_entries(cache_dir)) == 1 and len(searches) == 4


def test_up_to_5_operands_and_for_two_the_folder_is_never_looked_at(monkeypatch, cache_dir):
    # the exhaustive search costs about what reading an entry does: small calls stat nothing
    def refused(*args, **kwargs):
        raise AssertionError("the path cache was looked at")
    monkeypatch.setattr(pathcache, "folder", refused)
    einc.cache_clear()
    for eq in ("ij,jk->ik", "ij,jk,kl->il", "ab,bc,cd,de->ae", "ab,bc,cd,de,ef->af"):
        ops = [torch.randn(3, 3, dtype=torch.float64) for _ in eq.split("->")[0].split(",")]
        assert torch.allclose(einc.einsum(eq, *ops), torch.einsum(eq, *ops))
        inputs, output, sizes = _network(eq.split("->")[0], [(3, 3)] * len(ops))
        _auto(inputs, output, sizes)
    assert not cache_dir.exists()


def test_explain_names_the_search_and_whether_its_path_was_read_back(monkeypatch, cache_dir):
    """``explain`` names the search of 6-16 operands, not "Optimizer: auto" alone: that the dp
    made the path, or that it was read back from disk instead of searched."""
    ops = [torch.empty(s) for s in DENSE]

    def line(**options):
        path_cache_clear()
        einc.cache_clear()
        found = [x.strip() for x in str(einc.explain(EQUATION + "->", *ops, **options)).splitlines()
                 if "Path search" in x]
        assert len(found) == 1, found
        return found[0]
    monkeypatch.setattr(O, "DP_STORE_SECONDS", 1e9)
    assert line().startswith("Path search: dynamic programming") and "; not stored" in line()
    monkeypatch.setattr(O, "DP_STORE_SECONDS", 0)
    first = line()
    assert "dynamic programming" in first and "stored in the path cache" in first and "remembered" not in first
    again = line()
    assert again.startswith("Path search: remembered (einc.planner.pathcache): dynamic programming")
    assert "read back in" in again and "found by an earlier search of" in again
    # under a memory limit opt_einsum's dp runs (cotengrust's takes none)
    assert "(opt_einsum's dp)" in line(memory_limit=10 ** 9)
    # up to 5 operands no line: the exhaustive search, never remembered
    assert "Path search" not in str(einc.explain("ab,bc,cd,de->ae", *[torch.empty(3, 3)] * 4))


SECOND = """
import json, sys
import cotengrust
from einc.planner import options, plan_for
if sys.argv[1] == "store":
    options.DP_STORE_SECONDS = 0
elif sys.argv[1] == "read":     # the dp must not run
    cotengrust.optimize_optimal = None
else:                           # a quick search: stored never
    options.DP_STORE_SECONDS = 1e9
before = set(sys.modules)
plan = plan_for({eq!r}, {shapes!r})
imported = sorted(m for m in set(sys.modules) - before if "." not in m or m.startswith("einc."))
print(json.dumps([plan.path, plan.flops, imported, plan.notes]))
"""


def test_a_second_process_reads_the_path_and_imports_nothing_heavy(cache_dir):
    pytest.importorskip("cotengrust")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    runs = []
    for side, equation, shapes in (("store", EQUATION, DENSE), ("read", EQUATION, DENSE),
                                   ("quick", "ab,bc,cd,de,ef,fa", [(2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 2)])):
        script = SECOND.format(eq=equation + "->", shapes=[tuple(s) for s in shapes])
        out = subprocess.run([sys.executable, "-c", script, side], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    (path, flops, _, stored), (again, again_flops, imported, read), (_, _, looked, quick) = runs
    assert again == path and again_flops == flops
    # the plan says which search made its path, and that the second process read it back
    assert len(stored) == len(read) == len(quick) == 1
    assert stored[0].startswith("Path search: dynamic programming (cotengrust's dp)") and "stored in the" in stored[0]
    assert read[0].startswith("Path search: remembered (einc.planner.pathcache): dynamic programming (cotengrust's")
    assert "read back in" in read[0] and "found by an earlier search of" in read[0]
    assert "not stored" in quick[0]
    assert not {"cotengra", "torch", "tqdm", "numpy", "einc.planner.search"} & set(imported), imported
    # a network not remembered: a look at one name, and the path cache not imported
    assert "einc.planner.pathcache" in imported and "einc.planner.pathcache" not in looked, looked
    assert len(_entries(cache_dir)) == 1
