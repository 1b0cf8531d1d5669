"""DeviceTable bookkeeping on the CPU, NumPy standing in for CuPy, each check in a process of its
own so that the stand-in reaches no other test: the device join's null keys
(tests/device_null_keys_check.py), column types: binaries, all-null columns, keys of different
units (tests/device_types_check.py), and the device join's bookkeeping against the CPU engine on
random tables, a pair-by-pair matcher standing in for the GPU's (tests/device_join_check.py), and
the device group-by's the same way (tests/device_groupby_check.py)."""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def _check(script: str):
    p = subprocess.run([sys.executable, str(HERE / script)], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONPATH": str(HERE.parent / "src")})
    assert p.returncode == 0 and "ok" in p.stdout, (p.stdout[-2000:], p.stderr[-4000:])


def test_null_keys_match_nothing_in_the_device_join():
    _check("device_null_keys_check.py")


def test_device_table_column_types():
    _check("device_types_check.py")


def test_device_join_bookkeeping_matches_the_cpu_engine():
    _check("device_join_check.py")


def test_device_group_by_bookkeeping_matches_the_cpu_engine():
    _check("device_groupby_check.py")
