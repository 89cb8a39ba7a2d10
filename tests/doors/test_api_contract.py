"""einc.contract and opt_einsum's keywords: out= (written in place, checked, torch's
autograd rule, nothing written and inputs untouched on an error), backend=, dtype /
order / casting / use_blas, sizes by keyword, explicit paths of numpy integers, the
PathInfo attributes (opt_einsum's counts) and ContractExpression's ``contraction`` and
``num_args``."""

from __future__ import annotations

import random

import pytest
import torch
from oracle import reference

import einc
from einc import errors
from einc.errors import ArgumentError, DtypeError, EincError, OperandTypeError, OutError, PathError


def _ops(*shapes, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype) for s in shapes]


EQ = "ij,jk,kl->il"
SHAPES = [(3, 4), (4, 5), (5, 2)]


@pytest.mark.parametrize("door", ["einsum", "contract"])
def test_out_is_written_in_place_and_returned(door):
    ops = _ops(*SHAPES)
    out = torch.full((3, 2), 7.0, dtype=torch.float64)
    result = getattr(einc, door)(EQ, *ops, out=out)
    assert result is out
    torch.testing.assert_close(out, reference(EQ, *ops))


def test_out_may_be_a_strided_view_and_may_alias_an_operand():
    a, b = _ops((4, 4), (4, 4))
    expected = reference("ij,jk->ik", a, b)
    base = torch.zeros(4, 8, dtype=torch.float64)
    view = base[:, ::2]                                    # not contiguous
    einc.einsum("ij,jk->ik", a, b, out=view)
    torch.testing.assert_close(view, expected)
    assert base[:, 1::2].abs().sum() == 0                  # the gaps are untouched
    einc.einsum("ij,jk->ik", a, b, out=a)                  # the result is computed before it is written
    torch.testing.assert_close(a, expected)


def test_out_on_expressions_with_and_without_constants():
    ops = _ops(*SHAPES)
    expected = reference(EQ, *ops)
    out = torch.empty(3, 2, dtype=torch.float64)
    assert einc.contract_expression(EQ, *SHAPES)(*ops, out=out) is out
    torch.testing.assert_close(out, expected)
    out.zero_()
    const = einc.contract_expression(EQ, ops[0], SHAPES[1], ops[2], constants=[0, 2])
    assert const(ops[1], out=out) is out
    torch.testing.assert_close(out, expected)


def _untouched_after(call, ops, out):
    """Run ``call`` (expected to raise), then check that nothing was written."""
    before = [o.clone() for o in ops]
    out_before = out.clone() if isinstance(out, torch.Tensor) else None
    with pytest.raises(EincError) as info:
        call()
    for o, b in zip(ops, before):
        assert torch.equal(o.detach(), b.detach())
    if out_before is not None:
        assert torch.equal(out.detach(), out_before.detach())
    return info.value


@pytest.mark.parametrize("door", ["einsum", "contract"])
def test_out_of_the_wrong_shape_raises_and_writes_nothing(door):
    ops = _ops(*SHAPES)
    out = torch.full((2, 3), 5.0, dtype=torch.float64)
    err = _untouched_after(lambda: getattr(einc, door)(EQ, *ops, out=out), ops, out)
    assert isinstance(err, OutError) and isinstance(err, RuntimeError)
    assert "(2, 3)" in str(err) and "(3, 2)" in str(err)


def test_out_of_the_wrong_dtype_raises_as_torch_does():
    ops = _ops(*SHAPES)
    out = torch.full((3, 2), 5.0, dtype=torch.float32)
    err = _untouched_after(lambda: einc.einsum(EQ, *ops, out=out), ops, out)
    assert "Expected out tensor to have dtype torch.float64, but got torch.float32" in str(err)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype"):   # torch's own wording
        torch.mm(ops[0], ops[1], out=torch.empty(3, 5, dtype=torch.float32))


def test_out_that_is_not_a_tensor():
    ops = _ops(*SHAPES)
    err = _untouched_after(lambda: einc.contract(EQ, *ops, out=[0.0] * 6), ops, None)
    assert isinstance(err, OperandTypeError) and isinstance(err, TypeError) and "out=" in str(err)


def test_out_with_operands_that_require_grad_follows_torch():
    ops = _ops(*SHAPES)
    ops[1].requires_grad_(True)
    out = torch.zeros(3, 2, dtype=torch.float64)
    err = _untouched_after(lambda: einc.einsum(EQ, *ops, out=out), ops, out)
    assert "don't support automatic differentiation" in str(err)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):   # torch's rule
        torch.mm(ops[0], ops[1], out=torch.empty(3, 5, dtype=torch.float64))
    leaf_out = torch.zeros(3, 2, dtype=torch.float64, requires_grad=True)
    plain = [o.detach() for o in ops]
    _untouched_after(lambda: einc.einsum(EQ, *plain, out=leaf_out), plain, leaf_out)
    with torch.no_grad():                                  # allowed without grad mode, as in torch
        assert einc.einsum(EQ, *ops, out=out) is out
    assert not out.requires_grad
    torch.testing.assert_close(out, reference(EQ, *plain))


@pytest.mark.parametrize("backend", ["numpy", "jax", "cupy", "tensorflow", "object", "dask"])
def test_another_backend_is_a_clear_error(backend):
    ops = _ops(*SHAPES)
    expr = einc.contract_expression(EQ, *SHAPES)
    out = torch.zeros(3, 2, dtype=torch.float64)
    for call in (lambda: einc.contract(EQ, *ops, backend=backend, out=out),
                 lambda: einc.einsum(EQ, *ops, backend=backend), lambda: expr(*ops, backend=backend, out=out)):
        err = _untouched_after(call, ops, out)
        assert isinstance(err, ArgumentError) and isinstance(err, ValueError)
        assert f"backend={backend!r}" in str(err) and "torch tensors only" in str(err)


@pytest.mark.parametrize("backend", [None, "auto", "torch"])
def test_backends_naming_torch_are_accepted(backend):
    ops = _ops(*SHAPES)
    expected = reference(EQ, *ops)
    torch.testing.assert_close(einc.contract(EQ, *ops, backend=backend), expected)
    torch.testing.assert_close(einc.einsum(EQ, *ops, backend=backend), expected)
    torch.testing.assert_close(einc.contract_expression(EQ, *SHAPES)(*ops, backend=backend), expected)


def test_dtype_casts_the_operands_under_the_casting_rule():
    ops = _ops(*SHAPES, dtype=torch.float32)
    for dtype in (torch.float64, "float64"):
        result = einc.contract(EQ, *ops, dtype=dtype)
        assert result.dtype == torch.float64
        torch.testing.assert_close(result, reference(EQ, *ops))
    wide = _ops(*SHAPES)
    out = torch.zeros(3, 2, dtype=torch.float32)
    err = _untouched_after(lambda: einc.contract(EQ, *wide, dtype=torch.float32, out=out), wide, out)
    assert isinstance(err, DtypeError)
    assert "cannot cast operand 0 from torch.float64 to torch.float32 with casting='safe'; pass " \
        "casting='same_kind' or 'unsafe' to allow it" in str(err)
    assert einc.contract(EQ, *wide, dtype=torch.float32, casting="same_kind").dtype == torch.float32
    with pytest.raises(DtypeError, match="with casting='same_kind'; pass casting='unsafe' to allow it"):
        einc.contract(EQ, *wide, dtype=torch.int64, casting="same_kind")   # the hint names a looser rule
    with pytest.raises(DtypeError, match="casting='no'"):
        einc.contract(EQ, *ops, dtype=torch.float64, casting="no")
    with pytest.raises(DtypeError, match="not a dtype torch has"):
        einc.contract(EQ, *ops, dtype="float7")
    interleaved = einc.contract(ops[0], [0, 1], ops[1], [1, 2], [0, 2], dtype=torch.float64)
    assert interleaved.dtype == torch.float64


@pytest.mark.parametrize("dtype, want", [(float, torch.float64), ("float", torch.float64), (int, torch.int64),
                                         ("f8", torch.float64), ("<i4", torch.int32), (complex, torch.complex128),
                                         ("bfloat16", torch.bfloat16)])
def test_dtype_names_read_as_numpy_reads_them(dtype, want):
    # numpy (and opt_einsum on numpy) reads float as float64 and int as int64; torch's
    # attributes of those names are 32-bit
    ops = _ops(*SHAPES, dtype=torch.float16 if want == torch.bfloat16 else torch.float32)
    assert einc.contract(EQ, *ops, dtype=dtype, casting="unsafe").dtype == want
    if want.is_floating_point and want != torch.bfloat16:
        assert einc.contract(EQ, *_ops(*SHAPES), dtype=dtype).dtype == torch.float64


def test_order_casting_and_use_blas():
    ops = _ops(*SHAPES)
    expected = reference(EQ, *ops)
    for order in ("K", "C"):
        assert einc.contract(EQ, *ops, order=order).is_contiguous()
    for order in ("F", "A"):
        with pytest.raises(ArgumentError, match=f"order='{order}' cannot be honoured"):
            einc.contract(EQ, *ops, order=order)
    with pytest.raises(ArgumentError, match="casting must be one of"):
        einc.contract(EQ, *ops, casting="sometimes")
    for use_blas in (True, False):
        torch.testing.assert_close(einc.contract(EQ, *ops, use_blas=use_blas), expected)


def test_optimize_none_and_true_mean_auto_as_in_opt_einsum():
    shapes = [(30, 2), (2, 30), (30, 30)]
    auto, _ = einc.contract_path("ij,jk,kl->il", *shapes, optimize="auto")
    assert auto != [(0, 1), (0, 1)]
    for optimize in (None, True):
        assert einc.contract_path("ij,jk,kl->il", *shapes, optimize=optimize)[0] == auto
        assert einc.contract_expression("ij,jk,kl->il", *shapes, optimize=optimize).plan.path == tuple(auto)
    assert einc.explain("ij,jk,kl->il", *shapes, optimize=None).path == ((0, 1), (0, 1))   # einsum's meaning


def test_path_info_has_opt_einsum_attributes():
    opt_einsum = pytest.importorskip("opt_einsum")
    shapes = [(2, 3, 4), (4, 5), (5, 6, 2), (3, 7)]
    eq = "...ij,jk,kl...,im->m...l"
    path, info = einc.contract_path(eq, *shapes)
    ref_path, ref = opt_einsum.contract_path(eq, *shapes, shapes=True)
    assert isinstance(info, einc.PathInfo)
    assert path == info.path and isinstance(path, list)
    assert path == ref_path
    for name in ("opt_cost", "naive_cost", "largest_intermediate", "size_list", "scale_list", "shapes"):
        assert getattr(info, name) == getattr(ref, name), name
    # the ellipsis dimension gets an unused letter, opt_einsum's
    assert (info.size_dict, info.eq) == (ref.size_dict, ref.eq)
    assert len(info.indices) == len(ref.indices) == 6
    assert info.naive_cost == ref.naive_cost
    assert info.opt_cost <= ref.opt_cost
    assert len(info.eq.split("->")[0].split(",")) == 4 and info.eq.split("->")[1] == info.output_subscript
    assert info.speedup == pytest.approx(info.naive_cost / info.opt_cost)
    assert "Optimized FLOP count" in str(info)


@pytest.mark.parametrize("eq, shapes, naive", [("d,d->d", [(3,), (3,)], 6), ("ac->", [(3, 3)], 9),
                                               ("ij->", [(2, 3)], 6)])
def test_path_info_naive_cost_and_speedup_are_opt_einsum_s(eq, shapes, naive):
    """opt_einsum adds 1 to the naive count's factor where an index is shared by two
    operands (a Hadamard product too), not where one is summed; einc's plan keeps its own."""
    opt_einsum = pytest.importorskip("opt_einsum")
    path, info = einc.contract_path(eq, *shapes)
    _, ref = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=path)
    assert info.naive_cost == ref.naive_cost == naive
    assert info.speedup == pytest.approx(float(ref.speedup), rel=1e-12)
    assert f"Naive FLOP count:  {naive:.4g}\n" in str(info)          # the table shows the same count
    assert f"Theoretical speedup:  {info.speedup:.4g}\n" in str(info)
    explained = einc.explain(eq, *shapes)                              # explain and the plan: einc's count
    assert info.plan.naive_flops == explained.naive_flops
    assert f"Naive FLOP count:  {explained.naive_flops:.4g}\n" in str(explained)


def _random_equation(rng):
    """1-4 operands over a few letters, with repeated indices (diagonals), scalars, sums,
    outer products and size-1 dimensions; an index has one size everywhere."""
    letters = rng.sample("abcdefg", rng.randint(1, 6))
    size = {c: rng.choice([1, 1, 2, 3, 4]) for c in letters}
    terms = ["".join(rng.choice(letters) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 4))]
    used = sorted(set("".join(terms)))
    out = [c for c in used if rng.random() < 0.4]
    rng.shuffle(out)
    eq = ",".join(terms) if rng.random() < 0.2 else ",".join(terms) + "->" + "".join(out)
    return eq, [tuple(size[c] for c in t) for t in terms]


def test_path_info_costs_match_opt_einsum_on_random_equations():
    opt_einsum = pytest.importorskip("opt_einsum")
    rng = random.Random(0)
    for _ in range(200):
        eq, shapes = _random_equation(rng)
        path, info = einc.contract_path(eq, *shapes)
        _, ref = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=path)
        where = f"{eq} {shapes} path {path}"
        for name in ("naive_cost", "opt_cost", "largest_intermediate", "size_list", "scale_list", "size_dict", "eq"):
            assert getattr(info, name) == getattr(ref, name), f"{name}: {where}"
        assert info.speedup == pytest.approx(float(ref.speedup), rel=1e-12), where


def test_path_info_letters_of_broadcast_dimensions_are_opt_einsum_s():
    """A size-1 dimension against a larger one (an index of its own in einc's graph) is
    opt_einsum's one letter of the larger size: in ``size_dict``, ``eq`` and ``naive_cost``."""
    opt_einsum = pytest.importorskip("opt_einsum")
    for eq, shapes in [("ij,jk->ik", [(2, 1), (3, 4)]), ("hbhg,hggb", [(1, 1, 1, 5), (3, 5, 5, 1)])]:
        path, info = einc.contract_path(eq, *shapes)
        _, ref = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=path)
        assert (info.size_dict, info.eq, info.naive_cost) == (ref.size_dict, ref.eq, ref.naive_cost), eq
    path, info = einc.contract_path("...i,...i->...", (1, 3), (4, 3))     # one letter for the ellipsis dimension
    _, ref = opt_einsum.contract_path("...i,...i->...", (1, 3), (4, 3), shapes=True, optimize=path)
    assert (info.eq, info.size_dict) == (ref.eq, ref.size_dict) == ("bi,bi->b", {"b": 4, "i": 3})   # opt_einsum's
    assert info.naive_cost == ref.naive_cost == 24


def test_contract_takes_sizes_by_keyword_for_a_named_equation():
    x, w = _ops((3, 8), (5, 8))
    eq = "b (h d), e (h d) -> b h e"            # only composites: h is known by its keyword alone
    expected = reference("bhd,ehd->bhe", x.view(3, 2, 4), w.view(5, 2, 4))
    torch.testing.assert_close(einc.contract(eq, x, w, h=2), expected)
    torch.testing.assert_close(einc.contract(eq, x.float(), w.float(), h=2, dtype="float64"), expected)
    out = torch.empty(3, 2, 5, dtype=torch.float64)
    assert einc.contract(eq, x, w, h=2, out=out) is out
    torch.testing.assert_close(out, expected)
    merged = einc.contract("b (h d), h d e -> b (h e)", x, torch.ones(2, 4, 5, dtype=torch.float64), h=2)
    assert merged.shape == (3, 10)
    assert einc.contract_path(eq, x, w, h=2)[0] == list(einc.contract_expression(eq, x.shape, w.shape, h=2).plan.path)
    with pytest.raises(EincError, match="nothing gives the size of h and d"):
        einc.contract(eq, x, w)
    with pytest.raises(TypeError, match="unknown keyword q=2"):
        einc.contract(eq, x, w, h=2, q=2)


@pytest.mark.parametrize("door", ["einsum", "contract"])
def test_explicit_path_of_numpy_integers(door):
    np = pytest.importorskip("numpy")
    ops = _ops(*SHAPES)
    expected = reference(EQ, *ops)
    for path in ([(np.int64(0), np.int64(1)), (0, 1)], ((np.int32(1), np.intp(2)), (np.int8(0), 1))):
        torch.testing.assert_close(getattr(einc, door)(EQ, *ops, optimize=path), expected)
        found, _ = einc.contract_path(EQ, *SHAPES, optimize=path)
        assert found == [tuple(int(i) for i in c) for c in path]
        assert all(type(i) is int for c in found for i in c)
    with pytest.raises(PathError, match="explicit path"):
        getattr(einc, door)(EQ, *ops, optimize=[(True, False), (0, 1)])     # bools stay refused


def _t(*shape):
    return torch.ones(*shape, dtype=torch.float64)


@pytest.mark.parametrize("make, constants, num_args", [
    (lambda: ("ij,jk,kl->il", (3, 4), (4, 5), (5, 2)), (), 3),
    (lambda: ("ij,jk,kl", (3, 4), (4, 5), (5, 2)), (), 3),
    (lambda: ("ij, jk ->ik", (3, 4), (4, 5)), (), 2),
    (lambda: ("...ij,jk->...ik", (2, 3, 4), (4, 5)), (), 2),
    (lambda: ("ij,jk,kl->il", _t(3, 4), (4, 5), _t(5, 2)), (0, 2), 1),
    (lambda: ("ij,jk,kl->il", _t(3, 4), _t(4, 5), (5, 2)), (0, 1), 1),
    (lambda: ("ij,jk,kl,lm->im", (3, 4), _t(4, 5), _t(5, 2), (2, 6)), (2, 1), 2),
    (lambda: ((3, 4), [0, 1], (4, 5), [1, 2], [0, 2]), (), 2),
    (lambda: ((3, 4), [7, 30], (4, 5), [30, 2]), (), 2),
    (lambda: (_t(3, 4), [0, 1], (4, 5), [1, 2], [0, 2]), (0,), 1),
])
def test_expression_contraction_and_num_args_as_opt_einsum(make, constants, num_args):
    """``contraction``: the equation as given (interleaved: in opt_einsum's letters), the
    constant terms bracketed; ``num_args``: how many operands a call takes."""
    opt_einsum = pytest.importorskip("opt_einsum")
    ours = einc.contract_expression(*make(), constants=constants)
    theirs = opt_einsum.contract_expression(*[a.numpy() if isinstance(a, torch.Tensor) else a for a in make()],
                                            constants=constants)
    assert ours.contraction == theirs.contraction
    assert ours.num_args == theirs.num_args == num_args


def test_named_expression_contraction_and_num_args():
    expr = einc.contract_expression("b (h d), h d e -> b (h e)", (3, 8), _t(2, 4, 5), constants=[1])
    assert expr.contraction == "b (h d),[ h d e ]-> b (h e)"
    assert expr.num_args == 1
    assert einc.contract_expression("b (h d), e (h d) -> b h e", (3, 8), (5, 8), h=2).num_args == 2


def test_interleaved_labels_of_any_sortable_kind():
    """opt_einsum's interleaved form takes any hashable labels that sort together (it
    letters them in sorted order): strings and tuples as well as ints, in contract,
    contract_path and contract_expression."""
    import opt_einsum
    a, b = torch.randn(2, 3, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    torch.testing.assert_close(einc.contract(a, ["x", "y"], b, ["y", "z"], ["z", "x"]), (a @ b).T)
    torch.testing.assert_close(einc.contract(a, [("p", 1), ("p", 2)], b, [("p", 2), ("q", 0)]), a @ b)
    torch.testing.assert_close(einc.contract(a.T, ["x", ...], b, ["x", "y"]), a @ b)
    for args in [(a, ["x", "y"], b, ["y", "z"]), (a, ["x", "y"], b, ["y", "z"], ["z", "x"])]:
        path, info = einc.contract_path(*args)
        want, want_info = opt_einsum.contract_path(*[x.numpy() if isinstance(x, torch.Tensor) else x for x in args])
        assert path == want and info.opt_cost == want_info.opt_cost and info.size_list == want_info.size_list
    expr = einc.contract_expression((2, 3), ["x", "y"], (3, 4), ["y", "z"], ["x", "z"])
    assert expr.contraction == "ab,bc->ac"
    torch.testing.assert_close(expr(a, b), a @ b)
    with pytest.raises(OperandTypeError, match="must sort together"):
        einc.contract(a, ["x", 1], b, [1, 2])
    # negative ints sort with the others (torch's sublists take none)
    torch.testing.assert_close(einc.contract(a, [-1, 0], b, [0, 1], [1, -1]), (a @ b).T)
    assert einc.contract_path(a, [-1, 0], b, [0, 1], [-1, 1])[1].eq == "ab,bc->ac"
    torch.testing.assert_close(einc.contract_expression((2, 3), [-5, 7], (3, 4), [7, -2])(a, b), a @ b)
    # past 26 labels and no output, opt_einsum's implied output is in its letters' order
    # ('A'-'Z', its 27th to 52nd, before 'a'-'z'), not the labels' sorted order
    shape = [1] * 27
    shape[0], shape[26] = 3, 2
    x = torch.randn(shape, dtype=torch.float64)
    for labels in [list(range(27)), [10 ** 7, *range(1, 27)], [f"l{i:02d}" for i in range(27)]]:
        want = opt_einsum.contract(x, labels, backend="torch")
        for got in [einc.contract(x, labels), einc.contract_expression(tuple(shape), labels)(x)]:
            assert got.shape == want.shape and torch.equal(got, want)
        assert einc.contract_path(x, labels)[1].eq == opt_einsum.contract_path(x.numpy(), labels)[1].eq
    # past 52 labels too, the path's text in opt_einsum's letters (U+00C0 on past 'Z')
    x = torch.randn([1] * 53, dtype=torch.float64)
    info, want = einc.contract_path(x, list(range(53)))[1], opt_einsum.contract_path(x.numpy(), list(range(53)))[1]
    assert (info.eq, info.input_subscripts, info.output_subscript, info.size_dict) == \
        (want.eq, want.input_subscripts, want.output_subscript, want.size_dict)
    # ints of any size, past einc's letters too (they sort as the others)
    torch.testing.assert_close(einc.contract(a, [10 ** 6, 1], b, [1, 2]), (a @ b).T)
    assert einc.contract_path(a, [10 ** 6, 1], b, [1, 2])[1].eq == \
        opt_einsum.contract_path(a.numpy(), [10 ** 6, 1], b.numpy(), [1, 2])[1].eq
    torch.testing.assert_close(einc.contract_expression((2, 3), [10 ** 9, 5], (3, 4), [5, 2 ** 70])(a, b), a @ b)
    # one operand with tuple labels and no output: a sublist, not the operands as one list
    sq = torch.randn(2, 2, dtype=torch.float64)
    for labels, want in [([(0, 1), (0, 1)], "aa->"), ([("b",), ("a",)], "ba->ab")]:
        x = sq if len(labels[0]) == 2 else torch.randn(3, 1, dtype=torch.float64)
        assert einc.contract_path(x, labels)[1].eq == opt_einsum.contract_path(x.numpy(), labels)[1].eq == want


def test_contract_path_takes_the_operands_as_one_list():
    """contract_path takes the operands as one list, as einsum and explain do, rather than
    raising a bare 'only one element tensors' ValueError; a lone shape stays a shape."""
    x, w = torch.randn(2, 3, 32), torch.randn(8, 4, 5)
    assert einc.contract_path("b n (h d), h d e -> b n (h e)", [x, w], h=8)[0] == [(0, 1)]
    a, b, c = torch.randn(2, 3), torch.randn(3, 4), torch.randn(4, 5)
    path, info = einc.contract_path("ij,jk,kl->il", [a, b, c])
    want_path, want = einc.contract_path("ij,jk,kl->il", a, b, c)
    assert path == want_path and info.opt_cost == want.opt_cost
    assert einc.contract_path("ij->i", (3, 4))[1].size_dict == {"i": 3, "j": 4}


def test_explain_and_contract_path_spell_the_callers_letters_after_an_equal_equation_ran():
    """The plan cache keys on the canonical equation: a plan cached for ``ij,jk,kl->il``
    serves ``ab,bc,cd->ad`` too, and explain and contract_path showed its letters."""
    a, b, c = torch.randn(4, 5), torch.randn(5, 6), torch.randn(6, 3)
    einc.einsum("ij,jk,kl->il", a, b, c)
    info = einc.explain("ab,bc,cd->ad", a, b, c)
    assert info.plan.equation == "ab,bc,cd->ad" and "Complete contraction:  ab,bc,cd->ad" in str(info)
    assert {info.plan.describe(s) for s in info.plan.steps} <= {"bc,cd->bd", "ab,bd->ad", "ab,bc->ac", "ac,cd->ad"}
    _, path_info = einc.contract_path("ab,bc,cd->ad", a, b, c)
    assert path_info.eq == "ab,bc,cd->ad" and path_info.size_dict == {"a": 4, "b": 5, "c": 6, "d": 3}
    _, path_info = einc.contract_path(a, [0, 1], b, [1, 2], c, [2, 3], [0, 3])     # opt_einsum's letters
    assert path_info.eq == "ab,bc,cd->ad"


# opt_einsum's doors as opt_einsum reads an equation: any character but ',', '.', ' ' and
# one '->' is an index (einsum keeps torch's reading); its output implied in its order
OPT_EINSUM_CHARACTERS = [
    ("i1,1j->ij", [(2, 3), (3, 4)]), ("i1,1j", [(2, 3), (3, 4)]), ("#@,@$", [(2, 3), (3, 4)]),
    ("a1,1B", [(2, 3), (3, 4)]), ("ab,12", [(2, 3), (4, 5)]), ("0b,b1->01", [(1, 3), (3, 4)]),
    ("ii1,1j", [(2, 2, 3), (3, 4)]), ("i1,1j,j2->i2", [(2, 3), (3, 4), (4, 5)]), ("$!,!%,%&", [(2, 3), (3, 4), (4, 5)]),
    ("...1,1j->...j", [(5, 2, 3), (3, 4)]), ("...1,1j", [(5, 2, 3), (3, 4)]), ("1...,1->...", [(2, 3), (2,)]),
    ("i1, 1j -> ij", [(2, 3), (3, 4)]),
]


@pytest.mark.parametrize("eq, shapes", OPT_EINSUM_CHARACTERS)
def test_opt_einsum_doors_take_any_character_as_an_index_as_opt_einsum_does(eq, shapes):
    """``oe.contract("i1,1j->ij", a, b)`` runs in opt_einsum; einc raised "'1' is not a
    letter".  The result, the implied output's order, PathInfo's spelling (the caller's
    characters, ellipses spelled out with opt_einsum's letters) and the expression's
    ``contraction`` are opt_einsum's; ``einc.einsum`` still refuses what torch.einsum does."""
    opt_einsum = pytest.importorskip("opt_einsum")
    ops = _ops(*shapes)
    want = opt_einsum.contract(eq, *ops, backend="torch")
    torch.testing.assert_close(einc.contract(eq, *ops), want)
    path, info = einc.contract_path(eq, *shapes)
    _, ref = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=path)
    for name in ("eq", "input_subscripts", "output_subscript", "size_dict", "indices", "naive_cost", "opt_cost"):
        assert getattr(info, name) == getattr(ref, name), name
    assert f"Complete contraction:  {eq}\n" in str(info)
    expr = einc.contract_expression(eq, *shapes)
    assert expr.contraction == opt_einsum.contract_expression(eq, *shapes).contraction == eq
    torch.testing.assert_close(expr(*ops), want)
    with pytest.raises(errors.EquationError, match="is not a letter"):
        einc.einsum(eq, *ops)


def test_opt_einsum_characters_in_errors_and_with_constants():
    """An error names einc's letters and says which character each stands for; constants
    fold as in any expression; a space between two indices still reads as named notation."""
    a, b, c = _ops((2, 3), (3, 4), (4, 5))
    with pytest.raises(errors.ShapeError, match=r"(?s)in einc's letters: a for '1'.*"):
        einc.contract("i1,1j->ij", a, c)
    with pytest.raises(errors.ShapeError, match=r"(?s)in einc's letters: a for '1'.*"):    # (an expression's call too)
        einc.contract_expression("i1,1j->ij", (2, 3), (3, 4))(a, c)
    with pytest.raises(errors.PathError) as error:       # (an error not about the equation: no such line)
        einc.contract("i1,1j->ij", a, b, memory_limit="foo")
    assert "memory_limit" in str(error.value) and "opt_einsum reads it" not in str(error.value)
    expr = einc.contract_expression("i1,1j,j#->i#", a, b.shape, c, constants=[0, 2])
    assert expr.contraction == "[i1],1j,[j#]->i#"
    torch.testing.assert_close(expr(b), a @ b @ c)
    with pytest.raises(EincError, match="named axes"):
        einc.contract("i 1,1 j->ij", a, b)
    # a stray '-' or '>' is opt_einsum's error, not one about letters (every other character is an index)
    for eq, at in [("i1,1j->i-j", 8), ("i1,1j-ij", 5), ("ij,jk->->ik", 7)]:
        with pytest.raises(errors.EquationError, match=rf"can only contain one '->'(?s:.*)\n  {' ' * at}\^$"):
            einc.contract(eq, a, b)


def test_a_callers_optimizer_sees_the_callers_characters_once_under_max_input():
    """A PathOptimizer is called as opt_einsum calls it for the same call: the caller's
    characters (not einc's internal letters a, b, c...), ellipsis dimensions and broadcast sizes
    spelled as opt_einsum spells them, and under ``memory_limit="max_input"`` once, with
    opt_einsum's number (a broadcast operand not counted at its own size), not asked again
    without the limit where its path does not keep to it."""
    opt_einsum = pytest.importorskip("opt_einsum")

    class Recording(opt_einsum.paths.PathOptimizer):
        def __init__(self):
            self.seen = []

        def __call__(self, inputs, output, size_dict, memory_limit=None):
            self.seen.append((inputs, output, size_dict, memory_limit))
            return opt_einsum.paths.greedy(inputs, output, size_dict, memory_limit)

    chain = [(2, 3), (3, 4), (4, 5)]
    cases = [("ij,jk,kl->il", chain, None), ("i1,1j,j#->i#", chain, None),
             ("...a,...a,a", [(4, 4), (4, 4, 4), (4,)], None),
             ("ab,cb,b->c", [(10, 1), (3, 100), (100,)], "max_input"),     # a broadcast operand the largest
             ("abc,ade,bdf,cef->", [(10, 10, 10)] * 4, "max_input"),        # every path past the limit: sliced
             ("#@,@$,$%", chain, "max_input"),
             ("ij,jk,kl->il", [(2, 0), (0, 3), (3, 4)], "max_input"),       # a sum over nothing: zeros
             ("ij,jk,kl->il", [(2, 0), (0, 3), (3, 4)], 10)]
    for eq, shapes, limit in cases:
        theirs = Recording()
        opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=theirs, memory_limit=limit)
        assert len(theirs.seen) == 1
        for door in ("contract_path", "contract", "contract_expression"):
            ours = Recording()
            args = [torch.randn(s) for s in shapes] if door == "contract" else shapes
            getattr(einc, door)(eq, *args, optimize=ours, memory_limit=limit)
            assert ours.seen == theirs.seen, (door, eq)
    # the interleaved form: opt_einsum's letters for its labels (einc's sublists letter 0 'A')
    for subs in [([0, 1], [1, 2], [2, 3]), (["x", "y"], ["y", "z"], ["z", "w"]), ([0, 1], [1, 2], [2, 3], [3, 0])]:
        theirs = Recording()
        arrays = [torch.randn(s).numpy() for s in chain]
        opt_einsum.contract_path(*[x for pair in zip(arrays, subs) for x in pair], *subs[3:], optimize=theirs)
        for door in ("contract_path", "contract", "contract_expression"):
            ours = Recording()
            items = [torch.randn(s) for s in chain] if door == "contract" else chain
            getattr(einc, door)(*[x for pair in zip(items, subs) for x in pair], *subs[3:], optimize=ours)
            assert ours.seen == theirs.seen, (door, subs)
    seen = []

    def plain(inputs, output, size_dict, memory_limit=None):     # a function (einc's; opt_einsum takes none)
        seen.append(size_dict)
        return [(0, 1), (0, 1)]
    einc.contract_path("i1,1j,j#->i#", (2, 3), (3, 4), (4, 5), optimize=plain)
    assert seen == [{"i": 2, "1": 3, "j": 4, "#": 5}]


@pytest.mark.parametrize("door", ["contract", "contract_path", "contract_expression", "einsum"])
def test_an_unknown_optimize_name_is_a_key_error_as_in_opt_einsum(door):
    """opt_einsum raises KeyError for ``optimize="nope"``; einc's PathError (a ValueError)
    is a KeyError too, so either handler catches it, its str the message (not KeyError's
    repr of it)."""
    opt_einsum = pytest.importorskip("opt_einsum")
    shapes = [(2, 3), (3, 4), (4, 5)]
    with pytest.raises(KeyError):
        opt_einsum.contract_path(EQ, *shapes, shapes=True, optimize="nope")
    args = _ops(*shapes) if door in ("contract", "einsum") else shapes
    with pytest.raises(KeyError) as info:
        getattr(einc, door)(EQ, *args, optimize="nope")
    assert isinstance(info.value, PathError) and isinstance(info.value, ValueError)
    assert str(info.value).startswith("einsum(): unknown optimize='nope'; valid names are auto, ")


_CHAIN = [(2, 3), (3, 4), (4, 5)]
_DTYPE_EXPRESSIONS = [("ij,jk->ik", _CHAIN[:2], [1]), ("ij,jk->ik", _CHAIN[:2], [0]), ("ij,jk,kl->il", _CHAIN, [1, 2]),
                      ("ij,jk,kl->il", _CHAIN, [0, 1]), ("ij,jk,kl->ijl", _CHAIN, [0, 2]),
                      ("i1,1j,j#->i#", _CHAIN, [1, 2]), ("...ij,jk,kl->...il", [(6, 2, 3), (3, 4), (4, 5)], [1, 2])]
_MIXED = [(torch.float64, torch.float32), (torch.float32, torch.float64), (torch.bool, torch.int32),
          (torch.float64, torch.bool), (torch.int32, torch.float64), (torch.complex64, torch.float32)]


@pytest.mark.parametrize("eq, shapes, constants", _DTYPE_EXPRESSIONS)
def test_an_expression_with_constants_raises_contract_s_dtype_error(eq, shapes, constants):
    """A call of an expression with constants runs what the constants' folding leaves, spelled in
    the graph's letters; its dtype error is what contract raises on the same operands, not
    one naming that remainder ('ab,bc,cd->ad', 'cd,ac->ad') and the folded values' dtypes;
    under autocast, the remainder's error naming the caller's equation."""
    for constant, variable in _MIXED:
        ops = [torch.ones(s, dtype=constant if k in constants else variable) for k, s in enumerate(shapes)]
        variables = [o for k, o in enumerate(ops) if k not in constants]
        with pytest.raises((DtypeError, errors.UnsupportedDtypeError)) as want:
            einc.contract(eq, *ops)
        try:
            expr = einc.contract_expression(eq, *[o if k in constants else o.shape for k, o in enumerate(ops)],
                                            constants=constants)
        except errors.UnsupportedDtypeError:     # (bool constants folded: below)
            assert constant is torch.bool and len(constants) == 2
            continue
        with pytest.raises(type(want.value)) as got:
            expr(*variables)
        assert type(got.value) is type(want.value) and str(got.value) == str(want.value), (constant, variable)
        if variable.is_floating_point and constant.is_floating_point:
            with torch.autocast("cpu"), pytest.raises((DtypeError, errors.UnsupportedDtypeError)) as got:
                expr(*variables)
            assert repr(eq) in str(got.value), str(got.value)


def test_a_fold_s_dtype_error_names_the_step_in_the_callers_letters():
    """Constants a step folds as the expression is built, of a dtype torch has no product for
    (bool): the error names the step in the caller's letters ('xy,yz->xz') and the caller's
    equation, not in the graph's ('ab,bc->ac')."""
    a, b = torch.ones(2, 3, dtype=torch.bool), torch.ones(3, 4, dtype=torch.bool)
    with pytest.raises(errors.UnsupportedDtypeError) as info:
        einc.contract_expression("xy,yz,zw->xw", a, b, (4, 5), constants=[0, 1])
    assert "'xy,yz->xz'" in str(info.value) and "'xy,yz,zw->xw'" in str(info.value), str(info.value)
    assert "'ab,bc->ac'" not in str(info.value)


def test_an_expression_s_numpy_constant_is_refused_as_contract_refuses_a_numpy_operand():
    """einc contracts torch tensors: a numpy array as a constant gets contract's kind of
    error, naming the array's type and the fix, not one about the constant's position (an
    array elsewhere is a shape to plan with, as the docs say)."""
    np = pytest.importorskip("numpy")
    a = np.ones((2, 3))
    with pytest.raises(OperandTypeError):
        einc.contract("ij,jk->ik", a, torch.ones(3, 4))
    with pytest.raises(OperandTypeError, match=r"constant 0 must be a torch\.Tensor, got ndarray.*as_tensor"):
        einc.contract_expression("ij,jk->ik", a, (3, 4), constants=[0])
    expr = einc.contract_expression("ij,jk->ik", torch.as_tensor(a), (3, 4), constants=[0])
    b = torch.randn(3, 4, dtype=torch.float64)
    assert torch.allclose(expr(b), torch.einsum("ij,jk->ik", torch.as_tensor(a), b))
    assert tuple(einc.contract_expression("ij,jk->ik", a, (3, 4)).shapes) == ((2, 3), (3, 4))
    with pytest.raises(ArgumentError, match="constant 1 must be the position of a tensor"):
        einc.contract_expression("ij,jk->ik", a, (3, 4), constants=[1])
