"""A fresh process's first call: what ``import einc`` and einc's first call cost a new process.

Each case runs in a new Python process (``python -c``, from the tree measured, so that
``import einc`` finds that tree's einc first; every process a fresh ``EINC_CACHE_DIR``, so no
path is read back from disk), after ``import torch``, as a user's script runs:

- ``einc 3x3``: ``import einc`` (``import``), then the first ``einc.einsum('ij,jk->ik', a, b)``
  on 3x3 float32 operands (``call``);
- ``einc N``: ``import einc``, then the first ``einc.einsum`` on the N-tensor network
  (float64 operands, scaled as ``bench/first_call.py`` scales them);
- the peers, once a round (no einc in their process): ``torch.einsum`` and opt_einsum's
  ``contract`` (``import opt_einsum`` included: torch imports it already) on the 3x3
  product, and ``contract`` (its ``auto`` path, torch backend) on the networks; and
  ``gc.collect()`` alone (``gc``), the full collection that ``import torch`` leaves due.

Every process reports, for its import and its call: the clock, the process's CPU time and the
time its garbage collections took (a process that has just imported torch owes the collector a
full collection of torch's objects, which the next code to allocate enough pays: often
einc's first call).  ``import torch`` is timed in every process.  Rounds alternate the
trees (``--trees``, the first one first in even rounds) and run the peers once between them;
the table gives medians over the rounds.  ``--bytecode``: read and write compiled modules
under a folder of their own (``PYTHONPYCACHEPREFIX``, one per tree, filled by a process run
first), as a user's install has them; without it, ``PYTHONDONTWRITEBYTECODE`` as the
environment has it (on the development machine einc's modules are compiled from source in
every process, its dependencies read from the ``.pyc`` files pip wrote).  1 torch thread.

    python bench/first_process.py [--rounds 10] [--trees . ../before] [--bytecode] [--networks 30,100] [--raw FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The child: ``case``, ``networks`` (a JSON file) and ``name`` come in as its arguments.
CHILD = r"""
import gc, json, math, sys, time
case, networks, name = sys.argv[1], sys.argv[2], sys.argv[3]
spent = [0.0]
began = []
def collected(phase, info):
    if phase == "start":
        began.append(time.perf_counter())
    elif began:
        spent[0] += time.perf_counter() - began.pop()
gc.callbacks.append(collected)
def timed(fn):
    gc_before, wall, cpu = spent[0], time.perf_counter(), time.process_time()
    value = fn()
    return value, {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "gc": spent[0] - gc_before}
_, torch_import = timed(lambda: __import__("torch"))
import torch
torch.set_num_threads(1)
if name == "3x3":
    eq = "ij,jk->ik"
    ops = [torch.rand(3, 3), torch.rand(3, 3)]
else:
    eq, shapes = json.load(open(networks))[name]
    lhs, out = eq.split("->")
    gen = torch.Generator().manual_seed(0)
    ops = [(torch.rand(s, generator=gen, dtype=torch.float64) + 0.5)
           * math.prod(d ** -0.5 for c, d in zip(t, s) if c not in out) for t, s in zip(lhs.split(","), shapes)]
result = {"torch": torch_import}
if case == "einc":
    _, result["import"] = timed(lambda: __import__("einc"))
    import einc
    _, result["call"] = timed(lambda: einc.einsum(eq, *ops))
elif case == "torch":
    _, result["call"] = timed(lambda: torch.einsum(eq, *ops))
elif case == "gc":
    _, result["call"] = timed(gc.collect)
else:
    def contract():
        import opt_einsum
        return opt_einsum.contract(eq, *ops, backend="torch")
    _, result["call"] = timed(contract)
print(json.dumps(result))
"""


def networks(sizes) -> dict:
    """``{name: (equation, shapes)}``: random 3-regular graphs of ``sizes`` tensors
    (``bench/paths.py``'s generator, seed 1)."""
    from einsum_benchmark.generators.random.randreg import regular

    from bench.paths import _symbols
    found = {}
    for n in sizes:
        eq, shapes = regular(n, 3, seed=1)[:2]
        found[f"random 3-regular ({n})"] = (_symbols(str(eq)), [[int(d) for d in s] for s in shapes])
    return found


def label(tree: Path) -> str:
    """The tree's commit (``+`` where it has changes of its own), else its folder's name."""
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        return tree.name
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + ("+" if dirty else "")


def run(tree: Path, case: str, name: str, nets: str, env: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="einc-first-process-") as cache:     # a fresh einc cache, removed after
        out = subprocess.run([sys.executable, "-c", CHILD, case, nets, name], cwd=tree,
                             env=dict(env, EINC_CACHE_DIR=cache), capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{case} {name} in {tree} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--trees", nargs="+", default=[str(ROOT)], help="einc checkouts to alternate")
    ap.add_argument("--bytecode", action="store_true", help="compiled modules, as an install has them")
    ap.add_argument("--networks", default="30,100", help="tensor counts of the random 3-regular networks")
    ap.add_argument("--raw", default=None, help="also write every process's figures to this JSON file")
    args = ap.parse_args(argv)
    trees = [Path(t).resolve() for t in args.trees]
    tmp = tempfile.TemporaryDirectory(prefix="einc-first-process-")
    nets = os.path.join(tmp.name, "networks.json")
    found = networks([int(n) for n in args.networks.split(",") if n])
    Path(nets).write_text(json.dumps(found))
    envs = {}
    for k, tree in enumerate(trees):
        env = dict(os.environ)
        if args.bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp.name, f"pyc-{k}")
        envs[tree] = env
        if args.bytecode:       # a process first, to write every module's .pyc
            run(tree, "einc", "3x3", nets, env)
            for name in found:
                run(tree, "einc", name, nets, env)
    names = ["3x3", *found]
    names_of = {tree: label(tree) for tree in trees}
    rows: dict = {}
    for r in range(args.rounds):
        order = trees if r % 2 == 0 else trees[::-1]
        for name in names:
            for tree in order:
                rows.setdefault((f"einc {names_of[tree]}", name), []).append(run(tree, "einc", name, nets, envs[tree]))
            peers = ("torch", "opt_einsum", "gc") if name == "3x3" else ("opt_einsum",)
            for peer in peers:
                rows.setdefault((peer, name), []).append(run(trees[0], peer, name, nets, envs[trees[0]]))
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)
    if args.raw:
        Path(args.raw).write_text(json.dumps([[who, name, runs] for (who, name), runs in rows.items()]))
    print(f"medians of {args.rounds} processes each, ms ({'bytecode' if args.bytecode else 'environment as is'})\n")
    print("| what | call | `import torch` clock | `import einc` clock | its CPU | its gc | first call clock "
          "| its CPU | its gc | call less its gc |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (who, name), runs in rows.items():
        def med(part, key):
            got = [x[part][key] for x in runs if part in x]
            return f"{statistics.median(got) * 1e3:.1f}" if got else "-"
        less = statistics.median([(x["call"]["wall"] - x["call"]["gc"]) for x in runs]) * 1e3
        print(f"| {who} | {name} | {med('torch', 'wall')} | {med('import', 'wall')} | {med('import', 'cpu')} "
              f"| {med('import', 'gc')} | {med('call', 'wall')} | {med('call', 'cpu')} | {med('call', 'gc')} "
              f"| {less:.1f} |")


if __name__ == "__main__":
    main()
