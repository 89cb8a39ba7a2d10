"""einc's errors under torch.compile: the call fails while dynamo traces it, before any
backend compiles, so most cases use the eager backend."""

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


def test_a_failing_op_runs_eagerly_without_dynamo_compiling_einc_s_runtime():
    """Without fullgraph dynamo breaks the graph at an op call that fails (here torch has no
    product of bools) and runs it eagerly: it compiled each frame of einc's runtime in turn
    then (some fifty), as the op's kernels were frames of their own to it."""
    from torch._dynamo.utils import counters
    fn, args = (lambda x, y: einc.einsum("ij,jk->ik", x, y)), (_r(2, 3) > 0, _r(3, 4) > 0)
    want = _raised(fn, *args)
    torch._dynamo.reset()
    counters["frames"].clear()
    try:
        _same(_raised(torch.compile(fn, backend="eager"), *args), want)
        assert counters["frames"]["total"] <= 8, dict(counters["frames"])  # the caller's and einc's doors'
    finally:
        torch._dynamo.reset()
