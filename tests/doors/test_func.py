"""torch.func over einc.einsum: vmap (batched, never a loop: one or two operands through
torch's batching rules, more as one einc call over one more index), grad, jacrev, jacfwd,
jvp, hessian, functional_call, and nestings such as vmap(grad(...))."""

import warnings

import pytest
import torch
from oracle import reference
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vmap

import einc

D = torch.float64
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")


def _randn(*shape, seed=0):
    return torch.randn(shape, dtype=D, generator=torch.Generator().manual_seed(seed))


VMAP_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)], (0, None)),
    ("ij,jk->ik", [(3, 4), (4, 5)], (1, 0)),
    ("ii->i", [(3, 3)], (2,)),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 2)], (0, 1)),
    ("bi,oij,bj->bo", [(2, 3), (4, 3, 5), (2, 5)], (None, 0, None)),
    ("i,->i", [(4,), ()], (0, 0)),
    ("ij,ij->ij", [(1, 3), (2, 3)], (0, None)),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)], (0, 0, 0)),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)], (0, 1, 0)),
]


def _batched(shape, dim, b, seed):
    if dim is None:
        return _randn(*shape, seed=seed)
    full = list(shape)
    full.insert(dim, b)
    return _randn(*full, seed=seed)


@pytest.fixture
def no_loop():
    """Asserts, on leaving, that torch's vmap ran no op as a loop (its slow fallback,
    which warns when asked to)."""
    enable = torch._C._functorch._set_vmap_fallback_warning_enabled
    enable(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        enable(False)
    assert not [str(w.message) for w in caught if "performance drop" in str(w.message)]


@pytest.fixture
def applied(monkeypatch):
    """How many times einc's autograd.Function was applied."""
    from einc import autograd
    seen = []
    apply = autograd.EinsumFunction.apply
    monkeypatch.setattr(autograd.EinsumFunction, "apply", lambda *a: seen.append(1) or apply(*a))
    return seen


@pytest.mark.parametrize("equation,shapes,in_dims", VMAP_CASES, ids=[f"{c[0]}:{c[2]}" for c in VMAP_CASES])
def test_vmap_is_batched_and_matches_loop(equation, shapes, in_dims, calls, applied, no_loop):
    """One or two operands batched outermost in memory, or more all batched so: the plan's
    torch ops, each batched by torch (no Function, whose machinery costs ~0.1 ms; with
    every operand batched, each step's cost scales alike and the plan's order stays the
    best); three or more not all batched, or a batch dimension inside an operand (torch's
    rules would move it to the front, and each copy would read across the batch): one
    einc call over one more index."""
    b = 3
    ops = [_batched(s, d, b, k) for k, (s, d) in enumerate(zip(shapes, in_dims))]
    calls.clear()
    out = vmap(lambda *x: einc.einsum(equation, *x), in_dims=in_dims)(*ops)
    if (len(shapes) <= 2 or None not in in_dims) and all(d in (None, 0) for d in in_dims):
        assert not applied and not calls
    else:
        assert len(calls) == 1 and len(applied) == 1    # the batch is one more index, not a loop
        assert len(set(calls[0].replace(",", "").replace("-", "").replace(">", ""))) == \
            len(set(equation.replace(",", "").replace("-", "").replace(">", ""))) + 1
    slices = [[o.select(d, i) if d is not None else o for o, d in zip(ops, in_dims)] for i in range(b)]
    torch.testing.assert_close(out, torch.stack([reference(equation, *s) for s in slices]))
    assert out.is_contiguous()


def test_nested_vmap(calls, applied, no_loop):
    a, w = _randn(2, 5, 3, 4), _randn(4, 6, seed=1)
    calls.clear()
    out = vmap(vmap(lambda x, y: einc.einsum("ij,jk->ik", x, y), in_dims=(0, None)), in_dims=(0, None))(a, w)
    assert not calls and not applied
    torch.testing.assert_close(out, torch.einsum("cbij,jk->cbik", a, w))
    v = _randn(6, seed=2)
    out = vmap(vmap(lambda x, y, z: einc.einsum("ij,jk,k->i", x, y, z), in_dims=(0, None, None)),
               in_dims=(0, None, None))(a, w, v)
    assert len(calls) == 1 and len(set(calls[0]) - set(",->")) == 5     # one run, over both batch indices
    torch.testing.assert_close(out, torch.einsum("cbij,jk,k->cbi", a, w, v))


def test_vmap_with_a_memory_limit_bounds_the_whole_batch(calls, applied):
    """A numeric memory limit bounds the whole vmapped call: it runs as one einc call over
    one more index, planned (and sliced) for the batch, not per element."""
    a, w = _randn(8, 6, 5), _randn(5, 7, seed=1)
    calls.clear()
    out = vmap(lambda x: einc.einsum("ij,jk->ik", x, w, memory_limit=100))(a)
    assert len(calls) == 1 and len(applied) == 1
    torch.testing.assert_close(out, torch.einsum("bij,jk->bik", a, w))


def test_grad():
    x, y = _randn(3, 4), _randn(4, 6, seed=1)
    g = grad(lambda x, y: einc.einsum("ij,jk->", x, y), argnums=(0, 1))(x, y)
    torch.testing.assert_close(g[0], y.sum(1).expand(3, 4))
    torch.testing.assert_close(g[1], x.sum(0)[:, None].expand(4, 6))


def test_jacrev_and_jacfwd():
    x, y = _randn(3, 4), _randn(4, 2, seed=1)
    want = jacrev(lambda x: torch.einsum("ij,jk->ki", x, y))(x)
    torch.testing.assert_close(jacrev(lambda x: einc.einsum("ij,jk->ki", x, y))(x), want)
    torch.testing.assert_close(jacfwd(lambda x: einc.einsum("ij,jk->ki", x, y))(x), want)


def test_jvp_uses_einsum_per_tangent(calls, kernel_device):
    """Where kernels run the call (einc's Function): one einsum per operand with a tangent."""
    x, y = _randn(3, 4).to(kernel_device), _randn(4, 6, seed=1).to(kernel_device)
    tx = _randn(3, 4, seed=2).to(kernel_device)
    calls.clear()
    out, t = jvp(lambda x: einc.einsum("ij,jk->ik", x, y), (x,), (tx,))
    torch.testing.assert_close(t, tx @ y)
    torch.testing.assert_close(out, x @ y)
    assert len(calls) == 2                     # the primal, and one tangent term (y has none)


def test_grad_and_jvp_run_the_torch_executors_ops_as_they_are():
    """Under grad and jvp (and vmap of one or two operands) a plan of torch ops runs as
    is, and torch.func differentiates its ops: no Function, whose machinery under a
    transform is Python (grad of a 4x4 product: 4x torch.einsum's time through it, 0.65x
    without; bench/func_overhead.py)."""
    from einc import autograd
    x, y = _randn(3, 4), _randn(4, 6, seed=1)
    applied = []
    apply = autograd.EinsumFunction.apply
    autograd.EinsumFunction.apply = lambda *a: applied.append(1) or apply(*a)
    try:
        out, t = jvp(lambda x: einc.einsum("ij,jk->ik", x, y), (x,), (_randn(3, 4, seed=2),))
        torch.testing.assert_close(t, _randn(3, 4, seed=2) @ y)
        torch.testing.assert_close(grad(lambda x: einc.einsum("ij,jk->ik", x, y).sum())(x), y.sum(1).expand(3, 4))
        assert not applied
        vmap(lambda x: einc.einsum("ij,jk->ik", x, y))(x[None])
        assert not applied
        vmap(lambda x: einc.einsum("ij,jk,k->i", x, y, y[0]))(x[None])
        assert applied                         # three operands: one einc call over one more index, through the Function
    finally:
        autograd.EinsumFunction.apply = apply


def test_hessian_of_cubic():
    x = _randn(3, 2)
    f = lambda x: einc.einsum("ij,ij,kj->", x, x, x)       # noqa: E731
    torch.testing.assert_close(hessian(f)(x), hessian(lambda x: torch.einsum("ij,ij,kj->", x, x, x))(x))


class Bilinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(_randn(5, 3, 4, seed=3))

    def forward(self, x, y):
        return einc.einsum("bi,oij,bj->bo", x, self.w, y)


def test_functional_call_and_per_sample_grads():
    m = Bilinear()
    params = {k: v.detach() for k, v in m.named_parameters()}
    x, y = _randn(6, 3, seed=4), _randn(6, 4, seed=5)

    def loss(p, x, y):
        return functional_call(m, p, (x[None], y[None])).pow(2).sum()

    def ref_loss(p, x, y):
        return torch.einsum("bi,oij,bj->bo", x[None], p["w"], y[None]).pow(2).sum()
    got = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)["w"]
    want = vmap(grad(ref_loss), in_dims=(None, 0, 0))(params, x, y)["w"]
    assert got.shape == (6, 5, 3, 4)
    torch.testing.assert_close(got, want)
    full = grad(lambda p: functional_call(m, p, (x, y)).pow(2).sum())(params)["w"]
    torch.testing.assert_close(full, got.sum(0))


def test_vmap_of_grad_with_diagonal_and_lonely_indices(calls):
    xs = _randn(4, 3, 3, 2)
    f = lambda x: einc.einsum("iij->j", x).pow(2).sum()     # noqa: E731
    got = vmap(grad(f))(xs)
    want = vmap(grad(lambda x: torch.einsum("iij->j", x).pow(2).sum()))(xs)
    torch.testing.assert_close(got, want)
    v = _randn(2, seed=1)
    f = lambda x: einc.einsum("iij,j,k->jk", x, v, v).pow(2).sum()     # noqa: E731
    calls.clear()
    got = vmap(grad(f))(xs)
    want = vmap(grad(lambda x: torch.einsum("iij,j,k->jk", x, v, v).pow(2).sum()))(xs)
    torch.testing.assert_close(got, want)
    assert len(calls) == 2                     # three operands: forward and the one gradient einsum, each batched


def test_grad_of_vmap():
    w = _randn(4, 5, seed=1)
    xs = _randn(3, 2, 4)
    f = lambda w: vmap(lambda x: einc.einsum("ij,jk->ik", x, w))(xs).sin().sum()   # noqa: E731
    g = lambda w: torch.einsum("bij,jk->bik", xs, w).sin().sum()                  # noqa: E731
    torch.testing.assert_close(grad(f)(w), grad(g)(w))


def test_a_shape_error_under_vmap_names_the_callers_equation():
    """Under vmap einc contracts a rewritten equation (one more index for the batch); a
    shape that does not fit is still reported in the caller's terms, as torch does."""
    from einc.errors import ShapeError
    with pytest.raises(RuntimeError) as torch_err:
        vmap(lambda x, y: torch.einsum("ij,jk->ik", x, y))(torch.randn(5, 2, 3), torch.randn(5, 4, 4))
    with pytest.raises(ShapeError) as einc_err:
        vmap(lambda x, y: einc.einsum("ij,jk->ik", x, y))(torch.randn(5, 2, 3), torch.randn(5, 4, 4))
    message = str(einc_err.value)
    assert message.startswith(str(torch_err.value).splitlines()[0])
    assert "subscript 'j' has size 4 in operand 1 ('jk') but size 3 in operand 0 ('ij')" in message
    assert "  ij,jk->ik\n     ^" in message


def test_a_shape_torch_answers_is_fresh_under_vmap_and_grad(monkeypatch):
    """Under EINC_NEW_SHAPES=torch a small call runs torch's einsum op (runtime/admission.py),
    whose view of an operand is copied: under vmap and grad the alias test saw only the
    wrappers, and ``vmap(ij->ij)`` returned a view of the caller's tensor (zeroing it
    zeroed the input)."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "torch")
    from einc.runtime import admission
    x = torch.randn(3, 20, 20)
    out = vmap(lambda a: einc.einsum("ij->ij", a))(x)
    assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    out.zero_()
    assert x.abs().sum() > 0
    y = torch.randn(21, 21)
    g = grad(lambda a: (einc.einsum("ij->ij", a) * a).sum())(y)
    torch.testing.assert_close(g, 2 * y)
    seen = []

    def keep(a):
        r = einc.einsum("ij->ij", a)
        seen.append(admission._is_alias_of(r, a))
        return r.sum()
    grad(keep)(torch.randn(22, 22))
    assert seen == [False]


@pytest.mark.parametrize("equation,shapes,dtype", [
    ("d,dab,,,->", [(0,), (0, 2, 1), (), (), ()], torch.int32),
    ("aa,db,e,ed,,e->b", [(2, 2), (0, 3), (2,), (2, 0), (), (2,)], torch.int8),
    ("aa,db,e,ed,,e->b", [(2, 2), (0, 3), (2,), (2, 0), (), (2,)], torch.bool),
])
def test_vmap_of_an_empty_integer_sum_has_torchs_dtype(equation, shapes, dtype):
    """Through the Function's vmap rule (a sum over size 0 keeps it): torch's integer result
    dtype depends on the shapes, and the batched equation's need not be one element's."""
    ops = [torch.ones((2,) + s, dtype=dtype) for s in shapes]
    want = vmap(lambda *x: torch.einsum(equation, *x))(*ops)
    got = vmap(lambda *x: einc.einsum(equation, *x))(*ops)
    assert got.dtype == want.dtype == torch.einsum(equation, *[o[0] for o in ops]).dtype
    assert torch.equal(got, want)


def test_vmap_error_names_the_callers_equation():
    """A dtype torch refuses, raised from the Function's vmap rule, names the caller's
    equation, not the batched one einc runs."""
    ops = [torch.ones(2, 2, dtype=torch.bool), torch.ones(2, 2, 2, dtype=torch.bool),
           torch.ones(3, 2, 2, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool)]
    with pytest.raises(NotImplementedError, match=r"'ba,eda,da,dc->cd'"):
        vmap(lambda *x: einc.einsum("ba,eda,da,dc->cd", *x), in_dims=(None, None, 0, None))(*ops)


def test_vmap_of_bool_operands_counts_in_int64_as_each_element_does():
    """Some operands unbatched, bool: per element ``d,db,da->`` is int64 counts (torch sums);
    the batched equation has a bool matrix product torch refuses.  The Function's rule
    contracts in the element's int64, as einc does per element."""
    g = torch.Generator().manual_seed(0)
    x, y, z = (torch.randint(0, 2, s, generator=g).bool() for s in [(3, 3), (3, 3), (3, 4)])
    want = torch.stack([torch.einsum("d,db,da->", x[i], y, z) for i in range(3)])
    got = vmap(lambda *o: einc.einsum("d,db,da->", *o), in_dims=(0, None, None))(x, y, z)
    assert got.dtype == want.dtype == torch.int64 and torch.equal(got, want)
    i8 = [t.to(torch.int8) * 100 for t in (x, y, z)]        # int8 whose products wrap: int64 per element
    want = torch.stack([einc.einsum("d,db,da->", i8[0][i], i8[1], i8[2]) for i in range(3)])
    got = vmap(lambda *o: einc.einsum("d,db,da->", *o), in_dims=(0, None, None))(*i8)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_vmap_of_bool_operands_where_torch_trips_on_its_promotion_counts_as_each_element():
    """Per element, torch trips over its own int64 promotion on ``dbc,cd,bbab,ce`` in bool
    ("expected scalar type Long"), so einc answers in int64; batched, the equation has a
    bool matrix product torch refuses.  The Function's rule contracts in int64 there too,
    as the element does (the fuzzer's seed 20261202 drew it)."""
    g = torch.Generator().manual_seed(0)
    shapes = [(2, 3, 4, 2), (2, 3), (1, 1, 1, 1), (2, 1)]
    ops = [torch.randint(0, 2, s, generator=g).bool() for s in shapes]
    want = torch.stack([einc.einsum("dbc,cd,bbab,ce", ops[0][i], *ops[1:]) for i in range(2)])
    got = vmap(lambda *o: einc.einsum("dbc,cd,bbab,ce", *o), in_dims=(0, None, None, None))(*ops)
    assert want.dtype == torch.int64 and got.dtype == want.dtype and torch.equal(got, want)
    assert torch.equal(want, torch.einsum("zdbc,cd,bbab,ce->zae", *[o.long() for o in ops]))


SCALAR_PRODUCTS = [(",,a->a", [(), (), (0,)]), (",,,a->a", [(), (), (), (0,)]), ("i,i,a->a", [(1,), (1,), (0,)]),
                   ("ab,,->ba", [(0, 3), (), ()])]


@pytest.mark.parametrize("new_shapes", ["class", "plan"])
@pytest.mark.parametrize("equation,shapes", SCALAR_PRODUCTS, ids=[e for e, _ in SCALAR_PRODUCTS])
def test_jacrev_of_an_empty_result_with_a_product_of_scalars(equation, shapes, new_shapes, monkeypatch):
    """jacrev of a call whose result is empty runs its backward under vmap over an empty
    batch, and a vmap of such a call runs over one: a step multiplying two 0-d tensors (``,->``,
    or ``i,i->`` with i of size 1) answers there as torch.einsum's 1-d product does, rather than
    raising torch's vmap of a 0-d product ("select(): index 0 out of range")."""
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    einc.cache_clear()
    ops = [_randn(*s, seed=k) for k, s in enumerate(shapes)]
    argnums = tuple(range(len(ops)))
    for transform in (jacrev, jacfwd):
        got = transform(lambda *x: einc.einsum(equation, *x), argnums=argnums)(*ops)
        want = transform(lambda *x: torch.einsum(equation, *x), argnums=argnums)(*ops)
        assert [g.shape for g in got] == [w.shape for w in want]
    batched = [o.expand(0, *o.shape) for o in ops[:2]] + ops[2:]
    in_dims = (0, 0) + (None,) * (len(ops) - 2)
    got = vmap(lambda *x: einc.einsum(equation, *x), in_dims=in_dims)(*batched)
    assert got.shape == vmap(lambda *x: torch.einsum(equation, *x), in_dims=in_dims)(*batched).shape
    one = vmap(lambda x, y: einc.einsum("i,i->", x, y), in_dims=(0, None))(torch.zeros(0, 1), torch.ones(1))
    assert one.shape == (0,)
