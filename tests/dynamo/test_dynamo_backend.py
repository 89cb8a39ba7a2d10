"""The ``einc`` torch.compile backend: its FX pass (contractions -> fused einc::einsum
calls, scalars on the smallest tensor, only where einc's plan saves flops; the rest
left as written), the report and log, and whole models (a transformer block, matmul
MLPs) equal to eager.  Most runs use the eager inner compiler; one uses inductor.
Tests of the rewriting itself on graphs where it saves nothing use ``rewrite="all"``."""

import logging
import math
import operator

import pytest
import torch

import einc
import einc.dynamo
from einc.dynamo import fx_pass, fx_patterns

F32 = torch.float32
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script:DeprecationWarning")


def _randn(*shape, seed=0, dtype=F32):
    return torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


EAGER = einc.dynamo.make_backend(inner="eager")
ALL = einc.dynamo.make_backend(inner="eager", rewrite="all")     # every contraction, whether it pays or not


def _compile(fn, *inputs, backend=EAGER, **kw):
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, **kw)(*inputs)


def _einc_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.ops.einc.einsum.default]


def _contraction_nodes(gm):
    return [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")
            and fx_patterns.equation_of(n) is not None]


def _capture(graphs, **options):
    """A backend that runs einc's (eager inner) and keeps each rewritten graph in ``graphs``."""
    def capture(gm, inputs, **kw):
        fn = einc.dynamo.backend(gm, inputs, options={"inner": "eager", **options})
        graphs.append(gm)
        return fn
    return capture


# ----------------------------------------------------------------------- the pass on small graphs

def test_matmul_chain_fuses_into_one_einsum_with_its_scalar_on_the_result():
    a, b, c, d = _randn(20, 20), _randn(20, 20, seed=1), _randn(20, 20, seed=2), _randn(20, 2, seed=3)
    fn = lambda a, b, c, d: (a @ b @ c @ d) * 2.0     # noqa: E731
    out = _compile(fn, a, b, c, d)
    torch.testing.assert_close(out, fn(a, b, c, d), rtol=1e-4, atol=1e-4)
    (r,) = einc.dynamo.last_report.rewrites
    assert r.fused == 3 and r.equation == "ab,bc,cd,de->ae"
    assert r.flops == 4800 and r.unfused_flops == 33600   # a(b(cd)) against ((ab)c)d
    assert r.scale_on == "output"       # written on the chain's result: on an operand it would scale intermediates


def test_a_single_contractions_scalar_goes_onto_its_smallest_tensor():
    q, k = _randn(2, 8), _randn(64, 8, seed=1)
    fn = lambda q, k: (q @ k.T) * 0.125     # noqa: E731
    torch.testing.assert_close(_compile(fn, q, k, backend=ALL), fn(q, k))
    (r,) = einc.dynamo.last_report.rewrites
    assert r.scale_on == "operand 0"    # q (2x8) is smaller than the result (2x64) and k


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_factor_on_a_chains_result_does_not_scale_its_intermediates(dtype):
    """``(x @ (A @ B)) * 1e15``, fused and run as ``((x @ A) @ B)``: the factor moved onto
    ``x`` made ``x @ A`` overflow (6e52) where eager's intermediates and result (4e36) are
    finite; on the result it scales only what eager's scaled.  With factors on an operand
    too, each group stays on its side."""
    x, A, B = (torch.full((1, 64), 1e18, dtype=dtype), torch.full((64, 64), 1e18, dtype=dtype),
               torch.full((64, 64), 1e-18, dtype=dtype))
    for fn, where in [(lambda x, A, B: (x @ (A @ B)) * 1e15, "output"),
                      (lambda x, A, B: (x @ ((A * 0.5) @ B)) * 1e15, "operand 0 and output")]:
        want = fn(x, A, B)
        assert torch.isfinite(want).all()
        got = _compile(fn, x, A, B)
        (r,) = einc.dynamo.last_report.rewrites
        assert r.fused == 2 and r.scale_on == where
        torch.testing.assert_close(got.double(), want.double(), rtol=2e-2, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_factor_never_moves_onto_a_value_computed_in_the_graph(dtype):
    """``(y @ B) * 1e15`` where ``y`` (~4e36) is computed in the graph: the factor does not
    move onto ``y``, the smallest tensor, where it would make it inf and eager gives 3.2e34 --
    with ``rewrite="all"`` where ``y`` is an earlier contraction's kept result or that
    result through an activation, and under the default policy where ``y``'s own
    product is left as written.  Only graph inputs (and views of them) are operands
    whose magnitude HEADROOM bounds; the factor goes onto another tensor, here the result
    or an input."""
    x, A, B = (torch.full((4, 8), 1e18, dtype=dtype), torch.full((8, 8), 5e17, dtype=dtype),
               torch.full((8, 64), 1e-18, dtype=dtype))

    def kept(x, A, B):
        y = torch.einsum("ij,jk->ik", x, A)
        return torch.einsum("ik,kl->il", y, B) * 1e15, y

    def activated(x, A, B):
        return (torch.relu(x @ A) @ B) * 1e15

    def chained(x, A, B):      # the chain (y, B * 1e15, B.T[:, :2]) saves flops and is rewritten, y = x @ A is not
        y = x @ A
        return (y @ (B * 1e15)) @ B.T[:, :2], y
    for fn, backend, where in [(kept, ALL, ["-", "output"]), (activated, ALL, ["-", "output"]),
                               (chained, EAGER, ["operand 2"])]:
        want = fn(x, A, B)
        got = _compile(fn, x, A, B, backend=backend)
        assert [r.scale_on for r in einc.dynamo.last_report.rewrites] == where
        assert not any(r.scale_on.startswith("operand 0") for r in einc.dynamo.last_report.rewrites)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert torch.isfinite(g).all()
            torch.testing.assert_close(g.double(), w.double(), rtol=2e-2, atol=0)


def test_a_bitcast_input_is_no_bounded_operand():
    """``xi.view(torch.float32)`` of an int32 input reinterprets its bits (9.9e27 here): no
    view of an input's values, so the factor does not go onto it (there it gives inf where
    eager gives 1.98e23)."""
    xi, B = torch.full((2, 2), 0x6E000000, dtype=torch.int32), torch.full((2, 64), 1e-20)
    fn = lambda xi, B: (xi.view(torch.float32) @ B) * 1e15     # noqa: E731
    got = _compile(fn, xi, B, backend=ALL)
    assert einc.dynamo.last_report.rewrites[0].scale_on == "operand 1"
    torch.testing.assert_close(got, fn(xi, B))


def test_a_factor_still_moves_onto_a_cast_or_copy_of_a_parameter():
    """A parameter read through a value-preserving cast, copy or part (``w.to(x.dtype)``,
    ``.detach()``, ``.narrow``, a ``split``'s piece) is still a bounded operand: the factor
    goes onto it where it is the smallest tensor, not onto a 4x larger one."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Parameter(_randn(16, 4))
            self.w2 = torch.nn.Parameter(_randn(4, 64, seed=1))

        def forward(self, x, k):
            w1 = [self.w1.to(x.dtype), self.w1.detach(), self.w1.clone().narrow(1, 0, 4),
                  torch.split(self.w1, 4, dim=1)[0]][k]
            return (x @ (w1 * 1e-3)) @ self.w2
    m, x = M(), _randn(8, 16, seed=2)
    for k in range(4):
        got = _compile(lambda x: m(x, k), x, backend=ALL)
        torch.testing.assert_close(got, m(x, k))
        (r,) = einc.dynamo.last_report.rewrites
        assert r.scale_on == "operand 1", (k, r.scale_on)


def test_a_chains_factors_that_do_not_nearly_cancel_stay_apart():
    """Folded, ``1e-11 * 1e15`` is nearer 1 than ``1e-11`` but not near it: moved onto ``x``
    as 1e4 it overflowed the fused chain's ``x @ A`` (5.8e34) where eager scaled ``B`` down
    first and gives 3.7e21."""
    x, A, B = torch.full((1, 64), 3e16), torch.full((64, 64), 3e16), torch.full((64, 64), 1e-19)
    for fn in [lambda x, A, B: (x @ (A @ (B * 1e-11))) * 1e15, lambda x, A, B: (x @ ((A @ B) * 1e-11)) * 1e15]:
        want = fn(x, A, B)
        got = _compile(fn, x, A, B)
        (r,) = einc.dynamo.last_report.rewrites
        assert r.fused == 2 and r.scale_on == "operand 0 and output"
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), want.double(), rtol=1e-3, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_chains_factors_that_nearly_cancel_move_together(dtype):
    """A factor on an operand or intermediate and one on the chain's result that nearly undo
    each other scale the result together, and the chain runs as if none was written: kept
    apart, x * 1e18 would overflow the fused chain's x @ A where eager's intermediates and
    result (4e14) are finite; folded onto x, x * 10 would tip an x @ A at 5.8e37 over."""
    x, A, B = (torch.full((1, 64), 1e10, dtype=dtype), torch.full((64, 64), 1e10, dtype=dtype),
               torch.full((64, 64), 1e-10, dtype=dtype))
    near = (torch.full((1, 64), 9.5e17, dtype=dtype), torch.full((64, 64), 9.5e17, dtype=dtype),
            torch.full((64, 64), 1e-19, dtype=dtype))
    for fn, ops in [(lambda x, A, B: (x @ ((A @ B) * 1e18)) * 1e-17, (x, A, B)),
                    (lambda x, A, B: (x @ (A @ (B * 1e18))) * 1e-17, (x, A, B)),
                    (lambda x, A, B: (x @ (A @ (B * 1e-18))) * 1e19, near)]:
        want = fn(*ops)
        assert torch.isfinite(want).all()
        got = _compile(fn, *ops)
        (r,) = einc.dynamo.last_report.rewrites
        assert r.fused == 2 and r.scale_on == "output"
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), want.double(), rtol=2e-2, atol=0)


def test_chain_at_equal_flops_is_left_as_written():
    a, b, c = _randn(2, 20), _randn(20, 20, seed=1), _randn(20, 20, seed=2)
    fn = lambda a, b, c: a @ b @ c        # noqa: E731  (left to right is already optimal)
    graphs = []
    torch.testing.assert_close(_compile(fn, a, b, c, backend=_capture(graphs)), fn(a, b, c))
    report = einc.dynamo.last_report
    assert len(report) == 0 and report.kept == 2
    (x,) = report.left                   # the fused candidate, not emitted: it saves nothing
    assert x.fused == 2 and x.flops == x.unfused_flops and x.reason == "no flops saved"
    assert not _einc_nodes(graphs[0]) and len(_contraction_nodes(graphs[0])) == 2
    # rewrite="all": the same chain fused into one einsum at equal flops
    torch.testing.assert_close(_compile(fn, a, b, c, backend=ALL), fn(a, b, c))
    (r,) = einc.dynamo.last_report.rewrites
    assert r.fused == 2 and r.flops == r.unfused_flops


def test_scale_goes_to_output_when_it_is_smallest():
    x, w = _randn(4, 50), _randn(50, 2, seed=1)
    fn = lambda x, w: torch.mm(x, w) * 3.0 / 8.0       # noqa: E731
    torch.testing.assert_close(_compile(fn, x, w, backend=ALL), fn(x, w))
    (r,) = einc.dynamo.last_report.rewrites
    assert r.scale_on == "output"
    # A factor written on an operand scaled what eager computed from it: the result, scaled
    # after, would leave that unscaled (it may overflow): the smallest operand takes them.
    fn = lambda x, w: torch.mm(x * 3.0, w) / 8.0       # noqa: E731
    torch.testing.assert_close(_compile(fn, x, w, backend=ALL), fn(x, w))
    (r,) = einc.dynamo.last_report.rewrites
    assert r.scale_on == "operand 1"


def test_a_factor_written_before_the_result_is_not_moved_after_the_chain():
    """float32, every factor within 2^-64..2^64: moved onto the result (or the kernel's
    epilogue), x @ ((A @ B) * 1e-2) left the fused chain unscaled, inf where eager is 3.7e36."""
    x = torch.full((2, 4), 3e28)
    A, B = torch.full((4, 4), 2e9), torch.full((4, 1), 1.0)        # the result, 2 x 1, is the smallest
    for f in (lambda x, A, B: x @ ((A @ B) * 1e-2), lambda x, A, B: x @ ((A * 1e-2) @ B)):
        want = f(x, A, B)
        assert want.isfinite().all()
        for backend in (EAGER, ALL):
            got = _compile(f, x, A, B, backend=backend)
            assert got.isfinite().all()
            torch.testing.assert_close(got, want)
        assert all(r.scale_on.startswith("operand") for r in einc.dynamo.last_report.rewrites)


def test_all_contraction_kinds_are_recognized():
    def fn(a, b, v, w):
        return (torch.einsum("bij,bjk->bik", a, b), torch.bmm(a, b), a.matmul(b),
                torch.tensordot(a, b, dims=([2], [1])), torch.tensordot(v, w, 1), v @ w, w.T @ v,
                torch.nn.functional.linear(a, w.T), v @ v, b.mT @ v,
                torch.mm(w.t(), a[0].permute(1, 0)))
    a, b = _randn(2, 3, 4), _randn(2, 4, 5, seed=1)
    v, w = _randn(4, seed=2), _randn(4, 3, seed=3)
    want = fn(a, b, v, w)
    for backend in (ALL, EAGER):
        got = _compile(fn, a, b, v, w, backend=backend)
        for x, y in zip(got, want):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    report = einc.dynamo.last_report       # by default: each recognized, none saves a flop
    assert len(report) == 0 and len(report.left) == report.kept == len(want)
    assert {x.reason for x in report.left} == {"no flops saved"}
    torch._dynamo.reset()
    assert len(einc.dynamo.explain_rewrites(fn, a, b, v, w, rewrite="all")) == len(want)


def test_shared_intermediate_is_not_fused():
    a, b, c = _randn(8, 8), _randn(8, 8, seed=1), _randn(8, 1, seed=2)
    fn = lambda a, b, c: (a @ b, (a @ b) @ c)   # noqa: E731  (dynamo dedups nothing: two a@b nodes)

    def shared(a, b, c):
        y = a @ b
        return y, y @ c
    for f in (fn, shared):
        got = _compile(f, a, b, c, backend=ALL)
        for x, y in zip(got, f(a, b, c)):
            torch.testing.assert_close(x, y)
    assert [r.fused for r in einc.dynamo.last_report.rewrites] == [1, 1]


def test_fusion_rejected_when_planned_flops_grow(monkeypatch):
    flops = fx_pass.flops
    monkeypatch.setattr(fx_pass, "flops", lambda c: flops(c) * (10 if len(c.operands) > 2 else 1))
    a, b, c = _randn(8, 8), _randn(8, 8, seed=1), _randn(8, 1, seed=2)
    fn = lambda a, b, c: a @ b @ c        # noqa: E731
    torch.testing.assert_close(_compile(fn, a, b, c), fn(a, b, c))
    report = einc.dynamo.last_report      # unfused, neither saves anything: both left
    assert len(report) == 0 and [x.fused for x in report.left] == [1, 1]
    torch.testing.assert_close(_compile(fn, a, b, c, backend=ALL), fn(a, b, c))
    assert [r.fused for r in einc.dynamo.last_report.rewrites] == [1, 1]


def test_integer_and_autocast_graphs_are_left_alone():
    x = torch.randint(-3, 3, (3, 4))
    y = torch.randint(-3, 3, (4, 2))
    assert torch.equal(_compile(lambda x, y: x @ y, x, y, backend=ALL), x @ y)
    assert len(einc.dynamo.last_report) == 0 and not einc.dynamo.last_report.left    # not a candidate

    def mixed(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return a @ b
    a, b = _randn(3, 4), _randn(4, 2, seed=1)
    assert _compile(mixed, a, b, backend=ALL).dtype == torch.bfloat16
    assert len(einc.dynamo.last_report) == 0


def test_symbolic_scalar_under_dynamic_shapes():
    def attn(q, k):
        return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1)
    torch._dynamo.reset()
    f = torch.compile(attn, backend=ALL, dynamic=True)
    for s in (5, 7):
        q, k = _randn(2, s, 6), _randn(2, s + 3, 6, seed=1)
        torch.testing.assert_close(f(q, k), attn(q, k))
    (r,) = einc.dynamo.last_report.rewrites
    assert r.scale_on != "-"


def test_report_log_and_explain(caplog):
    a, b, c = _randn(6, 6), _randn(6, 6, seed=1), _randn(6, 2, seed=2)
    with caplog.at_level(logging.INFO, logger="einc.dynamo"):
        _compile(lambda a, b, c: 0.5 * (a @ b @ c), a, b, c)
    assert any("ab,bc,cd->ad" in m for m in caplog.messages)
    torch._dynamo.reset()
    report = einc.dynamo.explain_rewrites(lambda a, b, c: 0.5 * (a @ b @ c), a, b, c)
    assert report.graphs == 1 and len(report) == 1 and report.fused == 1 and report.scaled == 1
    assert "fused 2" in str(report) and "0 contraction(s) left to inductor" in str(report)
    with caplog.at_level(logging.INFO, logger="einc.dynamo"):
        _compile(lambda a, b: a @ b, a, b)
    assert any("matmul  (left as written: no flops saved" in m for m in caplog.messages)
    assert any("no contraction rewritten in this graph; eager gets it unchanged" in m for m in caplog.messages)


def test_options_and_by_name():
    from torch._dynamo.backends.registry import list_backends, register_backend
    if "einc" not in list_backends(exclude_tags=()):      # a checkout that was not pip-installed
        register_backend(compiler_fn=einc.dynamo.backend, name="einc")
    a, b = _randn(3, 4), _randn(4, 2, seed=1)
    out = _compile(lambda a, b: a @ b, a, b, backend="einc", options={"inner": "eager"})
    torch.testing.assert_close(out, a @ b)
    assert len(einc.dynamo.last_report) == 0 and einc.dynamo.last_report.kept == 1
    assert einc.dynamo.last_report.inner == "eager"
    out = _compile(lambda a, b: a @ b, a, b, backend="einc", options={"inner": "eager", "rewrite": "all"})
    torch.testing.assert_close(out, a @ b)
    assert len(einc.dynamo.last_report) == 1 and einc.dynamo.last_report.kept == 0
    with pytest.raises(Exception, match="inner"):
        _compile(lambda a, b: a @ b, a, b, backend="einc", options={"inner": "nope"})
    with pytest.raises(Exception, match="rewrite"):
        _compile(lambda a, b: a @ b, a, b, backend="einc", options={"inner": "eager", "rewrite": "nope"})
    with pytest.raises(ValueError):
        einc.dynamo.make_backend(inner="nope")
    with pytest.raises(ValueError):
        einc.dynamo.make_backend(rewrite="always")


# ----------------------------------------------------------------------- models

class Block(torch.nn.Module):
    """A pre-norm transformer block written with matmuls."""

    def __init__(self, d=16, heads=2, hidden=32):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        p = lambda *s: torch.nn.Parameter(torch.randn(s, generator=g) / math.sqrt(s[0]))   # noqa: E731
        self.heads = heads
        self.wq, self.wk, self.wv, self.wo = p(d, d), p(d, d), p(d, d), p(d, d)
        self.w1, self.w2 = p(d, hidden), p(hidden, d)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)

    def forward(self, x):
        b, s, d = x.shape
        h, dh = self.heads, d // self.heads
        y = self.ln1(x)
        q = (y @ self.wq).view(b, s, h, dh).transpose(1, 2)
        k = (y @ self.wk).view(b, s, h, dh).transpose(1, 2)
        v = (y @ self.wv).view(b, s, h, dh).transpose(1, 2)
        att = (q @ k.transpose(-2, -1) / math.sqrt(dh)).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = x + o @ self.wo
        return x + torch.relu(self.ln2(x) @ self.w1) @ self.w2


class LowRankMLP(torch.nn.Module):
    """An MLP of matmuls with factored layers written x @ (U @ V): the pass reassociates."""

    def __init__(self, d=24, r=4):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        p = lambda *s: torch.nn.Parameter(torch.randn(s, generator=g) / math.sqrt(s[0]))   # noqa: E731
        self.u1, self.v1, self.u2, self.v2 = p(d, r), p(r, 2 * d), p(2 * d, r), p(r, d)
        self.b1 = torch.nn.Parameter(torch.zeros(2 * d))

    def forward(self, x):
        x = torch.tanh(x @ (self.u1 @ self.v1) + self.b1)
        return x @ (self.u2 @ self.v2) * 0.5


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_transformer_block_forward_and_backward(dynamic):
    model = Block()
    x = _randn(2, 5, 16, seed=3).requires_grad_()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=ALL, dynamic=dynamic)
    out = compiled(x)
    report = einc.dynamo.last_report
    want = model(x)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    got_g = torch.autograd.grad(out.square().sum(), [x, model.wq, model.w1])
    want_g = torch.autograd.grad(want.square().sum(), [x, model.wq, model.w1])
    for g, w in zip(got_g, want_g):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert len(report) >= 8                           # 4 projections, 2 attention products, 2 MLP
    assert report.scaled >= 1                         # 1/sqrt(dh) moved onto a smaller operand


def test_transformer_block_is_left_as_written():
    """No contraction of the block saves a flop: the graph reaches the inner compiler as
    dynamo captured it."""
    model = Block()
    x = _randn(2, 5, 16, seed=3)
    graphs, before = [], []

    def capture(gm, inputs, **kw):
        before.append(gm.code)
        return _capture(graphs)(gm, inputs)
    torch.testing.assert_close(_compile(model, x, backend=capture), model(x), rtol=1e-4, atol=1e-4)
    report = einc.dynamo.last_report
    assert len(report) == 0 and report.kept >= 8
    assert graphs[0].code == before[0] and not _einc_nodes(graphs[0])


def test_lowrank_mlp_fuses_chains():
    model = LowRankMLP()
    x = _randn(8, 24, seed=4)
    torch.testing.assert_close(_compile(model, x), model(x), rtol=1e-4, atol=1e-4)
    report = einc.dynamo.last_report
    assert [r.fused for r in report.rewrites] == [2, 2] and report.scaled == 1 and not report.left
    assert all(r.flops * 4 < r.unfused_flops for r in report.rewrites)    # (x @ U) @ V: far fewer flops


def test_inductor_inner_on_matmul_mlp():
    model = LowRankMLP(d=8, r=2)
    x = _randn(4, 8, seed=5)
    out = _compile(model, x, backend=einc.dynamo.backend)        # default inner: inductor
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert einc.dynamo.last_report.fused == 2


def test_scalar_that_changes_dtype_is_not_absorbed():
    x = torch.randint(-3, 3, (4, 5))
    w = _randn(5, 3)
    fn = lambda x, w: (x * 0.5) @ w     # noqa: E731  (int * float -> float: the factor makes the operand)
    torch.testing.assert_close(_compile(fn, x, w, backend=ALL), fn(x, w))
    (r,) = einc.dynamo.last_report.rewrites
    assert r.scale_on == "-"


def test_in_place_writes_keep_reads_in_place():
    a, b, c = _randn(6, 6), _randn(6, 6, seed=1), _randn(6, 2, seed=2)

    def fn(a, b, c):
        y = a @ b          # reads a before it changes
        a.mul_(2.0)
        return (y @ c) * 3.0, a @ c

    got = _compile(fn, a.clone(), b, c, backend=ALL)
    want = fn(a.clone(), b, c)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)
    rewrites = einc.dynamo.last_report.rewrites
    assert len(rewrites) == 3 and all(r.fused == 1 and r.scale_on == "-" for r in rewrites)


@pytest.mark.parametrize("equation", ["ii->i", "ij->ji", "ij->ij"])
def test_an_einsum_torch_returns_as_a_view_stays_a_view(equation):
    """A one-operand einsum that sums nothing is a view in torch: a write through it
    reaches its operand, and the matrix product after reads the written tensor. Even
    with rewrite="all" it is left as written (and reported so)."""
    def fn(a, b):
        v = torch.einsum(equation, a)
        v.mul_(0.5)
        return a @ b, v
    a, b = _randn(4, 4), _randn(4, 3, seed=1)
    mine, theirs = a.clone(), a.clone()
    got, want = _compile(fn, mine, b, backend=ALL), fn(theirs, b)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)
    torch.testing.assert_close(mine, theirs)
    report = einc.dynamo.last_report
    assert [x.reason for x in report.left] == ["a view of its operand"] and len(report.rewrites) == 1


@pytest.mark.parametrize("factor", [math.inf, -math.inf, math.nan])
def test_a_factor_that_is_not_finite_stays_where_it_was(factor):
    """inf moved onto an operand would make NaN of its zeros (inf * 0); it stays a graph op."""
    x, u, v = _randn(3, 4), _randn(4, 2, seed=1), _randn(2, 5, seed=2)
    x[0] = 0.0
    fn = lambda x, u, v: (x @ (u @ v)) * factor      # noqa: E731
    got, want = _compile(fn, x, u, v, backend=ALL), fn(x, u, v)
    torch.testing.assert_close(got, want, equal_nan=True)
    assert all(r.scale_on == "-" for r in einc.dynamo.last_report.rewrites)
    div = lambda x, u, v: (x @ (u @ v)) / 0      # noqa: E731
    torch.testing.assert_close(_compile(div, x, u, v, backend=ALL), div(x, u, v), equal_nan=True)


def test_every_reported_rewrite_is_in_the_graph():
    graphs = []

    def shared(a, b, c):
        y = a @ b
        return y, y @ c, torch.tanh(a @ c) @ b
    a, b, c = _randn(8, 8), _randn(8, 8, seed=1), _randn(8, 8, seed=2)
    for x, y in zip(_compile(shared, a, b, c, backend=_capture(graphs, rewrite="all")), shared(a, b, c)):
        torch.testing.assert_close(x, y)
    (gm,) = graphs
    assert len(_einc_nodes(gm)) == len(einc.dynamo.last_report) == 4
    assert not _contraction_nodes(gm)


def test_single_matmul_is_left_to_inductor(monkeypatch):
    """Nothing to save: the graph goes to inductor's compile_fx exactly as dynamo captured it."""
    import torch._inductor.compile_fx as compile_fx
    handed, before = [], []

    def fake_compile_fx(gm, inputs, **kwargs):
        handed.append((gm, kwargs))
        return gm.forward
    monkeypatch.setattr(compile_fx, "compile_fx", fake_compile_fx)

    def backend(gm, inputs, **kw):
        before.append(gm.code)
        return einc.dynamo.backend(gm, inputs, **kw)
    x, w = _randn(64, 32), _randn(32, 16, seed=1)
    fn = lambda x, w: torch.relu(x @ w)     # noqa: E731
    torch.testing.assert_close(_compile(fn, x, w, backend=backend), fn(x, w))
    ((gm, kwargs),) = handed
    assert gm.code == before[0] and not _einc_nodes(gm) and len(_contraction_nodes(gm)) == 1
    # the same graph and the same compile_fx arguments as torch.compile's default backend
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(fn)(x, w), fn(x, w))
    (gm_inductor, kwargs_inductor) = handed[1]
    assert gm_inductor.code == gm.code and kwargs_inductor == kwargs
    report = einc.dynamo.last_report
    assert len(report) == 0 and report.inner == "inductor"
    (x_,) = report.left
    assert x_.sources == ("matmul",) and x_.reason == "no flops saved"
    assert x_.flops == x_.unfused_flops == 64 * 32 * 16 * 2
    assert "1 contraction(s) left to inductor" in str(report) and "no flops saved" in str(report)


def test_only_the_paying_chain_is_rewritten():
    """x @ (U @ V) becomes one einsum, reassociated; the plain matmul next to it stays a matmul."""
    graphs = []
    x, u, v, w = _randn(64, 96), _randn(96, 4, seed=1), _randn(4, 96, seed=2), _randn(96, 32, seed=3)
    fn = lambda x, u, v, w: (torch.relu(x @ (u @ v)), x @ w)    # noqa: E731
    got, want = _compile(fn, x, u, v, w, backend=_capture(graphs)), fn(x, u, v, w)
    for g, y in zip(got, want):
        torch.testing.assert_close(g, y, rtol=1e-4, atol=1e-4)
    report = einc.dynamo.last_report
    (r,) = report.rewrites
    assert r.sources == ("matmul", "matmul_1") and r.equation == "ab,bc,cd->ad"
    assert r.flops == 2 * (64 * 96 * 4 + 64 * 4 * 96) and r.unfused_flops == 2 * (96 * 4 * 96 + 64 * 96 * 96)
    (left,) = report.left
    assert left.sources == ("matmul_2",)
    (gm,) = graphs
    assert len(_einc_nodes(gm)) == 1
    assert [n.name for n in _contraction_nodes(gm)] == ["matmul_2"]


def test_multi_operand_einsum_is_costed_in_torchs_order():
    """torch.einsum contracts 3+ operands in opt_einsum's order (torch.backends.opt_einsum):
    einc's plan saves nothing then; with it off torch goes left to right, and einc's plan pays."""
    a, b, c = _randn(64, 8), _randn(8, 64, seed=1), _randn(64, 8, seed=2)
    fn = lambda a, b, c: torch.einsum("ij,jk,kl->il", a, b, c)     # noqa: E731
    torch.testing.assert_close(_compile(fn, a, b, c), fn(a, b, c), rtol=1e-4, atol=1e-4)
    report = einc.dynamo.last_report
    assert len(report) == 0 and report.left[0].flops == report.left[0].unfused_flops == 2 * 2 * 8 * 64 * 8
    with torch.backends.opt_einsum.flags(enabled=False):
        torch.testing.assert_close(_compile(fn, a, b, c), fn(a, b, c), rtol=1e-4, atol=1e-4)
    (r,) = einc.dynamo.last_report.rewrites
    assert r.flops == 2 * 2 * 8 * 64 * 8 and r.unfused_flops == 2 * 2 * 64 * 8 * 64


def test_no_fusion_across_grad_mode_switches():
    a, b, c = _randn(6, 6).requires_grad_(), _randn(6, 6, seed=1).requires_grad_(), _randn(6, 1, seed=2)

    def fn(a, b, c):
        with torch.no_grad():
            y = a @ b          # a constant for what follows: no gradient to a or b
        return (y @ c).sum() + (a * b).sum()
    out = _compile(fn, a, b, c, backend=ALL)
    assert [r.fused for r in einc.dynamo.last_report.rewrites] == [1, 1]
    ga, gb = torch.autograd.grad(out, (a, b))
    torch.testing.assert_close(ga, b.detach())
    torch.testing.assert_close(gb, a.detach())


@pytest.mark.parametrize("activation", [
    torch.nn.LeakyReLU(0.1, inplace=True), torch.nn.Hardtanh(-0.1, 0.1, inplace=True), torch.nn.ReLU6(inplace=True),
    torch.nn.ELU(inplace=True), torch.nn.SELU(inplace=True), lambda x: torch.nn.functional.relu(x, True)],
    ids=["leaky_relu", "hardtanh", "relu6", "elu", "selu", "relu_positional"])
def test_an_inplace_flag_passed_by_position_is_a_write(activation):
    """nn modules pass ``inplace`` by position (``F.hardtanh(x, -0.1, 0.1, True)``), as the
    graph keeps it: the pass took it for a pure op and moved reads of ``x`` past the write."""
    u, v = _randn(8, 2), _randn(2, 8, seed=1)

    def f(x):
        uv = u @ v
        xs = x * 0.5
        r = activation(x)               # writes into x
        return xs @ uv + r
    x = _randn(3, 8, seed=2)
    for backend in (ALL, EAGER):
        torch.testing.assert_close(_compile(f, x.clone(), backend=backend), f(x.clone()))


def test_a_factor_that_would_overflow_an_operand_scales_the_result():
    """float16: ``x * 1000`` is inf where ``x @ (A @ B) * 1000`` is finite; numbers whose
    product overflows, and a float argument that is 0 when run, scale the result as written."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(2, 6, generator=g) * 100).half()
    a, b = (torch.randn(6, 5, generator=g) * 0.01).half(), (torch.randn(5, 7, generator=g) * 0.1).half()
    fn = lambda x, a, b: x @ (a @ b) * 1000.0      # noqa: E731
    got, want = _compile(fn, x, a, b, backend=ALL), fn(x, a, b)
    assert want.isfinite().all() and got.isfinite().all()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2.0)
    assert einc.dynamo.last_report.rewrites[0].scale_on == "output"
    tiny = lambda x, a, b: x @ (a @ b) * 1e-5      # noqa: E731  (x * 1e-5 flushes 1e-3 to 0 in float16)
    x, a, b = torch.full((2, 6), 1e-3).half(), torch.full((6, 5), 100.0).half(), torch.full((5, 7), 20.0).half()
    got, want = _compile(tiny, x, a, b, backend=ALL), tiny(x, a, b)
    assert (want > 5e-4).all()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-5)
    x = torch.full((2, 6), 2e-3).half()                   # 120, but eager's * 1000 overflows before / 1000
    both = lambda x, a, b: x @ (a @ b) * 1000.0 / 1000.0      # noqa: E731
    assert not both(x, a, b).isfinite().any() and _compile(both, x, a, b, backend=ALL).isfinite().all()
    assert einc.dynamo.last_report.rewrites[0].scale_on == "nothing (they multiply to 1)"
    x, a, b = _randn(2, 6), _randn(6, 5, seed=1), _randn(5, 7, seed=2)
    x[1] = 0.0
    huge = lambda x, a, b: x @ (a @ b) * 1e200 * 1e200      # noqa: E731
    torch.testing.assert_close(_compile(huge, x.double(), a.double(), b.double(), backend=EAGER),
                               huge(x.double(), a.double(), b.double()), equal_nan=True)
    div = lambda x, a, b, s: x @ (a @ b) / s     # noqa: E731
    torch._dynamo.reset()
    f = torch.compile(div, backend=EAGER)
    f(x, a, b, 2.0)
    torch.testing.assert_close(f(x, a, b, 0.0), div(x, a, b, 0.0), equal_nan=True)


def test_in_float16_a_factor_written_on_an_operand_stays_on_it():
    """A scale on an operand guards what is computed from it: moved onto the result, the
    fused chain's intermediate (or the single product) overflowed where eager is finite."""
    x, A, B = torch.full((2, 64), 10.).half(), torch.full((64, 64), 300.).half(), torch.full((64, 64), 1e-3).half()
    chain = lambda x, A, B: x @ ((A * 1e-3) @ B)          # noqa: E731
    want = chain(x, A, B)
    assert want.isfinite().all()
    for backend in (EAGER, ALL):
        got = _compile(chain, x, A, B, backend=backend)
        assert got.isfinite().all()
        torch.testing.assert_close(got, want, rtol=2e-2, atol=0.1)
    (r,) = einc.dynamo.last_report.rewrites
    assert r.fused == 2 and r.scale_on == "operand 1 (as written)"
    a, b = torch.full((2, 64), 300.).half(), torch.full((64, 3), 300.).half()
    single = lambda a, b: (a / 1000) @ b * 2.0              # noqa: E731
    got, want = _compile(single, a, b, backend=ALL), single(a, b)
    assert want.isfinite().all() and torch.equal(got, want)
    assert einc.dynamo.last_report.rewrites[0].scale_on == "operand 0 and output (as written)"
    s = lambda a, b, t: (a / t) @ b                           # noqa: E731  (a symbolic factor: as written too)
    torch._dynamo.reset()
    f = torch.compile(s, backend=ALL)
    for t in (1000.0, 0.0):
        torch.testing.assert_close(f(a.float(), b.float(), t), s(a.float(), b.float(), t), equal_nan=True)


def test_in_float16_factors_stay_where_written_in_chains_in_order_and_on_kernels():
    """A factor on a producer's result that its consumer reads keeps the two apart (fused,
    ``x @ ((A @ B) * 1e-2)`` overflowed at ``x @ A``); two factors on one operand apply in
    the order written (``(A * 1e-3) * 2e3``: reversed, ``A * 2e3`` overflowed)."""
    h = lambda v, *s: torch.full(s, v).half()               # noqa: E731
    inside = lambda x, A, B: x @ ((A @ B) * 1e-2)             # noqa: E731
    x, A, B = h(100., 2, 64), h(3., 64, 64), h(1., 64, 64)
    want = inside(x, A, B)
    for backend in (EAGER, ALL):
        got = _compile(inside, x, A, B, backend=backend)
        assert want.isfinite().all() and torch.equal(got, want)
    assert all(r.fused == 1 for r in einc.dynamo.last_report.rewrites)
    twice = lambda A, B: ((A * 1e-3) * 2e3) @ B               # noqa: E731
    A, B = h(100., 2, 64), h(1e-3, 64, 64)
    want = twice(A, B)
    got = _compile(twice, A, B, backend=ALL)
    assert want.isfinite().all() and torch.equal(got, want)
    assert einc.dynamo.last_report.rewrites[0].scale_on == "operand 0 (as written)"


@pytest.mark.interpreter
def test_in_float16_a_factor_on_an_operand_is_not_moved_into_the_kernels_epilogue(kernel_device):
    """On the generated kernels (CUDA's default) the factor stays where it was written, not
    moved into the last kernel's epilogue, which comes after the float16 intermediate
    ``x @ A`` would have overflowed."""
    x, A, B = (torch.full((2, 64), 10.).half().to(kernel_device), torch.full((64, 64), 300.).half().to(kernel_device),
               torch.full((64, 64), 1e-3).half().to(kernel_device))
    chain = lambda x, A, B: x @ ((A * 1e-3) @ B)          # noqa: E731
    want = chain(x.cpu(), A.cpu(), B.cpu())
    got = _compile(chain, x, A, B, backend=EAGER)
    assert want.isfinite().all() and got.isfinite().all()
    torch.testing.assert_close(got.cpu(), want, rtol=2e-2, atol=0.1)
    assert einc.dynamo.last_report.rewrites[0].scale_on != "epilogue"


def test_in_float16_factors_that_multiply_to_1_keep_the_one_on_an_operand():
    """(x @ ((A * 1e-3) @ B)) * 1000: scaled down, then back up; dropping both let the
    fused chain's x @ A overflow where eager is finite."""
    x, A, B = torch.full((2, 64), 10.).half(), torch.full((64, 64), 300.).half(), torch.full((64, 64), 1e-3).half()
    for f in (lambda x, A, B: (x @ ((A * 1e-3) @ B)) * 1000, lambda x, A, B: (x @ ((A * 1e-3) @ B)) / 1e-3):
        want = f(x, A, B)
        for backend in (EAGER, ALL):
            got = _compile(f, x, A, B, backend=backend)
            assert want.isfinite().all() and got.isfinite().all()
            torch.testing.assert_close(got, want, rtol=2e-2, atol=1.0)
        assert einc.dynamo.last_report.rewrites[0].scale_on == "operand 1 and output (as written)"


def test_a_factor_on_a_result_fused_first_is_not_moved_past_a_chain_whose_factors_may_not_move():
    """((A @ B) * 1e-2) @ ((u * 1e-25) @ v), and with the consumer's operands swapped: the first
    fusion carries ``* 1e-2`` inside the chain, and the second (whose 1e-27 may not move) leaves
    it there; put on the output, it would give inf where eager is 8e36."""
    A = B = torch.full((2, 2), 1e19)
    u, v = torch.ones(2, 2), torch.full((2, 2), 1e25)
    for f in (lambda A, B, u, v: ((A @ B) * 1e-2) @ ((u * 1e-25) @ v),
              lambda A, B, u, v: ((u * 1e-25) @ v).t() @ ((A @ B) * 1e-2)):
        want = f(A, B, u, v)
        assert want.isfinite().all()
        got = _compile(f, A, B, u, v, backend=ALL)
        torch.testing.assert_close(got, want)


def test_the_report_says_a_factor_kept_two_contractions_apart():
    """It said 'no flops saved' though fusing would have saved them."""
    h = lambda v, *s: torch.full(s, v).half()               # noqa: E731
    f = lambda x, A, B: x @ ((A @ B) * 1e-3)                 # noqa: E731
    x, A, B = h(100., 2, 64), h(3., 64, 64), h(1., 64, 64)
    torch.testing.assert_close(_compile(f, x, A, B, backend=EAGER), f(x, A, B))
    left = einc.dynamo.last_report.left
    assert len(left) == 2 and all("not fused with" in x.reason and "may not move" in x.reason for x in left)


def test_which_operands_are_inputs_whatever_ops_dynamo_records():
    """A bounded operand is an input read through ops that keep its values, however the
    graph spells them: torch 2.14 and 2.15 record ``B.T`` as ``aten.numpy_T`` (the version
    matrix: the factor went to a larger operand there); ``view(dtype)``, as a method or
    aten's overload, reinterprets the bits."""
    from einc.dynamo.fx_pass import _an_input
    g = torch.fx.Graph()
    x = g.placeholder("x")
    assert _an_input(x)
    assert _an_input(g.call_function(torch.ops.aten.numpy_T.default, (x,)))
    assert _an_input(g.call_function(operator.getitem, (g.call_function(getattr, (x, "mT")), 0)))
    assert _an_input(g.call_method("to", (g.call_method("transpose", (x, 0, 1)), torch.float16)))
    assert not _an_input(g.call_function(torch.ops.aten.view.dtype, (x, torch.float32)))
    assert not _an_input(g.call_method("view", (x, torch.int32)))
    assert not _an_input(g.call_function(torch.relu, (x,)))
    assert not _an_input(g.call_function(operator.matmul, (x, x)))


def test_a_contraction_of_an_emitted_einsum_is_erased_with_the_rest():
    # y pays and is read thrice: the tensordot's and the matmul's chains, which pay too, read the
    # einsum emitted for y by the time they are erased: the pass read its shape there, and had
    # none (the tensordot raised ZeroDivisionError; the matmul stayed, run again by the eager inner)
    x, a, b, c, d = _randn(16, 16), _randn(16, 2, seed=1), _randn(2, 16, seed=2), _randn(16, 2, seed=3), \
        _randn(2, 16, seed=4)

    def fn(x, a, b, c, d):
        y = x @ (a @ b)
        return torch.tensordot(y, c @ d, dims=1), y @ (c @ d), y.sum()
    graphs = []
    got = _compile(fn, x, a, b, c, d, backend=_capture(graphs))
    for g, want in zip(got, fn(x, a, b, c, d)):
        torch.testing.assert_close(g, want)
    assert len(einc.dynamo.last_report.rewrites) == 3
    assert _contraction_nodes(graphs[0]) == []
