"""Joins whose keys hold nulls, for the device join's tests (tests/test_cuda_device_tables.py on the
GPU, tests/device_null_keys_check.py on the CPU): composite keys (a int64, b int32, d date32) with
nulls in a and b, a string key with nulls on both sides, and a right side of null keys only."""

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HOWS = ("inner", "left", "right", "full", "semi", "anti")


def table(rng, n: int, domain: int) -> pa.Table:
    # (50 words: the string key's join stays near 10^5 rows at 3000 x 2000)
    words = np.array(["", "x", "GERMANY", "ünï", "a" * 40] + [f"w{i}" for i in range(45)])
    return pa.table({"a": pa.array(rng.integers(-domain, domain, n), pa.int64()),
                     "b": pa.array(rng.integers(0, 3, n).astype(np.int32)),
                     "d": pa.array(rng.integers(8000, 8003, n).astype(np.int32)).view(pa.date32()),
                     "m": pa.array([Decimal(int(v)).scaleb(-2) for v in rng.integers(-10**6, 10**6, n)],
                                   pa.decimal128(15, 2)),
                     "s": pa.array(words[rng.integers(0, words.size, n)], mask=rng.random(n) < 0.1)})


def cases(seed: int, nl: int = 300, nr: int = 200) -> list[tuple[pa.Table, pa.Table, object]]:
    """(left, right, on) of one seed: on "a", on ["a", "b", "d"], on "s", and on "a" against a
    right side whose keys are all null."""
    rng = np.random.default_rng(seed)
    left, right = table(rng, nl, 40), table(rng, nr, 40).rename_columns(["a", "b", "d", "m2", "s2"])

    def nullify(t, c, p):
        return t.set_column(t.column_names.index(c), c, pc.if_else(pa.array(rng.random(t.num_rows) < p),
                                                                   pa.scalar(None, t[c].type), t[c]))

    left, right = nullify(nullify(left, "a", 0.1), "b", 0.05), nullify(right, "a", 0.2)
    right = right.append_column("s", right["s2"])
    return [(left, right, on) for on in ("a", ["a", "b", "d"], "s")] + [(left, nullify(right, "a", 1.0), "a")]
