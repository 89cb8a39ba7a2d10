"""Result formatting for the benchmarks: header (machine, versions, load), Markdown table, CSV.

Imports torch and opt_einsum (the header records their versions).
"""

from __future__ import annotations

import csv
import datetime
import math
import os
import platform
import subprocess
from pathlib import Path

import opt_einsum
import torch

import einc

from .load import Load, _cpu_sample  # noqa: F401 -- re-exported: dispatch, models

# The repository holding the einc package (an editable install or a clone); used for
# the git revision in the header, and only when it is a git checkout.
REPO = Path(__file__).resolve().parents[3]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_rev() -> str:
    if not (REPO / ".git").exists():
        return "unknown"
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "einc"], cwd=REPO,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (rev + ("+dirty(einc/)" if dirty else "")) or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _gpu() -> str:
    if not torch.cuda.is_available():
        return ""
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"; GPU: {p.name} ({p.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}"


def environment(device: str = "cpu") -> str:
    """One line: the machine, torch's threads and the versions (the chart's subtitle)."""
    return (f"{_cpu_model()}, {os.cpu_count()} cores{_gpu() if device == 'cuda' else ''}; torch {torch.__version__} "
            f"with {torch.get_num_threads()} thread(s); opt_einsum {opt_einsum.__version__}; einc {einc.__version__} "
            f"(git {_git_rev()}); python {platform.python_version()}")


def header(title: str, dtype: str, load: Load, extra: list[str] = (), device: str = "cpu") -> list[str]:
    """Markdown lines describing the machine, the software versions and the machine's load."""
    u = platform.uname()
    return [
        f"# {title}", "",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- machine: {_cpu_model()} (processor={platform.processor() or '?'}; "
        f"{u.system} {u.release} {u.machine}), cpu_count={os.cpu_count()}"
        + (_gpu() if device == "cuda" else ""),
        f"- {load.line()}",
        f"- torch {torch.__version__}, threads={torch.get_num_threads()}, "
        f"torch.backends.opt_einsum.enabled={torch.backends.opt_einsum.enabled}; "
        f"opt_einsum {opt_einsum.__version__}; einc {einc.__version__} (git {_git_rev()}); "
        f"python {platform.python_version()}",
        f"- dtype: {dtype}",
        *[f"- {line}" for line in extra], "",
    ]


def us(seconds) -> str:
    if seconds is None:
        return "—"
    v = seconds * 1e6
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def ratio(a, b):
    return a / b if a is not None and b is not None else None


def fmt_ratio(r) -> str:
    return "—" if r is None else f"{r:.2f}"


def geomean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def markdown_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    right = [c.endswith(("µs", "ratio")) or c.startswith("einc/") for c in columns]
    lines = ["| " + " | ".join(columns) + " |",
             "|" + "|".join("---:" if r else "---" for r in right) + "|"]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def write(out_dir, stem: str, md_lines: list[str], csv_columns: list[str], csv_rows: list[list],
          quiet: bool = False) -> tuple[Path, Path]:
    """Print the Markdown report (unless ``quiet``) and write it to OUT/stem.md, with the
    data in OUT/stem.csv; returns the two paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(md_lines) + "\n"
    if not quiet:
        print(text, end="")
    (out / f"{stem}.md").write_text(text, encoding="utf-8")
    with open(out / f"{stem}.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(csv_columns)
        w.writerows(csv_rows)
    if not quiet:
        print(f"\nwrote {out / (stem + '.md')} and {out / (stem + '.csv')}")
    return out / f"{stem}.md", out / f"{stem}.csv"


def cell(text: str) -> str:
    """Text made safe for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")
