"""``shared_intermediates``: reuse identical intermediate results across calls, as
opt_einsum's context manager of that name does (pyro relies on it).

Inside the context every call of :func:`einc.einsum`, :func:`einc.contract` or a
:class:`~einc.ContractExpression` runs its plan step by step, and each step's result is
kept in the context's cache under the step's equation and the identities of its operands
(canonical: ``ab,bc->ac`` on ``(x, y)`` is ``bc,ab->ac`` on ``(y, x)``).  A later step with
the same equation on the same tensor objects -- operands the caller passed again, or
intermediates taken from the cache -- takes the cached result instead of computing it.
The operands are kept in the cache too, so that their ids cannot be reused by new
tensors while it lives.

The cache is per thread.  Contexts nest: the innermost one's cache is used.  On exit
einc drops its reference to the cache, so the intermediates are freed then -- unless the
caller kept the yielded dict, which can be passed to a later context to resume sharing
(``shared_intermediates(cache)``), as in opt_einsum.  Results are differentiable (each
step is an einc call).
A call with an operand that is not strided (sparse) shares nothing: it is torch's einsum's,
as outside the context.
Under torch.compile the context is ignored: the compiled op runs whole.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter

import torch

from .planner.equation import parse, term_text

# thread id -> that thread's caches, innermost last.  Empty when no thread shares:
# einc.einsum's hot path tests only its truthiness.
STACKS: dict = {}


@contextlib.contextmanager
def shared_intermediates(cache: dict | None = None):
    """A context in which contractions share intermediate results; yields the cache (a dict).

    >>> import torch, einc
    >>> x, y, z = torch.ones(2, 3), torch.ones(3, 4), torch.ones(4, 5)
    >>> with einc.shared_intermediates() as cache:
    ...     a = einc.contract("ab,bc,cd->ad", x, y, z)
    ...     b = einc.contract("ab,bc,cd->a", x, y, z)
    >>> count_cached_ops(cache)["einsum"] <= 4
    True
    """
    if cache is None:
        cache = {}
    if torch.compiler.is_dynamo_compiling():   # (no effect there: the compiled op runs each contraction whole)
        yield cache
        return
    tid = threading.get_ident()
    STACKS.setdefault(tid, []).append(cache)
    try:
        yield cache
    finally:
        stack = STACKS[tid]
        stack.pop()
        if not stack:
            del STACKS[tid]


def current_cache() -> dict | None:
    """The innermost sharing cache of this thread, or None outside any context."""
    stack = STACKS.get(threading.get_ident())
    return stack[-1] if stack else None


def currently_sharing() -> bool:
    """Whether this thread is inside :func:`shared_intermediates` (opt_einsum's name)."""
    return current_cache() is not None


def count_cached_ops(cache: dict) -> Counter:
    """How many entries of each kind the cache holds: ``"einsum"`` (step results) and
    ``"tensor"`` (operands kept alive), as opt_einsum's function of that name counts
    (and einc's own ``"widened"``: narrow integer operands of a ContractExpression with
    constants, made int64 once per context)."""
    return Counter(key[0] for key in cache)


def run(plan, operands, cache: dict, contract, tag=None):
    """Run ``plan`` on ``operands`` step by step, each step's result looked up in or added
    to ``cache``; ``contract(equation, operands)`` computes a step.  ``tag`` keeps apart
    steps computed another way on the same tensors (``"int64"``: narrow integers widened).
    The operands are strided: a call with a sparse one is torch's einsum's, which the doors
    run as outside the context (:func:`einc.api.special_call`)."""
    values = dict(enumerate(operands))
    for step in plan.steps:
        ops = [values.pop(v) for v in step.operands]
        terms = [term_text(t) for t in step.inputs]
        output = term_text(step.output)
        ordered = sorted(zip(terms, ops), key=lambda pair: id(pair[1]))
        key = ("einsum", parse(",".join(t for t, _ in ordered) + "->" + output).canonical,
               tuple(id(o) for _, o in ordered)) + ((tag,) if tag else ())
        result = cache.get(key)
        if result is None:
            for o in ops:
                cache["tensor", id(o)] = o
            result = cache[key] = contract(",".join(terms) + "->" + output, ops)
        values[step.result] = result
    (result,) = values.values()
    return result


__all__ = ["shared_intermediates", "current_cache", "currently_sharing", "count_cached_ops", "run"]
