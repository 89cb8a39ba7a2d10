"""Drop-in cases that peer test suites (PyTorch's, numpy's, opt_einsum's) exercise with einc
in place of the function under test: einc gives the peer's answer, dtype and error on each
(a wrong answer or a mismatch there is one a peer's user would meet)."""

import random
import re

import numpy as np
import pytest
import torch

import einc
from einc import errors

FLOATS = [torch.float32, torch.float64, torch.complex64, torch.bfloat16]


def _rand(shape, dtype):
    return torch.randn(shape, dtype=torch.float64).to(dtype) if not dtype.is_complex else \
        torch.randn(shape, dtype=dtype)


# ---------------------------------------------------------------- size-1 summed dimension

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("equation,shape", [("ij->j", (1, 4)), ("bi->i", (1, 5)), ("ij->i", (3, 1)),
                                             ("bij->j", (1, 1, 3)), ("ij->", (1, 1)), ("ii->", (1, 1))])
def test_summed_size_one_dimension_is_a_sum(equation, shape, dtype):
    x = _rand(shape, dtype)
    expected = torch.einsum(equation, x)
    for out in (einc.einsum(equation, x),
                einc.contract_expression(equation, shape)(x),
                einc.einsum(x, [ord(c) - 97 for c in equation.split("->")[0]],
                            [ord(c) - 97 for c in equation.split("->")[1]])):
        assert out.shape == expected.shape and out.dtype == expected.dtype
        torch.testing.assert_close(out, expected)


def test_summed_size_one_dimension_under_autograd():
    x = torch.randn(1, 4, requires_grad=True)
    out = einc.einsum("ij->j", x)
    torch.testing.assert_close(out, x[0])
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(1, 4))


# ---------------------------------------------------------------- an ellipsis in the output alone

@pytest.mark.parametrize("equation, shapes", [
    ("a,a->...", [(2,), (2,)]), ("a,b->ab...", [(2,), (3,)]), ("a,b->...ab", [(2,), (3,)]),
    ("ab,b->a...", [(2, 3), (3,)]), ("ab,bc->...ac", [(2, 3), (3, 4)]), ("ab,bc->a...c", [(2, 3), (3, 4)]),
    ("ab->...ba", [(2, 3)]), ("ab,bc,cd->...ad", [(2, 3), (3, 4), (4, 5)]),
])
def test_an_ellipsis_only_in_the_output_covers_no_dimension(equation, shapes):
    # a small two-operand call's class plan took the output's '...' for an index of size 1:
    # "a,a->..." gave shape (1,), "ab,b->a..." raised ValueError
    ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
    want = torch.einsum(equation, *ops)
    for _ in range(2):              # the first call and the cached one
        got = einc.einsum(equation, *ops)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)
    assert einc.explain(equation, *ops).to_dict()["equation"]


# ---------------------------------------------------------------- sublist implicit output

def test_sublist_implicit_output_follows_the_ints():
    y = torch.randn(3, 4)
    torch.testing.assert_close(einc.einsum(y, [0, 26]), torch.einsum(y, [0, 26]))
    torch.testing.assert_close(einc.einsum(y, [0, 26]), y)
    a, b = torch.randn(2, 3), torch.randn(3, 5)
    torch.testing.assert_close(einc.einsum(a, [0, 1], b, [1, 30]), a @ b)
    torch.testing.assert_close(einc.einsum(a, [0, 1], b, [1, 30]), torch.einsum(a, [0, 1], b, [1, 30]))
    # Beyond torch's 52: still ordered by the int.
    torch.testing.assert_close(einc.einsum(y, [60, 53]), y.T)
    torch.testing.assert_close(einc.einsum(y, [53, 1000]), y)
    torch.testing.assert_close(einc.einsum(a, [51, 1], b, [1, 25]), (a @ b).T)


def test_sublist_with_two_ellipses_raises_like_torch():
    x = torch.randn(2, 3, 4)
    with pytest.raises(RuntimeError):
        torch.einsum(x, [0, ..., ...])
    with pytest.raises(errors.EquationError, match="ellipsis was already found"):
        einc.einsum(x, [0, ..., ...])


@pytest.mark.parametrize("sublist", [np.array([0, 1]), range(2), [np.int64(0), np.int32(1)], (0, 1),
                                     torch.tensor([0, 1]), [False, True], [np.False_, np.True_],
                                     torch.tensor([False, True])])
def test_sublists_of_numpy_arrays_ranges_and_numpy_ints(sublist):
    x = torch.randn(3, 4)
    torch.testing.assert_close(einc.einsum(x, sublist, [1]), torch.einsum(x, sublist, [1]))
    torch.testing.assert_close(einc.einsum(x, np.array([0, 0])[:1].tolist() + [1], np.array([1])), x.sum(0))


# ---------------------------------------------------------------- result dtype = torch's

@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.uint8, torch.int64])
@pytest.mark.parametrize("equation,shapes", [("ll...B,F...B", [(2, 2, 0), (5, 0)]), ("ij,jk->ik", [(2, 0), (0, 3)]),
                                             ("ij->j", [(0, 3)]), ("i,i->", [(0,), (0,)]),
                                             ("...ij,...jk->...ik", [(2, 1, 1), (2, 1, 1)]),
                                             ("ij,j->i", [(3, 1), (1,)]), ("ii->i", [(3, 3)])])
def test_integer_and_bool_result_dtype_is_torchs(equation, shapes, dtype):
    ops = [torch.randint(0, 2, s).to(dtype) for s in shapes]
    expected = torch.einsum(equation, *ops)
    out = einc.einsum(equation, *ops)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    assert torch.equal(out, expected)


MIXED = [torch.bool, torch.int32, torch.int64, torch.uint8, torch.float16, torch.bfloat16, torch.float32,
         torch.float64, torch.complex64]


def test_mixed_dtypes_are_taken_and_refused_as_torch_einsum_takes_and_refuses_them():
    # torch's path may promote them before any product (a bool mask, a float16 scale: taken)
    # or meet them in one matrix product (refused); einc answered or refused as its own path
    # fell: a DtypeError for `bd,bd,d->b` with a bool mask, a float32 answer for
    # `a,a,ba->b` where torch refuses a float16 operand
    import random
    rng = random.Random(5)
    taken = refused = 0
    for _ in range(300):
        equation, shapes = rng.choice([("bd,bd,d->b", [(4, 8), (4, 8), (8,)]), ("a,a,ab->b", [(3,), (3,), (3, 4)]),
                                       ("a,a,ba->b", [(2,), (2,), (2, 2)]), ("ij,jk->ik", [(3, 4), (4, 2)]),
                                       ("ij,ij->ij", [(3, 4), (3, 4)]), ("ab,bc,c->a", [(2, 3), (3, 5), (5,)]),
                                       ("i,i,i->", [(5,), (5,), (5,)])])
        kinds = [rng.choice(MIXED) for _ in shapes]
        if len(set(kinds)) == 1:
            continue
        g = torch.Generator().manual_seed(rng.randrange(10 ** 6))
        ops = [(torch.randn(s, generator=g, dtype=torch.float64) * 3).to(d) for s, d in zip(shapes, kinds)]
        try:
            expected = torch.einsum(equation, *ops)
        except RuntimeError as e:
            with pytest.raises(errors.EincError) as err:
                einc.einsum(equation, *ops)
            assert isinstance(err.value, type(e)), (equation, kinds, err.value)
            refused += 1
            continue
        got = einc.einsum(equation, *ops)
        assert got.dtype == expected.dtype, (equation, kinds)
        wide = torch.complex128 if got.is_complex() else torch.float64
        oracle = torch.einsum(equation, *[o.to(wide) for o in ops])
        torch.testing.assert_close(got.to(wide), oracle, rtol=2e-2, atol=2e-2)     # (16-bit results round)
        taken += 1
    assert taken > 30 and refused > 30, (taken, refused)


def test_bool_contraction_over_size_one_axes():
    b = torch.rand(2, 1, 1) > 0.5
    expected = torch.einsum("...ij,...jk->...ik", b, b)
    assert torch.equal(einc.einsum("...ij,...jk->...ik", b, b), expected)


def test_bool_contraction_that_torch_cannot_run_raises_the_same_type():
    a = torch.rand(2, 3) > 0.5
    with pytest.raises(NotImplementedError):
        torch.einsum("ij,jk->ik", a, a.T)
    with pytest.raises(NotImplementedError, match="Bool"):
        einc.einsum("ij,jk->ik", a, a.T)


@pytest.mark.parametrize("equation,shapes", [("ij,ij->i", [(3, 4), (3, 4)]), ("ij->i", [(3, 4)]),
                                             ("ij,jk->ik", [(3, 4), (4, 2)]), ("i,j->ij", [(3,), (4,)]),
                                             ("ij,jk,kl->il", [(3, 4), (4, 2), (2, 2)]),
                                             ("bij,bij->b", [(2, 3, 4), (2, 3, 4)])])
@pytest.mark.parametrize("base", [torch.float32, torch.float64])
def test_autocast_result_dtype_is_torchs(equation, shapes, base):
    ops = [torch.randn(s, dtype=base) for s in shapes]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch.einsum(equation, *ops)
        out = einc.einsum(equation, *ops)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out.double(), expected.double(), rtol=3e-2, atol=3e-2 * shapes[0][-1])


def test_autocast_with_size_one_sums_takes_and_types_as_torch_does():
    # a size-1 sum runs as a multiply, which does not autocast: a 16-bit product's result
    # meets the other 16-bit dtype there and torch promotes both to float32, also from
    # operands it refuses to mix without autocast; a sweep of random mixes of dtypes
    rng = random.Random(3)
    equations = ["ij,jk,kl->il", "ijk,kl,lm->im", "ij,jk,kl,lm->im", "ij,j->i", "bij,bjk->bik"]
    kinds = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.bool]
    taken = 0
    for _ in range(300):
        equation = rng.choice(equations)
        terms = equation.split("->")[0].split(",")
        sizes = {c: rng.choice([1, 1, 2, 3]) for c in set("".join(terms))}
        g = torch.Generator().manual_seed(rng.randrange(2 ** 31))
        ops = [(3 * torch.randn([sizes[c] for c in t], generator=g)).to(rng.choice(kinds)) for t in terms]
        with torch.autocast("cpu", dtype=rng.choice([torch.float16, torch.bfloat16])):
            try:
                expected = torch.einsum(equation, *ops)
            except RuntimeError as e:
                with pytest.raises(type(e)):
                    einc.einsum(equation, *ops)
                continue
            out = einc.einsum(equation, *ops)
        taken += 1
        assert out.dtype == expected.dtype, (equation, [(o.shape, o.dtype) for o in ops])
        # (16-bit products round at other steps than torch's where einc's path differs, a
        # size class's plan among them: each within 16-bit rounding of the exact sums, of
        # the sums of the terms' magnitudes, as torch's is)
        exact = torch.einsum(equation, *[o.double() for o in ops])
        bound = 0.05 * torch.einsum(equation, *[o.double().abs() for o in ops]) + 0.1
        for got in (out, expected):
            assert ((got.double() - exact).abs() <= bound).all(), (equation, [(o.shape, o.dtype) for o in ops])
    assert taken > 100


# ---------------------------------------------------------------- accept / raise like torch

def test_no_arguments_and_too_many_operands_raise_value_error():
    with pytest.raises(ValueError):
        torch.einsum()
    with pytest.raises(ValueError, match="at least one operand"):
        einc.einsum()
    x = torch.randn(3)
    with pytest.raises(ValueError):
        torch.einsum("i,i,i", x, x, x, x)
    with pytest.raises(ValueError, match="Number of einsum subscripts, 3, must be equal to the number of operands"):
        einc.einsum("i,i,i", x, x, x, x)


# ---------------------------------------------------------------- opt_einsum users

def test_contract_expression_keeps_no_constant_it_folded():
    """Folded constants are not needed again (only narrow integers keep theirs, for calls
    of another dtype): a float expression held every constant as given besides its fold."""
    import gc
    import weakref
    b, c = torch.randn(30, 40), torch.randn(40, 5)
    refs = [weakref.ref(b), weakref.ref(c)]
    expr = einc.contract_expression("ab,bc,cd->ad", (200, 30), b, c, constants=[1, 2])
    assert [t.shape for t in expr._folded] == [(30, 5)]     # b @ c, folded (its plan contracts them first)
    want = torch.randn(200, 30)
    expected = want @ (b @ c)
    del b, c
    gc.collect()
    assert all(r() is None for r in refs)
    torch.testing.assert_close(expr(want), expected, rtol=1e-4, atol=1e-4)


def test_contract_expression_with_constants_folds_them_once():
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 6)
    expr = einc.contract_expression("ij,jk,kl->il", a, b, (5, 6), constants=[0, 1])
    torch.testing.assert_close(expr(c), a @ b @ c)
    assert len(expr._folded) == 1 and expr._folded[0].shape == (3, 5)   # a @ b, contracted once
    with pytest.raises(errors.OperandCountError, match="constants"):
        expr(a, b, c)
    with pytest.raises(errors.ArgumentError, match="constant 2"):
        einc.contract_expression("ij,jk,kl->il", a, b, (5, 6), constants=[2])


def _suite(least, most):
    """The suite's workloads of ``least`` to ``most`` operands: ``(id, equation, CPU shapes)``."""
    import json
    from pathlib import Path
    suite = json.loads((Path(__file__).resolve().parents[2] / "bench" / "suite.json").read_text())["workloads"]
    return [(w["id"], w["equation"], [tuple(s) for s in w["variants"]["cpu"]["shapes"]]) for w in suite
            if least <= len(w["variants"]["cpu"]["shapes"]) <= most]


@pytest.mark.parametrize("workload", _suite(3, 6), ids=lambda w: w[0])
def test_contract_expression_constants_give_einsums_bits(workload, new_shapes):
    """An expression with constants (each operand alone, and all but each one) runs the
    plan's steps as einsum's call of the whole equation does: the same bits.  The folded
    remainder took its variables first and the constants after, so that a step met its
    operands the other way round (other layouts, permutes in each small call; 18 of 76
    expressions of these workloads differed from einsum with per-shape plans, 8 in float32
    with size classes)."""
    _, eq, shapes = workload
    g = torch.Generator().manual_seed(0)
    ops = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    want = einc.einsum(eq, *ops)
    n = len(ops)
    for k in range(n):
        for constants in ([k], [j for j in range(n) if j != k]):
            expr = einc.contract_expression(eq, *[o if j in constants else o.shape for j, o in enumerate(ops)],
                                            constants=constants)
            assert torch.equal(expr(*[o for j, o in enumerate(ops) if j not in constants]), want)


@pytest.mark.parametrize("eq, declared, called, constants", [
    ("ij,jk->ik", [(2, 1), (3, 4)], [(2, 3), (3, 4)], [1]),                        # against a constant's size
    ("ij,jk,kl->il", [(2, 1), (3, 4), (4, 5)], [(2, 3), (3, 4), (4, 5)], [2]),      # against a variable's
    ("...j,jk->...k", [(2, 1), (3, 4)], [(2, 3), (3, 4)], [1]),
    ("bij,bjk->bik", [(1, 2, 3), (1, 3, 4)], [(6, 2, 3), (1, 3, 4)], [1]),         # size 1 everywhere: shared
    ("ij,jk->ik", [(2, 3), (3, 4)], [(2, 1), (3, 4)], [1]),                        # to size 1: broadcast
])
def test_contract_expression_constants_where_a_broadcast_dimension_grows(eq, declared, called, constants):
    """A variable's dimension of size 1 that the plan broadcast against a larger size, given
    another size by a call, runs the whole equation, as einsum and opt_einsum's expression do;
    other sizes run the folded remainder.  Constants folded with that dimension as an index of
    its own would give the product of the sums (``ij,jk->ik`` planned for (2, 1) and called with
    (2, 3): sum_j a times sum_j c)."""
    g = torch.Generator().manual_seed(0)
    ops = [torch.randn(s, generator=g, dtype=torch.float64) for s in called]
    args = [ops[k] if k in constants else s for k, s in enumerate(declared)]
    expr = einc.contract_expression(eq, *args, constants=constants)
    variables = [o for k, o in enumerate(ops) if k not in constants]
    torch.testing.assert_close(expr(*variables), torch.einsum(eq, *ops))
    torch.testing.assert_close(expr(*[o[..., :1] for o in variables]),     # (the last dimension to size 1)
                               torch.einsum(eq, *[o if k in constants else o[..., :1] for k, o in enumerate(ops)]))


@pytest.mark.parametrize("constants", [[0, 1], [1], [0, 1, 2, 3], [2, 3]])
@pytest.mark.parametrize("optimize", ["path", "random-greedy-object", "dp-object", "greedy"])
def test_contract_expression_constants_with_a_path_or_an_optimizer_run_the_planned_path(constants, optimize):
    """The remainder after folding runs the rest of the planned path, over its operands
    (variables first, then the constants left), not the caller's path or optimizer, which are
    for the whole equation: on the remainder a path would raise PathError, a RandomGreedy
    instance ValueError, and where nothing is folded the path would run on reordered operands
    (48x the planned flops)."""
    import opt_einsum as oe
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 64), (64, 2), (2, 64), (64, 3)]
    ops = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    eq = "ab,bc,cd,de->ae"
    chosen = {"path": lambda: [(0, 1), (0, 1), (0, 1)], "random-greedy-object": lambda: oe.RandomGreedy(max_repeats=4),
              "dp-object": oe.DynamicProgramming, "greedy": lambda: "greedy"}[optimize]()
    args = [o if k in constants else o.shape for k, o in enumerate(ops)]
    expr = einc.contract_expression(eq, *args, constants=constants, optimize=chosen)
    variables = [o for k, o in enumerate(ops) if k not in constants]
    torch.testing.assert_close(expr(*variables), torch.einsum(eq, *ops))
    torch.testing.assert_close(expr(*variables), torch.einsum(eq, *ops))           # a second call too
    ran = einc.explain(expr._text, *expr._operands(variables, expr._folded), optimize=expr._options.resolve()[1])
    constant, folded = set(constants), 0
    for step in expr.plan.steps:
        if all(v in constant for v in step.operands):
            constant.add(step.result)
            folded += step.flops
    if variables:       # (all constant: a copy of the folded result is left)
        assert ran.plan.flops == expr.plan.flops - folded


def test_contract_expression_interleaved_and_contract_path():
    x, y, z = (torch.randn(2, 2, dtype=torch.float64) for _ in "xyz")
    expr = einc.contract_expression((2, 2), [0, 1], (2, 2), [1, 2], (2, 2), [2, 3], [3, 0])
    torch.testing.assert_close(expr(x, y, z), torch.einsum(x, [0, 1], y, [1, 2], z, [2, 3], [3, 0]))
    path, info = einc.contract_path("ij,jk,kl->il", (8, 2), (2, 8), (8, 2))
    assert path == [(1, 2), (0, 1)]
    assert "Complete contraction:  ij,jk,kl->il" in str(info) and info.flops == 128
    ipath, _ = einc.contract_path(x, [0, 1], y, [1, 2], z, [2, 3], [3, 0])
    assert len(ipath) == 2


def test_contract_expression_runs_the_engine():
    """An expression call is an einsum call: torch's dtype, autograd, and the plan cache."""
    expr = einc.contract_expression("ij,ij->", (1, 3), (1, 3))
    a = torch.randint(0, 3, (1, 3), dtype=torch.int32)
    assert expr(a, a).dtype == torch.einsum("ij,ij->", a, a).dtype
    x = torch.randn(1, 3, requires_grad=True)
    expr(x, x).backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())


def test_a_sparse_operand_gets_torchs_own_einsum():
    """A sparse (non-strided) first operand runs torch's einsum as torch runs it: the
    transpose of a sparse tensor stays sparse, and what torch cannot do raises einc's
    LayoutError (a RuntimeError, as torch's) naming the operand and its layout."""
    s = torch.randn(3, 4).to_sparse()
    for f in (einc.einsum, lambda eq, x: einc.einsum(eq, x.requires_grad_())):
        out = f("ij->ji", s.clone())
        assert out.layout == torch.sparse_coo
        torch.testing.assert_close(out.to_dense(), s.to_dense().T)
    with pytest.raises(RuntimeError):
        torch.einsum("ij,jk->ik", s, torch.randn(4, 2))
    with pytest.raises(errors.LayoutError, match="operand 0 is a torch.sparse_coo tensor"):
        einc.einsum("ij,jk->ik", s, torch.randn(4, 2))


_LAYOUTS = {"coo": lambda t: t.to_sparse(), "csr": lambda t: t.to_sparse_csr() if t.dim() == 2 else t.to_sparse()}


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", sorted(_LAYOUTS))
@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,ij->ij", [(3, 4), (3, 4)]), ("i,i->i", [(4,), (4,)]),
    ("ij,ij->", [(3, 4), (3, 4)]), ("i,j->ij", [(3,), (4,)]), ("ij,kl->ijkl", [(2, 3), (3, 2)]),
    (",ij->ij", [(), (3, 4)]), ("ij,j->i", [(3, 4), (4,)]), ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)])])
def test_a_sparse_operand_anywhere_gets_torchs_right_answer_or_a_clear_error(layout, eq, shapes):
    """A sparse operand in any position, in every door, gets torch's answer where it is right
    (an elementwise product, say), else a LayoutError naming the operand and its layout; the
    inputs are left as they were.  einc's dense plan cannot run one ("unsupported memory
    format option Contiguous", "Sparse CSR tensors do not have is_contiguous", or a result
    where torch raises), and torch's own answer is wrong where it broadcasts one (``i,j->ij``
    keeps a sparse ``i``'s first column only)."""
    g = torch.Generator().manual_seed(0)
    dense = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    want = torch.einsum(eq, *dense)
    for k in range(len(shapes)):
        if not shapes[k]:
            continue
        ops = list(dense)
        ops[k] = _LAYOUTS[layout](dense[k])
        kept = [o.to_dense().clone() if o.layout != torch.strided else o.clone() for o in ops]
        for door in (einc.einsum, einc.contract, lambda e, *xs: einc.contract_expression(e, *shapes)(*xs)):
            try:
                got = door(eq, *ops)
            except errors.LayoutError as error:
                assert isinstance(error, RuntimeError)
                assert f"operand {k} is a {ops[k].layout} tensor" in str(error)
            else:
                torch.testing.assert_close(got.to_dense() if got.layout != torch.strided else got, want)
            for o, before in zip(ops, kept):
                torch.testing.assert_close(o.to_dense() if o.layout != torch.strided else o, before)


_HYBRID = {"coo": lambda t: t.to_sparse(), "hybrid": lambda t: t.to_sparse(1)}


@pytest.mark.parametrize("eq, shapes, sparse", [
    ("d,c->cd", [(3,), (1,)], {0: "coo"}), ("d,d->", [(3,), (1,)], {0: "coo"}),
    (",b,a", [(), (3,), (1,)], {1: "coo"}), ("d,dcd->cd", [(2,), (2, 1, 2)], {0: "coo"}),
    ("c,,c->c", [(3,), (), (1,)], {0: "coo"}), (",d,c->cd", [(), (1,), (1,)], {1: "coo", 2: "coo"}),
    ("dc,da->dca", [(3, 2), (3, 2)], {0: "hybrid"}), ("ad,d->", [(3, 1), (2,)], {0: "hybrid"}),
    ("cd,cab->cdab", [(2, 2), (2, 3, 1)], {0: "hybrid"})])
def test_a_sparse_operand_torch_answers_rightly_gets_torchs_answer(eq, shapes, sparse):
    """A sparse operand lacking an index of the equation at its full size is not refused
    where torch's order of work answers it rightly: torch sums a sparse operand's own index
    before any product, broadcasts it against a size 1 only, or broadcasts a hybrid tensor's
    dense dimensions, which it multiplies rightly.  There the call gives torch's own result,
    layout and bits, in every door."""
    g = torch.Generator().manual_seed(0)
    dense = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    ops = [_HYBRID[sparse[k]](d) if k in sparse else d for k, d in enumerate(dense)]
    want = torch.einsum(eq, *ops)
    torch.testing.assert_close(want.to_dense() if want.layout != torch.strided else want, torch.einsum(eq, *dense))
    for door in (einc.einsum, einc.contract, lambda e, *xs: einc.contract_expression(e, *shapes)(*xs)):
        got = door(eq, *ops)
        assert got.layout == want.layout and got.shape == want.shape
        assert torch.equal(got.to_dense(), want.to_dense()) if got.layout != torch.strided else torch.equal(got, want)


def test_a_sparse_product_torch_broadcasts_names_its_operands():
    """Where torch would broadcast the product of two sparse operands, the error names both,
    and asks for both dense."""
    x, y = torch.randn(3), torch.randn(4)
    with pytest.raises(errors.LayoutError, match=r"the product of operands 0 and 1 against a larger size in a "
                       r"product(.|\n)*pass operand 0.to_dense\(\) and operand 1.to_dense\(\)"):
        einc.einsum("i,i,j->ij", x.to_sparse(), x.to_sparse(), y)
    want = torch.einsum("i,i,j->ij", x, x, y)
    torch.testing.assert_close(einc.einsum("i,i,j->ij", x, x, y), want)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_out_takes_the_answer_of_a_sparse_operand_or_a_clear_error():
    """out= with a sparse operand, in every door: a strided out= takes the values of torch's
    sparse answer, a sparse COO one that answer, and an out= that cannot take the result (a
    CSR one) raises OutError and is left as it was, rather than torch's "copy_() between dense
    and sparse Tensors is not implemented" or a CSR copy error from inside the call."""
    x, y = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    want = torch.einsum("ij,ij->ij", x.to_sparse(), y)
    doors = (lambda *xs, out: einc.einsum("ij,ij->ij", *xs, out=out),
             lambda *xs, out: einc.contract("ij,ij->ij", *xs, out=out),
             lambda *xs, out: einc.contract_expression("ij,ij->ij", (3, 4), (3, 4))(*xs, out=out),
             lambda *xs, out: einc.einsum("i j, i j -> i j", *xs, out=out))
    for door in doors:
        out = torch.zeros(3, 4, dtype=torch.float64)
        assert door(x.to_sparse(), y, out=out) is out
        assert torch.equal(out, want.to_dense())
        out = torch.zeros(3, 4, dtype=torch.float64).to_sparse()
        assert door(x.to_sparse(), y, out=out) is out and out.layout == torch.sparse_coo
        assert torch.equal(out.to_dense(), want.to_dense())
        for out, ops in ((torch.zeros(3, 4, dtype=torch.float64).to_sparse_csr(), (x.to_sparse(), y)),
                         (torch.zeros(3, 4, dtype=torch.float64).to_sparse(), (x, y))):
            with pytest.raises(errors.OutError, match=f"out= is a {out.layout} tensor, which cannot take the result"):
                door(*ops, out=out)
            assert not out.to_dense().any()


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_explain_of_a_sparse_operand_says_the_call_is_torchs():
    """explain raised torch's "Sparse CSR tensors do not have strides" for a CSR operand, and
    for a COO one described the torch executor running a plan, where torch's einsum (or
    einc's LayoutError) answers the call."""
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    for k, s in ((1, x.to_sparse_csr()), (0, x.to_sparse())):
        ops = [y, s] if k else [s, y]
        shown = einc.explain("ij,ij->ij", *ops)
        assert shown.note.startswith(f"operand {k} is a {s.layout} tensor, which einc does not contract: torch's")
        assert shown.path == einc.explain("ij,ij->ij", (3, 4), (3, 4)).path
    assert "torch executor" in einc.explain("ij,ij->ij", x, y).note


def test_a_named_call_splitting_or_merging_a_sparse_tensor_is_a_clear_error():
    """A named call that splits a sparse operand's axis, or merges the axes of its result
    (torch's sparse answer), raises einc's LayoutError naming the tensor and its layout, in
    every door, not torch's bare "Could not run 'aten::view' ... 'SparseCPU'" or "reshape is
    not implemented for sparse tensors"; explain says the merge is of torch's result, not
    "a view of einc's contiguous result, no copy"."""
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(2))
    split = ("i (j k), i j k -> i j k", (x.to_sparse(), y.view(3, 2, 2)), {"j": 2}, "operand 0 is a torch.sparse_coo")
    merge = ("i j k, i j k -> i (j k)", (x.view(3, 2, 2).to_sparse(), y.view(3, 2, 2)), {},
             "the result is a torch.sparse_coo tensor")
    doors = (einc.einsum, einc.contract,
             lambda eq, *xs, **kw: einc.contract_expression(eq, *[t.shape for t in xs], **kw)(*xs))
    for eq, ops, sizes, what in (split, merge):
        for door in doors:
            with pytest.raises(errors.LayoutError, match=re.escape(what)) as info:
                door(eq, *ops, **sizes)
            assert isinstance(info.value, RuntimeError) and str(info.value).endswith(f"\n  {eq}")
    with pytest.raises(errors.LayoutError, match=re.escape("explain(): operand 0 is a torch.sparse_coo")):
        einc.explain(split[0], *split[1], **split[2])
    header = str(einc.explain(merge[0], *merge[1])).split("\n")[3]
    assert "(j k) merged" in header and "a reshape of torch's einsum's result" in header and "no copy" not in header
    got = einc.einsum("(i) j, i j -> i j", x.to_sparse(), y)        # no split, no merge: torch's answer
    assert got.layout == torch.sparse_coo and torch.equal(got.to_dense(), x * y)
    assert "no copy" in str(einc.explain(merge[0], x.view(3, 2, 2), y.view(3, 2, 2)))


def test_a_sparse_operand_never_runs_a_strided_calls_plan():
    """The plan cache's key held the first operand's layout only: a sparse second operand
    whose key matched a dense call's (a broadcast one: strides (0, 0)) ran that call's
    entry."""
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    einc.einsum("ij,jk->ik", a, torch.tensor(2.0).expand(4, 5))
    einc.einsum("ij,ij->ij", torch.randn(4, 5), torch.tensor(2.0).expand(4, 5))
    with pytest.raises(errors.LayoutError, match="operand 1 is a torch.sparse_coo tensor"):
        einc.einsum("ij,jk->ik", a, b.to_sparse())
    got = einc.einsum("ij,ij->ij", b, b.to_sparse())
    assert got.layout == torch.sparse_coo
    torch.testing.assert_close(got.to_dense(), b * b)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no mkldnn tensors")
@pytest.mark.parametrize("eq, n", [("ij,jk->ik", 2), ("ij,ij->ij", 2), ("ij,jk,kl->il", 3)])
def test_an_mkldnn_operand_never_runs_a_strided_calls_plan(eq, n):
    """An mkldnn tensor calls itself contiguous, yet an mkldnn operand gets a key of its own,
    not a dense call's (whose entry would raise torch's "Could not run 'aten::mm.out' with
    arguments from the 'MkldnnCPU' backend"), and torch's answer, here einc's LayoutError for
    torch's refusal, as on a fresh cache."""
    a = torch.randn(4, 4)
    einc.einsum(eq, *[a] * n)
    hits = einc.cache_info().plans.hits
    for k in range(1, n):
        ops = [a] * n
        ops[k] = a.to_mkldnn()
        with pytest.raises(errors.LayoutError, match=f"operand {k} is a torch._mkldnn tensor"):
            einc.einsum(eq, *ops)
    assert einc.cache_info().plans.hits == hits


def test_operands_on_several_devices_get_torchs_answer():
    """A meta operand among CPU ones: torch's einsum answers (a meta result), not a plan for
    the first operand's device (which would return uninitialised CPU memory)."""
    a, b = torch.ones(3, 4), torch.ones(4, 5, device="meta")
    want = torch.einsum("ij,jk->ik", a, b)
    got = einc.einsum("ij,jk->ik", a, b)
    assert got.device == want.device and got.shape == want.shape
    torch.testing.assert_close(einc.einsum("ij,jk->ik", a, torch.ones(4, 5)), torch.full((3, 5), 4.0))


@pytest.mark.parametrize(("n", "where"), [(2, 0), (2, 1), (3, 0), (3, 1), (3, 2)])
def test_a_meta_operand_anywhere_gets_torchs_answer(n, where):
    """Which operands are on which device is read from the plan cache's key, for two operands
    and for more: a meta operand in any position among CPU ones gets torch's own answer
    (torch's front takes opt_einsum's path for three operands, and the result's device
    depends on the order of the products: einc ran the op left to right and gave a CPU
    tensor of uninitialised memory where torch gives a meta result)."""
    eq = "ij,jk->ik" if n == 2 else "ij,jk,kl->il"
    shapes = [(3, 4), (4, 5), (5, 2)][:n]
    ops = [torch.ones(*s, device="meta" if k == where else "cpu") for k, s in enumerate(shapes)]
    want = torch.einsum(eq, *ops)
    got = einc.einsum(eq, *ops)
    assert got.device == want.device and got.shape == want.shape


def test_contract_expression_constants_keep_the_whole_equations_memory_limit():
    """'max_input' asked again of the folded remainder (its operands fewer and smaller)
    sliced a path the whole equation's bound let run: 100 slices, 35x einsum's time."""
    n = 100
    g = torch.Generator().manual_seed(0)
    A, u = torch.randn(n, n, generator=g, dtype=torch.float64), torch.randn(n, generator=g, dtype=torch.float64)
    rest = [torch.randn(n, generator=g, dtype=torch.float64) for _ in range(5)]
    eq, path = "ij,j,i,a,b,a,b->", [(0, 1), (1, 2), (1, 4), (1, 3), (0, 1), (0, 1)]
    assert einc.explain(eq, A, u, *rest, optimize=path, memory_limit="max_input").slicing is None
    expr = einc.contract_expression(eq, A, u, *[(n,)] * 5, constants=[0, 1], optimize=path, memory_limit="max_input")
    ran = einc.explain(expr._text, *expr._operands(rest, expr._folded), optimize=expr._options.resolve()[1],
                       memory_limit=expr._options.memory_limit)
    assert ran.slicing is None
    torch.testing.assert_close(expr(*rest), torch.einsum(eq, A, u, *rest))
    sliced = einc.contract_expression("ij,jk,kl->il", A, (n, n), (n, n), constants=[0], memory_limit=2000)
    assert sliced.plan.slicing is not None and sliced._options.memory_limit == 2000      # sliced: as asked
    torch.testing.assert_close(sliced(A, A), A @ A @ A)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_a_sparse_operand_inside_shared_intermediates_gets_the_answer_it_gets_outside():
    """Inside ``shared_intermediates`` a call with a sparse operand shares nothing and is
    torch's einsum's, as outside: the same result, layout and bits, or the same LayoutError
    -- in every door, out= too; strided calls in the context still share.  (Sharing its
    step would have the context make torch's sparse answer contiguous: "unsupported memory
    format option Contiguous".)"""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(2))
    c = torch.randn(4, 5, generator=g, dtype=torch.float64)
    doors = (lambda eq, *xs, **kw: einc.einsum(eq, *xs, **kw), lambda eq, *xs, **kw: einc.contract(eq, *xs, **kw),
             lambda eq, *xs, **kw: einc.contract_expression(eq, *[x.shape for x in xs])(*xs, **kw))
    calls = [("ij,ij->ij", (a, b.to_sparse())), ("ij,ij->ij", (a.to_sparse_csr(), b)), ("ij->ji", (a.to_sparse(),)),
             ("ij,ij->", (a.to_sparse(), b)), ("ij,jk->ik", (a, c.to_sparse()))]
    for door in doors:
        for eq, ops in calls:
            try:
                want = door(eq, *ops)
            except errors.LayoutError as error:
                want = error
            with einc.shared_intermediates() as cache:
                if isinstance(want, Exception):
                    with pytest.raises(errors.LayoutError, match=re.escape(str(want).split("\n")[0])):
                        door(eq, *ops)
                    continue
                got = door(eq, *ops)
                assert got.layout == want.layout and got.shape == want.shape
                assert torch.equal(got.to_dense(), want.to_dense()) if got.layout != torch.strided else \
                    torch.equal(got, want)
                out = torch.zeros(want.shape, dtype=want.dtype)
                assert door(eq, *ops, out=out) is out and torch.equal(out, want.to_dense())
                assert not any(key[0] == "einsum" for key in cache)     # nothing of it shared
                torch.testing.assert_close(door("ij,ij->ij", a, b), a * b)
                assert any(key[0] == "einsum" for key in cache)         # a strided call shares, as before
