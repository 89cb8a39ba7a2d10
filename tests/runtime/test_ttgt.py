"""The torch executor's layouts for a contraction step (runtime/torch_executor/ttgt.py): the copy-cost
model's choice on hand-checked cases, and every layout it may choose exact, through
views of strided and expanded operands, at sizes 0 and 1, with gradients, and within
the live-memory bound slicing counts."""

import math

import pytest
import torch

import einc
from einc.planner.equation import parse
from einc.planner.graph import build
from einc.planner.plan import build_plan
from einc.planner.slicing import live_peak
from einc.runtime import torch_executor as tx
from einc.runtime.torch_executor import training_layout, ttgt
from tests.doors.test_slicing import _Allocations, _Live


@pytest.fixture(autouse=True)
def _every_layout(monkeypatch):
    """The small test shapes weigh every layout, as large steps do (ttgt.SMALL)."""
    monkeypatch.setattr(ttgt, "SMALL", 0)


def _choose(eq, sizes):
    ins, out = eq.split("->")
    ta, tb = ins.split(",")
    return ttgt.choose(list(ta), list(tb), list(out), sizes, tx._COPY_WORTH_SPARING)


def _names(lay):
    return "".join(lay.batch), "".join(lay.m), "".join(lay.n), "".join(lay.k)


# ----------------------------------------------------------------------- the model's choice

def test_a_plain_matrix_product_copies_nothing():
    lay = _choose("ij,jk->ik", dict(i=64, j=64, k=64))
    assert (lay.swap, lay.copies, _names(lay)) == (False, "", ("", "i", "k", "j"))
    lay = _choose("ij,jk->ki", dict(i=64, j=64, k=64))            # C^T = B^T A^T, written as it is
    assert (lay.swap, lay.copies, _names(lay)) == (True, "", ("", "k", "i", "j"))
    lay = _choose("bhqd,bhkd->bhqk", dict(b=2, h=4, q=64, k=64, d=32))
    assert lay.copies == "" and _names(lay) == ("bh", "q", "k", "d")


def test_a_batch_of_the_large_operands_own_index_reads_it_along_its_rows():
    """``abk,kj->bja`` and ``xyk,kz->yzx`` (the issue's examples): a stack over b of (a, k)
    x (k, j), kj broadcast over b and abk read through a view along its rows, the small
    result copied; not (j, k) x (k, a), which writes the result in place but reads abk as
    a right operand along K (``K_UNIT``: MKL's product 1.6-2.3x slower at j = 24,
    bench/measured/permute-copy-2026-12-02.md); torch.einsum copies abk."""
    for eq, sizes in (("abk,kj->bja", dict(a=112, b=128, k=144, j=24)),
                      ("xyk,kz->yzx", dict(x=96, y=160, k=120, z=32))):
        lay = _choose(eq, sizes)
        assert (lay.swap, lay.copies, _names(lay)) == (False, "c", tuple(eq[i] for i in (1, 0, 5, 2))), eq
        assert lay.broadcast == (eq[1],)


def test_a_right_operand_read_along_k_costs_more_where_the_rows_are_few():
    """The same product, its right operand read along its columns or along K (a view of
    ``kj`` or ``jk``): dearer by ``K_UNIT / M`` (at most ``K_UNIT_MOST``) from sides of 8
    and products of ``K_UNIT_FROM`` multiply-adds."""
    def product(tb, m, j, k):
        sizes = dict(i=m, j=j, k=k)
        return ttgt.cost(list("ij"), list(tb), list("ik"), sizes, False, (), ("i",), ("k",), ("j",))[0]
    for m, j, k, extra in ((8, 1024, 1024, ttgt.K_UNIT_MOST), (64, 256, 512, ttgt.K_UNIT / 64), (4, 1024, 1024, 0.0),
                           (64, 32, 32, 0.0)):
        plain, along_k = product("jk", m, j, k), product("kj", m, j, k)
        side = ttgt._product_ns(1, m, k, j, 1.0) - ttgt.PER_MATRIX
        assert along_k == pytest.approx(plain + side * extra, rel=1e-9), m


def test_a_left_operand_read_along_its_rows_costs_more_as_its_matrix_leaves_the_cache():
    """e3nn's ``ecab,eacd->edb`` (e = 256, c = 1, a = b = 5, d = 16): the stack over e of
    (d, a) x (a, b), eacd read through a view along its rows, writes the result in place.
    MKL's product so read measures as read along its columns where the matrix stays in
    cache (few columns of K, or close ones: a short M), whatever N, and up to ~1.6-3x with
    hundreds of columns of kilobytes (bench/measured/product-model-2026-12-03.md);
    ``ROWS_UNIT`` at 18 / N priced e3nn's 16 x 5 matrices 4.6x and copied the (b, d)
    product into the result, as torch.einsum's layout does."""
    lay = _choose("ecab,eacd->edb", dict(e=256, c=1, a=5, b=5, d=16))
    assert (lay.swap, lay.copies, lay.batch, lay.m, lay.n) == (True, "", ("e",), ("d",), ("b",))

    def ratio(rows, cols, depth, scale=1.0):
        return ttgt._product_ns(1, rows, cols, depth, scale, True) / ttgt._product_ns(1, rows, cols, depth, scale)
    for cols in (3, 5, 16, 64):
        assert ratio(16, cols, 5) < 1.001 and ratio(4096, cols, 8) < 1.02 and ratio(16, cols, 2048) < 1.06
        for rows, depth, scale in ((256, 512, 1.0), (4096, 2048, 1.0), (128, 512, 2.0)):   # 1 KiB apart, 512 deep
            assert ratio(rows, cols, depth, scale) == pytest.approx(1 + ttgt.ROWS_UNIT, rel=1e-3)
    assert ratio(4096, 80, 2048) == 1.0


def test_the_large_operand_is_read_in_place_and_the_small_result_copied():
    lay = _choose("bda,dc->abc", dict(a=96, b=160, c=32, d=120))
    assert "l" not in lay.copies and "r" not in lay.copies and lay.copies == "c"


@pytest.mark.parametrize("sizes,copied", [
    (dict(a=64, i=64, b=16, j=16, c=64), "jbc"),       # B is the smaller: B is copied into (b, j) order
    (dict(a=8, i=8, b=16, j=16, c=4096), "aibj"),      # A is the smaller: A is copied into (j, b) order
])
def test_the_smaller_operand_is_the_one_copied(sizes, copied):
    """``aibj,jbc->aic``: the summed indices run (b, j) in A, (j, b) in B, so one operand
    is copied: the smaller."""
    lay = _choose("aibj,jbc->aic", sizes)
    left, right = ("jbc", "aibj") if lay.swap else ("aibj", "jbc")
    assert lay.copies == ("l" if left == copied else "r")


def test_a_copy_keeps_the_operands_unit_stride_index_innermost():
    """``degb,gfac->abcdef`` (CCSD(T)): where A's rows run (d, e, b), A is copied as its
    matrices' transposes (g, deb), so that b, its unit-stride index, stays innermost in
    the copy; B's order follows the result's (f innermost there)."""
    sizes = dict(a=16, b=16, c=16, d=8, e=8, f=8, g=16)
    plain, flipped, _, _ = ttgt.operand(list("degb"), [[], list("deb"), ["g"]], sizes)
    assert flipped < plain                                  # copied as it is, b would move: priced higher
    found = ttgt.candidates(list("degb"), list("gfac"), list("abcdef"), sizes, tx._COPY_WORTH_SPARING)
    deb = [f for f in found if f.m == ("d", "e", "b") and f.n == ("a", "c", "f") and not f.swap]
    assert deb and all("l" in f.flip for f in deb)


def test_the_results_runs_follow_each_other_near_in_the_source():
    """``degb,gfac->abcdef``: the 2 Mi-element result is copied from runs of 8 floats
    either way; with M ordered (b, d, e), as in the result, consecutive runs (over e) lie
    8 KiB apart in the product, against 128 KiB from (d, e, b): a copy measured ~1.3x
    faster (bench/permute_copy.py's README figures), worth more than keeping b innermost
    in the copy of A (16 Ki elements).  (``a`` may lead as a batch index, A copied once
    and broadcast over it: the result's copy then keeps ``a`` outermost.)"""
    sizes = dict(a=16, b=16, c=16, d=8, e=8, f=8, g=16)
    lay = _choose("degb,gfac->abcdef", sizes)
    assert not lay.swap and lay.m == ("b", "d", "e") and lay.batch + lay.n == ("a", "c", "f")
    assert "c" in lay.copies
    assert ttgt.copy_ns(list("bdeacf"), list("abcdef"), sizes) < ttgt.copy_ns(list("debacf"), list("abcdef"), sizes)


def test_long_runs_pay_little_for_lying_far_apart():
    """``BTKGH,BSKH->BTKGS`` (grouped-query attention logits, 2 Gi elements): the product
    over (B, K | T, G | S) keeps S innermost, so the result is copied in runs of 8192
    elements; those lie 64 Mi elements apart in the product, which costs a run that long
    little.  A model weighing the distance over the whole copy would pick (B, K | S | T, G),
    whose copy moves S and takes about three times as long on the bench."""
    sizes = dict(B=4, T=4096, K=8, G=2, H=256, S=4096)
    lay = _choose("BTKGH,BSKH->BTKGS", sizes)
    assert not lay.swap and lay.n == ("S",) and set(lay.m) == {"T", "G"}


@pytest.mark.parametrize("s, ratio", [(8, (1.4, 3.0)), (4096, (1.0, 1.1))])
def test_the_distance_between_runs_weighs_by_their_length(s, ratio, monkeypatch):
    """The copy (B, K, T, G, S) -> (B, T, K, G, S), runs of G * S elements following each
    other T * G * S apart: per element, T = 4096 against T = 8 costs 1.4-3x with runs of
    16, at most 1.1x with runs of 8192 (the larger copy's fresh pages aside)."""
    monkeypatch.setattr(ttgt, "FRESH", 0.0)
    def per_element(t):
        sizes = dict(B=4, K=8, T=t, G=2, S=s)
        return ttgt.copy_ns(list("BKTGS"), list("BTKGS"), sizes) / math.prod(sizes.values())
    low, high = ratio
    assert low <= per_element(4096) / per_element(8) <= high


def test_a_transpose_of_far_apart_innermost_indices_costs_about_half_again_a_near_one():
    """Both innermost indices thousands of elements apart in the other layout: the copy is
    cut into cache-sized tiles (runtime/torch_executor/permute_copy.py), which cost about
    1.5x a transpose whose loops stay in cache, where torch's own copy cost 2-5x."""
    sizes = dict(a=64, b=64, c=64, d=32)
    near = ttgt.copy_ns(list("abcd"), list("badc"), sizes)     # c 32 apart in the source
    far = ttgt.copy_ns(list("abcd"), list("dbca"), sizes)      # a 262144 apart, d 262144 apart in the result
    assert 1.2 <= far / near <= 2, far / near


def test_the_results_outermost_index_leads_where_the_operands_copy_is_small():
    """``dega,gfbc->abcdef``: the 2 Mi-element result is copied either way; with M ordered
    (a, d, e) as in the result, that copy is a batch over a of blocks that stay in cache,
    worth more than keeping a innermost in the copy of A (16 Ki elements)."""
    lay = _choose("dega,gfbc->abcdef", dict(a=16, b=16, c=16, d=8, e=8, f=8, g=16))
    assert lay.m == ("a", "d", "e") and lay.n[-1] == "f" and "l" not in lay.flip


def test_the_final_copy_keeps_the_innermost_index_where_it_can():
    """``bda,dc->abc``: the result is copied either way; computing C^T (c innermost) or C
    (a innermost in out): the copy into ``abc`` keeps c innermost only from (b, a, c)."""
    sizes = dict(a=96, b=160, c=32, d=120)
    found = ttgt.candidates(list("bda"), list("dc"), list("abc"), sizes, tx._COPY_WORTH_SPARING)
    same = {(f.batch, f.m, f.n): f.cost for f in found if f.k == ("d",)}
    keep = same[(("b",), ("a",), ("c",))]
    assert ttgt.copy_ns(list("bac"), list("abc"), sizes) < ttgt.copy_ns(list("bca"), list("abc"), sizes)
    assert keep == min(c for key, c in same.items() if key[0] == ("b",) and key[1] == ("a",))


def _training(eq, sizes):
    ins, out = eq.split("->")
    ta, tb = ins.split(",")
    lay = _choose(eq, sizes)
    return lay, training_layout.for_training(lay, list(ta), list(tb), list(out), sizes, tx._COPY_WORTH_SPARING)


def test_a_transpose_whose_innermost_indices_lie_a_thousand_apart_conflicts():
    """The suite's ``akbc,jk->cjba`` (cpu shapes) as the step ``abcd,eb->deca``: its result
    copied from ``(a, c, d, e)`` has innermost indices 1,920 and 46,080 elements apart in
    the other order, and copies, in tiles, slower than the one from ``(a, e, c, d)``
    (bench/measured/copy-model-2026-12-02.md); the layout writing that order is taken,
    for training too (one thread: see that page for two)."""
    sizes = {"a": 48, "b": 48, "c": 40, "d": 48, "e": 24}
    assert ttgt.copy_ns(list("acde"), list("deca"), sizes) > ttgt.copy_ns(list("aecd"), list("deca"), sizes)
    lay, training = _training("abcd,eb->deca", sizes)
    assert (lay.swap, _names(lay), lay.copies) == (True, ("a", "e", "cd", "b"), "c")
    assert (training.swap, _names(training)) == (True, ("a", "e", "cd", "b"))


def test_training_broadcasts_an_operand_only_where_its_partial_gradients_cost_little():
    """``BTD,NDH->BTNH`` (a Gemma query projection): the forward reads BTD broadcast over
    the 8 values of N; its gradient would be 8 partial ones of its size, summed, so the
    training layout copies NDH once instead and runs one product.  ``xyk,kz->yzx``'s
    broadcast kz has 160 partial gradients of 3840 elements, cheaper than copying xyk."""
    lay, training = _training("BTD,NDH->BTNH", dict(B=1, T=128, D=512, N=8, H=64))
    assert lay.broadcast == ("N",) and training.broadcast == () and "r" in training.copies
    lay, training = _training("xyk,kz->yzx", dict(x=96, y=160, k=120, z=32))
    assert lay.broadcast == ("y",) and lay.copies == "c"
    # weighed without K_UNIT (whose backward the model does not price): the product writing
    # the result in place, as the forward's before that rate (a training step 0.85x the other's)
    assert training.broadcast == ("y",) and training.copies == "" and training.swap
    lay, training = _training("ij,jk->ik", dict(i=64, j=64, k=64))
    assert training is lay                                  # nothing broadcast


def test_the_training_layout_trains_where_a_gradient_is_taken_and_is_exact(monkeypatch):
    """The forward's layout runs with and without a gradient (the same bits); with one, the
    step trains as the training layout (recorded.Recorded with its parts: built, never run
    forward); both exact, and the gradients torch.einsum's."""
    built = []
    real = tx._matmul

    def spy(ta, tb, groups, *rest):
        fn, make, chunked, parts = real(ta, tb, groups, *rest)
        built.append(tuple(groups[0]))

        def run(a, b, fn=fn):
            seen.append(tuple(groups[0]))
            return fn(a, b)
        return run, make, chunked, parts
    seen = []
    monkeypatch.setattr(tx, "_matmul", spy)
    eq = "BTD,NDH->BTNH"
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 128, 512, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(8, 512, 64, dtype=torch.float64, generator=g, requires_grad=True)
    einc.cache_clear()
    with torch.no_grad():
        plain = einc.einsum(eq, x, w)
    torch.testing.assert_close(plain, torch.einsum(eq, x, w))
    out = einc.einsum(eq, x, w)
    assert len(built) == 2 and built[0] != () and built[1] == ()       # N in the batch; no batch
    assert seen == [built[0], built[0]] and torch.equal(out.detach(), plain)
    gout = torch.randn(out.shape, dtype=torch.float64, generator=g)
    got = torch.autograd.grad(out, (x, w), gout)
    want = torch.autograd.grad(torch.einsum(eq, x, w), (x, w), gout)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    einc.cache_clear()
    monkeypatch.setattr(tx, "_matmul", real)
    from einc.planner import plan_for
    from einc.planner.options import DEFAULT
    (fn,), _ = tx.step_functions(plan_for(parse(eq), [x.shape, w.shape], DEFAULT), [x.dtype, w.dtype])
    assert fn.ttgt.broadcast and fn.chunked is None         # measure mode's candidate: the forward's layout


def test_a_broadcast_operand_is_copied_expanded_only_within_the_allowance():
    """An own index moved into a batch with shared indices makes the other operand's batch
    group mix a real index with a broadcast one: that operand is copied expanded, which
    only layouts with an expanded copy of at most half the larger operand may do."""
    sizes = dict(b=4, a=64, k=64, c=64)
    eq = ("bak", "bkc", "bac")
    for worth in (0, 1 << 30):
        for lay in ttgt.candidates(*map(list, eq), sizes, worth):
            if lay.outer:       # a looped layout (per b): its groups are of the step without b
                continue
            _, _, _, expanded = ttgt.cost(*map(list, eq), sizes, lay.swap, lay.batch, lay.m, lay.n, lay.k)
            if expanded:
                assert worth == 0 and 2 * expanded <= 4 * 64 * 64


def test_an_operand_broadcast_over_the_whole_batch_is_copied_once_then_expanded():
    """``bhij,bhjk->bhik`` with size-1 dimensions that broadcast (A of ``(8, 1, 64, 32)``,
    B of ``(1, 12, 32, 64)``): with ``b`` as the batch, B lacks it; its matrices
    ``(j, hk)`` need a copy, made once (12 x 32 x 64 elements) and read with stride 0
    over ``b``, not an expanded copy 8 times its size, so the layout is weighed."""
    sizes = dict(b=8, h=12, i=64, j=32, k=64)
    plain, _, copied, _ = ttgt.operand(list("hjk"), [["b"], ["j"], ["h", "k"]], sizes)
    assert copied == 12 * 32 * 64 and plain == ttgt.copy_ns(list("hjk"), list("jhk"), sizes)
    found = ttgt.candidates(list("bij"), list("hjk"), list("bhik"), sizes, tx._COPY_WORTH_SPARING)
    lay = next(f for f in found if f.batch == ("b",) and not f.swap and f.n == ("h", "k"))
    assert lay.copies == "rc" and lay.broadcast == ("b",)
    assert ttgt.cost(list("bij"), list("hjk"), list("bhik"), sizes, False, ("b",), ("i",), ("h", "k"),
                     ("j",))[3] == 0                    # no expanded copy


def test_ntn_reads_both_operands_in_place():
    """pykeen's NTN ``bcda,bca->bcd`` (A (256, 1, 4, 16), B (1, 500, 16); after the size-1
    dimensions are squeezed, ``bda,ca->bcd``): one product reads both operands as they are
    and only the result is copied into ``(b, c, d)``; the layout that writes it in place
    (per ``b``, B's ``(500 x 16)`` with stride 0 against A's ``(16 x 4)``) is weighed, its
    thin products priced above that copy; no looped layout (``b``'s slices would be those
    thin products too)."""
    sizes = dict(b=256, d=4, a=16, c=500)
    lay = _choose("bda,ca->bcd", sizes)
    assert lay.copies == "c" and not lay.outer and not lay.broadcast
    found = ttgt.candidates(list("bda"), list("ca"), list("bcd"), sizes, tx._COPY_WORTH_SPARING)
    direct = next(f for f in found if f.batch == ("b",) and f.copies == "" and not f.outer)
    assert direct.broadcast == ("b",) and direct.cost > lay.cost


def test_ntn_runs_its_product_as_torch_does():
    """pykeen's NTN ``bda,ca->bcd`` (b=256, d=4, a=16, c=500): the product over
    ``((b, d), a) x (a, c)``, as torch.einsum runs it, its result ``(b, d, c)`` copied into
    ``(b, c, d)`` by a transpose of ``(4 x 500)`` blocks, rather than ``(c, a) x (a, (b, d))``
    and ``(c, b, d)`` copied in runs of 4 elements.  The first copy measures the cheaper
    (bench/permute_copy.py --model), and the whole step with it trains faster; a model that
    priced the first above the second would take a short innermost index to cost several times
    what it does."""
    sizes = dict(b=256, d=4, a=16, c=500)
    lay = _choose("bda,ca->bcd", sizes)
    assert (lay.m, lay.n, lay.k, lay.copies) == (("b", "d"), ("c",), ("a",), "c")
    assert training_layout.for_training(lay, list("bda"), list("ca"), list("bcd"), sizes, tx._COPY_WORTH_SPARING) is lay
    assert ttgt.copy_ns(list("bdc"), list("bcd"), sizes) < ttgt.copy_ns(list("cbd"), list("bcd"), sizes)


def test_a_copy_to_fresh_pages_costs_more_per_element(monkeypatch):
    """From 8 Mi elements a copy's result is mapped anew and zeroed page by page: ``abcd,ea->dcbe``
    at the GPU variant's sizes (a 64 Mi-element result, run on the CPU) copies A once and
    writes the result in place, rather than copy A and the result (measured 0.92x the time
    of that), which pays the fresh pages' price on each element of the result besides."""
    per_element = [ttgt.copy_ns(list("abc"), list("bac"), dict(a=n, b=64, c=64)) / (n * 4096) for n in (1024, 2048)]
    assert per_element[1] - per_element[0] == pytest.approx(ttgt.FRESH)
    sizes = dict(a=8, b=128, c=128, d=256, e=16)
    chosen = _choose("abcd,ea->dcbe", sizes)
    assert chosen.copies == "l" and chosen.batch + chosen.m == ("d", "c", "b")      # A copied, the result in place

    def gap():
        found = {(_names(f), f.copies): f.cost for f in ttgt.candidates(list("abcd"), list("ea"), list("dcbe"), sizes,
                                                                         tx._COPY_WORTH_SPARING)}
        return found[("cd", "b", "e", "a"), "lc"] - found[_names(chosen), "l"]
    with_fresh, with_fresh_rate = gap(), ttgt.FRESH      # per element of the result (all but a's)
    monkeypatch.setattr(ttgt, "FRESH", 0.0)
    ttgt.cache_clear()
    try:
        assert with_fresh - gap() == pytest.approx(math.prod(sizes.values()) // 8 * with_fresh_rate, rel=1e-9)
    finally:
        monkeypatch.undo()
        ttgt.cache_clear()      # no layout priced without it kept for later tests


def test_a_broadcast_operand_runs_without_an_expanded_copy(trained_as_forced):
    """The executor makes the copy the model counts: running the layout above allocates no
    tensor of B's expanded size (8 x 12 x 32 x 64 elements), and is exact, with gradients."""
    from torch.utils._python_dispatch import TorchDispatchMode
    eq, shapes = "bhij,bhjk->bhik", [(8, 1, 64, 32), (1, 12, 32, 64)]
    plan, layouts = _layouts(eq, shapes)
    lay = next(f for f in layouts if f.broadcast and f.batch == (0,) and "r" in f.copies)
    made = []

    class Sizes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.untyped_storage().nbytes() >= out.numel() * out.itemsize > 0:
                made.append(out.untyped_storage().nbytes() // out.itemsize)
            return out
    g = torch.Generator().manual_seed(0)
    ops = [torch.randn(s, dtype=torch.float64, generator=g, requires_grad=True) for s in shapes]
    fns = _forced(plan, lay)
    with Sizes():
        out = _run(plan, fns, ops)
    assert 8 * 12 * 32 * 64 not in made and 12 * 32 * 64 in made, made
    torch.testing.assert_close(out, torch.einsum(eq, *ops))
    gout = torch.randn(out.shape, dtype=torch.float64, generator=g)
    got = torch.autograd.grad(out, ops, gout)
    for a, b in zip(got, torch.autograd.grad(torch.einsum(eq, *ops), ops, gout)):
        torch.testing.assert_close(a, b)


def test_a_product_per_value_of_the_results_first_index_writes_the_result_in_place():
    """``bhij,bhjk->bhik`` with A ``(8, 1, 64, 32)`` and B ``(1, 12, 32, 64)``: one product
    over both batch indices would copy both operands expanded, or the result; looped
    over ``b``, each product reads A's matrix with stride 0 over ``h`` and B as it is,
    and writes its slab of the result: nothing is copied, at ``LOOP`` ns a product."""
    sizes = dict(b=8, h=12, i=64, j=32, k=64)
    lay = _choose("bij,hjk->bhik", sizes)
    assert lay.outer == ("b",) and lay.batch == ("h",) and lay.copies == "" and lay.broadcast == ("h",)
    inner = ttgt.cost(list("ij"), list("hjk"), list("hik"), sizes, False, ("h",), ("i",), ("k",), ("j",))[0]
    assert lay.cost == 8 * (inner + ttgt.LOOP)
    flat = ttgt.choose(list("bij"), list("hjk"), list("bhik"), sizes, tx._COPY_WORTH_SPARING, loops=False)
    assert not flat.outer and "c" in flat.copies and lay.cost < flat.cost   # one product copies the result
    assert not _choose("ij,jk->ik", dict(i=64, j=64, k=64)).outer          # nothing to gain


def test_only_an_operands_outermost_index_is_looped_over():
    """``dbea,ec->abcd`` (the suite's ``pw_ttm_dbea_ec``): ``a`` leads the result but is A's
    innermost index, so a slice of A over it is no block laid out as A less ``a`` (its
    matrices would have no unit stride: 3.4x the time, measured); it is not looped over."""
    sizes = dict(d=28, b=20, e=32, a=24, c=24)
    found = ttgt.candidates(list("dbea"), list("ec"), list("abcd"), sizes, tx._COPY_WORTH_SPARING)
    assert not any(f.outer for f in found)
    found = ttgt.candidates(list("adbe"), list("ec"), list("abcd"), sizes, tx._COPY_WORTH_SPARING)
    assert any(f.outer == ("a",) for f in found)


def test_a_looped_step_allocates_only_its_result_and_is_differentiable():
    """The looped layout above runs as modelled: the only tensor it allocates is the
    result, exact; where a gradient is taken, the same products run stacked (``out=`` is
    not differentiable: tests/runtime/test_looped.py) and the gradients are torch.einsum's."""
    from torch.utils._python_dispatch import TorchDispatchMode
    eq, shapes = "bhij,bhjk->bhik", [(8, 1, 64, 32), (1, 12, 32, 64)]
    plan, layouts = _layouts(eq, shapes)
    lay = next(f for f in layouts if f.outer)
    made = []

    class Fresh(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func._overloadpacket in (torch.ops.aten.empty, torch.ops.aten.clone, torch.ops.aten.empty_like,
                                        torch.ops.aten._unsafe_view, torch.ops.aten.contiguous):
                made.append(out.numel())
            return out
    g = torch.Generator().manual_seed(0)
    ops = [torch.randn(s, dtype=torch.float64, generator=g) for s in shapes]
    fns = _forced(plan, lay)
    with Fresh():
        out = _run(plan, fns, ops)
    assert made == [8 * 12 * 64 * 64] and out.is_contiguous()
    torch.testing.assert_close(out, torch.einsum(eq, *ops))
    ops = [o.requires_grad_() for o in ops]
    out = _run(plan, fns, ops)
    gout = torch.randn(out.shape, dtype=torch.float64, generator=g)
    for a, b in zip(torch.autograd.grad(out, ops, gout), torch.autograd.grad(torch.einsum(eq, *ops), ops, gout)):
        torch.testing.assert_close(a, b)


def test_small_steps_weigh_only_the_results_orders(monkeypatch):
    """Below ttgt.SMALL elements a step weighs the layouts with the result's group orders
    and no index moved into the batch: both operands as left, both orders of K."""
    monkeypatch.setattr(ttgt, "SMALL", 1 << 12)
    sizes = dict(x=8, y=16, k=12, z=4)
    found = ttgt.candidates(list("xyk"), list("kz"), list("yzx"), sizes, tx._COPY_WORTH_SPARING)
    assert {f.swap for f in found} == {False, True} and not any(f.broadcast for f in found)
    assert all(f.m + f.n in (("y", "x", "z"), ("z", "y", "x")) for f in found)
    assert len(ttgt.candidates(list("xyk"), list("kz"), list("yzx"), sizes, 0, small=0)) > len(found)


def test_size_zero_and_one_give_a_layout():
    """Sizes 0 and 1 give a layout that places each index in one group, at a finite cost
    that is the model's cost of that layout; with every size 1 nothing is copied."""
    for eq, sizes in [("ij,jk->ki", dict(i=0, j=3, k=4)), ("aij,jk->kia", dict(a=1, i=1, j=1, k=1))]:
        lay = _choose(eq, sizes)
        ins, out = eq.split("->")
        ta, tb = ins.split(",")
        assert sorted("".join(_names(lay))) == sorted(set(ta + tb)), lay
        assert math.isfinite(lay.cost) and lay.cost >= 0, lay
        modelled = ttgt.cost(list(ta), list(tb), list(out), sizes, lay.swap, lay.batch, lay.m, lay.n, lay.k)
        assert (lay.cost, lay.copies, lay.flip) == modelled[:3], (lay, modelled)
    assert _choose("aij,jk->kia", dict(a=1, i=1, j=1, k=1)).copies == ""


# ----------------------------------------------------------------------- every layout exact

CASES = [       # equation, shapes; all with a summed index shared by both operands
    ("xyk,kz->yzx", [(4, 5, 3), (3, 2)]),
    ("bda,dc->abc", [(5, 3, 4), (3, 2)]),
    ("abk,kj->bja", [(3, 4, 5), (5, 2)]),
    ("dbea,ec->abcd", [(2, 3, 4, 3), (4, 2)]),
    ("aebf,dfce->abcd", [(2, 3, 2, 3), (2, 3, 2, 3)]),
    ("dega,gfbc->abcdef", [(2, 2, 3, 2), (3, 2, 2, 2)]),
    ("abcde,fedc->bfa", [(2, 3, 2, 2, 2), (3, 2, 2, 2)]),
    ("ijef,mbef->mbij", [(2, 2, 3, 3), (2, 3, 3, 3)]),
    ("qbhd,kbhd->bhqk", [(3, 2, 2, 4), (5, 2, 2, 4)]),
    ("bhqk,bkhd->bqhd", [(2, 2, 3, 4), (2, 4, 2, 3)]),
    ("qQ,Pqrs->QPrs", [(4, 3), (2, 4, 3, 2)]),
    ("bak,bkc->cab", [(2, 3, 4), (2, 4, 5)]),
    ("aibj,jbc->aic", [(2, 3, 2, 3), (3, 2, 4)]),
    ("bhij,bhjk->bhik", [(2, 1, 3, 4), (1, 3, 4, 2)]),     # size-1 dimensions broadcast, one each way
    ("bcda,bca->bcd", [(4, 1, 2, 3), (1, 5, 3)]),          # pykeen's NTN
]


def _layouts(eq, shapes):
    """The candidates the executor weighs for the equation's (one) contraction step."""
    seen = []
    real = ttgt.pick

    def pick(found):
        if not seen:                # the forward's choice (a training layout's comes after)
            seen.extend(found)
        return real(found)
    ttgt.pick = pick
    try:
        plan = build_plan(build(parse(eq), shapes))
        tx.step_functions(plan, [torch.float64] * len(shapes))
    finally:
        ttgt.pick = real
    return plan, seen


@pytest.fixture
def trained_as_forced(monkeypatch):
    """Gradients through the forced layout itself: a step weighs its training layout on
    the first call that takes a gradient, after :func:`_forced` has built it."""
    monkeypatch.setattr(training_layout, "for_training", lambda forward, *args, **kw: forward)


def _forced(plan, lay, dtype=torch.float64):
    """The step functions with ``lay`` as the layout, without a gradient (with one: also
    the ``trained_as_forced`` fixture)."""
    real, training = ttgt.pick, training_layout.for_training
    key = lambda f: (f.swap, f.batch, f.m, f.n, f.k, f.outer)  # noqa: E731
    # (a looped layout's step also chooses the layout of one product it runs under autograd)
    ttgt.pick = lambda found: next((f for f in found if key(f) == key(lay)), None) or real(found)
    training_layout.for_training = lambda forward, *args, **kw: forward
    try:
        fns, _ = tx.step_functions(plan, [dtype] * plan.num_operands)
    finally:
        ttgt.pick, training_layout.for_training = real, training
    return fns


def _run(plan, fns, ops):
    from einc.runtime.program import unroll
    return unroll(plan, fns)(list(ops))


def _layouts_of(t, kind):
    if kind == "plain":
        return t
    if kind == "transposed":        # the same values, stored with the dimensions reversed
        return t.permute(*reversed(range(t.dim()))).contiguous().permute(*reversed(range(t.dim())))
    if kind == "sliced":
        big = torch.zeros(*[2 * s for s in t.shape], dtype=t.dtype)
        view = big[tuple(slice(None, None, 2) for _ in t.shape)]
        view.copy_(t)
        return view
    if kind == "expanded":          # a stride-0 dimension: the first one, of the same values
        return t[:1].expand(t.shape) if t.shape[0] else t
    raise ValueError(kind)


@pytest.mark.parametrize("eq,shapes", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("kind", ["plain", "transposed", "sliced", "expanded"])
def test_every_layout_is_exact(eq, shapes, kind):
    plan, layouts = _layouts(eq, shapes)
    assert layouts, "a contraction step weighs layouts"
    g = torch.Generator().manual_seed(3)
    ops = [_layouts_of(torch.randn(s, dtype=torch.float64, generator=g), kind) for s in shapes]
    expected = torch.einsum(eq, *ops)
    assert {lay.swap for lay in layouts} == {False, True}
    for lay in layouts:
        out = _run(plan, _forced(plan, lay), ops)
        assert out.is_contiguous() and out.shape == expected.shape, lay
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12, msg=lambda m: f"{lay}: {m}")


@pytest.mark.parametrize("eq,shapes", [
    ("xyk,kz->yzx", [(0, 5, 3), (3, 2)]),         # an empty output index
    ("xyk,kz->yzx", [(4, 5, 0), (0, 2)]),         # an empty sum: zeros
    ("xyk,kz->yzx", [(1, 5, 3), (3, 1)]),         # size-1 indices
    ("dega,gfbc->abcdef", [(1, 2, 3, 1), (3, 1, 2, 1)]),
    ("bak,bkc->cab", [(1, 3, 4), (1, 4, 5)]),
])
def test_every_layout_at_sizes_zero_and_one(eq, shapes):
    plan, layouts = _layouts(eq, shapes)
    ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
    expected = torch.einsum(eq, *ops)
    for lay in layouts:
        out = _run(plan, _forced(plan, lay), ops)
        assert out.is_contiguous()
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("eq,shapes", [CASES[0], CASES[5], CASES[10], CASES[11], CASES[13], CASES[14]],
                         ids=lambda c: str(c))
def test_every_layout_differentiates(eq, shapes, trained_as_forced):
    plan, layouts = _layouts(eq, shapes)
    ops = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    for lay in layouts:
        fns = _forced(plan, lay)
        assert torch.autograd.gradcheck(lambda *x: _run(plan, fns, x), ops), lay


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.complex64])
def test_every_layout_in_other_dtypes(dtype):
    eq, shapes = "dega,gfbc->abcdef", [(2, 2, 3, 2), (3, 2, 2, 2)]
    plan, layouts = _layouts(eq, shapes)
    ops = [(torch.randn(s) * 4).to(dtype) for s in shapes]
    expected = torch.einsum(eq, *ops)
    for lay in layouts:
        out = _run(plan, _forced(plan, lay, dtype), ops)
        assert out.dtype == expected.dtype
        torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("eq,shapes", [CASES[0], CASES[1], CASES[5], CASES[10], CASES[11], CASES[13]],
                         ids=lambda c: str(c))
def test_every_layout_stays_within_the_live_bound(eq, shapes):
    """What each layout holds at once (operands aside) is within what slicing counts for
    the step (slicing.step_copies): at most a copy of each operand, an expanded copy
    within the allowance, and the result's copy."""
    plan, layouts = _layouts(eq, shapes)
    bound = live_peak(plan.steps, plan.graph.sizes, plan.num_operands)
    ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
    for lay in layouts:
        fns = _forced(plan, lay)
        _run(plan, fns, ops)
        with _Live() as seen:
            _run(plan, fns, ops)
        assert seen.peak <= bound, lay


# ----------------------------------------------------------------------- through einc.einsum

@pytest.mark.parametrize("eq,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_in_both_conventions(eq, shapes):
    einc.cache_clear()
    ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
    expected = torch.einsum(eq, *ops)
    torch.testing.assert_close(einc.einsum(eq, *ops), expected)
    ins, out = eq.split("->")
    letters = sorted(set(eq) - set(",->"))
    sub = lambda t: [letters.index(c) for c in t]  # noqa: E731
    args = [x for op, t in zip(ops, ins.split(",")) for x in (op, sub(t))] + [sub(out)]
    torch.testing.assert_close(einc.einsum(*args), expected)


@pytest.mark.kernels
@pytest.mark.parametrize("eq,shapes", CASES[:8], ids=[c[0] for c in CASES[:8]])
def test_the_triton_executor_agrees(kernel_device, eq, shapes):
    ops = [torch.randn(s, dtype=torch.float32, device=kernel_device) for s in shapes]
    expected = torch.einsum(eq, *[o.double() for o in ops])
    out = einc.einsum(eq, *ops)
    torch.testing.assert_close(out.double(), expected.to(out.device), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------- bench/layouts.py

def test_the_layouts_benchmark_shows_what_a_setting_moves(capsys):
    """``bench/layouts.py``: the steps a changed constant moves, timed and checked; the rest
    listed as unchanged; the model's constants and ``for_training`` restored after."""
    from bench import layouts
    threads, before, real = torch.get_num_threads(), ttgt.PER_MATRIX, training_layout.for_training
    try:    # matrices that cost a second each: xyk,kz->yzx does not run as a stack over y
        assert layouts.main(["--set", "PER_MATRIX=1e9", "--filter", "^(pw_ttm_xyk_kz|tiny_gemm_16)$",
                             "--threads", "1", "--rounds", "3", "--budget", "0.1"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    # with the setting, the one product trains as the forward runs: its swap, which training
    # would run as a Recorded step, saves less than that costs (backward.RECORDED)
    assert "**pw_ttm_xyk_kz** `xyk,kz->yzx`: 2 layout(s) only with the defaults, 1 only with the setting" in out
    assert "- default: `abc,cd->bda: b | a | d | c copies c`" in out    # the stack over y, the result copied
    assert "- default: `abc,cd->bda (training): b | d | a | c copies -`" in out    # ... copying nothing
    rows = [line for line in out.splitlines() if line.startswith("| pw_ttm_xyk_kz |")]
    assert len(rows) == 1 and rows[0].endswith("| ok |")
    assert "layouts unchanged (1): tiny_gemm_16" in out
    assert before == ttgt.PER_MATRIX and training_layout.for_training is real


def test_the_layouts_benchmark_times_a_training_step(capsys):
    """``--train``: the training layout ``for_training`` adds for ``BTD,NDH->BTNH`` is gone
    when partial gradients cost nothing, and a training step is timed and checked."""
    from bench import layouts
    threads = torch.get_num_threads()
    try:
        assert layouts.main(["--set", "GRAD_PARTIAL=0", "--filter", "^gemma_q_proj$", "--train",
                             "--threads", "1", "--rounds", "3", "--budget", "0.1"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "- default: `abc,dce->abde (training): - | ab | de | c copies r`" in out
    rows = [line for line in out.splitlines() if line.startswith("| gemma_q_proj |")]
    assert len(rows) == 1 and rows[0].endswith("| ok |")


def test_the_layouts_benchmark_weighs_a_call_of_ones_own_in_cpu_time(capsys):
    """``--equation EQ SHAPES`` instead of the suite (pw_ttm_xyk_kz's call, given by hand),
    timed with ``--clock cpu``: the same layouts move as in the suite's run above."""
    from bench import layouts
    threads = torch.get_num_threads()
    call = "xyk,kz->yzx 96x160x120,120x32"
    try:
        assert layouts.main(["--set", "PER_MATRIX=1e9", "--equation", *call.split(), "--threads", "1",
                             "--rounds", "3", "--clock", "cpu"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert f"**{call}** `xyk,kz->yzx`: 2 layout(s) only with the defaults, 1 only with the setting" in out
    assert "- default: `abc,cd->bda: b | a | d | c copies c`" in out
    rows = [line for line in out.splitlines() if line.startswith(f"| {call} |")]
    assert len(rows) == 1 and rows[0].endswith("| 3 | ok |")


def test_the_layouts_benchmark_checks_and_trains_complex_operands():
    """Complex operands (the suite's GPU variants of mps_inner_product, randreg_tn and
    qaoa_amplitude): checked against complex128, their gradients taken."""
    from bench import layouts
    g = torch.Generator().manual_seed(0)
    ops = [torch.randn(3, 4, dtype=torch.complex64, generator=g), torch.randn(4, 5, dtype=torch.complex64, generator=g)]
    out = einc.einsum("ij,jk->ik", *ops)
    assert layouts.check([out, out.clone()], "ij,jk->ik", ops) == "ok"
    assert layouts.check([out, out.conj()], "ij,jk->ik", ops) == "MISMATCH"
    entry, _ = layouts.built("ij,jk->ik", ops, [])
    grads = layouts._training_step(ops)(entry)
    assert len(grads) == 2 and all(gr.dtype == torch.complex64 for gr in grads)


@pytest.mark.parametrize("bad", ["NOPE=1", "SMALL=many", "pick=1"])
def test_the_layouts_benchmark_names_what_it_cannot_set(bad, capsys):
    from bench import layouts
    with pytest.raises(SystemExit) as e:
        layouts.main(["--set", bad])
    assert e.value.code == 2 and "--set" in capsys.readouterr().err


def _copies_of(numel, run):
    """The ops that make a new tensor (no view) of ``numel`` elements while ``run()`` runs."""
    with _Allocations() as made:
        result = run()
    return [f for n, f in made.sizes if n == numel], result


@pytest.mark.parametrize("perm,eq", [((2, 0, 1, 3), "zabk,kj->zbja"), ((1, 0, 2), "bak,kj->abj")])
def test_a_permuted_operand_is_read_in_its_memory_order(perm, eq, monkeypatch):
    """The copy-cost model weighs an operand as laid out in its term's order: a permuted view
    of a contiguous tensor is read in its memory order (``torch_executor.memory_orders``),
    so the layout that copies it not at all is found (``zabk,kj->zbja`` on a view of a
    contiguous ``abzk`` tensor copied it across its rows: 2.2x the time of the contiguous
    call).  A contiguous operand of the same shapes keeps an entry of its own.  (Planned
    per shape: a size class weighs the copies at its own sizes, runtime/sizeclass.py.)"""
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    einc.cache_clear()
    full = (36, 32, 8, 36)[:len(perm)]
    a = torch.randn(*full, dtype=torch.float64)
    view = a.permute(perm)
    w = torch.randn(view.shape[-1], 12, dtype=torch.float64)
    einc.einsum(eq, view, w)
    copies, out = _copies_of(a.numel(), lambda: einc.einsum(eq, view, w))
    assert not copies, copies
    torch.testing.assert_close(out, torch.einsum(eq, view, w))
    plain = view.contiguous()
    torch.testing.assert_close(einc.einsum(eq, plain, w), torch.einsum(eq, plain, w))
    assert not _copies_of(a.numel(), lambda: einc.einsum(eq, plain, w))[0]


def test_each_layout_of_a_shape_has_its_own_entry():
    """An entry reads its operands in the memory order of the layout it was made for; the
    plan cache keys on that order for operands that are not contiguous, so the same call
    gives the same bits whatever layout of the same shapes ran first (keyed on contiguity
    alone, another layout's order would run it: other bits, and more time), and a
    window of a padded batch, with new strides each call, is not planned each call."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 5, 40, generator=g).permute(1, 2, 0)       # (b, a, k) laid out (k, b, a)
    w = torch.randn(300, 7, generator=g)
    first = einc.einsum("bak,kj->abj", x, w)
    einc.cache_clear()
    einc.einsum("bak,kj->abj", torch.randn(40, 5, 300, generator=g).permute(1, 0, 2), w)   # laid out (a, b, k)
    again = einc.einsum("bak,kj->abj", x, w)
    assert torch.equal(first, again)
    assert einc.cache_info().plans.currsize == 2
    padded = torch.randn(300, 5, 48, generator=g)[:, :, :40].permute(1, 2, 0)    # other strides, the same order
    torch.testing.assert_close(einc.einsum("bak,kj->abj", padded, w), torch.einsum("bak,kj->abj", padded, w))
    assert einc.cache_info().plans.currsize == 2    # one entry per order a shape is read in, not per strides


def test_a_small_permuted_operand_is_read_as_it_is(monkeypatch):
    """Below ``ttgt.SMALL`` elements the model weighs no copies, so a permute to memory order
    is only overhead: ``ab,bc->ac`` on an 8x8 ``a.T`` ran two permutes (3.7 -> 6.4 us)."""
    monkeypatch.setattr(ttgt, "SMALL", 1 << 12)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    assert tx.memory_orders([a.T, b]) is None
    big = torch.randn(64, 128)
    assert tx.memory_orders([big.T, b]) == ((1, 0), None)


def test_steps_alike_but_for_their_names_share_one_choice():
    # the choice depends on where each index stands and its size, not its name: a chain's or
    # a matrix product state's steps, alike but for their names, are chosen once
    ttgt.cache_clear()
    sizes = {"b": 8, "i": 64, "j": 32, "k": 48, "c": 8, "x": 64, "y": 32, "z": 48}
    first = _choose("bij,jkb->ikb", sizes)
    hits = ttgt._cheapest.cache_info().hits
    second = _choose("cxy,yzc->xzc", sizes)
    assert ttgt._cheapest.cache_info().hits == hits + 1
    named = str.maketrans("bijk", "cxyz")
    assert _names(second) == tuple(g.translate(named) for g in _names(first))
    assert (second.swap, second.copies, second.flip, second.cost, second.broadcast, second.outer) == \
        (first.swap, first.copies, first.flip, first.cost, tuple(i.translate(named) for i in first.broadcast),
         tuple(i.translate(named) for i in first.outer))


def test_the_training_layouts_benchmark_weighs_a_switch_and_checks_both(capsys):
    """``bench/training_layouts.py``: a step whose training layout is another than the
    forward's (test_recorded.py's BROADCAST case) is logged with it, both steps' results and
    gradients checked against float64 torch.einsum, and timed."""
    from bench import training_layouts
    threads, real = torch.get_num_threads(), training_layout.for_training
    try:
        assert training_layouts.main(["--equation", "BTD,NDH->BTNH", "1x128x512,8x512x64", "--dtype", "float64",
                                      "--rounds", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `BTD,NDH->BTNH`")]
    assert len(rows) == 1 and "(training)" in rows[0] and rows[0].endswith("| ok |")
    assert training_layout.for_training is real


def test_a_viewed_results_gradient_is_priced_in_training():
    """``abcd,ebcd->aebc`` with its result in any layout (golden case 757): the forward's
    layout, ``(b c, e, a)``, and the unswapped one, ``(b c, a, e)``, cost the same but for the
    product's reading; where a gradient is taken, the result's gradient (in ``aebc``'s order)
    reaches both products as matrices with no unit-stride axis and is copied once, into
    ``(b, c, e, a)`` or ``(b, c, a, e)``: the second copy is the cheaper by more than a
    ``Recorded`` step costs, and the swapped layout trains for less (bench/measured/
    real-modules-2026-12-06.md).  The backward is priced: weighing the forward alone would
    keep the forward's layout."""
    sizes = dict(a=64, b=4, c=8, d=32, e=128)
    args = list("abcd"), list("ebcd"), list("aebc"), sizes, tx._COPY_WORTH_SPARING
    lay = ttgt.choose(*args, loops=False, free_out=True)
    assert lay.swap and _names(lay) == ("bc", "e", "a", "d") and not lay.copies
    trained = training_layout.for_training(lay, *args, free_out=True)
    assert not trained.swap and _names(trained) == ("bc", "a", "e", "d")
    assert ttgt.copy_ns(list("aebc"), list("bcae"), sizes) < ttgt.copy_ns(list("aebc"), list("bcea"), sizes)
