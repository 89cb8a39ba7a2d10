"""``import einc`` and a process's first calls on CPU tensors, with the default backend,
import none of what those calls do not need: the code generator (``einc.codegen``, which the
Triton executor imports when a call first wants kernels), triton, :mod:`statistics` (for
timing steps), the torch.compile backend, the tools.  Prints how many einc modules the calls
loaded (run by ``tests/test_layering.py``, without EINC_BACKEND or EINC_SELECT set)."""

import sys

import checkout  # noqa: F401
import torch

LAZY = ("einc.codegen", "triton", "statistics", "einc.dynamo", "einc.tools")


def loaded() -> list[str]:
    return sorted(m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in LAZY))


import einc  # noqa: E402

assert not loaded(), loaded()
a, b = torch.rand(3, 4), torch.rand(4, 5)
einc.einsum("ij,jk->ik", a, b)
einc.einsum("ij,jk,kl->il", a, b, torch.rand(5, 2))
einc.contract("ij,jk->ki", a, b)
print(einc.explain("ij,jk->ik", a, b).backends)
assert not loaded(), loaded()
print(sum(m.startswith("einc.") for m in sys.modules))
