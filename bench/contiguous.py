"""Where torch.einsum returns a non-contiguous result, compare like with like.

    python bench/contiguous.py [--rounds N]

einc always returns a fresh contiguous tensor; torch.einsum returns a permuted view
(``ibnd,jbnd->ijbn``) or a view of its input (``ii->i``) on some workloads, which a
caller that needs ``.view()``, ``view_as_complex`` or a contiguous kernel input pays
for later with ``.contiguous()``.  For every cpu workload of the suite whose
torch.einsum result is not contiguous, this times torch.einsum, torch.einsum followed
by ``.contiguous()`` (or ``.clone()`` for a view of an input), and einc.einsum,
interleaved, and prints a Markdown table of medians.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import einc  # noqa: E402
from einc.tools.benchmark.runner import operands  # noqa: E402
from einc.tools.benchmark.suite import load as load_suite  # noqa: E402
from einc.tools.benchmark.timing import interleaved  # noqa: E402

SUITE = Path(__file__).resolve().parent / "suite.json"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, float32, suite cpu variants")
    print("| id | equation | torch µs | torch + contiguous µs | einc µs | einc/torch | einc/(torch+contiguous) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for w in load_suite(SUITE)["workloads"]:
        eq, ops = w["equation"], operands(w)
        ref = torch.einsum(eq, *ops)
        aliases = any(ref.untyped_storage().data_ptr() == o.untyped_storage().data_ptr() for o in ops)
        if ref.is_contiguous() and not aliases:
            continue
        fresh = (lambda: torch.einsum(eq, *ops).clone()) if aliases else \
            (lambda: torch.einsum(eq, *ops).contiguous())
        fns = {"torch": lambda: torch.einsum(eq, *ops), "torch+contiguous": fresh,
               "einc": lambda: einc.einsum(eq, *ops)}
        for fn in fns.values():
            fn()
        t, _ = interleaved(fns, rounds=args.rounds, budget=4.0)
        m = {k: v.median * 1e6 for k, v in t.items()}
        print(f"| {w['id']} | `{eq}` | {m['torch']:.1f} | {m['torch+contiguous']:.1f} | {m['einc']:.1f} | "
              f"{m['einc'] / m['torch']:.2f} | {m['einc'] / m['torch+contiguous']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
