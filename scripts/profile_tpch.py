"""Where the TPC-H job's time goes: each query once under cProfile after a warm-up, the functions
with the most own time first (device check aid: ``profile_tpch.py SF DEVICE [QUERIES]``)."""

import cProfile
import pstats
import sys
import time

from gpujoin import read_parquet
from gpujoin.tpch.data import ensure_data
from gpujoin.tpch.queries import QUERIES, TABLES_USED, Query

sf, device = float(sys.argv[1]), sys.argv[2]
queries = sys.argv[3].split(",") if len(sys.argv) > 3 else list(QUERIES)
data = ensure_data(sf)
tables = {t: read_parquet(str(data / f"{t}.parquet")) for q in queries for t in TABLES_USED[q]}
q = Query(device)
for name in queries:
    QUERIES[name](tables, q)
    t0 = time.perf_counter()
    prof = cProfile.Profile()
    prof.runcall(QUERIES[name], tables, q)
    print(f"=== Q{name}: {(time.perf_counter() - t0) * 1e3:.0f} ms (profiled)")
    pstats.Stats(prof).sort_stats("tottime").print_stats(10)
