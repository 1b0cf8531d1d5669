"""Print median times of bench JSON-line files side by side (device check aid):
``compare_variants.py A.jsonl B.jsonl ...``: one row per (workload, algorithm), one column a file."""

import json
import sys

files = sys.argv[1:]
table: dict[tuple, dict[str, float]] = {}
for f in files:
    for line in open(f):
        r = json.loads(line)
        w = {k: v for k, v in r["workload"].items() if k != "seed"}
        key = (json.dumps(w, sort_keys=True), r["algorithm"] + (f"({r['chosen']})" if "chosen" in r else ""))
        phases = " ".join(f"{k[:5]}={v * 1e3:.2f}" for k, v in r["phases_s"].items())
        table.setdefault(key, {})[f] = (r["median_s"] * 1e3, phases)
print("workload | algorithm | " + " | ".join(files))
for (w, algo), cells in table.items():
    short = " ".join(f"{k}={v}" for k, v in json.loads(w).items() if v not in (0, 0.0) or k == "log2_groups")
    print(f"{short[:60]} | {algo} | " + " | ".join(
        f"{cells[f][0]:.2f} ({cells[f][1]})" if f in cells else "-" for f in files))
