"""The workload suite: where to find it, which workloads to run.

The suite ships inside the package (``einc/tools/benchmark/suite.json``, so that ``einc bench``
and ``einc dump --suite`` work after a wheel install); ``bench/suite.json`` in the
repository is a symbolic link to it.

Each workload has an ``id``, a ``category``, an ``equation`` and two variants,
``cpu`` (small, float32) and ``gpu`` (large, the workload's own dtype), each with
``shapes``, ``dtype``, ``flops`` (opt_einsum's cost of its ``auto`` path) and
``min_bytes`` (inputs and output read/written once).  Standard library only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ...codegen.ir import DTYPE_ALIASES, DTYPE_NAMES
from ...errors import ArgumentError

SUITE_NAME = Path("bench") / "suite.json"
# The repository that holds the einc package, for an editable install or a clone.
REPO = Path(__file__).resolve().parents[3]
# The copy installed with the package.
PACKAGED = Path(__file__).resolve().parent / "suite.json"


def find_suite(path=None) -> Path:
    """``path`` if given, else ``bench/suite.json`` under the current directory, else
    under the repository that holds the einc package (an editable install or a clone),
    else the suite installed with the package (:data:`PACKAGED`)."""
    if path:
        p = Path(path)
        if not p.is_file():
            raise ArgumentError(f"no suite file at {p}")
        return p
    for root in (Path.cwd(), REPO):
        if (root / SUITE_NAME).is_file():
            return root / SUITE_NAME
    if PACKAGED.is_file():
        return PACKAGED
    raise ArgumentError(f"no {SUITE_NAME} under the current directory ({Path.cwd()}) or under {REPO}, and "
                        f"no {PACKAGED} (a broken install?); pass the suite file explicitly")


def load(path) -> dict:
    """The parsed suite file, checked for the fields the benchmark and the golden kernels use."""
    path = Path(path)
    try:
        suite = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ArgumentError(f"cannot read the suite {path}: {e}") from None
    workloads = suite.get("workloads") if isinstance(suite, dict) else None
    if not isinstance(workloads, list):
        raise ArgumentError(f"{path} is not a workload suite: it has no 'workloads' list")
    seen = set()
    for w in workloads:
        if not isinstance(w, dict):
            raise ArgumentError(f"{path}: a workload is not an object: {w!r:.60}")
        missing = [k for k in ("id", "category", "equation", "variants") if k not in w]
        if missing:
            raise ArgumentError(f"{path}: workload {w.get('id', '?')!r} lacks {', '.join(missing)}")
        for key in ("category", "equation"):
            if not isinstance(w[key], str):
                raise ArgumentError(f"{path}: workload {w['id']!r}: {key} {w[key]!r} is not a string")
        # an id names a folder (einc dump --suite) and rows: a plain name, once, none of dump's own
        if not isinstance(w["id"], str) or not _ID.fullmatch(w["id"]) or w["id"].startswith("classic_"):
            raise ArgumentError(f"{path}: workload id {w['id']!r} is not a plain name (letters, digits, '_', "
                                "'.' and '-', not starting with '.' or 'classic_')")
        if w["id"] in seen:
            raise ArgumentError(f"{path}: workload id {w['id']!r} is given twice")
        seen.add(w["id"])
        if not isinstance(w["variants"], dict):
            raise ArgumentError(f"{path}: workload {w['id']!r}: 'variants' is not an object of variants by name")
        for name, v in w["variants"].items():
            if not isinstance(v, dict):
                raise ArgumentError(f"{path}: workload {w['id']!r}, variant {name!r} is not an object")
            shapes = v.get("shapes")
            if not isinstance(shapes, list) or not all(
                    isinstance(sh, list) and all(type(n) is int and n >= 0 for n in sh) for sh in shapes):
                raise ArgumentError(f"{path}: workload {w['id']!r}, variant {name!r}: shapes {shapes!r:.80} is not "
                                    "a list of shapes (lists of sizes, whole numbers from 0)")
            dtype = v.get("dtype")
            if isinstance(dtype, str) and dtype in DTYPE_ALIASES:      # "half", "double": as --dtype takes them
                v["dtype"] = dtype = DTYPE_ALIASES[dtype]
            if dtype not in DTYPE_NAMES:
                raise ArgumentError(f"{path}: workload {w['id']!r}, variant {name!r}: dtype {dtype!r} is not one "
                                    f"of {', '.join(DTYPE_NAMES)} (or {', '.join(DTYPE_ALIASES)})")
    return suite


_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def variant_name(device: str) -> str:
    """The suite's variant for a device: ``cpu`` for the CPU, ``gpu`` for CUDA."""
    return "gpu" if device == "cuda" else "cpu"


def select(suite: dict, text: str = "", device: str = "cpu") -> list[dict]:
    """Workloads whose id or category contains ``text`` and that have a variant for ``device``."""
    v = variant_name(device)
    return [w for w in suite["workloads"]
            if (text in w["id"] or text in w["category"]) and v in w["variants"]]
