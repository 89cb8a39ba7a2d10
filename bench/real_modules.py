"""Real modules, forward + backward, with einc installed as ``torch.einsum`` against without.

Each module comes from the library a user would take it from (mace-torch, pykeen,
torch-harmonics, tensorly-torch, e3nn, quimb, x-transformers), built with random
weights (nothing is downloaded at run time).  Two worker processes run the same module
from the same seed: one unpatched, one with ``torch.einsum = torch.functional.einsum =
einc.einsum`` installed before the library is imported (so code that binds
``torch.einsum`` at import binds einc's).  Both run one thread, the heap settled first
(:func:`settle_heap`).  Each worker times its
first step (forward + backward from a fresh module: einc plans there) and checks that
both sides give the same output and gradients (``--settle``: the patched worker then runs
steps until einc's copies compiled in the background are ready, :func:`settle_copies`);
then this process asks them for batches of
steps in turn -- one batch each a round, in shuffled order, so drifts of a shared machine
hit both -- and reports the medians and the paired ratio patched / unpatched with a 95 %
sign-test interval (:func:`einc.tools.benchmark.timing.ratio_interval`).  The patched worker
finally counts the einsum calls of one step (``bench/einc_patch_plugin.py``'s counters).

    python bench/real_modules.py --install                # pinned --no-deps installs, then every module
    python bench/real_modules.py pykeen-ntn mace          # some modules (already installed)
    python bench/real_modules.py mace --clock cpu         # ... their rounds in each worker's thread CPU time
    python bench/real_modules.py pykeen-ntn --settle      # ... einc's copies compiled in the background ready first
    python bench/real_modules.py --list
    python bench/real_modules.py --equations pykeen-ntn   # each einsum call of one step, timed alone
    python bench/real_modules.py --equations pykeen-ntn --clock cpu   # ... in the thread's CPU time
    python bench/real_modules.py --first 7 e3nn-tp       # first steps only: 7 fresh processes a side
    python bench/real_modules.py --first 7 e3nn-tp --collect off   # ... the garbage collector paused in them

A module whose library is missing is skipped with the command that installs it.  Writes
OUT/real-modules.md and .json (with ``--first``, OUT/first-steps.md and .json).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if __package__ in (None, ""):  # run as a script: make `bench` and `einc` importable
    sys.path.insert(0, str(REPO))

from bench.libraries import Library, install, installed_version
from einc.tools.benchmark.timing import Timing, ratio_interval

DEFAULT_OUT = HERE / "results" / "real-modules"

# Pinned installs, as bench/libraries.py makes them: `pip install --no-deps`, so pip never
# replaces the running torch; each library's imports are named here by hand.
INSTALLS = {
    "mace": Library(
        "mace-torch",
        "0.3.16",
        deps=(
            "e3nn==0.6.0",
            "opt_einsum_fx==0.1.4",
            "opt_einsum",
            "sympy",
            "scipy",
            "ase",
            "torch-ema",
            "torchmetrics",
            "lightning-utilities",
            "packaging",
        ),
    ),
    "pykeen": Library(
        "pykeen",
        "1.11.1",
        deps=(
            "class_resolver",
            "docdata",
            "more_itertools",
            "more_click",
            "click",
            "click_default_group",
            "pystow",
            "dataclasses-json",
            "typing_extensions",
            "torch_max_mem",
            "torch-ppr",
            "tabulate",
            "requests",
            "urllib3",  # requests' own dependencies: --no-deps installs none of them
            "charset_normalizer",
            "idna",
            "certifi",
            "pyyaml",
            "pandas",
            "python-dateutil",
            "pytz",
            "tzdata",
            "scikit-learn",
            "joblib",
            "threadpoolctl",
            "cloudpickle",
            "narwhals",
            "scipy",
            "tqdm",
        ),
    ),
    "torch-harmonics": Library("torch-harmonics", "0.9.2"),
    "tensorly-torch": Library("tensorly-torch", "0.5.0", deps=("tensorly==0.10.0", "numpy", "scipy")),
    "e3nn": Library("e3nn", "0.6.0", deps=("opt_einsum_fx==0.1.4", "opt_einsum", "sympy", "scipy", "packaging")),
    "quimb": Library(
        "quimb",
        "1.15.0",
        deps=("autoray", "cotengra", "cytoolz", "toolz", "numba", "llvmlite", "psutil", "tqdm", "scipy"),
    ),
    "x-transformers": Library(
        "x-transformers",
        "2.31.10",
        deps=("einops==0.8.2", "einx", "frozendict", "loguru", "torch-einops-utils", "packaging"),
    ),
}


@dataclass
class Case:
    name: str
    build: str  # the worker's builder function (below): returns step(), a callable that returns tensors
    library: str  # key of INSTALLS ("" = torch only)
    module: str  # what is timed, for the table
    importable: str = ""  # the import name checked before the workers start


CASES = {
    c.name: c
    for c in [
        Case("torch-bilinear", "build_bilinear", "", "a bilinear layer as one einsum (torch only: checks the harness)"),
        Case(
            "mace",
            "build_mace",
            "mace",
            "MACE, 24 atoms, 2 interactions, L=2: energy + forces + parameter gradients",
            "mace",
        ),
        Case(
            "pykeen-ntn",
            "build_pykeen",
            "pykeen",
            "NTN, score_t: 256 (h, r) against 500 tails, d 16, 4 slices",
            "pykeen",
        ),
        Case("pykeen-rescal", "build_pykeen", "pykeen", "RESCAL, score_t: 256 x 500, d 16", "pykeen"),
        Case("pykeen-cp", "build_pykeen", "pykeen", "CP, score_t: 256 x 500, d 16, rank 16", "pykeen"),
        Case("pykeen-complex", "build_pykeen", "pykeen", "ComplEx, score_t: 256 x 500, d 16", "pykeen"),
        Case("pykeen-tucker", "build_pykeen", "pykeen", "TuckER, score_t: 256 x 500, d 16, relation d 16", "pykeen"),
        Case("pykeen-quate", "build_pykeen", "pykeen", "QuatE, score_t: 256 x 500, d 16", "pykeen"),
        Case(
            "harmonics-scalar",
            "build_harmonics",
            "torch-harmonics",
            "RealSHT + InverseRealSHT, 4 x 64 x 128",
            "torch_harmonics",
        ),
        Case(
            "harmonics-vector",
            "build_harmonics",
            "torch-harmonics",
            "RealVectorSHT + InverseRealVectorSHT, 4 x 2 x 64 x 128",
            "torch_harmonics",
        ),
        Case(
            "tltorch-blocktt",
            "build_tltorch",
            "tensorly-torch",
            "FactorizedLinear block-TT, (4,4,4,4) -> (4,4,4,4), batch 64",
            "tltorch",
        ),
        Case(
            "tltorch-cp",
            "build_tltorch",
            "tensorly-torch",
            "FactorizedLinear CP, (4,4,4,4) -> (4,4,4,4), batch 64",
            "tltorch",
        ),
        Case(
            "tltorch-tucker",
            "build_tltorch",
            "tensorly-torch",
            "FactorizedLinear Tucker, (4,4,4,4) -> (4,4,4,4), batch 64",
            "tltorch",
        ),
        Case(
            "e3nn-tp",
            "build_e3nn",
            "e3nn",
            "FullyConnectedTensorProduct 16x0e+16x1o+16x2e (x) 0e+1o+2e, batch 256",
            "e3nn",
        ),
        Case(
            "quimb-mps8",
            "build_quimb",
            "quimb",
            "MPS norm <psi|psi>, 8 sites, bond 16: the network's equation",
            "quimb",
        ),
        Case("quimb-mps24", "build_quimb", "quimb", "MPS norm, 24 sites, bond 16: the network's equation", "quimb"),
        Case(
            "quimb-circuit12",
            "build_quimb",
            "quimb",
            "12-qubit circuit amplitude, 4 layers: the network's equation",
            "quimb",
        ),
        Case(
            "x-transformers",
            "build_xtransformers",
            "x-transformers",
            "Encoder, 1 layer, dim 128, 4 heads, batch 8 x 64 tokens",
            "x_transformers",
        ),
    ]
}


# ---------------------------------------------------------------- the pure parts


def patch():
    """einc as ``torch.einsum``, as a user installs it: before the library is imported.
    Returns the einsum it replaced."""
    import torch

    import einc

    original = torch.functional.einsum
    torch.einsum = einc.einsum
    torch.functional.einsum = einc.einsum
    return original


def settle_heap() -> None:
    """A 30 MiB allocation made and freed, as bench/pairwise.py does: glibc then keeps
    blocks of a few MiB on its heap, where otherwise (in some processes and not others,
    by what was freed before) it hands the pages of a step's temporaries back each step
    and faults them in again the next, time that is the allocator's, not the step's."""
    import torch

    held = torch.empty(30 * 2**20, dtype=torch.uint8)
    del held


def settle_copies(step) -> int:
    """Steps until no call hands einc's background compiles a new copy, each compile waited
    for (``bench/pairwise.py --settle`` does the same for one call): the rounds then time the
    copies a long run settles on, and no compile runs beside either worker's batches.  The
    keys handed over; none where ``EINC_COPY_COMPILE`` is off."""
    from einc.runtime.torch_executor import compiled_copy

    while True:
        seen = compiled_copy.seen()
        for _ in range(compiled_copy.CALLS):  # (a later step may copy what the first did not)
            step()
        compiled_copy.settle()
        if compiled_copy.seen() == seen:
            return seen


def summarize(
    name: str,
    unpatched: list[float],
    patched: list[float],
    first: tuple[float, float],
    calls: int | None = None,
    note: str = "",
) -> dict:
    """A row: medians (seconds per step), the paired ratio patched / unpatched with its
    interval, and the first steps' ratio.  The two lists are round by round."""
    import statistics

    a, b = Timing(statistics.median(patched), 1, patched), Timing(statistics.median(unpatched), 1, unpatched)
    ratio, low, high = ratio_interval(a, b)
    return {
        "module": name,
        "unpatched_s": b.median,
        "patched_s": a.median,
        "ratio": ratio,
        "low": low,
        "high": high,
        "rounds": len(patched),
        "first_unpatched_s": first[0],
        "first_patched_s": first[1],
        "first_ratio": first[1] / first[0],
        "calls": calls,
        "note": note,
    }


HEADER = (
    "| module | unpatched ms | patched ms | patched / unpatched (95 % interval) | first step ms, unpatched / patched "
    "| first step ratio | calls reaching einc a step |\n|---|---:|---:|---:|---:|---:|---:|"
)


def table_row(r: dict) -> str:
    if "skipped" in r:
        return f"| {r['module']} | skipped: {r['skipped']} | | | | | |"
    calls = "" if r.get("calls") is None else f"{r['calls']}"
    return (
        f"| {r['module']} | {1e3 * r['unpatched_s']:.3g} | {1e3 * r['patched_s']:.3g} | "
        f"{r['ratio']:.2f} ({r['low']:.2f}-{r['high']:.2f}) | "
        f"{1e3 * r['first_unpatched_s']:.3g} / {1e3 * r['first_patched_s']:.3g} | {r['first_ratio']:.2f} | {calls} |"
    )


def table(rows: list[dict]) -> str:
    timed = [r for r in rows if "skipped" not in r]
    lines = [HEADER, *map(table_row, rows)]
    if timed:
        geo = math.exp(sum(math.log(r["ratio"]) for r in timed) / len(timed))
        lines.append(f"\nGeomean of the ratios: {geo:.2f} over {len(timed)} modules.")
    return "\n".join(lines)


def same_answers(a: list[float], b: list[float], rtol: float = 1e-3) -> bool:
    """The two workers' checksums (sums and absolute sums of every output and gradient)
    agree within ``rtol`` of their scale."""
    return len(a) == len(b) and all(abs(x - y) <= rtol * max(1.0, abs(x), abs(y)) for x, y in zip(a, b))


# ---------------------------------------------------------------- the modules (in the worker)


def _grads(loss, leaves):
    import torch

    return [loss.detach(), *torch.autograd.grad(loss, leaves)]


def build_bilinear(name):
    import torch

    w = torch.randn(32, 64, 64, requires_grad=True)
    x, y = torch.randn(128, 64), torch.randn(128, 64)

    def step():
        out = torch.einsum("bi,oij,bj->bo", x, w, y)
        return _grads(out.square().sum(), [w])

    return step


def build_mace(name):
    import numpy as np
    import torch
    from e3nn import o3
    from mace import modules

    torch.set_default_dtype(torch.float64)
    model = modules.MACE(
        r_max=5.0,
        num_bessel=8,
        num_polynomial_cutoff=5,
        max_ell=2,
        interaction_cls=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        interaction_cls_first=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        num_interactions=2,
        num_elements=2,
        hidden_irreps=o3.Irreps("16x0e + 16x1o"),
        MLP_irreps=o3.Irreps("16x0e"),
        atomic_energies=np.zeros(2),
        avg_num_neighbors=8.0,
        atomic_numbers=[1, 8],
        correlation=3,
        gate=torch.nn.functional.silu,
    )
    n = 24
    positions = torch.rand(n, 3) * 6.0
    species = torch.arange(n) % 2
    dist = torch.cdist(positions, positions)
    sender, receiver = torch.nonzero((dist < 5.0) & ~torch.eye(n, dtype=torch.bool), as_tuple=True)
    edges = sender.numel()
    data = {
        "positions": positions,
        "node_attrs": torch.nn.functional.one_hot(species, 2).to(torch.float64),
        "edge_index": torch.stack([sender, receiver]),
        "shifts": torch.zeros(edges, 3),
        "unit_shifts": torch.zeros(edges, 3),
        "cell": torch.zeros(3, 3),
        "batch": torch.zeros(n, dtype=torch.long),
        "ptr": torch.tensor([0, n]),
        "head": torch.zeros(1, dtype=torch.long),
    }
    params = [p for p in model.parameters() if p.requires_grad]

    def step():
        out = model({k: v.clone() for k, v in data.items()}, training=True, compute_force=True)
        loss = out["energy"].sum() + out["forces"].square().sum()
        return [out["energy"].detach(), out["forces"].detach(), *torch.autograd.grad(loss, params)]

    return step


_PYKEEN = {
    "pykeen-ntn": ("NTN", {"num_slices": 4}),
    "pykeen-rescal": ("RESCAL", {}),
    "pykeen-cp": ("CP", {"rank": 16}),
    "pykeen-complex": ("ComplEx", {}),
    "pykeen-tucker": ("TuckER", {"relation_dim": 16}),
    "pykeen-quate": ("QuatE", {}),
}


def build_pykeen(name):
    import torch
    from pykeen import models
    from pykeen.triples import CoreTriplesFactory

    n_entities, n_relations = 500, 10
    g = torch.Generator().manual_seed(1)
    triples = torch.stack(
        [
            torch.randint(n_entities, (2000,), generator=g),
            torch.randint(n_relations, (2000,), generator=g),
            torch.randint(n_entities, (2000,), generator=g),
        ],
        dim=1,
    )
    factory = CoreTriplesFactory.create(mapped_triples=triples, num_entities=n_entities, num_relations=n_relations)
    cls, kwargs = _PYKEEN[name]
    model = getattr(models, cls)(triples_factory=factory, embedding_dim=16, random_seed=0, **kwargs)
    model.train()
    hr = triples[:256, :2]
    params = [p for p in model.parameters() if p.requires_grad]

    def step():
        scores = model.score_t(hr)
        return _grads(scores.square().sum(), params)

    return step


def _hide_compiled_kernels():
    """torch-harmonics 0.9.2's wheel carries attention and DISCO kernels compiled for another
    torch, which fail to load; the SHT is plain PyTorch and needs neither, so empty modules
    stand in for those two subpackages."""
    import types

    for sub, names in (
        ("attention", ("AttentionS2", "NeighborhoodAttentionS2")),
        ("disco", ("DiscreteContinuousConvS2", "DiscreteContinuousConvTransposeS2")),
    ):
        m = types.ModuleType(f"torch_harmonics.{sub}")
        for n in names:
            setattr(m, n, None)
        sys.modules[m.__name__] = m


def build_harmonics(name):
    import torch

    _hide_compiled_kernels()
    import torch_harmonics as th

    nlat, nlon = 64, 128
    if name == "harmonics-vector":
        forward, inverse, shape = th.RealVectorSHT(nlat, nlon), th.InverseRealVectorSHT(nlat, nlon), (4, 2, nlat, nlon)
    else:
        forward, inverse, shape = th.RealSHT(nlat, nlon), th.InverseRealSHT(nlat, nlon), (4, nlat, nlon)
    x = torch.randn(shape, requires_grad=True)

    def step():
        y = inverse(forward(x))
        return _grads(y.square().sum(), [x])

    return step


def build_tltorch(name):
    import tltorch
    import torch

    factorization = {"tltorch-blocktt": "blocktt", "tltorch-cp": "cp", "tltorch-tucker": "tucker"}[name]
    layer = tltorch.FactorizedLinear((4, 4, 4, 4), (4, 4, 4, 4), factorization=factorization, rank=0.5)
    x = torch.randn(64, 256)
    params = list(layer.parameters())

    def step():
        return _grads(layer(x).square().sum(), params)

    return step


def build_e3nn(name):
    from e3nn import o3

    tp = o3.FullyConnectedTensorProduct("16x0e + 16x1o + 16x2e", "0e + 1o + 2e", "16x0e + 16x1o + 16x2e")
    x1, x2 = tp.irreps_in1.randn(256, -1), tp.irreps_in2.randn(256, -1)
    params = list(tp.parameters())

    def step():
        return _grads(tp(x1, x2).square().sum(), params)

    return step


def build_quimb(name):
    import quimb.tensor as qtn
    import torch

    if name == "quimb-circuit12":
        n, rng = 12, random.Random(0)
        circ = qtn.Circuit(n)
        for layer in range(4):
            for q in range(n):
                circ.apply_gate("U3", rng.random(), rng.random(), rng.random(), q)
            for q in range(layer % 2, n - 1, 2):
                circ.apply_gate("CZ", q, q + 1)
        tn = circ.amplitude_tn("0" * n, simplify_sequence="")  # the whole network, unsimplified
        dtype = torch.complex128
    else:
        sites = 8 if name == "quimb-mps8" else 24
        psi = qtn.MPS_rand_state(sites, bond_dim=16, seed=0)
        tn = psi.H & psi
        dtype = torch.float64
    tn = tn.copy()
    tn.apply_to_arrays(lambda a: torch.tensor(a, dtype=dtype, requires_grad=True))
    arrays = list(tn.arrays)
    eq = lettered(tn.get_equation())
    labels = len(set(eq) - set(",->"))

    def step():
        if PATCHED or labels <= 52:
            out = torch.einsum(eq, *arrays)
        else:  # torch.einsum takes at most 52 labels: quimb's own contraction (cotengra, torch arrays)
            out = tn.contract(all, optimize="auto-hq", output_inds=())
        out = out.abs().square() if out.is_complex() else out
        return _grads(out, arrays)

    return step


def lettered(eq: str) -> str:
    """``eq`` with its labels renamed to letters: quimb's symbols past the 52 ASCII letters
    include signs such as '×', which einsum does not take."""
    letters = (chr(c) for c in range(ord("A"), 0x3000) if chr(c).isalpha())
    names = {label: next(letters) for label in dict.fromkeys(eq) if label not in ",->"}
    return "".join(names.get(c, c) for c in eq)


def build_xtransformers(name):
    import torch
    from x_transformers import Encoder

    model = Encoder(dim=128, depth=1, heads=4)
    x = torch.randn(8, 64, 128)
    params = list(model.parameters())

    def step():
        return _grads(model(x).square().sum(), params)

    return step


PATCHED = False


def checksum(tensors) -> list[float]:
    out = []
    for t in tensors:
        t = t.detach().to(t.dtype if t.is_complex() else __import__("torch").float64)
        out += [float(t.abs().sum()), float(t.sum().real)]
    return out


def worker(case_name: str, patched: bool, collect: bool = True, settle: bool = False) -> None:
    """Answers the parent on a private copy of stdout (the libraries' prints go to stderr):
    one JSON line after the first step, then one per command read from stdin.  ``collect``
    false: the garbage collector paused during the first step (where a collection lands in
    it is set by the process's allocation counts, not by the step's work alone).  ``settle``
    (the patched worker): :func:`settle_copies` after the first step."""
    import gc

    global PATCHED
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import torch

    torch.set_num_threads(1)
    settle_heap()
    if patched:
        patch()
    PATCHED = patched
    torch.manual_seed(0)
    case = CASES[case_name]
    step = globals()[case.build](case_name)
    collections = []  # the generation of each collection during the first step

    def seen(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    if not collect:
        gc.disable()
    gc.callbacks.append(seen)
    t0, c0 = time.perf_counter(), time.process_time()
    result = step()
    first, cpu = time.perf_counter() - t0, time.process_time() - c0
    gc.callbacks.remove(seen)
    gc.enable()
    settled = settle_copies(step) if settle and patched else None
    report = {"first": first, "first_cpu": cpu, "check": checksum(result), "collections": collections}
    print(json.dumps({**report, "settled": settled}), file=proto)
    from einc.tools.benchmark.timing import calibrate, time_batch

    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "calibrate":
            n, per_call = calibrate(step, float(cmd[1]))
            print(json.dumps({"n": n, "per_call": per_call}), file=proto)
        elif cmd[0] == "batch":
            n = int(cmd[1])
            per_call = cpu_batch(step, n) if cmd[2:] == ["cpu"] else time_batch(step, n)
            print(json.dumps({"per_call": per_call}), file=proto)
        elif cmd[0] == "count":
            calls = None
            if patched:
                sys.path.insert(0, str(HERE))
                import einc_patch_plugin

                before = einc_patch_plugin.COUNTS["calls"]
                step()
                calls = einc_patch_plugin.COUNTS["calls"] - before
            print(json.dumps({"calls": calls}), file=proto)
        else:
            break


def cpu_batch(step, n: int) -> float:
    """The thread's CPU seconds per call of ``n`` back-to-back ``step()`` calls, the GC paused
    (``time_batch``'s loop): what a shared machine's other jobs move less than the wall clock."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.thread_time()
        for _ in range(n):
            step()
        return (time.thread_time() - t0) / n
    finally:
        if enabled:
            gc.enable()


def record_calls(step) -> dict:
    """{(equation, ((shape, strides, dtype, requires_grad), ...)): calls} of one ``step()``
    with einc patched in, read where einc's computation starts (the entries
    ``bench/einc_patch_plugin.py`` counts), so ``torch.einsum`` stays einc's own function
    (torch.fx and TorchScript see it) and a call counts once."""
    import collections

    from einc import autograd
    from einc.runtime import engine

    seen, depth = collections.Counter(), [0]

    def recording(fn):
        def wrapper(eq, operands, *args, **kwargs):
            if depth[0] == 0:
                seen[
                    (eq.text, tuple((tuple(o.shape), tuple(o.stride()), o.dtype, o.requires_grad) for o in operands))
                ] += 1
            depth[0] += 1
            try:
                return fn(eq, operands, *args, **kwargs)
            finally:
                depth[0] -= 1

        return wrapper

    saved = (engine.run, engine.run_scaled, autograd.differentiable)
    engine.run, engine.run_scaled, autograd.differentiable = map(recording, saved)
    try:
        step()
    finally:
        engine.run, engine.run_scaled, autograd.differentiable = saved
    return dict(seen)


EQUATIONS_HEADER = (
    "| equation | operands (strides where not contiguous) | calls a step | torch fwd µs | einc / torch fwd "
    "| torch fwd + bwd µs | einc / torch fwd + bwd |\n|---|---|---:|---:|---:|---:|---:|"
)


def time_call(eq: str, ops, torch_einsum, budget: float, clock: str = "wall") -> list[tuple]:
    """``[(torch's median s, einc / torch, low, high)]`` for the forward and for forward +
    backward of one recorded call, on fresh operands of its shapes and strides; ``clock``
    ``cpu``: 21 rounds in the thread's CPU time (bench/pairwise.py's ``cpu_interleaved``,
    for a shared machine), else wall-clock rounds within ``budget`` seconds."""
    import torch

    import einc
    from einc.tools.benchmark.timing import interleaved

    def operands(grad):
        xs = []
        for shape, stride, dtype, rg in ops:
            size = sum((k - 1) * st for k, st in zip(shape, stride)) + 1 if all(shape) else 0
            x = torch.as_strided(torch.randn(size, dtype=torch.float64).to(dtype), shape, stride)
            xs.append(x.requires_grad_(True) if grad and rg and (dtype.is_floating_point or dtype.is_complex) else x)
        return xs

    plain, leaves = operands(False), operands(True)
    needs = [x for x in leaves if x.requires_grad]

    def both(f):
        def run():
            out = f(eq, *leaves)
            if needs and out.requires_grad:
                torch.autograd.grad(out, needs, torch.ones_like(out))

        return run

    timed = []
    for fns in (
        {"torch": lambda: torch_einsum(eq, *plain), "einc": lambda: einc.einsum(eq, *plain)},
        {"torch": both(torch_einsum), "einc": both(einc.einsum)},
    ):
        for f in fns.values():
            f()
        if clock == "cpu":
            from bench.pairwise import cpu_interleaved

            t = cpu_interleaved(fns, 21)
        else:
            t, _ = interleaved(fns, rounds=11, budget=budget, min_rounds=7)
        timed.append((t["torch"].median, *ratio_interval(t["einc"], t["torch"])))
    return timed


def equations(case_name: str, budget: float = 1.0, clock: str = "wall") -> str:
    """A Markdown table: each distinct einsum call of one patched step of ``case_name``,
    timed alone (operands with its shapes and strides), torch.einsum against einc.einsum,
    forward and forward + backward, 1 thread, the heap settled (:func:`settle_heap`)."""
    import torch

    torch.set_num_threads(1)
    settle_heap()
    torch_einsum = patch()
    global PATCHED
    PATCHED = True
    torch.manual_seed(0)
    case = CASES[case_name]
    step = globals()[case.build](case_name)
    calls = record_calls(step)
    lines = [EQUATIONS_HEADER]
    for (eq, ops), n in sorted(calls.items(), key=lambda kv: -kv[1]):
        desc = ", ".join(
            str(shape) + ("" if torch.empty(shape).stride() == stride else f" ({stride})")
            for shape, stride, _, _ in ops
        )
        (t1, r1, lo1, hi1), (t2, r2, lo2, hi2) = time_call(eq, ops, torch_einsum, budget, clock)
        lines.append(
            f"| `{eq}` | {desc} | {n} | {1e6 * t1:.0f} | {r1:.2f} ({lo1:.2f}-{hi1:.2f}) | "
            f"{1e6 * t2:.0f} | {r2:.2f} ({lo2:.2f}-{hi2:.2f}) |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- the parent


class Worker:
    def __init__(self, case: str, patched: bool, cache_dir: str, collect: bool = True, settle: bool = False):
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "OMP_NUM_THREADS": "1",
            "EINC_CACHE_DIR": cache_dir,
        }
        self.proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                case,
                "--side",
                "patched" if patched else "unpatched",
                *([] if collect else ["--collect", "off"]),
                *(["--settle"] if settle else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.first = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise RuntimeError(f"worker exited ({self.proc.returncode}) without an answer; its stderr is above")
        return json.loads(line)

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def measure(case: Case, rounds: int, target: float, seed: int = 0, clock: str = "wall", settle: bool = False) -> dict:
    """One module's row: both workers started one after the other (each first step alone on
    the machine), then ``rounds`` rounds of one batch each, in shuffled order, timed by the
    wall clock or (``clock`` "cpu") in each worker's thread CPU time.  The workers
    get an empty einc cache folder, so the first step finds no path remembered on disk
    by an earlier run, as on a user's first run.  ``settle``: the patched worker's copies
    compiled in the background are ready before the rounds (the row's ``settled``: how many)."""
    sides = {}
    cache = tempfile.TemporaryDirectory(prefix="einc-real-modules-")
    try:
        sides["unpatched"] = Worker(case.name, False, cache.name)
        sides["patched"] = Worker(case.name, True, cache.name, settle=settle)
        note = (
            "" if same_answers(sides["unpatched"].first["check"], sides["patched"].first["check"]) else "ANSWERS DIFFER"
        )
        calls = {name: w.ask(f"calibrate {target}")["n"] for name, w in sides.items()}
        samples = {name: [] for name in sides}
        order, rng = list(sides), random.Random(seed)
        for _ in range(rounds):
            rng.shuffle(order)
            for name in order:
                samples[name].append(sides[name].ask(f"batch {calls[name]} {clock}")["per_call"])
        count = sides["patched"].ask("count")["calls"]
        first = (sides["unpatched"].first["first"], sides["patched"].first["first"])
        row = summarize(case.name, samples["unpatched"], samples["patched"], first, count, note)
        return {**row, "clock": clock, "settled": sides["patched"].first.get("settled")}
    finally:
        for w in sides.values():
            w.close()
        cache.cleanup()


def first_steps(case: Case, runs: int, seed: int = 0, collect: bool = True) -> dict:
    """``runs`` first steps a side, each in a fresh worker process with an empty einc cache
    folder of its own (no path remembered on disk, no plan in memory), the two sides' processes
    in turn in a shuffled order each run: a row with both sides' medians, their ratio, and the
    ratios of the run's pairs (their median and range); and the medians of the first steps'
    CPU time (the process's), which a shared machine's other jobs move less.  A first step is
    one timing, so one process's is noise; the median of several is what a fix can be shown
    against.  ``collect`` false: the garbage collector paused during each first step."""
    import statistics

    times: dict = {"unpatched": [], "patched": []}
    cpu: dict = {"unpatched": [], "patched": []}
    order, rng, note = list(times), random.Random(seed), ""
    for _ in range(runs):
        rng.shuffle(order)
        checks = {}
        for side in order:
            with tempfile.TemporaryDirectory(prefix="einc-first-step-") as cache:
                w = Worker(case.name, side == "patched", cache, collect)
                w.close()
            times[side].append(w.first["first"])
            cpu[side].append(w.first.get("first_cpu", w.first["first"]))
            checks[side] = w.first["check"]
        if not same_answers(checks["unpatched"], checks["patched"]):
            note = "ANSWERS DIFFER"
    pairs = sorted(p / u for u, p in zip(times["unpatched"], times["patched"]))
    unpatched, patched = statistics.median(times["unpatched"]), statistics.median(times["patched"])
    return {
        "module": case.name,
        "runs": runs,
        "first_unpatched_s": unpatched,
        "first_patched_s": patched,
        "first_ratio": patched / unpatched,
        "pair_median": statistics.median(pairs),
        "pair_low": pairs[0],
        "pair_high": pairs[-1],
        "cpu_unpatched_s": statistics.median(cpu["unpatched"]),
        "cpu_patched_s": statistics.median(cpu["patched"]),
        "collect": collect,
        "unpatched_all": times["unpatched"],
        "patched_all": times["patched"],
        "note": note,
    }


FIRST_HEADER = (
    "| module | runs | first step ms, unpatched / patched (medians) | ratio of the medians "
    "| the runs' ratios: median (lowest-highest) | CPU time ms, unpatched / patched (medians) "
    "| ratio of the CPU medians |\n|---|---:|---:|---:|---:|---:|---:|"
)


def first_row(r: dict) -> str:
    if "skipped" in r:
        return f"| {r['module']} | skipped: {r['skipped']} | | | | | |"
    return (
        f"| {r['module']} | {r['runs']} | {1e3 * r['first_unpatched_s']:.3g} / {1e3 * r['first_patched_s']:.3g} | "
        f"{r['first_ratio']:.2f} | {r['pair_median']:.2f} ({r['pair_low']:.2f}-{r['pair_high']:.2f}) | "
        f"{1e3 * r['cpu_unpatched_s']:.3g} / {1e3 * r['cpu_patched_s']:.3g} | "
        f"{r['cpu_patched_s'] / r['cpu_unpatched_s']:.2f} |"
        + (f" {r['note']}" if r.get("note") else "")
    )


def missing(case: Case) -> str | None:
    """Why ``case`` cannot run here, or None."""
    if case.importable and importlib.util.find_spec(case.importable) is None:
        return f"{INSTALLS[case.library].name} is not installed (python bench/real_modules.py --install {case.name})"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="default: all but torch-bilinear")
    parser.add_argument("--install", action="store_true", help="pip install --no-deps the pinned libraries first")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--target", type=float, default=0.05, help="seconds a batch lasts at least (default 0.05)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--list", action="store_true")
    parser.add_argument(
        "--first",
        type=int,
        metavar="N",
        help="instead: first steps only, N fresh processes a side with empty caches, medians",
    )
    parser.add_argument(
        "--equations",
        metavar="MODULE",
        help="instead: each einsum call of one patched step of MODULE, timed alone against torch.einsum",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: the modules' rounds (or with --equations each call) in the thread's CPU time (a shared machine)",
    )
    parser.add_argument(
        "--collect",
        choices=("on", "off"),
        default="on",
        help="with --first, off: the garbage collector paused during each first step",
    )
    parser.add_argument(
        "--settle",
        action="store_true",
        help="the patched worker's copies compiled in the background (EINC_COPY_COMPILE) ready before the rounds",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--side", choices=("patched", "unpatched"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.side == "patched", args.collect == "on", args.settle)
        return 0
    if args.equations:
        if args.equations not in CASES:
            parser.error(f"unknown module {args.equations}; known: {list(CASES)}")
        why = missing(CASES[args.equations])
        if why:
            sys.exit(f"{args.equations}: {why}")
        print(equations(args.equations, clock=args.clock))
        return 0
    if args.list:
        for c in CASES.values():
            print(f"{c.name:18} {c.module}")
        return 0
    names = args.modules or [n for n in CASES if n != "torch-bilinear"]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown modules {unknown}; known: {list(CASES)}")
    if args.install:
        for key in dict.fromkeys(CASES[n].library for n in names if CASES[n].library):
            install(INSTALLS[key])
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        case = CASES[name]
        why = missing(case)
        if why:
            print(f"{name}: skipped: {why}", file=sys.stderr, flush=True)
            rows.append({"module": name, "skipped": why})
            continue
        try:
            if args.first:
                row = first_steps(case, args.first, collect=args.collect == "on")
            else:
                row = measure(case, args.rounds, args.target, clock=args.clock, settle=args.settle)
        except (RuntimeError, OSError, ValueError) as e:  # a worker that died (an import, a crash): reported, not fatal
            row = {"module": name, "skipped": f"failed: {type(e).__name__}: {e}"}
        if case.library:
            row["version"] = installed_version(INSTALLS[case.library].name)
        rows.append(row)
        print((first_row if args.first else table_row)(row), file=sys.stderr, flush=True)
    text = "\n".join([FIRST_HEADER, *map(first_row, rows)]) if args.first else table(rows)
    print(text)
    stem = "first-steps" if args.first else "real-modules"
    (args.out / f"{stem}.md").write_text(text + "\n")
    (args.out / f"{stem}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
