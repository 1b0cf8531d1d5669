"""Run by tests/test_device_bookkeeping.py in a process of its own: the device join's own
bookkeeping (plan.device_join: key checks and promotion, string and binary dictionaries, packed
composite keys, null keys, nulls_equal, the output's layout, types, masks and dictionaries) on
the CPU, NumPy standing in for CuPy and a pair-by-pair matcher for the GPU's (cuda.join.run),
against the CPU engine on random tables: keys of two integer widths, uint8, decimals, dates,
timestamps, strings, binaries, UUIDs, all-null columns (against strings too), composite keys, and keys
compared after a rescale (decimals of two scales, an integer against a decimal, timestamps, times
and durations of two units), or refused where a value would not fit 64 bits rescaled (date32
against date64: refused, as on the host); 10% null keys; every
join type (cross joins too), coalesce setting and nulls_equal.  The GPU's own runs: tests/test_cuda_*.py."""

import sys
import types

import numpy_as_cupy

numpy_as_cupy.install()  # (first: NumPy as CuPy)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

import gpujoin  # noqa: E402
from gpujoin.cuda.table import DeviceTable  # noqa: E402
from gpujoin.plan import device_join  # noqa: E402

HOWS = ("inner", "left", "right", "full", "semi", "anti")


class Matched:
    """cuda.join's JoinOutput, by hand: matched pairs (build row, probe row), then probe-only
    rows, then build-only rows."""

    def __init__(self, bk, pk, bp, pp, pairs, probe_only, build_only):
        self.bk, self.pk, self.bp, self.pp = bk, pk, bp, pp
        self.pairs, self.probe_only, self.build_only = pairs, probe_only, build_only
        self.phases, self.params = {}, {}

    def _side(self, col, build):
        src, parts, valid = (self.bp if build else self.pp)[col], [], []
        if self.pairs is not None:
            parts.append(src[self.pairs[:, 0 if build else 1]])
            valid.append(np.ones(len(self.pairs), np.uint8))
        for rows, mine in ((self.probe_only, not build), (self.build_only, build)):
            if rows is not None:
                parts.append(src[rows] if mine else np.zeros(len(rows), src.dtype))
                valid.append(np.full(len(rows), int(mine), np.uint8))
        v = np.concatenate(valid) if valid else np.zeros(0, np.uint8)
        return (np.concatenate(parts) if parts else src[:0]), (None if v.all() else v)

    def build_column(self, col):
        return self._side(col, True)

    def probe_column(self, col):
        return self._side(col, False)

    def key_column(self):
        parts = [self.pk[self.pairs[:, 1]]] if self.pairs is not None else []
        parts += [self.pk[self.probe_only]] if self.probe_only is not None else []
        parts += [self.bk[self.build_only]] if self.build_only is not None else []
        return np.concatenate(parts) if parts else self.pk[:0]


def run(algorithm, bk, pk, bp, pp, mode, emit_keys=False, radix_bits=None, runs=None):
    """cuda.join.run's contract, pair by pair."""
    assert bk.dtype == pk.dtype, (bk.dtype, pk.dtype)
    b, p = np.nonzero(bk[:, None] == pk[None, :])
    pairs = np.stack([b, p], axis=1).astype(np.int64)
    hit_p, hit_b = np.zeros(len(pk), bool), np.zeros(len(bk), bool)
    hit_p[p], hit_b[b] = True, True
    if mode in ("semi", "anti"):
        return Matched(bk, pk, bp, pp, None, np.flatnonzero(hit_p if mode == "semi" else ~hit_p), None)
    return Matched(bk, pk, bp, pp, pairs, np.flatnonzero(~hit_p) if mode in ("probe_outer", "full") else None,
                   np.flatnonzero(~hit_b) if mode == "full" else None)


stand_in = types.ModuleType("gpujoin.cuda.join")
stand_in.run = run
sys.modules["gpujoin.cuda.join"] = stand_in
device_join.resolve_device = lambda *a: "cuda"
device_join.resolve_algorithm = lambda *a: "smj-tr"  # (auto would sample the keys on the GPU)


def column(rng, kind, n, domain):
    """(left array, right array) of key kind ``kind``, n rows each, values from ``domain``."""
    v, w = rng.integers(0, domain, n), rng.integers(0, domain, n)
    nl, nr = rng.random(n) < 0.1, rng.random(n) < 0.1
    words = np.array(["", "x", "ünï", "GERMANY"] + [f"w{i}" for i in range(domain)])
    blobs = [bytes([i % 256, i // 256]) * 8 for i in range(domain)]
    make = {"int64": lambda x, m, side: pa.array(x * 30 if side else x, pa.int64() if side else pa.int8(), mask=m),
            "uint8": lambda x, m, side: pa.array(x, pa.uint8(), mask=m),
            "decimal": lambda x, m, side: pa.array([int(i) for i in x], pa.decimal128(10 if side else 15, 0),
                                                   mask=m).cast(pa.decimal128(12 if side else 15, 2)),
            "date": lambda x, m, side: pa.array(x.astype(np.int32), mask=m).view(pa.date32()),
            "timestamp": lambda x, m, side: pa.array(x, mask=m).view(pa.timestamp("ms")),
            "string": lambda x, m, side: pa.array(words[x], mask=m),
            "binary": lambda x, m, side: pa.array([blobs[i][:3] for i in x], pa.binary() if side else pa.large_binary(),
                                                  mask=m),
            "uuid": lambda x, m, side: pa.array([blobs[i] for i in x], pa.binary(16), mask=m),
            "scales": lambda x, m, side: pa.array([int(i) for i in x], pa.decimal128(9, 0), mask=m).cast(
                pa.decimal128(12, 3 if side else 2)),
            "units": lambda x, m, side: pa.array(x, mask=m).view(pa.timestamp("us" if side else "ms")),
            "int-decimal": lambda x, m, side: pa.array([int(i) * 100 for i in x], pa.decimal128(12, 0), mask=m).cast(
                pa.decimal128(14, 2)) if side else pa.array(x, pa.int16(), mask=m),
            "times": lambda x, m, side: (pa.array(x * 1000, pa.int64(), mask=m).view(pa.time64("us")) if side
                                         else pa.array(x.astype(np.int32), mask=m).view(pa.time32("ms"))),
            "durations": lambda x, m, side: pa.array(x, mask=m).view(pa.duration("ns" if side else "s")),
            "dates": lambda x, m, side: (pa.array(x * 86_400_000, mask=m).view(pa.date64()) if side
                                         else pa.array(x.astype(np.int32), mask=m).view(pa.date32())),
            "overflow": lambda x, m, side: pa.array([int(i) * 10**15 for i in x], pa.decimal128(18, 0), mask=m)
            if side else pa.array([int(i) for i in x], pa.decimal128(18, 0), mask=m).cast(pa.decimal128(18, 4)),
            "null": lambda x, m, side: pa.nulls(len(x)) if side else pa.array(x, pa.int32(), mask=m),
            "null-left": lambda x, m, side: pa.array(x, pa.int32(), mask=m) if side else pa.nulls(len(x)),
            "null-string": lambda x, m, side: pa.array(words[x], mask=m) if side else pa.nulls(len(x)),
            "string-null": lambda x, m, side: pa.nulls(len(x)) if side else pa.array(words[x], mask=m)}[kind]
    return make(v, nl, False), make(w, nr, True)


def main():
    failures, cases = [], 0
    tally = {"compared": 0, "both refused": 0, "device only": 0, "past 64 bits refused": 0}
    for seed in range(int(sys.argv[1]) if len(sys.argv) > 1 else 240):
        rng = np.random.default_rng(seed)
        kinds = ["int64", "uint8", "decimal", "date", "timestamp", "string", "binary", "uuid", "null", "null-left",
                 "null-string", "string-null", "scales", "units", "int-decimal", "times", "durations", "dates",
                 "overflow"]
        kind = kinds[seed % len(kinds)]
        n, domain = int(rng.integers(0, 40)), int(rng.integers(1, 12))
        a, b = column(rng, kind, n, domain)
        composite = seed % 4 == 0
        left = pa.table({"k": a, "c": pa.array(rng.integers(0, 2, n).astype(np.int32)), "x": np.arange(n)})
        right = pa.table({"k": b, "c": pa.array(rng.integers(0, 2, n).astype(np.int32)), "y": np.arange(n) * 10})
        for how in HOWS + (("cross",) if seed % 5 == 0 else ()):
            coalesce = [None, True, False][int(rng.integers(0, 3))]
            nulls_equal = bool(rng.random() < 0.5)
            on = None if how == "cross" else (["k", "c"] if composite else "k")
            cases += 1
            try:
                want = gpujoin.join(left, right, on, how=how, coalesce=coalesce, nulls_equal=nulls_equal, device="cpu")
            except Exception as e:  # (the host refuses: the device must too)
                want = e
            try:
                got = device_join.execute_device_join(DeviceTable.from_arrow(left), DeviceTable.from_arrow(right), on,
                                                      how=how, coalesce=coalesce, nulls_equal=nulls_equal)[0]
                got = got.to_arrow()
            except (gpujoin.SchemaError, ValueError) as e:
                got = e
            if isinstance(want, Exception) and isinstance(got, Exception):
                tally["both refused"] += 1
                continue
            what = f"seed {seed} {kind} {on} {how} coalesce={coalesce} nulls_equal={nulls_equal}"
            if isinstance(got, Exception):
                if "do not fit 64 bits" in str(got) and kind == "overflow":
                    tally["past 64 bits refused"] += 1
                    continue  # (documented: the host compares them in 128 bits, the GPU in 64)
                failures.append(f"{what}: the device refused: {got}")
            elif isinstance(want, Exception):
                tally["device only"] += 1  # (the device answers where the host refuses: its stored integers compare)
            else:
                tally["compared"] += 1
                numpy_as_cupy.compare(got, want, what, failures)
    numpy_as_cupy.finish(failures, f"device join bookkeeping: {cases} joins ok ({tally})")


if __name__ == "__main__":
    main()
