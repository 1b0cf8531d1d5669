"""Run by tests/test_device_bookkeeping.py in a process of its own: the device group-by's own
bookkeeping (plan.device_groupby: key checks, packed composite and nullable keys, string and
binary keys, string min and max by rank, the aggregates' refusals, the output's types and masks)
on the CPU, NumPy standing in for CuPy and a NumPy group-by for the GPU's (cuda.groupby.run,
cuda.groupby.distinct.count_distinct), against the CPU engine on random tables.  The GPU's own
runs: tests/test_cuda_groupby.py, tests/test_cuda_device_tables.py."""

import sys
import types

import numpy_as_cupy

numpy_as_cupy.install()  # (first: NumPy as CuPy)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

import gpujoin  # noqa: E402
from gpujoin.cuda import groupby as gpu_groupby  # noqa: E402
from gpujoin.cuda.groupby.common import GroupByOutput  # noqa: E402
from gpujoin.cuda.table import DeviceTable  # noqa: E402
from gpujoin.plan import device_groupby  # noqa: E402


def run(algorithm, keys, inputs, radix_bits=None, groups_estimate=None, table=None):
    """cuda.groupby.run's contract with NumPy: each input's accumulators per distinct key."""
    out_keys, inv = np.unique(keys, return_inverse=True)
    g, columns = out_keys.size, []
    for inp in inputs:
        rows = np.ones(keys.size, bool) if inp.values is None or inp.valid is None else inp.valid.astype(bool)
        acc = {}
        for name in inp.accumulators:
            if name == "count":
                acc[name] = np.bincount(inv[rows], minlength=g).astype(np.int64)
                continue
            v = inp.values[rows]
            if name in ("sum", "sum_lo"):
                if v.dtype == np.int64:
                    v = v >> 32 if name == "sum" else v & 0xFFFFFFFF
                total = np.zeros(g, np.float64 if v.dtype.kind == "f" else np.int64)
                np.add.at(total, inv[rows], v)
                acc[name] = total
            else:
                info = np.finfo(v.dtype) if v.dtype.kind == "f" else np.iinfo(v.dtype)
                ext = np.full(g, info.max if name == "min" else info.min, v.dtype)
                (np.minimum if name == "min" else np.maximum).at(ext, inv[rows], v)
                acc[name] = ext
        columns.append(acc)
    return GroupByOutput(out_keys.astype(keys.dtype), columns)


def count_distinct(keys, values, valid, group_keys):
    """cuda.groupby.distinct's contract: each group's distinct present values (floats as values:
    -0.0 is 0.0, every NaN one)."""
    rows = np.ones(keys.size, bool) if valid is None else valid.astype(bool)
    return np.array([np.unique(values[rows & (keys == k)]).size for k in group_keys], np.int64)


gpu_groupby.run = run
distinct = types.ModuleType("gpujoin.cuda.groupby.distinct")
distinct.count_distinct = count_distinct
sys.modules["gpujoin.cuda.groupby.distinct"] = distinct
device_groupby.resolve_device = lambda *a: "cuda"


def table(rng, n, kind):
    """A random table: key ``k`` of ``kind`` with nulls, a second key ``c``, and value columns."""
    v = rng.integers(0, 6, n)
    mask = rng.random(n) < 0.15
    blobs = [bytes([i, 255 - i]) * 8 for i in range(8)]
    k = {"int": pa.array(v, pa.int64(), mask=mask), "int8": pa.array(v, pa.int8(), mask=mask),
         "string": pa.array(np.array(["b", "a", "ünï", "", "w10", "w9"])[v], mask=mask),
         "binary": pa.array([blobs[i] for i in v], pa.binary(16), mask=mask),
         "date": pa.array(v.astype(np.int32), mask=mask).view(pa.date32())}[kind]
    words = np.array(["w9", "w10", "x", "", "ünï"])
    return pa.table({"k": k, "c": pa.array(rng.integers(0, 2, n).astype(np.int32)),
                     "i": pa.array(rng.integers(-50, 50, n), mask=rng.random(n) < 0.1),
                     "f": pa.array(rng.random(n), mask=rng.random(n) < 0.1),
                     "s": pa.array(words[rng.integers(0, 5, n)], mask=rng.random(n) < 0.2),
                     "d": pa.array(rng.integers(0, 9, n).astype(np.int32), mask=rng.random(n) < 0.1).view(pa.date32()),
                     "m": pa.array([int(x) for x in rng.integers(-999, 999, n)], pa.decimal128(9, 0)).cast(
                         pa.decimal128(12, 2)),
                     "w": pa.array([int(x) for x in rng.integers(-10**6, 10**6, n)], pa.decimal128(9, 0)).cast(
                         pa.decimal128(38, 3))})


def main():
    functions = ["count", "sum", "mean", "min", "max", "size", "n_unique"]
    failures, tally = [], {"compared": 0, "both refused": 0}
    for seed in range(int(sys.argv[1]) if len(sys.argv) > 1 else 150):
        rng = np.random.default_rng(seed)
        kind = ["int", "int8", "string", "binary", "date"][seed % 5]
        t = table(rng, int(rng.integers(0, 60)), kind)
        by = ["k", "c"] if seed % 3 == 0 else ["k"]
        specs = [(f"a{j}", str(rng.choice(["i", "f", "s", "d", "m", "w"])), str(rng.choice(functions)))
                 for j in range(int(rng.integers(1, 4)))]
        aggs = {name: (None if fn == "size" else col, fn) for name, col, fn in specs}
        what = f"seed {seed} {kind} by {by}: {aggs}"
        try:
            want = gpujoin.group_by(t, by, device="cpu").agg(**aggs)
        except gpujoin.InvalidOperationError as e:
            want = e
        try:
            got = device_groupby.execute_device_group_by(DeviceTable.from_arrow(t), by,
                                                         [(n, c, f) for n, (c, f) in aggs.items()], "hgb")[0]
            got = got.to_arrow()
        except gpujoin.InvalidOperationError as e:
            got = e
        if isinstance(want, Exception) or isinstance(got, Exception):
            if isinstance(want, Exception) and isinstance(got, Exception):
                tally["both refused"] += 1
            else:
                failures.append(f"{what}: host {want!r:.200} against device {got!r:.200}")
            continue
        tally["compared"] += 1
        numpy_as_cupy.compare(got, want, what, failures, rel=1e-9)
    numpy_as_cupy.finish(failures, f"device group-by bookkeeping: ok ({tally})")


if __name__ == "__main__":
    main()
