"""TPC-H Q18 wholly on the GPU (DeviceQuery: tables in GPU memory) and with its group-by on the
CPU engine (host Arrow tables, joins on the GPU), and lineitem's GROUP BY l_orderkey alone from
Arrow tables on each device and from a DeviceTable, at scale factor SF (device check aid; issue 4).

usage: python3 scripts/tpch_groupby.py SF OUT.jsonl
"""

import json
import statistics
import sys
import time

import gpujoin
from gpujoin.tpch.data import ensure_data
from gpujoin.tpch.runner import run

sf, out = float(sys.argv[1]), sys.argv[2]
data = ensure_data(sf, progress=False)
records = []
for gb_device in ("cuda", "cpu"):
    (r,) = run(data, ["18"], device="cuda", group_by_device=gb_device, repeat=3)
    records.append({"what": "q18", "sf": sf, "joins": "cuda", "group_by": gb_device,
                    "engine": "DeviceQuery" if gb_device == "cuda" else "Query (Arrow)", "gpujoin_s": r.gpujoin_s,
                    "duckdb_s": r.duckdb_s, "validated": r.validated, "rows": r.rows})
    print(f"Q18 SF{sf:g} group-by on {gb_device}: {r.gpujoin_s * 1e3:.1f} ms (DuckDB {r.duckdb_s * 1e3:.1f} ms), "
          f"validated={r.validated}", flush=True)
li = gpujoin.read_parquet(str(data / "lineitem.parquet"), columns=["l_orderkey", "l_quantity"])
for device in ("cuda", "cpu"):
    times = []
    for i in range(4):
        gb = gpujoin.group_by(li, "l_orderkey", device=device)
        t0 = time.perf_counter()
        res = gb.agg(qty=("l_quantity", "sum"))
        times.append(time.perf_counter() - t0)
    med = statistics.median(times[1:])
    records.append({"what": "lineitem group by l_orderkey, sum(l_quantity)", "sf": sf, "device": device,
                    "median_s": med, "rows": li.num_rows, "groups": res.num_rows, "phases_s": gb.stats.phases})
    print(f"lineitem ({li.num_rows:,} rows) GROUP BY l_orderkey on {device}: {med * 1e3:.1f} ms, "
          f"{res.num_rows:,} groups, phases {({k: round(v * 1e3, 1) for k, v in gb.stats.phases.items()})}", flush=True)
from gpujoin.cuda.table import DeviceTable  # noqa: E402

dli = DeviceTable.from_arrow(li)
times = []
for i in range(6):
    gb = gpujoin.group_by(dli, "l_orderkey")
    t0 = time.perf_counter()
    res = gb.agg(qty=("l_quantity", "sum"))
    times.append(time.perf_counter() - t0)
med = statistics.median(times[1:])
records.append({"what": "lineitem group by l_orderkey, sum(l_quantity)", "sf": sf, "device": "cuda (DeviceTable)",
                "median_s": med, "rows": li.num_rows, "groups": res.num_rows, "phases_s": gb.stats.phases,
                "algorithm": gb.stats.algorithm})
print(f"the same from a DeviceTable: {med * 1e3:.1f} ms ({gb.stats.algorithm}), phases "
      f"{({k: round(v * 1e3, 2) for k, v in gb.stats.phases.items()})}", flush=True)
with open(out, "a") as f:
    f.writelines(json.dumps(r) + "\n" for r in records)
