"""runtime/torch_executor/chunked.py: the last product and its permuting copy, a chunk at a time.

Chunks are taken for products of 16 MiB and more; most tests here lower the thresholds
(``chunks_always``) so that small two-operand contractions, drawn with every role of an
index (batch, rows, columns, summed), sizes 0 to 4, every dtype and layout, are cut into
chunks of a drawn size, and check them against torch.einsum on float64 / int64 copies.
"""

import math
from types import SimpleNamespace

import fuzz
import pytest
import torch
from hypothesis import event, given, note
from hypothesis import strategies as st
from oracle import TOL
from torch.utils._python_dispatch import TorchDispatchMode

import einc
from einc.runtime.torch_executor import chunked, permute_copy

ROLES = ("batch", "m", "n", "k")


# every call runs einc's own plan, whatever the environment says (under EINC_NEW_SHAPES=torch a
# small call would run torch's op: runtime/admission.py)
pytestmark = pytest.mark.usefixtures("per_shape_plans")


@pytest.fixture
def taken(monkeypatch):
    """How many calls ran in chunks, and how many chunks."""
    count = {"calls": 0, "chunks": 0}
    real = chunked.Chunks.cut

    def cut(self, threads):
        found = real(self, threads)
        return found and _counted(found, count)
    monkeypatch.setattr(chunked.Chunks, "cut", cut)
    return count


def _counted(found, count):
    count["calls"] += 1
    count["chunks"] += len(found[2])
    return found


def _oracle(eq, ops):
    return torch.einsum(eq, *[fuzz.upcast(o) for o in ops])


def _assert_matches(out, ref, dtype, extent):
    assert out.is_contiguous() and out.dtype == dtype and tuple(out.shape) == tuple(ref.shape)
    if dtype.is_floating_point or dtype.is_complex:
        rtol, atol = TOL[dtype]
        torch.testing.assert_close(out.to(ref.dtype), ref, rtol=rtol * 4, atol=atol * extent * 4)
    else:
        assert torch.equal(out, ref.to(dtype))


def _differential(eq, ops, extent):
    """einc against torch.einsum: the same error type, or the oracle's answer (in
    torch.einsum's dtype, except where torch trips over its own int64 promotion of a
    summed integer operand, which einc contracts in the wider dtype); inputs unchanged;
    a float result's bits the same under ``torch.func.vjp``.  Whether einc answered."""
    before = [o.clone() for o in ops]
    try:
        dtype_out = torch.einsum(eq, *ops).dtype
    except RuntimeError as e:
        if not fuzz.trips_on_int64_promotion(e):            # bool sums torch cannot run: the same error
            with pytest.raises(type(e)):
                einc.einsum(eq, *ops)
            event("torch raises")
            return False
        dtype_out = None
    out = einc.einsum(eq, *ops)
    _assert_matches(out, _oracle(eq, ops), dtype_out or out.dtype, extent)
    assert all(torch.equal(o, b) for o, b in zip(ops, before)), "an input was changed"
    if out.dtype.is_floating_point or out.dtype.is_complex:     # recorded by a transform: the same bits
        assert torch.equal(torch.func.vjp(lambda x: einc.einsum(eq, x, ops[1]), ops[0])[0], out)
    return True


@st.composite
def contractions(draw):
    """``(equation, shapes, summed extent)``: two operands, each index a batch, row,
    column or summed one (at least one of each but batch), of size 0 to 5 (0 rarely),
    every term and the output in a drawn order."""
    n = draw(st.integers(3, 7))
    roles = draw(st.lists(st.sampled_from(ROLES), min_size=n, max_size=n))
    roles[:3] = ["m", "n", "k"]                     # a matrix product with both sides
    sizes = draw(st.lists(st.sampled_from((0,) + (1, 2, 3, 4, 5) * 4), min_size=n, max_size=n))
    letters = "abcdefgh"[:n]
    a = [c for c, r in zip(letters, roles) if r in ("batch", "m", "k")]
    b = [c for c, r in zip(letters, roles) if r in ("batch", "n", "k")]
    out = [c for c, r in zip(letters, roles) if r != "k"]
    a, b, out = (draw(st.permutations(t)) for t in (a, b, out))
    size = dict(zip(letters, sizes))
    extent = math.prod(size[c] for c, r in zip(letters, roles) if r == "k")
    return f"{''.join(a)},{''.join(b)}->{''.join(out)}", [[size[c] for c in a], [size[c] for c in b]], extent


@fuzz.profile(quick=300, share=0.05)
@given(case=contractions(), dtype=st.sampled_from(fuzz.ALL_DTYPES), layouts=st.lists(
    st.sampled_from(fuzz.LAYOUTS), min_size=2, max_size=2), chunk=st.integers(0, 8), seed=st.integers(0, 99),
    choice=st.integers(0, 2**16))
def test_chunks_match_torch_einsum(chunks_always, taken, monkeypatch, case, dtype, layouts, chunk, seed, choice):
    """In a layout drawn among those the copy-cost model weighs (most put the product in
    another order than the result), chunks of 1 to 256 bytes per thread."""
    from einc.runtime.torch_executor import ttgt
    monkeypatch.setattr(ttgt, "SMALL", 0)
    monkeypatch.setattr(ttgt, "pick", lambda found: found[choice % len(found)])
    _check_drawn(case, dtype, layouts, chunk, seed, lambda: taken["calls"], "in chunks")


def _check_drawn(case, dtype, layouts, chunk, seed, count, label):
    """A drawn case against torch.einsum, in chunks of ``2**chunk`` bytes per thread; an
    event ``label`` where ``count()`` grew (chunks ran), else ``whole``."""
    eq, shapes, extent = case
    fixed, chunked.CHUNK_BYTES = chunked.CHUNK_BYTES, 1 << chunk
    before = count()
    try:
        values = fuzz.values(SimpleNamespace(shapes=shapes, dtype=dtype), seed)
        ops = [fuzz.lay_out(t, lay) for t, lay in zip(values, layouts)]
        note(f"{eq} {shapes} {dtype} {layouts} chunks of {1 << chunk} bytes")
        if _differential(eq, ops, extent):
            event(label if count() > before else "whole")
    finally:
        chunked.CHUNK_BYTES = fixed
        einc.cache_clear()


# ----------------------------------------------------------------- the cut itself

@pytest.mark.parametrize("target, most", [(1, 1), (16, 1), (64, 2), (100, 2), (300, 6), (600, 18)])
def test_the_chunks_cover_every_row_and_every_element_of_the_result_once(monkeypatch, target, most):
    """``dega,gfbc->abcdef``'s product over (d, e, a | f, b, c), 30 rows of 8 float32, cut
    along d, e, a: the chunks' row ranges tile the rows in order, their destinations tile
    the result, and a chunk holds the most rows that fit the target (960 bytes in all;
    one value of d: 192, of (d, e): 64, of (d, e, a): 32; 600 bytes: three values of d)."""
    monkeypatch.setattr(chunked, "MIN_BYTES", 0)
    sizes = dict(zip("abcdefg", (2, 2, 2, 5, 3, 2, 4)))
    natural, out, lead = list("deafbc"), list("abcdef"), list("dea")
    rows_most, perm, parts = chunked._cut(natural, out, lead, sizes, 4, target)
    rows = sizes["d"] * sizes["e"] * sizes["a"]
    assert [p[0] for p in parts] == [0] + [p[1] for p in parts[:-1]] and parts[-1][1] == rows
    assert max(hi - lo for lo, hi, *_ in parts) == rows_most == most
    hits = torch.zeros([sizes[i] for i in out], dtype=torch.int64)
    for lo, hi, index, view in parts:
        hits[index] += 1
        assert math.prod(view) == (hi - lo) * sizes["f"] * sizes["b"] * sizes["c"]
        assert hits[index].shape == torch.Size([view[p] for p in perm])
    assert torch.equal(hits, torch.ones_like(hits))


def test_no_cut_below_the_threshold_or_into_one_chunk(monkeypatch):
    sizes = dict(a=4, b=4, c=4)
    args = (list("abc"), list("cba"), list("a"), sizes, 4)
    assert chunked.plan_chunks(*args, False) is None                    # 256 bytes: below MIN_BYTES
    assert chunked._cut(*args, 16) is None
    monkeypatch.setattr(chunked, "MIN_BYTES", 0)
    assert chunked._cut(*args, 256) is None                             # the whole product fits one chunk
    assert [hi - lo for lo, hi, *_ in chunked._cut(*args, 255)[2]] == [3, 1]  # 3 values of a, then 1
    sizes["a"] = 0
    assert chunked.plan_chunks(*args, False) is None                    # nothing to compute


def test_the_thresholds_boundaries(monkeypatch, taken):
    """A permuted result's product of MIN_BYTES runs in chunks of about CHUNK_BYTES per
    thread; one just below runs whole."""
    monkeypatch.setattr(chunked, "MIN_BYTES", 1 << 16)
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 1 << 12)
    eq = "abk,kcd->acbd"                # interleaved: no layout writes the result directly
    a, b = torch.randn(8, 16, 8), torch.randn(8, 8, 16)        # a product of 8 * 16 * 8 * 16 float32
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        for first in (8, 7):
            einc.cache_clear()
            x = a[:first]
            torch.testing.assert_close(einc.einsum(eq, x, b), torch.einsum(eq, x, b).contiguous())
        assert taken["calls"] == 1                              # 64 KiB: cut; 56 KiB: whole
        assert taken["chunks"] == (1 << 16) // (1 << 12)
    finally:
        torch.set_num_threads(threads)
        einc.cache_clear()


def test_a_large_permuted_result_runs_in_chunks_at_the_default_thresholds(taken):
    """``degb,gfac->abcdef`` with a 16 MiB result: chunks, and the same numbers as the
    whole product."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 16, 16, 16, generator=g), torch.randn(16, 8, 16, 16, generator=g)
    einc.cache_clear()
    out = einc.einsum("degb,gfac->abcdef", a, b)
    assert taken["calls"] == 1 and taken["chunks"] >= 8
    ref = torch.einsum("degb,gfac->abcdef", a.double(), b.double())
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    assert out.is_contiguous()


def test_the_candidate_for_any_device_cuts_plain_tensors_and_leaves_tracked_ones_whole(chunks_always, taken):
    """``plan_chunks(...).anywhere`` (measure mode's candidate on CUDA): the same chunks and
    numbers as the CPU's path for plain tensors; the whole product for one that autograd
    records."""
    sizes = dict(zip("abcdefg", (2, 2, 2, 5, 3, 2, 4)))
    natural, out, lead = list("deafbc"), list("abcdef"), list("dea")
    run = chunked.plan_chunks(natural, out, lead, sizes, 8, False)
    a = torch.randn(5 * 3 * 2, 4, dtype=torch.float64)
    b = torch.randn(4, 2 * 2 * 2, dtype=torch.float64)
    whole_calls = []

    def whole(x, y):
        whole_calls.append(True)
        return (x @ y).view(5, 3, 2, 2, 2, 2).permute(2, 4, 5, 0, 1, 3).contiguous()
    expected = whole(a, b)
    whole_calls.clear()
    for fn in (run, run.anywhere):
        got = fn(a, b, whole)
        assert got.is_contiguous()
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert taken["calls"] == 2 and not whole_calls
    tracked = a.clone().requires_grad_()
    torch.testing.assert_close(run.anywhere(tracked, b, whole), expected)
    assert whole_calls and taken["calls"] == 2


def test_a_recorded_call_joins_the_same_chunks(chunks_always, taken):
    """Where something records the operands (here autograd, outside ``Recorded``), the CPU's
    path makes the same chunks, each a tensor of its own, joined in the result's order,
    which is not the chunks' (``e``, then ``d``, cut; the result ``abcdef``): the same bits
    as plain tensors, and the whole product's gradients."""
    sizes = dict(zip("abcdefg", (2, 2, 2, 5, 3, 2, 4)))
    run = chunked.plan_chunks(list("edafbc"), list("abcdef"), list("eda"), sizes, 8, False)
    g = torch.Generator().manual_seed(2)
    a = torch.randn(5 * 3 * 2, 4, dtype=torch.float64, generator=g)
    b = torch.randn(4, 2 * 2 * 2, dtype=torch.float64, generator=g)
    whole_calls = []

    def whole(x, y):
        whole_calls.append(True)
        return (x @ y).view(3, 5, 2, 2, 2, 2).permute(2, 4, 5, 1, 0, 3).contiguous()
    plain = run(a, b, whole)
    assert torch.equal(plain, whole(a, b))
    whole_calls.clear()
    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    got = run(x, y, whole)
    assert got.is_contiguous() and torch.equal(got.detach(), plain)
    assert not whole_calls and taken["calls"] == 2 and taken["chunks"] > 4
    w = torch.randn(got.shape, dtype=torch.float64, generator=g)
    grads = torch.autograd.grad((got * w).sum(), (x, y))
    want = torch.autograd.grad((whole(x, y) * w).sum(), (x, y))
    for g_, e in zip(grads, want):
        torch.testing.assert_close(g_, e)


# ----------------------------------------------------------------- what may not be cut

def test_gradients_run_the_chunks_and_agree(chunks_always, taken):
    """Recorded by autograd, the step runs as recorded.Recorded, whose forward is the
    untracked step (the chunks run: the bits of the call without autograd) and whose
    backward is the whole product's."""
    a = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    out = einc.einsum("abk,kc->bca", a, b)
    assert taken["calls"] == 1
    w = torch.randn(out.shape, dtype=torch.float64)
    got = torch.autograd.grad((out * w).sum(), (a, b))
    want = torch.autograd.grad((torch.einsum("abk,kc->bca", a, b) * w).sum(), (a, b))
    for g_, e in zip(got, want):
        torch.testing.assert_close(g_, e)
    with torch.no_grad():                                       # parameters at inference: the same bits
        assert torch.equal(einc.einsum("abk,kc->bca", a, b), out.detach())
    assert taken["calls"] == 2


def test_forward_ad_vmap_and_jacrev_are_right(chunks_always):
    """einc's own rules run these on plain tensors (chunks may run there); a tracked
    tensor never reaches ``out=``."""
    import torch.autograd.forward_ad as fwAD
    from torch.func import jacrev, vmap
    a, b = torch.randn(4, 3, 5, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64)
    eq = "abk,kc->bca"
    with fwAD.dual_level():
        t = torch.randn_like(a)
        out = fwAD.unpack_dual(einc.einsum(eq, fwAD.make_dual(a, t), b))
    torch.testing.assert_close(out.primal, torch.einsum(eq, a, b))
    torch.testing.assert_close(out.tangent, torch.einsum(eq, t, b))
    stack = torch.randn(2, 4, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(vmap(lambda x: einc.einsum(eq, x, b))(stack), torch.einsum("zabk,kc->zbca", stack, b))
    torch.testing.assert_close(jacrev(lambda x: einc.einsum(eq, x, b))(a), jacrev(lambda x: torch.einsum(eq, x, b))(a))


# a permuted last product (two batch indices cut), a dot step, one sum and a sum whose summed
# indices come before the kept one (partial sums added), a dot step with two kept indices cut,
# one with indices of size 1, few outputs of long sums no block divides
RECORDED = [("bij,bjk->kbi", [(3, 4, 5), (3, 5, 6)]), ("abij,abjk->kbai", [(2, 3, 4, 5), (2, 3, 5, 6)]),
            ("bij,bji->b", [(3, 4, 5), (3, 5, 4)]), ("ij,ij->", [(7, 5), (7, 5)]),
            ("bij,bij->j", [(3, 4, 5), (3, 4, 5)]), ("abij,abij->ba", [(2, 3, 4, 5), (2, 3, 4, 5)]),
            ("abij,abij->ab", [(1, 4, 1, 9), (1, 4, 1, 9)]), ("abc,abcd->d", [(2, 3, 4099), (2, 3, 4099, 2)])]
WAYS = ["vjp", "jvp", "forward AD", "functionalize", "make_fx fake", "make_fx real"]


def _reached(way, eq, a, b):
    """``einc.einsum(eq, a, b)`` as ``way`` records it: its result, and where the way makes
    one, the gradient of the first operand from a result's gradient of ones (``vjp``) or the
    result's tangent along ones in the first operand (``jvp``, forward AD)."""
    import torch.autograd.forward_ad as fwAD
    from torch.func import functionalize, jvp, vjp
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        return einc.einsum(eq, x, b)
    if way == "functionalize":
        return functionalize(f)(a), None
    if way == "vjp":
        out, back = vjp(f, a)
        return out, back(torch.ones_like(out))[0]
    if way == "jvp":
        return jvp(f, (a,), (torch.ones_like(a),))
    if way == "forward AD":
        with fwAD.dual_level():
            dual = fwAD.unpack_dual(f(fwAD.make_dual(a, torch.ones_like(a))))
            return dual.primal, dual.tangent
    graph = make_fx(lambda x, y: einc.einsum(eq, x, y), tracing_mode=way.split()[1])(a, b)
    return graph(a, b), None


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("case,dtype", [
    pytest.param(case, dtype, id=f"{case[0]}-{dtype}")
    for case in RECORDED for dtype in [torch.float64, torch.float32, torch.bfloat16, torch.complex128]
    if not (case is RECORDED[-1] and dtype == torch.bfloat16)])    # (16 bits: one matrix product, not cut)
def test_transforms_and_tracers_run_the_same_chunks(chunks_always, taken, blocks_cut, case, dtype, way,
                                                     monkeypatch):
    """Under a ``torch.func`` transform, forward AD and ``make_fx`` the chunks and blocks run
    in ops those record (each chunk's product a tensor of its own, a later block's sum added
    out of place, the result joined by ``torch.cat``): the bits of the plain call, and the
    derivatives of the whole product."""
    eq, shapes = case
    if shapes[0][-1] > 4096:        # few long sums: dozens of blocks (thousands of 64-byte ones for make_fx to record)
        monkeypatch.setattr(chunked, "CHUNK_BYTES", 1 << 14)
    g = torch.Generator().manual_seed(7)
    wide = torch.complex128 if dtype.is_complex else torch.float64
    a, b = (torch.randn(s, generator=g, dtype=wide).to(dtype) for s in shapes)
    plain = einc.einsum(eq, a, b)
    cut = taken["calls"]
    assert cut + blocks_cut["plans"] > 0                        # the plain call was cut
    out, derivative = _reached(way, eq, a, b)
    assert out.is_contiguous() and torch.equal(out, plain)
    assert taken["calls"] > cut or not cut                      # a product: cut again
    if derivative is None:
        return
    x, y = a.to(wide).requires_grad_(), b.to(wide)
    want = torch.einsum(eq, x, y)
    if way == "vjp":
        want = torch.autograd.grad(want, x, torch.ones_like(want))[0]
    else:
        want = torch.einsum(eq, torch.ones_like(x), y)         # linear in the first operand
    tol = {torch.bfloat16: 3e-2, torch.float32: 1e-4}.get(dtype, 1e-10)
    torch.testing.assert_close(derivative.to(wide), want.detach(), rtol=tol, atol=tol * a.numel() ** 0.5)


def test_compiled_and_traced_calls_are_right(chunks_always):
    a, b = torch.randn(4, 3, 5), torch.randn(5, 6)
    eq = "abk,kc->bca"
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, y: einc.einsum(eq, x, y), fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(a, b), torch.einsum(eq, a, b))
    traced = torch.jit.trace(lambda x, y: einc.einsum(eq, x, y), (a, b))
    a2 = torch.randn(4, 3, 5)
    torch.testing.assert_close(traced(a2, b), torch.einsum(eq, a2, b))


def test_the_benchmark_runs_and_checks(capsys):
    """``bench/chunked.py`` at small scales: a row per size, each checked."""
    from bench import chunked as bench_chunked
    threads = torch.get_num_threads()
    try:
        assert bench_chunked.main(["--filter", "dega", "--scales", "0.25,0.5", "--rounds", "5", "--budget", "0.1"]) == 0
    finally:
        torch.set_num_threads(threads)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| pw_ccsdt_dega_gfbc")]
    assert len(rows) == 2 and all(row.endswith("| ok |") for row in rows)
    assert chunked.MIN_BYTES == 1 << 24 and chunked.untracked is permute_copy.untracked     # restored


def test_threads_calling_at_once_each_get_their_own_chunks(chunks_always, taken):
    """Each call cuts into its own buffer: four threads on one plan, each result right."""
    from concurrent.futures import ThreadPoolExecutor
    eq = "dega,gfbc->abcdef"
    g = torch.Generator().manual_seed(1)
    pairs = [(torch.randn(2, 3, 4, 5, generator=g), torch.randn(4, 2, 3, 2, generator=g)) for _ in range(4)]
    einc.einsum(eq, *pairs[0])                                  # one plan for all
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda ab: [einc.einsum(eq, *ab) for _ in range(50)], pairs))
    for (a, b), runs in zip(pairs, outs):
        want = torch.einsum(eq, a, b)
        assert all(torch.allclose(r, want, atol=1e-6) for r in runs)
    assert taken["calls"] > 100                                 # (the count itself is not locked)


# ----------------------------------------------------------------- multiply and sum in blocks

@pytest.fixture
def blocks_cut(monkeypatch):
    """How many plans cut a multiply and sum into blocks."""
    count = {"plans": 0}
    real = chunked._blocks

    def blocks(*args):
        found = real(*args)
        count["plans"] += found is not None
        return found
    monkeypatch.setattr(chunked, "_blocks", blocks)
    return count


@st.composite
def sums(draw):
    """``(equation, shapes, summed extent)``: indices both operands hold, each kept or
    summed, some summed indices one operand holds alone, the output (kept indices in a
    drawn order) sometimes empty."""
    n = draw(st.integers(1, 5))
    letters = "abcdefgh"[:n]
    kept = [c for c in letters if draw(st.booleans())]
    alone_a = "xy"[:draw(st.integers(0, 1))]
    alone_b = "z"[:draw(st.integers(0, 1))]
    sizes = {c: draw(st.sampled_from((0,) + (1, 2, 3, 4, 5) * 4)) for c in letters + "xyz"}
    a = draw(st.permutations(list(letters) + list(alone_a)))
    b = draw(st.permutations(list(letters) + list(alone_b)))
    out = draw(st.permutations(kept))
    extent = math.prod(sizes[c] for c in set(a) | set(b) if c not in out)
    return f"{''.join(a)},{''.join(b)}->{''.join(out)}", [[sizes[c] for c in a], [sizes[c] for c in b]], extent


@fuzz.profile(quick=300, share=0.05)
@given(case=sums(), dtype=st.sampled_from(fuzz.ALL_DTYPES), layouts=st.lists(
    st.sampled_from(fuzz.LAYOUTS), min_size=2, max_size=2), chunk=st.integers(0, 8), seed=st.integers(0, 99))
def test_multiply_and_sum_in_blocks_match_torch_einsum(chunks_always, blocks_cut, case, dtype, layouts, chunk,
                                                       seed):
    """Dot steps and few long sums (``bij,bij->b``, ``ij,ij->``, ``abc,abcd->d``), in blocks of
    1 to 256 bytes per thread."""
    _check_drawn(case, dtype, layouts, chunk, seed, lambda: blocks_cut["plans"], "in blocks")


def test_a_full_sum_in_blocks_adds_the_blocks(chunks_always, blocks_cut):
    """``ij,ij->`` cut along its summed indices: each block's sum added to the first; exact
    in int64, as close as the whole sum in float64."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randint(-9, 9, (7, 5), generator=g), torch.randint(-9, 9, (7, 5), generator=g)
    assert torch.equal(einc.einsum("ij,ij->", a, b), torch.einsum("ij,ij->", a, b))
    x, y = torch.randn(7, 5, dtype=torch.float64, generator=g), torch.randn(7, 5, dtype=torch.float64, generator=g)
    torch.testing.assert_close(einc.einsum("ij,ji->", x, y.t().contiguous()), (x * y).sum())
    assert blocks_cut["plans"] == 2


def test_a_large_dot_step_runs_in_blocks_at_the_default_thresholds(blocks_cut):
    """``bij,bij->b`` over 16 MiB: blocks, as accurate as the whole multiply and sum."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 256, 256, generator=g), torch.randn(64, 256, 256, generator=g)
    einc.cache_clear()
    out = einc.einsum("bij,bij->b", a, b)
    assert blocks_cut["plans"] == 1
    ref = torch.einsum("bij,bij->b", a.double(), b.double())
    assert float((out.double() - ref).abs().max()) <= 2 * float(((a * b).sum((1, 2)).double() - ref).abs().max()) + 1e-6


def test_gradients_of_a_dot_step_run_its_blocks_and_agree(chunks_always, monkeypatch):
    """Recorded by autograd, a dot step made in blocks runs as summed.Summed: its forward
    is the untracked step (the blocks run: the bits of the call without autograd), its
    backward the whole multiply and sum's."""
    asked = []
    monkeypatch.setattr(chunked, "untracked", lambda x: asked.append(permute_copy.untracked(x)) or asked[-1])
    a = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    out = einc.einsum("bij,bji->b", a, b)
    assert asked and all(asked)
    got = torch.autograd.grad(out.sum(), (a, b))
    want = torch.autograd.grad(torch.einsum("bij,bji->b", a, b).sum(), (a, b))
    for g_, e in zip(got, want):
        torch.testing.assert_close(g_, e)
    with torch.no_grad():
        assert torch.equal(einc.einsum("bij,bji->b", a, b), out.detach())


def test_half_precision_sums_in_blocks_add_float32_partials(chunks_always, blocks_cut, monkeypatch):
    """``ij,ij->`` in bfloat16, cut along a summed index: each block multiplies and sums in
    float32 and the total is rounded once (partial sums added in bfloat16 would each be
    rounded to 8 bits); ``bi,bi->b`` cut along its kept index runs in blocks too."""
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(64, 64, generator=g).bfloat16(), torch.randn(64, 64, generator=g).bfloat16()
    exact = (a.double() * b.double()).sum()          # bfloat16 products are exact in float32
    got = einc.einsum("ij,ij->", a, b)
    assert got.dtype == torch.bfloat16 and got.shape == ()
    assert torch.equal(got, exact.float().bfloat16())    # float32 partials: one rounding
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 64 * 2 // torch.get_num_threads())     # a row per block
    einc.cache_clear()
    assert torch.equal(einc.einsum("ij,ij->", a, b), exact.float().bfloat16())
    assert torch.equal(einc.einsum("bi,bi->b", a, b), (a.float() * b.float()).sum(1).bfloat16())
    assert blocks_cut["plans"] == 3                 # all planned blocks


class _Largest(TorchDispatchMode):
    """The most elements any op allocated."""

    def __init__(self):
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(t, torch.Tensor) and t._base is None and not func._schema.is_mutable:
                self.most = max(self.most, t.numel())
        return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("eq", ["ij,ij->", "ij,ij->j"])
def test_a_large_half_precision_sum_makes_no_temporary_the_size_of_an_operand(blocks_cut, dtype, eq):
    """At the default thresholds (a 17 MiB product): blocks of about 1 MiB, not the whole
    ``a * b``; as accurate as the whole sum."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3000, 3000, generator=g).to(dtype), torch.randn(3000, 3000, generator=g).to(dtype)
    einc.cache_clear()
    einc.einsum(eq, a[:2], b[:2])                   # (plans made outside the count)
    with _Largest() as seen:
        out = einc.einsum(eq, a, b)
    assert blocks_cut["plans"] >= 1
    assert seen.most * dtype.itemsize <= 4 * chunked.CHUNK_BYTES * torch.get_num_threads()
    exact = torch.einsum(eq, (a * b).double(), torch.ones_like(b, dtype=torch.float64))
    whole = (a * b).sum(tuple(range(2 - len(eq.split("->")[1]))))
    assert out.dtype == dtype and out.shape == exact.shape
    assert float((out.double() - exact).abs().max()) <= float((whole.double() - exact).abs().max()) + \
        float(torch.finfo(dtype).eps * exact.abs().max())
