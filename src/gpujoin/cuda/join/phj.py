"""PHJ-UR and PHJ-TR: the partitioned hash join of paper 003 §1.3-1.4 on one GPU.

Both sides are radix-partitioned on the low ``radix_bits`` of the murmur3 hash of the key
(contiguous, in no order within a partition: ``primitives.radix_partition(stable=False)``, whose
passes go most significant digit first), so that an average build partition holds at most half
of a block's shared-memory hash table.  Each co-partition is cut into work units
of at most ``CAP_BUILD`` build rows x ``PROBE_CHUNK`` probe rows; a thread block per unit (the
grid's blocks take the units in turn, counted on the GPU)
builds a chained table of its build rows in shared memory and streams its probe rows through
it.  A probe partition of any size just makes more units (the probe side splits freely); a
build partition larger than the table (heavy build keys, many-to-many keys of large
multiplicity) is sent elsewhere, one of the options of paper 003 §4: its rows, and its probe
partner's, join by sort-merge (``smj.sort_rows``: sorted, then merge path and an output-parallel
expansion), whose cost is the output's, so no input overflows shared memory or serializes a hot
key on one thread.

GFUR (``method="ur"``) partitions (key, row id) and gathers every payload column from the
original relation at the matched row ids: unclustered.  GFTR (``method="tr"``) partitions every
payload column with the key in the same stable pass (one histogram, one scatter per column) and
gathers from the partitioned copies at the matched positions: clustered.  With one payload
column a side, the match kernel writes the payloads themselves (early materialization).
"""

from __future__ import annotations

import functools

import cupy as cp
import numpy as np

from ..kernels import pass_count
from ..primitives import (Digits, Runs, exclusive_scan, hash_partition_bits, key_type, radix_partition,
                          run_positions, word_type)
from ..runtime import PhaseTimer, check_memory, kernel, out_of_memory, ptr, resident_grid
from .common import (JoinOutput, direct_column, emits_pairs, map_positions,
                     needs_build_flags, needs_probe_flags, position_dtype, run_match, unmatched)
from .smj import append_ranges, sort_rows

#: Shared-memory table of a work unit: at most CAP_BUILD build rows in NBUCKETS chains.
CAP_BUILD, NBUCKETS, PROBE_CHUNK, BLOCK = 4096, 4096, 8192, 512
#: A build partition of more rows than this goes to the sort-merge path (``smj.sort_rows``):
#: in the block nested loop, each probe row of a heavy key walks a chain as long as the key's
#: build rows and one thread writes all its matches, uncoalesced (65,567 equal keys a side:
#: 400 ms, against 76 ms for SMJ-TR's output-parallel expansion on one H200).
OVERSIZED_BUILD = CAP_BUILD


def phj(build_keys: cp.ndarray, probe_keys: cp.ndarray, build_payloads: list[cp.ndarray],
        probe_payloads: list[cp.ndarray], mode: str = "inner", *, method: str = "tr",
        emit_keys: bool = False, radix_bits: int | None = None,
        runs: tuple[Runs, Runs] | None = None) -> JoinOutput:
    """Partitioned hash join of ``build_keys`` (R) and ``probe_keys`` (S).

    Parameters
    ----------
    build_keys, probe_keys : int32 or int64 (nR,), (nS,) on the device, same dtype, no nulls
    build_payloads, probe_payloads : lists of (nR,) / (nS,) arrays of 1-8 byte items
    mode : "inner", "probe_outer", "full", "semi", "anti" (see common.MODES)
    method : "tr" (GFTR) or "ur" (GFUR)
    emit_keys : write each pair's key (JoinOutput.key_column)
    radix_bits : partitioning fanout 2**radix_bits (default: about 2048 build rows a partition)
    runs : (build, probe) :class:`~gpujoin.cuda.primitives.Runs`: each side already grouped by
        the top bits of its ``radix_bits``-bit digit (paper 001's shuffle did the first radix
        pass: ``dist.radix_shuffle.exchange_partitioned``), so only the bits below are
        partitioned here; ``radix_bits`` required

    Returns
    -------
    JoinOutput over the partitioned (TR) or original (UR) payload columns.

    Raises
    ------
    MemoryError
        The partitions and output guess do not fit in free GPU memory (nothing is allocated).
    """
    nb, np_ = build_keys.size, probe_keys.size
    if runs is not None and radix_bits is None:
        raise ValueError("phj: runs need the radix_bits they were made for")
    bits = partition_bits(nb, radix_bits)
    check_memory(working_bytes(build_keys, probe_keys, build_payloads, probe_payloads, mode, method, emit_keys,
                               bits), f"PHJ-{method.upper()} of {nb:,} x {np_:,} rows")
    try:
        return _phj(build_keys, probe_keys, build_payloads, probe_payloads, mode, method, emit_keys, bits,
                    runs or (None, None))
    except cp.cuda.memory.OutOfMemoryError as e:
        raise out_of_memory(e, f"PHJ-{method.upper()}") from None


def partition_bits(build_rows: int, radix_bits: int | None = None) -> int:
    """PHJ's radix bits for ``build_rows`` build rows (``radix_bits`` where given): about 2048
    build rows a partition, half of a block's shared-memory table."""
    return max(1, radix_bits if radix_bits is not None else hash_partition_bits(build_rows, CAP_BUILD // 2))


def working_bytes(bk, pk, bpay, ppay, mode: str, method: str, emit_keys: bool, bits: int) -> int:
    """GPU memory PHJ takes beyond its inputs, at its peak, with an output guess of one row a
    probe row: the partitioned build side, while the probe side is partitioned (an LSD radix
    partition of more than one pass holds its input's copy and output at once), or both
    partitioned sides with the match's flags and output.  On an H200, a 1:1 join (TR) whose
    output carries the key peaked at 2.75x its inputs (docs/BENCHMARKS.md); 2.5x without the key."""
    nb, np_ = bk.size, pk.size
    kb = bk.dtype.itemsize
    pos = lambda n: np.dtype(position_dtype(n)).itemsize  # noqa: E731

    def side(n, cols):  # a partitioned copy, and the temporaries of partitioning it
        # unstable passes (up to 9 bits) when the columns have one width (primitives._unstable)
        passes = pass_count(bits, method == "ur" or len({c.dtype.itemsize for c in cols}) <= 1)
        part = n * (kb + (pos(n) if method == "ur" else sum(c.dtype.itemsize for c in cols)))
        rows = n * pos(n) if method == "ur" else 0  # the row ids partitioned with the keys (GFUR)
        return part, rows + part * (2 if passes > 1 else 1) + n  # n: histograms, under a byte a row

    b_part, b_peak = side(nb, bpay)
    p_part, p_peak = side(np_, ppay)
    width = lambda n, cols: pos(n) if (method == "ur" or len(cols) != 1) else cols[0].dtype.itemsize  # noqa: E731
    out = np_ * (width(nb, bpay) + width(np_, ppay) + (kb if emit_keys else 0)) if emits_pairs(mode) else 0
    flags = (np_ if needs_probe_flags(mode) else 0) + (nb if needs_build_flags(mode) else 0)
    return max(b_peak, b_part + p_peak, b_part + p_part + flags + out)


@functools.lru_cache(maxsize=None)
def _units_kernel():
    """(boff, poff: int64 (P + 1,) raw, cap, chunk, oversized past, totals: int64 (2+,) raw,
    zeroed) -> per co-partition, its work units (int64, 0 for an oversized build partition) and
    whether it is oversized (bool); ``totals`` gains the oversized partitions and the units."""
    return cp.ElementwiseKernel(
        "raw int64 boff, raw int64 poff, int64 cap, int64 chunk, int64 past, raw int64 totals",
        "int64 units, bool over",
        "long long b = boff[i + 1] - boff[i], p = poff[i + 1] - poff[i]; over = b > past;"
        " units = over ? 0 : ((b + cap - 1) / cap) * ((p + chunk - 1) / chunk);"
        " if (over) atomicAdd((unsigned long long*)&totals[0], 1ULL);"
        " if (units) atomicAdd((unsigned long long*)&totals[1], (unsigned long long)units);", "gpujoin_phj_units")


def range_positions(offsets: cp.ndarray, chosen: cp.ndarray) -> cp.ndarray:
    """Positions (int64, ascending) of the rows of the ``chosen`` partitions (bool (P,)) of a
    partitioned array with partition ``offsets`` (int64 (P + 1,))."""
    parts = cp.flatnonzero(chosen)
    return run_positions(offsets[parts], offsets[parts + 1])


def _phj(bk, pk, bpay, ppay, mode, method, emit_keys, bits, runs):
    nb, np_ = bk.size, pk.size
    timer = PhaseTimer()
    digits = Digits(bits=bits)
    if method == "ur":
        brow = cp.arange(nb, dtype=position_dtype(nb))
        prow = cp.arange(np_, dtype=position_dtype(np_))
        tbk, (tbrow,), boff = radix_partition(bk, [brow], digits, stable=False, runs=runs[0])
        tpk, (tprow,), poff = radix_partition(pk, [prow], digits, stable=False, runs=runs[1])
        space_b, space_p = list(bpay), list(ppay)
        bsrc, psrc = tbrow, tprow
    elif method == "tr":
        tbk, space_b, boff = radix_partition(bk, list(bpay), digits, stable=False, runs=runs[0])
        tpk, space_p, poff = radix_partition(pk, list(ppay), digits, stable=False, runs=runs[1])
        bsrc = direct_column(space_b)
        psrc = direct_column(space_p)
    else:
        raise ValueError(f"unknown PHJ method {method!r}; use 'tr' or 'ur'")

    timer.mark("transform")
    nparts = boff.size - 1
    pairs = emits_pairs(mode)
    # each co-partition's work units; oversized build partitions (heavy build keys, many-to-many)
    # go to the sort-merge path: one kernel for what took eleven CuPy calls, both totals counted
    # in it (on four GPUs pass 2 of the hybrid join is bound by its threads' calls, which take
    # turns on the interpreter lock).  totals[2]: the match's next unit.
    per_unit, oversized, totals = cp.empty(nparts, cp.int64), cp.empty(nparts, cp.bool_), cp.zeros(3, cp.int64)
    _units_kernel()(boff, poff, CAP_BUILD, PROBE_CHUNK, OVERSIZED_BUILD, totals, per_unit, oversized)
    unit_off = exclusive_scan(per_unit)

    pflag = cp.zeros(np_, cp.uint8) if needs_probe_flags(mode) else None
    bflag = cp.zeros(nb, cp.uint8) if needs_build_flags(mode) else None
    kt = key_type(bk)
    bdt = bsrc.dtype if bsrc is not None else position_dtype(nb)
    pdt = psrc.dtype if psrc is not None else position_dtype(np_)
    fn = kernel("hashjoin.cu", f"phj_match<{kt}, {word_type(bdt)}, {word_type(pdt)}>")
    smem = CAP_BUILD * bk.dtype.itemsize + NBUCKETS * 4 + CAP_BUILD * 2
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    grid = resident_grid(fn, BLOCK, smem)

    def launch(out_b, out_p, out_k, counter, cap):
        # the units are counted on the GPU: the match is launched without reading them, its
        # blocks taking units from totals[2] (zeroed here: a second launch reuses it)
        totals[2:].fill(0)
        fn((grid,), (BLOCK,), (tbk, boff, tpk, poff, unit_off, totals[1:], totals[2:], np.int32(nparts),
                               np.int32(CAP_BUILD), np.int32(PROBE_CHUNK), np.int32(NBUCKETS), np.int32(bits),
                               ptr(bsrc), ptr(psrc), out_b, out_p, ptr(out_k), counter, cap, ptr(bflag),
                               ptr(pflag)),
           shared_mem=smem)

    out_b, out_p, out_k = run_match(launch, np_ if pairs else 0, bdt, pdt,
                                    bk.dtype if (emit_keys and pairs) else None, "PHJ match")
    # one read for both counts, after the match's own (which waited for the GPU)
    n_oversized, units = (int(x) for x in totals[:2].get())
    if n_oversized:
        bpos, ppos = range_positions(boff, oversized), range_positions(poff, oversized)
        heavy = sort_rows(tbk[bpos], tpk[ppos], bpos, ppos, pairs)
        out_b, out_p, out_k = append_ranges(heavy, bsrc, psrc, pflag, bflag, out_b, out_p, out_k, "PHJ match")
    probe_only, build_only = unmatched(mode, pflag, bflag)
    timer.mark("match")
    out = JoinOutput(space_b, space_p, params={"radix_bits": bits, "work_units": units, "method": method,
                                               "oversized_partitions": n_oversized},
                     phases=timer.phases)
    if pairs:
        out.pairs_b, out.pairs_p, out.pair_keys = out_b, out_p, out_k
    if method == "ur":
        out.probe_only, out.build_only = map_positions(probe_only, tprow), map_positions(build_only, tbrow)
        out.key_b, out.key_p = bk, pk
    else:
        out.direct_b, out.direct_p = bsrc is not None, psrc is not None
        out.probe_only, out.build_only = probe_only, build_only
        out.key_b, out.key_p = tbk, tpk
    return out


