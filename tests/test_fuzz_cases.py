"""A fixed handful of scripts/fuzz_device.py's randomized cases (skew, heavy and all-equal keys,
int64 extremes, nulls, string and composite keys; every join type and CPU algorithm; group-by
with eleven aggregates; join_where): the CPU engine against DuckDB here, the GPU against the CPU
engine under ``gpu``.  The script runs many more (its seeds print on failure)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
fuzz = pytest.importorskip("fuzz_device")

SEEDS = range(40)


@pytest.mark.parametrize("seed", SEEDS)
def test_cpu_engine_matches_duckdb(duck, seed):
    case = fuzz.join_case(seed, 12)
    if case is not None:
        fuzz.run_join_duckdb(case, duck, seed)
    *case, _ = fuzz.group_by_case(seed, 12)
    fuzz.run_group_by_duckdb(case, duck)
    *case, _ = fuzz.theta_case(seed)
    fuzz.run_theta(case, duck)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS)
def test_gpu_matches_cpu_engine(seed):
    import gpujoin

    if not gpujoin.backend.cuda_available():
        pytest.skip("no usable GPU")
    case = fuzz.join_case(seed, 16)
    if case is not None:
        fuzz.run_join(case)
    *case, _ = fuzz.group_by_case(seed, 16)
    fuzz.run_group_by(case)
    *case, _ = fuzz.theta_case(seed)
    fuzz.run_theta(case)
