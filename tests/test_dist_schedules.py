"""The multi-GPU joins' host-side plans (issue 15): paper 000's ring schedule and the merge-path
cuts of the global sort-merge join, with duplicates and bands across the cuts."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpujoin.dist.merge_path import join_ranges, split
from gpujoin.dist.nested_loop import ring_schedule


@pytest.mark.parametrize("m,n,d", [(1, 1, 1), (4, 4, 2), (8, 8, 4), (5, 7, 2), (3, 10, 4), (7, 2, 3), (2, 9, 8)])
def test_ring_joins_every_chunk_pair_once(m, n, d):
    rounds = ring_schedule(m, n, d)
    pairs = [(st_.r, st_.s) for rnd in rounds for st_ in rnd]
    assert sorted(pairs) == [(i, j) for i in range(m) for j in range(n)]
    for rnd in rounds:  # a GPU does one thing a round, and keeps its R chunk
        assert len({x.gpu for x in rnd}) == len(rnd)
        assert all(x.r % d == x.gpu for x in rnd)
    host = sum(1 for rnd in rounds for x in rnd if x.source is None)
    groups = -(-m // d)
    assert host == sum(n for _ in range(groups))  # S crosses PCIe once a group of R chunks
    held = {}  # a peer step receives what the previous GPU held the round before
    for rnd in rounds:
        now = {x.gpu: x.s for x in rnd}
        for x in rnd:
            if x.source is not None:
                assert held.get(x.source) == x.s
        held = now


def test_ring_refuses_nothing_to_do():
    with pytest.raises(ValueError, match="at least one"):
        ring_schedule(0, 3, 2)


@settings(max_examples=100, deadline=None)
@given(a=st.lists(st.integers(-5, 5), max_size=30), b=st.lists(st.integers(-5, 5), max_size=30),
       data=st.data())
def test_split_is_the_merge_prefix(a, b, data):
    a, b = np.sort(np.array(a, np.int64)), np.sort(np.array(b, np.int64))
    diag = data.draw(st.integers(0, a.size + b.size))
    i, j = split(a, b, diag)
    assert i + j == diag
    merged = np.sort(np.concatenate([a, b]), kind="stable")
    assert sorted(np.concatenate([a[:i], b[:j]]).tolist()) == merged[:diag].tolist()


@settings(max_examples=150, deadline=None)
@given(r=st.lists(st.integers(-20, 20), max_size=40), s=st.lists(st.integers(-20, 20), max_size=40),
       parts=st.integers(1, 6), band=st.integers(0, 4), extreme=st.booleans())
def test_join_ranges_find_every_pair_once(r, s, parts, band, extreme):
    r, s = np.sort(np.array(r, np.int64)), np.sort(np.array(s, np.int64))
    if extreme:  # keys at the ends of int64: the band must not wrap around
        r = np.sort(np.concatenate([r, [np.iinfo(np.int64).min, np.iinfo(np.int64).max]]))
        s = np.sort(np.concatenate([s, [np.iinfo(np.int64).min + 1, np.iinfo(np.int64).max - 1]]))
    pieces = join_ranges(r, s, parts, band)
    assert len(pieces) <= parts
    covered = [i for lo, hi, _, _ in pieces for i in range(lo, hi)]
    assert covered == list(range(r.size))  # R's rows: each in exactly one piece
    want = sorted((i, j) for i in range(r.size) for j in range(s.size) if abs(int(r[i]) - int(s[j])) <= band)
    got = sorted((i, j) for lo, hi, slo, shi in pieces for i in range(lo, hi) for j in range(slo, shi)
                 if abs(int(r[i]) - int(s[j])) <= band)
    assert got == want
    if band == 0:  # equality: no key straddles a cut, so no S row is read by two pieces
        assert all(a[3] <= b[2] for a, b in zip(pieces, pieces[1:]))
        assert all(r[a[1] - 1] < r[b[0]] for a, b in zip(pieces, pieces[1:]))


def test_resolve_gpus(monkeypatch):
    import gpujoin.dist.devices as devices

    monkeypatch.setattr(devices, "device_count", lambda: 2)
    assert devices.resolve_gpus(None) is None
    assert devices.resolve_gpus(2) == [0, 1] and devices.resolve_gpus([1]) == [1]
    for bad, err, match in [(3, ValueError, "more GPUs than this host has"), (0, ValueError, "no GPU"),
                            ([0, 0], ValueError, "twice"), ([2], ValueError, "no device 2"),
                            ("2", TypeError, "number of GPUs"), ([0.5], TypeError, "device ids"),
                            (True, TypeError, "number of GPUs")]:
        with pytest.raises(err, match=match):
            devices.resolve_gpus(bad)


def test_short_switch_interval_nests_and_restores():
    """The GPUs' threads run at a 1 ms switch interval; the caller's interval comes back when
    the last of nested or concurrent holders leaves, also on an error; a shorter one is kept."""
    import sys
    import threading

    from gpujoin.dist.devices import short_switch_interval

    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        with short_switch_interval():
            assert sys.getswitchinterval() == pytest.approx(1e-3)
            inside, leave = threading.Event(), threading.Event()

            def other():
                with short_switch_interval():
                    inside.set()
                    leave.wait()

            t = threading.Thread(target=other)
            t.start()
            inside.wait()
        assert sys.getswitchinterval() == pytest.approx(1e-3)  # the other thread still holds it
        leave.set()
        t.join()
        assert sys.getswitchinterval() == pytest.approx(0.005)
        with pytest.raises(KeyError), short_switch_interval():
            raise KeyError("x")
        assert sys.getswitchinterval() == pytest.approx(0.005)
        sys.setswitchinterval(1e-4)
        with short_switch_interval():
            assert sys.getswitchinterval() == pytest.approx(1e-4, rel=0.05)
    finally:
        sys.setswitchinterval(before)


def test_join_rejects_gpus_on_the_cpu():
    import gpujoin

    t = {"k": np.arange(3)}
    with pytest.raises(ValueError, match="device='cpu'"):
        gpujoin.join(t, t, "k", device="cpu", gpus=2)


def test_assign_partitions_balances_pairs():
    from gpujoin.dist.hybrid import assign_partitions

    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 1000, 64)
    sizes[5] = 0
    parts = assign_partitions(sizes, 3)
    assert sorted(p for ps in parts for p in ps) == [p for p in range(64) if p != 5]
    loads = [int(sizes[ps].sum()) for ps in parts]
    assert max(loads) <= sum(loads) / 3 + sizes.max()  # LPT: within one pair of the mean
    assert assign_partitions(np.zeros(4, np.int64), 2) == [[], []]


def test_partition_queue_hands_each_id_to_one_thread():
    """The hybrid join's pass-2 queue: threads draining it at once get every id once, in order."""
    import threading

    from gpujoin.outofcore.triton import PartitionQueue

    q = PartitionQueue(np.arange(20_000)[::-1])
    got = [[] for _ in range(4)]
    threads = [threading.Thread(target=lambda mine: mine.extend(q), args=(g,)) for g in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(p for g in got for p in g) == list(range(20_000))
    assert all(g == sorted(g, reverse=True) for g in got) and next(q, None) is None


def test_multi_gpu_placement():
    from gpujoin.plan.placement import plan_placement

    one = plan_placement([1 << 30, 1 << 30], [8, 8], 16 << 30)
    two = plan_placement([1 << 30, 1 << 30], [8, 8], 16 << 30, gpus=2)
    assert two.gpus == 2 and two.bits >= max(one.bits, 4)
    assert two.spill_bytes == max(0, two.input_bytes - 2 * two.cache_bytes) < one.spill_bytes
    assert two.predict()["pass2"] < one.predict()["pass2"]
    small = plan_placement([1000, 1000], [8, 8], 16 << 30, gpus=4)  # fits, but 4 GPUs share it: partitioned
    assert small.placement == "out-of-core" and small.bits == 5 and small.spill_bytes == 0


@settings(max_examples=60, deadline=None)
@given(r=st.lists(st.integers(-50, 50), max_size=120), s=st.lists(st.integers(-50, 50), max_size=120),
       parts=st.integers(1, 5), band=st.integers(0, 4), limit=st.integers(16, 2000), narrow=st.booleans())
def test_gsm_pieces_find_every_pair_once(r, s, parts, band, limit, narrow):
    """GSM's join pieces (key-snapped merge-path cuts, band halos, heavy pieces halved until they
    fit ``limit`` bytes, an S half's R rows narrowed to those its keys can match or not): every
    pair within the band lies in exactly one piece's rectangle."""
    from gpujoin.dist.gsm import _pieces
    from gpujoin.dist.merge_path import join_ranges

    rk, sk = np.sort(np.array(r, np.int64)), np.sort(np.array(s, np.int64))
    keys = (rk, sk, band) if narrow else None
    pieces = _pieces(join_ranges(rk, sk, parts, band), limit, 16, 16, keys) if rk.size else []
    seen = {}
    for r0, r1, s0, s1 in pieces:
        for i in range(r0, r1):
            for j in range(s0, s1):
                if abs(int(rk[i]) - int(sk[j])) <= band:
                    seen[i, j] = seen.get((i, j), 0) + 1
    want = {(i, j) for i in range(rk.size) for j in range(sk.size) if abs(int(rk[i]) - int(sk[j])) <= band}
    assert set(seen) == want and all(c == 1 for c in seen.values())
    if narrow and rk.size:  # narrowed pieces read no more R rows than plain halves
        plain = _pieces(join_ranges(rk, sk, parts, band), limit, 16, 16)
        assert sum(p[1] - p[0] for p in pieces) <= sum(p[1] - p[0] for p in plain)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=300), runs=st.integers(1, 5),
       dtype=st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"]))
def test_cascaded_round_trips_any_integers(values, runs, dtype):
    from gpujoin.dist import cascaded as c

    info = np.iinfo(dtype)
    col = np.repeat(np.array([min(max(v, info.min), info.max) for v in values], dtype), runs)
    for scheme in c.SCHEMES:
        back = c.from_bytes(c.to_bytes(c.encode(np, col, scheme)))
        assert back.dtype == col.dtype and np.array_equal(back, col), scheme


def test_partition_copies_bring_every_row_of_a_range():
    """PartitionedRelation.copies: the (destination, source, bytes) list that pass 2 issues in
    one batch brings rows [lo, hi) of partition p, in piece order, from pieces in host memory,
    this GPU's cache and another GPU's; the bytes from the host and from peers are counted."""
    import ctypes

    from gpujoin.outofcore.partition import PartitionedRelation, Piece

    rng = np.random.default_rng(5)
    bits = 3
    for trial in range(30):
        pieces, parts = [], []
        for c in range(int(rng.integers(0, 6))):
            n = int(rng.integers(0, 40))
            digit = np.sort(rng.integers(0, 1 << bits, n))
            key = rng.integers(-1 << 40, 1 << 40, n).astype(np.int64)
            val = rng.integers(0, 1 << 15, n).astype(np.int16)
            offsets = np.searchsorted(digit, np.arange((1 << bits) + 1)).astype(np.int64)
            where = int(rng.integers(0, 3))  # host, this GPU (0), GPU 1
            pc = Piece([key, val], offsets, where > 0, where - 1)
            pc._addresses = [key.ctypes.data, val.ctypes.data]
            pieces.append(pc)
            parts.append((key, val, offsets, where))
        rel = PartitionedRelation(bits, [np.dtype(np.int64), np.dtype(np.int16)], pieces)
        p = int(rng.integers(0, 1 << bits))
        whole_k = np.concatenate([k[o[p]:o[p + 1]] for k, _, o, _ in parts] or [np.zeros(0, np.int64)])
        whole_v = np.concatenate([v[o[p]:o[p + 1]] for _, v, o, _ in parts] or [np.zeros(0, np.int16)])
        lo = int(rng.integers(0, whole_k.size + 1))
        hi = int(rng.integers(lo, whole_k.size + 1))
        out_k, out_v = np.zeros(hi - lo, np.int64), np.zeros(hi - lo, np.int16)
        dsts, srcs, sizes, h2d, p2p, on_host = rel.copies(p, lo, hi, [out_k.ctypes.data, out_v.ctypes.data], 0)
        assert len(dsts) == len(srcs) == len(sizes) and all(n > 0 for n in sizes)
        for d, s, n in zip(dsts, srcs, sizes):
            ctypes.memmove(d, s, n)
        np.testing.assert_array_equal(out_k, whole_k[lo:hi])
        np.testing.assert_array_equal(out_v, whole_v[lo:hi])
        origin = np.concatenate([np.full(o[p + 1] - o[p], w) for _, _, o, w in parts] or [np.zeros(0, int)])[lo:hi]
        assert h2d == int((origin == 0).sum()) * 10 and p2p == int((origin == 2).sum()) * 10
        assert len(on_host) == len(sizes) and sum(n for n, h in zip(sizes, on_host) if h) == h2d  # by source


def test_fetch_ranges_puts_gpu_pieces_on_the_device_stream(monkeypatch):
    """fetch_ranges: with a device stream, the copies from GPU memory go on it (after what the
    host stream waits for) and the host stream waits for them after its own batch; without one,
    every copy goes on the host stream.  The copies themselves run on the host here."""
    import ctypes
    import sys
    import types

    from gpujoin.outofcore import partition as part_mod
    from gpujoin.outofcore import stream as st_mod
    from gpujoin.outofcore.partition import PartitionedRelation, Piece, TransferStats

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=0)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    log = []

    class Stream:
        def __init__(self, name):
            self.name = name

        def wait_event(self, ev):
            log.append((self.name, "waits", ev))

    def copy_batch(dsts, srcs, sizes, stream):
        log.append((stream.name, "copies", len(sizes)))
        for d, src, n in zip(dsts, srcs, sizes):  # (int64 arrays of addresses)
            ctypes.memmove(int(d), int(src), int(n))

    monkeypatch.setattr(st_mod, "copy_batch", copy_batch)
    monkeypatch.setattr(st_mod, "record", lambda s: f"after {s.name}")
    keys = [np.arange(10, dtype=np.int64) + 100 * i for i in range(3)]
    pieces = []
    for i, k in enumerate(keys):  # host, this GPU's cache, GPU 1's cache
        pc = Piece([k], np.array([0, 4, 10]), i > 0, i - 1)
        pc._addresses = [k.ctypes.data]
        pieces.append(pc)
    rel = PartitionedRelation(1, [np.dtype(np.int64)], pieces)
    want = np.concatenate([k[4:] for k in keys])

    class Out:  # a device array's address, host memory here
        def __init__(self, a):
            self.data = types.SimpleNamespace(ptr=a.ctypes.data)

    for device_stream in (None, Stream("copy-out")):
        log.clear()
        got, stats = np.zeros(18, np.int64), TransferStats()
        assert part_mod.fetch_ranges([(rel, 1, 0, 18, [Out(got)])], Stream("copy-in"), stats, device_stream) == 48
        np.testing.assert_array_equal(got, want)
        assert (stats.h2d, stats.p2p) == (48, 48)
        if device_stream is None:
            assert log == [("copy-in", "copies", 3)]
        else:
            assert log == [("copy-out", "waits", "after copy-in"), ("copy-out", "copies", 2),
                           ("copy-in", "copies", 1), ("copy-in", "waits", "after copy-out")]


def test_shuffle_chunk_rows_from_the_environment(monkeypatch):
    """GPUJOIN_SHUFFLE_CHUNK_ROWS sets the pipelined shuffle's chunk (a count or 1e8-style);
    anything else is refused by name, with the default it would have used."""
    from gpujoin.dist import device_shuffle as ds

    monkeypatch.delenv("GPUJOIN_SHUFFLE_CHUNK_ROWS", raising=False)
    assert ds.chunk_rows_default() == ds.CHUNK_ROWS
    for text, rows in (("134217728", 1 << 27), ("1e8", 100_000_000), (" 4096 ", 4096)):
        monkeypatch.setenv("GPUJOIN_SHUFFLE_CHUNK_ROWS", text)
        assert ds.chunk_rows_default() == rows
    for bad in ("0", "-5", "2.5", "lots", "nan", "inf"):
        monkeypatch.setenv("GPUJOIN_SHUFFLE_CHUNK_ROWS", bad)
        with pytest.raises(ValueError, match="GPUJOIN_SHUFFLE_CHUNK_ROWS"):
            ds.chunk_rows_default()


def test_pass2_takes_each_pair_once_and_prefetches_the_next():
    """TritonJoin._pass2's schedule, the GPU work stubbed: two workers sharing a PartitionQueue
    (taking turns, as two GPUs' threads might) fetch every non-empty pair once, each fetch of
    the next pair before the join of the one before, and the pairs past the limit last, in
    blocks; a list of partitions does the same on one worker."""
    import types

    from gpujoin.outofcore.triton import PartitionQueue, TritonJoin
    from gpujoin.plan.placement import Placement

    rsz = np.array([5, 0, 7, 1 << 20, 3, 0, 9, 2])  # partition 3: a pair past the limit
    ssz = np.array([5, 0, 0, 1 << 20, 0, 0, 9, 2])
    rel = types.SimpleNamespace(sizes=lambda: rsz, width=8, fanout=8)
    rel_s = types.SimpleNamespace(sizes=lambda: ssz, width=8, fanout=8)

    def worker(log):
        w = object.__new__(TritonJoin)
        w.placement = Placement("out-of-core", 64 << 20, 3, 1024, 0, 0)
        w.transfer_only, w.split_partitions = False, 0
        w.streams = types.SimpleNamespace(compute=types.SimpleNamespace(wait_event=lambda ev: None))
        w._fetch_pair = lambda R, S, p, a, b: (log.append(("fetch", p)) or ((p, p), None))
        w._join_pair = lambda Rp, Sp, mode: log.append(("join", Rp))
        w._join_big = lambda R, S, p, nr, ns, limit, mode: log.append(("big", p))
        return w

    logs = [[], []]
    workers = [worker(log) for log in logs]
    q = PartitionQueue(range(8))
    workers[0]._pass2(rel, rel_s, "inner", q)  # the first worker takes them all ...
    workers[1]._pass2(rel, rel_s, "inner", q)  # ... and the second finds the queue empty
    assert logs[0] == [("fetch", 0), ("fetch", 2), ("join", 0), ("fetch", 4), ("join", 2), ("fetch", 6),
                       ("join", 4), ("fetch", 7), ("join", 6), ("join", 7), ("big", 3)]
    assert logs[1] == [] and workers[0].joined == [0, 2, 3, 4, 6, 7] and workers[1].joined == []
    assert workers[0].split_partitions == 1
    one = []
    w = worker(one)
    w._pass2(rel, rel_s, "inner", [6, 1, 3, 0])
    assert one == [("fetch", 6), ("fetch", 0), ("join", 6), ("join", 0), ("big", 3)] and w.joined == [6, 3, 0]
