"""``layout=`` and ``EINC_LAYOUT`` at every door: ``"contiguous"`` (the default) gives a
fresh standard-contiguous result, ``"any"`` a fresh dense, non-overlapping one in the
order einc's plan writes it; both the values of torch.einsum on float64 copies, neither
ever sharing memory with an operand."""

import warnings

import pytest
import torch
from oracle import assert_close, reference

import einc
from einc.errors import ArgumentError, ConfigError

dense = torch.ops.aten.is_non_overlapping_and_dense.default
LAYOUTS = ["contiguous", "any"]

# (equation, operand shapes): matrix products whose result is permuted, multiply-and-sum,
# products, single-operand views and sums, three operands, size 0 and 1 dimensions
CASES = [
    ("akbc,jk->cjba", [(6, 5, 4, 7), (3, 5)]),
    ("ij,jk->ki", [(5, 4), (4, 6)]),
    ("bij,bjk->kbi", [(3, 5, 4), (3, 4, 6)]),
    ("abcd,dc->ba", [(4, 3, 5, 6), (6, 5)]),
    ("ij,ij->ji", [(4, 5), (4, 5)]),
    ("i,j->ji", [(4,), (5,)]),
    ("ijk,ijk->ki", [(3, 4, 5), (3, 4, 5)]),
    ("ij,jk,kl->li", [(4, 3), (3, 5), (5, 2)]),
    ("ijk->kji", [(3, 4, 5)]),
    ("ijk->ki", [(3, 4, 5)]),
    ("iij->ji", [(4, 4, 3)]),
    ("ii->i", [(4, 4)]),
    ("ij->ij", [(3, 4)]),
    ("abc,cd->dba", [(1, 4, 5), (5, 1)]),
    ("abc,cd->dba", [(3, 0, 5), (5, 2)]),
    ("abc,cd->dba", [(3, 4, 0), (0, 2)]),
]


def sublists(equation, operands):
    """``equation``'s call in torch's sublist format."""
    inputs, output = equation.split("->")
    number = {c: k for k, c in enumerate(sorted(set(equation) - set(",->")))}
    args = []
    for o, term in zip(operands, inputs.split(",")):
        args += [o, [number[c] for c in term]]
    return args + [[number[c] for c in output]]


def check_fresh(result, operands, layout):
    assert dense(result), result.stride()
    if layout == "contiguous":
        assert result.is_contiguous(), result.stride()
    if result.numel():
        for o in operands:
            assert result.untyped_storage().data_ptr() != o.untyped_storage().data_ptr()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("form", ["string", "sublist"])
@pytest.mark.parametrize("equation,shapes", CASES, ids=[f"{e}-{k}" for k, (e, _) in enumerate(CASES)])
def test_einsum_values_and_layout(equation, shapes, form, layout):
    operands = [torch.randn(s) for s in shapes]
    before = [o.clone() for o in operands]
    args = (equation, *operands) if form == "string" else sublists(equation, operands)
    result = einc.einsum(*args, layout=layout)
    assert_close(result, reference(equation, *operands), torch.float32, extent=8)
    check_fresh(result, operands, layout)
    assert all(torch.equal(o, b) for o, b in zip(operands, before))


def test_any_keeps_the_products_order_where_the_default_copies():
    """``akbc,jk->cjba``: the matrix product writes ``(a, b, c, j)`` (or another order the
    model finds cheaper); ``"any"`` returns it permuted, with no final copy."""
    a, b = torch.randn(48, 48, 40, 48), torch.randn(24, 48)
    default = einc.einsum("akbc,jk->cjba", a, b)
    anyway = einc.einsum("akbc,jk->cjba", a, b, layout="any")
    assert default.is_contiguous()
    assert not anyway.is_contiguous() and dense(anyway)
    torch.testing.assert_close(anyway, default)


def test_each_layout_gives_its_own_bits_every_time(monkeypatch):
    """``ij,jk->ki`` in float64, its size class's plan: ``mm(b.T, a.T)`` by default,
    ``mm(a, b)`` permuted under ``"any"`` (docs/semantics.md): values that agree to
    rounding, each layout's the same bits on every call, after the other's too."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    einc.cache_clear()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 17, generator=g, dtype=torch.float64), torch.randn(17, 3, generator=g, dtype=torch.float64)
    default, anyway = einc.einsum("ij,jk->ki", a, b), einc.einsum("ij,jk->ki", a, b, layout="any")
    torch.testing.assert_close(anyway, default, rtol=1e-14, atol=1e-14)
    assert not torch.equal(anyway, default)
    assert torch.equal(einc.einsum("ij,jk->ki", a, b), default)
    assert torch.equal(einc.einsum("ij,jk->ki", a, b, layout="any"), anyway)
    einc.cache_clear()


def _any(x, y):
    return einc.einsum("ij,jk->ki", x, y, layout="any")


def _plain(x, y):
    return einc.einsum("ij,jk->ki", x, y)


def _traced_doors(f, operands, symbolic=True):
    """``f`` through every traced door: torch.compile (aot_eager, for its backward too),
    torch.jit.trace, and make_fx with symbolic sizes where ``symbolic``."""
    from torch.fx.experimental.proxy_tensor import make_fx
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # jit.trace warns of the shapes it records
        doors = {"compile": torch.compile(f, backend="aot_eager", fullgraph=True),
                 "jit.trace": torch.jit.trace(f, tuple(operands), check_trace=False)}
    if symbolic:
        doors["make_fx"] = make_fx(f, tracing_mode="symbolic")(*operands)
    return doors


@pytest.mark.parametrize("env", [None, "any"])
def test_a_traced_call_gives_the_eager_call_s_bits_in_its_layout(env, monkeypatch):
    """The custom op carries the layout and runs its plan, its result made contiguous
    (docs/semantics.md): a traced call with ``layout="any"`` (or ``EINC_LAYOUT=any``) gives the
    eager ``"any"`` call's bits, which differ from the default's in the last ones here."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    if env:
        monkeypatch.setenv("EINC_LAYOUT", env)
    einc.cache_clear()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 17, generator=g, dtype=torch.float64), torch.randn(17, 3, generator=g, dtype=torch.float64)
    f = _plain if env else _any
    eager = f(a, b)
    assert not torch.equal(eager, einc.einsum("ij,jk->ki", a, b, layout="contiguous"))
    try:
        for door, traced in _traced_doors(f, (a, b)).items():
            out = traced(a, b)
            assert out.is_contiguous() and torch.equal(out, eager), door
        scripted = torch.jit.script(f)
        assert scripted(a, b).is_contiguous() and torch.equal(scripted(a, b), eager)
    finally:
        torch._dynamo.reset()
        einc.cache_clear()


def test_a_traced_expression_or_contract_gives_the_eager_call_s_bits_in_its_layout(monkeypatch):
    """``contract_expression(..., layout="any")`` and ``contract`` reach the op through
    ``einc.api.call``, which carries their layout too: compiled and traced, their bits are
    the eager ``"any"`` call's (the expression's were the default layout's)."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    einc.cache_clear()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 17, generator=g, dtype=torch.float64), torch.randn(17, 3, generator=g, dtype=torch.float64)
    expr = einc.contract_expression("ij,jk->ki", a.shape, b.shape, layout="any")
    with_constant = einc.contract_expression("ij,jk->ki", a.shape, b, constants=[1], layout="any")
    eager = einc.einsum("ij,jk->ki", a, b, layout="any")
    assert not torch.equal(eager, einc.einsum("ij,jk->ki", a, b)) and torch.equal(expr(a, b), eager)
    try:
        for f in (lambda x, y: expr(x, y), lambda x, y: with_constant(x),
                  lambda x, y: einc.contract("ij,jk->ki", x, y, layout="any")):
            for door, traced in _traced_doors(f, (a, b), symbolic=False).items():
                assert torch.equal(traced(a, b), eager), door
    finally:
        torch._dynamo.reset()
        einc.cache_clear()


def test_a_traced_call_s_gradients_are_the_eager_call_s_in_its_layout():
    """The traced backward runs the call again in its layout: ``akbc,jk->cjba``'s gradient of
    ``a`` rounds differently in the two layouts, and the compiled call's is the eager one's."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 17, 4, 5, generator=g, dtype=torch.float64), torch.randn(6, 17, generator=g,
                                                                                  dtype=torch.float64)
    grad = torch.randn(5, 6, 4, 3, generator=g, dtype=torch.float64)

    def grads(f, layout):
        x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
        return torch.autograd.grad(f("akbc,jk->cjba", x, y, layout=layout), (x, y), grad)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(lambda *args, **kwargs: einc.einsum(*args, **kwargs), backend="aot_eager",
                                 fullgraph=True)
        eager, default = grads(einc.einsum, "any"), grads(einc.einsum, "contiguous")
        assert not torch.equal(eager[1], default[1])
        assert all(torch.equal(x, y) for x, y in zip(grads(compiled, "any"), eager))
        assert all(torch.equal(x, y) for x, y in zip(grads(compiled, "contiguous"), default))
    finally:
        torch._dynamo.reset()


def test_the_layout_is_part_of_the_key():
    """The same call in both layouts, in either order: each gets its own entry."""
    a, b = torch.randn(8, 6, 5, 7), torch.randn(9, 6)
    einc.cache_clear()
    first = einc.einsum("akbc,jk->cjba", a, b, layout="any")
    second = einc.einsum("akbc,jk->cjba", a, b)
    assert second.is_contiguous() and not first.is_contiguous()
    assert einc.cache_info().plans.currsize == 2


@pytest.mark.parametrize("bad", ["C", "dense", 1, True])
def test_a_bad_layout_is_refused_and_inputs_stay(bad):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    before = a.clone(), b.clone()
    for door in (lambda: einc.einsum("ij,jk->ki", a, b, layout=bad),
                 lambda: einc.contract("ij,jk->ki", a, b, layout=bad),
                 lambda: einc.contract_expression("ij,jk->ki", a.shape, b.shape, layout=bad),
                 lambda: einc.explain("ij,jk->ki", a, b, layout=bad),
                 lambda: einc.einsum("i (j k), j k l -> l i", a.view(3, 4), b.view(2, 2, 5), j=2, layout=bad)):
        with pytest.raises(ArgumentError, match="layout must be one of"):
            door()
    assert torch.equal(a, before[0]) and torch.equal(b, before[1])


def test_layout_keyword_any_case():
    a, b = torch.randn(8, 6, 5, 7), torch.randn(9, 6)
    assert not einc.einsum("akbc,jk->cjba", a, b, layout="ANY").is_contiguous()


def test_einc_layout_setting(monkeypatch):
    """``EINC_LAYOUT`` stands for the keyword where it is not passed (read when a key is
    planned); the keyword wins; a bad value raises ConfigError naming it."""
    a, b = torch.randn(8, 6, 5, 7), torch.randn(9, 6)
    einc.cache_clear()
    monkeypatch.setenv("EINC_LAYOUT", "any")
    try:
        got = einc.einsum("akbc,jk->cjba", a, b)
        assert not got.is_contiguous() and dense(got)
        assert einc.einsum("akbc,jk->cjba", a, b, layout="contiguous").is_contiguous()
        assert_close(got, reference("akbc,jk->cjba", a, b), torch.float32, extent=6)
        monkeypatch.setenv("EINC_LAYOUT", "sideways")
        einc.cache_clear()
        with pytest.raises(ConfigError, match="EINC_LAYOUT"):
            einc.einsum("akbc,jk->cjba", a, b)
        with pytest.raises(ConfigError, match="EINC_LAYOUT"):
            einc.explain("akbc,jk->cjba", a, b)
    finally:
        monkeypatch.delenv("EINC_LAYOUT")
        einc.cache_clear()
    assert einc.einsum("akbc,jk->cjba", a, b).is_contiguous()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_opt_einsum_doors(layout):
    a, b = torch.randn(6, 5, 4, 7), torch.randn(3, 5)
    expected = reference("akbc,jk->cjba", a, b)
    for got in (einc.contract("akbc,jk->cjba", a, b, layout=layout),
                einc.contract(a, [0, 1, 2, 3], b, [4, 1], [3, 4, 2, 0], layout=layout),
                einc.contract_expression("akbc,jk->cjba", a.shape, b.shape, layout=layout)(a, b),
                einc.contract_expression("akbc,jk->cjba", a, b.shape, constants=[0], layout=layout)(b)):
        assert_close(got, expected, torch.float32, extent=5)
        check_fresh(got, (a, b), layout)


def test_order_c_asks_for_a_contiguous_result():
    a, b = torch.randn(8, 6, 5, 7), torch.randn(9, 6)
    assert einc.contract("akbc,jk->cjba", a, b, order="C").is_contiguous()
    with pytest.raises(ArgumentError, match="order='C'"):
        einc.contract("akbc,jk->cjba", a, b, order="C", layout="any")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_named_equations(layout):
    x, w = torch.randn(2, 5, 4 * 3), torch.randn(4, 3, 6)
    expected = reference("bnhd,hde->bnhe", x.view(2, 5, 4, 3), w).reshape(2, 5, 24)
    got = einc.einsum("b n (h d), h d e -> b n (h e)", x, w, h=4, layout=layout)
    assert_close(got, expected, torch.float32, extent=3)
    check_fresh(got, (x, w), layout)
    expr = einc.contract_expression("b n (h d), h d e -> e (h b) n", x.shape, w.shape, h=4, layout=layout)
    got = expr(x, w)
    assert_close(got, expected.view(2, 5, 4, 6).permute(3, 2, 0, 1).reshape(6, 8, 5), torch.float32, extent=3)
    check_fresh(got, (x, w), layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_out_is_written_whatever_the_layout(layout):
    a, b = torch.randn(6, 5, 4, 7), torch.randn(3, 5)
    out = torch.empty(7, 3, 4, 6)
    got = einc.einsum("akbc,jk->cjba", a, b, out=out, layout=layout)
    assert got is out
    assert_close(out, reference("akbc,jk->cjba", a, b), torch.float32, extent=5)


@pytest.mark.parametrize("equation,shapes", [CASES[0], CASES[2], CASES[4], CASES[7], CASES[9], CASES[13]])
def test_gradients_equal_in_both_layouts(equation, shapes):
    torch.manual_seed(0)
    operands = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    grads = {}
    for layout in LAYOUTS:
        result = einc.einsum(equation, *operands, layout=layout)
        check_fresh(result, operands, layout)
        weight = torch.randn(result.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        grads[layout] = torch.autograd.grad((result * weight).sum(), operands)
    expected = torch.autograd.grad((torch.einsum(equation, *operands) * weight).sum(), operands)
    for layout in LAYOUTS:
        for g, e in zip(grads[layout], expected):
            torch.testing.assert_close(g, e)


def test_unplanned_shapes_take_the_layout(monkeypatch):
    """Under EINC_NEW_SHAPES=torch torch's op answers small calls; with ``"any"`` its order
    is kept where dense, and a view of an operand is still copied (``ij->ij``, ``ij->ji``,
    ``ii->i``)."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "torch")
    einc.cache_clear()
    for equation in ("ij->ij", "ij->ji", "ii->i", "akbc,jk->cjba"):
        k = equation.count(",") + 1
        for n in range(2, 22):
            shapes = [(n, n)] if k == 1 else [(n, 3, 4, 5), (2, 3)]
            operands = [torch.randn(s) for s in shapes]
            got = einc.einsum(equation, *operands, layout="any")
            assert_close(got, reference(equation, *operands), torch.float32, extent=3)
            check_fresh(got, operands, "any")
    einc.cache_clear()


def test_a_sliced_plan_in_either_layout():
    a, b, c = torch.randn(6, 8), torch.randn(8, 7), torch.randn(7, 5)
    for layout in LAYOUTS:
        got = einc.einsum("ij,jk,kl->li", a, b, c, memory_limit=40, layout=layout)
        assert_close(got, reference("ij,jk,kl->li", a, b, c), torch.float32, extent=56)
        check_fresh(got, (a, b, c), layout)


def test_explain_says_so():
    shown = einc.explain("akbc,jk->cjba", (48, 48, 40, 48), (24, 48), layout="any")
    assert "layout 'any'" in str(shown)
    assert "layout 'any'" not in str(einc.explain("akbc,jk->cjba", (48, 48, 40, 48), (24, 48)))


def test_explain_says_layout_any_only_where_a_step_writes_the_result():
    """explain's note "layout 'any': the result is a fresh dense tensor in the order the last
    step writes it", and a backend "torch" per step, appear only where a step of the plan
    writes the result: not for a sparse operand's call, whose result is torch's einsum's
    (sparse here), nor for a sum over size 0, whose zeros are made whole and contiguous, as
    the calls show.  explain says what the calls run."""
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    assert einc.einsum("ij,ij->ij", x.to_sparse(), y, layout="any").layout == torch.sparse_coo
    shown = einc.explain("ij,ij->ij", x.to_sparse(), y, layout="any")
    assert "layout 'any'" not in shown.note and "torch's einsum answers this call" in shown.note
    a, b = torch.randn(3, 0), torch.randn(0, 5)
    assert einc.einsum("ij,jk->ik", a, b, layout="any").is_contiguous()
    for operands in ((a, b), ((3, 0), (0, 5))):
        shown = einc.explain("ij,jk->ik", *operands, layout="any")
        assert "layout 'any'" not in shown.note and "do not run: the result is zeros" in shown.note
        assert shown.backends == ("none",) and shown.to_dict()["steps"][0]["backend"] == "none"
        assert any(line.startswith("1 ") and line.endswith(" none") for line in str(shown).split("\n"))
    assert "layout 'any'" in einc.explain("ij,jk->ik", (0, 4), (4, 5), layout="any").note    # a step writes it


@pytest.mark.parametrize("layout", LAYOUTS)
def test_under_torch_compile_the_result_is_contiguous(layout, monkeypatch):
    """The compiled op's fake kernel states a contiguous result before any plan exists, so
    the op returns one in either layout (``EINC_LAYOUT`` too), with the right values."""
    monkeypatch.setenv("EINC_LAYOUT", "any")
    a, b = torch.randn(6, 5, 4, 7), torch.randn(3, 5)
    torch._dynamo.reset()
    try:
        f = torch.compile(lambda x, y: einc.einsum("akbc,jk->cjba", x, y, layout=layout) + 1, fullgraph=True,
                          backend="aot_eager")
        assert_close(f(a, b) - 1, reference("akbc,jk->cjba", a, b), torch.float32, extent=5)
        g = torch.compile(lambda x, y: einc.einsum("akbc,jk->cjba", x, y, layout=layout), fullgraph=True,
                          backend="aot_eager")
        assert g(a, b).is_contiguous()
        with pytest.raises(Exception, match="layout must be one of"):
            torch.compile(lambda x, y: einc.einsum("akbc,jk->cjba", x, y, layout="bad"), fullgraph=True,
                          backend="aot_eager")(a, b)
    finally:
        torch._dynamo.reset()
        einc.cache_clear()


@pytest.mark.kernels
def test_generated_kernels_in_either_layout(kernel_device):
    a = torch.randn(6, 5, 4, 7, device=kernel_device)
    b = torch.randn(3, 5, device=kernel_device)
    for layout in LAYOUTS:
        got = einc.einsum("akbc,jk->cjba", a, b, layout=layout)
        assert_close(got.cpu(), reference("akbc,jk->cjba", a.cpu(), b.cpu()), torch.float32, extent=5)
        check_fresh(got, (a, b), layout)


@pytest.mark.filterwarnings("ignore:`torch.jit.script:DeprecationWarning")
def test_torch_jit_script_takes_the_keyword():
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return einc.einsum("akbc,jk->cjba", x, y, layout="any")

    s = torch.jit.script(f)
    a, b = torch.randn(6, 5, 4, 7), torch.randn(3, 5)
    got = s(a, b)
    assert got.is_contiguous()
    assert_close(got, reference("akbc,jk->cjba", a, b), torch.float32, extent=5)

    def g(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return einc.einsum("akbc,jk->cjba", x, y, layout="sideways")

    with pytest.raises(Exception, match="layout must be one of"):
        torch.jit.script(g)(a, b)
