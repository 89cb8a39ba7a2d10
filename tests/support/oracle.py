"""The oracle: torch.einsum on float64 (complex128) copies, and dtype-aware tolerances."""

from __future__ import annotations

import torch

TOL = {  # dtype: (rtol, atol per unit of summed extent); the suite's one tolerance table
    torch.float16: (1e-2, 2e-3),
    torch.bfloat16: (2e-2, 1e-2),
    torch.float32: (1e-5, 1e-6),
    torch.float64: (1e-10, 1e-12),
    torch.complex64: (1e-5, 1e-6),
    torch.complex128: (1e-10, 1e-12),
}


def reference(equation, *operands):
    """torch.einsum evaluated in double precision (exact integers for integer dtypes)."""
    def up(x):
        if x.dtype.is_complex:
            return x.to(torch.complex128)
        if x.dtype.is_floating_point:
            return x.to(torch.float64)
        return x.to(torch.int64)
    return torch.einsum(equation, *[up(x) for x in operands])


def assert_close(actual, expected, dtype, extent=1):
    """``actual`` (computed in ``dtype``) against the double-precision ``expected``.

    The absolute tolerance grows with ``extent``, the number of terms summed into an
    element, and with the magnitude of the operands' products.
    """
    assert tuple(actual.shape) == tuple(expected.shape), (actual.shape, expected.shape)
    if not (dtype.is_floating_point or dtype.is_complex):
        assert torch.equal(actual.to(torch.int64), expected.to(torch.int64))
        return
    rtol, atol = TOL[dtype]
    act = actual.to(expected.dtype)
    torch.testing.assert_close(act, expected, rtol=rtol * 4, atol=atol * max(1, extent) * 4,
                               equal_nan=True)
