"""Every error path: the same built-in type torch.einsum raises, and a message that helps."""

import re

import pytest
import torch

import einc
from einc import errors, opt_einsum_api

A = torch.randn(3, 4)
B = torch.randn(4, 5)

# (equation, operands, einc error class, fragments the message must contain)
CASES = [
    ("i1,jk->ik", [A, B], errors.EquationError, ["'1'", "index 1", "i1,jk->ik\n   ^"]),
    ("ij->i->j", [A], errors.EquationError, ["'-'", "index 5"]),
    ("i..j->ij", [A], errors.EquationError, ["'.'", "ellipsis"]),
    ("...i...->i", [A], errors.EquationError, ["already found", "at most one"]),
    ("ij->ijk", [A], errors.EquationError, ["k does not appear"]),
    ("ij->ii", [A], errors.EquationError, ["i appears more than once"]),
    # three or more operands: torch's message is opt_einsum's, whose path search parses first
    ("ij,jk,kl->ii", [A] * 3, errors.EquationError, ["i appears more than once"]),
    ("ij,jk,kl->iz", [A] * 3, errors.EquationError, ["z does not appear"]),
    ("ij,jk,k...l...->i", [A] * 3, errors.EquationError, ["ellipsis was already found"]),
    ("ij,jk,k.l->i", [A] * 3, errors.EquationError, ["not part of any ellipsis"]),
    ("ij,jk,kl->..i", [A] * 3, errors.EquationError, ["not part of any ellipsis"]),
    ("ij,jk,kl->i.", [A] * 3, errors.EquationError, ["not part of any ellipsis"]),
    ("ij,jk,kl->->i", [A] * 3, errors.EquationError, ["'-' is not a letter"]),
    ("ij,jk,kl>i", [A] * 3, errors.EquationError, ["'>' is not a letter"]),
    # torch's notation fails and so does the named reading (a space between names): torch's error first
    ("ij->i j k", [A], errors.EquationError, ["k does not appear", "read as named axes instead", "output axis i"]),
    ("ij,jk->ik", [A], errors.OperandCountError, ["fewer", "'ij', 'jk'", "1 was passed"]),
    ("ij->ij", [A, B], errors.OperandCountError, ["more"]),
    ("ij,jk->ik", [A, B, B], errors.OperandCountError, ["3 were passed"]),
    ("ij,jk,kl->il", [A, B], errors.OperandCountError, ["fewer", "2 were passed"]),
    ("ijk->ij", [A], errors.ShapeError, ["operand 0", "'ijk'", "shape (3, 4)"]),
    ("...ijk->ij", [A], errors.ShapeError, ["operand 0", "fewer"]),
    ("ij,jk->ik", [A, torch.randn(5, 5)], errors.ShapeError,
     ["'j'", "size 5 in operand 1", "size 4 in operand 0", "ij,jk->ik\n     ^"]),
    ("ij,jk,kl->il", [A, torch.randn(5, 5), B], errors.ShapeError, ["'j'", "size 5 in operand 1"]),
    # the size a first operand of size 1 broadcast was given by the next one
    ("a,a,a->", [torch.ones(1), torch.ones(2), torch.ones(3)], errors.ShapeError,
     ["size 3 in operand 2", "size 2 in operand 1"]),
    ("ijk,jk,kl->il", [A, B, B], errors.ShapeError, ["operand 0", "'ijk'"]),
    ("ii->i", [torch.randn(2, 3)], errors.ShapeError, ["operand 0", "(2, 3)", "diagonal"]),
    ("...ij,...jk->...ik", [torch.randn(2, 3, 3, 4), torch.randn(5, 4, 6)], errors.ShapeError,
     ["ellipsis", "size 5", "size 3"]),
    ("ij,jk->ik", [A, B.double()], errors.DtypeError, ["torch.float32", "torch.float64", "ij,jk->ik"]),
    # torch's path meets float32 and float16 in a product; einc's (scale first) answered in float32
    ("a,a,ba->b", [torch.randn(2), torch.randn(2).half(), torch.randn(2, 2)], errors.DtypeError,
     ["torch.float16", "a,a,ba->b", "one dtype"]),
    ("ij,jk->ik", [A > 0, B > 0], errors.UnsupportedDtypeError, ["bool"]),
    # torch.mm has float8 kernels on the CPU but torch.einsum's bmm has none: einc answered
    # the matrix-shaped call (mm) and raised torch's bare error on the batched one
    ("ij,jk->ik", [A.to(torch.float8_e4m3fn), B.to(torch.float8_e4m3fn)], errors.UnsupportedDtypeError,
     ["float8_e4m3fn"]),
    ("bij,bjk->bik", [A[None].to(torch.float8_e5m2), B[None].to(torch.float8_e5m2)], errors.UnsupportedDtypeError,
     ["float8_e5m2"]),
    # quantized tensors: torch's products have no kernel for them (einc's stand-ins raised "aten::zero_")
    ("ij,jk->ik", [torch.quantize_per_tensor(A, 0.1, 0, torch.qint8),
                   torch.quantize_per_tensor(B, 0.1, 0, torch.qint8)], errors.UnsupportedDtypeError,
     ["quantized", "torch.qint8", "dequantize()"]),
    ("ij->ij", [[[1.0, 2.0]]], errors.OperandTypeError, ["operand 0", "list"]),
    ("ij,jk->ik", [A, 3], errors.OperandTypeError, ["operand 1", "int"]),
]
# torch's sentence is checked where its first line is about einsum itself (not a dtype
# name from a matrix product, or a Python type error).
TORCH_WORDING = (errors.EquationError, errors.OperandCountError, errors.ShapeError)


@pytest.mark.parametrize("equation,operands,cls,fragments", CASES, ids=[c[0] + "-" + c[2].__name__ for c in CASES])
def test_error(equation, operands, cls, fragments):
    """Same built-in type as torch.einsum, torch's own sentence first, then einc's detail;
    the inputs are left as they were."""
    before = [o.clone() if isinstance(o, torch.Tensor) else o for o in operands]
    with pytest.raises(Exception) as torch_err:
        torch.einsum(equation, *operands)
    with pytest.raises(cls) as einc_err:
        einc.einsum(equation, *operands)
    assert isinstance(einc_err.value, errors.EincError)
    assert isinstance(einc_err.value, type(torch_err.value)), (type(einc_err.value), type(torch_err.value))
    msg = str(einc_err.value)
    for fragment in fragments:
        assert fragment in msg, (fragment, msg)
    if cls in TORCH_WORDING:
        sentence = str(torch_err.value).splitlines()[0].rstrip(".").removeprefix("einsum(): ")
        # torch's (opt_einsum's) sentence for three or more operands gives the two sizes
        # the wrong way round; einc's puts the operand's own size first
        sentence = re.sub(r"(for operand \d+) \((\d+)\) (does not match previous terms) \((\d+)\)",
                          r"\1 (\4) \3 (\2)", sentence)
        squeeze = lambda text: text.replace(" ", "")  # noqa: E731 - torch writes "operand 1has"
        assert squeeze(msg).startswith(squeeze("einsum(): " + sentence)), (sentence, msg)
    for o, b in zip(operands, before):
        if isinstance(o, torch.Tensor):
            assert torch.equal(o, b)


def _check_torch_regex(args, regex, exception=RuntimeError):
    """PyTorch's own einsum error checks (test_linalg.py's test_einsum_error_cases): its
    regex after ``einsum\\(\\):.*`` must match einc's message, with the same exception type."""
    with pytest.raises(exception, match=r"einsum\(\):.*" + regex):
        torch.einsum(*args)
    with pytest.raises(exception, match=r"einsum\(\):.*" + regex):
        einc.einsum(*args)


X, Y = torch.randn(2), torch.randn(2, 3)
TORCH_REGEX_CASES = [
    (("", []), r"at least one operand", ValueError),
    ((". ..", [X]), r"found \'.\' for operand 0 that is not part of any ellipsis", RuntimeError),
    (("... ...", [X]), r"found \'.\' for operand 0 for which an ellipsis was already found", RuntimeError),
    (("1", [X]), r"invalid subscript given at index 0", RuntimeError),
    ((",", [X]), r"fewer operands were provided than specified in the equation", RuntimeError),
    (("", [X, X]), r"more operands were provided than specified in the equation", RuntimeError),
    (("", [X]), r"the number of subscripts in the equation \(0\) does not match the number of dimensions "
                r"\(1\) for operand 0 and no ellipsis was given", RuntimeError),
    (("ai", [X]), r"the number of subscripts in the equation \(2\) does not match the number of dimensions "
                  r"\(1\) for operand 0 and no ellipsis was given", RuntimeError),
    (("ai...", [X]), r"the number of subscripts in the equation \(2\) is more than the number of dimensions "
                     r"\(1\) for operand 0", RuntimeError),
    (("a->... .", [X]), r"found \'.\' for output but an ellipsis \(...\) was already found", RuntimeError),
    (("a->..", [X]), r"found \'.\' for output that is not part of any ellipsis \(...\)", RuntimeError),
    (("a->1", [X]), r"invalid subscript given at index 3", RuntimeError),
    (("a->aa", [X]), r"output subscript a appears more than once in the output", RuntimeError),
    (("a->i", [X]), r"output subscript i does not appear in the equation for any input operand", RuntimeError),
    (("aa", [Y]), r"subscript a is repeated for operand 0 but the sizes don\'t match, 3 != 2", RuntimeError),
    (("a, ba", [X, Y]), r"subscript a has size 3 for operand 1 which does not broadcast with previously "
                        r"seen size 2", RuntimeError),
    ((X, [-1]), r"not within the valid range \[0, 52\)", ValueError),
]


@pytest.mark.parametrize("args,regex,exception", TORCH_REGEX_CASES, ids=[c[1][:40] for c in TORCH_REGEX_CASES])
def test_torch_error_regexes(args, regex, exception):
    if isinstance(args[0], str):
        args = (args[0], *args[1])
    _check_torch_regex(args, regex, exception)


def test_no_operands_is_value_error():
    for args in [(), ("ij->ij",)]:
        with pytest.raises(ValueError):
            torch.einsum(*args)
        with pytest.raises(errors.ArgumentError, match="at least one operand"):
            einc.einsum(*args)


def test_sublist_errors():
    with pytest.raises(ValueError):
        einc.einsum(A, [0, -1])
    with pytest.raises(TypeError):
        einc.einsum(A, ["a", "b"])
    assert einc.einsum(A, [0, 60]).shape == A.shape         # beyond torch's [0, 52)
    with pytest.raises(errors.ArgumentError, match="1000000 in the list of operand 0 is beyond the .* letters"):
        einc.einsum(A, [0, 10**6])                          # and beyond einc's
    with pytest.raises(errors.OperandTypeError, match="must be a list of ints"):
        einc.einsum(A, torch.tensor([[0, 1]]))              # a 2-d tensor is not a sublist
    for args in [(A, [0, 1], B, [1, 2], [0, 2], [0, 2]), ("ij,jk,kl", A, B, None)]:
        with pytest.raises(Exception) as torch_err:       # torch: ValueError (through opt_einsum)
            torch.einsum(*args)
        with pytest.raises(errors.OperandTypeError) as einc_err:
            einc.einsum(*args)
        assert isinstance(einc_err.value, type(torch_err.value)) and isinstance(einc_err.value, TypeError)


def test_bad_optimizer_and_path():
    with pytest.raises(errors.PathError, match="valid names are"):
        einc.einsum("ij,jk->ik", A, B, optimize="fastest")
    with pytest.raises(ValueError, match="invalid contraction"):
        einc.einsum("ij,jk,kl->il", A, B, torch.randn(5, 2), optimize=[(0, 3)])
    with pytest.raises(ValueError, match="uncontracted"):
        einc.einsum("ij,jk,kl->il", A, B, torch.randn(5, 2), optimize=[(0, 1)])


def test_errors_are_not_cached():
    """A failing key raises again (and the same) on the next call."""
    for _ in range(2):
        with pytest.raises(errors.ShapeError):
            einc.einsum("ij,jk->ik", A, torch.randn(5, 5))


def test_expression_shape_check():
    # as opt_einsum's: the number and ranks of the operands must be the planned ones, their
    # sizes need not (a smaller last batch runs the planned path)
    expr = einc.contract_expression("ij,jk->ik", (3, 4), (4, 5))
    b = torch.randn(4, 6)
    torch.testing.assert_close(expr(A, b), A @ b)
    with pytest.raises(errors.ShapeError, match=r"operand 1 .* planned for \(4, 5\) \(2 dimensions\)"):
        expr(A, torch.randn(4))
    with pytest.raises(errors.ShapeError, match="'j' has size 5 in operand 1"):
        expr(A, torch.randn(5, 5))
    with pytest.raises(errors.OperandCountError):
        expr(A)
    # with constants folded, a size that does not fit a constant's is named in the whole equation
    w = torch.randn(4, 4), torch.randn(4, 3)
    three = einc.contract_expression("bij,jk,kl->bil", (8, 2, 4), *w, constants=[1, 2])
    x = torch.randn(5, 2, 4)
    torch.testing.assert_close(three(x), torch.einsum("bij,jk,kl->bil", x, *w))
    with pytest.raises(errors.ShapeError, match="'j' has size 4 in operand 1 .* but size 6 in operand 0 "):
        three(torch.randn(5, 2, 6))


def test_an_expression_checks_a_calls_shapes_once(monkeypatch):
    """An expression checks the operands of shapes it has not met (the whole equation's graph
    built again, with constants), once: a later call of the same shapes is a lookup and the run,
    as a call of the planned shapes is, rather than the graph built again at every call of other
    sizes (twice the call's time).  Shapes that do not fit raise at each call."""
    checks = []
    check = einc.ContractExpression._check
    monkeypatch.setattr(einc.ContractExpression, "_check", lambda self, ops: checks.append(1) or check(self, ops))
    monkeypatch.setattr(opt_einsum_api, "_SHAPES_KEPT", 3, raising=False)
    w = torch.randn(4, 4), torch.randn(4, 3)
    expr = einc.contract_expression("bij,jk,kl->bil", (8, 2, 4), *w, constants=[1, 2])
    for b in [8, 5, 5, 8, 5, 2, 3, 4, 5, 5, 8]:
        x = torch.randn(b, 2, 4)
        torch.testing.assert_close(expr(x), torch.einsum("bij,jk,kl->bil", x, *w))
    assert len(checks) == 5         # 5, 2; 3 and 4 (past the bound: the planned shapes and 3 kept), 5 again
    for _ in range(2):
        with pytest.raises(errors.ShapeError, match="'j' has size 4 in operand 1 .* but size 6 in operand 0 "):
            expr(torch.randn(5, 2, 6))
        with pytest.raises(errors.OperandTypeError):
            expr([[1.0]])
    assert len(checks) == 9


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_warning_under_torch_compile_names_the_callers_file(kernel_device, monkeypatch, tmp_path, backend):
    """einc's warnings skip einc's, torch's and torch's generated frames (the FX graph's
    ``<eval_with_key>``, inductor's compiled module: they named those), so a warning from
    a compiled call names the user's file.  Here: the kernel cache folder under a file,
    refused when the compiled call loads its kernel."""
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path / "afile" / "sub"))
    einc.cache_clear()

    def f(a, b):
        return einc.einsum("ij,jk->ik", a, b) * 2
    torch._dynamo.reset()
    a, b = torch.randn(3, 4, device=kernel_device), torch.randn(4, 5, device=kernel_device)
    with pytest.warns(RuntimeWarning, match="refusing the kernel cache folder") as got:
        out = torch.compile(f, backend=backend, fullgraph=True)(a, b)
    torch.testing.assert_close(out, a @ b * 2)
    assert {w.filename for w in got if "refusing the kernel cache" in str(w.message)} == {__file__}



@pytest.mark.parametrize("args, kwargs", [
    ((A, [0, 1]), {"k": 3}),                       # the sublist format
    ((A, [0, 1], B, [1, 2], [0, 2]), {"h": 2}),
    ((), {"h": 2}),                                # no positional argument at all
])
def test_a_keyword_beside_a_sublist_is_torch_s_unexpected_keyword(args, kwargs):
    """A keyword size names an axis of an equation string; beside a sublist (or with no
    argument) it is an unexpected keyword, a ``TypeError`` as torch.einsum's (it was an
    ArgumentError, a ValueError only), at einsum, explain and contract_expression."""
    with pytest.raises(TypeError):
        torch.einsum(*args, **kwargs)
    with pytest.raises(errors.SizeKeywordError, match="sublist format has none"):
        einc.einsum(*args, **kwargs)
    if args:
        with pytest.raises(TypeError, match="sublist format has none"):
            einc.explain(*args, **kwargs)
        with pytest.raises(TypeError, match="interleaved format has none"):
            einc.contract_expression(*[x.shape if isinstance(x, torch.Tensor) else x for x in args], **kwargs)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no mkldnn tensors")
@pytest.mark.parametrize("eq, n", [("ij->ji", 1), ("ij,jk->ik", 2), ("ij,jk,kl->il", 3)])
def test_an_operand_torch_has_no_op_for_is_torch_s_not_implemented_error(eq, n):
    """torch.einsum of an mkldnn operand raises NotImplementedError (no ``as_strided`` for
    it); einc's LayoutError there was a RuntimeError only, which ``except
    NotImplementedError`` written against torch missed."""
    ops = [torch.randn(4, 4).to_mkldnn()] + [torch.randn(4, 4)] * (n - 1)
    with pytest.raises(NotImplementedError):
        torch.einsum(eq, *ops)
    with pytest.raises(errors.UnsupportedLayoutError, match="operand 0 is a torch._mkldnn tensor") as err:
        einc.einsum(eq, *ops)
    assert isinstance(err.value, errors.LayoutError) and isinstance(err.value, NotImplementedError)


@pytest.mark.parametrize("args", [(None, A), (3, A), ([A, B], B), (A.numpy(), [0, 1], B, [1, 2]), (b"ij,jk->ik", A, B)])
def test_a_first_argument_neither_equation_nor_operand_is_torch_s_type_error(args):
    """torch reads a first argument that is no tensor as the equation: "argument 'equation'
    (position 1) must be str".  einc read it as the sublist format's first operand and named
    the next argument as its sublist ("the subscripts of operand 0 must be a list of ints,
    got Tensor"), and fx and torch.compile failed in their own ways.  A bytes equation,
    which torch's argument parser reads with up to two operands, is refused so too
    (docs/semantics.md)."""
    try:
        torch.einsum(*args)
    except TypeError as error:
        sentence = str(error)
    else:
        assert isinstance(args[0], bytes)
        sentence = "einsum(): argument 'equation' (position 1) must be str, not bytes"
    with pytest.raises(errors.OperandTypeError) as err:
        einc.einsum(*args)
    assert isinstance(err.value, TypeError) and str(err.value).startswith(sentence + ":"), (str(err.value), sentence)


def test_a_strided_nested_operand_raises_torch_s_runtime_error():
    """A nested tensor of strided layout has no sizes: einc raises torch's RuntimeError
    reading them, where torch.einsum raises NotImplementedError (docs/semantics.md); both
    are RuntimeErrors, and neither contracts it."""
    nested = torch.nested.nested_tensor([torch.ones(3), torch.ones(3)])
    for eq, ops in [("ij->ji", [nested]), ("ij,jk->ik", [nested, B[:3]])]:
        with pytest.raises(RuntimeError):
            torch.einsum(eq, *ops)
        with pytest.raises(RuntimeError, match="doesn't support sizes"):
            einc.einsum(eq, *ops)
