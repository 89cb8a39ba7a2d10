"""einc's errors under torch.compile are the errors the eager call raises: einc's class (so
``except einc.errors.ShapeError``, ``except ValueError`` catch them) and eager's text.
Without ``fullgraph`` dynamo runs the failing call eagerly; with it, dynamo lets only its own
``Unsupported`` through, so einc raises a subclass of both, named as its class
(``einc.custom_op.traced_error``).  The calls fail while dynamo traces them, before any
backend compiles: most cases use the eager backend."""

import copy
import pickle

import pytest
import torch

import einc
from einc import errors


def _r(*shape, seed=0, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _raised(fn, *args) -> Exception:
    with pytest.raises(errors.EincError) as info:
        fn(*args)
    return info.value


def _compiled(fn, args, fullgraph=True, backend="eager", dynamic=None) -> Exception:
    """The error ``fn`` raises compiled (dynamo's caches cleared before and after)."""
    torch._dynamo.reset()
    try:
        return _raised(torch.compile(fn, fullgraph=fullgraph, backend=backend, dynamic=dynamic), *args)
    finally:
        torch._dynamo.reset()


def _same(got: Exception, want: Exception) -> None:
    assert isinstance(got, type(want)) and type(got).__name__ == type(want).__name__, (type(got), type(want))
    assert str(got) == str(want)
    assert repr(got) == repr(want)


NAMED_EXPRESSION = einc.contract_expression("b n (h d), h d e -> b n (h e)", (2, 3, 20), (4, 5, 6), h=4)
CASES = {
    # named axes: a size that does not divide, no size for a composite, sizes of one axis that differ
    "named_indivisible": (lambda x: einc.einsum("b n (h d) -> b h n d", x, h=3), (_r(2, 5, 7),)),
    "named_no_size": (lambda x: einc.einsum("b n (h d) -> b h n d", x), (_r(2, 5, 6),)),
    "named_sizes_differ": (lambda x, y: einc.einsum("b n d, b m d -> b n m", x, y), (_r(2, 3, 4), _r(3, 3, 4))),
    "equation": (lambda x, y: einc.einsum("ij,jk->i$k", x, y), (_r(2, 3), _r(3, 4))),
    "shapes": (lambda x, y, z: einc.einsum("ij,jk,kl->il", x, y, z), (_r(2, 3), _r(3, 4), _r(5, 5))),
    "operand_count": (lambda x, y: einc.einsum("ij,jk,kl->il", x, y), (_r(2, 3), _r(3, 4))),
    "not_a_tensor": (lambda x: einc.einsum("ij,jk->ik", x, 3), (_r(2, 3),)),
    "dtypes": (lambda x, y: einc.einsum("ij,jk->ik", x, y), (_r(2, 3), _r(3, 4, dtype=torch.float64))),
    "optimize": (lambda x, y: einc.einsum("ij,jk->ik", x, y, optimize="nope"), (_r(2, 3), _r(3, 4))),
    "out_shape": (lambda x, y, o: einc.einsum("ij,jk->ik", x, y, out=o), (_r(2, 3), _r(3, 4), torch.zeros(3, 3))),
    # a named expression at other sizes, where a composite does not split
    "named_expression_shapes": (lambda x, w: NAMED_EXPRESSION(x, w), (_r(5, 3, 22), _r(4, 5, 6))),
}


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_compiled_call_raises_the_eager_error(case, fullgraph):
    """They came as dynamo's InternalTorchDynamoError (named axes, out=) or, from the op's
    fake kernel, its TorchRuntimeError, which fullgraph=False raised too."""
    fn, args = CASES[case]
    _same(_compiled(fn, args, fullgraph), _raised(fn, *args))


@pytest.mark.parametrize("backend", ["inductor", "einc"])
def test_every_backend_raises_it(backend):
    fn, args = CASES["named_indivisible"]
    got = _compiled(fn, args, backend=backend)
    _same(got, _raised(fn, *args))
    assert isinstance(got, errors.ShapeError) and isinstance(got, ValueError) and isinstance(got, RuntimeError)


def test_the_compiled_error_pickles_as_einc_s_class():
    fn, args = CASES["shapes"]
    got = _compiled(fn, args)
    back = pickle.loads(pickle.dumps(got))
    assert type(back) is errors.ShapeError and str(back) == str(got)


def test_a_failing_op_runs_eagerly_without_dynamo_compiling_einc_s_runtime():
    """Without fullgraph dynamo breaks the graph at an op call that fails (here torch has no
    product of bools) and runs it eagerly, compiling none of einc's runtime: were the op's
    kernels frames of their own to it, it would compile each frame in turn (some fifty)."""
    fn, args = (lambda x, y: einc.einsum("ij,jk->ik", x, y)), (_r(2, 3) > 0, _r(3, 4) > 0)
    try:
        _fails_in_frames(fn, args, 10)      # the caller's and einc's doors'
    finally:
        torch._dynamo.reset()


def _fails_in_frames(fn, args, most: int) -> None:
    """``fn`` compiled without fullgraph raises eager's error on ``args``, dynamo compiling at
    most ``most`` frames (a reset first; the caller resets after)."""
    from torch._dynamo.utils import counters
    want = _raised(fn, *args)
    torch._dynamo.reset()
    counters["frames"].clear()
    _same(_raised(torch.compile(fn, backend="eager"), *args), want)
    assert counters["frames"]["total"] <= most, dict(counters["frames"])


def test_a_failing_named_call_runs_eagerly_without_dynamo_compiling_einc_s_doors():
    """Without fullgraph dynamo breaks the graph at a call that fails; einsum is never compiled
    as a frame of its own: it runs as it does uncompiled and fails at once, rather than dynamo
    tracing it down to the failing check again (a named call's out=: einsum, _named, split_out,
    refuse, each traced twice), for seconds."""
    fn, args = (lambda x, w, o: einc.einsum("b (h d), h d e -> b (h e)", x, w, out=o, h=2)), \
        (_r(3, 4), _r(2, 2, 5), torch.zeros(3, 7))
    try:
        _fails_in_frames(fn, args, 2)       # the caller's (its restart)
        a, b = _r(2, 3), _r(3, 4)
        whole = torch.compile(einc.einsum, backend="eager")
        assert torch.equal(whole("ij,jk->ik", a, b), einc.einsum("ij,jk->ik", a, b))
    finally:
        torch._dynamo.reset()


def test_opt_einsum_doors_keep_the_line_that_names_the_callers_characters():
    """contract and an expression read 'i1,1j->ij' in einc's letters: a shape error ends with a
    line that says so, which the compiled call lost (the eager call adds it as the error passes)."""
    expr = einc.contract_expression("i1,1j->ij", (2, 3), (3, 4))
    args = (_r(2, 3), _r(4, 4))
    for fn in (lambda a, b: einc.contract("i1,1j->ij", a, b), lambda a, b: expr(a, b)):
        want = _raised(fn, *args)
        assert str(want).endswith("(the equation 'i1,1j->ij' as opt_einsum reads it, in einc's letters: a for '1')")
        for fullgraph in (True, False):
            _same(_compiled(fn, args, fullgraph), want)


def test_the_line_is_the_doors_call_s_alone():
    """An einsum in the same letters traced after the door's call: its error has no such line."""
    def fn(a, b, c, d):
        return einc.contract("i1,1j->ij", a, b) + einc.einsum("ia,aj->ij", c, d)
    args = (_r(2, 3), _r(3, 4), _r(2, 3), _r(4, 4))
    want = _raised(fn, *args)
    assert "opt_einsum reads it" not in str(want)
    _same(_compiled(fn, args), want)


def test_a_same_kind_cast_compiles_under_fullgraph():
    """contract's casting='same_kind' asked torch.can_cast while dynamo traced it: a graph break."""
    fn, args = (lambda a, b: einc.contract("ij,jk->ik", a, b, dtype=torch.float16, casting="same_kind")), \
        (_r(2, 3), _r(3, 4))
    torch._dynamo.reset()
    try:
        got = torch.compile(fn, fullgraph=True, backend="eager")(*args)
    finally:
        torch._dynamo.reset()
    assert got.dtype == torch.float16 and torch.equal(got, fn(*args))


_EXPR = einc.contract_expression("ij,jk->ik", (2, 3), (3, 4))
_CONSTANT = einc.contract_expression("ij,jk->ik", (2, 3), _r(3, 4), constants=[1])
ARGUMENTS = {
    "backend": (lambda a, b: einc.einsum("ij,jk->ik", a, b, backend="numpy"), (_r(2, 3), _r(3, 4))),
    "contract_backend": (lambda a, b: einc.contract("ij,jk->ik", a, b, backend="numpy"), (_r(2, 3), _r(3, 4))),
    "contract_order": (lambda a, b: einc.contract("ij,jk->ik", a, b, order="F"), (_r(2, 3), _r(3, 4))),
    "contract_cast": (lambda a, b: einc.contract("ij,jk->ik", a, b, dtype="int32"), (_r(2, 3), _r(3, 4))),
    "contract_dtype_name": (lambda a, b: einc.contract("ij,jk->ik", a, b, dtype="not-a-dtype"), (_r(2, 3), _r(3, 4))),
    "expression_count": (lambda a: _EXPR(a), (_r(2, 3),)),
    "expression_rank": (lambda a, b: _EXPR(a, b), (_r(2, 3, 1), _r(3, 4))),
    "expression_constant_sizes": (lambda a: _CONSTANT(a), (_r(2, 5),)),
}


@pytest.mark.parametrize("case", sorted(ARGUMENTS))
def test_an_argument_refused_under_fullgraph_is_refused_as_eager_refuses_it(case):
    """Checked by code dynamo traces, these raised its "Observed exception" under fullgraph."""
    fn, args = ARGUMENTS[case]
    _same(_compiled(fn, args), _raised(fn, *args))


def test_a_dtype_that_is_no_dtype_raises_eager_s_error_without_fullgraph():
    """At the graph break dynamo compiled the reading of the name, through numpy: its
    InternalTorchDynamoError ("data type 'not-a-dtype' not understood")."""
    fn, args = ARGUMENTS["contract_dtype_name"]
    _same(_compiled(fn, args, fullgraph=False), _raised(fn, *args))


def test_select_is_refused_under_fullgraph_with_einc_s_error():
    """The compiled op takes no select= (EINC_SELECT says it there); without fullgraph the call
    runs eagerly, where it is taken."""
    fn, args = (lambda a, b: einc.einsum("ij,jk->ik", a, b, select="model")), (_r(2, 3), _r(3, 4))
    got = _compiled(fn, args)
    assert isinstance(got, errors.ArgumentError) and str(got).startswith("einsum(): select= cannot be passed")


DYNAMIC = {
    **{k: CASES[k] for k in ("shapes", "named_sizes_differ", "out_shape", "named_expression_shapes")},
    "named_out_shape": (lambda x, w, o: einc.einsum("b (h d), h d e -> b (h e)", x, w, out=o, h=2),
                        (_r(3, 4), _r(2, 2, 5), torch.zeros(3, 7))),
    "expression_rank": (lambda a, b: _EXPR(a, b), (_r(2, 3, 5), _r(3, 4))),
    "expression_constant_sizes": ARGUMENTS["expression_constant_sizes"],
}


@pytest.mark.parametrize("case", sorted(DYNAMIC))
def test_a_shape_error_of_dynamic_sizes_names_their_values(case):
    """Compiled with dynamic sizes, the error is eager's, naming the sizes' values: not their
    symbols (``size s17``), nor, where it is worded in traced code (out=, the constants' sizes),
    dynamo's own, which cannot hand over such text."""
    fn, args = DYNAMIC[case]
    _same(_compiled(fn, args, dynamic=True), _raised(fn, *args))


def test_a_product_torch_has_no_kernel_for_raises_einc_s_error_under_fullgraph():
    """torch has no product of bools: the fake kernel's UnsupportedDtypeError is a
    NotImplementedError, which dynamo made its own Unsupported before einc's could pass."""
    fn, args = (lambda x, y: einc.einsum("ij,jk->ik", x, y)), (_r(2, 3) > 0, _r(3, 4) > 0)
    got = _compiled(fn, args)
    _same(got, _raised(fn, *args))
    assert isinstance(got, NotImplementedError)
    # a size known only at run time (x[mask]) is asked of without a guard on its value
    fn, args = (lambda x, m: einc.einsum("i,i->", x[m], x[m])), (torch.tensor([True, False, True]),) * 2
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        _same(_compiled(fn, args), _raised(fn, *args))


def test_an_expression_built_while_tracing_is_refused_under_fullgraph_and_runs_without():
    """Built in the compiled function, an expression made dynamo fail on einc's planner (its
    text); einc says to build it outside, and without fullgraph the call runs eagerly."""
    def fn(a, b):
        return einc.contract_expression("ij,jk->ik", (2, 3), (3, 4))(a, b)
    args = (_r(2, 3), _r(3, 4))
    got = _compiled(fn, args)
    assert isinstance(got, errors.ArgumentError) and "build the expression outside the compiled function" in str(got)
    torch._dynamo.reset()
    try:
        assert torch.equal(torch.compile(fn, backend="eager")(*args), fn(*args))
    finally:
        torch._dynamo.reset()


_NAMED = "b n (h d), h d e -> b n (h e)"
_NAMED_EXPR = einc.contract_expression(_NAMED, (2, 3, 12), (3, 4, 5), h=3)
_NAMED_CONSTANT = einc.contract_expression(_NAMED, (2, 3, 12), _r(3, 4, 5, dtype=torch.float64), constants=[1], h=3)
NAMED_DTYPES = {
    "einsum": (lambda x, w: einc.einsum(_NAMED, x, w, h=3), (_r(2, 3, 12), _r(3, 4, 5, dtype=torch.float64))),
    "contract": (lambda x, w: einc.contract(_NAMED, x, w, h=3), (_r(2, 3, 12), _r(3, 4, 5, dtype=torch.float64))),
    "out": (lambda x, w, o: einc.einsum(_NAMED, x, w, h=3, out=o),
            (_r(2, 3, 12), _r(3, 4, 5, dtype=torch.float64), torch.empty(2, 3, 15, dtype=torch.float64))),
    "expression": (lambda x, w: _NAMED_EXPR(x, w), (_r(2, 3, 12), _r(3, 4, 5, dtype=torch.float64))),
    "expression_constant": (lambda x: _NAMED_CONSTANT(x), (_r(2, 3, 12),)),
    "bool": (lambda x, w: einc.einsum("b (h d), h d -> b", x, w, h=3), (_r(2, 12) > 0, _r(3, 4) > 0)),
}


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize("case", sorted(NAMED_DTYPES))
def test_a_named_call_s_dtype_error_names_the_equation_as_written_compiled(case, fullgraph):
    """Under fullgraph the error came from the op's fake kernel, past the named door's except
    clause, and named the resolved letters ('bnhd,hde->bnhe', 'bhd,hd->b'; an expression with
    constants, what they leave: 'abcd,cde->abce'), where the eager call names the caller's."""
    fn, args = NAMED_DTYPES[case]
    want = _raised(fn, *args)
    assert "(h d)" in str(want), str(want)
    _same(_compiled(fn, args, fullgraph), want)


_F64 = _r(3, 4, dtype=torch.float64), _r(4, 5, dtype=torch.float64)
_FOLDED = einc.contract_expression("ij,jk,kl->il", (2, 3), *_F64, constants=[1, 2])
_BOOLS = einc.contract_expression("ij,jk,kl->il", (2, 3), _r(3, 4) > 0, _r(4, 5) > 0, constants=[1, 2])
_ONE = einc.contract_expression("xy,yz->xz", (2, 3), _F64[0], constants=[1])
_COPIED, _UNPICKLED = copy.deepcopy(_FOLDED), pickle.loads(pickle.dumps(_FOLDED))  # (found by id as dynamo traces)
EXPRESSION_DTYPES = {
    "folded": (lambda a: _FOLDED(a), (_r(2, 3),)),
    "copied": (lambda a: _COPIED(a), (_r(2, 3),)),
    "unpickled": (lambda a: _UNPICKLED(a), (_r(2, 3),)),
    "step": (lambda a: _BOOLS(a.to(torch.int32)), (_r(2, 3),)),
    "one_constant": (lambda a: _ONE(a), (_r(2, 3),)),
}


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize("case", sorted(EXPRESSION_DTYPES))
def test_an_expression_with_constants_raises_eager_s_dtype_error_compiled(case, fullgraph):
    """The op's fake kernel raised the dtype error of what the constants leave ('ab,bc,cd->ad'),
    where the eager call raises the whole equation's (contract's)."""
    fn, args = EXPRESSION_DTYPES[case]
    want = _raised(fn, *args)
    assert "ab,bc" not in str(want), str(want)      # (the remainder's letters)
    _same(_compiled(fn, args, fullgraph), want)


_NAMED_PLANNED = einc.contract_expression(_NAMED, (2, 3, 4), (2, 2, 5), h=2)
FAILING_DOORS = {
    "contract": (lambda a, b: einc.contract("ij,jk->ik", a, b), (_r(2, 3), _r(4, 4))),
    "contract_letters": (lambda a, b: einc.contract("i1,1j->ij", a, b), (_r(2, 3), _r(4, 4))),
    "contract_dtypes": (lambda a, b: einc.contract("ij,jk->ik", a, b), (_r(2, 3), _r(3, 4, dtype=torch.float64))),
    "contract_named": (lambda a, b: einc.contract(_NAMED, a, b, h=2), (_r(2, 3, 4), _r(2, 3, 5))),
    "expression": (lambda a, b: _EXPR(a, b), (_r(2, 3), _r(4, 4))),
    "expression_count": (lambda a: _EXPR(a), (_r(2, 3),)),
    "expression_constant": (lambda a: _FOLDED(a), (_r(2, 3),)),
    "expression_constant_sizes": (lambda a: _CONSTANT(a), (_r(2, 5),)),
    "expression_named": (lambda a, b: _NAMED_PLANNED(a, b), (_r(2, 3, 4), _r(2, 2, 5, dtype=torch.float64))),
    "contract_path": (lambda a, b: einc.contract_path("ij,jk->ik", a, b), (_r(2, 3), _r(4, 4))),
}


@pytest.mark.parametrize("case", sorted(FAILING_DOORS))
def test_a_failing_opt_einsum_door_runs_eagerly_without_dynamo_compiling_einc_s_frames(case):
    """Without fullgraph dynamo breaks the graph at a call that fails; the opt_einsum doors are
    never compiled as frames of their own, no more than einsum is: the caller's frame alone,
    and eager's error, rather than the door compiled as a frame and each frame below it in turn
    (contract, _named, ContractExpression.__call__, _admit, _check, _run, call, ...: up to 65
    frames, seconds)."""
    try:
        _fails_in_frames(*FAILING_DOORS[case], 2)       # the caller's (its restart)
    finally:
        torch._dynamo.reset()


def test_the_opt_einsum_doors_stay_in_the_graph():
    """Never compiled as frames of their own, the doors are still traced where a compiled
    function calls them: one graph, the op in it, no break."""
    from torch._dynamo.utils import counters
    w = _r(3, 4)
    calls = [(lambda a, b: einc.contract("ij,jk->ik", a, b).sin(), (_r(2, 3), w)),
             (lambda a, b: einc.contract(_NAMED, a, b, h=2).sin(), (_r(2, 3, 4), _r(2, 2, 5))),
             (lambda a, b: _EXPR(a, b).sin(), (_r(2, 3), w)),
             (lambda a: _FOLDED(a).sin(), (_r(2, 3, dtype=torch.float64),)),
             (lambda a, b: _NAMED_PLANNED(a, b).sin(), (_r(2, 3, 4), _r(2, 2, 5)))]
    for fn, args in calls:
        torch._dynamo.reset()
        counters.clear()
        try:
            got = torch.compile(fn, backend="eager")(*args)
            assert dict(counters["frames"]) == {"total": 1, "ok": 1} and not counters["graph_break"]
        finally:
            torch._dynamo.reset()
        torch.testing.assert_close(got, fn(*args))


def _autocast_call(x, y):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return einc.einsum("ij,jk->ik", x, y)


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize("named", [False, True])
def test_a_call_autocast_refuses_raises_eager_s_error_compiled(named, fullgraph):
    """float32 beside float64 under autocast, which torch.einsum refuses: the op's autocast
    kernel raised einc's DtypeError as dynamo's TorchRuntimeError, with fullgraph or
    without (dynamo breaks no graph at it), where the eager call raises the DtypeError."""
    if named:
        fn, args = (lambda x, w: _autocast_named(x, w)), (_r(2, 3, 12), _r(3, 4, 5, dtype=torch.float64))
    else:
        fn, args = _autocast_call, (_r(2, 3), _r(3, 4, dtype=torch.float64))
    want = _raised(fn, *args)
    assert isinstance(want, errors.DtypeError) and "under autocast" in str(want)
    _same(_compiled(fn, args, fullgraph), want)


def _autocast_named(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return einc.einsum(_NAMED, x, w, h=3)


# optimize= and memory_limit= values that are no path or no limit, or a path that does not fit
# the call's three operands: every door refuses each as the eager call does (the compiled op
# carries them as text, which read some back as others: a string index as an int, the name
# "false" as optimize=False, the limit "5" as 5)
MALFORMED = {
    "a_string_index": dict(optimize=[("0", 1), (0, 1)]),
    "a_string_index_in_lists": dict(optimize=[["0", 1], [0, 1]]),
    "a_bool_index": dict(optimize=[(True, 1), (0, 1)]),
    "a_float_index": dict(optimize=[(0.0, 1), (0, 1)]),
    "a_nested_index": dict(optimize=[((0,), 1), (0, 1)]),
    "bare_ints": dict(optimize=[0, 1]),
    "a_string_step": dict(optimize=["01", (0, 1)]),
    "a_negative_index": dict(optimize=[(0, 1), (-1, 0)]),
    "an_index_out_of_range": dict(optimize=[(0, 5), (0, 1)]),
    "a_repeated_index": dict(optimize=[(0, 0), (0, 1)]),
    "a_step_of_four": dict(optimize=[(0, 1, 2, 3)]),
    "an_empty_step": dict(optimize=[(), (0, 1), (0, 1)]),
    "a_path_for_two_operands": dict(optimize=[(0, 1)]),
    "a_path_for_four_operands": dict(optimize=[(0, 1), (0, 1), (0, 1)]),
    "no_steps": dict(optimize=[]),
    "the_name_false": dict(optimize="false"),
    "a_name_that_reads_as_a_path": dict(optimize="path:0,1;0,1"),
    "a_limit_string_of_digits": dict(memory_limit="5"),
    "an_empty_limit_string": dict(memory_limit=""),
}
CHAIN = "ij,jk,kl->il"


def _chain_doors(kw: dict):
    """A three-operand call of ``kw`` through each of einc's doors, by name."""
    return {"einsum": lambda a, b, c: einc.einsum(CHAIN, a, b, c, **kw),
            "torch.einsum": lambda a, b, c: torch.einsum(CHAIN, a, b, c, **kw),     # (patched)
            "contract": lambda a, b, c: einc.contract(CHAIN, a, b, c, **kw),
            "contract_expression": lambda a, b, c: einc.contract_expression(CHAIN, a.shape, b.shape, c.shape,
                                                                            **kw)(a, b, c)}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_path_or_limit_is_refused_as_eager_refuses_it_through_every_door(case, monkeypatch):
    """Each malformed path or limit raises eager's error in every door, compiled or not: a
    string index is not read back as an int from its text, the name "false" does not run left to
    right, a list of bare ints is not dynamo's "Observed exception" under fullgraph, and a bool
    index's message does not name the op's text."""
    monkeypatch.setattr(torch, "einsum", einc.einsum)
    args = (_r(3, 4), _r(4, 5, seed=1), _r(5, 6, seed=2))
    doors = _chain_doors(MALFORMED[case])
    want = _raised(doors["einsum"], *args)
    assert isinstance(want, (errors.PathError, errors.UnknownOptimizerError))
    for name, fn in doors.items():
        _same(_raised(fn, *args), want)
        if name != "contract_expression":       # (built while tracing, it is refused: see above)
            for fullgraph in (True, False):
                _same(_compiled(fn, args, fullgraph), want)
    _same(_compiled(doors["einsum"], args, backend="einc"), want)
