"""algorithm="auto" against the fastest algorithm on every measured GPU workload.

Reads benchmark records (JSON lines from `gpujoin bench join|group-by --device cuda --algorithm
all,auto`): per workload, auto's own run (its statistics included) and the algorithm it chose,
both against the fastest of the explicitly run algorithms.  Records without an auto run are
skipped.

usage: python3 scripts/auto_vs_measured.py RECORDS.jsonl [...]   (prints a Markdown table)
"""

import json
import sys
from collections import defaultdict

DEFAULTS = {"join": {"match_ratio": 1.0, "zipf": 0.0, "distinct_keys": 0, "payloads": 1, "key_bytes": 4,
                     "payload_bytes": 4},
            "group-by": {"zipf": 0.0, "values": 2, "key_bytes": 4}}


def main(paths):
    runs = defaultdict(dict)
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            if r["engine"] != "gpujoin" or r["device"] == "cpu":
                continue
            key = (r["benchmark"], json.dumps({k: v for k, v in r["workload"].items() if k != "seed"}))
            name = "auto" if r["algorithm"] == "auto" else r["algorithm"]
            runs[key][name] = (r["median_s"] * 1e3, r.get("chosen"))
    print("| workload | auto chose | that algorithm's run | auto's run | fastest | its run | auto / fastest |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    total = misses = worst_choice = 0
    for (kind, wj), algos in runs.items():
        if "auto" not in algos or len(algos) < 2:
            continue
        auto_ms, chosen = algos.pop("auto")
        w = json.loads(wj)
        best = min(algos, key=lambda a: algos[a][0])
        ratio = auto_ms / algos[best][0]
        total += 1
        misses += ratio > 1.10
        worst_choice = max(worst_choice, algos[chosen][0] / algos[best][0])
        desc = " ".join(f"{k}={v}" for k, v in w.items() if k.startswith("log2") or v != DEFAULTS[kind].get(k))
        mark = "**" if ratio > 1.10 else ""
        print(f"| {kind} {desc} | {chosen} | {algos[chosen][0]:.2f} ms | {auto_ms:.2f} ms | {best} | "
              f"{algos[best][0]:.2f} ms | {mark}{ratio:.2f}{mark} |")
    print(f"\n{total} workloads; auto's own run more than 10% over the fastest on {misses}; the algorithm it "
          f"chose, timed on its own, at most {worst_choice - 1:.1%} over the fastest.")


if __name__ == "__main__":
    main(sys.argv[1:])
