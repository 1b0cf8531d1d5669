"""The GPU bitmap join of paper 002 §5.2: semi and anti joins (set intersection) of keys in
[0, 2^32).

Both sides are bucketed on the top ``bucket_bits`` key bits (16 buckets by default, as in the
paper, whose GPU could not hold a whole-domain bitmap) with the stable radix partition; then,
bucket by bucket, one 2^(32 - bucket_bits)-bit bitmap (32 MiB for 16 buckets) is cleared, built
with atomicOr from the bucket's build keys and probed by its probe keys.  ``bucket_bits=0``
skips the bucketing and uses one 512 MiB bitmap, which today's GPUs hold easily.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from ..primitives import Digits, radix_partition
from ..runtime import PhaseTimer, check_memory, kernel, out_of_memory, ptr
from .common import JoinOutput

DOMAIN_BITS, BLOCK = 32, 256


def _as_u32(keys: cp.ndarray) -> cp.ndarray:
    return keys.astype(cp.uint32) if keys.dtype.itemsize == 8 else keys.view(cp.uint32)


def check_domain(mode: str, *keys: cp.ndarray) -> None:
    """Raise ValueError unless the bitmap join can answer ``mode`` on these keys."""
    if mode not in ("semi", "anti"):
        raise ValueError(f"the GPU 'bitmap' join answers semi and anti joins only (got {mode}); use phj-tr")
    for k in keys:
        if k.size and (int(k.min()) < 0 or int(k.max()) >= 1 << DOMAIN_BITS):
            raise ValueError(f"the GPU 'bitmap' join needs join keys in [0, 2^32), got [{int(k.min())}, "
                             f"{int(k.max())}]; use phj-tr")


def probe_hits(build_keys: cp.ndarray, probe_keys: cp.ndarray, want: bool = True, *, bucket_bits: int = 4,
               emit_keys: bool = False) -> cp.ndarray:
    """Positions (int64) of the probe keys that occur (``want``) or not among the build keys, or
    with ``emit_keys`` the matching probe keys themselves (uint32): the paper's set intersection.

    build_keys, probe_keys : (n,) integer device arrays with values in [0, 2^32) (int32 arrays
    are read as uint32).  Order of the result is unspecified.

    Raises
    ------
    MemoryError
        The bitmap and buckets do not fit in free GPU memory.
    """
    if not 0 <= bucket_bits <= 16:
        raise ValueError(f"bucket_bits={bucket_bits}: use 0..16")
    nb, np_ = build_keys.size, probe_keys.size
    local_bits = DOMAIN_BITS - bucket_bits
    check_memory((1 << local_bits) // 8 + 2 * (nb + np_) * 8 + np_ * 8, f"bitmap join of {nb:,} x {np_:,} keys")
    try:
        bk, pk = _as_u32(build_keys), _as_u32(probe_keys)
        rows = cp.arange(np_, dtype=cp.uint32)
        if bucket_bits:
            # bucket on the top bits: the partition reads int32 keys, and base -2^31 makes
            # (key - base) the unsigned key with its top bit flipped (a fixed bucket permutation)
            digits = Digits(bits=bucket_bits, shift=local_bits, use_hash=False, base=-(1 << 31))
            sbk, _, boff = radix_partition(bk.view(cp.int32), [], digits)
            spk, (srow,), poff = radix_partition(pk.view(cp.int32), [rows], digits)
            sbk, spk = sbk.view(cp.uint32), spk.view(cp.uint32)
            boff, poff = cp.asnumpy(boff), cp.asnumpy(poff)
        else:
            sbk, spk, srow = bk, pk, rows
            boff, poff = np.array([0, nb]), np.array([0, np_])
        mask = np.uint32((1 << local_bits) - 1) if local_bits < 32 else np.uint32(0xFFFFFFFF)
        bitmap = cp.empty(max(1, (1 << local_bits) // 32), cp.uint32)
        src = spk if emit_keys else srow
        out = cp.empty(np_, cp.uint32)
        counter = cp.zeros(1, cp.uint64)
        build = kernel("bitmap.cu", "bitmap_build")
        probe = kernel("bitmap.cu", "bitmap_probe<u32>")
        grid = lambda n: (max(1, min((n + BLOCK - 1) // BLOCK, 132 * 16)),)  # noqa: E731
        for j in range(boff.size - 1):
            b0, b1, p0, p1 = int(boff[j]), int(boff[j + 1]), int(poff[j]), int(poff[j + 1])
            if p1 == p0 or (b1 == b0 and want):
                continue
            bitmap.fill(0)
            if b1 > b0:
                build(grid(b1 - b0), (BLOCK,), (sbk[b0:b1], np.int64(b1 - b0), mask, bitmap))
            probe(grid(p1 - p0), (BLOCK,), (spk[p0:p1], np.int64(p1 - p0), mask, bitmap, np.int32(want),
                                           ptr(src[p0:p1]), out, counter))
        total = int(counter.get()[0])
        return out[:total] if emit_keys else out[:total].astype(cp.int64)
    except cp.cuda.memory.OutOfMemoryError as e:
        raise out_of_memory(e, "bitmap join") from None


def bitmap_join(build_keys: cp.ndarray, probe_keys: cp.ndarray, build_payloads: list[cp.ndarray],
                probe_payloads: list[cp.ndarray], mode: str = "semi", *, emit_keys: bool = False,
                bucket_bits: int = 4) -> JoinOutput:
    """Semi or anti join through :func:`probe_hits`; the result contract of ``phj.phj``.

    Raises
    ------
    ValueError
        Another join type, or keys outside [0, 2^32).
    """
    check_domain(mode, build_keys, probe_keys)
    timer = PhaseTimer()
    hits = probe_hits(build_keys, probe_keys, mode == "semi", bucket_bits=bucket_bits)
    timer.mark("match")
    return JoinOutput(list(build_payloads), list(probe_payloads), probe_only=hits, key_b=build_keys,
                      key_p=probe_keys, params={"bucket_bits": bucket_bits}, phases=timer.phases)
