"""Cascaded compression of integer columns (paper 001 §5, nvCOMP's "cascaded" codec): run-length
encoding, then delta encoding of the run values, then bit-packing of every stream with a frame of
reference (each value stored as value - min in the bits that max - min needs), each layer on or
off; a selector tries every combination on a sample of the column and keeps the smallest, as
paper 001 chooses a scheme per column (its Table 1).

Array code over NumPy or CuPy (``xp``): the host shuffle compresses with NumPy; on the GPU,
nvCOMP's cascaded codec is the one to use where it is installed, this module the fallback.

Streams are int64 while encoding (deltas wrap around as two's complement, which decoding undoes
exactly); bit-packed words are uint64, 64 values at a time: value slot s of a group starts at
bit s * bits, so one vectorized operation per slot packs every group at once.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import struct
import threading
from dataclasses import asdict, dataclass

import numpy as np

from ..outofcore.budget import on_memory_cap

#: Values of a column the selector tries the schemes on.
SAMPLE = 1 << 16


@dataclass(frozen=True)
class Scheme:
    """How many run-length and delta layers run, and whether bit-packing ends the cascade
    (nvCOMP's num_RLEs, num_deltas, use_bp).  Layer i runs RLE (when i < rle: the values become
    the runs' values, their lengths a stream of their own) and then delta (when i < delta) on the
    values; bit-packing then packs every stream."""

    rle: int = 0
    delta: int = 0
    bitpack: bool = False

    def __str__(self) -> str:
        parts = [f"{n}{'' if k == 1 else f' x{k}'}" for n, k in (("RLE", self.rle), ("delta", self.delta)) if k]
        return "+".join(parts + (["bitpack"] if self.bitpack else [])) or "none"


#: The configurations the selector tries (paper 001's Table 1 uses up to 2 RLEs and 1 delta).
SCHEMES = [Scheme(r, d, bool(b)) for r, d, b in itertools.product((0, 1, 2), (0, 1, 2), (0, 1))]


def _rle(xp, x):
    """(run values, run lengths) of ``x``."""
    if x.size == 0:
        return x, xp.zeros(0, xp.int64)
    starts = xp.flatnonzero(xp.concatenate([xp.ones(1, bool), x[1:] != x[:-1]]))
    lengths = xp.diff(xp.concatenate([starts, xp.asarray([x.size])]))
    return x[starts], lengths.astype(xp.int64)


def _unrle(xp, values, lengths):
    return xp.repeat(values, lengths)


def _delta(xp, x):
    """(first value, differences of the rest): the first stays out of the packed stream, whose
    frame then fits the differences alone (a sorted or dense column packs to a few bits)."""
    if x.size == 0:
        return 0, x
    return int(x[0]), x[1:] - x[:-1]  # int64 wrap-around is undone by the cumulative sum


def _undelta(xp, first: int, d):
    return xp.cumsum(xp.concatenate([xp.asarray([first], xp.int64), d]), dtype=xp.int64)


def _bits(span: int) -> int:
    return int(span).bit_length()


def pack(xp, x) -> tuple[object, int, int]:
    """(uint64 words, bits, frame of reference) of int64 ``x``: x - ref in ``bits`` bits each."""
    if x.size == 0:
        return xp.zeros(0, xp.uint64), 0, 0
    ref = int(x.min())
    u = (x - xp.int64(ref)).view(xp.uint64)  # wraps: the unsigned difference, exact
    bits = _bits(int(u.max()))
    if bits == 0:
        return xp.zeros(0, xp.uint64), 0, ref
    groups = -(-x.size // 64)
    v = xp.zeros(groups * 64, xp.uint64)
    v[:x.size] = u
    v = v.reshape(groups, 64)
    out = xp.zeros((groups, bits), xp.uint64)
    for s in range(64):
        pos = s * bits
        w, off = pos // 64, pos % 64
        out[:, w] |= v[:, s] << xp.uint64(off)
        if off + bits > 64:
            out[:, w + 1] |= v[:, s] >> xp.uint64(64 - off)
    return out.reshape(-1), bits, ref


def unpack(xp, words, bits: int, ref: int, n: int):
    """The int64 values :func:`pack` packed."""
    if bits == 0:
        return xp.full(n, ref, xp.int64)
    groups = -(-n // 64)
    w2 = words.reshape(groups, bits)
    v = xp.empty((groups, 64), xp.uint64)
    mask = xp.uint64((1 << bits) - 1) if bits < 64 else xp.uint64(0xFFFFFFFFFFFFFFFF)
    for s in range(64):
        pos = s * bits
        w, off = pos // 64, pos % 64
        x = w2[:, w] >> xp.uint64(off)
        if off + bits > 64:
            x |= w2[:, w + 1] << xp.uint64(64 - off)
        v[:, s] = x & mask
    with np.errstate(over="ignore"):
        return v.reshape(-1)[:n].view(xp.int64) + xp.int64(ref)


def _packed_bytes(xp, x) -> int:
    """Bytes of int64 stream ``x`` bit-packed (without packing it)."""
    if x.size == 0:
        return 0
    return -(-x.size // 64) * _bits(int(x.max()) - int(x.min())) * 8 + 16


def _layers(xp, column, scheme: Scheme) -> tuple[dict, list]:
    """The streams ``scheme``'s RLE and delta layers make of ``column`` ({name: int64 array},
    the run lengths of each RLE layer and the values) and each delta layer's [layer, first value,
    rows before it]."""
    values = column.astype(xp.int64)
    streams, firsts = {}, []
    for i in range(max(scheme.rle, scheme.delta)):
        if i < scheme.rle:
            values, streams[f"lengths{i}"] = _rle(xp, values)
        if i < scheme.delta:
            size = int(values.size)
            first, values = _delta(xp, values)
            firsts.append([i, first, size])
    streams["values"] = values
    return streams, firsts


def encode(xp, column, scheme: Scheme) -> dict:
    """``column`` (an integer array) under ``scheme``: {"n", "dtype", "scheme", "streams":
    {name: (array, bits, ref)}, "<name>_n": rows of each stream} (bits None: the stream is
    stored as int64)."""
    streams, firsts = _layers(xp, column, scheme)
    enc = {"n": int(column.size), "dtype": str(column.dtype), "scheme": scheme, "streams": {}, "firsts": firsts}
    for name, s in streams.items():
        enc["streams"][name] = pack(xp, s) if scheme.bitpack else (s, None, 0)
        enc[f"{name}_n"] = int(s.size)
    return enc


def decode(xp, enc: dict):
    """The column :func:`encode` encoded."""
    scheme = enc["scheme"]
    streams = {}
    for name, (arr, bits, ref) in enc["streams"].items():
        streams[name] = arr if bits is None else unpack(xp, arr, bits, ref, enc[f"{name}_n"])
    values = streams["values"]
    firsts = {i: (first, size) for i, first, size in enc["firsts"]}
    for i in reversed(range(max(scheme.rle, scheme.delta))):
        if i in firsts and firsts[i][1]:
            values = _undelta(xp, firsts[i][0], values)
        if i < scheme.rle:
            values = _unrle(xp, values, streams[f"lengths{i}"])
    return values.astype(enc["dtype"])


def encoded_bytes(xp, column, scheme: Scheme) -> int:
    """Bytes ``column`` takes under ``scheme`` (streams and their headers)."""
    streams = _layers(xp, column, scheme)[0].values()
    return sum(_packed_bytes(xp, s) if scheme.bitpack else int(s.size) * 8 for s in streams) + 16 * len(streams)


def select(xp, column) -> tuple[Scheme, float]:
    """The scheme that compresses a sample of ``column`` (its first ``SAMPLE`` values) most, and
    the sample's ratio (raw bytes over encoded); plain storage when nothing beats it."""
    sample = column[:SAMPLE]
    raw = int(sample.size) * sample.dtype.itemsize
    if raw == 0:
        return Scheme(), 1.0
    best = min(SCHEMES, key=lambda s: (encoded_bytes(xp, sample, s) if s != Scheme() else raw,
                                       s.rle + s.delta + s.bitpack))
    size = raw if best == Scheme() else encoded_bytes(xp, sample, best)
    if size >= raw:
        return Scheme(), 1.0
    return best, raw / size


# ---------------------------------------------------------------- bytes on the wire (host)
def to_bytes(enc: dict) -> bytes:
    """A NumPy encoding as one message: a JSON header (its length first), then the streams."""
    header = {"n": enc["n"], "dtype": enc["dtype"], "scheme": asdict(enc["scheme"]), "firsts": enc["firsts"],
              "streams": []}
    blobs = []
    for name, (arr, bits, ref) in enc["streams"].items():
        a = np.ascontiguousarray(arr)
        header["streams"].append([name, int(a.size), str(a.dtype), bits, ref, enc[f"{name}_n"]])
        blobs.append(a.tobytes())
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def from_bytes(buf: bytes) -> np.ndarray:
    """The column a :func:`to_bytes` message holds (NumPy)."""
    (hlen,) = struct.unpack_from("<Q", buf)
    header = json.loads(buf[8:8 + hlen])
    pos = 8 + hlen
    enc = {"n": header["n"], "dtype": header["dtype"], "scheme": Scheme(**header["scheme"]), "streams": {},
           "firsts": header["firsts"]}
    for name, size, dtype, bits, ref, rows in header["streams"]:
        arr = np.frombuffer(buf, dtype, size, pos)
        pos += arr.nbytes
        enc["streams"][name] = (arr, bits, ref)
        enc[f"{name}_n"] = rows
    return decode(np, enc)


# ---------------------------------------------------------------- on the GPU: nvCOMP
#: Values of a GPU column the selector reads (copied to the host): 16,384 took 1-1.6 ms of
#: NumPy a column on a 2-core host, 65,536 up to 17 ms, against a shuffle of a few ms.
DEVICE_SAMPLE = 1 << 14
#: nvCOMP's alignment of every buffer it reads or writes (Codec.get_required_*_alignment is at
#: most this): compressed messages start at multiples of it.
ALIGN = 16


def nvcomp():
    """The ``nvidia.nvcomp`` module (wheel ``nvidia-nvcomp-cu13``, or ``-cu12``), or None."""
    try:
        from nvidia import nvcomp as nv
    except ImportError:
        return None
    return nv


def nvcomp_missing() -> str | None:
    """Why this process cannot import nvCOMP, with what to install; None when it can.  (The
    Python wheel alone, installed with --no-deps on the 4-H200 machines, failed on
    ``libnvcomp.so.6``: the library is the separate wheel ``nvidia-libnvcomp-cu13``.)"""
    import importlib

    try:
        importlib.import_module("nvidia.nvcomp")
    except ImportError as e:
        return (f"nvCOMP cannot be imported ({e}): pip install nvidia-nvcomp-cu13 (-cu12 for CUDA 12), which "
                f"brings its library wheel nvidia-libnvcomp-cu13")
    return None


def device_compressible(dtype) -> bool:
    """Whether nvCOMP's cascaded codec takes a column of ``dtype`` (integers of any width)."""
    return np.dtype(dtype).kind in "iu"


#: nvCOMP 6's Cascaded mode (GPUJOIN_NVCOMP_MODE): "symmetric" (its terminal implementation,
#: balanced) or "asymmetric" (per-chunk stage selection for ratio).  scripts/profile_nvcomp.py on
#: an H100, 2^26 sorted int64 keys, CuPy's pool allocating: symmetric ratio 3.58, encode 380 GB/s,
#: decode into place 704 GB/s; asymmetric level 3 ratio 3.62, 87 and 589 GB/s; 2^26 int32 codes
#: 0..4: symmetric 9.43, 310 and 654 GB/s, asymmetric 10.20, 88 and 516.
NVCOMP_MODE = os.environ.get("GPUJOIN_NVCOMP_MODE", "symmetric")


def nvcomp_options(scheme: Scheme, dtype) -> dict:
    """nvCOMP 6's Cascaded options for the selector's ``scheme`` on ``dtype``: NVCOMP_MODE
    (symmetric mode takes 4- and 8-byte integers only: narrower ones go asymmetric), and in
    asymmetric mode as many optional stages (``compression_level``) as the scheme has RLE and delta layers
    (at least one).  nvCOMP 6 chooses which stages run for each 64 KiB chunk itself and always
    ends with bit-packing over a frame of reference; its ``fine_grained_encodings`` option, which
    would name the stages, failed on every value in 6.0.0 ("Failed to query alignment
    requirements: code=11", on an H100).  So the paper's per-column selector decides whether a
    column is compressed at all (:func:`select`'s "none" is sent as is) and, in asymmetric mode,
    how far nvCOMP may go."""
    nv = nvcomp()
    if NVCOMP_MODE == "asymmetric" or np.dtype(dtype).itemsize < 4:
        return {"mode": nv.CascadedMode.ASYMMETRIC, "compression_level": max(1, scheme.rle + scheme.delta)}
    return {"mode": nv.CascadedMode.SYMMETRIC}


def device_select(column) -> Scheme:
    """:func:`select` over the first DEVICE_SAMPLE values of GPU ``column`` (a CuPy array)."""
    import cupy as cp

    return select(np, cp.asnumpy(column[:DEVICE_SAMPLE]))[0]


class DeviceCodec:
    """Paper 001's cascaded codec on the GPU: nvCOMP's "Cascaded" (its native bitstream, whose
    header carries the configuration, so a receiver decodes without being told the scheme) for
    CuPy integer arrays of one ``dtype`` under the selector's ``scheme``, on the current stream.

    Raises
    ------
    ImportError
        nvCOMP cannot be imported (the message says why and what to install).
    """

    _codecs: dict = {}
    _lock = threading.Lock()  # (threads of a multi-GPU join make, use and let go of codecs at once)
    _ready = False  # nvCOMP's allocator set and the hooks registered (once: the cache may empty)
    #: The most Codecs kept (the oldest let go first): each holds scratch from CuPy's pool, and
    #: a key per dtype, scheme and stream would otherwise grow without bound.
    CODECS_KEPT = 48

    def __init__(self, dtype, scheme: Scheme):
        import cupy as cp

        nv = nvcomp()
        if nv is None:
            raise ImportError(f"cascaded compression of GPU columns needs nvCOMP: {nvcomp_missing()}; "
                              "or use compression='none'")
        if not DeviceCodec._ready:
            DeviceCodec._ready = True
            # nvCOMP's buffers from CuPy's pool: with its own allocator (cudaMalloc and cudaFree
            # a call) 2^26 int64 took 3.97 ms to encode and 2.56 to decode, from the pool 1.41
            # and 0.87 (H100, scripts/profile_nvcomp.py)
            nv.set_device_allocator(lambda nbytes, stream: cp.cuda.alloc(nbytes))
            atexit.register(DeviceCodec._release)
            on_memory_cap(DeviceCodec._on_memory_cap)  # (their scratch must not eat a memory_limit)
        self.nv, self.dtype = nv, np.dtype(dtype)
        stream = cp.cuda.get_current_stream()
        self.stream = stream.ptr
        # one Codec each for encoding, decoding and the size bound: in one run a Codec doing all
        # three took 1.2 ms to encode 2^20 int64 and one that only encoded 0.24 (H100; the next
        # run gave 1.5 ms for either, so this is a precaution, not a measured gain)
        self.encoder, self.decoder, self.sizer = (
            self._codec(role, scheme, nv.Codec, cp.cuda.Device().id, stream) for role in ("encode", "decode", "bound"))
        self._stream = stream  # (after the codecs: an instance's attributes go in the order set)

    def _codec(self, role: str, scheme: Scheme, make, device: int, stream):
        key = (role, self.dtype.str, scheme, self.stream, device)
        codecs = self._codecs
        with DeviceCodec._lock:
            got = codecs.pop(key, None)  # (re-inserted: the dict's order is the use order)
            if got is not None:
                codecs[key] = got
                return got[1]
        # a Codec keeps its scratch buffers between calls; kept as (stream, codec), the CuPy
        # stream it works on first, so that even a tuple dropped whole lets go of the codec
        # first (a codec destroyed after its stream crashed the process)
        got = (stream, make(algorithm="Cascaded", data_type=self.dtype.str, cuda_stream=self.stream,
                            **nvcomp_options(scheme, self.dtype)))
        with DeviceCodec._lock:
            old = [(k, codecs.pop(k)) for k in list(codecs)[:max(0, len(codecs) + 1 - self.CODECS_KEPT)]]
            if key in codecs:  # (made by another thread meanwhile)
                old.append((key, codecs.pop(key)))
            codecs[key] = got
        DeviceCodec._let_go(old)
        return got[1]

    @staticmethod
    def _let_go(entries: list) -> None:
        """Drop (key, (stream, codec)) entries taken out of the cache: each codec once its
        device's work is done (its scratch goes back to CuPy's pool), then its stream."""
        import cupy as cp

        while entries:
            key, (stream, codec) = entries.pop()
            with cp.cuda.Device(key[4]):
                cp.cuda.Device(key[4]).synchronize()
                del codec  # (destroyed here unless a DeviceCodec still holds it, with the stream)
            del stream

    @staticmethod
    def _take(drop) -> list:
        """The cache's entries whose key ``drop`` says, taken out of it."""
        with DeviceCodec._lock:
            return [(k, DeviceCodec._codecs.pop(k)) for k in list(DeviceCodec._codecs) if drop(k)]

    @staticmethod
    def _on_memory_cap() -> bool:
        """A memory cap needs the room: the current device's kept codecs let go (True when
        there were any)."""
        import cupy as cp

        dev = cp.cuda.Device().id
        entries = DeviceCodec._take(lambda k: k[4] == dev)
        had = bool(entries)
        DeviceCodec._let_go(entries)
        return had

    @staticmethod
    def _release() -> None:
        """At exit, while Python still runs: the codecs (and the pool memory they hold) let go
        and nvCOMP's own allocator back.  Left to the interpreter's end, the Python allocator
        nvCOMP held was freed after Python had stopped, and the process died of SIGSEGV."""
        import gc

        import cupy as cp

        cp.cuda.Device().synchronize()
        DeviceCodec._let_go(DeviceCodec._take(lambda k: True))
        gc.collect()
        nvcomp().set_device_allocator(None)

    def encode(self, arrays: list) -> tuple[object, list[int], list[int]]:
        """The compressed ``arrays`` (CuPy, this codec's dtype, each non-empty) in one uint8 CuPy
        buffer: (buffer, byte offset of each, bytes of each); offsets are multiples of ALIGN.
        nvCOMP writes into the buffer (from CuPy's pool, room for nvCOMP's bound on each).
        Reads the compressed sizes back (a sync)."""
        import cupy as cp

        arrays = [cp.ascontiguousarray(a) for a in arrays]
        bound = [int(self.sizer.get_max_comp_buffer_size(self.nv.as_array(a, self.stream))) for a in arrays]
        offsets = _aligned_starts(bound)
        buf = cp.empty(offsets[-1] + bound[-1] if bound else 0, cp.uint8)
        out = self.encoder.encode(self.nv.as_arrays(arrays, self.stream),
                                out=self.nv.as_arrays(buf, offsets, bound, self.stream))
        return buf, offsets, [int(s) for s in out.buffer_sizes]

    def decode(self, blobs: list, outs: list) -> None:
        """Decompress each of ``blobs`` (uint8 CuPy views, each starting at a multiple of ALIGN)
        into the CuPy array of ``outs`` at its place (of the codec's dtype, as many values as
        were compressed): straight into place where every one starts at nvCOMP's alignment,
        else into one aligned buffer from CuPy's pool, then copied.  Reads the blobs' headers
        (a sync)."""
        import cupy as cp

        srcs = self.nv.as_arrays(list(blobs), self.stream)
        align = self.decoder.get_required_decompression_alignment()
        if all(o.data.ptr % align == 0 for o in outs):
            self.decoder.decode(srcs, out=self.nv.as_arrays(list(outs), self.stream))
            return
        sizes = [o.nbytes for o in outs]
        offsets = _aligned_starts(sizes)
        tmp = cp.empty(offsets[-1] + sizes[-1], cp.uint8)
        self.decoder.decode(srcs, out=self.nv.as_arrays(tmp, offsets, sizes, self.stream))
        for o, at, n in zip(outs, offsets, sizes):
            o[...] = tmp[at:at + n].view(self.dtype)


def _aligned_starts(sizes: list[int]) -> list[int]:
    """Byte offsets of consecutive buffers of ``sizes``, each rounded up to ALIGN."""
    starts = [0]
    for n in sizes[:-1]:
        starts.append(starts[-1] + -(-n // ALIGN) * ALIGN)
    return starts
