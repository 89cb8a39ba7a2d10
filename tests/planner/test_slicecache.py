"""The slicing einc's slicer chose, remembered beside the search's path on disk
(einc.planner.slicecache): the same plan and the same bits whether chosen or remembered,
and an entry that does not check against the network ignored (the slicer chooses again)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import opt_einsum
import opt_einsum.testing
import pytest
import torch

import einc
from einc.planner import pathcache, plan_for, slicecache, slicing
from einc.planner.equation import parse, sublist_equation
from einc.planner.graph import build
from einc.planner.options import Options
from einc.planner.plan import path_cache_clear

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 128
# the tests plan a network twice and compare: the searches under the limit are counted, and
# their guards read the thread's CPU time here, so that a loaded machine plans the same twice
pytestmark = pytest.mark.usefixtures("cpu_clock")


def _example():
    spec = importlib.util.spec_from_file_location("sliced_network", ROOT / "examples" / "sliced_network.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _circuit():
    """A 42-tensor random circuit (examples/sliced_network.py, 3x3 qubits, depth 8), which
    einc's search plans and its slicer slices to :data:`LIMIT` elements, one value of each
    sliced index per slice (its indices are of size 2)."""
    ops, subs = _example().circuit(3, 3, 8)
    eq, _ = sublist_equation([x for pair in zip(ops, subs) for x in pair])
    return eq, ops, subs


@pytest.fixture(autouse=True)
def cache_dir(monkeypatch, tmp_path):
    """A fresh cache folder; every search and slicing stored, however short."""
    folder = tmp_path / "einc-cache"
    monkeypatch.setenv("EINC_CACHE_DIR", str(folder))
    monkeypatch.setattr(pathcache, "STORE_SECONDS", 0.0)
    monkeypatch.setattr(slicecache, "STORE_SECONDS", 0.0)
    path_cache_clear()
    einc.cache_clear()
    yield folder
    einc.cache_clear()


@pytest.fixture
def chooses(monkeypatch):
    """How many times the slicer weighed a slicing (``_weigh`` runs once per candidate path
    and kind of cut)."""
    calls = []
    real = slicing._weigh

    def weigh(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(slicing, "_weigh", weigh)
    return calls


def _plan(eq, ops, limit=LIMIT):
    return plan_for(eq, [tuple(o.shape) for o in ops], Options.of("auto", limit, None))


def _entry(cache_dir):
    """The entry of the search under the limit (the one holding slicings) and its record."""
    for file in (cache_dir / "paths").iterdir():
        record = json.loads(file.read_text())
        if "slicings" in record:
            return file, record
    raise AssertionError("no slicing remembered")


def _same(a, b):
    assert a.path == b.path and a.steps == b.steps and a.flops == b.flops
    assert (a.naive_flops, a.largest_intermediate, a.optimizer) == (b.naive_flops, b.largest_intermediate, b.optimizer)
    assert a.slicing == b.slicing           # every figure, the slice's plan among them
    # (the first, the search's line, says it was remembered; the slicer's, what it did or that)
    assert [n for n in a.notes[1:] if not n.startswith("Slicer:")] == \
        [n for n in b.notes[1:] if not n.startswith("Slicer:")]


@pytest.mark.parametrize("network", ["circuit", "grid"])
def test_a_remembered_slicing_gives_the_same_plan_and_bits(cache_dir, chooses, network, monkeypatch):
    if network == "circuit":
        eq, ops, subs = _circuit()
        limit = LIMIT
        # (torch.einsum takes 52 labels; the circuit has more)
        ref = opt_einsum.contract(*[x for o, sub in zip(ops, subs) for x in (o.to(torch.complex128), sub)],
                                  backend="torch")
    else:       # a 4x5 grid of bond 4, float64: sliced in chunks of 2 values
        eq, ops = _example().grid(4, 5, 4)
        limit = 1024
        ref = opt_einsum.contract(eq, *ops, backend="torch")
    found = _plan(eq, ops, limit)
    assert found.slicing is not None and found.slicing.live <= limit and chooses
    assert network == "circuit" or max(found.slicing.chunks) > 1
    out = einc.einsum(eq, *ops, memory_limit=limit)
    file, record = _entry(cache_dir)
    kept = record["slicings"]["live"]
    assert kept["indices"] == list(found.slicing.indices) and kept["chunks"] == list(found.slicing.chunks)
    assert record["version"].startswith(pathcache.VERSION) and pathcache.VERSION == "einc-paths-4"
    chooses.clear()
    einc.cache_clear()
    built, read = [], []
    real, load = slicing.build_plan, pathcache.load
    monkeypatch.setattr(slicing, "build_plan", lambda graph, *a: built.append(graph) or real(graph, *a))
    monkeypatch.setattr(pathcache, "load", lambda *a: read.append(a[0]) or load(*a))
    again = _plan(eq, ops, limit)
    assert not chooses                                  # read, not chosen
    assert len(built) == 1 and built[0] != again.graph  # and only the slice's plan built, not the path's
    assert read == [file.stem]                          # from one read of the entry: path, report and slicing
    _same(found, again)
    assert "remembered (einc.planner.pathcache)" in again.notes[0] and again.notes[-1].startswith("Slicer: remembered")
    assert torch.equal(einc.einsum(eq, *ops, memory_limit=limit), out)          # the same bits
    assert not chooses
    torch.testing.assert_close(out.to(ref.dtype), ref, rtol=1e-4, atol=1e-6)


def test_a_slicing_of_the_unlimited_path_is_read_too(cache_dir, chooses):
    eq, ops, subs = _circuit()
    _plan(eq, ops)
    file, record = _entry(cache_dir)
    graph = build(parse(eq), [tuple(o.shape) for o in ops])
    unlimited = slicing.build_plan(graph, eq, Options.of("auto", None, None))
    assert list(map(list, unlimited.path)) != record["slicings"]["live"]["path"]
    chunks = slicing._choose(slicing._Model(unlimited, "live"), LIMIT, ())
    theirs = slicing.sliced_plan(graph, eq, unlimited, tuple(chunks), LIMIT, "einc", tuple(chunks.values()))
    s = theirs.slicing
    file.write_text(json.dumps(dict(record, slicings={"live": dict(
        record["slicings"]["live"], base="unlimited", path=list(map(list, unlimited.path)), indices=list(chunks),
        chunks=list(chunks.values()), figures=[s.unsliced_flops, s.unsliced_largest, s.unsliced_live, s.flops,
                                               s.once_steps, s.slice_steps])})))
    chooses.clear()
    again = _plan(eq, ops)
    assert not chooses
    _same(theirs, again)



def test_a_slicing_of_a_path_with_a_step_over_three_operands_is_read_too(cache_dir, chooses):
    # the path's last two steps taken as one of three operands (opt_einsum's answer where no
    # pair fits its limit): its plan runs them pairwise, and its slicing is read, not chosen
    eq, ops, _ = _circuit()
    _plan(eq, ops)
    file, record = _entry(cache_dir)
    graph = build(parse(eq), [tuple(o.shape) for o in ops])
    path = tuple(map(tuple, record["path"][:-2])) + ((0, 1, 2),)
    base = slicing.build_plan(graph, eq, Options.of(path))
    chunks = slicing._choose(slicing._Model(base, "live"), LIMIT, ())
    theirs = slicing.sliced_plan(graph, eq, base, tuple(chunks), LIMIT, "einc", tuple(chunks.values()))
    s = theirs.slicing
    file.write_text(json.dumps(dict(record, path=list(map(list, path)), slicings={"live": dict(
        record["slicings"]["live"], path=list(map(list, path)), indices=list(chunks), chunks=list(chunks.values()),
        figures=[s.unsliced_flops, s.unsliced_largest, s.unsliced_live, s.flops, s.once_steps, s.slice_steps])})))
    chooses.clear()
    again = _plan(eq, ops)
    assert not chooses and again.path == path
    assert (again.steps, again.flops, again.slicing) == (theirs.steps, theirs.flops, theirs.slicing)

def _damage(kind, record, graph):
    s = dict(record["slicings"]["live"])
    n = len(graph.sizes)
    if kind == "unknown index":
        s["indices"] = s["indices"][:-1] + [n]
    elif kind == "negative index":
        s["indices"] = s["indices"][:-1] + [-1]
    elif kind == "bool index":
        s["indices"] = [True] + s["indices"][1:]
    elif kind == "repeated index":
        s["indices"] = s["indices"][:-1] + s["indices"][:1]
    elif kind == "whole chunk":
        s["chunks"] = [graph.sizes[s["indices"][0]]] + s["chunks"][1:]
    elif kind == "zero chunk":
        s["chunks"] = [0] + s["chunks"][1:]
    elif kind == "float chunk":
        s["chunks"] = [1.0] + s["chunks"][1:]
    elif kind == "short chunks":
        s["chunks"] = s["chunks"][:-1]
    elif kind == "no index":
        s["indices"], s["chunks"] = [], []
    elif kind == "other base":
        s["base"] = "unlimited" if s["base"] == "limited" else "limited"
    elif kind == "other path":
        s["path"] = [[0, 1]] * (graph.num_operands - 1)         # valid, but not the path planned here
    elif kind == "bad path":
        s["path"] = s["path"][:-1]
    elif kind == "other slicer":
        s["slicer"] = "einc-slicer-0"
    elif kind == "breaks the limit":
        s["indices"], s["chunks"] = s["indices"][:1], [1]
    elif kind == "float figure":
        s["figures"] = [1.5] + s["figures"][1:]
    elif kind == "zero figures":        # (a slicing estimated at nothing would pass check_cost unasked)
        s["figures"] = [0] * len(s["figures"])
    elif kind == "steps miscounted":
        s["figures"] = s["figures"][:4] + [s["figures"][4] + 1, s["figures"][5]]
    elif kind == "no figures":
        del s["figures"]
    elif kind == "not a dict":
        return dict(record, slicings={"live": [s]})
    return dict(record, slicings={"live": s})


DAMAGES = ["unknown index", "negative index", "bool index", "repeated index", "whole chunk", "zero chunk",
           "float chunk", "short chunks", "no index", "other base", "other path", "bad path", "other slicer",
           "breaks the limit", "float figure", "zero figures", "steps miscounted", "no figures", "not a dict"]


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_tampered_slicing_is_ignored_and_chosen_again(cache_dir, chooses, damage):
    eq, ops, _ = _circuit()
    found = _plan(eq, ops)
    file, record = _entry(cache_dir)
    graph = build(parse(eq), [tuple(o.shape) for o in ops])
    if damage == "breaks the limit":        # (the test's own check: this slicing is over the limit)
        base = slicing.build_plan(graph, eq, Options.of(tuple(map(tuple, record["slicings"]["live"]["path"]))))
        over = slicing.sliced_plan(graph, eq, base, record["slicings"]["live"]["indices"][:1], LIMIT, "einc", (1,))
        assert over.slicing.live > LIMIT
    file.write_text(json.dumps(_damage(damage, record, graph)))
    chooses.clear()
    again = _plan(eq, ops)
    assert chooses                                      # the slicer chose again
    _same(found, again)
    assert json.loads(file.read_text())["slicings"] == record["slicings"]      # and its choice overwrote the entry


def test_an_entry_behind_a_link_is_not_read(cache_dir, chooses):
    eq, ops, _ = _circuit()
    found = _plan(eq, ops)
    file, _ = _entry(cache_dir)
    target = file.with_name("elsewhere.txt")
    file.rename(target)
    file.symlink_to(target)
    planted = target.read_text()
    chooses.clear()
    again = _plan(eq, ops)
    assert chooses                                            # the slicing not read
    _same(found, again)
    assert target.read_text() == planted                      # nor written through the link


def test_the_slicings_of_both_bounds_are_kept(cache_dir):
    eq, ops, _ = _circuit()
    _plan(eq, ops)
    file, record = _entry(cache_dir)
    graph = build(parse(eq), [tuple(o.shape) for o in ops])
    live = slicecache.lookup(graph, LIMIT, "live")
    assert live is not None and slicecache.lookup(graph, LIMIT, "intermediate") is None
    other = live._replace(chunks=(1,) * len(live.indices))
    slicecache.remember(graph, LIMIT, "intermediate", other)
    assert slicecache.lookup(graph, LIMIT, "live") == live and slicecache.lookup(graph, LIMIT, "intermediate") == other
    assert json.loads(file.read_text())["path"] == record["path"]


def test_no_entry_no_slicing_remembered(cache_dir, monkeypatch):
    monkeypatch.setattr(pathcache, "STORE_SECONDS", 1e9)     # the search's path not stored
    eq, ops, _ = _circuit()
    assert _plan(eq, ops).slicing is not None
    assert not (cache_dir / "paths").exists() or not any((cache_dir / "paths").iterdir())


SECOND = ("import json, sys\n"
          "from einc.planner import pathcache, plan_for, slicecache, slicing\n"
          "pathcache.STORE_SECONDS = slicecache.STORE_SECONDS = 0.0\n"
          "from einc.planner.options import Options\n"
          "eq, shapes, forbid = json.loads(sys.argv[1])\n"
          "if forbid:\n"
          "    def choose(*args):\n"
          "        raise AssertionError('the slicer chose again')\n"
          "    slicing._choose = choose\n"
          f"p = plan_for(eq, [tuple(s) for s in shapes], Options.of('auto', {LIMIT}, None))\n"
          "print(json.dumps([p.path, [list(s.output) for s in p.steps], p.slicing.indices, p.slicing.chunks]))\n")


def test_a_second_process_reads_the_slicing(cache_dir):
    eq, ops, _ = _circuit()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    runs = []
    for forbid in (False, True):
        arg = json.dumps([eq, [list(o.shape) for o in ops], forbid])
        out = subprocess.run([sys.executable, "-c", SECOND, arg], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    assert runs[0] == runs[1]


def test_a_remembered_slicing_the_cost_check_refuses_is_chosen_again(cache_dir, chooses):
    # every chunk made 1 (each still a whole number below its index's size): a slicing of
    # thousands of slices that check_cost refuses, where the slicer's own choice runs
    eq, shapes = opt_einsum.testing.rand_equation(30, 3, seed=1)
    ops = [torch.ones(s) for s in shapes]
    found = _plan(eq, ops, 20000)
    slicing.check_cost(found)
    file, record = _entry(cache_dir)
    s = record["slicings"]["live"]
    assert any(c > 1 for c in s["chunks"])
    file.write_text(json.dumps(dict(record, slicings={"live": dict(s, chunks=[1] * len(s["chunks"]))})))
    chooses.clear()
    again = _plan(eq, ops, 20000)
    assert chooses                                      # the slicer chose again
    _same(found, again)
    slicing.check_cost(again)
    assert json.loads(file.read_text())["slicings"] == record["slicings"]      # and overwrote the entry


def test_a_remembered_slicing_refused_when_chosen_is_not_chosen_again(cache_dir, chooses):
    # the slicer's own choice, which the cost check refuses: the next process reads it and
    # refuses it, as the slicer would, without weighing a slicing again
    eq, shapes = opt_einsum.testing.rand_equation(30, 3, seed=3)
    ops = [torch.ones(s) for s in shapes]
    found = _plan(eq, ops, 64)
    with pytest.raises(einc.MemoryLimitError):
        slicing.check_cost(found)
    file, record = _entry(cache_dir)
    assert record["slicings"]["live"]["refused"] is True
    chooses.clear()
    einc.cache_clear()
    again = _plan(eq, ops, 64)
    assert not chooses and again.notes[-1].startswith("Slicer: remembered")
    _same(found, again)
    with pytest.raises(einc.MemoryLimitError):
        slicing.check_cost(again)
    # an entry that says not refused is chosen again where the cost check refuses it
    file.write_text(json.dumps(dict(record, slicings={"live": dict(record["slicings"]["live"], refused=False)})))
    einc.cache_clear()
    _same(found, _plan(eq, ops, 64))
    assert chooses and json.loads(file.read_text())["slicings"] == record["slicings"]
