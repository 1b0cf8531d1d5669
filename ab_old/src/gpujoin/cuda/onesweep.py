"""CUB's one-sweep radix sort of device keys and the columns they carry (onesweep.cu).

Paper 003's own code sorts with ``cub::DeviceRadixSort`` (reading note 003, SMJ); this launches
the same kernels CUB's dispatch does (Adinets and Merrill 2022): one histogram kernel counts
every pass's 8-bit digits in one read of the keys, then each pass is one kernel whose tiles rank
their rows, find their digits' offsets by decoupled look-back over the tiles before them, and
scatter.  partition.cu's stable passes need a histogram pass and a scan of every tile's counts a
digit besides.  CUB carries one value a key: ``sort_columns`` packs two narrow columns into one
word and sorts the keys again for each further pack.  ``primitives.radix_sort`` calls it.
"""

from __future__ import annotations

import functools

import cupy as cp
import numpy as np

from .kernels import ONESWEEP_KEYS, ONESWEEP_OFFSETS, ONESWEEP_VALUES
from .runtime import device_properties, kernel

#: Digit bits of a pass (CUB's ONESWEEP_RADIX_BITS).
PASS_BITS = 8
#: Rows a portion (CUB's PORTION_SIZE before rounding to tiles): the look-back's counters hold
#: 30 bits, so longer inputs run a pass as several launches, each portion's starts written by
#: the one before.
PORTION = (1 << 28) - 1
_NULL = np.uint64(0)


def ordered(x: int, key_bytes: int) -> int:
    """CUB's bit-ordered form of signed key ``x`` (the sign bit flipped): unsigned order equals
    signed order."""
    w = 8 * key_bytes
    return (x & ((1 << w) - 1)) ^ (1 << (w - 1))


def sort_bits(lo: int, hi: int, key_bytes: int) -> int:
    """The low bits of the bit-ordered keys that order every key in [lo, hi]: keys between two
    numbers share the high bits those two share, so the sort needs the bits below the highest one
    where ordered(lo) and ordered(hi) differ (0 when lo == hi)."""
    return (ordered(lo, key_bytes) ^ ordered(hi, key_bytes)).bit_length()


def supports(keys: cp.ndarray, values: list[cp.ndarray]) -> bool:
    """Whether sort_columns takes these columns: int32 or int64 keys, columns of 1 to 8 bytes."""
    return (keys.dtype in (np.dtype(np.int32), np.dtype(np.int64))
            and all(v.dtype.itemsize in (1, 2, 4, 8) for v in values))


def packs(widths: list[int]) -> list[list[int]]:
    """Columns (by index) grouped two at most into words of at most 8 bytes, widest first: each
    group is sorted as one carried word (CUB carries one value a key)."""
    out: list[list[int]] = []
    for i in sorted(range(len(widths)), key=lambda i: -widths[i]):
        fit = next((g for g in out if len(g) == 1 and widths[g[0]] + widths[i] <= 8), None)
        if fit is None:
            out.append([i])
        else:
            fit.append(i)
    return out


_UNSIGNED = {1: cp.uint8, 2: cp.uint16, 4: cp.uint32, 8: cp.uint64}


@functools.lru_cache(maxsize=None)
def _pack_kernels():
    pack = cp.ElementwiseKernel("A a, B b, int32 shift", "W w", "w = (W)a | ((W)b << shift)", "gpujoin_pack2")
    unpack = cp.ElementwiseKernel("W w, int32 shift", "A a, B b", "a = (A)w; b = (B)(w >> shift)", "gpujoin_unpack2")
    return pack, unpack


def sort_columns(keys: cp.ndarray, values: list[cp.ndarray], end_bit: int
                 ) -> tuple[cp.ndarray, list[cp.ndarray]]:
    """Stable ascending sort of ``keys`` and every column of ``values`` with them, on bits
    [0, end_bit) of the keys' bit-ordered form: one onesweep_sort a pack of columns (``packs``:
    two columns of at most 8 bytes together travel as one word, packed before and split after,
    each a read and a write of their bytes), the keys sorted again for each pack after the first.

    Returns new arrays: (keys_out, [column_out, ...]) of the input dtypes.
    """
    groups = packs([v.dtype.itemsize for v in values])
    if not groups:
        return onesweep_sort(keys, None, end_bit)[0], []
    out: list[cp.ndarray | None] = [None] * len(values)
    sorted_keys = None
    pack, unpack = _pack_kernels()
    for g in groups:
        if len(g) == 1 and values[g[0]].dtype.itemsize >= 4:
            k, w = onesweep_sort(keys, values[g[0]], end_bit)
            out[g[0]] = w
        elif len(g) == 1:  # a lone 1- or 2-byte column travels widened to 4 bytes
            v = values[g[0]]
            k, w = onesweep_sort(keys, v.view(_UNSIGNED[v.dtype.itemsize]).astype(cp.uint32), end_bit)
            out[g[0]] = w.astype(_UNSIGNED[v.dtype.itemsize]).view(v.dtype)
        else:
            a, b = (values[i].view(_UNSIGNED[values[i].dtype.itemsize]) for i in g)
            wide = a.dtype.itemsize + b.dtype.itemsize > 4
            word = pack(a, b, np.int32(8 * a.dtype.itemsize), cp.empty(a.size, cp.uint64 if wide else cp.uint32))
            k, w = onesweep_sort(keys, word, end_bit)
            del word
            sa, sb = cp.empty_like(a), cp.empty_like(b)
            unpack(w, np.int32(8 * a.dtype.itemsize), sa, sb)
            out[g[0]], out[g[1]] = sa.view(values[g[0]].dtype), sb.view(values[g[1]].dtype)
        sorted_keys = k if sorted_keys is None else sorted_keys
    return sorted_keys, out


def _types(keys: cp.ndarray, value: cp.ndarray | None) -> tuple[str, str, str]:
    return (ONESWEEP_KEYS[keys.dtype.itemsize], ONESWEEP_VALUES[0 if value is None else value.dtype.itemsize],
            ONESWEEP_OFFSETS[keys.size >= 1 << 32])


@functools.lru_cache(maxsize=None)
def _tile(types: tuple[str, str, str], device: int) -> tuple[int, int]:
    """(threads, rows) of a tile of onesweep_pass for these types (CUB's policy, read once)."""
    out = cp.zeros(2, cp.int32)
    kernel("onesweep.cu", "onesweep_tile<{}, {}, {}>".format(*types))((1,), (1,), (out,))
    threads, rows = out.get()
    return int(threads), int(rows)


def onesweep_sort(keys: cp.ndarray, value: cp.ndarray | None, end_bit: int
                  ) -> tuple[cp.ndarray, cp.ndarray | None]:
    """Stable ascending sort of ``keys`` (and ``value`` with them) on bits [0, end_bit) of their
    bit-ordered form (``sort_bits``; the keys must agree on every bit above).

    Parameters
    ----------
    keys : int32 or int64 (n,) device array
    value : (n,) device array of 4- or 8-byte items (moved as raw bits), or None
    end_bit : 0 to 8 * key bytes

    Returns
    -------
    keys_out, value_out : new arrays (the inputs are left as they were); value_out None without
        a value.

    Memory: two copies of keys and value (one when a pass suffices), 256 offsets a pass, and a
    4-byte word a tile and digit for the look-back (about 0.12 bytes a row).
    Raises ValueError for other dtypes or more than one column (``supports``).
    """
    if not supports(keys, [] if value is None else [value]) or (value is not None and value.dtype.itemsize < 4):
        raise ValueError(f"onesweep_sort: keys int32 or int64 and one value of 4 or 8 bytes, got {keys.dtype} and "
                         f"{None if value is None else value.dtype}")
    n, passes = keys.size, -(-end_bit // PASS_BITS)
    if n <= 1 or passes == 0:
        return keys.copy(), None if value is None else value.copy()
    types = _types(keys, value)
    K, V, O = types
    dev = cp.cuda.Device().id
    threads, tile = _tile(types, dev)
    portion = PORTION // tile * tile
    portions = -(-n // portion)
    blocks = -(-min(n, portion) // tile)
    odt = np.uint64 if O == ONESWEEP_OFFSETS[1] else np.uint32
    # bins: a portion's 256 starts a pass (portion 0's from the histogram, the others written by
    # the portion before); the tile counters, then the look-back words
    bins = cp.zeros(portions * passes * 256, odt)
    words = cp.zeros(portions * passes + blocks * 256, cp.int32)
    ctrs, lookback = words[:portions * passes], words[portions * passes:]
    sms = device_properties(dev)["sms"]
    kernel("onesweep.cu", f"onesweep_histogram<{K}, {O}>")((sms * 8,), (128,), (bins, keys, odt(n), np.int32(0),
                                                                              np.int32(end_bit)))
    kernel("onesweep.cu", f"onesweep_exclusive_sum<{O}>")((passes,), (256,), (bins,))
    val = None if value is None else value.view(cp.uint32 if value.dtype.itemsize == 4 else cp.uint64)
    bufs = [(cp.empty_like(keys), None if val is None else cp.empty_like(val)) for _ in range(min(passes, 2))]
    one_pass = kernel("onesweep.cu", f"onesweep_pass<{K}, {V}, {O}>")
    src_k, src_v = keys, val
    for p in range(passes):
        dst_k, dst_v = bufs[p % 2]
        bit = p * PASS_BITS
        for q in range(portions):
            m = min(n - q * portion, portion)
            if p or q:  # words were zeroed with the allocation
                lookback[:-(-m // tile) * 256].fill(0)
            here = (q * passes + p) * 256
            nxt = bins[here + passes * 256:] if q + 1 < portions else _NULL
            lo = q * portion
            one_pass((-(-m // tile),), (threads,),
                     (lookback, ctrs[q * passes + p:], nxt, bins[here:], dst_k, src_k[lo:], _NULL if val is None else dst_v,
                      _NULL if val is None else src_v[lo:], np.int32(m), np.int32(bit), np.int32(min(PASS_BITS, end_bit - bit))))
        src_k, src_v = dst_k, dst_v
    out_v = None if value is None else src_v.view(value.dtype)
    return src_k, out_v
