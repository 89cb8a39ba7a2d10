"""What the copy-cost model keeps between steps (runtime/torch_executor/ttgt.py): the layout of a
step renamed by position, each operand reading's orders and each copy's plan are kept
across steps.  A step or a copy decided with the caches full must decide as one decided
with them empty, over steps alike but for their sizes, their indices of size 1 and 0,
their item size or their flags, which share the keys' other fields: a key that lacked a
field the result depends on would hand one of them another's answer."""

import dataclasses
import random

import pytest

from einc.runtime.torch_executor import index_orders, training_layout, ttgt


@pytest.fixture(autouse=True)
def _every_layout(monkeypatch):
    """Every layout weighed, as large steps are (ttgt.SMALL)."""
    monkeypatch.setattr(ttgt, "SMALL", 0)
    ttgt.cache_clear()


def _sized(names, rng):
    return {i: rng.choice([0, 1, 1, 2, 3, 8, 64, 1000]) for i in names}


def _alike_copies(rng):
    """Copies whose orders repeat with other sizes, and orders that share a source."""
    cases = []
    for _ in range(60):
        src = rng.sample("abcdef", rng.randint(1, 6))
        for dst in (rng.sample(src, len(src)) for _ in range(3)):
            cases += [(src, dst, _sized(src, rng), rng.choice([1, 1, 4])) for _ in range(3)]
    return cases


def test_a_copy_costs_the_same_with_its_plan_kept():
    cases = _alike_copies(random.Random(0))
    kept = [ttgt.copy_ns(src, dst, sizes, expanded) for src, dst, sizes, expanded in cases]
    assert ttgt._copy_plan.cache_info().hits > len(cases) // 3
    fresh = []
    for src, dst, sizes, expanded in cases:
        ttgt.cache_clear()
        fresh.append(ttgt.copy_ns(src, dst, sizes, expanded))
    assert kept == fresh
    assert len(set(kept)) > len(cases) // 8         # the sizes matter: not one answer for all


def test_a_copy_over_an_index_of_size_0_costs_nothing_whatever_the_orders():
    """A copy's runs and strides are read only where it has elements: none is 0 then, and
    no size 0 needs counting as 1 in them."""
    rng = random.Random(5)
    for _ in range(300):
        src = rng.sample("abcdef", rng.randint(1, 6))
        dst = rng.sample(src, len(src))
        sizes = _sized(src, rng)
        found = ttgt.copy_ns(src, dst, sizes, rng.choice([1, 4]))
        moved = [i for i in src if sizes[i] != 1] != [i for i in dst if sizes[i] != 1]
        assert (found > 0) if moved and 0 not in sizes.values() else found == 0


# renamed by position, each of a pair the same but for one term (its first: an index of the
# result more; its second, its result: another order), and the same but for the names
EQUATIONS = [("ab", "bc", "ac"), ("abc", "bc", "ac"), ("abc", "cb", "ac"), ("abc", "bc", "ca"), ("xy", "yz", "xz"),
             ("abd", "bdc", "ac"), ("xzy", "zyw", "xw"), ("abc", "cd", "abd"), ("bhij", "bhjk", "bhik"),
             ("bhij", "bhjk", "bhki"), ("ijk", "jkl", "lik"), ("kji", "lkj", "ilk")]


def _alike_steps(rng):
    """Steps that, renamed by position, are one equation: with the same sizes by position,
    item size, flags and ``SMALL`` (each a hit), and with one of those changed (each a miss
    that shares every other field of the key); sizes with size-1 and size-0 indices."""
    steps = []
    for _ in range(10):
        by_place = [rng.choice([0, 1, 1, 2, 3, 8, 64, 1000]) for _ in range(5)]
        by_place = [s if s or rng.random() < 0.2 else 1 for s in by_place]
        step = dict(worth=rng.choice([0, 1 << 12]), itemsize=rng.choice([2, 4, 8]), small=rng.choice([0, 1 << 12]),
                    broadcast=rng.random() < 0.7, loops=rng.random() < 0.5, free_out=rng.random() < 0.3)
        for ta, tb, out in EQUATIONS:
            sizes = dict(zip(dict.fromkeys(ta + tb + out), by_place))
            steps.append((list(ta), list(tb), list(out), sizes, step))
            changed = rng.choice(["sizes", *step])
            if changed == "sizes":
                twin = step
                sizes = {**sizes, rng.choice(list(sizes)): rng.choice([0, 1, 5, 4096])}
            else:
                twin = {**step, changed: {"worth": (1 << 12) - step["worth"], "small": (1 << 12) - step["small"],
                                          "itemsize": {2: 8, 4: 2, 8: 4}[step["itemsize"]]}.get(
                                              changed, not step[changed])}
            steps.append((list(ta), list(tb), list(out), sizes, twin))
    return steps


def _choices(steps, fresh):
    found = []
    small = ttgt.SMALL
    try:
        for ta, tb, out, sizes, step in steps:
            if fresh:
                ttgt.cache_clear()
            ttgt.SMALL = step["small"]
            found.append(ttgt.choose(ta, tb, out, sizes, step["worth"], step["itemsize"], step["broadcast"],
                                     step["loops"], step["free_out"]))
    finally:
        ttgt.SMALL = small
    return found


def test_a_step_decides_the_same_with_the_choices_kept():
    steps = _alike_steps(random.Random(1))
    kept = _choices(steps, fresh=False)
    assert ttgt._cheapest.cache_info().hits > 0 and ttgt._reading.cache_info().hits > len(steps)
    fresh = _choices(steps, fresh=True)
    assert kept == fresh
    assert len({(lay.swap, lay.copies, lay.flip, lay.outer) for lay in kept}) > 4     # the steps differ


def test_the_search_keeps_what_pick_takes_among_every_candidate(monkeypatch):
    """The search with its caches full against :data:`pick` over the whole list."""
    steps = _alike_steps(random.Random(2))
    fast = _choices(steps, fresh=False)
    real = ttgt.pick
    monkeypatch.setattr(ttgt, "pick", lambda found: real(found))
    assert _choices(steps, fresh=False) == fast


def test_a_step_named_by_place_decides_as_one_named_otherwise(monkeypatch):
    """A step whose indices are already 0, 1, ... in order of appearance (a size class's
    step) takes its layout as the search keeps it: renamed, that is the layout of the same
    step named otherwise, and pick's among every candidate."""
    steps = _alike_steps(random.Random(3))
    placed = []
    for ta, tb, out, sizes, step in steps:
        place = {i: k for k, i in enumerate(dict.fromkeys(ta + tb + out))}
        placed.append(([place[i] for i in ta], [place[i] for i in tb], [place[i] for i in out],
                       {place[i]: s for i, s in sizes.items()}, step))
    named = _choices(steps, fresh=False)
    by_place = _choices(placed, fresh=False)
    for lay, (ta, tb, out, _, _), mine in zip(named, steps, by_place):
        name = list(dict.fromkeys(ta + tb + out)).__getitem__
        assert dataclasses.replace(mine, **{f: tuple(map(name, getattr(mine, f)))
                                            for f in ("batch", "m", "n", "k", "broadcast", "outer")}) == lay
    real = ttgt.pick
    monkeypatch.setattr(ttgt, "pick", lambda found: real(found))
    assert _choices(placed, fresh=False) == by_place


class _Unread(tuple):
    """A term that fails when read: a group with one order whatever the terms reads none."""

    def __iter__(self):
        raise AssertionError("read a term the group's one order does not depend on")

    def __contains__(self, item):
        raise AssertionError("read a term the group's one order does not depend on")


def test_a_group_of_at_most_one_index_has_its_one_order_without_reading_the_other_terms():
    """An empty group, or one index the first term holds, has one order: listed without a
    pass over the terms (most groups of a step's layouts are so)."""
    assert index_orders._orders((), [_Unread("ab"), _Unread("ba")]) == [()]
    assert index_orders._orders(("b",), ["ab", _Unread("ba")]) == [("b",)]
    assert index_orders._orders(("b",), ["ac", "ba"]) == [(), ("b",)]      # not in the first term: read
    rng = random.Random(3)
    for _ in range(2000):
        group = tuple(rng.sample("abcdef", rng.randint(0, 3)))
        terms = [rng.sample("abcdef", rng.randint(0, 6)) for _ in range(rng.randint(1, 3))]
        found = []
        for t in terms:         # the definition, term by term
            o = tuple([i for i in t if i in group] + [i for i in terms[0] if i in group and i not in t])
            if o not in found:
                found.append(o)
        assert index_orders._orders(group, terms) == found, (group, terms)


def _searches(monkeypatch):
    """A list that counts the layout searches (ttgt._flat) made from now on."""
    made, real = [], ttgt._flat
    monkeypatch.setattr(ttgt, "_flat", lambda *a, **k: made.append(a[:3]) or real(*a, **k))
    return made


def test_the_training_choice_that_broadcasts_neither_operand_is_kept_from_the_forwards_search(monkeypatch):
    """``BTD,NDH->BTNH``: the forward broadcasts BTD over N, so ``for_training`` weighs the
    layouts that broadcast neither operand: the first of the forward's moves, whose cheapest
    its search kept; no search is made again, and the layout is the one a search makes."""
    ta, tb, out, sizes = list("BTD"), list("NDH"), list("BTNH"), dict(B=1, T=128, D=512, N=8, H=64)
    lay = ttgt.choose(ta, tb, out, sizes, 1 << 12)
    assert lay.broadcast == ("N",)
    made = _searches(monkeypatch)
    training = training_layout.for_training(lay, ta, tb, out, sizes, 1 << 12)
    assert made == []
    plain = ttgt.choose(ta, tb, out, sizes, 1 << 12, broadcast=False, loops=False, reads=False)
    ttgt.cache_clear()
    assert ttgt.choose(ta, tb, out, sizes, 1 << 12, broadcast=False, loops=False, reads=False) == plain
    assert made and not plain.broadcast and training in (lay, plain)


def test_the_choices_without_broadcasting_kept_from_searches_with_it_are_a_searchs_own():
    """Over steps alike but for their sizes and flags: each step's choice without
    broadcasting or loops, ``reads`` false, asked after its search with broadcasting
    (kept from it) and asked first (searched)."""
    steps = [step for seed in (4, 5, 6) for step in _alike_steps(random.Random(seed))]
    kept, searched, broadcasting = [], [], 0
    for ta, tb, out, sizes, step in steps:
        args = ta, tb, out, sizes, step["worth"], step["itemsize"]
        for flags in ((True, step["loops"]), (True, False)):
            broadcasting += bool(ttgt.choose(*args, *flags, step["free_out"], reads=False).broadcast)
        kept.append(ttgt.choose(*args, False, False, step["free_out"], reads=False))
    for ta, tb, out, sizes, step in steps:
        ttgt.cache_clear()
        searched.append(ttgt.choose(ta, tb, out, sizes, step["worth"], step["itemsize"], False, False,
                                    step["free_out"], reads=False))
    assert kept == searched and broadcasting > 20


def test_a_choice_makes_one_layout_renamed_or_not_free_out_or_looped(monkeypatch):
    """The search keeps a layout's fields: ``choose`` makes the one ``Layout`` it returns."""
    made = []

    class Counted(ttgt.Layout):
        def __init__(self, *fields):
            made.append(fields)
            super().__init__(*fields)
    monkeypatch.setattr(ttgt, "Layout", Counted)
    sizes = dict(a=64, b=256, c=96, d=48, e=1, h=12, i=64, j=32, k=64)
    looped = 0
    for ta, tb, out in (("ab", "bc", "ac"), ("bad", "dc", "cab"), ("abe", "bc", "ace"), ("bij", "hjk", "bhik")):
        for flags in ((True, True, False), (True, False, True), (False, False, False)):
            for named in (False, True):
                ttgt.cache_clear()
                renamed = {i: k for k, i in enumerate(dict.fromkeys(ta + tb + out))}
                step = (list(ta), list(tb), list(out), sizes) if named else (
                    [renamed[i] for i in ta], [renamed[i] for i in tb], [renamed[i] for i in out],
                    {renamed[i]: s for i, s in sizes.items() if i in renamed})
                made.clear()
                lay = ttgt.choose(*step, 1 << 20, 4, *flags)
                assert len(made) == 1 and isinstance(lay, Counted)
                looped += bool(lay.outer)
    assert looped
