"""Migrating from opt_einsum takes a find-and-replace: a page of opt_einsum usage runs
unchanged but for its import line, once on opt_einsum and once on einc, and gives the
same results (tensors to float64 rounding; paths, costs and path info exactly)."""

from __future__ import annotations

import pytest
import torch

PAGE = '''
import opt_einsum as oe
import numpy as np
import torch

torch.manual_seed(0)
results = {}
a, b, c, d = (torch.randn(*s, dtype=torch.float64) for s in [(4, 5), (5, 6), (6, 3), (3, 4)])
batch = torch.randn(2, 4, 5, dtype=torch.float64)

# contract, string and interleaved forms, with opt_einsum's keywords
results["chain"] = oe.contract("ij,jk,kl,lm->im", a, b, c, d)
results["trace"] = oe.contract("ij,jk,kl,li->", a, b, c, d)
results["implicit"] = oe.contract("ij,jk,kl", a, b, c)
results["interleaved"] = oe.contract(a, [0, 1], b, [1, 2], c, [2, 3], [0, 3])
results["greedy"] = oe.contract("ij,jk,kl->il", a, b, c, optimize="greedy")
results["optimal"] = oe.contract("ij,jk,kl->il", a, b, c, optimize="optimal")
results["dp"] = oe.contract("ij,jk,kl,lm->im", a, b, c, d, optimize="dp")
results["true"] = oe.contract("ij,jk,kl->il", a, b, c, optimize=True)
results["explicit_path"] = oe.contract("ij,jk,kl->il", a, b, c, optimize=[(0, 1), (0, 1)])
results["numpy_int_path"] = oe.contract("ij,jk,kl->il", a, b, c, optimize=[(np.int64(0), np.int64(1)), (0, 1)])
results["max_input"] = oe.contract("ij,jk,kl->il", a, b, c, memory_limit="max_input")
results["use_blas"] = oe.contract("ij,jk->ik", a, b, use_blas=False)
results["backend"] = oe.contract("ij,jk->ik", a, b, backend="torch")
results["ellipsis"] = oe.contract("...ij,jk->...ik", batch, b)
results["hadamard"] = oe.contract("ij,ij,ij->ij", a, a, a)

# opt_einsum's optimizer objects through the module, an unhashable one (a @dataclass), a path
# as a numpy array, a Decimal limit (opt_einsum's type hints), 'max_input' on an outer product
import dataclasses
import decimal

@dataclasses.dataclass
class Greedy(oe.paths.PathOptimizer):
    cost_fn: str = "memory-removed"

    def __call__(self, inputs, output, size_dict, memory_limit=None):
        return oe.paths.greedy(inputs, output, size_dict, memory_limit, cost_fn=self.cost_fn)

results["random_greedy_object"] = oe.contract("ij,jk,kl->il", a, b, c, optimize=oe.RandomGreedy(max_repeats=4))
results["dp_object"] = oe.contract_path("ij,jk,kl,lm->im", a, b, c, d, optimize=oe.DynamicProgramming())[0]
results["dataclass_optimizer"] = oe.contract_path("ij,jk,kl,lm->im", a, b, c, d, optimize=Greedy())[0]
results["dataclass_optimizer_result"] = oe.contract("ij,jk,kl,lm->im", a, b, c, d, optimize=Greedy())
results["ndarray_path"] = oe.contract("ij,jk,kl->il", a, b, c, optimize=np.array([[1, 2], [0, 1]]))
results["decimal_limit"] = oe.contract("ij,jk,kl->il", a, b, c, memory_limit=decimal.Decimal(30))
results["symbol"] = oe.get_symbol(30)
x = torch.randn(16, dtype=torch.float64)
results["max_input_outer"] = oe.contract_path("i,j,k->ijk", x, x, x, memory_limit="max_input")[0]

# constants with an explicit path (written for the whole equation) and with an optimizer object
const_path = oe.contract_expression("ij,jk,kl,lm->im", a, b, (6, 3), (3, 4), constants=[0, 1],
                                    optimize=[(0, 1), (0, 1), (0, 1)])
results["constants_path"] = const_path(c, d)
const_rg = oe.contract_expression("ij,jk,kl,lm->im", (4, 5), b, (6, 3), d, constants=[1, 3],
                                  optimize=oe.RandomGreedy(max_repeats=4))
results["constants_random_greedy"] = const_rg(a, c)

# out=: written in place and returned
out = torch.empty(4, 4, dtype=torch.float64)
returned = oe.contract("ij,jk,kl,lm->im", a, b, c, d, out=out)
results["out"] = out.clone()
results["out_is_returned"] = returned is out

# contract_path: the path and opt_einsum's PathInfo attributes
path, info = oe.contract_path("ij,jk,kl,lm->im", a, b, c, d)
results["path"] = path
results["opt_cost"] = info.opt_cost
results["naive_cost"] = info.naive_cost
results["speedup"] = round(float(info.speedup), 9)
results["largest_intermediate"] = info.largest_intermediate
results["eq"] = info.eq
results["size_list"] = list(info.size_list)
results["scale_list"] = list(info.scale_list)
results["size_dict"] = dict(info.size_dict)
results["shapes"] = [tuple(s) for s in info.shapes]
results["input_subscripts"] = info.input_subscripts
results["output_subscript"] = info.output_subscript
results["indices"] = sorted(info.indices)
# the interleaved form's PathInfo: opt_einsum's letters
path, info = oe.contract_path(a, [0, 1], b, [1, 2], c, [2, 3], [0, 3])
results["interleaved_eq"] = info.eq
results["interleaved_size_dict"] = dict(info.size_dict)
results["interleaved_path"] = path
results["info_printable"] = "Optimized FLOP count" in str(info)
path, info = oe.contract_path("ij,jk,kl->il", (4, 5), (5, 6), (6, 3), shapes=True)
results["shapes_path"] = path
results["shapes_opt_cost"] = info.opt_cost
path, info = oe.contract_path("ij,jk,kl->il", a, b, c, optimize="greedy")
results["greedy_path"] = path
# naive_cost counts 1 more where an index is shared by two operands, not where one is summed
path, info = oe.contract_path("ij->", a)
results["sum_naive_cost"] = info.naive_cost
results["sum_speedup"] = round(float(info.speedup), 9)
path, info = oe.contract_path("ij,ij->ij", a, a)
results["hadamard_naive_cost"] = info.naive_cost
results["hadamard_speedup"] = round(float(info.speedup), 9)

# contract_expression, with out=, backend= and constants
expr = oe.contract_expression("ij,jk,kl->il", (4, 5), (5, 6), (6, 3))
results["expr"] = expr(a, b, c)
results["expr_backend"] = expr(a, b, c, backend="torch")
expr_out = torch.empty(4, 3, dtype=torch.float64)
expr(a, b, c, out=expr_out)
results["expr_out"] = expr_out.clone()
const = oe.contract_expression("ij,jk,kl->il", a, (5, 6), c, constants=[0, 2])
results["expr_constants"] = const(b)
results["expr_constants_again"] = const(b * 2)
results["expr_interleaved"] = oe.contract_expression((4, 5), [0, 1], (5, 6), [1, 2], [0, 2])(a, b)
# the expression's equation (constants bracketed) and how many operands a call takes
results["expr_contraction"] = expr.contraction
results["expr_num_args"] = expr.num_args
results["expr_constants_contraction"] = const.contraction
results["expr_constants_num_args"] = const.num_args
results["expr_interleaved_contraction"] = oe.contract_expression((4, 5), [3, 7], (5, 6), [7, 1]).contraction

# shared_intermediates: marginals of one network, intermediates reused
with oe.shared_intermediates() as cache:
    marginals = [oe.contract("ij,jk,kl->" + x, a, b, c) for x in "ijkl"]
    results["cache_filled"] = len(cache) > 0
results["marginals"] = marginals
with oe.shared_intermediates() as outer:
    first = oe.contract("ij,jk,kl->il", a, b, c)
    with oe.shared_intermediates():
        inner = oe.contract("ij,jk,kl->il", a, b, c)
    again = oe.contract("ij,jk,kl->il", a, b, c)
results["nested"] = [first, inner, again]
results["outer_reused"] = again is first
with oe.shared_intermediates(outer):
    resumed = oe.contract("ij,jk,kl->il", a, b, c)
results["resumed_reused"] = resumed is first
'''


def run_page(module: str) -> dict:
    """The page with its import line naming ``module``."""
    source = PAGE.replace("import opt_einsum as oe", f"import {module} as oe")
    assert source.count(f"import {module} as oe") == 1
    scope: dict = {}
    exec(compile(source, f"<migration page: {module}>", "exec"), scope)
    return scope["results"]


def same(x, y) -> bool:
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape and \
            torch.allclose(x, y, rtol=1e-12, atol=1e-12)
    if isinstance(x, (list, tuple)):
        return isinstance(y, (list, tuple)) and len(x) == len(y) and all(same(p, q) for p, q in zip(x, y))
    return x == y


@pytest.fixture(scope="module")
def pages():
    pytest.importorskip("opt_einsum")
    return run_page("opt_einsum"), run_page("einc")


def test_the_page_runs_on_both(pages):
    reference, ours = pages
    assert set(reference) == set(ours)
    assert len(ours) > 40


def _result_names():
    names = []
    for line in PAGE.splitlines():
        line = line.strip()
        if line.startswith('results["'):
            names.append(line.split('"')[1])
    return names


@pytest.mark.parametrize("name", _result_names())
def test_same_result_as_opt_einsum(pages, name):
    reference, ours = pages
    assert same(reference[name], ours[name]), f"{name}: opt_einsum {reference[name]!r}, einc {ours[name]!r}"


def test_the_flags_are_true_on_both(pages):
    for results in pages:
        assert results["out_is_returned"] and results["cache_filled"] and results["info_printable"]
        assert results["outer_reused"] and results["resumed_reused"]
