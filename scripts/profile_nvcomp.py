"""Where the time of nvCOMP's cascaded codec goes (issue 16 item 3): each step of
cascaded.DeviceCodec's encode and decode timed with the device synchronized, for a small and a
large column, with nvCOMP's own allocator against CuPy's pool, and in both of nvCOMP 6's modes.
Run with nvCOMP installed (the nvidia-nvcomp-cu13 wheel): python3 scripts/profile_nvcomp.py
[--codec: gpujoin's cascaded.DeviceCodec and its steps instead]"""

import statistics
import sys
import time

import cupy as cp
import numpy as np
from nvidia import nvcomp as nv


def t(fn, reps=7):
    fn()
    ts = []
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        r = fn()
        cp.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3, r


def main():
    rng = np.random.default_rng(0)
    cols = {"sorted int64 2^21": np.sort(rng.integers(0, 1 << 40, 1 << 21)),
            "sorted int64 2^26": np.sort(rng.integers(0, 1 << 40, 1 << 26)),
            "int32 0..4 2^26": rng.integers(0, 5, 1 << 26).astype(np.int32)}
    for alloc in ("nvcomp", "cupy"):
        if alloc == "cupy":
            nv.set_device_allocator(lambda n, stream: cp.cuda.alloc(n))
        for mode in ("ASYMMETRIC", "SYMMETRIC"):
            for level in (1, 3):
                for name, col in cols.items():
                    d = cp.asarray(col)
                    s = cp.cuda.get_current_stream().ptr
                    codec = nv.Codec(algorithm="Cascaded", data_type=d.dtype.str, cuda_stream=s,
                                     mode=getattr(nv.CascadedMode, mode), compression_level=level)
                    wrap, src = t(lambda: nv.as_arrays([d], s))
                    enc, out = t(lambda: codec.encode(src))
                    both, _ = t(lambda: codec.encode(nv.as_arrays([d], s)).buffer_sizes)
                    size = out.buffer_sizes[0]
                    dec, back = t(lambda: codec.decode(out, data_type=d.dtype.str))
                    cfg = codec.decompression_config(out)
                    dec_cfg, _ = t(lambda: codec.decode(out, data_type=d.dtype.str, decompression_config=cfg))
                    target = cp.empty_like(d)
                    dst = nv.as_arrays([target], s)
                    dec_into, _ = t(lambda: codec.decode(out, out=dst, decompression_config=cfg))
                    ok = bool(cp.array_equal(target, d))
                    gb = d.nbytes / 1e9
                    print(f"{alloc:6} {mode:10} L{level} {name:18} ratio {d.nbytes / size:7.2f}  wrap {wrap:.3f} ms  "
                          f"encode {enc:.3f} ms ({gb / enc * 1e3:.0f} GB/s) with sizes read {both:.3f}  "
                          f"decode {dec:.3f} ({gb / dec * 1e3:.0f} GB/s) with config {dec_cfg:.3f} "
                          f"into place {dec_into:.3f} ({gb / dec_into * 1e3:.0f} GB/s) ok={ok}", flush=True)


def codec_steps():
    """gpujoin's DeviceCodec at several sizes: encode, decode, and encode's steps."""
    from gpujoin.dist import cascaded

    rng = np.random.default_rng(0)
    for log2 in (20, 21, 23, 26):
        d = cp.asarray(np.sort(rng.integers(0, 1 << 40, 1 << log2)))
        c = cascaded.DeviceCodec(d.dtype, cascaded.Scheme(2, 1, True))
        s = c.stream
        enc, (buf, offs, sizes) = t(lambda: c.encode([d]))
        out = cp.empty_like(d)
        dec, _ = t(lambda: c.decode([buf[:sizes[0]]], [out]))
        gb = d.nbytes / 1e9
        # which use of one Codec slows its encoding: a size-bound query, or a decode
        sym = dict(algorithm="Cascaded", data_type="<i8", cuda_stream=s, mode=nv.CascadedMode.SYMMETRIC)
        fresh = nv.Codec(**sym)
        enc_fresh, _ = t(lambda: fresh.encode(nv.as_arrays([d], s)).buffer_sizes)
        fresh.get_max_comp_buffer_size(nv.as_array(d, s))
        enc_bound, _ = t(lambda: fresh.encode(nv.as_arrays([d], s)).buffer_sizes)
        other = nv.Codec(**sym)
        other.decode(nv.as_arrays([buf[:sizes[0]]], s), out=nv.as_arrays([out], s))
        enc_dec, _ = t(lambda: other.encode(nv.as_arrays([d], s)).buffer_sizes)
        print(f"DeviceCodec 2^{log2} int64: encode {enc:.3f} ms ({gb / enc * 1e3:.0f} GB/s), decode {dec:.3f} ms "
              f"({gb / dec * 1e3:.0f} GB/s), ok={bool(cp.array_equal(out, d))}; one Codec encoding: fresh "
              f"{enc_fresh:.3f} ms, after a size bound {enc_bound:.3f}, after a decode {enc_dec:.3f}", flush=True)


if "--codec" in sys.argv:
    codec_steps()
else:
    main()
