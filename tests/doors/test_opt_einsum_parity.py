"""opt_einsum's doors against opt_einsum itself: the same values, paths and errors for the
same call (whitespace read as opt_einsum reads it, optimizer names it never looks up)."""

from __future__ import annotations

import pytest
import torch

import einc
from einc.errors import EincError

opt_einsum = pytest.importorskip("opt_einsum")


def _ops(*shapes, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype) for s in shapes]


def _outcome(call):
    """``("ok", value)`` or ``("error", the exception)``."""
    try:
        return "ok", call()
    except Exception as error:      # noqa: BLE001 -- the comparison is the point
        return "error", error


# ------------------------------------------------------------------- whitespace

WHITESPACE = [
    ("ij\tk,kl->il", [(2, 3, 5, 4), (4, 5)]),       # a tab is an index: 'ij\tk' is four
    ("ij\tk,kl", [(2, 3, 5, 4), (4, 5)]),           # ... and sorts first in the implied output
    ("i j\tk,kl->il", [(2, 3, 5, 4), (4, 5)]),      # a space beside it is dropped, as opt_einsum drops it
    ("ij\nk,kl->ijl", [(2, 3, 5, 4), (4, 5)]),
    ("ij\tk,k\t", [(2, 3, 5, 4), (4, 5)]),
    ("ij\u00a0k,k\u00a0->\u00a0", [(2, 3, 5, 4), (4, 5)]),     # a no-break space
    ("ij\tk,kl->il", [(2, 3), (3, 4)]),             # too few dimensions: an error in both
]


@pytest.mark.parametrize("eq, shapes", WHITESPACE)
def test_whitespace_other_than_the_space_is_an_index_as_in_opt_einsum(eq, shapes):
    """opt_einsum strips spaces only: a tab or a newline is an index.  The doors read such
    an equation in named notation (whitespace between names) and raised "output axis il
    does not appear" or "'\\t' is not a letter" where opt_einsum gave a result."""
    ops = _ops(*shapes)
    calls = {
        "contract": lambda m: m.contract(eq, *ops),
        "contract_path": lambda m: m.contract_path(eq, *shapes, **({"shapes": True} if m is opt_einsum else {})),
        "contract_expression": lambda m: m.contract_expression(eq, *shapes)(*ops),
    }
    for door, call in calls.items():
        (theirs, want), (ours, got) = _outcome(lambda: call(opt_einsum)), _outcome(lambda: call(einc))
        assert ours == theirs, (door, want, got)
        if theirs == "error":
            assert isinstance(got, ValueError) and isinstance(got, EincError), door    # opt_einsum's type
        elif door == "contract_path":
            assert got[0] == want[0] and got[1].eq == want[1].eq, door
            assert got[1].size_dict == want[1].size_dict and got[1].opt_cost == want[1].opt_cost, door
        else:
            torch.testing.assert_close(got, want, msg=door)


def test_einsum_still_reads_whitespace_between_names_as_named_notation():
    """The doors' reading leaves ``einc.einsum``'s own: a tab between names there is named
    notation, and an equation with spaces or parentheses is named notation in the doors too."""
    a, b = _ops((2, 3), (3, 4))
    torch.testing.assert_close(einc.einsum("b\tn, n e -> b e", a, b), a @ b)
    torch.testing.assert_close(einc.contract("(bh) n, n e -> (bh) e", a, b), a @ b)
    assert einc.contract_path("(bh) n, n e -> (bh) e", a, b)[1].plan.flops == 2 * 2 * 3 * 4


# ------------------------------------------------------------------- optimizer names

@pytest.mark.parametrize("shapes", [[(2, 3)], [(2, 3), (3, 4)]])
def test_any_optimize_name_runs_one_or_two_operands_as_in_opt_einsum(shapes):
    """opt_einsum's contract_path takes the one pairwise path for one or two operands and
    never looks ``optimize`` up: ``optimize="nope"`` runs.  The doors raised KeyError;
    ``einc.einsum`` still does (the name is einc's keyword there)."""
    eq = ",".join(["ij", "jk"][:len(shapes)])
    ops = _ops(*shapes)
    want = opt_einsum.contract(eq, *ops, optimize="nope")
    torch.testing.assert_close(einc.contract(eq, *ops, optimize="nope"), want)
    torch.testing.assert_close(einc.contract_expression(eq, *shapes, optimize="nope")(*ops), want)
    path, info = einc.contract_path(eq, *shapes, optimize="nope")
    assert path == opt_einsum.contract_path(eq, *shapes, shapes=True, optimize="nope")[0]
    interleaved = [x for o, sub in zip(ops, [[0, 1], [1, 2]]) for x in (o, sub)]
    torch.testing.assert_close(einc.contract(*interleaved, optimize="nope"), want)
    with pytest.raises(KeyError):
        einc.einsum(eq, *ops, optimize="nope")
    with pytest.raises(KeyError):       # three operands: opt_einsum looks it up, and so do the doors
        einc.contract(eq + ",kl" if len(shapes) == 2 else "ij,jk,kl", *_ops((2, 3), (3, 4), (4, 5)), optimize="nope")


_seen: list = []


def _registered(inputs, output, size_dict, memory_limit=None):
    """A path function registered in opt_einsum's registry (as a caller registers one)."""
    _seen.append((inputs, output, size_dict, memory_limit))
    return opt_einsum.paths.greedy(inputs, output, size_dict, memory_limit)


if "einc-test-registered" not in opt_einsum.paths._PATH_OPTIONS:
    opt_einsum.paths.register_path_fn("einc-test-registered", _registered)


def test_a_registered_name_is_called_as_opt_einsum_calls_it():
    """A function registered with ``opt_einsum.paths.register_path_fn`` is the caller's
    optimizer, called as opt_einsum calls it -- the caller's characters, the true sizes, once:
    not handed einc's int labels and a size 0 as 1 (what einc's own searches get), nor asked
    again without the limit under ``max_input``."""
    chain = [(2, 3), (3, 4), (4, 5)]
    cases = [("ij,jk,kl->il", chain, None), ("i1,1j,j#->i#", chain, None),
             ("...a,...a,a", [(4, 4), (4, 4, 4), (4,)], None),
             ("abc,ade,bdf,cef->", [(10, 10, 10)] * 4, "max_input"),
             ("ij,jk,kl->il", [(2, 3), (3, 0), (0, 4)], None),
             ("ij,jk,kl->il", [(2, 0), (0, 3), (3, 4)], 10)]
    for eq, shapes, limit in cases:
        _seen.clear()
        opt_einsum.contract_path(eq, *shapes, shapes=True, optimize="einc-test-registered", memory_limit=limit)
        theirs = list(_seen)
        assert len(theirs) == 1
        for door in ("contract_path", "contract", "contract_expression"):
            einc.cache_clear()      # (a plan is made once: an equal equation's plan is not asked again)
            _seen.clear()
            args = _ops(*shapes) if door == "contract" else shapes
            getattr(einc, door)(eq, *args, optimize="einc-test-registered", memory_limit=limit)
            assert _seen == theirs, (door, eq)
    interleaved = [x for s, sub in zip(chain, ([0, 1], [1, 2], [2, 3])) for x in (s, sub)]
    _seen.clear()
    opt_einsum.contract_path(*[torch.randn(s).numpy() if k % 2 == 0 else s for k, s in enumerate(interleaved)],
                             optimize="einc-test-registered")
    theirs = list(_seen)
    einc.cache_clear()
    _seen.clear()
    einc.contract_path(*interleaved, optimize="einc-test-registered")
    assert _seen == theirs


# ------------------------------------------------------------------- a size 0

@pytest.mark.parametrize("optimize", ["greedy", "optimal", "branch-2"])
def test_path_info_of_a_size_0_is_opt_einsums(optimize):
    """With b = 0 kept in ``ce,cbd,dea->ba``, opt_einsum's path makes only empty
    intermediates (a greedy path weighing a size 0 as 1 makes a 30-element one at 300
    flops): the PathInfo's path, largest intermediate, flops and sizes are opt_einsum's, and
    its table prints a size-0 intermediate as 0 elements."""
    eq, shapes = "ce,cbd,dea->ba", [(2, 5), (2, 0, 3), (3, 5, 5)]
    path, info = einc.contract_path(eq, *shapes, optimize=optimize)
    want, ref = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=optimize)
    assert path == want
    assert info.largest_intermediate == ref.largest_intermediate == 0
    assert info.opt_cost == ref.opt_cost == 0 and info.size_list == ref.size_list
    assert "Largest intermediate:  0 elements" in str(info)
    ops = _ops(*shapes)
    assert einc.contract(eq, *ops, optimize=optimize).shape == opt_einsum.contract(eq, *ops).shape == (0, 5)


def test_path_of_no_optimization_is_opt_einsums():
    """``contract_path(..., optimize=False)`` gave einc's left-to-right pairs,
    ``[(0, 1), (0, 2), (0, 1)]``, where opt_einsum gives one step of every operand,
    ``[(0, 1, 2, 3)]``; that path, passed back, runs the same pairs."""
    eq, shapes = "dce,db,ac,be", [(4, 3, 2), (4, 1), (1, 3), (1, 2)]
    path, info = einc.contract_path(eq, *shapes, optimize=False)
    assert path == info.path == opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=False)[0]
    assert info.plan.path == ((0, 1), (0, 2), (0, 1))
    ops = _ops(*shapes)
    torch.testing.assert_close(einc.contract(eq, *ops, optimize=path), einc.contract(eq, *ops, optimize=False))
    want = torch.as_tensor(opt_einsum.contract(eq, *ops, optimize=False))     # (numpy's einsum there, always)
    torch.testing.assert_close(einc.contract(eq, *ops, optimize=False), want)
    assert einc.contract_path("ij,jk", (2, 3), (3, 4), optimize=False)[0] == [(0, 1)]
