"""One call, one answer, one error, whatever door reaches einc: ``einc.einsum``, a patched
``torch.einsum``, ``einc.contract`` (opt_einsum's API), ``torch.jit.trace``,
``torch.fx.symbolic_trace`` and ``torch.compile(fullgraph=True)`` (einc's backend; a subset:
compiling is slow), over a corpus of good calls (size-0 and size-1 axes, broadcasting,
ellipsis, sublists, repeated indices, every float, int and complex dtype, operands that are
not contiguous) and bad ones (unknown letters, sizes that do not fit, operand counts, bad
``optimize`` and ``memory_limit`` values, named-notation errors).

A good call's result has torch.einsum's dtype and shape, is contiguous (einc's promise), and
matches the oracle (torch.einsum on float64 or complex128 copies, exactly for integers); a bad
call raises the eager call's error class and text at every door.  Where a door cannot match,
the documented behaviour is asserted instead (``EXPECTED``)."""

import contextlib
import fractions
import warnings

import numpy as np
import pytest
import torch

import einc
from einc import errors

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
COMPLEX = [torch.complex64, torch.complex128]


def _t(*shape, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex or dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=dtype)
    return torch.randint(0, 4, shape, generator=g).to(dtype)


def _strided(*shape, seed=0):
    """A tensor of ``shape`` whose strides are not contiguous ones (every other element)."""
    return _t(*shape[:-1], 2 * shape[-1], seed=seed)[..., ::2]


GOOD = {
    "matmul": (("ij,jk->ik", _t(2, 3), _t(3, 4, seed=1)), {}),
    "chain": (("ij,jk,kl->il", _t(2, 3), _t(3, 4, seed=1), _t(4, 2, seed=2)), {}),
    "size-0-contracted": (("ij,jk->ik", _t(2, 0), _t(0, 4, seed=1)), {}),
    "size-0-kept": (("ij,jk->ik", _t(0, 3), _t(3, 4, seed=1)), {}),
    "size-1": (("ij,jk->ik", _t(1, 3), _t(3, 1, seed=1)), {}),
    "broadcast-1": (("ij,ij->ij", _t(3, 1), _t(3, 4, seed=1)), {}),
    "ellipsis": (("...ij,...jk->...ik", _t(2, 1, 3, 4), _t(5, 4, 2, seed=1)), {}),
    "implicit": (("ij,jk", _t(2, 3), _t(3, 4, seed=1)), {}),
    "trace": (("ii", _t(3, 3)), {}),
    "diagonal": (("iij->ji", _t(3, 3, 2)), {}),
    "outer": (("i,j->ij", _t(3), _t(2, seed=1)), {}),
    "transpose": (("ij->ji", _t(2, 3)), {}),
    "sum-all": (("ijk->", _t(2, 3, 4)), {}),
    "sublist": ((_t(2, 3), [0, 1], _t(3, 4, seed=1), [1, 2], [0, 2]), {}),
    "sublist-ellipsis": ((_t(5, 2, 3), [Ellipsis, 0, 1], _t(3, 4, seed=1), [1, 2]), {}),
    "strided": (("ij,jk->ik", _strided(2, 3), _t(4, 3, seed=1).t()), {}),
    "expanded": (("ij,jk->ik", _t(1, 3).expand(2, 3), _t(3, 4, seed=1)), {}),
    "path": (("ij,jk,kl->il", _t(2, 3), _t(3, 4, seed=1), _t(4, 2, seed=2)), {"optimize": [(1, 2), (0, 1)]}),
    "numpy-path": (("ij,jk,kl->il", _t(2, 3), _t(3, 4, seed=1), _t(4, 2, seed=2)),
                   {"optimize": [np.array([1, 2]), (np.int64(0), np.int64(1))]}),
    "greedy": (("ij,jk,kl->il", _t(2, 3), _t(3, 4, seed=1), _t(4, 2, seed=2)), {"optimize": "greedy"}),
    "no-optimize": (("ij,jk,kl->il", _t(2, 3), _t(3, 4, seed=1), _t(4, 2, seed=2)), {"optimize": False}),
    "memory-limit": (("ij,jk,kl->il", _t(2, 3), _t(3, 4, seed=1), _t(4, 2, seed=2)), {"memory_limit": 8}),
    "numpy-limit": (("ij,jk->ik", _t(2, 3), _t(3, 4, seed=1)), {"memory_limit": np.int32(-1)}),
    "named-split": (("b (h d) -> b h d", _t(2, 6)), {"h": 2}),
    "named-merge": (("b h d, b h d -> b (h d)", _t(2, 3, 2), _t(2, 3, 2, seed=1)), {}),
    **{f"dtype-{str(d)[6:]}": (("ij,jk->ik", _t(2, 3, dtype=d), _t(3, 4, dtype=d, seed=1)), {})
       for d in FLOATS + INTS + COMPLEX},
}

BAD = {
    "unknown-output-letter": (("ij->k", _t(2, 3)), {}),
    "bad-character": (("i$,jk->ik", _t(2, 3), _t(3, 4)), {}),
    "size-mismatch": (("ij,jk->ik", _t(2, 3), _t(4, 5)), {}),
    "rank-mismatch": (("ijk,jk->ik", _t(2, 3), _t(3, 4)), {}),
    "too-few-operands": (("ij,jk->ik", _t(2, 3)), {}),
    "too-many-operands": (("ij->ij", _t(2, 3), _t(2, 3)), {}),
    "two-arrows": (("ij->j->i", _t(2, 3)), {}),
    "repeated-output": (("ij->ii", _t(2, 3)), {}),
    "sublist-negative-index": ((_t(2, 3), [0, -1], [0]), {}),
    "sublist-output-unknown": ((_t(2, 3), [0, 1], [2]), {}),
    "sublist-string": ((_t(2, 3), [0, "a"], [0]), {}),
    "sublist-float": ((_t(2, 3), [0, 1.5], [0]), {}),
    "numpy-operand": (("ij,jk->ik", _t(2, 3), np.ones((3, 4))), {}),
    # neither an equation nor an operand first: torch's "argument 'equation' must be str"
    "int-first": ((3, _t(2, 3)), {}),
    "bytes-first": ((b"ij->ji", _t(2, 3)), {}),
    "numpy-first": ((np.ones((2, 3)), [0, 1], _t(3, 4), [1, 2]), {}),
    "dtype-mix": (("ij,jk->ik", _t(2, 3), _t(3, 4, dtype=torch.float32)), {}),
    "optimize-name": (("ij,jk,kl->il", _t(2, 3), _t(3, 4), _t(4, 2)), {"optimize": "nonsense"}),
    "optimize-path-range": (("ij,jk,kl->il", _t(2, 3), _t(3, 4), _t(4, 2)), {"optimize": [(0, 5), (0, 1)]}),
    "optimize-path-short": (("ij,jk,kl->il", _t(2, 3), _t(3, 4), _t(4, 2)), {"optimize": [(0, 1)]}),
    "optimize-float": (("ij,jk->ik", _t(2, 3), _t(3, 4)), {"optimize": 3.5}),
    "optimize-object": (("ij,jk->ik", _t(2, 3), _t(3, 4)), {"optimize": object()}),
    "limit-half": (("ij,jk->ik", _t(2, 3), _t(3, 4)), {"memory_limit": 0.5}),
    "limit-numpy-half": (("ij,jk->ik", _t(2, 3), _t(3, 4)), {"memory_limit": np.float64(0.5)}),
    "limit-numpy-bool": (("ij,jk->ik", _t(2, 3), _t(3, 4)), {"memory_limit": np.bool_(True)}),
    "limit-bool": (("ij,jk->ik", _t(2, 3), _t(3, 4)), {"memory_limit": True}),
    "limit-list": (("ij,jk->ik", _t(2, 3), _t(3, 4)), {"memory_limit": [1]}),
    "limit-fraction": (("ij,jk->ik", _t(2, 3), _t(3, 4)), {"memory_limit": fractions.Fraction(1, 2)}),
    "limit-string": (("ij,jk->ik", _t(2, 3), _t(3, 4)), {"memory_limit": "big"}),
    "limit-and-equation": (("ij->k", _t(2, 3)), {"memory_limit": 0.5}),
    # the equation first, then the options, as eager reads them
    "optimize-and-equation": (("ij->k", _t(2, 3)), {"optimize": 3.5}),
    "select-and-equation": (("ij->k", _t(2, 3)), {"select": "nope"}),
    "good-select-and-equation": (("ij->k", _t(2, 3)), {"select": "blas"}),
    "layout-and-equation": (("ij->k", _t(2, 3)), {"layout": "nope"}),
    "select-and-optimize": (("ij,jk,kl->il", _t(2, 3), _t(3, 4), _t(4, 2)), {"optimize": "nonsense", "select": "nope"}),
    "sublist-and-optimize": ((_t(2, 3), [0, 1], [2]), {"optimize": 3.5}),
    "select-unknown": (("ij->i", _t(2, 3)), {"select": "nope"}),
    "named-unresolved": (("b (h d) -> b h d", _t(2, 6)), {}),
    "named-not-dividing": (("b (h d) -> b h d", _t(2, 6)), {"h": 4}),
    "named-keyword-size": (("b h d -> b (h d)", _t(2, 3, 2)), {"h": 4}),
    "named-two-sizes": (("b h d, b h d -> b (h d)", _t(2, 3, 2), _t(2, 4, 2)), {}),
    "named-unclosed": (("b (h d -> b h d", _t(2, 6)), {"h": 2}),
    "neither-reading": (("b h -> b h x", _t(2, 6)), {}),
    "neither-reading-3": (("a b, b c, c d -> a d x", _t(2, 3), _t(3, 4), _t(4, 2)), {}),
}

# Where a door does not give the eager error by design: (call, door) -> why; what it does
# instead is asserted in its own test below.
EXPECTED = {
    ("sublist-string", "contract"): "opt_einsum's sublists take any hashable as an index",
    ("bad-character", "contract"): "opt_einsum's doors read any character as an index",
    ("two-arrows", "contract"): "opt_einsum's doors word their own notation's errors",
    ("sublist-negative-index", "contract"): "opt_einsum's sublists take any hashable as an index",
    ("sublist-float", "contract"): "opt_einsum's sublists take any hashable as an index",
    ("int-first", "contract"): "opt_einsum's interleaved format reads the tensor as a sublist, as opt_einsum does",
    ("bytes-first", "contract"): "opt_einsum's interleaved format reads the tensor as a sublist, as opt_einsum does",
}


def _split(args):
    """``(template, tensors)``: ``args`` with each tensor's place None, and the tensors."""
    return [None if isinstance(a, torch.Tensor) else a for a in args], [a for a in args if isinstance(a, torch.Tensor)]


def _of(template, einsum, kwargs):
    """A function of the call's tensors alone (fixed arity: torch.fx traces no ``*args``)."""
    def call(*tensors):
        it = iter(tensors)
        return einsum(*[next(it) if a is None else a for a in template], **kwargs)
    n = sum(a is None for a in template)
    return {1: lambda a: call(a), 2: lambda a, b: call(a, b), 3: lambda a, b, c: call(a, b, c)}[n]


@contextlib.contextmanager
def _patched_for_dynamo():
    """``torch.einsum = einc.einsum`` as dynamo sees a patch installed before its first
    compile: its table of torch's functions, read once per process, rebuilt with the patch
    in, and again after it is undone (else einc.einsum stays torch's einsum to it)."""
    from torch._dynamo import trace_rules
    saved, torch.einsum = torch.einsum, einc.einsum
    trace_rules.clear_lru_cache()
    try:
        yield
    finally:
        torch.einsum = saved
        trace_rules.clear_lru_cache()
        trace_rules.get_torch_obj_rule_map()     # read again now, unpatched (tests/conftest.py)


def _run(door, args, kwargs, monkeypatch, call=None):
    """The call through ``door``: its result, or the exception it raised (``call`` in
    einc.einsum's place where given: einc.contract)."""
    template, tensors = _split(args)
    call = call or einc.einsum
    try:
        if door == "eager":
            return call(*args, **kwargs)
        if door == "contract":
            return einc.contract(*args, **kwargs)
        if door == "patched":
            monkeypatch.setattr(torch, "einsum", einc.einsum)
            return torch.einsum(*args, **kwargs)
        fn = _of(template, lambda *a, **k: (torch.einsum if door == "compile:inductor" else call)(*a, **k), kwargs)
        if door == "jit":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")     # jit.trace warns of the shapes it records
                return torch.jit.trace(fn, tuple(tensors), check_trace=False)(*tensors)
        if door == "fx":
            return torch.fx.symbolic_trace(fn)(*tensors)
        torch._dynamo.reset()
        # (the default backend sees torch.einsum, einc's)
        with _patched_for_dynamo() if door == "compile:inductor" else contextlib.nullcontext():
            try:
                return torch.compile(fn, fullgraph=True, backend=door.partition(":")[2])(*tensors)
            finally:
                torch._dynamo.reset()
    except Exception as error:      # noqa: BLE001 -- compared with the eager call's
        return error


# a named call's resolved einsum and reshape, as torch.einsum takes it
NAMED = {"named-split": lambda x: (torch.einsum("bk->bk", x).reshape(2, 2, 3),),
         "named-merge": lambda x, y: (torch.einsum("bhd,bhd->bhd", x, y).reshape(2, 6),)}


def _oracle(name, args):
    """torch.einsum on float64 (complex128, int64) copies, and on the operands as they are
    (its dtype and shape)."""
    if name in NAMED:
        tensors = _split(args)[1]
        return NAMED[name](*[t.double() for t in tensors])[0], NAMED[name](*tensors)[0]
    def wide(a):
        if not isinstance(a, torch.Tensor):
            return a
        return a.to(torch.complex128 if a.dtype.is_complex else torch.float64 if a.dtype.is_floating_point
                    else torch.int64)
    from einc.runtime.reference import torch_einsum
    return torch_einsum(*[wide(a) for a in args]), torch_einsum(*args)


def _check_good(got, args, name, door):
    assert isinstance(got, torch.Tensor), f"{name} at {door}: {type(got).__name__}: {got}"
    oracle, theirs = _oracle(name, args)
    assert got.dtype == theirs.dtype and got.shape == theirs.shape, (name, got.dtype, got.shape, theirs.dtype)
    assert got.is_contiguous(), name
    tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float32: 1e-5, torch.complex64: 1e-5}.get(got.dtype, 1e-12)
    if got.dtype.is_floating_point or got.dtype.is_complex:
        torch.testing.assert_close(got.to(oracle.dtype), oracle, rtol=tol, atol=tol, msg=name)
    else:
        assert torch.equal(got.to(torch.int64), oracle.to(theirs.dtype).to(torch.int64)), name


def _check_same_error(got, want, door):
    assert isinstance(want, errors.EincError), f"the eager call raised {type(want).__name__}: {want}"
    if door == "jit" and isinstance(got, RuntimeError) and not isinstance(got, errors.EincError):
        # TorchScript reports an op's error as a RuntimeError with its class and text
        assert f"{type(want).__name__}: {want}" in str(got)
        return
    if door == "compile:inductor" and torch.__version__ < (2, 13) and type(got).__name__ == "TorchRuntimeError":
        # torch before 2.13 wraps the error of the node it runs on fake tensors
        # (docs/autograd-and-compile.md, Inside PyTorch's machinery)
        assert f"got {want!r}" in str(got), (door, str(got))
        return
    assert type(got).__name__ == type(want).__name__ and isinstance(got, type(want)), (door, type(got), type(want))
    assert str(got) == str(want), door


DOORS = ["eager", "patched", "contract", "jit", "fx"]
# compile is slow: a few calls of each kind, einc's backend (and the default one, patched)
COMPILED_GOOD = ["matmul", "size-0-kept", "ellipsis", "sublist", "strided", "named-split", "dtype-int32",
                 "dtype-complex64"]
COMPILED_BAD = ["size-mismatch", "too-few-operands", "optimize-path-range", "optimize-float", "limit-numpy-half",
                "limit-numpy-bool", "limit-list", "sublist-negative-index", "sublist-string",
                "named-not-dividing", "neither-reading", "neither-reading-3", "select-unknown",
                "named-two-sizes", "dtype-mix", "limit-and-equation", "optimize-and-equation",
                "select-and-equation", "good-select-and-equation", "layout-and-equation", "select-and-optimize",
                "sublist-and-optimize", "sublist-float", "numpy-operand", "optimize-object", "int-first",
                "bytes-first", "numpy-first"]


# the default backend, patched: one good call (inductor compiles it); bad ones fail as dynamo traces
# (dynamo hands that node a numpy operand as a tensor, and no node takes object(): as for torch's own einsum,
# docs/autograd-and-compile.md, Inside PyTorch's machinery)
INDUCTOR = {"good": ["matmul"], "bad": ["size-mismatch", "optimize-float", "sublist-negative-index", "sublist-float"]}


def _cases(table, compiled, kind):
    return [(name, door) for name in table for door in DOORS if (name, door) not in EXPECTED] + \
        [(name, "compile:einc") for name in compiled] + [(name, "compile:inductor") for name in INDUCTOR[kind]]


@pytest.mark.parametrize("name, door", _cases(GOOD, COMPILED_GOOD, "good"))
def test_a_good_call_gives_the_oracle_answer_at_every_door(name, door, monkeypatch):
    args, kwargs = GOOD[name]
    _check_good(_run(door, args, kwargs, monkeypatch), args, name, door)


@pytest.mark.parametrize("name, door", [c for c in _cases(BAD, COMPILED_BAD, "bad") if c[1] != "eager"])
def test_a_bad_call_raises_the_eager_error_at_every_door(name, door, monkeypatch):
    args, kwargs = BAD[name]
    want, got = _run("eager", args, kwargs, monkeypatch), _run(door, args, kwargs, monkeypatch)
    if name == "optimize-object" and door == "compile:einc" and torch.__version__ < (2, 13):
        # dynamo before torch 2.13 traces no id() of an object() (docs/autograd-and-compile.md)
        assert type(got).__name__ == "Unsupported" and "id()" in str(got), (door, got)
        return
    _check_same_error(got, want, door)


CONTRACT = {"cast": {"dtype": torch.float32, "casting": "same_kind"},
            "cast-by-name": {"dtype": "float32", "casting": "same_kind"},
            "cast-refused": {"dtype": torch.float32},
            "cast-sublists": {"dtype": torch.complex128}}


@pytest.mark.parametrize("name, door", [(n, d) for n in CONTRACT for d in ("jit", "fx", "compile:einc")])
def test_contract_s_dtype_casts_at_every_door(name, door, monkeypatch):
    """``einc.contract(..., dtype=)`` casts the operands (or refuses the cast) as the eager
    call does at the traced doors (under torch.fx the whole call is a node: a proxy has no
    dtype to cast from)."""
    args = (_t(2, 3), [0, 1], _t(3, 4, seed=1), [1, 2]) if name == "cast-sublists" else \
        ("ij,jk->ik", _t(2, 3), _t(3, 4, seed=1))
    want = _run("eager", args, CONTRACT[name], monkeypatch, einc.contract)
    got = _run(door, args, CONTRACT[name], monkeypatch, einc.contract)
    if isinstance(want, Exception):
        _check_same_error(got, want, door)
        return
    assert isinstance(got, torch.Tensor), got
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)


def test_opt_einsum_s_doors_read_opt_einsum_s_notation(monkeypatch):
    """``einc.contract`` reads equations and sublists as opt_einsum does (docs/migrating.md):
    a character einsum refuses is an index, a negative int a sublist index, and two arrows
    are refused in its own words, as an EquationError all the same."""
    import opt_einsum
    for name in ("bad-character", "sublist-negative-index"):
        args, _ = BAD[name]
        wide = [a.double() if isinstance(a, torch.Tensor) else a for a in args]
        torch.testing.assert_close(_run("contract", args, {}, monkeypatch), opt_einsum.contract(*wide))
    args, _ = BAD["two-arrows"]
    got = _run("contract", args, {}, monkeypatch)
    assert isinstance(got, errors.EquationError) and str(got).startswith("contract(): ")
    for name in ("int-first", "bytes-first"):      # operand 0 with the tensor as its sublist, as opt_einsum reads it
        args, _ = BAD[name]
        with pytest.raises(Exception) as theirs:
            opt_einsum.contract(*args)
        assert type(_run("contract", args, {}, monkeypatch)) is type(theirs.value)


def test_a_sublist_of_symbols_traces_and_refuses_as_eager():
    """Under ``dynamic=True`` dynamo reads a sublist's ints passed as an argument as symbols:
    the call traces as before (their values specialized), and a sublist that is no
    equation raises the eager error, not dynamo's "Observed exception"."""
    x = _t(2, 3)
    torch._dynamo.reset()
    try:
        fn = torch.compile(lambda x, s: einc.einsum(x, s, [0]), fullgraph=True, backend="eager", dynamic=True)
        torch.testing.assert_close(fn(x, [0, 1]), x.sum(1))
        with pytest.raises(errors.ArgumentError) as info:
            fn(x, [0, -1])
    finally:
        torch._dynamo.reset()
    with pytest.raises(errors.ArgumentError) as eager:
        einc.einsum(x, [0, -1], [0])
    assert str(info.value) == str(eager.value)


@pytest.mark.parametrize("kwargs, python", [({"memory_limit": np.int64(5)}, {"memory_limit": 5}),
                                            ({"optimize": [np.array([0, 1])]}, {"optimize": [(0, 1)]})],
                         ids=["limit", "path"])
def test_the_patched_torch_einsum_under_compile_takes_python_s_numbers(kwargs, python):
    """With ``torch.einsum = einc.einsum`` before a first compile, dynamo takes the call for
    torch's own and hands its numpy arguments over as tensors of unknown value
    (docs/autograd-and-compile.md, Inside PyTorch's machinery): a numpy limit or path fails there, where ``einc.einsum``
    reads it; Python's numbers run."""
    a, b = _t(2, 3), _t(3, 4, seed=1)
    want = einc.einsum("ij,jk->ik", a, b, **kwargs)
    def compiled(options):
        torch._dynamo.reset()
        return torch.compile(lambda a, b: torch.einsum("ij,jk->ik", a, b, **options), fullgraph=True,
                             backend="eager")(a, b)
    try:
        with _patched_for_dynamo():
            wrapped = (torch._dynamo.exc.TorchRuntimeError,) if torch.__version__ < (2, 13) else ()  # (as above)
            with pytest.raises((errors.PathError, torch._dynamo.exc.UserError, *wrapped)):
                compiled(kwargs)
            got = compiled(python)
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(got, want)


def test_the_patched_torch_einsum_under_compile_reads_what_dynamo_hands_torch_s():
    """With ``torch.einsum = einc.einsum`` before a first compile, a numpy operand reaches the
    node dynamo records as a tensor, as it reaches torch's own einsum there: the call runs,
    where eagerly it raises OperandTypeError; ``optimize=object()`` no node takes: dynamo's
    Unsupported, not einc's PathError (docs/autograd-and-compile.md, Inside PyTorch's machinery)."""
    a, n, optimizer = _t(2, 3), np.ones((3, 4)), object()
    torch._dynamo.reset()
    try:
        with _patched_for_dynamo():
            got = torch.compile(lambda a: torch.einsum("ij,jk->ik", a, n), fullgraph=True, backend="eager")(a)
            torch._dynamo.reset()
            with pytest.raises(torch._dynamo.exc.Unsupported) as info:
                torch.compile(lambda a: torch.einsum("ij->i", a, optimize=optimizer), fullgraph=True,
                              backend="eager")(a)
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(got, a @ torch.from_numpy(n))
    assert not isinstance(info.value, errors.EincError)


def test_a_traced_call_refuses_a_good_select_it_cannot_carry():
    """``select=`` does not travel in the compiled op (docs/autograd-and-compile.md): a name
    eager takes is refused under ``torch.jit.trace`` and ``fullgraph=True``, with its own
    error; a bad one gets the eager error (``select-unknown`` above)."""
    x = _t(2, 3)
    assert einc.einsum("ij->i", x, select="blas").shape == (2,)
    with pytest.raises(errors.ArgumentError, match="select= cannot be passed to the compiled op"):
        torch.jit.trace(lambda x: einc.einsum("ij->i", x, select="blas"), (x,))


@pytest.mark.parametrize("text, shapes, sizes, out", [("ij,jk->ik", [(2, 3), (3, 4)], {}, (2, 5)),
                                                      ("b (h d) -> b h d", [(2, 6)], {"h": 2}, (2, 7))],
                         ids=["plain", "named"])
def test_a_traced_out_of_the_wrong_shape_names_the_sizes_as_eager(text, shapes, sizes, out):
    """``out=`` of the wrong shape under ``torch.jit.trace``: the eager error's text, its
    sizes as numbers (the tracer hands sizes over as 0-d tensors: it read ``(tensor(2),
    tensor(5))``)."""
    ops = tuple(_t(*s) for s in shapes)

    def fn(*ops):
        return einc.einsum(text, *ops, out=torch.empty(out, dtype=torch.float64), **sizes)
    with pytest.raises(errors.OutError) as eager:
        fn(*ops)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # jit.trace warns of the shapes it records
        with pytest.raises(errors.OutError) as traced:
            torch.jit.trace(fn, ops, check_trace=False)
    assert str(traced.value) == str(eager.value)


def test_layout_any_is_contiguous_where_the_op_runs():
    """``layout="any"`` lets the eager call return einc's last step's order (here not
    contiguous); the traced doors run the custom op, whose result is contiguous in either
    layout (docs/semantics.md): the same values, shape and dtype."""
    a, b = _t(2, 3), _t(3, 4, seed=1)

    def fn(a, b):
        return einc.einsum("ij,jk->ki", a, b, layout="any")
    eager = fn(a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # jit.trace warns of the shapes it records
        traced = torch.jit.trace(fn, (a, b), check_trace=False)(a, b)
    assert not eager.is_contiguous() and traced.is_contiguous()
    torch.testing.assert_close(traced, eager)
