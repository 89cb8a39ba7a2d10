"""The benchmark chart (PNG): einc's speedup per workload, and on a GPU the roofline.

Needs matplotlib (``pip install 'einc[bench]'``); :func:`draw` raises
:class:`MissingMatplotlib` without it, and the caller still has its CSV and Markdown.
"""

from __future__ import annotations

from pathlib import Path


class MissingMatplotlib(ImportError):
    """matplotlib is not installed."""


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise MissingMatplotlib("matplotlib is not installed, so no chart was drawn "
                                "(pip install 'einc[bench]', or pip install matplotlib)") from None
    matplotlib.use("Agg")           # files only: no display needed
    import matplotlib.pyplot as plt
    return plt


def draw(rows: list[dict], path, title: str, roofline=None) -> Path:
    """Write the chart for benchmark ``rows`` (from :func:`einc.tools.benchmark.runner.run`) to ``path``.
    ``title`` may hold several lines (the runner adds the machine, threads, versions and
    any noise warning)."""
    plt = _pyplot()
    rows = [r for r in rows if r.get("et") is not None]
    groups = by_category(rows)
    panels = 2 if roofline is not None else 1
    lines = len(rows) + len(groups)
    height = max(4.5 if roofline is not None else 3.0, 0.28 * lines + 1.2 + 0.18 * title.count("\n"))
    fig, axes = plt.subplots(1, panels, figsize=(9 * panels, height), squeeze=False)
    _speedups(axes[0][0], groups)
    if roofline is not None:
        _roofline(axes[0][1], rows, roofline)
    fig.suptitle(title, fontsize=8, color="black")
    if "WARNING" in title:
        fig.patch.set_facecolor("#fff3e0")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110, facecolor=fig.get_facecolor())
    plt.close(fig)
    return path


def by_category(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """``[(category, rows)]`` in the order the categories first appear."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["w"]["category"], []).append(r)
    return list(groups.items())


def _speedups(ax, groups):
    """Horizontal bars, one pair per workload under its category's heading: torch time /
    einc time and opt_einsum time / einc time on a log scale, each with its value."""
    ys, names, rows, heads = [], [], [], []
    y = 0
    for category, members in groups:
        heads.append((y, category))
        y += 1
        for r in members:
            ys.append(y)
            names.append(r["w"]["id"] + (" (busy)" if r.get("noisy") else ""))
            rows.append(r)
            y += 1
    total = y
    vs_torch = [1 / r["et"] for r in rows]
    vs_oe = [1 / r["eo"] if r.get("eo") else float("nan") for r in rows]
    # Bars grow from 1 (equal time): right when einc is faster, left when it is slower.
    for offset, values, label, color in ((-0.2, vs_torch, "vs torch.einsum", "#1f77b4"),
                                         (0.2, vs_oe, "vs opt_einsum.contract", "#ff7f0e")):
        ax.barh([yv + offset for yv in ys], [v - 1 for v in values], left=1, height=0.4, label=label, color=color)
        for yv, v in zip(ys, values):
            if v == v and v > 0:
                ax.annotate(f"{v:.2f}", (v, yv + offset), xytext=(2 if v >= 1 else -2, 0),
                            textcoords="offset points", ha="left" if v >= 1 else "right", va="center",
                            fontsize=5.5)
    for yv, r in zip(ys, rows):
        if r["einc_check"] != "ok":
            ax.annotate("MISMATCH", (1, yv), fontsize=7, color="red")
    for yv, category in heads:
        ax.axhline(yv - 0.5, color="gray", linewidth=0.5)
        ax.annotate(category, (0.005, yv), xycoords=("axes fraction", "data"), fontsize=7, fontweight="bold",
                    va="center")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    finite = [v for v in vs_torch + vs_oe if v == v and v > 0]
    reach = max([1.5] + [max(v, 1 / v) for v in finite]) * 1.6
    ax.set_xlim(1 / reach, reach)
    ax.set_yticks(ys, names, fontsize=7)
    ax.set_ylim(total - 0.5, -0.5)
    ax.set_xlabel("einc speedup (other method's time / einc's time; > 1: einc is faster)")
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, frameon=False)


def _roofline(ax, rows, roofline):
    """Achieved TFLOP/s against arithmetic intensity, with the measured roof per dtype."""
    xs = [r["variant"]["flops"] / r["variant"]["min_bytes"] for r in rows
          if r["variant"].get("flops") and r["variant"].get("min_bytes")]
    if not xs:
        ax.set_axis_off()
        return
    lo, hi = min(xs) / 2, max(xs) * 2
    colors = {}
    for d, peak in sorted(roofline.peaks.items()):
        ridge = peak / roofline.bandwidth
        line = ax.plot([lo, ridge, max(hi, ridge * 2)],
                       [lo * roofline.bandwidth / 1e12, peak / 1e12, peak / 1e12],
                       label=f"roof {d}", linewidth=1)
        colors[d] = line[0].get_color()
    for r in rows:
        v = r["variant"]
        if not v.get("flops") or not v.get("min_bytes"):
            continue
        x, color = v["flops"] / v["min_bytes"], colors.get(v["dtype"], "gray")
        if r["rates"].get("einc"):
            ax.scatter(x, r["rates"]["einc"] / 1e12, color=color, s=18, zorder=3)
            ax.annotate(r["w"]["id"], (x, r["rates"]["einc"] / 1e12), fontsize=5, alpha=0.7)
        if r["rates"].get("torch"):
            ax.scatter(x, r["rates"]["torch"] / 1e12, facecolors="none", edgecolors=color, s=18, zorder=3)
    ax.scatter([], [], color="gray", s=18, label="einc")
    ax.scatter([], [], facecolors="none", edgecolors="gray", s=18, label="torch.einsum")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (suite flops / min_bytes)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
