import os

import pytest
from hypothesis import HealthCheck, settings

# GPUJOIN_SPREAD_GPUS=G: xdist worker gwN sees GPU N mod G alone (set before CuPy starts CUDA), so
# that the single-GPU test files of a machine of G GPUs run on all of them
_spread, _worker = os.environ.get("GPUJOIN_SPREAD_GPUS"), os.environ.get("PYTEST_XDIST_WORKER", "")
if _spread and _worker.startswith("gw") and "CUDA_VISIBLE_DEVICES" not in os.environ:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(int(_worker[2:]) % int(_spread))

# xdist's workers share the cores: Numba's parallel kernels each started a thread a core in every
# worker (14 workers x 16 threads on a 16-core GPU host), and a 60-row join took 2-3 s instead of 0.1
if _worker:
    os.environ.setdefault("NUMBA_NUM_THREADS", str(max(1, (os.cpu_count() or 1)
                                                      // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))))

settings.register_profile("ci", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=400, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="module")
def duck():
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    yield con
    con.close()


_times = os.environ.get("GPUJOIN_TEST_TIMES")


def pytest_runtest_logreport(report):
    """GPUJOIN_TEST_TIMES=FILE: each test's call time appended as it ends (seconds, node id), by
    the controlling process only, so that a file cut off by its time limit still shows its slow
    tests (pytest's --durations prints only at the end)."""
    if _times and (report.when == "call" or report.failed) and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(_times, "a") as f:  # (a setup or teardown error too)
            f.write(f"{report.duration:.2f} {report.outcome} {report.nodeid} {report.when}\n")


_pool_log = os.environ.get("GPUJOIN_POOL_LOG")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """GPUJOIN_POOL_LOG=DIR: after each test, CuPy's pool bytes still in use (and after a
    garbage collection) written to DIR/pool-WORKER.txt when any remain: which tests leave device
    memory behind that a later test's memory_limit then counts."""
    import sys

    cp = sys.modules.get("cupy")
    if not _pool_log or cp is None:
        return
    import gc

    pool = cp.get_default_memory_pool()
    used, total = pool.used_bytes(), pool.total_bytes()
    if used:
        gc.collect()
        with open(os.path.join(_pool_log, f"pool-{_worker or 'main'}.txt"), "a") as f:
            f.write(f"{used} {pool.used_bytes()} {total} {pool.total_bytes()} {item.nodeid}\n")
