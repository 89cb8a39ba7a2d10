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
import sys
import time
from pathlib import Path

import opt_einsum
import torch

import einc

# The repository holding the einc package (an editable install or a clone); used for
# the git revision in the header, and only when it is a git checkout.
REPO = Path(__file__).resolve().parents[2]


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
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


def _cpu_sample():
    """(wall s, CPU s busy machine-wide, CPU s of this process); None off Linux."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    t = os.times()
    return time.monotonic(), (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK"), t.user + t.system


class Load:
    """Cores kept busy by *other* processes, before the run (0.5 s sample) and during it.

    With torch using every core, one core taken by another process makes parallel ops
    wait for scheduler ticks, so timings inflate (to multiples of ~4-8 ms).
    """

    def __init__(self):
        s0 = _cpu_sample()
        time.sleep(0.5)
        self.start = _cpu_sample()
        self.before = self._other(s0, self.start)
        if self.before > 0.3:
            print(f"warning: other processes keep {self.before:.1f} of {os.cpu_count()} cores busy; timings "
                  "will be inflated (wait for an idle machine, or use --threads 1)", file=sys.stderr)

    @staticmethod
    def _other(a, b) -> float:
        if a is None or b is None or b[0] <= a[0]:
            return float("nan")
        return max(0.0, (b[1] - a[1]) - (b[2] - a[2])) / (b[0] - a[0])

    def line(self) -> str:
        during = self._other(self.start, _cpu_sample())
        noisy = max(self.before, during) > 0.3
        return (f"cores busy with other processes: {self.before:.2f} before the run, {during:.2f} during it"
                + (" **(machine not idle: timings are inflated and noisy)**" if noisy else ""))


def _gpu() -> str:
    if not torch.cuda.is_available():
        return ""
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"; GPU: {p.name} ({p.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}"


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
