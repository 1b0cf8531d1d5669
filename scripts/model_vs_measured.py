"""Paper 003 Figs. 10, 16 and 19 redone for one GPU: each model's predicted time difference next
to the measured one, from benchmark records; and Table 2 for that GPU.

usage: python3 scripts/model_vs_measured.py CALIBRATION.json OUT.png JOIN.jsonl... -- GROUPBY.jsonl...
"""

import json
import math
import sys
from collections import defaultdict

from gpujoin.plan import cost


def load(paths):
    runs = defaultdict(dict)
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            if r["engine"] == "gpujoin":
                key = json.dumps({k: v for k, v in r["workload"].items() if k != "seed"}, sort_keys=True)
                runs[key][r["algorithm"]] = r["median_s"]
    return [(json.loads(k), v) for k, v in runs.items()]


def main(cal_path, out, join_paths, gb_paths):
    cal = next(iter(json.load(open(cal_path)).values()))
    measured_caches = "l1_bytes_per_s" in cal  # older files hold gather rates, not cache bandwidths
    dev = cost.DeviceModel(cal["name"], cal["b_g"], cal["ratio_random"],
                           cal["ratio_l1"] if measured_caches else cost.A100.ratio_l1,
                           cal["ratio_l2"] if measured_caches else cost.A100.ratio_l2, l2_bytes=cal["l2_bytes"],
                           source="gpujoin calibrate" + ("" if measured_caches else ", cache ratios of the paper"))
    # Fig. 10: PHJ-UR - PHJ-TR against match ratio (two 4-byte payloads a side, 2^27 x 2^27)
    fig10 = []
    for w, t in load(join_paths):
        if w["payloads"] == 2 and w["zipf"] == 0 and w["log2_r"] == 27 and w["key_bytes"] == 4 \
                and not w["distinct_keys"] and w["payload_bytes"] == 4 and {"phj-ur", "phj-tr"} <= set(t):
            n, m, p = 2.0**27, w["match_ratio"] * 2.0**27, 2
            per_side = p * cost.phj_ur_gather_cost(m, dev) - (
                (p - 1) * cost.phj_tr_cost(n, 0, dev) + p * cost.phj_tr_cost(0, m, dev, free_partition=True))
            fig10.append((w["match_ratio"], 2 * per_side * 1e3, (t["phj-ur"] - t["phj-tr"]) * 1e3))
    # Fig. 16: SGB-UR - SGB-TR against g; Fig. 19: SGB-TR - SGB-DE-TR against g (two 4-byte columns)
    fig16, fig19 = [], defaultdict(list)
    for w, t in load(gb_paths):
        if w["zipf"] != 0 or not {"sgb-ur", "sgb-tr", "sgb-de-tr"} <= set(t):
            continue
        n, g, k, p = 2.0 ** w["log2_rows"], 2.0 ** w["log2_groups"], w["key_bytes"], w["values"]
        # our radix sort takes the key range's bits: the workload's 4-byte keys are dense (log2 g
        # bits), its 8-byte keys multiples of 2^31 (31 + log2 g bits)
        bits = w["log2_groups"] + (31 if k == 8 else 0)
        passes = max(1, math.ceil(bits / 8))
        sort = (k * n + passes * 2 * (k + 4) * n) / dev.b_g
        if k == 4:
            model16 = p * cost.sgb_permute_cost(n, g, dev) - (p - 1) * sort
            fig16.append((w["log2_groups"], model16 * 1e3, (t["sgb-ur"] - t["sgb-tr"]) * 1e3))
        # model (c) as SGB-DE-TR runs (paper 003 §2.5): the first column sorted on the key in both
        enc_sort = cost.sort_encoded_cost(n, g, 1, k, dev) - cost.encoding_cost(n, g, dev, k)
        model19 = (p - 1) * (sort - enc_sort) - cost.encoding_cost(n, g, dev, k)
        fig19[k].append((w["log2_groups"], model19 * 1e3, (t["sgb-tr"] - t["sgb-de-tr"]) * 1e3))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = [(ax[0], sorted(fig10), "match ratio", "PHJ-UR - PHJ-TR (ms)", "Fig. 10: model (b)", False)]
    panels.append((ax[1], sorted(fig16), "log2 g", "SGB-UR - SGB-TR (ms)", "Fig. 16: model (a)", False))
    for a, rows, xl, yl, title, _ in panels:
        xs = [r[0] for r in rows]
        a.plot(xs, [r[1] for r in rows], "o--", label="model")
        a.plot(xs, [r[2] for r in rows], "s-", label="measured")
        a.axhline(0, color="grey", lw=0.5)
        a.set(xlabel=xl, ylabel=yl, title=title)
        a.legend()
    for k, style in ((4, "o"), (8, "s")):
        rows = sorted(fig19[k])
        xs = [r[0] for r in rows]
        ax[2].plot(xs, [r[1] for r in rows], style + "--", label=f"model, {k}-byte keys")
        ax[2].plot(xs, [r[2] for r in rows], style + "-", label=f"measured, {k}-byte keys")
    ax[2].axhline(0, color="grey", lw=0.5)
    ax[2].set(xlabel="log2 g", ylabel="SGB-TR - SGB-DE-TR (ms)", title="Fig. 19: model (c)")
    ax[2].legend(fontsize=8)
    fig.suptitle(f"{dev.name}: B_G {dev.b_g / 1e9:,.0f} GB/s, B_G/B_R {dev.ratio_random:.1f} (gpujoin calibrate)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    for title, rows in (("Fig. 10", sorted(fig10)), ("Fig. 16", sorted(fig16)), ("Fig. 19, 4-byte keys", sorted(fig19[4])),
                        ("Fig. 19, 8-byte keys", sorted(fig19[8]))):
        print(title + ": " + "; ".join(f"{x:g}: model {m:.2f}, measured {y:.2f}" for x, m, y in rows))
    t2 = cost.table2(dev)
    for k in (4, 8):
        runs, start = [], 0
        col = t2[k]
        for i in range(1, len(col) + 1):
            if i == len(col) or col[i][1] != col[start][1]:
                runs.append(f"2^{col[start][0]}-2^{col[i - 1][0]}: {col[start][1] or 'never'}")
                start = i
        print(f"Table 2, {k}-byte keys: " + ", ".join(runs))


if __name__ == "__main__":
    args = sys.argv[1:]
    cut = args.index("--")
    main(args[0], args[1], args[2:cut], args[cut + 1:])
