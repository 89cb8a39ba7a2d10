"""The golden file of einc's default paths of 3-16 operands (``einc.planner.options._auto``:
opt_einsum's ``optimal`` up to 5 operands, cotengrust's ``dp`` from a random greedy path's
cost up to 16, opt_einsum's ``auto`` where it costs less), which
tests/planner/test_dp_paths.py checks, so that a cheaper search is known to find the paths
the search found: the same pairs in the same order, ties broken as they were.

Networks: the real modules' (those of bench/dp_search.py) and random ones
(``opt_einsum.testing.rand_equation``, seeds fixed): 3-16 tensors, each of regularity 2-4,
0-4 output indices, sizes from 1 up to 2 (ties everywhere), 4, 9 or 16, some with an
index on every tensor.  Each case: the equation, the shapes, the path ``auto`` takes.

    python -m tests.planner.dp_golden      # rewrites tests/planner/data/dp_golden.json.gz
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "data" / "dp_golden.json.gz"
COUNT = 1200

MODULES = [     # (equation, sizes): the real modules' searches of 3-16 operands
    ("abcd,d,c->abcd", {"a": 2, "b": 32, "c": 32, "d": 64}),
    ("ab,cd,ef,acf->bde", dict.fromkeys("abcdef", 6)),
    ("ab,cd,ef,acf->bde", {"a": 12, "b": 12, "c": 6, "d": 6, "e": 3, "f": 3}),
    ("abcde,bfgh,chij,djkl,elmn->agikm",
     {"a": 64, **dict.fromkeys("bcdegikm", 4), **dict.fromkeys("hjl", 32), "f": 1, "n": 1}),
    ("bcdef,a,ga,ha,ia,ja,ca,da,ea,fa->bghij", {"a": 1024, "b": 64, **dict.fromkeys("cdefghij", 4)}),
    ("qmnop,abcdefgh,ia,jb,kc,ld,me,nf,og,ph->qijkl", {"q": 64, **dict.fromkeys("abcdefghijklmnop", 4)}),
    ("AB,ACD,CEF,EGH,GIJ,IKL,KMN,MO,PB,PQD,QRF,RSH,STJ,TUL,UVN,VO->",
     {**dict.fromkeys("ACEGIKMPQRSTUV", 16), **dict.fromkeys("BDFHJLNO", 2)}),
]


def cases(count: int = COUNT, seed: int = 0):
    """``[(equation, shapes)]``: the modules' networks, then ``count`` random ones."""
    from opt_einsum.testing import rand_equation
    found = [(eq, [[sizes[c] for c in t] for t in eq.split("->")[0].split(",")]) for eq, sizes in MODULES]
    rng = random.Random(seed)
    for _ in range(count):
        n, reg, n_out = rng.randint(3, 16), rng.choice([2, 3, 3, 4]), rng.choice([0, 0, 1, 2, 4])
        eq, shapes = rand_equation(n, reg, n_out=n_out, d_min=1, d_max=rng.choice([2, 4, 9, 16]),
                                   seed=rng.randrange(10 ** 6), global_dim=rng.random() < 0.15)
        found.append((eq, [list(s) for s in shapes]))
    return found


def path(eq: str, shapes) -> list:
    """The path einc's default ``auto`` takes for the call, searched afresh (where no earlier
    search of it was remembered on disk: :func:`main` uses a fresh cache folder)."""
    from einc.planner.equation import parse
    from einc.planner.graph import build
    from einc.planner.options import Options
    from einc.planner.plan import _path, path_cache_clear
    path_cache_clear()
    return [list(pair) for pair in _path(build(parse(eq), [tuple(s) for s in shapes]), Options.of())[0]]


def main() -> None:
    import os
    import tempfile
    os.environ["EINC_CACHE_DIR"] = tempfile.mkdtemp()      # every path searched, none read back
    rows = [{"eq": eq, "shapes": shapes, "path": path(eq, shapes)} for eq, shapes in cases()]
    with gzip.open(GOLDEN, "wt") as f:
        json.dump(rows, f, separators=(",", ":"))
    print(f"{len(rows)} cases -> {GOLDEN}")


if __name__ == "__main__":
    main()
