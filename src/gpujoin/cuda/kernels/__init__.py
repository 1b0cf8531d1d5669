"""CUDA C++ sources of gpujoin's kernels and the template instantiations each one exports."""

from __future__ import annotations

import importlib.util
import os
import struct
from itertools import product
from pathlib import Path

import numpy as np

DIR = Path(__file__).parent

_KEYS = ("i32", "i64")
_WORDS = ("u32", "u64")
_VALUES = ("u8", "u16", "u32", "u64")
_INDEX = ("i32", "i64", "u32", "u64")

#: Thread block cluster sizes of the distributed-shared-memory HGB aggregation.
CLUSTER_SIZES = (2, 4, 8)

#: Column specializations of the group-by kernels (groupby.cu: spec_col), type | flags << 8 with
#: types i32 0, i64 1, f32 2, f64 3 and flags count 1, sum 2, sum_lo 4, min 8, max 16; -1 reads
#: them from each column's descriptor.  The specialized ones: min, max, or both of 4-byte
#: integers, max of 4-byte floats, and sums of 8-byte integers (decimals).
GROUPBY_SPECS = (-1, 0 | 8 << 8, 0 | 16 << 8, 0 | 24 << 8, 2 | 16 << 8, 1 | 6 << 8)

#: Register budgets the radix scatter is built for (minimum resident blocks per SM).
SCATTER_MINB = (1, 4)

#: Digit bits of a radix partition pass (partition.cu): at most 8 a stable pass (a warp ballot a
#: bit), 9 an unstable one (radix_scatter_unstable: a thread a digit), taken where it saves
#: a pass: PHJ's 17-18 bits (2^28-2^29 build rows) in two passes, not 8 + 8 + 1 or 2, each pass a
#: read and write of every column.  GPUJOIN_UNSTABLE_PASS_BITS=8 restores the 8-bit passes.
MAX_PASS_BITS = 8
UNSTABLE_PASS_BITS = int(os.environ.get("GPUJOIN_UNSTABLE_PASS_BITS", "9"))


def unstable_block(key: str, value: str) -> int:
    """Threads of radix_scatter_unstable's block for key and value types (its 8192-row tile and
    shared memory the same whatever the block, the rows shared out among the threads).

    Where a key or a value is 8 bytes, the tile's staging (8192 x 18 bytes at 9 bits) leaves
    room for one block an SM: 1024 threads of 8 rows keep twice the warps of 512 of 16 there. On
    one H200, a 9-bit pass over 2^28 int64 keys and payloads took 4.61-4.70 ms against
    5.75-5.87 (1.85 against 1.48 TB/s), the 17-bit partition 10.96 against 12.95 ms, and PHJ-TR's
    join of 2^28 rows a side 29.2-29.6 against 33.6-34.0 (scripts/profile_unstable_block.py).
    Narrower rows fit two blocks of 512 an SM already, and 1024 threads there were slower on the
    same H200 (int32 keys and values at 2^28: an 8-bit pass 4.01 against 3.59 ms, PGB-TR at
    g = 2^16 7.59 against 6.86, the narrow PHJ-TR at 2^27 10.10 against 9.42;
    scripts/profile_scatter.py).  GPUJOIN_UNSTABLE_BLOCK (512 or 1024) overrides it, for
    measuring."""
    given = os.environ.get("GPUJOIN_UNSTABLE_BLOCK")
    if given in ("512", "1024"):
        return int(given)
    return 1024 if "64" in key or "64" in value else 512


def pass_count(bits: int, unstable: bool) -> int:
    """How many passes partition ``bits`` digit bits: 8 a pass, or, unstable, 9 where that takes
    fewer (17-18 bits in 2, 25-27 in 3)."""
    most = UNSTABLE_PASS_BITS if unstable else MAX_PASS_BITS
    return max(0, min(-(-bits // MAX_PASS_BITS), -(-bits // most)))


def pass_widths(bits: int, unstable: bool) -> list[int]:
    """Digit bits of each pass over ``bits`` bits, least significant first: 8 each and the rest
    last, or, where 9-bit unstable passes save one, as even as they can be (17: 9 + 8)."""
    count = pass_count(bits, unstable)
    if count == -(-bits // MAX_PASS_BITS):
        return [min(MAX_PASS_BITS, bits - lo) for lo in range(0, bits, MAX_PASS_BITS)]
    return [bits // count + (i < bits % count) for i in range(count)]


def radix_of(bits: int) -> int:
    """Digit counts a tile has in a pass of ``bits`` bits (partition.cu: 256, 512 for 9 bits)."""
    return 512 if bits > 8 else 256


def scatter_name(key: str, value: str, stable: bool = True, minb: int = 1, bits: int = 8, fused: bool = False) -> str:
    """The radix scatter instance for key and value types (stable: radix_scatter, 4-byte staging
    when both fit, with a register budget; else radix_scatter_unstable, for digits of at most 8
    bits or of 9; ``fused``: its instance for the radix shuffle's digits, Digits.use_hash 3,
    unstable only)."""
    if not stable:
        return (f"radix_scatter_unstable<{key}, {value}, {9 if bits > 8 else 8}, {unstable_block(key, value)}"
                f"{', true' if fused else ''}>")
    if fused:
        raise ValueError("the radix shuffle's digits (use_hash 3) have unstable scatters only")
    stage = "u32" if key == "i32" and value in ("u8", "u16", "u32") else "u64"
    return f"radix_scatter<{key}, {value}, {stage}, {minb}>"


#: Rows a thread of the unstable passes' histogram (partition.cu: UNSTABLE_TILE / PART_BLOCK), the
#: only one the radix shuffle's digits take.
FUSED_ITEMS = 32


def histogram_name(key: str, items: int, fused: bool = False) -> str:
    """The radix histogram instance for a key type and rows a thread (``fused``: for the radix
    shuffle's digits, Digits.use_hash 3: the unstable passes' 32 rows a thread only)."""
    if fused and items != FUSED_ITEMS:
        raise ValueError("the radix shuffle's digits (use_hash 3) have unstable passes only")
    return f"radix_histogram<{key}, {items}{', true' if fused else ''}>"


#: C++ types of onesweep.cu's instances: keys by byte width, values by byte width (0: keys only),
#: offsets (32-bit below 2^32 rows).
ONESWEEP_KEYS = {4: "int", 8: "long long"}
ONESWEEP_VALUES = {0: "cub::NullType", 4: "unsigned int", 8: "unsigned long long"}
ONESWEEP_OFFSETS = ("unsigned int", "unsigned long long")

#: Every kernel (template instantiation) of every source file, as its C++ name expression.
NAME_EXPRESSIONS: dict[str, list[str]] = {
    "partition.cu": (
        [histogram_name(k, i, f) for k, i, f in product(_KEYS, (16, 32), (False, True)) if i == FUSED_ITEMS or not f]
        + [scatter_name(k, v, True, m) for k, v, m in product(_KEYS, _VALUES, SCATTER_MINB)]
        + [scatter_name(k, v, False, 1, b, f) for k, v, b, f in product(_KEYS, _VALUES, (8, 9), (False, True))]
        + [f"partition_bounds<{k}>" for k in _KEYS]
        + ["segment_bounds"]
    ),
    "hashjoin.cu": (
        [f"phj_match<{k}, {b}, {p}>" for k, b, p in product(_KEYS, _WORDS, _WORDS)]
        + [f"nphj_build<{k}>" for k in _KEYS]
        + [f"nphj_probe<{k}, {b}, {p}>" for k, b, p in product(_KEYS, _WORDS, _WORDS)]
    ),
    "merge.cu": (
        [f"merge_bounds<{k}>" for k in _KEYS]
        + [f"merge_splits<{k}>" for k in _KEYS]
        + ["ends_splits"]
        + [f"expand_matches<{k}, {b}, {p}>" for k, b, p in product(_KEYS, _WORDS, _WORDS)]
    ),
    "bitmap.cu": ["bitmap_build", "bitmap_probe<u32>", "bitmap_probe<u64>"],
    "groupby.cu": (
        [f"{name}<{k}>" for name, k in product(("hll_sketch", "hgb_build", "hgb_clear", "hgb_lookup",
                                                "sample_counts"), _KEYS)]
        + [f"hgb_aggregate<{k}, {s}>" for k, s in product(_KEYS, GROUPBY_SPECS)]
        + [f"hgb_aggregate_cluster<{k}, {c}>" for k, c in product(_KEYS, CLUSTER_SIZES)]
        + [f"sorted_reduce<{i}>" for i in ("i32", "i64")]
        + [f"pgb_aggregate<{k}, i32, {s}>" for k, s in product(_KEYS, GROUPBY_SPECS)]
    ),
    "bandwidth.cu": ["read_l1", "read_l2"],
    "scan.cu": ([f"scan_reduce<{i}>" for i in ("i32", "i64")] + ["scan_sums"]
                + [f"scan_down<{i}, {o}>" for i, o in product(("i32", "i64"), ("i32", "i64"))]
                + [f"sum_into<{i}>" for i in ("i32", "i64")] + [f"row_sums<{i}>" for i in ("i32", "i64")]),
    "shuffle.cu": [f"dest_histogram<{d}>" for d in ("u8", "i32")]
    + [f"dest_scatter<{v}, {d}>" for v, d in product(_VALUES, ("u8", "i32"))],
    "gather.cu": (
        [f"gather<{v}, {i}>" for v, i in product(_VALUES, _INDEX)]
        + ["compact_count"]
        + [f"compact_write<{i}>" for i in ("i32", "i64")]
        + [f"value_range<{k}>" for k in _KEYS]
    ),
    "strings.cu": ["string_hash", "strings_differ"],
    "onesweep.cu": (
        [f"onesweep_histogram<{k}, {o}>" for k, o in product(ONESWEEP_KEYS.values(), ONESWEEP_OFFSETS)]
        + [f"onesweep_{n}<{k}, {v}, {o}>" for n, k, v, o in product(("pass", "tile"), ONESWEEP_KEYS.values(),
                                                                     ONESWEEP_VALUES.values(), ONESWEEP_OFFSETS)]
        + [f"onesweep_exclusive_sum<{o}>" for o in ONESWEEP_OFFSETS]
    ),
}

#: groupby.cu's SampleArgs (sample_counts' one argument), field for field, as NumPy lays out a C
#: struct (align=True); groupby.cu static_asserts its size and some offsets, which
#: tests/test_kernels_compile.py compares with these.
SAMPLE_ARGS = np.dtype(
    [(n, np.uint64 if n in ("keys0", "keys1", "out", "build", "probe", "table", "ctr", "host", "seq") else np.int64)
     for n in ("keys0", "keys1", "step0", "step1", "random_rows1", "out", "build", "probe", "bstep", "bn", "pstep",
               "pn", "table", "tslots", "ctr", "host", "seq")]
    + [(n, np.uint32 if n == "slots" else np.int32)
       for n in ("n0", "n1", "nsamples", "slots", "nfill", "ninsert", "nprobe", "unused")], align=True)

#: SAMPLE_ARGS' fields as struct.pack_into writes them (no padding: 8-byte fields first), so
#: that a launch fills one kept buffer instead of building a NumPy struct (8 us of a cold
#: planner's launch on an H200's host, 2 warm).
SAMPLE_PACK = struct.Struct("=" + "".join({"u8": "Q", "i8": "q", "u4": "I", "i4": "i"}[SAMPLE_ARGS.fields[n][0].str[1:]]
                                          for n in SAMPLE_ARGS.names))
assert SAMPLE_PACK.size == SAMPLE_ARGS.itemsize

#: Options for NVRTC, besides the architecture.
OPTIONS = ("-std=c++17", f"-I{DIR}")
#: Source files that include CUB's headers.
CUB_FILES = ("onesweep.cu",)


def cccl_include() -> tuple[str, ...]:
    """-I options for CUB's headers: CuPy's own copy of CCCL (cupy/_core/include/cupy/_cccl, the
    CCCL that CuPy's CUB and Thrust calls use), else the nvidia-cuda-cccl wheel's (CI compiles the
    kernels without CuPy).  Raises RuntimeError when neither is installed."""
    spec = importlib.util.find_spec("cupy")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        base = Path(loc) / "_core" / "include" / "cupy" / "_cccl"
        if (base / "cub" / "cub").is_dir():
            return tuple(f"-I{base / d}" for d in ("cub", "libcudacxx", "thrust"))
    spec = importlib.util.find_spec("nvidia")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        for cu in ("cu13", "cu12"):
            inc = Path(loc) / cu / "include" / "cccl"
            if (inc / "cub").is_dir():
                return (f"-I{inc}",)
    raise RuntimeError("CUB's headers were not found: install CuPy (it carries them) or nvidia-cuda-cccl")


def options(file: str) -> tuple[str, ...]:
    """NVRTC options for ``file``, besides the architecture."""
    return (*OPTIONS, *cccl_include()) if file in CUB_FILES else OPTIONS


def source(name: str) -> str:
    return (DIR / name).read_text()
