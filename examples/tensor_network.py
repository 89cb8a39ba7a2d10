"""A tensor-network contraction: the overlap of two matrix product states, and a random network.

Run: python examples/tensor_network.py

Networks have tens of operands, and the contraction order decides the cost: a bad
order is exponentially worse.  torch.einsum asks opt_einsum for an order on every
call; einc searches once per equation and shapes (harder: exhaustive up to 5 operands,
dynamic programming up to 16, beyond a search budgeted by the contraction's predicted
time: docs/paths.md), caches the plan, and then a call costs a dictionary lookup plus
the steps.
"""

import os
import tempfile
import time

import opt_einsum
import torch

import einc
from einc.tools.benchmark.timing import interleaved

torch.manual_seed(0)
# The 32-operand search below remembers its path in the cache folder: a folder of the example's
# own (removed when it ends) leaves the user's alone, and every run shows the planning cost.
cache_folder = tempfile.TemporaryDirectory(prefix="einc-example-")
os.environ.setdefault("EINC_CACHE_DIR", cache_folder.name)


def per_call(**fns):
    """Seconds per call of each (warmed-up) callable: median of interleaved batches."""
    timings, _ = interleaved(fns, rounds=9, budget=1.0, min_rounds=3)
    return [timings[name].median for name in fns]


# 1. <psi|phi> for two open-boundary MPS of N sites, physical dimension P, bond dimension D.
#    Sublist form: index ints, so any number of indices works (no 52-letter limit).
N, P, D = 16, 2, 8


def mps(n):
    """Site tensors (left bond, physical, right bond), edge bonds of size 1, unit norm."""
    ts = [torch.randn(1 if i == 0 else D, P, 1 if i == n - 1 else D, dtype=torch.float64) for i in range(n)]
    return [t / t.norm() for t in ts]


psi, phi = mps(N), mps(N)
# indices: physical p_i = i; psi's bonds N + i; phi's bonds 2N + i
args = []
for i in range(N):
    args += [psi[i], [N + i, i, N + i + 1]]
for i in range(N):
    args += [phi[i], [2 * N + i, i, 2 * N + i + 1]]
args.append([])                                           # scalar output
print(f"1. MPS overlap: {N} sites x 2 states = {2 * N} operands, P={P}, D={D}")

einc.cache_clear()
t0 = time.perf_counter()
overlap = einc.einsum(*args)                              # plans (once), then runs
first = time.perf_counter() - t0
torch.testing.assert_close(overlap, torch.einsum(*args))
cached, torch_call = per_call(einc=lambda: einc.einsum(*args), torch=lambda: torch.einsum(*args))
print(f"   <psi|phi> = {overlap.item():.6e}")
print(f"   einc first call (plans + runs): {first * 1e3:8.2f} ms")
print(f"   einc cached call:               {cached * 1e3:8.2f} ms")
print(f"   torch.einsum per call:          {torch_call * 1e3:8.2f} ms  (searches a path every call)")

# The plan, and its cost against the order torch.einsum's opt_einsum 'auto' picks
# (the same network as an equation string: opt_einsum's symbols for the index ints).
shapes = [tuple(t.shape) for t in args[0:-1:2]]
eq = ",".join("".join(opt_einsum.get_symbol(i) for i in sub) for sub in args[1:-1:2]) + "->"
plan = einc.explain(eq, *shapes, dtype=torch.float64)
_, info = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize="auto")
print(f"   einc's plan: {len(plan.steps)} steps, {plan.flops:.4g} flops, largest intermediate "
      f"{plan.largest_intermediate} elements")
print(f"   torch.einsum's order (opt_einsum 'auto'): {float(info.opt_cost):.4g} flops")

# 2. A random network: 3-regular, 14 tensors, sizes 2-6 (opt_einsum.testing.rand_equation(14, 3,
#    seed=12, d_min=2, d_max=6) drew it; that module needs pytest, which an install of einc lacks).
eq = "sg,nh,edq,dfu,ogcmj,ta,uklp,boq,r,flhk,pi,jcater,b,nsmi->"
shapes = [(3, 6), (4, 2), (5, 4, 6), (4, 5, 6), (2, 6, 3, 5, 6), (5, 5), (6, 3, 4, 2), (5, 2, 6), (4,),
          (5, 4, 2, 3), (2, 3), (6, 3, 5, 5, 5, 4), (5,), (4, 3, 5, 3)]
tensors = [torch.randn(*s) / 2 for s in shapes]
print(f"\n2. random 3-regular network: {eq}")
einc.contract_expression(eq, *shapes)                  # imports and warms up what planning uses
einc.cache_clear()                                      # so that the call timed below plans
t0 = time.perf_counter()
expr = einc.contract_expression(eq, *shapes)            # plan once for these shapes
plan_s = time.perf_counter() - t0
torch.testing.assert_close(expr(*tensors), torch.einsum(eq, *tensors), rtol=1e-4, atol=1e-4)
call_s, torch_s = per_call(einc=lambda: expr(*tensors), torch=lambda: torch.einsum(eq, *tensors))
print(f"   planning (contract_expression): {plan_s * 1e3:8.2f} ms, once")
print(f"   einc per call:                  {call_s * 1e3:8.2f} ms")
print(f"   torch.einsum per call:          {torch_s * 1e3:8.2f} ms")
print(f"   planning pays for itself after {plan_s / max(torch_s - call_s, 1e-9):.0f} call(s)"
      if torch_s > call_s else "   (torch.einsum is faster per call here)")
print()
print(expr)                                               # the plan table
