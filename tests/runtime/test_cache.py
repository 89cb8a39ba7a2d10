"""The plan cache: one plan per key, canonical keys, LRU bound, thread safety."""

import random
import threading
from collections import OrderedDict

import torch
from threads import errors_in_threads

import einc
from einc.runtime.cache import LRUCache


def test_hits_and_misses():
    einc.cache_clear()
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    einc.einsum("ij,jk->ik", a, b)
    einc.einsum("ij,jk->ik", a, b)
    einc.einsum("ab,bc->ac", a, b)              # same canonical equation: a hit
    info = einc.cache_info()
    assert (info.plans.misses, info.plans.hits, info.plans.currsize) == (1, 2, 1)
    einc.einsum("ij,jk->ik", a.double(), b.double())    # dtype is in the key
    einc.einsum("ij,jk->ik", torch.randn(3, 2), torch.randn(2, 5))  # so are shapes
    assert einc.cache_info().plans.misses == 3
    einc.cache_clear()
    assert einc.cache_info().plans.currsize == 0


def test_lru_bound_and_order():
    cache = LRUCache(maxsize=2)
    built = []
    for key in ["a", "b", "a", "c", "b"]:
        cache.get_or_build(key, lambda key=key: built.append(key) or key)
    assert built == ["a", "b", "c", "b"]            # "b" was evicted by "c" ("a" was fresher)
    assert cache.info().currsize == 2


class _OrderedModel:
    """The LRU as an order of keys (an OrderedDict moved on each use): what the cache's
    stamps must agree with, hit for hit and eviction for eviction."""

    def __init__(self, maxsize):
        self.maxsize, self.data, self.hits, self.misses = maxsize, OrderedDict(), 0, 0

    def get(self, key):
        if key in self.data:
            self.hits += 1
            self.data.move_to_end(key)
            return self.data[key]
        return None

    def put(self, key, entry):
        self.misses += 1
        self.data[key] = entry          # a kept key stays where it stands
        self.resize(self.maxsize)

    def resize(self, maxsize):
        self.maxsize = maxsize
        while len(self.data) > maxsize:
            self.data.popitem(last=False)


def test_lru_stamps_evict_as_an_order_of_uses_would():
    rng = random.Random(0)
    for maxsize in (1, 2, 3, 8):
        cache, model = LRUCache(maxsize), _OrderedModel(maxsize)
        for step in range(3000):
            key, op = rng.randrange(12), rng.random()
            if op < 0.4:
                assert cache.get(key) == model.get(key)
            elif op < 0.6:
                model.get(key) if key in model.data else model.put(key, (key, step))
                assert cache.get_or_build(key, lambda: (key, step)) == model.data[key]
            elif op < 0.85:
                cache.put(key, (key, step))
                model.put(key, (key, step))
            elif op < 0.95:
                assert cache.peek(key) == model.data.get(key)
            else:
                size = rng.randint(1, 8)
                cache.resize(size)
                model.resize(size)
            assert set(cache._data) == set(model.data), step
            assert cache.info() == (model.hits, model.misses, model.maxsize, len(model.data))
        order = list(model.data)        # least recently used first: shrinking drops them in turn
        for k in range(len(order) + 1):
            cache.resize(len(order) - k)
            assert set(cache._data) == set(order[k:])


def test_a_cache_within_its_bound_keeps_no_heap_item_per_key():
    cache = LRUCache(maxsize=8)
    for k in range(8):
        cache.put(k, k)
    assert cache.get_or_build(0, lambda: None) == 0 and cache.get(2) == 2
    assert cache._order == []       # (the bound not passed yet: no item made)
    cache.put(8, 8)                 # past it: the heap made from the slots, 1 the least recently used
    assert sorted(cache._data) == [0, 2, 3, 4, 5, 6, 7, 8]
    assert sorted(k for _, _, k in cache._order) == sorted(cache._data)
    cache.put(9, 9)                 # the heap kept from then on: 3 goes
    assert sorted(cache._data) == [0, 2, 4, 5, 6, 7, 8, 9]
    assert sorted(k for _, _, k in cache._order) == sorted(cache._data)
    cache.clear()
    cache.put(0, 0)
    assert cache._order == []


def test_threads_hitting_and_evicting_keep_the_bound_and_one_heap_item_per_key():
    cache = LRUCache(maxsize=4)
    barrier = threading.Barrier(4)

    def work(seed):
        rng = random.Random(seed)
        barrier.wait()
        for _ in range(3000):
            key = rng.randrange(10)
            if rng.random() < 0.5:
                assert cache.get_or_build(key, lambda: key) == key
            else:
                assert cache.get(key) in (None, key)

    assert not errors_in_threads(work, range(4))
    assert len(cache._data) <= 4 and sorted(k for _, _, k in cache._order) == sorted(cache._data)


def test_plan_cache_evicts_the_least_recently_hit_and_counts_hits(monkeypatch):
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")     # every key put as it comes (a class's: test_probation_...)
    einc.cache_clear()
    old = einc.cache_info().plans.maxsize
    ops = {n: torch.randn(n, 2) for n in range(1, 6)}

    def calls(*sizes):
        for n in sizes:
            einc.einsum("ij->j", ops[n])
        return einc.cache_info().plans[:2]      # (hits, misses)

    try:
        einc.set_cache_size(3)
        assert calls(1, 2, 3, 1) == (1, 3)      # least recently used first: 2, 3, 1
        assert calls(4) == (1, 4)               # 2 goes: 3, 1, 4
        assert calls(1) == (2, 4)               # 3, 4, 1
        assert calls(3) == (3, 4)               # 4, 1, 3
        assert calls(5) == (3, 5)               # 4 goes: 1, 3, 5
        assert calls(1, 3, 5) == (6, 5)
        assert calls(2) == (6, 6) and calls(4) == (6, 7)
        assert einc.cache_info().plans.currsize == 3
    finally:
        einc.set_cache_size(old)


def test_set_cache_size_bounds_the_plan_cache(monkeypatch):
    for mode in ("plan", "class"):
        monkeypatch.setenv("EINC_NEW_SHAPES", mode)
        einc.cache_clear()
        old = einc.cache_info().plans.maxsize
        try:
            einc.set_cache_size(3)
            sizes = []
            for n in range(1, 8):
                einc.einsum("ij->j", torch.randn(n, 2))
                sizes.append(einc.cache_info().plans.currsize)
            assert max(sizes) == 3 and sizes[-1] == (3 if mode == "plan" else 1), (mode, sizes)
        finally:
            einc.set_cache_size(old)


def test_probation_keeps_a_class_key_from_its_second_call_and_shields_the_keys_used_twice():
    """A key a size class serves is kept on probation at its first call (a miss) and in the
    cache from its second (a hit); keys on probation go all at once where probation is
    full, and a stream of keys each seen once never pushes out a key that came twice."""
    einc.cache_clear()
    old = einc.cache_info().plans.maxsize
    ops = {n: torch.randn(n, 2) for n in range(1, 40)}
    sizes = []

    def calls(*keys):
        for n in keys:
            einc.einsum("ij->j", ops[n])
            sizes.append(einc.cache_info().plans.currsize)
        return einc.cache_info().plans[:2]      # (hits, misses)

    try:
        einc.set_cache_size(8)
        assert calls(1, 1, 1) == (2, 1)         # on probation, then kept: a hit each time after the first
        assert calls(*range(2, 20)) == (2, 19)  # each once: on probation, emptied as it fills
        assert calls(1) == (3, 19)              # the key that came twice stayed
        assert max(sizes) == 8
        einc.cache_clear()
        assert calls(*range(20, 27)) == (0, 7) and calls(*range(20, 27)) == (7, 7)     # a cycle within the bound
        assert calls(*range(20, 27)) == (14, 7) and max(sizes) == 8
    finally:
        einc.set_cache_size(old)


def test_probation_holds_a_quarter_of_the_bound_in_a_full_cache():
    """In a cache full of kept keys, probation still holds a quarter of the bound (the
    least recently used kept keys make room), and is emptied at once past it; after a
    resize, a quarter of the new bound."""
    cache = LRUCache(maxsize=8)
    for k in range(8):
        cache.put(k, k)
    cache.admit("a", "A")
    cache.admit("b", "B")
    assert (cache.peek("a"), cache.peek("b"), cache.peek(0), cache.peek(1), cache.peek(2)) == ("A", "B", None, None, 2)
    cache.admit("c", "C")           # past the quarter: probation emptied, no kept key goes
    assert (cache.peek("a"), cache.peek("c"), cache.peek(2), cache.info().currsize) == (None, "C", 2, 7)
    cache.resize(16)
    for k in range(100, 110):
        cache.put(k, k)             # full again
    for key in "defg":
        cache.admit(key, key.upper())
    assert [cache.peek(key) for key in "defg"] == ["D", "E", "F", "G"] and cache.info().currsize == 16


def test_a_class_key_answers_alike_on_probation_and_kept():
    einc.cache_clear()
    a, b = torch.randn(1, 2, 9, 16), torch.randn(1, 2, 11, 16)
    first = einc.einsum("bhid,bhjd->bhij", a, b)
    assert einc.cache_info().plans[:2] == (0, 1)
    second = einc.einsum("bhid,bhjd->bhij", a, b)
    third = einc.einsum("bhid,bhjd->bhij", a, b)
    assert einc.cache_info().plans[:2] == (2, 1)
    assert torch.equal(first, second) and torch.equal(second, third)
    torch.testing.assert_close(first, torch.einsum("bhid,bhjd->bhij", a.double(), b.double()).float())


def test_eight_threads_one_new_key_plan_once(new_shapes):
    """Eight threads calling with one new key at once: it is planned exactly once, per shape
    or its size class's plan.  (A class's key may be put on probation by two threads that
    both missed it: a miss of the plan cache each, the class's plan built once.)"""
    ops = [torch.randn(6, 7), torch.randn(7, 8), torch.randn(8, 9), torch.randn(9, 5)]
    barrier = threading.Barrier(8)
    results = [None] * 8

    def work(t):
        barrier.wait()
        results[t] = einc.einsum("ij,jk,kl,lm->im", *ops)

    assert not errors_in_threads(work, range(8))
    info = einc.cache_info()
    assert (info.plans if new_shapes == "plan" else info.classes).misses == 1
    # one plan, so one answer, bit for bit, also in a later call; the oracle in float64 (the
    # plan's order is not the left-to-right product's, whose float32 rounding differs)
    again = einc.einsum("ij,jk,kl,lm->im", *ops)
    assert all(torch.equal(r, again) for r in results)
    expected = torch.einsum("ij,jk,kl,lm->im", *(o.double() for o in ops))
    torch.testing.assert_close(again, expected.float(), rtol=1e-5, atol=1e-4)


def test_build_runs_once_under_contention():
    cache = LRUCache(maxsize=8)
    calls = []
    barrier = threading.Barrier(8)

    def slow_build():
        calls.append(1)
        threading.Event().wait(0.05)
        return "plan"

    def work(_):
        barrier.wait()
        assert cache.get_or_build("k", slow_build) == "plan"

    assert errors_in_threads(work, range(8)) == []
    assert len(calls) == 1


def test_cache_clear_empties_every_cache():
    """Plans, parsed equations, gradient recipes, the op's dtypes, torch's dtype probes,
    options: each holds something after work, and nothing after cache_clear()."""
    a = torch.randn(3, 4, dtype=torch.float64)
    v = torch.randn(3, dtype=torch.float64)
    torch.func.vmap(lambda x: einc.einsum("ij,jk,k->", x, x.T, v))(a[None])     # plans, the batched equation's recipe
    einc.einsum("ij,jk->ik", torch.ones(2, 2, dtype=torch.int32), torch.ones(2, 2, dtype=torch.int32))
    einc.einsum("ij->j", torch.ones(2, 2), optimize="greedy")
    torch.compile(lambda x: einc.einsum("ij->i", x), backend="eager", fullgraph=True)(torch.ones(2, 2))
    info = einc.cache_info()
    filled = {name: getattr(info, name).currsize for name in info._fields}
    assert all(filled[name] > 0 for name in ("plans", "equations", "gradients", "traced", "dtypes", "options")), filled
    einc.cache_clear()
    info = einc.cache_info()
    assert {name: getattr(info, name).currsize for name in info._fields} == dict.fromkeys(info._fields, 0)


def test_explain_leaves_the_plan_pure():
    info = einc.explain("ij,jk->ik", (2, 3), (3, 4))
    assert info.backends == ("torch",) and "torch executor" in str(info)
    assert isinstance(info.plan, einc.Plan) and not hasattr(info.plan, "backends")
    assert "backend" not in str(info.plan)          # the plan's own table has no backend column
    assert info.flops == info.plan.flops            # the plan's attributes read through


def test_contract_expression_runs_the_generated_kernels(kernel_device):
    expr = einc.contract_expression("ij,jk->ik", (5, 6), (6, 7))
    a, b = torch.randn(5, 6, device=kernel_device), torch.randn(6, 7, device=kernel_device)
    torch.testing.assert_close(expr(a, b), a @ b)
    (backend,) = einc.explain("ij,jk->ik", a, b, optimize=expr.plan.path).backends
    assert backend.startswith("triton einc_mm_")


_PLANNING = threading.Event()


def _slow_path(inputs, output, sizes, memory_limit=None):     # a PathOptimizer that takes its time
    import time
    _PLANNING.set()
    time.sleep(1.5)
    return [(0, 1), (0, 1)]


def _call_and_report(queue):
    x = torch.ones(2, 2)
    queue.put(einc.einsum("ab,bc,cd->ad", x, x, x, optimize=_slow_path).sum().item())


def test_a_child_forked_while_a_thread_plans_gets_fresh_locks():
    """A process forked while another of its threads builds a plan gets fresh locks: the
    child's copy of that key's lock, held for ever (no thread of the child would release it),
    would make the child's first call with that key wait for ever."""
    import multiprocessing
    einc.cache_clear()
    einc.einsum("i->", torch.ones(2))
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    _PLANNING.clear()
    planner = threading.Thread(target=_call_and_report, args=(queue,))
    planner.start()
    assert _PLANNING.wait(30)                       # the thread is inside the slow plan, holding its key's lock
    child = ctx.Process(target=_call_and_report, args=(queue,))
    child.start()
    child.join(30)
    hung = child.is_alive()
    if hung:
        child.kill()
    planner.join()
    assert not hung and child.exitcode == 0
    assert [queue.get(timeout=5), queue.get(timeout=5)] == [16.0, 16.0]      # ones(2, 2) cubed: 4 everywhere


def test_a_call_torch_refuses_keeps_no_frame_alive():
    """torch's refusals are cached (the dtype probe) without their tracebacks: those held
    every frame of the call that asked, the caller's operands and locals, until cache_clear."""
    import gc
    import weakref
    einc.cache_clear()

    def step(a, b):
        activations = torch.zeros(100, 100)
        out = einc.einsum("ijk,jl->il", a, b)      # torch.einsum raises on its int64 promotion; einc answers
        return out, weakref.ref(activations)
    a, b = torch.ones(2, 3, 2, dtype=torch.int32), torch.ones(3, 2, dtype=torch.int32)
    out, local = step(a, b)
    operand = weakref.ref(a)
    del a, b
    gc.collect()
    assert out.dtype == torch.int64 and local() is None and operand() is None

    def refused(x, y):
        activations = torch.zeros(100, 100)
        try:
            einc.einsum("ij,jk->ik", x, y)
        except RuntimeError:
            pass
        return weakref.ref(activations)
    local = refused(torch.ones(2, 2), torch.ones(2, 2, dtype=torch.float64))
    gc.collect()
    assert local() is None


def test_a_key_on_probation_answers_under_any_setting_as_a_kept_one(monkeypatch):
    """A setting changed after a key's first call finds its entry on probation as it would
    find it kept: a hit, the class's entry, not torch's op or a plan of the shape."""
    for mode in ("plan", "torch"):
        einc.cache_clear()
        a, b = torch.randn(1, 2, 9, 16), torch.randn(1, 2, 11, 16)
        first = einc.einsum("bhid,bhjd->bhij", a, b)
        monkeypatch.setenv("EINC_NEW_SHAPES", mode)
        second = einc.einsum("bhid,bhjd->bhij", a, b)
        monkeypatch.delenv("EINC_NEW_SHAPES")
        assert einc.cache_info().plans[:2] == (1, 1) and torch.equal(first, second), mode
