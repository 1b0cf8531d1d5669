"""Where tests/test_cuda_device_tables.py's null-key test spends its time: each case's device join,
its to_arrow and the comparison with the CPU engine's answer timed (tests/null_key_cases.py)."""

import sys
import time

sys.path.insert(0, "tests")
import gpujoin  # noqa: E402
from gpujoin.cuda.table import DeviceTable  # noqa: E402
from gpujoin.testing import assert_tables_equal  # noqa: E402
from null_key_cases import cases  # noqa: E402

for how in ("inner", "full"):
    for lt, rt, on in cases(7, 3000, 2000):
        want = gpujoin.join(lt, rt, on, how=how, device="cpu")
        for algorithm in ("auto", "phj-tr"):
            t0 = time.perf_counter()
            out = gpujoin.join(DeviceTable.from_arrow(lt), DeviceTable.from_arrow(rt), on, how=how, algorithm=algorithm)
            n = out.num_rows
            t1 = time.perf_counter()
            got = out.to_arrow()
            t2 = time.perf_counter()
            assert_tables_equal(got, want)
            t3 = time.perf_counter()
            print(f"{how:6} {str(on):18} {algorithm:7} {n:9} rows: join {t1 - t0:6.3f} s, to_arrow {t2 - t1:6.3f} s, "
                  f"compare {t3 - t2:6.3f} s", flush=True)
