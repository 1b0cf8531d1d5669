"""The `gpujoin dist` jobs end to end on a GPU machine (device_check.sh dist-cli): ``make DIR``
writes a Parquet dataset (three files of several row groups) and a second table; after
`mpirun -n P gpujoin dist join|group-by ... -o DIR/<job>`, ``check DIR`` compares each job's
part files with the CPU engine's answer over all the rows.

    python3 scripts/dist_cli_check.py make DIR
    python3 scripts/dist_cli_check.py check DIR
"""

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

import gpujoin
from gpujoin.testing import assert_tables_equal

AGGS = dict(s=("v", "sum"), u=("w", "n_unique"), n=(None, "size"), hi=("w", "max"), m=("v", "mean"))


def make(root: Path) -> None:
    rng = np.random.default_rng(4)
    (root / "T").mkdir(parents=True, exist_ok=True)
    for i in range(3):
        n = 200_000
        pq.write_table(pa.table({"k": pa.array(rng.integers(0, 30_000, n), mask=rng.random(n) < 0.02),  # null keys
                                 "v": rng.integers(-50, 50, n),
                                 "g": pa.array(rng.integers(0, 30_000, n), mask=rng.random(n) < 0.05),
                                 "w": pa.array([f"s{x}" for x in rng.integers(0, 90, n)], mask=rng.random(n) < 0.1)}),
                       root / "T" / f"p{i}.parquet", row_group_size=40_000)
    pq.write_table(pa.table({"k": rng.integers(0, 40_000, 100_000), "b": rng.random(100_000)}), root / "R.parquet",
                   row_group_size=30_000)


def check(root: Path) -> None:
    t = ds.dataset(root / "T").to_table()
    checks = {"group_by": lambda: gpujoin.group_by(t, "g", device="cpu").agg(**AGGS),  # (null keys: a group)
              "join": lambda: gpujoin.join(t, pq.read_table(root / "R.parquet"), "k", how="left", device="cpu")}
    for job, want in checks.items():
        parts = sorted((root / job).glob("part-*.parquet"))
        got = ds.dataset(parts).to_table()
        assert_tables_equal(got, want())
        print(f"{job}: {len(parts)} part files, {got.num_rows:,} rows: equal to the CPU engine's", flush=True)


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](Path(sys.argv[2]))
