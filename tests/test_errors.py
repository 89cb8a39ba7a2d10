"""Every error path: the same built-in type torch.einsum raises, and a message that helps."""

import pytest
import torch

import einc
from einc import errors

A = torch.randn(3, 4)
B = torch.randn(4, 5)

# (equation, operands, einc error class, fragments the message must contain)
CASES = [
    ("i1,jk->ik", [A, B], errors.EquationError, ["'1'", "index 1", "i1,jk->ik\n   ^"]),
    ("ij->i->j", [A], errors.EquationError, ["'-'", "index 5"]),
    ("i..j->ij", [A], errors.EquationError, ["'.'", "ellipsis"]),
    ("...i...->i", [A], errors.EquationError, ["second ellipsis"]),
    ("ij->ijk", [A], errors.EquationError, ["'k'", "does not appear"]),
    ("ij->ii", [A], errors.EquationError, ["'i'", "more than once"]),
    ("ij,jk->ik", [A], errors.OperandCountError, ["fewer", "'ij', 'jk'", "1 was passed"]),
    ("ij->ij", [A, B], errors.OperandCountError, ["more"]),
    ("ijk->ij", [A], errors.ShapeError, ["operand 0", "'ijk'", "2 dimensions", "3 subscripts"]),
    ("...ijk->ij", [A], errors.ShapeError, ["operand 0", "fewer"]),
    ("ij,jk->ik", [A, torch.randn(5, 5)], errors.ShapeError,
     ["'j'", "size 5 in operand 1", "size 4 in operand 0", "ij,jk->ik\n     ^"]),
    ("ii->i", [torch.randn(2, 3)], errors.ShapeError, ["'i'", "repeated", "2 and 3"]),
    ("...ij,...jk->...ik", [torch.randn(2, 3, 3, 4), torch.randn(5, 4, 6)], errors.ShapeError,
     ["ellipsis", "size 5", "size 3"]),
    ("ij,jk->ik", [A, B.double()], errors.DtypeError, ["torch.float32", "torch.float64", "ij,jk->ik"]),
    ("ij,jk->ik", [A > 0, B > 0], errors.UnsupportedDtypeError, ["bool"]),
    ("ij->ij", [[[1.0, 2.0]]], errors.OperandTypeError, ["operand 0", "list"]),
    ("ij,jk->ik", [A, 3], errors.OperandTypeError, ["operand 1", "int"]),
]


@pytest.mark.parametrize("equation,operands,cls,fragments", CASES, ids=[c[0] + "-" + c[2].__name__ for c in CASES])
def test_error(equation, operands, cls, fragments):
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
    for o, b in zip(operands, before):
        if isinstance(o, torch.Tensor):
            assert torch.equal(o, b)


def test_no_operands_is_value_error():
    with pytest.raises(ValueError):
        torch.einsum("ij->ij")
    with pytest.raises(errors.ArgumentError, match="at least one operand"):
        einc.einsum("ij->ij")


def test_sublist_errors():
    with pytest.raises(ValueError):
        einc.einsum(A, [0, -1])
    with pytest.raises(TypeError):
        einc.einsum(A, ["a", "b"])
    assert einc.einsum(A, [0, 60]).shape == A.shape         # beyond torch's [0, 52)


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
    expr = einc.contract_expression("ij,jk->ik", (3, 4), (4, 5))
    with pytest.raises(errors.ShapeError, match="operand 1"):
        expr(A, torch.randn(4, 6))
    with pytest.raises(errors.OperandCountError):
        expr(A)
