"""GPU primitives of gpujoin, each a thin wrapper over its kernels in ``kernels/*.cu``.

Strategies (``cuda/join``, ``cuda/groupby``) call these, never raw kernels.  Arrays are CuPy
arrays on the current device; keys are int32 or int64, carried columns any 1/2/4/8-byte type
(moved as raw bits).  Sources: paper 003 §0-§1 (radix partition, GFTR), Green et al. 2012
(merge path).
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
import threading
import weakref
from dataclasses import dataclass

import cupy as cp
import numpy as np

from . import onesweep
from .kernels import (SAMPLE_ARGS, SAMPLE_PACK, UNSTABLE_PASS_BITS, histogram_name, pass_widths, radix_of,
                      scatter_name, unstable_block)
from .runtime import device_properties, kernel, ptr

#: Register budget of the stable radix scatter for 4-byte keys and values (kernels.SCATTER_MINB:
#: blocks per SM; others uncapped); GPUJOIN_SCATTER_MINB overrides.  With the tile's keys kept in
#: shared memory (partition.cu) the cap (4, 64 registers) pays again: on an H200 2^27 pairs sort
#: on 27 bits in 6.37 ms against 6.88 uncapped (80 registers, 3 blocks an SM), SMJ-TR 20.9
#: against 21.7 ms (scripts/profile_partition.py, profile_smj.py).  With keys re-read from global
#: memory it had not (16 bits 3.68 against 3.52 ms).
SCATTER_MINB = int(os.environ.get("GPUJOIN_SCATTER_MINB", "4"))
#: GPUJOIN_STABLE_PARTITION=1 ranks every radix pass stably (warp ballots), for comparison.
FORCE_STABLE = os.environ.get("GPUJOIN_STABLE_PARTITION") == "1"

#: radix_sort takes CUB's one-sweep sort where it serves (GPUJOIN_ONESWEEP=0: partition.cu's
#: stable passes everywhere, for comparison).
ONESWEEP = os.environ.get("GPUJOIN_ONESWEEP", "1") != "0"

#: radix_partition's tile: 256 threads x 16 items (the stable passes).
PART_BLOCK, PART_TILE = 256, 4096
#: radix_scatter_unstable's tile (partition.cu: UNSTABLE_TILE; its block: kernels.unstable_block).
UNSTABLE_TILE = 8192
COMPACT_BLOCK, COMPACT_TILE = 256, 4096
_KEY = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}
_WORD = {1: "u8", 2: "u16", 4: "u32", 8: "u64"}
_INDEX = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.uint32): "u32",
          np.dtype(np.uint64): "u64"}


def key_type(keys) -> str:
    """The C++ type of a key array or dtype (int32 or int64)."""
    try:
        return _KEY[np.dtype(getattr(keys, "dtype", keys))]
    except KeyError:
        raise TypeError(f"GPU join and group-by keys must be int32 or int64, got "
                        f"{np.dtype(getattr(keys, 'dtype', keys))}") from None


def word_type(dtype) -> str:
    """The C++ unsigned type of ``dtype``'s width."""
    return _WORD[np.dtype(dtype).itemsize]


def as_words(a: cp.ndarray) -> cp.ndarray:
    """``a`` viewed as unsigned integers of its width (bits unchanged)."""
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind != "u" else a


def _grid(n: int, block: int, per_sm: int = 32) -> int:
    return max(1, min((n + block - 1) // block, 132 * per_sm))


def _u64(x) -> np.uint64:
    return np.uint64(x)


@dataclass
class Digits:
    """Which bits of a key form its partition: bits [shift, shift + bits) of the murmur3 hash
    (``use_hash`` 1), of the murmur3 hash of the key xor a seed (2: independent of the first,
    for the out-of-core pass 1), or of ``key - base`` as an unsigned number (0/False:
    order-preserving when base is the minimum key); :data:`FUSED_HASH` (3): the radix shuffle's
    destination rank and top bits (``dist.radix_shuffle``; its histogram and unstable scatter
    only, kernel instances of their own)."""

    bits: int
    shift: int = 0
    use_hash: int = True
    base: int = 0


#: Digits.use_hash of the radix shuffle's digits: partition.cu's FUSED instances.
FUSED_HASH = 3


def _passes(digits: Digits, unstable: bool = False) -> list[tuple[int, int]]:
    """(shift, bits) of each pass, least significant digit first (kernels.pass_widths)."""
    widths = pass_widths(digits.bits, unstable)
    return [(digits.shift + sum(widths[:i]), w) for i, w in enumerate(widths)]


def _width_groups(values: list[cp.ndarray]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, v in enumerate(values):
        groups.setdefault(v.dtype.itemsize, []).append(i)
    return groups


def _unstable(values: list[cp.ndarray], stable: bool) -> bool:
    """Whether radix_partition ranks its passes unstably (most significant digit first): asked,
    and one launch moves every column (shared atomics may order a tile differently in each
    launch)."""
    return not (stable or FORCE_STABLE) and len(_width_groups(values)) <= 1


def _order(digits: Digits, unstable: bool) -> list[tuple[int, int]]:
    """The passes in the order radix_partition runs them: LSD (stable ranking: each pass keeps
    the order of the ones before) or MSD (unstable: each pass after the first partitions the
    partitions of the ones before, so no pass needs stability)."""
    passes = _passes(digits, unstable)
    return passes[::-1] if unstable else passes


@functools.lru_cache(maxsize=None)
def _tiles_kernel():
    """(starts, ends: int64 (P,), tile) -> each piece's tiles (int32 (P,)): one kernel, as a
    segmented pass runs once a pair of pass 2."""
    return cp.ElementwiseKernel("int64 lo, int64 hi, int64 tile", "int32 tiles",
                                "tiles = (int)((hi - lo + tile - 1) / tile);", "gpujoin_segment_pieces")


#: Elements a block of scan.cu scans (SCAN_BLOCK threads of SCAN_ITEMS).
SCAN_TILE, SCAN_BLOCK = 8192, 1024
_SCAN_TYPES = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}


def exclusive_scan(values: cp.ndarray, dtype=cp.int64, out: cp.ndarray | None = None,
                   shifts: cp.ndarray | None = None, segment: int = 0) -> cp.ndarray:
    """Exclusive prefix sums of ``values`` (int32 or int64 (n,)) and their total: (n + 1,) of
    ``dtype`` (int32 or int64; the caller knows the total fits), ``out[i] = values[:i].sum()``,
    written to ``out`` where given (contiguous, (n + 1,) of ``dtype``: made before the GPU is
    busy, as a shuffle's later chunks' places are).  ``shifts`` (int64 on the device, one a
    ``segment`` values): ``out[i]`` also gains ``shifts[i // segment]``, the total the last
    segment's (a shuffle's offsets moved to their places, a destination a segment, in the same
    pass).  Three launches of scan.cu (one for n <= 8192) and no cast: ``cupy.cumsum`` took ~70 us
    of the interpreter's time a call, then a subtraction.

    Raises
    ------
    ValueError
        ``out`` is not as above, or ``shifts`` is not int64 with one a segment."""
    n = values.size
    if out is None:
        out = cp.empty(n + 1, dtype)
    elif out.shape != (n + 1,) or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(f"exclusive_scan: out must be contiguous ({n + 1},) {np.dtype(dtype)}, got "
                         f"{out.shape} {out.dtype}")
    it, ot = _SCAN_TYPES[values.dtype], _SCAN_TYPES[out.dtype]
    if shifts is not None and (segment < 1 or shifts.dtype != cp.int64 or shifts.size * segment < n):
        raise ValueError(f"exclusive_scan: shifts must be int64, one a segment of {segment} of the {n} values; "
                         f"got {shifts.size} {shifts.dtype}")
    if n == 0:
        out.fill(0)
        if shifts is not None and shifts.size:
            out += shifts[-1]
        return out
    m = -(-n // SCAN_TILE)
    sums = None
    if m > 1:
        sums = cp.empty(m + 1, cp.int64)
        kernel("scan.cu", f"scan_reduce<{it}>")((m,), (SCAN_BLOCK,), (values, np.int64(n), sums))
        kernel("scan.cu", "scan_sums")((1,), (SCAN_BLOCK,), (sums, np.int32(m)))
    kernel("scan.cu", f"scan_down<{it}, {ot}>")((m,), (SCAN_BLOCK,), (values, np.int64(n), ptr(sums), out,
                                                                     ptr(shifts), np.int64(max(segment, 1))))
    return out


def sum_into(values: cp.ndarray, total: cp.ndarray) -> None:
    """``total`` (int64 0-d or (1,) on the device) += the sum of ``values`` (int32 or int64 (n,)),
    in int64 arithmetic (wrapping, as numpy's), in one launch."""
    n = values.size
    if n:
        grid = min(-(-n // SCAN_BLOCK), device_properties(cp.cuda.Device().id)["sms"] * 4)
        fn = kernel("scan.cu", f"sum_into<{_SCAN_TYPES[values.dtype]}>")
        fn((grid,), (SCAN_BLOCK,), (values, np.int64(n), total))


def row_sums(values: cp.ndarray, cols: int, out: cp.ndarray) -> cp.ndarray:
    """``out[r]`` (int64 (rows,) on the device) = the sum of ``values[r * cols:(r + 1) * cols]``
    (int32 or int64, at least rows * cols items: the first rows of a digit-major histogram of
    :func:`radix_histogram`, cols its tiles), in int64 arithmetic, in one launch.  Returns ``out``."""
    if out.size:
        fn = kernel("scan.cu", f"row_sums<{_SCAN_TYPES[values.dtype]}>")
        fn((out.size,), (SCAN_BLOCK,), (values, np.int64(cols), out))
    return out


#: Words that device_words passes as kernel arguments (more go through a copy from host memory).
WORDS_BY_ARGUMENT = 8


@functools.lru_cache(maxsize=None)
def _words_kernel():
    ws = ", ".join(f"unsigned long long w{i}" for i in range(WORDS_BY_ARGUMENT))
    return cp.RawKernel(f"""extern "C" __global__ void gpujoin_words(unsigned long long* out, int n, {ws}) {{
        const unsigned long long w[] = {{{", ".join(f"w{i}" for i in range(WORDS_BY_ARGUMENT))}}};
        if (threadIdx.x < n) out[threadIdx.x] = w[threadIdx.x];
    }}""", "gpujoin_words")


def device_words(words: list[int]) -> cp.ndarray:
    """``words`` (Python ints below 2**64: column addresses) as a uint64 device array, written
    by one kernel from its arguments: ``cupy.asarray`` of a list copies from host memory
    through a page-locked staging block (~90 us of the interpreter's time, four a pair of the
    hybrid join's pass 2, whose GPU threads take turns on the interpreter lock)."""
    n = len(words)
    if n > WORDS_BY_ARGUMENT:
        return cp.asarray(words, dtype=cp.uint64)
    out = cp.empty(n, cp.uint64)
    if n:
        args = [np.uint64(w) for w in words] + [np.uint64(0)] * (WORDS_BY_ARGUMENT - n)
        _words_kernel()((1,), (WORDS_BY_ARGUMENT,), (out, np.int32(n), *args))
    return out


@dataclass
class Runs:
    """Rows already grouped by the top ``bits`` bits of their digits, in pieces: partition p
    (those bits' value) is the rows [starts[p * runs + j], ends[p * runs + j]) for j < runs,
    wherever they lie (e.g. one piece a source rank, as a shuffle's messages arrive:
    dist/radix_shuffle.py), and its rows come out at ``part_off[p]`` (int64 (2**bits + 1,): the
    exclusive sum of the partitions' rows).  ``starts``, ``ends``: int64 (2**bits * runs,) on the
    device.  ``radix_partition(..., runs=...)`` partitions the rest of the digit's bits from
    there: the first pass's histogram and scatter skipped (paper 001's shuffle doing the local
    join's first radix pass)."""

    bits: int
    runs: int
    starts: cp.ndarray
    ends: cp.ndarray
    part_off: cp.ndarray
    #: the pieces are the partitions themselves, contiguous and in order (one a partition): with
    #: every bit done, radix_partition hands the rows back as they are
    in_place: bool = False
    #: the rows the pieces hold, where the host knows it (the passes' tiles are bounded by it,
    #: not by the columns' length: a shuffle's padded receive windows are about twice as long)
    rows: int | None = None


@dataclass
class _Segments:
    """The partitions that a segmented (MSD) pass partitions further: where each of their pieces
    starts (int64; ``ends`` None: piece p ends where p + 1 starts, one piece a partition), the
    exclusive sum of the pieces' tile counts (int32, one entry more), ``runs`` pieces a partition,
    where each partition's rows come out (``part_off``, int64 (partitions + 1,)); ``blocks`` is an
    upper bound of the tiles (a launch's grid; blocks past the last tile return at once)."""

    starts: cp.ndarray
    tile_start: cp.ndarray
    blocks: int
    part_off: cp.ndarray
    ends: cp.ndarray | None = None
    runs: int = 1

    @classmethod
    def of(cls, offsets: cp.ndarray, n: int, tile: int) -> "_Segments":
        tiles = cp.empty(offsets.size - 1, cp.int32)
        _tiles_kernel()(offsets[:-1], offsets[1:], tile, tiles)
        tile_start = exclusive_scan(tiles, cp.int32)
        return cls(offsets, tile_start, -(-n // tile) + offsets.size - 1, offsets)

    @classmethod
    def of_runs(cls, runs: Runs, n: int, tile: int) -> "_Segments":
        tiles = cp.empty(runs.starts.size, cp.int32)
        _tiles_kernel()(runs.starts, runs.ends, tile, tiles)
        rows = n if runs.rows is None else min(n, runs.rows)  # (the pieces' rows: no tile past them)
        return cls(runs.starts, exclusive_scan(tiles, cp.int32), -(-rows // tile) + runs.starts.size, runs.part_off,
                   runs.ends, runs.runs)

    @property
    def parts(self) -> int:
        return (self.tile_start.size - 1) // self.runs

    def args(self) -> tuple:
        return (self.starts, self.tile_start, np.int32(self.tile_start.size - 1),
                0 if self.ends is None else self.ends, np.int32(self.runs))


_GLOBAL = (0, 0, np.int32(0), 0, np.int32(1))  # no segments: tiles from row 0


def _histogram(keys: cp.ndarray, digits: Digits, shift: int, bits: int, tile: int, counts: cp.ndarray,
               sketch: cp.ndarray | None, segments: _Segments | None = None,
               digit_cache: cp.ndarray | None = None) -> None:
    radix = radix_of(bits)
    n, nblocks = keys.size, counts.size // radix
    # a block a tile; with a sketch, blocks loop over tiles so that fewer sketches are merged
    grid = nblocks if sketch is None else min(nblocks, device_properties(cp.cuda.Device().id)["sms"] * 8)
    kernel("partition.cu", histogram_name(key_type(keys), tile // PART_BLOCK, digits.use_hash == FUSED_HASH))(
        (grid,), (PART_BLOCK,), (keys, np.int64(n), np.int32(digits.use_hash), np.int64(digits.base),
                                 np.int32(shift), np.int32(bits), np.int32(radix), counts, np.int32(nblocks),
                                 ptr(sketch))
        + (segments.args() if segments else _GLOBAL) + (ptr(digit_cache),),
        shared_mem=0 if sketch is None else sketch.nbytes)


def radix_histogram(keys: cp.ndarray, values: list[cp.ndarray], digits: Digits, sketch: cp.ndarray | None = None,
                    stable: bool = True, digit_cache: cp.ndarray | None = None) -> cp.ndarray:
    """The per-tile digit counts of the first pass of ``radix_partition(keys, values, digits,
    stable=stable)`` (int32 (256 * tiles,), 512 for a 9-bit first pass, digit-major), to hand to
    it as ``counts``; ``sketch``
    (uint32 (2**12,), zeroed: the HyperLogLog registers of groupby.common.estimate_groups) is
    filled from the same read of the keys.  ``digit_cache`` (uint16 (keys.size,), the radix
    shuffle's digits only, :data:`FUSED_HASH`): each row's digit is stored there, for
    :func:`scatter_placed` to read instead of hashing the key again.  Raises ValueError for empty
    keys or no digits, or a ``digit_cache`` of another digit or size."""
    if keys.size == 0 or digits.bits == 0:
        raise ValueError("radix_histogram needs keys and at least one digit bit")
    _check_cache(digit_cache, keys, digits)
    unstable = _unstable(values, stable)
    shift, bits = _order(digits, unstable)[0]
    tile = UNSTABLE_TILE if unstable else PART_TILE
    counts = cp.empty(radix_of(bits) * -(-keys.size // tile), cp.int32)
    _histogram(keys, digits, shift, bits, tile, counts, sketch, digit_cache=digit_cache)
    return counts


def _check_cache(cache: cp.ndarray | None, keys: cp.ndarray, digits: Digits) -> None:
    if cache is not None and (digits.use_hash != FUSED_HASH or cache.dtype != cp.uint16 or cache.size != keys.size):
        raise ValueError(f"digit_cache: uint16 ({keys.size},) for the radix shuffle's digits (use_hash "
                         f"{FUSED_HASH}), got {cache.dtype} ({cache.size},) for use_hash {digits.use_hash}")


def _scatter(src_k: cp.ndarray, src_v: list, dst_k: cp.ndarray, dst_v: list, digits: Digits, shift: int, bits: int,
             offs: cp.ndarray, nblocks: int, unstable: bool, segments: _Segments | None,
             digit_cache: cp.ndarray | None = None) -> None:
    """One pass's scatter of ``src_k`` and ``src_v`` to the positions ``offs`` gives (the exclusive
    scan of the pass's counts): a launch a width of the value columns."""
    kt, kb, n = key_type(src_k), src_k.dtype.itemsize, src_k.size
    tile = UNSTABLE_TILE if unstable else PART_TILE
    for g, (width, idx) in enumerate(list(_width_groups(src_v).items()) or [(4, [])]):
        # both tables of column addresses in one array, written by a kernel
        ptrs = device_words([src_v[i].data.ptr for i in idx] + [dst_v[i].data.ptr for i in idx] or [0, 0])
        vin, vout = ptrs[:max(1, len(idx))], ptrs[max(1, len(idx)):]
        # a register cap pays for 4-byte keys; 8-byte keys would spill under it
        scatter = kernel("partition.cu", scatter_name(kt, _WORD[width], not unstable,
                                                      SCATTER_MINB if kt == "i32" and width <= 4 else 1, bits,
                                                      digits.use_hash == FUSED_HASH))
        args = (src_k, dst_k, np.int64(n), np.int32(digits.use_hash), np.int64(digits.base), np.int32(shift),
                np.int32(bits), offs, np.int32(nblocks), vin, vout, np.int32(len(idx)), np.int32(g == 0))
        if unstable:
            smem = tile * (kb + width + (2 if bits > 8 else 1))  # radix_scatter's is static
            if smem > 32 * 1024:  # with the static arrays, past the 48 KiB that needs no opt-in
                scatter.max_dynamic_shared_size_bytes = smem
            scatter((nblocks,), (unstable_block(kt, _WORD[width]),),
                    args + (segments.args() if segments else _GLOBAL) + (ptr(digit_cache),), shared_mem=smem)
        else:
            scatter((nblocks,), (PART_BLOCK,), args)


def scatter_placed(keys: cp.ndarray, values: list[cp.ndarray], digits: Digits, offsets: cp.ndarray,
                   out_keys: cp.ndarray, out_values: list[cp.ndarray], digit_cache: cp.ndarray | None = None) -> None:
    """One unstable radix pass over ``digits`` (at most 9 bits; every value column of one width)
    that writes row i to ``out_keys`` / ``out_values`` at the position ``offsets`` gives it:
    ``offsets`` (int64 (radix * tiles + 1,)) is the exclusive scan of
    ``radix_histogram(keys, values, digits, stable=False)``, each digit's entries possibly moved
    by the caller (a shuffle's send buffer without this rank's digits, which go straight to its
    receive buffer: ``dist.radix_shuffle.exchange_partitioned``); the outputs may be longer than
    the keys; ``digit_cache``: the digits :func:`radix_histogram` stored for these keys.  Raises
    ValueError where one pass cannot do it."""
    _check_cache(digit_cache, keys, digits)
    if digits.bits > UNSTABLE_PASS_BITS or not _unstable(values, False):
        raise ValueError(f"scatter_placed: one unstable pass of at most {UNSTABLE_PASS_BITS} bits over value "
                         f"columns of one width, got {digits.bits} bits and widths "
                         f"{sorted(_width_groups(values))}")
    if keys.size:
        _scatter(keys, list(values), out_keys, list(out_values), digits, digits.shift, digits.bits, offsets,
                 -(-keys.size // UNSTABLE_TILE), True, None, digit_cache)


def radix_partition(keys: cp.ndarray, values: list[cp.ndarray], digits: Digits, bounds: bool = True,
                    counts: cp.ndarray | None = None, stable: bool = True, out: tuple | None = None,
                    runs: Runs | None = None) -> tuple[cp.ndarray, list[cp.ndarray], cp.ndarray | None]:
    """Radix partition of ``keys`` and every column of ``values`` on ``digits``.

    Passes of at most 8 bits, 9 unstable where that saves a pass (histogram, scan, shared-memory
    staged scatter), so the output is ordered by the digit and, if ``stable``, within a partition
    by input position; every value column lands at the same positions as its key (GFTR, paper
    003 §1.4).  Stable passes run least significant digit first (warp-ballot ranking keeps the
    previous passes' order).
    Unstable, when every column has one width, passes run most significant digit first, each
    after the first within the partitions of the ones before (tiles cut at their starts), and
    rank a tile by shared atomics on 8192-row tiles: faster, and the last pass's scan gives the
    bounds without a read of the keys.

    Parameters
    ----------
    keys : int32 or int64 (n,)
    values : list of (n,) arrays of 1, 2, 4 or 8-byte items
    digits : Digits
    bounds : also return the partition offsets
    counts : the first pass's histogram, from ``radix_histogram(keys, values, digits, stable=stable)``
    stable : keep input order within each partition
    out : (keys, [values]) arrays of the same dtypes and sizes that the last pass writes (the
        out-of-core pass 1 carves its cache from one allocation: no allocation a chunk)
    runs : the rows are already grouped by the digits' top ``runs.bits`` bits, in pieces
        (:class:`Runs`): only the bits below are partitioned, the first pass reading the pieces
        (``counts`` not taken); ignored where the passes are stable.  With every bit done and
        ``runs.in_place``, the keys and values come back as they are (not copied).  With
        ``runs.rows``, the columns may run past the pieces (padding, never read): the outputs
        are as long as the inputs, their rows [0, runs.rows) the partitions, and the offsets
        end at runs.rows

    Returns
    -------
    keys_out, values_out, offsets
        Partitioned copies, and int64 (2**bits + 1,) offsets of each partition (or None).

    Memory: two copies of keys and values (the output and one ping-pong buffer), plus
    256 int32 + 256 int64 counters per 4096-row tile (8192 rows unstable; 512 of each for
    a 9-bit pass).
    """
    n = keys.size
    unstable = _unstable(values, stable)
    if out is not None and (out[0].shape != keys.shape or out[0].dtype != keys.dtype or len(out[1]) != len(values)
                            or any(o.shape != v.shape or o.dtype != v.dtype for o, v in zip(out[1], values))):
        raise ValueError("radix_partition: out must match the keys' and values' dtypes and sizes")
    if runs is not None and not unstable:
        runs = None  # (stable passes run least significant digit first: the pieces are of no use)
    if runs is not None:
        if counts is not None or not 0 < runs.bits <= digits.bits:
            raise ValueError("radix_partition: runs take no counts, and at most the digits' bits")
        whole = digits.bits
        digits = Digits(digits.bits - runs.bits, digits.shift, digits.use_hash, digits.base)
        if digits.bits == 0 and runs.in_place:  # partitioned already (dist.radix_shuffle's first table)
            return _laid_out(keys, values, runs.part_off if bounds else None, out, copy=False)
        if n == 0 or digits.bits == 0:  # nothing left to partition: the pieces in partition order
            offsets = (runs.part_off.copy() if digits.bits == 0 else cp.zeros((1 << whole) + 1, cp.int64)) \
                if bounds else None
            return _laid_out(keys, values, offsets, out, idx=run_positions(runs.starts, runs.ends))
    passes = _passes(digits, unstable)
    if digits.use_hash == FUSED_HASH and len(passes) > 1:  # (its digit takes no mask: one pass whole)
        raise ValueError("radix_partition: the radix shuffle's digits (use_hash 3) are one unstable pass")
    src_k, src_v = keys, list(values)
    if n == 0 or not passes:
        offsets = cp.zeros((1 << digits.bits) + 1, cp.int64) if bounds else None
        if bounds and not passes:
            offsets[1] = n
        return _laid_out(keys, values, offsets, out)
    tile = UNSTABLE_TILE if unstable else PART_TILE
    segments, seg_offsets = None, None
    # the rows the passes partition (the pieces' where known: the columns may be padded past them)
    real = min(n, runs.rows) if runs is not None and runs.rows is not None else n
    for p, (shift, bits) in enumerate(_order(digits, unstable)):
        if p == 0 and runs is not None:  # the pieces of the partitions made before
            segments = _Segments.of_runs(runs, n, tile)
        elif p > 0 and unstable:  # partition the partitions of the passes before
            segments = _Segments.of(seg_offsets, real, tile)
        nblocks = segments.blocks if segments else -(-n // tile)
        radix = radix_of(bits)
        if p == 0 and counts is not None:
            if counts.size != radix * nblocks:
                raise ValueError("counts are not radix_histogram's of these keys, values and digits")
        else:
            counts = cp.empty(radix * nblocks, cp.int32)
            _histogram(src_k, digits, shift, bits, tile, counts, None, segments)
        offs = exclusive_scan(counts)  # (one more entry than counts: the total)
        if out is not None and p == len(passes) - 1:
            dst_k, dst_v = out[0], list(out[1])
        else:
            dst_k = cp.empty_like(src_k)
            dst_v = [cp.empty_like(v) for v in src_v]
        _scatter(src_k, src_v, dst_k, dst_v, digits, shift, bits, offs, nblocks, unstable, segments)
        src_k, src_v = dst_k, dst_v
        if unstable and p + 1 < len(passes):
            seg_offsets = _scan_bounds(offs, nblocks, bits, real, segments)
    if not bounds:
        offsets = None
    elif unstable or len(passes) == 1:
        # the last pass's scan holds where each digit (of each partition before) starts, which
        # saves partition_offsets' read of every key
        offsets = _scan_bounds(offs, nblocks, bits, real, segments)
    else:
        offsets = partition_offsets(src_k, digits)
    return src_k, src_v, offsets


def _laid_out(keys: cp.ndarray, values: list[cp.ndarray], offsets, out: tuple | None, idx: cp.ndarray | None = None,
              copy: bool = True) -> tuple[cp.ndarray, list[cp.ndarray], cp.ndarray | None]:
    """radix_partition's answer where no pass runs: the rows (those at ``idx``, in that order,
    where given) written to ``out`` where given, else copies (or, without ``copy``, the arrays
    themselves)."""
    if out is not None:
        for o, v in zip([out[0]] + list(out[1]), [keys] + list(values)):
            if idx is None:
                o[...] = v
            else:
                cp.take(v, idx, out=o)
        return out[0], list(out[1]), offsets
    if idx is not None:
        return keys[idx], [v[idx] for v in values], offsets
    return (keys.copy(), [v.copy() for v in values], offsets) if copy else (keys, list(values), offsets)


def run_positions(starts: cp.ndarray, ends: cp.ndarray) -> cp.ndarray:
    """Positions (int64, ascending within each piece) of the rows [starts[i], ends[i]) of the
    pieces (int64 (k,)), piece after piece: the gather that lays them out contiguously."""
    lens = ends - starts
    ends = cp.cumsum(lens)
    total = int(ends[-1]) if ends.size else 0
    idx = cp.arange(total, dtype=cp.int64)
    seg = cp.searchsorted(ends, idx, side="right")
    return starts[seg] + idx - (ends[seg] - lens[seg])


@functools.lru_cache(maxsize=None)
def _bounds_kernel():
    """(offs: int64 raw, tiles a digit, n) -> offsets (int64 (2**bits + 1,)): where tile 0 of each
    digit starts, then n (one kernel for a strided copy and a fill)."""
    return cp.ElementwiseKernel("raw int64 offs, int64 stride, int64 n", "int64 out",
                                "out = i == _ind.size() - 1 ? n : offs[i * stride];", "gpujoin_scan_bounds")


def _scan_bounds(offs: cp.ndarray, nblocks: int, bits: int, n: int, segments: _Segments | None) -> cp.ndarray:
    """Partition offsets (int64 (P * 2**bits + 1,)) from a pass's exclusive scan ``offs``: global
    (P = 1), where tile 0 of each digit starts; segmented, segment_bounds."""
    if segments is None:
        offsets = cp.empty((1 << bits) + 1, cp.int64)
        _bounds_kernel()(offs, nblocks, n, offsets)
        return offsets
    nparts = segments.parts
    offsets = cp.empty((nparts << bits) + 1, cp.int64)
    kernel("partition.cu", "segment_bounds")((_grid(offsets.size, 256),), (256,),
                                             (offs, segments.part_off, segments.tile_start, np.int32(nparts),
                                              np.int32(segments.runs), np.int32(bits), np.int32(radix_of(bits)),
                                              np.int64(n), offsets))
    return offsets


def partition_offsets(keys: cp.ndarray, digits: Digits) -> cp.ndarray:
    """int64 (2**bits + 1,) start of each partition of ``keys``, already ordered by ``digits``."""
    if digits.use_hash == FUSED_HASH:
        raise ValueError("partition_offsets: the radix shuffle's digits (use_hash 3) are read by its histogram "
                         "and unstable scatter only")
    P = 1 << digits.bits
    offsets = cp.zeros(P + 1, cp.int64)
    n = keys.size
    if n:
        k = kernel("partition.cu", f"partition_bounds<{key_type(keys)}>")
        k((_grid(n, 256),), (256,), (keys, np.int64(n), np.int32(digits.use_hash), np.int64(digits.base),
                                     np.int32(digits.shift), np.int32(digits.bits), offsets))
    return offsets


def radix_sort(keys: cp.ndarray, values: list[cp.ndarray], base: int, bits: int
               ) -> tuple[cp.ndarray, list[cp.ndarray]]:
    """Stable LSD radix sort of ``keys`` (and ``values`` with them) on bits [0, bits) of key - base.

    With base = min(keys) and bits = bit length of max - min, this sorts ascending by key.
    It runs as CUB's one-sweep sort (onesweep.sort_columns: 1.65-1.9x partition.cu's stable
    passes on an H200 for a key and one column) wherever that takes no more 8-bit passes than
    ``bits`` does (it sorts on the keys' own bits, and [base, base + 2^bits) may straddle a power
    of two); else, and with GPUJOIN_ONESWEEP=0, through radix_partition's stable passes.
    """
    if ONESWEEP and bits and onesweep.supports(keys, values):
        top = (1 << (8 * keys.dtype.itemsize - 1)) - 1
        end = onesweep.sort_bits(base, min(base + (1 << bits) - 1, top), keys.dtype.itemsize)
        if -(-end // onesweep.PASS_BITS) <= -(-bits // onesweep.PASS_BITS):
            return onesweep.sort_columns(keys, list(values), end)
    k, v, _ = radix_partition(keys, values, Digits(bits=bits, use_hash=False, base=base), bounds=False)
    return k, v


def value_range(arrays: list[cp.ndarray]) -> tuple[int, int] | None:
    """(smallest, largest) value over every int32 or int64 device array of ``arrays``, as Python
    ints (None when all are empty): one read of each (gather.cu: value_range) and one sync, where
    CuPy's min and max read each twice and synchronize twice (0.66 ms of SMJ's 21 ms at 2^27 a
    side on an H200).  Raises TypeError for another dtype (key_type)."""
    arrays = [cp.ascontiguousarray(a) for a in arrays if a.size]
    if not arrays:
        return None
    out = cp.asarray(np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min], np.int64))
    sms = device_properties(cp.cuda.Device().id)["sms"]
    for a in arrays:
        kernel("gather.cu", f"value_range<{key_type(a)}>")((max(1, min(-(-a.size // 1024), sms * 8)),), (256,),
                                                           (a, np.int64(a.size), out))
    lo, hi = out.get()
    return int(lo), int(hi)


def gather(src: cp.ndarray, idx: cp.ndarray, with_validity: bool = False
           ) -> tuple[cp.ndarray, cp.ndarray | None]:
    """``out[i] = src[idx[i]]``; a negative index gives a null (0 and validity False).

    idx: int32, int64, uint32 or uint64.  Returns (out, validity uint8 or None).
    """
    n = idx.size
    out = cp.empty(n, src.dtype)
    valid = cp.empty(n, cp.uint8) if with_validity else None
    if n:
        k = kernel("gather.cu", f"gather<{_WORD[src.dtype.itemsize]}, {_INDEX[idx.dtype]}>")
        k((_grid(n, 256),), (256,), (as_words(src), idx, _u64(n), as_words(out), ptr(valid)))
    return out, valid


def compact(flags: cp.ndarray, want: bool, index_dtype=cp.int64) -> cp.ndarray:
    """Positions i (ascending) where ``bool(flags[i]) == want``; flags uint8 (n,)."""
    n = flags.size
    if n == 0:
        return cp.empty(0, index_dtype)
    nblocks = (n + COMPACT_TILE - 1) // COMPACT_TILE
    counts = cp.empty(nblocks, cp.int64)
    kernel("gather.cu", "compact_count")((nblocks,), (COMPACT_BLOCK,),
                                        (flags, np.int64(n), np.int32(want), counts))
    offs = cp.cumsum(counts)
    total = int(offs[-1])
    offs -= counts
    out = cp.empty(total, index_dtype)
    if total:
        kernel("gather.cu", f"compact_write<{_INDEX[np.dtype(index_dtype)]}>")(
            (nblocks,), (COMPACT_BLOCK,), (flags, np.int64(n), np.int32(want), offs, out))
    return out


MERGE_TILE = 2048  # merge.cu: 256 threads x 8 merge steps per block


def merge_bounds(a: cp.ndarray, b: cp.ndarray, upper: bool, counts: bool = False, offsets: bool = False):
    """For each b[j] of sorted ``b``: how many of sorted ``a`` are < b[j] (or <= when ``upper``).

    Merge path over a and b (same key dtype); int64 (len(b),).  From the same pass, lower bounds
    only: ``counts``, how many of ``a`` equal each b[j] (returns (bounds, counts)), or
    ``offsets``, int64 (len(b) + 1,) the exclusive prefix sums of those counts and their total
    (returns (bounds, offsets); a block scan and decoupled look-back in the merge kernel).
    """
    if (counts or offsets) and upper:
        raise ValueError("merge_bounds counts the equal keys from lower bounds only")
    if counts and offsets:
        raise ValueError("merge_bounds returns counts or offsets, not both")
    out = cp.empty(b.size, cp.int64)
    eq = cp.empty(b.size, cp.int64) if counts else None
    offs = (cp.empty(b.size + 1, cp.int64) if b.size else cp.zeros(1, cp.int64)) if offsets else None
    total = a.size + b.size
    if b.size:
        blocks = (total + MERGE_TILE - 1) // MERGE_TILE
        # each block's start in one launch of a thread a block, and the look-back's words
        words = cp.zeros(2 * blocks + 1 if offsets else blocks + 1, cp.int64)
        splits, status = words[:blocks + 1], words[blocks + 1:] if offsets else None
        args = (a, np.int64(a.size), b, np.int64(b.size), np.int32(upper))
        kernel("merge.cu", f"merge_splits<{key_type(a)}>")((-(-(blocks + 1) // 256),), (256,),
                                                           args + (np.int64(blocks), splits))
        kernel("merge.cu", f"merge_bounds<{key_type(a)}>")((blocks,), (256,),
                                                           args + (out, ptr(eq), ptr(offs), ptr(status), splits))
    if counts:
        return out, eq
    return (out, offs) if offsets else out


def hash_partition_bits(n: int, target: int) -> int:
    """Radix bits so that n rows make partitions of about ``target`` rows on average."""
    bits = 0
    while (n >> bits) > target:
        bits += 1
    return bits


def frequent_keys(keys: cp.ndarray, min_rows: float, sample: int, min_seen: int = 2,
                  top: int | None = None, min_share: float = 0.0) -> cp.ndarray | None:
    """Sorted keys that a strided sample of ``sample`` of ``keys`` shows holding about
    ``min_rows`` rows or more, seen at least ``min_seen`` times in it (once when the sample is
    all of ``keys``); at most the ``top`` most frequent; None when there are none, or when
    together they hold less than ``min_share`` of the sample.  The heavy hitters that the hash
    joins and HGB treat apart (issue 17): a strided sample costs no random generator, and the
    same input gives the same keys.  The sample is counted on the host: a GPU unique of 2^14
    keys took 0.54 ms on an H200 (sort, compaction and their syncs), the copy and a host sort
    a tenth of that."""
    n = keys.size
    if n == 0 or n < min_rows:
        return None
    step = max(1, n // sample)
    s = cp.asnumpy(keys[::step][:sample])
    s.sort()
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    uniq, counts = s[starts], np.diff(np.append(starts, s.size))
    seen = 1 if s.size == n else min_seen
    pick = (counts >= seen) & (counts * (n / s.size) >= min_rows)
    heavy, counts = uniq[pick], counts[pick]
    if not heavy.size or (min_share and counts.sum() < min_share * s.size):
        return None
    if top is not None and heavy.size > top:
        heavy = np.sort(heavy[np.argsort(-counts, kind="stable")[:top]])
    return cp.asarray(heavy)


def _strided(keys: cp.ndarray, size: int, dtype) -> tuple[cp.ndarray, int, int]:
    """A strided sample of ``size`` of ``keys`` read in place: (array, step, count), the
    sample keys[i * step] for i < count.  A key of another dtype, or a view with strides, is
    sampled into a contiguous copy of ``dtype`` first (count keys, step 1)."""
    step = max(1, keys.size // size)
    count = min(size, -(-keys.size // step))
    if keys.dtype == dtype and keys._c_contiguous:  # (CuPy's attribute: .flags builds an object, 3 us cold)
        return keys, step, count
    return cp.ascontiguousarray(keys[::step][:count].astype(dtype, copy=False)), 1, count


def count_found(build_sample: cp.ndarray, probe_sample: cp.ndarray) -> int:
    """How many keys of ``probe_sample`` occur in ``build_sample`` (device int32/int64 arrays of
    one dtype; any strides): a distinct-key hash table of the build sample (HGB's probing, so
    repeated build keys cost nothing) probed by every probe key, in one launch
    (groupby.cu match_stages).  The planner's match ratio (issue 17 item 3): a CuPy sort of the
    build sample and a binary search cost 0.4 ms on an H200 at 2^24 rows, mostly fixed costs."""
    if build_sample.size == 0 or probe_sample.size == 0:
        return 0
    dt = build_sample.dtype
    key_type(dt)
    scratch = _scratch()
    seq = _fire(scratch, _launch(scratch, [], dt, 0, 0, _strided(build_sample, build_sample.size, dt),
                                 _strided(probe_sample, probe_sample.size, dt)))
    return int(scratch.wait(seq)[8])


class _Scratch:
    """A device's and thread's words for sample_counts: 12 device words of results and 5 u32
    counters (zero between launches: each launch's last block zeroes them before it writes the
    results), and 16 page-locked host words that the last block writes, results then the
    launch's number, so that the host spins on one word instead of a copy and a sync.  A
    thread's launches never overlap, whatever their streams: each waits for the one before
    (_launch).  Also the device's kernels and SM count: at 2^24 rows the planner's time is
    host time, each lookup a few us."""

    def __init__(self, device: int):
        # words 0-11: results, 12-14: the counters; a cudaMalloc of their own, not CuPy's pool:
        # a lasting piece of a pooled chunk keeps the whole chunk out of reach of every later
        # memory_limit (the out-of-core tests' 2-4 MB caps failed behind one)
        self.dev = cp.ndarray(16, cp.uint64, cp.cuda.MemoryPointer(cp.cuda.memory.Memory(16 * 8), 0))
        self.dev.fill(0)
        cp.cuda.get_current_stream().synchronize()  # (zero before a launch on any stream)
        # the host words: a page of their own (an anonymous mmap), page-locked and mapped for the
        # kernel to write; never a page that a NumPy array shares, which pinned_host would then
        # fail to register (a small cudaHostAlloc did that to the multi-GPU tests' arrays)
        self.page = mmap.mmap(-1, mmap.PAGESIZE)
        self.host = np.frombuffer(self.page, np.uint64, 16)
        self.host[:] = 0
        # the same words as Python ints: a NumPy uint64 scalar compared with an int took a few us
        # of the cold planner's wait (issue 17 item 3)
        self.words = memoryview(self.page).cast("Q")[:16]
        self.out, self.ctr, self.host_ptr = self.dev.data.ptr, self.dev.data.ptr + 12 * 8, 0
        if cp.cuda.runtime.deviceGetAttribute(_HOST_POINTER_FOR_REGISTERED_MEM, device):
            addr = self.host.ctypes.data
            try:
                cp.cuda.runtime.hostRegister(addr, mmap.PAGESIZE, 3)  # portable | mapped
            except cp.cuda.runtime.CUDARuntimeError:  # (not page-locked: the words copied back)
                addr = 0
            if addr:
                weakref.finalize(self, _unregister, addr, self.page, device)
                self.host_ptr = addr  # else: the words copied back (wait)
        self.seq = self.read = 0
        self.stream = None  # the last launch's: where wait() syncs (not the device, whose other
        # streams may hold work the samples do not wait for: a shuffle's last passes)
        # the packed launches of the last few keys sampled (_Packed, by launch_key_samples' key)
        self.packed: dict = {}
        self.table, self.table_bytes = None, 0  # the match stages' hash table, kept (table_ptr)
        props = device_properties(device)
        self.sms, self.smem_optin = props["sms"], props["smem_optin"]
        self.fns = {4: kernel("groupby.cu", "sample_counts<i32>"), 8: kernel("groupby.cu", "sample_counts<i64>")}
        self.fn_ptrs = {w: f.kernel.ptr for w, f in self.fns.items()}  # (CUfunction handles)

    def table_ptr(self, nbytes: int) -> tuple[int, object]:
        """(address, owner) of ``nbytes`` for the match stages' table: up to TABLE_KEPT bytes a
        cudaMalloc kept between launches (a thread's launches never overlap), as the words are,
        and outside CuPy's pool for the same reason; larger, from the pool for this launch."""
        if nbytes <= self.table_bytes:
            return self.table.ptr, self.table
        if nbytes > TABLE_KEPT:
            mem = cp.empty(nbytes, cp.uint8)  # (freed to the stream's pool: a later allocation runs after this launch)
            return mem.data.ptr, mem
        self.table, self.table_bytes = None, 0
        try:
            self.table = cp.cuda.memory.Memory(nbytes)
        except cp.cuda.runtime.CUDARuntimeError:  # out of device memory: the pool's own MemoryError
            mem = cp.empty(nbytes, cp.uint8)
            return mem.data.ptr, mem
        self.table_bytes = nbytes
        return self.table.ptr, self.table

    def wait(self, seq: int) -> memoryview:
        """The 16 host words (u64) once launch ``seq``'s last block wrote them: its 12 results
        first."""
        host = self.words
        if seq != self.seq:
            raise RuntimeError(f"the planner's samples (launch {seq}) were overwritten before being read: "
                               f"a thread reads each launch_key_samples before its next one")
        if not self.host_ptr:  # no mapped host words on this device: the launch's stream's sync and a copy
            self.stream.synchronize()
            self.host[:] = self.dev.get(stream=self.stream)
            host[15] = self.read = seq
            return host
        for _ in range(1024):  # up to about 100 us spinning; past that, a sync (the GIL released)
            if host[15] == seq:
                self.read = seq
                return host
        self.stream.synchronize()  # raises the launch's error, if any
        if host[15] != seq:
            raise RuntimeError(f"the planner's samples (launch {seq}) did not arrive")
        self.read = seq
        return host


_local = threading.local()  # each thread's _Scratch by device, freed with the thread
#: The largest match-stage table a _Scratch keeps: a 2^18-key build sample's 2^19 8-byte slots
#: (stats.DEVICE_BUILD_SAMPLE); a pooled allocation a launch cost 6 us of a cold planner's host
#: time on an H200.
TABLE_KEPT = 4 << 20
#: cudaDevAttrCanUseHostPointerForRegisteredMem: kernels may use a registered page's host address.
_HOST_POINTER_FOR_REGISTERED_MEM = 91


def _unregister(addr: int, page, device: int) -> None:
    try:
        with cp.cuda.Device(device):  # (a launch not read may still write the page)
            cp.cuda.Device(device).synchronize()
        cp.cuda.runtime.hostUnregister(addr)
    except Exception:  # noqa: BLE001  (at exit, CUDA may be gone first)
        pass


def _scratch() -> _Scratch:
    mine = getattr(_local, "scratches", None)
    if mine is None:
        mine = _local.scratches = {}
    device = cp.cuda.runtime.getDevice()  # (no Device object: the planner's host time)
    got = mine.get(device)
    if got is None:
        got = mine[device] = _Scratch(device)
    return got


class _Packed:
    """One launch of sample_counts, packed: its argument struct (SAMPLE_PACK's bytes but the
    launch's number), the driver's void*[1] pointing at them, the kernel, grid and shared
    memory, and the match stages' table it names (0: none).  A planner that samples the same
    arrays again only numbers and launches it (_fire): the packing's Python, 10-15 us of a
    cold planner's host time at 2^24 rows on an H200, is done once."""

    __slots__ = ("args", "params", "params_ptr", "fn", "grid", "smem", "table", "owner", "counts", "match_sizes")

    def __init__(self, fn: int, grid: int, smem: int, table: int, owner):
        self.args = np.zeros(SAMPLE_ARGS.itemsize, np.uint8)
        self.params = np.array([self.args.ctypes.data], np.uintp)
        self.params_ptr = self.params.ctypes.data
        self.fn, self.grid, self.smem, self.table = fn, grid, smem, table
        self.owner = owner  # (a table of the pool's: held until the launch, then freed to the pool)
        self.counts, self.match_sizes = (), (0, 0)


#: The launch's number in SampleArgs (written at each launch of a kept _Packed).
_SEQ_OFFSET = SAMPLE_ARGS.fields["seq"][1]
_SEQ = struct.Struct("<Q")
#: The most packed launches a _Scratch keeps (the arrays a loop of joins or group-bys samples).
PACKED_KEPT = 16


def _fire(scratch: _Scratch, packed: _Packed) -> int:
    """Launch ``packed`` on the current stream with the next number; returns that number for
    _Scratch.wait.  A thread's launches never overlap: one not read yet (an error between) is
    waited for first, its counters in use."""
    if scratch.read != scratch.seq:
        scratch.wait(scratch.seq)
    seq = scratch.seq + 1
    _SEQ.pack_into(packed.args, _SEQ_OFFSET, seq)
    # the driver's launch with the kept parameters (copied at the launch): a CuPy kernel call's
    # argument handling took 11-15 us of a cold planner's host time on an H200
    stream = cp.cuda.get_current_stream()
    cp.cuda.driver.launchKernel(packed.fn, packed.grid, 1, 1, 1024, 1, 1, packed.smem, stream.ptr,
                                packed.params_ptr, 0)
    scratch.seq, scratch.stream = seq, stream  # (launched)
    return seq


def _launch(scratch: _Scratch, samples: list[tuple], dt, slots: int, rows: int, build: tuple | None = None,
            probe: tuple | None = None) -> _Packed:
    """sample_counts over up to two ``samples`` (_strided triples; the second of ``rows`` random
    draws when ``rows``), and with a ``build`` triple of at least one key the match ratio's
    stages (groupby.cu match_stages): the build sample's distinct keys, and the ``probe``
    triple's keys found among them when it has any: packed (_Packed), for _fire to launch.
    Results in ``scratch``'s words."""
    if scratch.read != scratch.seq:  # an earlier launch not read (an error between): its counters in use
        scratch.wait(scratch.seq)
    fn = scratch.fns[dt.itemsize]
    smem = slots * (dt.itemsize + 4)
    if _smem_set.get(fn, 0) < smem:  # a driver call each time otherwise
        fn.max_dynamic_shared_size_bytes = _smem_set[fn] = smem
    a = samples[0] if samples else (None, 0, 0)
    b = samples[-1] if samples else a
    fill = ins = prb = tslots = table = bptr = pptr = 0
    bstep = bn = pstep = pn = 0
    _owner = None
    if build is not None and build[2]:
        tslots = 1 << max(10, (2 * build[2] - 1).bit_length())  # twice the sample, a power of two
        table, _owner = scratch.table_ptr(tslots * dt.itemsize)
        most = 2 * scratch.sms
        fill, ins = max(1, min(64, tslots >> 12)), max(1, min(-(-build[2] // 1024), most))
        bptr, bstep, bn = build[0].data.ptr, build[1], build[2]
        if probe is not None and probe[2]:
            prb = max(1, min(-(-probe[2] // 1024), most))
            pptr, pstep, pn = probe[0].data.ptr, probe[1], probe[2]
    # (a table of the pool's is this launch's alone: -1, never launched again)
    own = not table or table == (scratch.table.ptr if scratch.table is not None else 0)
    packed = _Packed(scratch.fn_ptrs[dt.itemsize], len(samples) + fill + ins + prb, smem, table if own else -1,
                     None if own else _owner)
    SAMPLE_PACK.pack_into(packed.args, 0, a[0].data.ptr if a[0] is not None else 0,
                          b[0].data.ptr if b[0] is not None else 0, a[1], b[1], rows, scratch.out, bptr, pptr, bstep,
                          bn, pstep, pn, table, tslots, scratch.ctr, scratch.host_ptr, 0, a[2], b[2], len(samples),
                          slots, fill, ins, prb, 0)
    return packed


#: The largest sample key_samples summarizes (half of groupby.cu's sample_counts table).
SUMMARY_MAX = 4096
#: The most random draws launch_key_samples takes (a table of twice as many slots, 12 bytes a
#: slot for 8-byte keys: 192 KiB of one block's shared memory).
DRAWS_MAX = 8192


@dataclass
class KeySamples:
    """key_samples' answer: each sample's size and summary (int64 (4,): distinct keys, rows of
    keys seen more than once, the largest count, the smallest count), and the probe sample keys
    found among the build sample's and the build sample's distinct keys (None when not asked)."""

    sizes: tuple[int, ...]
    summaries: np.ndarray  # (samples, 4)
    found: int | None = None
    match_sizes: tuple[int, int] = (0, 0)
    build_distinct: int | None = None


def key_samples(keys: list[cp.ndarray], size: int = SUMMARY_MAX,
                match: tuple[int, int] | None = None, draws: int = 0) -> KeySamples:
    """The planner's samples of one or two device key arrays (a join's build and probe keys, or
    a group-by's keys) in one launch (issue 17 item 3): a strided sample of ``size`` (<=
    SUMMARY_MAX) keys of each, counted in shared memory and summarized
    (KeySamples.summaries), and with ``match`` = (build sample, probe sample) sizes how many of
    a probe sample's keys a build sample holds (keys[0] build, keys[1] probe) and the build
    sample's distinct keys (a probe sample of 0: those only); ``draws``: see
    launch_key_samples.  Nothing leaves the GPU but the 12 numbers: on an H200 the host copies
    of the samples, np.unique and a separate match-ratio sync cost 0.4-0.6 ms, 16-20% of a
    2^24-row join.

    Raises ValueError for more than two arrays, ``size`` above SUMMARY_MAX, or ``draws`` above
    DRAWS_MAX or with two arrays; MemoryError (CuPy's) when ``match``'s table (8-16 bytes a
    build sample key) does not fit: up to TABLE_KEPT bytes it is the thread's own cudaMalloc,
    kept, outside CuPy's pool and so outside memory_limit; larger, from the pool."""
    return launch_key_samples(keys, size, match, draws).result()


#: The u64 words of results that sample_counts writes.
SAMPLES_OUT = 12
_smem_set: dict = {}  # sample_counts' functions and the dynamic shared memory set on each


@dataclass
class PendingSamples:
    """key_samples launched, not read: :meth:`result` waits for its words."""

    sizes: tuple[int, ...]
    match: bool
    match_sizes: tuple[int, int] = (0, 0)
    scratch: _Scratch | None = None
    seq: int = 0

    def words(self) -> list[int]:
        """The launch's 12 result words (Python ints; zeros when nothing was launched)."""
        if self.scratch is None:
            return [0] * SAMPLES_OUT
        return self.scratch.wait(self.seq)[:SAMPLES_OUT].tolist()  # (a memoryview's)

    def result(self) -> KeySamples:
        res = self.words()
        k = len(self.sizes)
        return KeySamples(self.sizes, np.array(res[:4 * k], np.int64).reshape(k, 4),
                          res[8] if self.match else None, self.match_sizes, res[10] if self.match else None)


def launch_key_samples(keys: list[cp.ndarray], size: int = SUMMARY_MAX,
                       match: tuple[int, int] | None = None, draws: int = 0) -> PendingSamples:
    """key_samples' launch only, on the current stream, so that the caller's Python runs while
    the GPU counts; PendingSamples.result (on the same thread, before that thread's next
    launch on the device) waits for it.  ``draws`` (one key array, at most DRAWS_MAX): a second sample
    of that many rows drawn at random, with replacement (a fixed seed), summarized as the
    second one (KeySamples.summaries[1], its size in PendingSamples.sizes: halved where the
    device's shared memory holds no table of twice as many slots): its distinct keys bound the
    groups whatever the keys' order (stats.more_groups_than, the group-by planner)."""
    if not 1 <= len(keys) <= 2 or size > SUMMARY_MAX or draws > DRAWS_MAX or (draws and len(keys) != 1):
        raise ValueError(f"key_samples takes one or two key arrays and samples of at most {SUMMARY_MAX} keys, "
                         f"and up to {DRAWS_MAX} random draws of one array")
    if match is not None and len(keys) != 2:
        raise ValueError("key_samples' match needs build and probe keys")
    k0, k1 = keys[0], keys[-1]
    dt = k0.dtype
    if k1.dtype != dt:
        dt = np.result_type(dt, k1.dtype)
    if dt not in _KEY:
        key_type(dt)  # its TypeError, before any launch
    scratch = _scratch()
    # the same arrays sampled again, in place, the same way: their launch as packed before (its
    # arguments are these arrays' addresses and sizes, whatever the arrays are now)
    kept = (k0.data.ptr, k0.size, k0.dtype, k0._c_contiguous, k1.data.ptr, k1.size, k1.dtype, k1._c_contiguous,
            len(keys), size, match, draws)
    packed = scratch.packed.get(kept)
    if packed is not None and packed.table in (0, scratch.table.ptr if scratch.table is not None else 0):
        pending = PendingSamples(packed.counts, match is not None, packed.match_sizes, scratch)
        pending.seq = _fire(scratch, packed)
        return pending
    samples = [_strided(k, size, dt) for k in keys]
    if draws:  # no more than a block's shared memory holds (an H200's 227 KiB: all 8,192)
        while draws > SUMMARY_MAX and 2 * draws * (dt.itemsize + 4) > scratch.smem_optin:
            draws //= 2
    rows = int(keys[0].size) if draws else 0
    if rows:  # the draws read the keys in place (_strided's answer: in place when its step is)
        whole = keys[0] if samples[0][0] is keys[0] else cp.ascontiguousarray(keys[0].astype(dt, copy=False))
        samples.append((whole, 1, draws))
    counts = tuple([s[2] for s in samples])  # (no generators: their frames are the planner's host time)
    pending = PendingSamples(counts, match is not None)
    if not any(counts):
        return pending
    build = probe = None
    if match is not None:
        build = _strided(keys[0], match[0], dt)
        probe = _strided(keys[1], match[1], dt) if match[1] else (keys[1], 1, 0)
        pending.match_sizes = (build[2], probe[2])  # (a probe sample of 0: the build's distinct keys only)
    pending.scratch = scratch
    packed = _launch(scratch, samples, dt, max(2 * SUMMARY_MAX, 1 << (2 * max(counts) - 1).bit_length()), rows,
                     build, probe)
    pending.seq = _fire(scratch, packed)
    in_place = all(t[0] is k0 or t[0] is k1 for t in samples) and (build is None or build[0] is k0) and (
        probe is None or probe[0] is k1)
    if in_place and packed.table >= 0:  # (no copies, and no table of the pool's, freed after this launch)
        packed.counts, packed.match_sizes = counts, pending.match_sizes
        if len(scratch.packed) >= PACKED_KEPT:
            scratch.packed.clear()
        scratch.packed[kept] = packed
    return pending
