"""The kernel IR: what one generated Triton kernel computes, with no torch or triton.

A :class:`Kernel` is built from one plan step by :mod:`einc.codegen.lower` and printed as a
Triton module by :mod:`einc.codegen`.  Two kinds cover every step:

``matmul``  C[batch, t, m, nt, n] = sum over k of A[batch, t, m, k] * B[batch, t, k, nt, n]:
            a strided generalized contraction around one ``tl.dot``.  Each group may hold
            several indices, with any strides; ``t`` (at most one index) is carried inside
            the tile (a 3-D dot): a batch index with unit stride in an operand or the
            result, or a row or column index that is a tensor's only way to a
            unit-stride tile axis (the operand without it broadcast along T); ``nt``
            (where not empty) makes N a 2-D block of the tile, ``nt`` (ending in B's
            unit-stride index) by ``n`` (ending in the result's); ``ka`` / ``kb`` are
            indices summed in A (B) only, summed into the tile as it is loaded, before the
            product.
``reduce``  C[o] = sum over k of A[o, k] (* B[o, k]): fused multiply-and-sum, plain
            sums, elementwise and outer products, diagonals, copies.  Memory-bound.

Indices are ints (the graph's); an operand's ``dims`` may repeat an index (a diagonal:
its stride is the sum of the dimensions' strides) and may lack an index of a group (its
stride there is 0: the operand is broadcast along it).  Inside a group the indices are
ordered slowest first: the last one is the fastest-varying, chosen by
:mod:`einc.codegen.lower` to be the unit-stride index of the operand that matters there.  The
output is always written contiguously in ``output.dims`` order.  ``inputs`` are in
kernel role order (A, B); ``params`` names them in the plan's operand order (the order
``launch`` takes them).
"""

from __future__ import annotations

from dataclasses import dataclass

MATMUL = "matmul"
REDUCE = "reduce"
FUSED = "fused"          # a matmul with fused operand products and epilogue (FusedKernel)

# dtypes the generated kernels handle; everything else runs on the torch executor
KERNEL_DTYPES = ("float16", "bfloat16", "float32", "float64")
# every dtype einc takes, by torch's name, and the other names people write for them
DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128",
               "int8", "int16", "int32", "int64", "uint8", "bool")
DTYPE_ALIASES = {"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32", "fp32": "float32",
                 "double": "float64", "fp64": "float64", "cfloat": "complex64", "cdouble": "complex128",
                 "int": "int32", "long": "int64"}


@dataclass(frozen=True)
class Operand:
    """A tensor as the kernel sees it: ``name`` (``a``, ``b`` or ``c``) and one index per dimension."""

    name: str
    dims: tuple[int, ...]

    @property
    def indices(self) -> tuple[int, ...]:
        """Distinct indices, in order of first dimension."""
        return tuple(dict.fromkeys(self.dims))


@dataclass(frozen=True)
class Kernel:
    kind: str                                   # MATMUL or REDUCE
    name: str                                   # einc_<kind>_<terms>_<hash of the rendered source>
    # equation, step and shapes describe the plan the kernel was lowered from (for
    # explain and tests); the module does not show them: it serves every plan and shape
    equation: str                               # the plan's canonical equation
    step: str                                   # "step 1/2: T0[ab] · T1[bc] over b -> T3[ac]"
    groups: tuple[tuple[str, tuple[int, ...]], ...]   # (group name, indices), in order
    inputs: tuple[Operand, ...]                 # in role order: A (rows) then B (columns)
    params: tuple[str, ...]                     # the inputs' names in the plan's operand order
    output: Operand
    shapes: tuple[tuple[int, ...], ...]         # operand shapes (role order) then the output's
    dtype: str                                  # operand dtype (torch name)
    acc: str                                    # accumulator dtype
    int64: bool                                 # 64-bit offsets
    fast_k: bool = False                        # reduce: an operand's unit stride is summed (K is the fast axis)
    # matmul: (operand name, group name) of each group of several indices that does not walk
    # that tensor's memory as one index in the strides it was lowered for (``gemma``'s weight
    # ``dce``: N = de with K between); the TMA variant gives each of its indices a descriptor axis
    split: tuple[tuple[str, str], ...] = ()
    # (operand name, axes of the tensor the caller passes): indices summed in that operand
    # only, which the launch sums once (a torch sum) before the kernel, which never sees them
    presum: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # (operand name, axes): indices of size 1 summed in that operand only (a dimension
    # broadcast against the other's), which the kernel never sees: a layout is set up on a
    # view without them, and its launches pass the caller's tensor, the same memory
    drop: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # reduce: the result is a one-operand call's sum over the dropped indices only, which adds
    # +0.0 to each value as torch's sum does (its sum starts at +0.0: a -0.0 gives +0.0)
    plus_zero: bool = False

    def group(self, name: str) -> tuple[int, ...]:
        return dict(self.groups).get(name, ())


@dataclass(frozen=True)
class FusedKernel:
    """A matrix product whose operand tiles are products of ``a`` (resp. ``b``) factors,
    with the accumulator multiplied by the ``e`` factors before the store: ``C[out] =
    prod(e) * sum over k of prod(a) * prod(b)``.  Groups as in a ``matmul``
    :class:`~einc.codegen.ir.Kernel`; every factor holds only indices of the groups."""

    kind: str
    name: str
    equation: str
    step: str
    groups: tuple[tuple[str, tuple[int, ...]], ...]
    a: tuple[Operand, ...]
    b: tuple[Operand, ...]
    e: tuple[Operand, ...]
    output: Operand
    shapes: tuple[tuple[int, ...], ...]     # the factors' shapes (a, b, e order) then the output's
    dtype: str
    acc: str
    int64: bool

    @property
    def inputs(self) -> tuple[Operand, ...]:
        return self.a + self.b + self.e

    def group(self, name: str) -> tuple[int, ...]:
        return dict(self.groups).get(name, ())


def index_name(i: int) -> str:
    """The identifier fragment for index ``i`` in generated code: a-z, A-Z, then x52, x53 ..."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return letters[i] if i < 52 else f"x{i}"
