"""The golden file of the copy-cost model's decisions (runtime/torch_executor/ttgt.py):
step signatures and the layout ``choose`` takes for each, which tests/runtime/test_ttgt_golden.py
checks, so that a faster ``choose`` is known to decide as the model did.

The signatures: every contraction step ``choose`` sees (and ``for_training`` asks of it) where
einc runs the fuzzer's cases (tests/support/fuzz.py), where it plans bench/suite.json's
workloads (both variants, each dtype, both result layouts) and a few einsum_benchmark
networks (bench/paths.py's generators, opt_einsum's greedy path); then random steps of
up to 7 indices with size-0 and size-1 dimensions, indices one operand lacks, and large
and small sizes.  Each is recorded with the flags it was asked with, some again with other
flags and with every layout weighed (``SMALL`` 0).  Per case: the chosen layout (every
field, the cost to 9 significant digits), the training layout where it differs, and for
some a digest of every candidate (``candidates``'s order and costs).

    python -m tests.runtime.ttgt_golden      # rewrites tests/runtime/data/ttgt_golden.json.gz
    python -m tests.runtime.ttgt_golden --decisions     # the same cases, their decisions made again

``--decisions`` keeps the file's signatures and rewrites what the model decides of each (a
change of the model's constants: which decisions it moves, on the cases the file held).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "data" / "ttgt_golden.json.gz"
FLAGS = [(True, True, False), (True, False, False), (False, False, False), (True, False, True),
         (False, False, True)]      # (broadcast, loops, free_out)


def layout_row(lay):
    """Every field of a Layout, its cost to 9 significant digits."""
    return [lay.swap, list(lay.batch), list(lay.m), list(lay.n), list(lay.k), lay.copies, lay.flip,
            float(f"{lay.cost:.9g}"), list(lay.broadcast), list(lay.outer)]


def digest(found) -> str:
    """A short hash of a list of layouts, in order, costs to 9 significant digits."""
    return hashlib.sha1(json.dumps([layout_row(lay) for lay in found]).encode()).hexdigest()[:12]


def decide(case):
    """``(choose's layout, the training layout or None where it is the same)`` of a case."""
    from einc.runtime.torch_executor import training_layout, ttgt
    ta, tb, out, sizes = case["a"], case["b"], case["o"], dict(case["s"])
    broadcast, loops, free_out = case["f"]
    small = ttgt.SMALL
    ttgt.SMALL = case["small"]
    try:
        lay = ttgt.choose(ta, tb, out, sizes, case["w"], case["i"], broadcast, loops, free_out)
        training = None
        if broadcast and not loops:
            trained = training_layout.for_training(lay, ta, tb, out, sizes, case["w"], case["i"], free_out=free_out)
            training = None if trained is lay else trained
    finally:
        ttgt.SMALL = small
    return lay, training


def candidates_digest(case) -> str:
    from einc.runtime.torch_executor import ttgt
    return digest(ttgt.candidates(case["a"], case["b"], case["o"], dict(case["s"]), case["w"], case["i"],
                                  case["small"], *case["f"][:2]))


# ----------------------------------------------------------------------- the signatures

class _Recorder:
    """Records the signature of every ``ttgt.choose`` call while active."""

    def __init__(self):
        self.seen = {}

    def __enter__(self):
        from einc.runtime.torch_executor import ttgt
        self.real = real = ttgt.choose

        def choose(ta, tb, out, sizes, worth_sparing, itemsize=4, broadcast=True, loops=True, free_out=False,
                   reads=True):
            used = sorted(set(ta) | set(tb))
            key = (tuple(ta), tuple(tb), tuple(out), tuple((i, sizes[i]) for i in used), worth_sparing, itemsize,
                   (broadcast, loops, free_out))
            self.seen.setdefault(key, None)
            return real(ta, tb, out, sizes, worth_sparing, itemsize, broadcast, loops, free_out, reads)
        ttgt.choose = choose
        return self

    def __exit__(self, *exc):
        from einc.runtime.torch_executor import ttgt
        ttgt.choose = self.real


def _fuzz_steps(rec, count):
    import fuzz

    import einc
    for seed in range(count):
        case = fuzz.make_case(random.Random(seed), max_operands=4)
        for layout in ("contiguous", "any"):
            try:
                einc.einsum(*case.args(fuzz.operands(case, seed)), layout=layout)
            except Exception:       # noqa: BLE001 (a case torch refuses too: no step to record)
                pass
        case = fuzz.make_broadcast_case(random.Random(seed))
        try:
            einc.einsum(*case.args(fuzz.operands(case, seed)))
        except Exception:       # noqa: BLE001
            pass


def _plan_steps(equation, shapes, dtype, optimize="auto"):
    from einc.planner import plan_for
    from einc.planner.options import Options
    from einc.runtime import torch_executor as tx
    plan = plan_for(equation, shapes, Options.of(optimize))
    for layout in ("contiguous", "any"):
        tx.step_functions(plan, [dtype] * len(shapes), layout=layout)


def _suite_steps():
    import torch
    suite = json.loads((ROOT / "bench" / "suite.json").read_text())
    for w in suite["workloads"]:
        for variant in w["variants"].values():
            for dtype in sorted({variant["dtype"], *w.get("dtypes", ())}):    # sorted: the same file each run
                _plan_steps(w["equation"], [tuple(s) for s in variant["shapes"]], getattr(torch, dtype))


def _network_steps():
    import opt_einsum
    import torch
    sys.path.insert(0, str(ROOT))
    from bench.paths import instances
    for name, eq, shapes in instances(circuits=False):     # the file was written without them
        if len(shapes) > 120 or "language" in name and len(shapes) > 80:
            continue
        path = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize="greedy")[0]
        _plan_steps(eq, shapes, torch.float32, tuple(map(tuple, path)))


def _random_step(rng, lead=False):
    """A contraction step as the executor sees one: every index of an operand is the other's
    or the result's (lonely ones are summed before); with ``lead``, the result's first index
    A's own and A's outermost (where the looped layouts are weighed)."""
    n = rng.randint(2, 7)
    names = list(range(n))
    roles = [rng.choice("bbmnkkmn") for _ in names]       # batch, A's own, B's own, summed
    if lead and rng.random() < 0.5:         # no batch index: one operand's own index may be one
        roles = [r if r != "b" else rng.choice("mn") for r in roles]
    ta = [i for i, r in zip(names, roles) if r in "bmk"]
    tb = [i for i, r in zip(names, roles) if r in "bnk"]
    out = [i for i, r in zip(names, roles) if r in "bmn"]
    for t in (ta, tb, out):
        rng.shuffle(t)
    own = [i for i in ta if roles[i] == "m"]
    if lead and own:
        ta.remove(own[0])
        out.remove(own[0])
        ta.insert(0, own[0])
        out.insert(0, own[0])
    if not ta or not tb or not any(r == "k" for r in roles) and rng.random() < 0.8:
        return None
    pool = rng.choice([[0, 1, 1, 2, 3, 4, 8, 16], [1, 2, 3, 7, 16, 32, 64, 128], [8, 32, 100, 256, 1000, 4096],
                       [1, 1, 2, 24, 60, 200, 512, 2048, 5000]])
    sizes = {i: rng.choice(pool) for i in names}
    if lead and own:
        sizes[own[0]] = rng.choice([2, 3, 4])
    return ta, tb, out, sizes


def _random_cases(rng, count):
    from einc.runtime import torch_executor as tx
    cases = []
    while len(cases) < count:
        step = _random_step(rng, lead=len(cases) % 3 == 0)
        if step is None:
            continue
        ta, tb, out, sizes = step
        worth = rng.choice([tx._COPY_WORTH_SPARING, tx._COPY_WORTH_SPARING, 0, 1 << 10, 1 << 30])
        cases.append(_case(ta, tb, out, sizes, worth, rng.choice([1, 2, 4, 4, 8]), rng.choice(FLAGS),
                           rng.choice([None, 0])))
    return cases


def _case(ta, tb, out, sizes, worth, itemsize, flags, small):
    from einc.runtime.torch_executor import ttgt
    used = sorted(set(ta) | set(tb))
    return {"a": list(ta), "b": list(tb), "o": list(out), "s": [[i, sizes[i]] for i in used], "w": worth,
            "i": itemsize, "f": list(flags), "small": ttgt.SMALL if small is None else small}


def generate(fuzz_count=600, random_count=1500, seed=0):
    rng = random.Random(seed)
    with _Recorder() as rec:
        _fuzz_steps(rec, fuzz_count)
        _suite_steps()
        _network_steps()
    cases = []
    for ta, tb, out, sizes, worth, itemsize, flags in rec.seen:
        sizes = dict(sizes)
        cases.append(_case(ta, tb, out, sizes, worth, itemsize, flags, None))
        if rng.random() < 0.5:      # again with other flags, every layout weighed
            cases.append(_case(ta, tb, out, sizes, worth, itemsize, rng.choice(FLAGS), 0))
    cases += _random_cases(rng, random_count)
    for n, case in enumerate(cases):
        lay, training = decide(case)
        case["lay"] = layout_row(lay)
        if training is not None:
            case["train"] = layout_row(training)
        if n % 4 == 0:
            case["cand"] = candidates_digest(case)
    return cases


def redecide(cases):
    """``cases`` with their decisions made again (``lay``, ``train``, ``cand``); how many of
    the forward and training decisions changed."""
    changed = [0, 0]
    for case in cases:
        lay, training = decide(case)
        row, trained = layout_row(lay), training and layout_row(training)
        changed[0] += row != case["lay"]
        changed[1] += trained != case.get("train")
        case["lay"] = row
        case.pop("train", None)
        if trained is not None:
            case["train"] = trained
        if "cand" in case:
            case["cand"] = candidates_digest(case)
    return changed


def main():
    os.environ["EINC_NEW_SHAPES"] = "plan"
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    import torch
    torch.set_num_threads(1)
    if "--decisions" in sys.argv[1:]:
        with gzip.open(GOLDEN, "rt") as f:
            cases = json.load(f)
        changed = redecide(cases)
        print(f"{changed[0]} forward and {changed[1]} training decisions of {len(cases)} cases changed")
    else:
        cases = generate()
    GOLDEN.parent.mkdir(exist_ok=True)
    with gzip.open(GOLDEN, "wt", compresslevel=9) as f:
        json.dump(cases, f, separators=(",", ":"))
    print(f"{len(cases)} cases, {GOLDEN.stat().st_size} bytes: {GOLDEN.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
