"""einc.einsum against the float64 oracle on a fixed family of equations, layouts and dtypes."""

import math

import pytest
import torch
from oracle import assert_close, reference

import einc

FAMILY = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ij,jk->ki", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bqhd,bkhd->bhqk", [(2, 3, 4, 5), (2, 6, 4, 5)]),
    ("abcd,dcbe->ae", [(2, 3, 4, 5), (5, 4, 3, 6)]),
    ("bi,oij,bj->bo", [(4, 3), (5, 3, 6), (4, 6)]),
    ("bij,bij->b", [(3, 4, 5), (3, 4, 5)]),
    ("ijab,ijab->", [(2, 3, 4, 5), (2, 3, 4, 5)]),
    ("i,j->ij", [(4,), (5,)]),
    ("i,i->i", [(4,), (4,)]),
    ("ij,j->ij", [(3, 4), (4,)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("ii->i", [(4, 4)]),
    ("ii->", [(4, 4)]),
    ("ij->j", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ij->ij", [(3, 4)]),
    ("iij->j", [(3, 3, 4)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)]),
    ("...ij,...jk", [(2, 3, 4), (4, 6)]),
    ("b...,A", [(2, 4), (3,)]),
    ("...ij->ij", [(2, 3, 4)]),
    ("ij->...", [(3, 4)]),
    (",ij->ij", [(), (3, 4)]),
    ("->", [()]),
    ("ij,ij->ij", [(1, 3), (2, 3)]),
    ("ij,jk->ik", [(3, 1), (4, 5)]),
    ("ij,jk->ik", [(0, 4), (4, 5)]),
    ("ij,jk->ik", [(3, 0), (0, 5)]),
    ("ij,jk,kl,lm->im", [(5, 2), (2, 5), (5, 2), (2, 5)]),
    ("ijk,ai,bj,ck->abc", [(3, 4, 5), (2, 3), (2, 4), (2, 5)]),
    ("acb,ajd,cjie,bif->def", [(4, 2, 4), (4, 2, 4), (2, 2, 2, 2), (4, 2, 4)]),
    (" i j , j k -> i k ", [(3, 4), (4, 5)]),
    ("BTKGH,BSKH->BTKGS", [(1, 4, 2, 2, 3), (1, 5, 2, 3)]),
    ("Bij,Bjk ->Bik", [(3, 2, 2), (3, 2, 2)]),
    ("ab,ab,ab->a", [(3, 4), (3, 4), (3, 4)]),
    ("ab,bc,ca->", [(3, 4), (4, 5), (5, 3)]),
    ("iji,j->j", [(3, 4, 3), (4,)]),
    ("ibnd,jbnd->ijbn", [(3, 2, 2, 4), (5, 2, 2, 4)]),       # batch innermost in the output
    ("ikc,jkc->ijc", [(3, 4, 2), (5, 4, 2)]),
    ("acb,ade->dceb", [(4, 2, 3), (4, 5, 2)]),                # M and N interleaved in the output
    ("GSEC,GSM->EGCM", [(2, 3, 2, 4), (2, 3, 5)]),
]


def _ops(shapes, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]


@pytest.mark.parametrize("equation,shapes", FAMILY, ids=[f[0].replace(" ", "_") or "_" for f in FAMILY])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_family(equation, shapes, dtype):
    ops = _ops(shapes, dtype)
    before = [o.clone() for o in ops]
    out = einc.einsum(equation, *ops)
    expected = torch.einsum(equation, *ops)
    assert out.dtype == expected.dtype and out.shape == expected.shape and out.device == expected.device
    assert out.is_contiguous()
    assert_close(out, reference(equation, *ops), dtype, extent=64)
    for o, b in zip(ops, before):
        assert torch.equal(o, b)                                   # inputs untouched
    for o in ops:
        if o.numel() and out.numel():
            assert out.untyped_storage().data_ptr() != o.untyped_storage().data_ptr()   # fresh


@pytest.mark.parametrize("equation,shapes", FAMILY[:12], ids=[f[0] for f in FAMILY[:12]])
def test_strided_layouts(equation, shapes):
    """Transposed, sliced-with-step and expanded operands give the same answer."""
    base = _ops(shapes)
    variants = []
    for o in base:
        if o.dim() >= 2:
            t = o.transpose(0, -1).contiguous().transpose(0, -1)        # column-major storage
        else:
            t = o
        big = torch.zeros(*[2 * s + 1 for s in o.shape], dtype=o.dtype)
        sl = big[tuple(slice(1, None, 2) for _ in o.shape)]
        sl.copy_(o)                                                     # sliced with step 2
        variants.append((t, sl))
    for pick in range(2):
        ops = [v[pick] for v in variants]
        assert any(not x.is_contiguous() for x in ops if x.dim() >= 2 and x.numel() > 1) or pick == 0 \
            or all(x.dim() < 2 for x in ops)
        out = einc.einsum(equation, *ops)
        assert out.is_contiguous()
        assert_close(out, reference(equation, *base), torch.float64, extent=64)


def test_expanded_operand():
    a = torch.randn(3, 1, dtype=torch.float64).expand(3, 4)      # stride 0
    b = torch.randn(4, 5, dtype=torch.float64)
    assert a.stride()[1] == 0
    assert_close(einc.einsum("ij,jk->ik", a, b), reference("ij,jk->ik", a, b), torch.float64, 4)
    assert_close(einc.einsum("ij,ij->i", a, a), reference("ij,ij->i", a, a), torch.float64, 4)


def test_output_is_contiguous_where_torch_is_not():
    """torch.einsum returns a permuted view here; einc's output takes .view() and view_as_complex."""
    x = torch.randn(2, 5, 3, 4)
    y = torch.randn(2, 6, 3, 4)
    assert not torch.einsum("bqhd,bkhd->bqkh", x, y).is_contiguous()     # the premise: a view in torch
    out = einc.einsum("bqhd,bkhd->bqkh", x, y)
    assert out.is_contiguous()
    out.view(-1)
    z = einc.einsum("ij,jkc->ikc", torch.randn(3, 4), torch.randn(4, 5, 2))
    torch.view_as_complex(z)
    d = einc.einsum("ii->i", torch.randn(5, 5))
    assert d.is_contiguous() and d._base is None


def test_operands_as_list_and_sublists():
    a, b = _ops([(3, 4), (4, 5)])
    ref = torch.einsum("ij,jk->ik", a, b)
    assert torch.allclose(einc.einsum("ij,jk->ik", [a, b]), ref)
    assert torch.allclose(einc.einsum("ij,jk->ik", (a, b)), ref)
    assert torch.allclose(einc.einsum(a, [0, 1], b, [1, 2], [0, 2]), ref)
    assert torch.allclose(einc.einsum(a, [0, 1], b, [1, 2]), ref)
    c = torch.randn(2, 3, 4, dtype=torch.float64)
    assert torch.allclose(einc.einsum(c, [..., 1], b, [1, 2], [..., 2]),
                          torch.einsum(c, [..., 1], b, [1, 2], [..., 2]))


def test_more_than_52_indices():
    """Beyond torch: 60 distinct indices through sublists and through non-ASCII letters."""
    n = 60
    ops = [torch.randn(2, 2, dtype=torch.float64) for _ in range(n - 1)]
    sub = []
    for k, o in enumerate(ops):
        sub += [o, [k, k + 1]]
    out = einc.einsum(*sub, [0, n - 1])
    expected = ops[0]
    for o in ops[1:]:
        expected = expected @ o
    assert_close(out, expected, torch.float64, 64)
    letters = [chr(0x3b1 + i) for i in range(25)] + [chr(0x410 + i) for i in range(32)]
    assert all(ch.isalpha() for ch in letters)
    eq = ",".join(letters[i] + letters[i + 1] for i in range(3)) + "->" + letters[0] + letters[3]
    assert_close(einc.einsum(eq, *ops[:3]), ops[0] @ ops[1] @ ops[2], torch.float64, 8)


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
          torch.complex128, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij->j", [(3, 4)]), ("ii->", [(3, 3)]), ("ii->i", [(3, 3)]),
    ("ij,j->j", [(3, 4), (4,)]), ("ij,j->ij", [(3, 4), (4,)]), ("i,i->", [(4,), (4,)]),
    ("i,i->i", [(4,), (4,)]), ("bij,bij->b", [(2, 3, 4), (2, 3, 4)]), ("ij,jk,k->i", [(3, 4), (4, 5), (5,)]),
    ("ij,ij->ij", [(1, 4), (3, 4)]), ("ij,j->j", [(1, 4), (4,)]),
])
def test_dtype_parity_with_torch(dtype, equation, shapes):
    """Same result dtype as torch.einsum for every dtype, or the same kind of error."""
    g = torch.Generator().manual_seed(1)
    ops = [torch.randint(-2, 3, s, generator=g).to(dtype) if dtype != torch.uint8
           else torch.randint(0, 3, s, generator=g).to(dtype) for s in shapes]
    try:
        expected = torch.einsum(equation, *ops)
    except Exception as e:
        with pytest.raises(type(e)):
            einc.einsum(equation, *ops)
        return
    out = einc.einsum(equation, *ops)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    assert torch.equal(out.to(torch.complex128), expected.to(torch.complex128))


EMPTY_SUMS = [("d,d,->", [(0,), (0,), ()]), ("d,->", [(0,), ()]), (",d->", [(), (0,)]),
              ("d,,->", [(0,), (), ()]), ("d,e,->e", [(0,), (2,), ()]), ("de,e,->e", [(0, 2), (2,), ()]),
              ("d,d,e->e", [(0,), (0,), (2,)]), ("id,jd,ij->ij", [(2, 0), (3, 0), (2, 3)]),
              ("bd,d,b->b", [(2, 0), (1,), (2,)])]       # d broadcast: 1 against 0 is 0


@pytest.mark.parametrize("executor", ["torch", "kernels"])
@pytest.mark.parametrize("equation,shapes", EMPTY_SUMS, ids=[e for e, _ in EMPTY_SUMS])
def test_a_sum_over_nothing_is_zero_beside_inf_and_nan(equation, shapes, executor, request):
    """A sum over an index of size 0 is 0 whatever the other operands hold, as numpy.einsum
    gives: no order of steps may multiply that empty sum by an inf (torch.einsum gives NaN
    or 0 as its path falls: NaN for ``d,->``, 0 for ``d,d,->``)."""
    device = request.getfixturevalue("kernel_device") if executor == "kernels" else torch.device("cpu")
    einc.cache_clear()
    for fill in (float("inf"), float("nan"), -float("inf")):
        ops = [torch.full(s, fill, device=device) for s in shapes]
        out = einc.einsum(equation, *ops)
        expected_shape = torch.einsum(equation, *[torch.zeros(s) for s in shapes]).shape
        assert out.shape == expected_shape and out.dtype == torch.float32 and out.is_contiguous()
        assert out.device == device and torch.equal(out.cpu(), torch.zeros(expected_shape)), (equation, fill, out)
    ops = [torch.full(s, float("inf"), requires_grad=True, device=device) for s in shapes]
    out = einc.einsum(equation, *ops)
    grads = torch.autograd.grad(out.sum(), ops, create_graph=True)
    assert all(torch.equal(g.cpu(), torch.zeros(o.shape)) for g, o in zip(grads, ops))    # the result is constant
    again = torch.autograd.grad(sum(g.sum() for g in grads), ops, allow_unused=True)    # double backward too
    assert all(g is None or not g.count_nonzero() for g in again)
    with einc.shared_intermediates():           # step by step, the empty sum would meet the inf
        shared = einc.einsum(equation, *[torch.full(s, float("inf"), device=device) for s in shapes])
    assert torch.equal(shared.cpu(), torch.zeros(shared.shape))


SIZE_1_SUMS = [("ij->i", [(4, 1)]), ("ij->", [(1, 1)]), ("aa->", [(1, 1)]), ("iij->j", [(1, 1, 4)]),
               ("bda->bd", [(2, 2, 1)]), ("ab->b", [(1, 4)]), ("...j->...", [(2, 2, 1)]), ("bda->db", [(2, 2, 1)])]


@pytest.mark.parametrize("new_shapes", ["class", "plan"])
@pytest.mark.parametrize("dtype,executor", [(d, x) for x in ("torch", "kernels") for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64)
    if not (x == "kernels" and d.is_complex)], ids=str)     # (complex operands run on torch)
@pytest.mark.parametrize("equation,shapes", SIZE_1_SUMS, ids=[e for e, _ in SIZE_1_SUMS])
def test_a_lone_operands_sum_over_size_1_is_torchs_sum(equation, shapes, dtype, new_shapes, executor, request,
                                                       monkeypatch):
    """torch.einsum sums a lone operand's summed indices, size 1 or not, and its sum starts
    at +0.0: -0.0 summed over size 1 gives +0.0 (einc squeezed the index away, and a kernel
    copied the value: -0.0).  inf and NaN stay as they are."""
    device = request.getfixturevalue("kernel_device") if executor == "kernels" else torch.device("cpu")
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    einc.cache_clear()
    values = torch.tensor([-0.0, 0.0, -1.5, float("inf"), -0.0, float("nan"), -float("inf"), 2.0])
    x = values.repeat(math.prod(shapes[0]) // 8 + 1)[:math.prod(shapes[0])].reshape(shapes[0]).to(dtype)
    _same_bits(einc.einsum(equation, x.to(device)).cpu(), torch.einsum(equation, x))
    if executor == "torch":     # with two operands torch squeezes such an index instead: -0.0 times 1 stays -0.0
        lhs, rhs = equation.split("->")
        pair = (x, torch.ones(2, dtype=dtype))
        _same_bits(einc.einsum(f"{lhs},z->{rhs}z", *pair), torch.einsum(f"{lhs},z->{rhs}z", *pair))


def _same_bits(out, want):
    """The same values, NaN where the other has NaN, and the same signs (of zeros too)."""
    assert out.dtype == want.dtype and out.shape == want.shape
    for got, expected in ((out.real, want.real), (out.imag, want.imag)) if out.is_complex() else ((out, want),):
        got, expected = got.double(), expected.double()
        assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.nan_to_num(), expected.nan_to_num())
        assert torch.equal(got.signbit() | got.isnan(), expected.signbit() | expected.isnan()), (out, want)


LONE_SUMS = [("i,j->i", [(4,), (8,)], None), ("j,i->i", [(8,), (4,)], None), ("i,ij->i", [(4,), (4, 8)], None),
             ("ijk,ij->i", [(3, 4, 8), (3, 4)], None), ("bb,->", [(3, 3), ()], None),
             ("b,bab->", [(3,), (3, 8, 3)], None), ("ij,j,jkm->ik", [(8, 8), (8,), (8, 8, 4)], [(0, 1), (0, 1)])]


@pytest.mark.parametrize("executor", ["torch", "kernels"])
@pytest.mark.parametrize("equation,shapes,path", LONE_SUMS, ids=[e for e, _, _ in LONE_SUMS])
def test_an_index_one_operand_alone_sums_is_summed_before_the_product(equation, shapes, path, executor, request):
    """torch.einsum sums an index one operand alone holds before it multiplies, so an inf
    of another operand meets the whole sum (``i,j->i``: inf * 7 is inf).  A kernel that
    folded it into its sum, or a fused kernel's K, multiplied first: inf * 0 in one term,
    NaN.  Each operand in turn holds the infs, the others zeros among their terms."""
    device = request.getfixturevalue("kernel_device") if executor == "kernels" else torch.device("cpu")
    einc.cache_clear()
    for k in range(len(shapes)):
        ops = [torch.tensor([float("inf"), 1.0, 2.0] if j == k else [1.0, 0.0, 2.0, -0.0, 1.0])
               .repeat(math.prod(s)).__getitem__(slice(math.prod(s))).reshape(s) for j, s in enumerate(shapes)]
        want = torch.einsum(equation, *ops)
        out = einc.einsum(equation, *[o.to(device) for o in ops], optimize=path or "auto").cpu()
        assert torch.equal(out.isnan(), want.isnan()) and torch.equal(out.nan_to_num(), want.nan_to_num()), \
            (k, out, want)


def test_a_sum_over_nothing_is_zero_when_small_calls_are_torchs(monkeypatch):
    """Under EINC_NEW_SHAPES=torch a small call runs torch's op, which may give NaN there: a
    size 0 is planned instead, so the answer is einc's whatever the setting."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "torch")
    einc.cache_clear()
    inf = torch.tensor(float("inf"))
    out = einc.einsum("d,e,->e", torch.zeros(0), torch.ones(2), inf)
    assert torch.equal(out, torch.zeros(2))


def test_explain_says_a_sum_over_nothing_is_zeros():
    assert "the result is zeros, a sum over d, of size 0" in str(einc.explain("d,d,->", (0,), (0,), ()))


def test_explain_takes_the_sublist_form_as_einsum_does():
    """explain(op0, sub0, op1, sub1, [out]) describes the call einsum runs in that form (it
    raised 'the equation must be a str'), with tensors or shapes, implicit output too."""
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    want = einc.explain("ij,jk->ik", a, b).to_dict()
    for got in (einc.explain(a, [0, 1], b, [1, 2], [0, 2]), einc.explain((2, 3), [0, 1], (3, 4), [1, 2], [0, 2]),
                einc.explain(a, [0, 1], b, [1, 2])):
        d = got.to_dict()
        assert d["path"] == want["path"] and d["totals"] == want["totals"]
    assert einc.explain(a, [5, 0], b, [0, 7], [7, 5]).to_dict()["steps"][0]["contraction"] == "FA,AH->HF"
    # one operand, its sublist of 0-d tensors and no output: not taken for a list of operands
    assert einc.explain(a, [torch.tensor(1), torch.tensor(0)]).to_dict()["equation"] == \
        einc.explain(a, [1, 0]).to_dict()["equation"]


WRAPPING = [("bc,d->b", [(2, 2), (1,)], None), ("bc,d->", [(2, 2), (1,)], None), ("da,->", [(2, 1), ()], None),
            ("ad,b,a,a,a->", [(1, 2), (2,), (1,), (1,), (1,)], None),
            ("db,bece,db,c,ade->dec", [(1, 1), (1, 1, 1, 1), (1, 1), (1,), (2, 1, 1)], None),
            ("bc,d->b", [(2, 2), (1,)], 1), ("bc,d->", [(2, 2), (1,)], 1), ("da,->", [(2, 1), ()], 1),
            ("ij,jk,k->i", [(3, 4), (4, 5), (5,)], 4)]


@pytest.mark.parametrize("executor", ["torch", "kernels"])
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.bool], ids=str)
@pytest.mark.parametrize("equation,shapes,memory_limit", WRAPPING, ids=[f"{e}-{m}" for e, _, m in WRAPPING])
def test_an_int64_result_of_narrow_integers_never_wraps(equation, shapes, memory_limit, dtype, executor, request):
    """Where the result is int64, every step is exact: narrow integers are contracted in
    int64 from the first step, sliced or not (a slice's own equation would keep the narrow
    dtype and wrap: ``bc,d->b`` on int8 with ``memory_limit=1`` gave 130 for 16002).  torch's
    own values wrap or not as its path falls; on int64 copies they are exact."""
    device = request.getfixturevalue("kernel_device") if executor == "kernels" else torch.device("cpu")
    high = {torch.int8: 127, torch.uint8: 255, torch.int16: 32767, torch.int32: 2**31 - 1, torch.bool: 1}[dtype]
    g = torch.Generator().manual_seed(0)
    ops = [torch.randint(high // 2, high + 1, s, generator=g).to(dtype).to(device) for s in shapes]
    try:
        expected_dtype = torch.einsum(equation, *[o.cpu() for o in ops]).dtype
    except NotImplementedError:         # a matrix product of bool: torch has no kernel, nor einc
        with pytest.raises(NotImplementedError):
            einc.einsum(equation, *ops, memory_limit=memory_limit)
        return
    out = einc.einsum(equation, *ops, memory_limit=memory_limit)
    assert out.dtype == expected_dtype
    if expected_dtype == torch.int64:
        assert torch.equal(out.cpu(), torch.einsum(equation, *[o.cpu().long() for o in ops])), out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("equation,shapes", [("i,i->", [(2,), (2,)]), ("bi,bi->b", [(3, 2), (3, 2)]),
                                             ("ij,ij->", [(3, 2), (3, 2)]), ("bi,ib->b", [(3, 2), (2, 3)]),
                                             ("abc,abcd->d", [(3, 2, 1), (3, 2, 1, 4)])])
def test_half_precision_multiply_and_sum_multiplies_in_float32(equation, shapes, dtype):
    """A multiply and sum (a dot step, a few long sums) of float16 operands multiplies in
    float32, as torch's matrix product and einc's kernels do: in float16, 300 * 300 overflows
    to inf and +inf - inf gives NaN where torch.einsum sums to 0, and each product loses the
    bits the sum needs."""
    big = 300.0 if dtype == torch.float16 else 1e19     # (bfloat16 overflows where float32 does)
    a = torch.full(shapes[0], big, dtype=dtype)
    b = torch.full(shapes[1], big, dtype=dtype)
    b.select(-1 if equation != "bi,ib->b" else 0, -1).neg_()           # pairs that cancel
    if equation == "abc,abcd->d":
        b = torch.full(shapes[1], big, dtype=dtype)
        b[:, 1].neg_()
    want = torch.einsum(equation, a.double(), b.double()).to(dtype)
    got = einc.einsum(equation, a, b)
    assert got.dtype == dtype and torch.equal(got, want), (got, want)
    assert torch.equal(got, torch.einsum(equation, a, b))
    g = torch.Generator().manual_seed(0)            # and as accurate as torch.einsum on random values
    x = torch.randn([s * 40 for s in shapes[0]], generator=g).to(dtype)
    y = torch.randn([s * 40 for s in shapes[1]], generator=g).to(dtype)
    exact = torch.einsum(equation, x.double(), y.double())
    err = float((einc.einsum(equation, x, y).double() - exact).abs().max())
    assert err <= float((torch.einsum(equation, x, y).double() - exact).abs().max()) * 1.01 + 1e-12


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("equation,shapes", [("ij,ij->", [(30, 20), (30, 20)]), ("bi,bi->b", [(3, 40), (3, 40)]),
                                             ("abc,abcd->d", [(3, 2, 8), (3, 2, 8, 4)])])
def test_half_precision_multiply_and_sum_under_autograd_saves_the_operands_as_they_are(equation, shapes, dtype):
    """Where autograd records the step, it runs as summed.Summed: the untracked call's bits,
    the operands saved as they are (the float32 copy the multiply makes would be saved
    otherwise: 34 MiB beside torch's nothing for ij,ij-> on 3000 x 3000 float16)."""
    g = torch.Generator().manual_seed(0)
    ops = [torch.randn(s, generator=g).to(dtype).requires_grad_() for s in shapes]
    with torch.no_grad():
        plain = einc.einsum(equation, *ops)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = einc.einsum(equation, *ops)
    assert saved and all(t.dtype == dtype for t in saved), [t.dtype for t in saved]
    assert torch.equal(out.detach(), plain)
    grads = torch.autograd.grad(out.sum(), ops)
    want = torch.einsum(equation, *ops)
    for got, expected in zip(grads, torch.autograd.grad(want.sum(), ops)):
        assert got.dtype == dtype and torch.equal(got, expected)
    big = torch.full(shapes[0], 300.0).to(dtype).requires_grad_()      # still float32 products
    other = torch.full(shapes[1], 300.0).to(dtype)
    other.select(-1, -1).neg_()
    assert torch.equal(einc.einsum(equation, big, other), torch.einsum(equation, big, other))


def test_half_precision_multiply_and_sum_past_52_dimensions_under_autograd():
    """A float16 multiply-and-sum of 59 dimensions under autograd, past torch's 52 letters
    (where spelling the step as torch's einsum op would raise): right, its gradient too."""
    shape = (1,) * 30 + (2,) * 8 + (1,) * 20 + (4,)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(shape, generator=g).half().requires_grad_()
    b = torch.randn(shape, generator=g).half()
    got, want = einc.einsum("...i,...i->...", a, b), torch.einsum("...i,...i->...", a, b)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    grad, = torch.autograd.grad(got.sum(), a)
    torch.testing.assert_close(grad, torch.autograd.grad(want.sum(), a)[0])


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_sliced_wide_unsigned_full_reduction(dtype):
    """Every index sliced, a slice is one element that no sum promotes: its uint16 part met
    the int64 accumulator ('Promotion for uint16, uint32, uint64 types is not supported')."""
    dt = getattr(torch, dtype, None)
    if dt is None:
        pytest.skip(f"torch {torch.__version__} has no {dtype}")
    a = torch.randint(0, 60000, (8, 7)).to(dt)
    want = torch.einsum("ba->", a)
    got = einc.einsum("ba->", a, memory_limit=1)
    assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
@pytest.mark.parametrize("equation,shapes,limit", [("a,b->", [(4,), (5,)], 3), ("ab,c->", [(2, 3), (5,)], 4)])
def test_sliced_wide_unsigned_meet_an_int64_sum(dtype, equation, shapes, limit):
    """A slice's step met the int64 sum of one operand and the other's uint16 as is: torch
    has no promotion between them ('Promotion for uint16, uint32, uint64 types is not
    supported'); the unsigned side is made int64 there too."""
    dt = getattr(torch, dtype, None)
    if dt is None:
        pytest.skip(f"torch {torch.__version__} has no {dtype}")
    ops = [torch.arange(math.prod(s)).reshape(s).to(dt) for s in shapes]
    want = torch.einsum(equation, *ops)
    got = einc.einsum(equation, *ops, memory_limit=limit)
    assert got.dtype == want.dtype and torch.equal(got, want)
