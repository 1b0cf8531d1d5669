"""Paper 004's no-partitioning baselines (§6.1, "NPJ"): R's hash table built in GPU memory, S
streamed from host memory chunk by chunk through it, with the SUM of S's payload over the
matches as the result (paper 004's measure).

Two tables, as the paper's baselines:

- ``perfect``: perfect hashing for a dense primary key (R's keys a permutation of [0, |R|)),
  one slot a key value: the slot holds R's payload; a probe is one load.
- ``linear``: linear probing (gpujoin's NPHJ table, 2^k slots for at least twice |R|): keys
  and row ids in the table, R's payload column beside it.

The table must fit in the budget (on PCIe there is no coherent access to a table in host
memory, which paper 004's NVLink 2.0 allows: the baseline only exists where it fits).  S moves
through the streaming path of ``outofcore/stream.py`` (pinned staging, copy-in overlapped with
the probes), so it crosses PCIe once, as in the Triton join's pass 1.
"""

from __future__ import annotations

import time

import numpy as np

from .stream import Streams, Uploader, record

HASHINGS = ("perfect", "linear")


def table_bytes(hashing: str, build_cols: list[np.ndarray]) -> int:
    """GPU bytes of R's table (and its payload) for ``hashing``."""
    n = build_cols[0].size
    kb, pb = build_cols[0].dtype.itemsize, build_cols[1].dtype.itemsize
    if hashing == "perfect":
        return n * (pb + 1)
    slots = 1 << max(1, (2 * n - 1).bit_length())
    return slots * (kb + 4) + n * (kb + pb)


def streamed_npj(build_cols: list[np.ndarray], probe_cols: list[np.ndarray], hashing: str, budget: int,
                 chunk_rows: int = 1 << 24, streams: int = 3) -> tuple[int, int, dict]:
    """SUM of S's first payload over R ⋈ S with R's table in GPU memory and S streamed.

    Parameters
    ----------
    build_cols, probe_cols : [keys, payload] host NumPy arrays (n,); int32 or int64 keys of
        one dtype; for ``perfect`` R's keys are a permutation of [0, |R|) (checked on the GPU)
    hashing : "perfect" or "linear"
    budget : GPU bytes the table, R's payload and two S chunks may take
    chunk_rows : S rows a chunk

    Returns
    -------
    (matches, sum, phases in seconds: build, probe)

    Raises
    ------
    MemoryError
        The table does not fit in the budget (nothing is allocated).
    ValueError
        ``perfect`` with R keys that are not a permutation of [0, |R|).

    References
    ----------
    Paper 004 (Lutz et al., SIGMOD 2022) §6.1, the NPJ baselines.
    """
    import cupy as cp

    if hashing not in HASHINGS:
        raise ValueError(f"unknown hashing {hashing!r}; valid: {list(HASHINGS)}")
    (rk, rp), (sk, sp) = build_cols[:2], probe_cols[:2]
    nr, ns = rk.size, sk.size
    need = table_bytes(hashing, build_cols) + 2 * chunk_rows * (sk.dtype.itemsize + sp.dtype.itemsize)
    if need > budget:
        raise MemoryError(f"the {hashing} NPJ table needs {need:,} bytes of GPU memory with its S chunks; the "
                          f"budget is {budget:,}")
    st = Streams(streams)
    width = max(rk.dtype.itemsize + rp.dtype.itemsize, sk.dtype.itemsize + sp.dtype.itemsize)
    up = Uploader(st, Uploader.slot_size(chunk_rows * width, 2))
    t0 = time.perf_counter()
    with st.compute:
        if hashing == "perfect":
            payload = cp.empty(max(1, nr), rp.dtype)
            present = cp.zeros(max(1, nr), cp.uint8)
            outside = cp.zeros(1, cp.int64)
            for a in range(0, nr, chunk_rows):
                (k, p), ev, slot = up.put([rk[a:a + chunk_rows], rp[a:a + chunk_rows]])
                st.compute.wait_event(ev)
                inside = (k >= 0) & (k < nr)
                outside += k.size - inside.sum(dtype=cp.int64)
                at = cp.where(inside, k, 0)
                payload[at] = p
                present[at] = 1
                up.release(slot, record(st.compute))
            if int(outside.get()[0]) or int(present.sum(dtype=cp.int64)) != nr:
                raise ValueError("perfect hashing needs R's keys to be a permutation of [0, |R|) (a dense "
                                 "primary key); use hashing='linear'")
        else:
            from ..cuda.join.nphj import build_table

            keys = cp.empty(nr, rk.dtype)
            payload = cp.empty(nr, rp.dtype)
            for a in range(0, nr, chunk_rows):
                up.put([rk[a:a + chunk_rows], rp[a:a + chunk_rows]],
                       dest=[keys[a:a + chunk_rows], payload[a:a + chunk_rows]])
            st.copy_in.synchronize()
            table = build_table(keys)
            del keys
        st.compute.synchronize()
        t1 = time.perf_counter()
        total = cp.zeros(1, cp.int64)
        matches = cp.zeros(1, cp.int64)
        pending = up.put([sk[:chunk_rows], sp[:chunk_rows]]) if ns else None
        for a in range(0, ns, chunk_rows):
            (k, p), ev, slot = pending
            st.compute.wait_event(ev)
            if hashing == "perfect":
                at = cp.where((k >= 0) & (k < payload.size), k, -1)
                hit = (at >= 0) & (present[at] != 0)
                pair_b, pair_p = payload[at[hit]], p[hit]  # the pairs, as a join writes them
                total += pair_p.astype(cp.int64).sum()
                matches += pair_b.size
            else:
                from ..cuda.join.nphj import probe_sum

                n_hit, s = probe_sum(table, k, p, payload)
                total += s
                matches += n_hit
            up.release(slot, record(st.compute))
            if a + chunk_rows < ns:  # stage the next chunk while this one is probed
                b = a + chunk_rows
                pending = up.put([sk[b:b + chunk_rows], sp[b:b + chunk_rows]])
        result = int(matches.get()[0]), int(total.get()[0])
    t2 = time.perf_counter()
    return result[0], result[1], {"build": t1 - t0, "probe": t2 - t1, "staging_copy": up.stage_s}
