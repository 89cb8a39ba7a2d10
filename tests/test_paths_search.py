"""einc's default path search past dynamic programming's reach (einc.planner.search): the
budget, the report, determinism, the fallbacks without cotengra, and the ranking."""

import os
import random
import subprocess
import sys

import opt_einsum
import pytest
import torch

import einc
from einc.planner import search as S
from einc.planner.options import DP_OPERANDS, _auto
from einc.planner.plan import path_cache_clear

HAS_COTENGRA = S._cotengra() is not None


def _regular(n, d_min, d_max, seed):
    """A random 3-regular network of ``n`` tensors (int labels), bonds of d_min..d_max."""
    rng = random.Random(seed)
    import networkx as nx
    g = nx.random_regular_graph(3, n, seed=seed)
    edge = {tuple(sorted(e)): k for k, e in enumerate(g.edges)}
    sizes = {k: rng.randint(d_min, d_max) for k in edge.values()}
    inputs = [frozenset(edge[tuple(sorted((v, u)))] for u in g.neighbors(v)) for v in range(n)]
    return inputs, sizes


def _equation(inputs):
    labels = sorted({i for t in inputs for i in t})
    return ",".join("".join(opt_einsum.get_symbol(labels.index(i)) for i in sorted(t)) for t in inputs) + "->"


@pytest.fixture
def fresh():
    path_cache_clear()
    einc.cache_clear()
    yield
    path_cache_clear()
    einc.cache_clear()


def test_up_to_dynamic_programmings_reach_the_paths_are_dps():
    rng = random.Random(1)
    for n in (6, 10, 12, DP_OPERANDS):
        inputs, sizes = _regular(n, 2, 5, seed=rng.randrange(100))
        want = opt_einsum.paths.dynamic_programming(inputs, set(), sizes)
        assert _auto(inputs, set(), sizes) == want


def test_path_cost_counts_as_einc_does():
    # ij,jk,kl->il at 2x3, 3x4, 4x5: (ij,jk) 2*3*4 multiply-adds, then 2*4*5
    inputs = [frozenset({0, 1}), frozenset({1, 2}), frozenset({2, 3})]
    sizes = {0: 2, 1: 3, 2: 4, 3: 5}
    flops, written, largest, steps = S.path_cost(inputs, {0, 3}, sizes, ((0, 1), (0, 1)))
    plan = einc.planner.plan_for("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], einc.planner.Options.of(((0, 1), (0, 1))))
    assert flops == plan.flops == 2 * (24 + 40)
    assert (written, largest, steps) == (8 + 10, 10, 2)


def test_the_budget_is_a_share_of_the_predicted_time_capped():
    assert S.budget_for(1.0) == pytest.approx(S.FRACTION)
    assert S.budget_for(1e9) == S.CAP
    assert S.predicted_seconds(1e9, 0, 0) == pytest.approx(1e9 * S.FLOP_SECONDS)


def test_a_network_that_contracts_at_once_gets_the_greedy_path_at_once():
    # a chain of 30 small matrices contracts in well under a millisecond
    inputs = [frozenset({k, k + 1}) for k in range(30)]
    sizes = dict.fromkeys(range(31), 3)
    path, report = S.search(inputs, {0, 30}, sizes)
    assert report.method == "greedy" and report.trials == 1
    assert "floor" in report.reason
    assert report.seconds < 0.1
    assert S.path_cost(inputs, {0, 30}, sizes, path)[0] == report.flops


def test_a_costlier_network_is_searched_within_its_budget_and_explain_says_so(fresh):
    inputs, sizes = _regular(40, 4, 6, seed=1)
    path, report = S.search(inputs, set(), sizes)
    greedy = S._greedy(inputs, frozenset(), sizes, None)
    assert report.method != "greedy" and report.trials > 1
    assert report.best_seconds <= report.greedy_seconds
    assert S._predict(inputs, frozenset(), sizes, path) == pytest.approx(report.best_seconds)
    assert report.best_seconds <= S._predict(inputs, frozenset(), sizes, greedy)
    # a budget of 5 % of the greedy path's time, and the overrun of one batch of trials
    assert report.seconds <= report.budget + 0.25
    eq = _equation(inputs)
    labels = sorted({i for t in inputs for i in t})
    shapes = [tuple(sizes[i] for i in sorted(t)) for t in inputs]
    text = str(einc.explain(eq, *[torch.empty(s) for s in shapes]))
    line = next(x for x in text.splitlines() if "Path search" in x)
    assert "trees in" in line and "stopped:" in line and "budget" in line
    assert len(labels) > 52


def test_the_path_is_right(fresh):
    # 20 operands in letters: einc's result against torch.einsum on float64
    eq = "ab,bc,cd,de,ef,fg,gh,hi,ij,jk,kl,lm,mn,no,op,pq,qr,rs,st,tu,ua->"
    shapes = [(7, 7)] * 21
    ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
    torch.testing.assert_close(einc.einsum(eq, *ops), torch.einsum(eq, *ops))


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_past_a_tenth_of_a_second_the_hyper_optimizer_runs_and_beats_greedy(monkeypatch):
    monkeypatch.setattr(S, "CAP", 0.6)
    inputs, sizes = _regular(60, 3, 5, seed=4)
    _, report = S.search(inputs, set(), sizes)
    assert report.budget >= S.HYPER_FLOOR
    assert "hyper-optimizer" in report.method
    assert report.best_seconds < report.greedy_seconds
    assert report.seconds < S.CAP + 3     # the last trial may run past it


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_the_same_seed_gives_the_same_path_in_any_process():
    # trial counts, not the clock, end these searches: the paths must agree
    code = ("from einc.planner import search as S; import tests.test_paths_search as T\n"
            "S.FRACTION, S.CAP, S.MAX_TRIALS = 1e9, 1e9, 5\n"
            "inputs, sizes = T._regular(50, 2, 4, seed=2)\n"
            "path, report = S.search(inputs, set(), sizes)\n"
            "assert 'trials' in report.reason, report.reason\n"
            "print(path)\n")
    outs = set()
    for hashseed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hashseed, PYTHONPATH=os.pathsep.join(
            [os.path.dirname(os.path.dirname(__file__)), os.environ.get("PYTHONPATH", "")]))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        outs.add(out.stdout)
    assert len(outs) == 1


def test_without_cotengra_the_budget_goes_to_random_greedy(monkeypatch):
    monkeypatch.setattr(S, "_cotengra", lambda: None)
    monkeypatch.setattr(S, "CAP", 0.3)
    inputs, sizes = _regular(60, 3, 5, seed=4)
    _, report = S.search(inputs, set(), sizes)
    assert report.method == "random greedy (cotengrust)"
    assert report.best_seconds <= report.greedy_seconds
    monkeypatch.setattr(S, "_cotengrust", lambda: None)
    _, report = S.search(inputs, set(), sizes)
    assert report.method == "random greedy (opt_einsum)" and report.trials > 2
    assert report.seconds < 0.3 + 0.5
    assert report.best_seconds <= report.greedy_seconds


def test_einc_imports_and_plans_where_cotengra_is_absent():
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('cotengra', 'cotengrust', 'kahypar'):\n"
            "            raise ImportError(name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import einc, torch\n"
            "eq = ','.join(a + b for a, b in zip('abcdefghijklmnopqrst', 'bcdefghijklmnopqrstu')) + '->au'\n"
            "ops = [torch.randn(9, 9, dtype=torch.float64) for _ in range(20)]\n"
            "torch.testing.assert_close(einc.einsum(eq, *ops), torch.einsum(eq, *ops))\n"
            "assert 'cotengra' not in sys.modules and 'cotengrust' not in sys.modules\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_a_long_search_shows_a_progress_bar_on_a_terminal(monkeypatch, capsys):
    class Tty:
        def __init__(self):
            self.text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

        def isatty(self):
            return True
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(S, "PROGRESS_SECONDS", 0.1)
    monkeypatch.setattr(S, "CAP", 0.3)
    inputs, sizes = _regular(60, 3, 5, seed=4)
    S.search(inputs, set(), sizes)
    assert "einc path search" in tty.text
