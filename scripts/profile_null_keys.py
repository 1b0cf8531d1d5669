"""Where tests/test_cuda_device_tables.py's null-key test spends its time: each case's device join,
its to_arrow and the comparison with the CPU engine's answer timed (tests/null_key_cases.py), and
where a comparison leaves Arrow's sorted path (gpujoin.testing), what differs: the columns' types,
or the rows."""

import sys
import time

sys.path.insert(0, "tests")
import gpujoin  # noqa: E402
from gpujoin import testing  # noqa: E402
from gpujoin.cuda.table import DeviceTable  # noqa: E402
from null_key_cases import cases  # noqa: E402

for how in ("inner", "full"):
    for nulls_equal in (False, True):
        for lt, rt, on in cases(7, 3000, 2000):
            want = gpujoin.join(lt, rt, on, how=how, device="cpu", nulls_equal=nulls_equal)
            for algorithm in ("auto", "phj-tr"):
                t0 = time.perf_counter()
                out = gpujoin.join(DeviceTable.from_arrow(lt), DeviceTable.from_arrow(rt), on, how=how,
                                   algorithm=algorithm, nulls_equal=nulls_equal)
                n = out.num_rows
                t1 = time.perf_counter()
                got = out.to_arrow()
                t2 = time.perf_counter()
                fast = testing._same_when_sorted(got, want, False)
                t3 = time.perf_counter()
                testing.assert_tables_equal(got, want)
                t4 = time.perf_counter()
                print(f"{how:6} {nulls_equal!s:5} {str(on):18} {algorithm:7} {n:9} rows: join {t1 - t0:6.3f} s, "
                      f"to_arrow {t2 - t1:6.3f} s, compare {t4 - t2:6.3f} s (sorted path: {fast})", flush=True)
                if not fast:
                    for a, b in zip(got.schema, want.schema):
                        if a.type != b.type or a.nullable != b.nullable:
                            print(f"    {a} against {b}")
