"""Networks of bench/paths.py past the hyper-optimizer's floor, as that benchmark generates
them (einsum-benchmark's generators, seeds fixed), kept in a file so that the tests need
neither that package nor its generators' stability: tests/planner/test_search_paths.py
weighs the paths einc's search finds for them.

    python -m tests.planner.search_networks      # rewrites tests/planner/data/search_networks.json
                                                 # (needs einsum_benchmark, as bench/paths.py does)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NETWORKS = Path(__file__).resolve().parent / "data" / "search_networks.json"
NAMES = ("random hypernetwork (150)", "lattice 5x5x5 (125)")


def load() -> dict:
    """``{name: (equation, shapes)}`` of the file."""
    with open(NETWORKS) as f:
        return {row["name"]: (row["eq"], [tuple(s) for s in row["shapes"]]) for row in json.load(f)}


def main() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import paths
    rows = [{"name": name, "eq": eq, "shapes": [list(s) for s in shapes]}
            for name, eq, shapes in paths.instances(";".join(NAMES)) if name in NAMES]
    assert [r["name"] for r in rows] == list(NAMES), [r["name"] for r in rows]
    NETWORKS.write_text(json.dumps(rows, separators=(",", ":"), ensure_ascii=True) + "\n")
    print(f"{len(rows)} networks -> {NETWORKS}")


if __name__ == "__main__":
    main()
