"""The layout search's shortcuts (runtime/torch_executor/ttgt.py) never drop the cheapest layout:
on random wide steps (8-11 indices, sizes 0, 1 and up, the result's first index an operand's
own and outermost, or a batch index outermost in both, so that the looped layouts are
weighed), ``choose`` takes what ``pick`` takes among every candidate; and an operand's
reading derived from the other swap's is the one costed."""

import random

import pytest

from einc.runtime.torch_executor import ttgt


@pytest.fixture(autouse=True)
def _every_layout(monkeypatch):
    monkeypatch.setattr(ttgt, "SMALL", 0)
    ttgt.cache_clear()


def _wide_step(rng):
    """``(ta, tb, out, sizes)``: 8-11 indices, some of size 0 or 1, A's own index leading
    A and the result, or a batch index leading all three."""
    while True:
        n = rng.randint(8, 11)
        roles = [rng.choice("bbmnkkmn" if rng.random() < 0.5 else "mnkmn") for _ in range(n)]
        if "k" not in roles or "m" not in roles:
            continue
        ta = [i for i, r in enumerate(roles) if r in "bmk"]
        tb = [i for i, r in enumerate(roles) if r in "bnk"]
        out = [i for i, r in enumerate(roles) if r in "bmn"]
        for t in (ta, tb, out):
            rng.shuffle(t)
        shared = "b" in roles and rng.random() < 0.3      # a batch index leading both and the result
        lead = next(i for i in ta if roles[i] == ("b" if shared else "m"))
        for t in (ta, tb, out) if shared else (ta, out):
            t.remove(lead)
            t.insert(0, lead)
        if "n" in roles and rng.random() < 0.5:       # B's own index next: looped layouts may pay
            second = next(i for i in out if roles[i] == "n")
            out.remove(second)
            out.insert(1, second)
        pool = rng.choice([[1, 2, 3, 4], [0, 1, 2, 4, 8], [1, 4, 16, 64], [2, 3, 5, 7, 32], [1, 8, 16, 32, 64],
                           [1, 1, 8, 16, 128, 512]])
        sizes = {i: rng.choice(pool) for i in range(n)}
        sizes[lead] = rng.choice([2, 3, 64])
        return ta, tb, out, sizes


STEPS = [_wide_step(random.Random(seed)) for seed in range(40)]
FLAGS = [(True, True, False), (True, False, False), (False, True, False), (True, False, True)]


def test_the_search_takes_the_cheapest_of_every_candidate_on_wide_steps(monkeypatch):
    def decide():
        ttgt.cache_clear()
        return [ttgt.choose(ta, tb, out, sizes, w, 4, *flags) for ta, tb, out, sizes in STEPS
                for flags in FLAGS for w in (0, 1 << 30)]
    fast = decide()
    real = ttgt.pick
    monkeypatch.setattr(ttgt, "pick", lambda found: real(found))
    slow = decide()
    assert fast == slow
    assert any(lay.outer for lay in fast) and any(not lay.outer for lay in fast)    # both kinds weighed


def test_an_operands_reading_derived_from_the_other_swaps_is_the_one_costed():
    derived = 0
    for ta, tb, out, sizes in STEPS:
        batch, m, n = map(tuple, ttgt.groups(ta, tb, out))
        k = tuple(i for i in ta if i in tb and i not in out)
        ones = frozenset(i for i in (*ta, *tb) if sizes[i] == 1)
        for term, groups in ((tuple(ta), (batch, m, k)), (tuple(tb), (batch, k, n))):
            one = ttgt._operand(term, groups, sizes, ones)
            other = ttgt._operand(term, (groups[0], groups[2], groups[1]), sizes, ones)
            assert one[4] == other[4]
            if one[4]:
                derived += 1
                assert (other[1], other[0], other[2]) == one[:3] and not one[3] and not other[3]
    assert derived > 10
