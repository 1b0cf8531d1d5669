"""Run by tests/test_device_bookkeeping.py in a process of its own: the device join's handling of null
keys (plan.device_join._join_null_keys: the rows with every key present joined, the others an outer
side's or an anti join's unmatched rows, or with nulls_equal=True joined among themselves) checked on the CPU, with NumPy standing in for CuPy and
the CPU engine for the GPU's join of the rows with keys, against the CPU engine's whole answer.
The GPU's own run of the same cases: tests/test_cuda_device_tables.py (marker gpu)."""

import numpy_as_cupy

numpy_as_cupy.install()  # (first: NumPy as CuPy)

import pyarrow as pa  # noqa: E402

import gpujoin  # noqa: E402
from gpujoin.cuda.table import DeviceTable  # noqa: E402
from gpujoin.plan import device_join  # noqa: E402
from gpujoin.plan.join import JoinStats  # noqa: E402
from gpujoin.testing import assert_tables_equal  # noqa: E402
from null_key_cases import HOWS, cases  # noqa: E402


def cpu_join(lt, rt, on, left_on, right_on, how, suffix, validate, coalesce, algo, dev, radix_bits):
    """_execute_device_join's contract on the CPU engine: no key it is given may hold a null, and
    composite keys pack into 63 bits as the GPU's join packs them (plan.pack_keys)."""
    from gpujoin.plan.pack_keys import pack_keys

    keys = [on] if isinstance(on, str) else list(on or []) + list(left_on or []) + list(right_on or [])
    assert not any(k in t.validity for t in (lt, rt) for k in keys), "a key with a mask reached the join"
    lk, rk = ([on], [on]) if isinstance(on, str) else (list(on or left_on), list(on or right_on))
    if len(lk) > 1:
        pack_keys([[lt[a] for a in lk], [rt[b] for b in rk]], lk)
    out = gpujoin.join(lt.to_arrow(), rt.to_arrow(), on, left_on=left_on, right_on=right_on, how=how, suffix=suffix,
                       validate=validate, coalesce=coalesce, device="cpu")
    return DeviceTable.from_arrow(out), JoinStats(algo, dev, how, lt.num_rows, rt.num_rows)


device_join._execute_device_join = cpu_join
device_join.resolve_device = lambda *a: "cuda"
device_join.resolve_algorithm = lambda *a: "auto"


def main():
    for how in HOWS:
        for coalesce in (None, True, False):
            for nulls_equal in (False, True):
                for lt, rt, on in cases(len(how) * 3 + (coalesce is None) + 2 * bool(coalesce) + nulls_equal):
                    want = gpujoin.join(lt, rt, on, how=how, coalesce=coalesce, nulls_equal=nulls_equal, device="cpu")
                    got, stats = device_join.execute_device_join(DeviceTable.from_arrow(lt), DeviceTable.from_arrow(rt),
                                                                 on, how=how, coalesce=coalesce,
                                                                 nulls_equal=nulls_equal)
                    assert_tables_equal(got.to_arrow(), want)
    # keys near 2^60 beside null slots (read as 0 they had widened the packed key past 63 bits),
    # and a user's column whose suffixed name is a flag column's first choice
    t = 1_700_000_000_000_000_000
    wide = pa.table({"t": pa.array([t, None, t + 1], pa.int64()), "b": pa.array([None, 1, 2], pa.int32()), "v": [1, 2, 3]})
    odd = pa.table({"a": pa.array([1, None, None], pa.int64()), "__null": [7, 8, 9]})
    for lt, rt, on, suffix in ((wide, wide, ["t", "b"], "_right"), (odd, odd, "a", "_0")):
        for how in HOWS:
            want = gpujoin.join(lt, rt, on, how=how, suffix=suffix, nulls_equal=True, device="cpu")
            got, _ = device_join.execute_device_join(DeviceTable.from_arrow(lt), DeviceTable.from_arrow(rt), on,
                                                     how=how, suffix=suffix, nulls_equal=True)
            assert_tables_equal(got.to_arrow(), want)
    print("device null keys: ok")


if __name__ == "__main__":
    main()
