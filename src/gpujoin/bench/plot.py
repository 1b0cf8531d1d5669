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
