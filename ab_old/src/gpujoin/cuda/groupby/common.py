"""What every GPU group-by algorithm shares: aggregate inputs, their accumulators, the result.

An aggregate input is one value column (int32, int64, float32 or float64; or none, to count
rows) with optional validity, and the accumulators it needs among count, sum, min and max.
Accumulators are u64 slots, one row of g slots each (``kernels/groupby.cu`` explains the
encodings); :func:`decode` turns them back into typed arrays.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field

import cupy as cp
import numpy as np

from ..primitives import key_type
from ..runtime import device_properties, kernel

#: Accumulators in kernel order, and their flag bits.
ACCUMULATORS = ("count", "sum", "sum_lo", "min", "max")
_FLAG = {name: 1 << i for i, name in enumerate(ACCUMULATORS)}
_TYPE = {np.dtype(np.int32): 0, np.dtype(np.int64): 1, np.dtype(np.float32): 2, np.dtype(np.float64): 3}
_NONE = 4
DESC_WORDS = 4
MAXC = 2  # aggregate columns per hgb_aggregate launch (groupby.cu)


@dataclass(eq=False)
class AggInput:
    """One column to aggregate per group.

    values : int32, int64, float32 or float64 (n,) on the device, or None to count rows
    valid : uint8 (n,) (1 where present) or None
    ops : subset of ("count", "sum", "min", "max"); an int64 sum also keeps "sum_lo"
    """

    values: cp.ndarray | None
    valid: cp.ndarray | None
    ops: tuple[str, ...]

    def __post_init__(self):
        if self.values is not None and self.values.dtype not in _TYPE:
            raise TypeError(f"GPU aggregates take int32, int64, float32 or float64 values, got {self.values.dtype}")
        bad = set(self.ops) - {"count", "sum", "min", "max"}
        if bad:
            raise ValueError(f"unknown accumulators {sorted(bad)}; valid: count, sum, min, max")

    @property
    def accumulators(self) -> tuple[str, ...]:
        wanted = set(self.ops) if self.values is not None else {"count"}
        if "sum" in wanted and self.values.dtype == np.int64:
            wanted.add("sum_lo")
        return tuple(a for a in ACCUMULATORS if a in wanted)

    @property
    def type_code(self) -> int:
        return _NONE if self.values is None else _TYPE[self.values.dtype]

    @property
    def flags(self) -> int:
        return sum(_FLAG[a] for a in self.accumulators)


#: GPUJOIN_GROUPBY_GENERIC=1: only the generic kernels (to measure what specialization gains)
GENERIC_ONLY = os.environ.get("GPUJOIN_GROUPBY_GENERIC") == "1"


def column_spec(inputs: list[AggInput]) -> int:
    """The compile-time column specialization of the group-by kernels for ``inputs``
    (kernels.GROUPBY_SPECS: type | flags << 8 when every input has values of one type, the same
    accumulators and no validity, and that combination has kernels; else -1, the generic ones)."""
    from ..kernels import GROUPBY_SPECS

    if GENERIC_ONLY:
        return -1
    specs = {inp.type_code | inp.flags << 8 if inp.values is not None and inp.valid is None else -1
             for inp in inputs}
    spec = specs.pop() if len(specs) == 1 else -1
    return spec if spec in GROUPBY_SPECS else -1


@dataclass
class GroupByOutput:
    """A GPU group-by's result: ``keys`` (g,) and, per input, its accumulators by name
    (count int64; sum int64 or float64; sum_lo int64; min and max in the values' dtype;
    a group with count 0 has meaningless sum, min and max)."""

    keys: cp.ndarray
    columns: list[dict[str, cp.ndarray]]
    phases: dict[str, float] = field(default_factory=dict)
    params: dict = field(default_factory=dict)

    @property
    def num_groups(self) -> int:
        return int(self.keys.size)


def allocate(inputs: list[AggInput], groups: int) -> list[cp.ndarray]:
    """Each input's accumulators, (accumulators, groups) u64 at their identities."""
    accs = []
    for inp in inputs:
        a = cp.zeros((len(inp.accumulators), groups), cp.uint64)
        if "min" in inp.accumulators:
            a[inp.accumulators.index("min")] = np.uint64(0xFFFFFFFFFFFFFFFF)
        accs.append(a)
    return accs


def descriptors(inputs: list[AggInput], accs: list[cp.ndarray], smem_slots: int = 0, smem_base: int = 0
                ) -> cp.ndarray:
    """The kernels' column descriptors (DESC_WORDS u64 per input); with ``smem_slots`` (even),
    the inputs' shared-memory accumulators laid out one after another from byte ``smem_base``."""
    words, offset = [], smem_base
    for inp, a in zip(inputs, accs):
        meta = inp.type_code | (inp.flags << 8) | (offset << 32)
        words += [_addr(inp.values), _addr(inp.valid), meta, a.data.ptr]
        offset += slot_bytes([inp]) * smem_slots
    return cp.asarray(np.array(words, dtype=np.uint64))


def slot_bytes(inputs: list[AggInput]) -> int:
    """Shared-memory bytes of one group's accumulators: 4 for counts and for min/max of 4-byte
    values (32-bit shared atomics), 8 for the others (groupby.cu: narrow_acc)."""
    total = 0
    for inp in inputs:
        narrow = inp.values is None or inp.values.dtype.itemsize == 4
        total += sum(4 if a == "count" or (a in ("min", "max") and narrow) else 8 for a in inp.accumulators)
    return total


def smem_bytes(inputs: list[AggInput], slots: int) -> int:
    """Shared memory for ``slots`` slots (rounded up to even) of every input's accumulators."""
    return slot_bytes(inputs) * (slots + (slots & 1))


def global_bytes(inputs: list[AggInput], groups: int) -> int:
    """Global memory of every input's accumulators for ``groups`` groups (u64 slots)."""
    return sum(len(inp.accumulators) for inp in inputs) * groups * 8


def _addr(a) -> int:
    return 0 if a is None else a.data.ptr


def decode(inp: AggInput, acc: cp.ndarray) -> dict[str, cp.ndarray]:
    """Typed arrays from one input's (accumulators, g) u64 slots."""
    out = {}
    floating = inp.values is not None and inp.values.dtype.kind == "f"
    for name, row in zip(inp.accumulators, acc):
        if name in ("min", "max"):
            out[name] = _unorder(row, inp.values.dtype)
        elif name == "sum" and floating:
            out[name] = row.view(cp.float64)
        else:
            out[name] = row.view(cp.int64)
    return out


#: The inverse of the kernels' order-preserving u64 image of each value dtype (groupby.cu:
#: ordered), one elementwise kernel each: the two to four CuPy operations it replaced cost
#: 10-30 us of host time each, a quarter of HGB's 0.4 ms at 2^24 rows (H200).
_UNORDER = {
    np.dtype(np.int32): ("int32", "y = (int)(unsigned int)(r ^ 0x80000000ull)"),
    np.dtype(np.int64): ("int64", "y = (long long)(r ^ 0x8000000000000000ull)"),
    np.dtype(np.float32): ("float32", "unsigned int u = (unsigned int)r; "
                                      "y = __uint_as_float((u >> 31) ? (u ^ 0x80000000u) : ~u)"),
    np.dtype(np.float64): ("float64", "y = __longlong_as_double((long long)((r >> 63) ? (r ^ 0x8000000000000000ull) "
                                      ": ~r))"),
}


@functools.lru_cache(maxsize=None)
def _unorder_kernel(dtype: np.dtype) -> cp.ElementwiseKernel:
    out, body = _UNORDER[dtype]
    return cp.ElementwiseKernel("uint64 r", f"{out} y", body, f"gpujoin_unorder_{out}")


def _unorder(row: cp.ndarray, dtype: np.dtype) -> cp.ndarray:
    """Invert the kernels' order-preserving u64 image of a value."""
    return _unorder_kernel(np.dtype(dtype))(row)


def empty_output(keys: cp.ndarray, inputs: list[AggInput], phases: dict) -> GroupByOutput:
    """The result of grouping no rows: no groups, each input's accumulators empty."""
    return GroupByOutput(keys[:0], [decode(i, a) for i, a in zip(inputs, allocate(inputs, 0))], phases)


def concat_outputs(parts: list[GroupByOutput]) -> tuple[cp.ndarray, list[dict[str, cp.ndarray]]]:
    """Keys and columns of several outputs over disjoint groups, one after another."""
    keys = cp.concatenate([p.keys for p in parts])
    cols = [{k: cp.concatenate([p.columns[i][k] for p in parts]) for k in parts[0].columns[i]}
            for i in range(len(parts[0].columns))]
    return keys, cols


HLL_BITS = 12


def estimate_groups(keys: cp.ndarray, sub: int = 1) -> int:
    """HyperLogLog estimate of the number of distinct keys (2^12 registers: about 1.6% error).

    One pass over the keys (Flajolet et al. 2007, with the small-range correction, and the
    large-range one for the 32-bit hash of 4-byte keys); with ``sub`` > 1 over every sub-th
    32-byte sector of them only: the distinct keys of that share, a low estimate when many
    groups hold fewer than about 8 * sub rows each (the planner's choice, issue 17).
    """
    n = keys.size
    if n == 0:
        return 0
    buf = cp.zeros((1 << HLL_BITS) + 4, cp.uint32)  # the registers, then hll_sketch's finish words
    regs = buf[:1 << HLL_BITS]
    sms = device_properties(cp.cuda.Device().id)["sms"]
    per = 32 // keys.dtype.itemsize
    sectors = -(-n // per)
    read = -(-sectors // sub)  # sectors read; the last may be short
    sampled = (read - 1) * per + min(per, n - (read - 1) * sub * per)
    grid = max(1, min((sampled + 255) // 256, sms * 8))
    kernel("groupby.cu", f"hll_sketch<{key_type(keys)}>")((grid,), (256,), (keys, np.int64(n), regs, np.int32(sub),
                                                                          buf[1 << HLL_BITS:]))
    done = buf[1 << HLL_BITS:].get()  # one sync, 16 bytes
    return _hll_value(float(done[2:].view(np.float64)[0]), int(done[1]), keys.dtype.itemsize, sampled)


def hll_estimate(regs: cp.ndarray, key_bytes: int, n: int) -> int:
    """The distinct keys that HyperLogLog registers (uint32 (2**HLL_BITS,), filled by hll_sketch
    or radix_histogram from ``n`` keys of ``key_bytes`` bytes) estimate; one device sync."""
    r = cp.asnumpy(regs).astype(np.float64)
    return _hll_value(float(np.sum(2.0 ** -r)), int(np.count_nonzero(r == 0)), key_bytes, n)


def _hll_value(harmonic: float, zeros: int, key_bytes: int, n: int) -> int:
    """The estimate from the registers' sum of 2^-r and their count of zeros."""
    m = 1 << HLL_BITS
    alpha = 0.7213 / (1 + 1.079 / m)
    est = alpha * m * m / harmonic
    if est <= 2.5 * m and zeros:
        est = m * math.log(m / zeros)
    elif key_bytes == 4 and est > 2.0**32 / 30:  # a 32-bit hash: the large-range correction
        est = -(2.0**32) * math.log(max(1e-12, 1 - est / 2.0**32))
    return max(1, min(n, int(round(est))))
