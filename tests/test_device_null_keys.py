"""The device join's null keys, on the CPU (tests/device_null_keys_check.py: NumPy for CuPy, in a
process of its own so that the stand-in reaches no other test)."""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_null_keys_match_nothing_in_the_device_join():
    p = subprocess.run([sys.executable, str(HERE / "device_null_keys_check.py")], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONPATH": str(HERE.parent / "src")})
    assert p.returncode == 0 and "ok" in p.stdout, (p.stdout[-2000:], p.stderr[-4000:])
