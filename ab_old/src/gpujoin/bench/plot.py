"""``gpujoin bench plot``: throughput against the swept workload parameter, one line per engine/algorithm."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path


def swept_parameter(records: list[dict]) -> str:
    """The workload field that takes more than one value across ``records``."""
    fields = records[0]["workload"].keys()
    varying = [f for f in fields if len({json.dumps(r["workload"][f]) for r in records}) > 1]
    if len(varying) != 1:
        raise ValueError(f"the records must vary in exactly one workload parameter, they vary in {varying or 'none'}")
    return varying[0]


def plot(jsonl: Path, png: Path) -> Path:
    """Draw ``png`` from the JSON lines in ``jsonl`` (written by ``gpujoin bench ... -o``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in Path(jsonl).read_text().splitlines() if line.strip()]
    if not records:
        raise ValueError(f"{jsonl} holds no benchmark records")
    if records[0].get("benchmark") == "cpu-joins":
        return _plot_threads(plt, records, Path(png))
    if records[0].get("benchmark") == "out-of-core":
        return _plot_out_of_core(plt, records, Path(png))
    param = swept_parameter(records)
    lines = defaultdict(list)
    for r in records:
        lines[f"{r['engine']} {r['algorithm']} ({r['device']})"].append((r["workload"][param], r["throughput_g_per_s"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xlabel(param)
    unit = "tuples" if records[0]["benchmark"] == "join" else "rows"
    ax.set_ylabel(f"throughput, G {unit}/s")
    ax.set_title(f"gpujoin bench {records[0]['benchmark']} (commit {records[0]['commit']})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = Path(png).with_name(Path(png).name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    tmp.replace(png)
    return Path(png)


def _save(fig, png: Path) -> Path:
    tmp = png.with_name(png.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    tmp.replace(png)
    return png


def _plot_out_of_core(plt, records: list[dict], png: Path) -> Path:
    """Paper 004 Fig. 17: throughput against |R| = |S|, one line per result mode, memory limit,
    cache share and stream count, with the PCIe ceiling (data crossing once) as a line."""
    lines = defaultdict(list)
    for r in records:
        w = r["workload"]
        label = f"{w['mode']}, limit {w['memory_limit'] or 'none'}"
        if w.get("cache_fraction") is not None:
            label += f", cache {w['cache_fraction']}"
        if r.get("streams", 3) != 3:
            label += f", {r['streams']} stream"
        lines[label].append((w["log2_r"], r["throughput_g_per_s"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    for tb in sorted({r["workload"]["tuple_bytes"] for r in records}):
        gbps = max(r["h2d_pinned_GBps"] for r in records if r["workload"]["tuple_bytes"] == tb)
        ax.axhline(gbps / tb, linestyle="--", color="gray", linewidth=1,
                   label=f"PCIe ceiling, {tb}-byte tuples crossing once ({gbps:.1f} GB/s)")
    ax.set_xlabel("log2 |R| = log2 |S|")
    ax.set_ylabel("throughput, G tuples/s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"gpujoin bench out-of-core, {records[0]['device']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, png)


def _plot_threads(plt, records: list[dict], png: Path) -> Path:
    """paper 002 Figs. 3-5: time against thread count, one panel per set size, one line per join."""
    sizes = sorted({r["workload"]["n"] for r in records})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4.2), squeeze=False)
    for ax, n in zip(axes[0], sizes):
        lines = defaultdict(list)
        for r in records:
            if r["workload"]["n"] == n and "threads" in r:
                name = r["algorithm"] if r["engine"] == "gpujoin" else r["engine"]
                lines[name].append((r["threads"], r["median_s"] * 1e3))
        for name, pts in lines.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        gpu = [r for r in records if r["workload"]["n"] == n and "threads" not in r]
        for r, color in zip(gpu, ("black", "gray")):  # the GPU runs, as levels
            ax.axhline(r["median_s"] * 1e3, linestyle="--", linewidth=1, color=color, label=f"GPU {r['algorithm']}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("threads")
        ax.set_ylabel("median ms")
        ax.set_title(f"{n >> 20}M unique keys a side")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    cpu = next((r["device"] for r in records if "threads" in r), "").rsplit(",", 1)[0]
    fig.suptitle(f"set intersection (paper 002), {cpu}, commit {records[0]['commit']}")
    fig.tight_layout()
    tmp = png.with_name(png.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(png)
    return png
