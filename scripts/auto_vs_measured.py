"""What algorithm="auto" picks on every measured GPU workload, against the fastest measured one.

For each workload of the benchmark records (JSON lines from `gpujoin bench join|group-by
--device cuda --algorithm all`), build the statistics auto would estimate (rows, groups drawn,
the Zipf top key's share, match ratio, widths), run the planner's rule (gpujoin.plan.auto) with
ANCHORS.md's H200 constants, and look up the measured time of its choice.

usage: python3 scripts/auto_vs_measured.py RECORDS.jsonl [...]   (prints a Markdown table)
"""

import json
import sys
from collections import defaultdict

import numpy as np

from gpujoin.plan import auto, cost, stats


def top_share(domain: int, z: float) -> float:
    if z == 0:
        return 1.0 / domain
    k = np.arange(1, domain + 1, dtype=np.float64)
    return float(1.0 / np.sum(k ** -z))


def estimate(kind: str, w: dict, groups: int):
    if kind == "group-by":
        values = [4] * w["values"]
        return stats.GroupByEstimate(1 << w["log2_rows"], groups, w["key_bytes"], values, 4 * len(values),
                                     top_share(1 << w["log2_groups"], w["zipf"]))
    nr, ns = 1 << w["log2_r"], 1 << w["log2_s"]
    widths = [w["payload_bytes"]] * w["payloads"]
    return stats.JoinEstimate(nr, ns, w["key_bytes"], widths, widths, w["match_ratio"], top_share(nr, w["zipf"]))


def main(paths):
    runs = defaultdict(dict)
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            if r["engine"] != "gpujoin" or "H200" not in r["device"]:
                continue
            key = (r["benchmark"], json.dumps({k: v for k, v in r["workload"].items() if k != "seed"}, sort_keys=True))
            runs[key][r["algorithm"]] = (r["median_s"], r["output_rows"])
    dev = cost.H200_ANCHORS
    print("| workload | auto picks | its time | fastest | its time | auto / fastest |")
    print("| --- | --- | --- | --- | --- | --- |")
    misses = 0
    for (kind, wj), algos in runs.items():
        w = json.loads(wj)
        if len(algos) < 2:
            continue
        groups = next(iter(algos.values()))[1] if kind == "group-by" else 0
        est = estimate(kind, w, groups)
        choice = (auto.choose_group_by(est, dev) if kind == "group-by" else auto.choose_join(est, dev)).algorithm
        best = min(algos, key=lambda a: algos[a][0])
        ratio = algos[choice][0] / algos[best][0]
        misses += ratio > 1.10
        desc = " ".join(f"{k}={v}" for k, v in w.items() if v not in (0, 0.0) or k == "zipf")
        flag = " **miss**" if ratio > 1.10 else ""
        print(f"| {kind} {desc} | {choice} | {algos[choice][0] * 1e3:.2f} ms | {best} | {algos[best][0] * 1e3:.2f} ms "
              f"| {ratio:.2f}{flag} |")
    print(f"\n{misses} of {sum(len(a) > 1 for a in runs.values())} workloads more than 10% off the fastest")


if __name__ == "__main__":
    main(sys.argv[1:])
