"""The shuffle whose partition does the local join's first radix pass (dist/radix_shuffle.py):
its planning on the CPU; on one GPU, the pass's digits and places, a partition that starts from
a shuffle's received pieces, and PHJ from them.  Two ranks over NCCL: tests/mpi_dist_check.py."""

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gpujoin
from gpujoin.dist import radix_shuffle
from gpujoin.dist.shuffle import SEED_FIRST

SRC = Path(gpujoin.__file__).parent


def test_the_fused_rank_hash_is_the_device_shuffles():
    # partition.cu computes the rank itself: its seed must be the one the device shuffle's
    # destinations use, or equal keys of the two paths would part
    seed = re.search(r"#define SHUFFLE_SEED (0x[0-9A-Fa-f]+)ULL", (SRC / "cuda/kernels/partition.cu").read_text())
    assert int(seed.group(1), 16) == SEED_FIRST


@pytest.mark.parametrize("parts,bits,top,saves", [(2, 17, 8, True), (2, 16, 8, True), (2, 18, 8, False),
                                                  (2, 12, 8, True), (2, 9, 8, False), (2, 8, 8, False),
                                                  (3, 17, 7, False), (4, 16, 7, True), (256, 17, 1, False),
                                                  (512, 17, 0, False)])
def test_top_bits_and_when_they_save_a_pass(parts, bits, top, saves):
    assert radix_shuffle.top_bits(parts, bits) == top
    assert radix_shuffle.saves_a_pass(parts, bits) == saves


def test_the_build_side_is_shuffled_first_and_chunks_are_counted_alike(monkeypatch):
    # dist.join puts the job's build side first (its statistics are read once it is finished,
    # while the other table is on the links); the early counts and the shuffle cut the same chunks
    import importlib

    join = importlib.import_module("gpujoin.dist.join")  # (gpujoin.dist.join is also the function)
    pair, keys = ["L", "R"], ["lk", "rk"]
    assert join._build_first(pair, keys, "inner", 10, 20) == (["L", "R"], ["lk", "rk"])  # (the smaller builds)
    assert join._build_first(pair, keys, "inner", 20, 20) == (["R", "L"], ["rk", "lk"])
    for how, first in (("left", "R"), ("semi", "R"), ("anti", "R"), ("right", "L")):
        assert join._build_first(pair, keys, how, 10, 20)[0][0] == first
    assert [radix_shuffle.chunk_count(n, 100) for n in (0, 1, 100, 101, 1000)] == [1, 1, 1, 2, 10]
    monkeypatch.setenv("GPUJOIN_SHUFFLE_CHUNK_ROWS", "300")
    assert radix_shuffle.chunk_count(601) == 3


def test_the_jobs_radix_bits_and_rescaling_failures_come_from_the_sizes_allgather(monkeypatch):
    # dist.join gathers every rank's sizes, whether its tables can take the radix shuffle and
    # whether its keys' rescaling failed in one allgather: the bits come from it (NCCL asked
    # only where every rank is eligible), a failure on any rank raises on every rank, naming it
    import importlib
    from types import SimpleNamespace

    from gpujoin.errors import SchemaError

    join = importlib.import_module("gpujoin.dist.join")
    asked = []
    comm = SimpleNamespace(size=2, nccl=lambda: asked.append(1) or object(),
                           allgather=lambda x: [None, x] if x is None else [x, None])
    # (PHJ's own bits for the job's rows: cuda.join.phj's rule, which needs CuPy)
    monkeypatch.setattr(join, "_radix_bits", lambda how, nl, nr, parts, kwargs: (how, nl, nr, parts))
    rows = np.array([2**28, 2**29])  # (left, right rows over the ranks)
    assert join._shuffle_radix_bits(False, rows, "inner", comm, {}) is None and asked == []
    assert join._shuffle_radix_bits(True, rows, "left", comm, {}) == ("left", 2**28, 2**29, 2) and asked == [1]
    assert join._shuffle_radix_bits(True, rows, "inner", SimpleNamespace(size=2, nccl=lambda: None), {}) is None
    join._raise_failed(False, None, comm)  # (no rank failed: no collective)
    with pytest.raises(SchemaError, match="^rank 1: past 64 bits"):
        join._raise_failed(True, None, SimpleNamespace(allgather=lambda x: [x, "past 64 bits"]))
    with pytest.raises(SchemaError, match="^rank 0: mine"):
        join._raise_failed(True, "mine", SimpleNamespace(allgather=lambda x: [x, "theirs"]))


def test_the_timeline_reads_as_passes_messages_and_the_finish(monkeypatch):
    # 839df0b's rank 0 at 2^28 rows a rank: each step from the mark before it on its stream
    tl = {"counted": 2.39, "partitioned 0.0": 6.19, "sent 0.0": 9.39, "partitioned 0.1": 9.99, "sent 0.1": 13.19,
          "partitioned 1.0": 13.83, "sent 1.0": 16.99, "partitioned 1.1": 17.63, "sent 1.1": 20.77, "finished 0": 25.55}
    assert radix_shuffle.timeline_summary(tl) == ("counts 2.39, laid out 0.00, passes [3.8, 3.8, 3.84, 3.8], "
                                                  "messages [3.2, 3.2, 3.16, 3.14], first table finished 7.92 "
                                                  "(+4.78 after the last message)")
    # the host's layouts before the first pass, where marked, are not the pass's
    tl = {"counted": 2.39, "planned": 2.89, **{k: v for k, v in tl.items() if k != "counted"}}
    assert radix_shuffle.timeline_summary(tl).startswith("counts 2.39, laid out 0.50, passes [3.3, 3.8,")
    assert radix_shuffle.overlapped()
    monkeypatch.setenv("GPUJOIN_SHUFFLE_OVERLAP", "0")
    assert not radix_shuffle.overlapped()


@pytest.mark.parametrize("P,me,C", [(2, 0, 1), (2, 1, 2), (3, 1, 3), (4, 3, 2)])
def test_layouts_agree_between_senders_and_receivers(P, me, C):
    # every rank's sends to ``me`` land where ``me``'s receives expect them: chunk c's message
    # from rank s starts at s's send start for me, its pieces cover it once, and the receive
    # buffer (after the send buffer, from an aligned row) is covered once
    rng = np.random.default_rng(P * 10 + me)
    rows = rng.integers(0, 100, (P, C, P))
    rows[0, 0, -1] = 0  # an empty message
    layouts = [radix_shuffle._layout(rows, r) for r in range(P)]
    layout, send_at, base = layouts[me]
    others = rows[me].sum() - rows[me, :, me].sum()
    assert base % 16 == 0 and others <= base < others + 16
    assert send_at.tolist() == (np.cumsum(rows[me].sum(axis=1) - rows[me, :, me]) - (rows[me].sum(axis=1)
                                                                                     - rows[me, :, me])).tolist()
    assert layout.rows == rows[:, :, me].sum()
    covered = np.zeros(layout.rows, int)
    for c in range(C):
        for s, pieces in layout.received(c).items():
            sends, _, _ = layouts[s][0].unit(c)
            mine = [(st, n) for j, st, n in sends if j == me]
            assert sum(n for _, n in mine) == rows[s, c, me]
            # s's rows for me lie in its chunk c's part of its send buffer
            lo = layouts[s][1][c]
            assert all(lo <= st and st + n <= lo + rows[s, c].sum() - rows[s, c, s] for st, n in mine)
            spans = sorted((first, n) for _, first, n in pieces if n)  # the message's rows, each once
            assert [f for f, _ in spans] == np.cumsum([0] + [n for _, n in spans])[:-1].tolist()
            assert sum(n for _, n in spans) == rows[s, c, me]
            for at, _, n in pieces:
                covered[at:at + n] += 1
        _, _, (_, own_at, own) = layout.unit(c)
        covered[own_at:own_at + own] += 1
    assert (covered == 1).all()


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 5), st.integers(1, 3), st.integers(0, 3), st.data())
def test_send_recv_scans_place_each_destinations_rows_where_its_message_starts(P, C, top, data):
    # the shifts that each chunk's scan adds (scan_down's, a destination a segment) move rank
    # me's rows for rank d to the start of its message to d in the send buffer, and its own
    # rows to their place in the receive buffer (after the send buffer, from row base)
    G = 1 << top
    me = data.draw(st.integers(0, P - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    counts = rng.integers(0, 40, (P, C, P, G)) * (rng.random((P, C, P, G)) < 0.8)  # (src, chunk, dst, digit)
    rows = counts.sum(axis=3)
    layout, send_at, base = radix_shuffle._layout(rows, me)
    add = radix_shuffle._send_recv_shifts(layout, send_at, base, rows, me)
    assert add.shape == (C, P) and add.dtype == np.int64
    for c in range(C):
        flat = counts[me, c].ravel()  # digit-major: (destination, digit)
        offs = np.cumsum(flat) - flat + np.repeat(add[c], G)
        sends, _, (_, own_at, own_rows) = layout.unit(c)
        for d in range(P):
            lo = offs[d * G]
            np.testing.assert_array_equal(offs[d * G:(d + 1) * G] - lo, np.cumsum(counts[me, c, d]) - counts[me, c, d])
            if d == me:
                assert lo == base + own_at and rows[me, c, d] == own_rows
            elif rows[me, c, d]:
                mine = [(at, n) for j, at, n in sends if j == d]
                assert min(at for at, _ in mine) == lo and sum(n for _, n in mine) == rows[me, c, d]
                assert lo + rows[me, c, d] <= base  # inside the send buffer


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 5), st.integers(1, 3), st.integers(1, 4), st.data())
def test_each_digits_pieces_are_its_received_rows(P, C, top, data):
    # piece_runs' arithmetic on the host: lay every source's messages out as DeviceLayout does
    # (each message ordered by digit), then the pieces of digit d cover exactly the rows whose
    # digit is d, each once, and part_off sums the digits' rows
    me = data.draw(st.integers(0, P - 1))
    G = 1 << top
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    counts = [rng.integers(0, 40, (P, G)) * (rng.random((P, G)) < 0.7) for _ in range(C)]
    rows = rng.integers(0, 60, (P, C, P))
    for c in range(C):
        rows[:, c, me] = counts[c].sum(axis=1)
    layout, _, _ = radix_shuffle._layout(rows, me)
    digit = np.full(layout.rows, -1)
    for c in range(C):
        msgs = {s: np.repeat(np.arange(G), counts[c][s]) for s in range(P)}
        _, _, (_, own_at, own) = layout.unit(c)
        digit[own_at:own_at + own] = msgs[me]
        for s, ps in layout.received(c).items():
            for at, first, n in ps:
                digit[at:at + n] = msgs[s][first:first + n]
    assert (digit >= 0).all()
    starts, ends, part_off, k = radix_shuffle.piece_runs(layout, counts)
    assert k == C * (1 + 3 * (P - 1)) and starts.size == G * k
    seen = np.zeros(layout.rows, int)
    for d in range(G):
        for a, b in zip(starts[d * k:(d + 1) * k], ends[d * k:(d + 1) * k]):
            assert (digit[a:b] == d).all()
            seen[a:b] += 1
    assert (seen == 1).all()
    np.testing.assert_array_equal(np.diff(part_off), np.bincount(digit, minlength=G))


class _Ranks:
    """What ``_block_layout`` reads of a Communicator."""

    def __init__(self, rank, copy_engine=True):
        self.rank, self.copy_engine = rank, copy_engine


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 5), st.integers(1, 3), st.integers(1, 3), st.data())
def test_copy_engine_blocks_hold_every_message_where_both_ends_expect_it(P, C, top, data):
    # BlockLayout (the copy-engine exchange): each rank's pass puts its rows for rank d where the
    # scan of its digit-major counts plus shifts says, inside the block the collective moves
    # (two ranks: its own block of the first region, which the in-place all-gather copies to the
    # other rank, and its own rows to its block of the second region; more: block d of the
    # first region, which the all-to-all copies to block (source) of rank d's second region);
    # then each receiver's pieces cover exactly the rows of each digit it was sent
    G = 1 << top
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    counts = rng.integers(0, 30, (P, C, P, G)) * (rng.random((P, C, P, G)) < 0.8)  # (src, chunk, dst, digit)
    rows = counts.sum(axis=3)
    layouts = [radix_shuffle.BlockLayout(rows, r) for r in range(P)]
    B, at, R = layouts[0].blocks, layouts[0].at, layouts[0].rows
    assert (B % 16 == 0).all() and (B >= rows.max(axis=(0, 2))).all() and R == P * B.sum()
    assert layouts[0].gather == (P == 2)
    win = [np.full(2 * R, -1) for _ in range(P)]  # each rank's window: each row's (source, destination, digit)
    for s in range(P):
        for c in range(C):
            scan = np.cumsum(counts[s, c].ravel()) - counts[s, c].ravel()  # digit-major: (dst, digit)
            for d, add in enumerate(layouts[s].shifts(c)):
                for g in range(G):
                    lo, n = scan[d * G + g] + add, counts[s, c, d, g]
                    if P == 2:  # its block of the first region, or (own rows) of the second
                        block = (d == s) * R + at[c] + s * B[c]
                    else:
                        block = at[c] + d * B[c]
                    assert block <= lo and lo + n <= block + B[c]
                    win[s][lo:lo + n] = (s * P + d) * G + g
    got = [w.copy() for w in win]
    for c in range(C):  # the collective
        for s in range(P):
            for d in range(P):
                if P == 2 and d != s:  # in-place all-gather: s's first-region block to d's same place
                    got[d][at[c] + s * B[c]:at[c] + (s + 1) * B[c]] = win[s][at[c] + s * B[c]:at[c] + (s + 1) * B[c]]
                elif P > 2:  # all-to-all: block d of s's first region to block s of d's second
                    got[d][R + at[c] + s * B[c]:R + at[c] + (s + 1) * B[c]] = \
                        win[s][at[c] + d * B[c]:at[c] + (d + 1) * B[c]]
    for me in range(P):
        starts, ends, part_off, k = radix_shuffle.piece_runs(layouts[me], [counts[:, c, me] for c in range(C)])
        assert k == C * P
        seen = []
        for g in range(G):
            for a, b in zip(starts[g * k:(g + 1) * k], ends[g * k:(g + 1) * k]):
                assert (got[me][a:b] % G == g).all()
                seen += got[me][a:b].tolist()
        want = [(s * P + me) * G + g for s in range(P) for c in range(C) for g in range(G)
                for _ in range(counts[s, c, me, g])]
        assert sorted(seen) == sorted(want)  # each row sent here once, none of another rank's
        np.testing.assert_array_equal(np.diff(part_off), counts[:, :, me].sum(axis=(0, 1)))


def test_the_copy_engine_takes_even_tables_only():
    even = np.full((2, 3, 2), 1000)
    even[0, 1, 1] = 1100  # a little uneven: every chunk's blocks padded to its largest message
    layout = radix_shuffle._block_layout(_Ranks(1), even)
    assert layout.blocks.tolist() == [1008, 1104, 1008] and layout.rows == 2 * 3120
    assert layout.padding == pytest.approx(6240 / 6100)
    assert radix_shuffle._block_layout(_Ranks(1, copy_engine=False), even) is None
    skewed = even.copy()
    skewed[0, :, 1] = 5000  # one pair's messages: every padded block would be that large
    assert radix_shuffle._block_layout(_Ranks(0), skewed) is None
    # GPUJOIN_NCCL_CE=force on every rank (the communicator's answer): whatever the padding
    assert radix_shuffle._block_layout(_Ranks(0, copy_engine="force"), skewed).padding > radix_shuffle.PAD_LIMIT
    empty = radix_shuffle.BlockLayout(np.zeros((2, 1, 2), np.int64), 0)
    assert empty.rows == 0 and empty.pieces() == [(0, 0, 0, 0), (1, 0, 0, 0)]


def test_the_memory_check_counts_the_copy_engines_padded_regions():
    rows = np.full((2, 2, 1, 2), 1000)  # (rank, table, chunk, destination)
    free = np.array([10**9, 10**9])
    width = [16, 16]
    radix_shuffle._check_room(rows, width, free, True)  # send 1000 + receive 2000 (+2000) a table
    blocks = [radix_shuffle.BlockLayout(rows[:, i], 0) for i in range(2)]
    need = 2 * 16 * 4 * (2 * 1008)  # each table's window (two regions) and its finished copy as long
    radix_shuffle._check_room(rows, width, np.array([need, need]), True, blocks)
    with pytest.raises(MemoryError, match="rank 1 needs about"):
        radix_shuffle._check_room(rows, width, np.array([need, need - 1]), True, blocks)
    # free windows in the pool serve the windows only: not the finished copies, half the need
    pooled = np.array([need // 2, need // 2])
    radix_shuffle._check_room(rows, width, np.array([need // 2, need // 2]), True, blocks, pooled)
    with pytest.raises(MemoryError, match="rank 0 needs about"):
        radix_shuffle._check_room(rows, width, np.array([need // 2 - 1, need]), True, blocks, pooled + need)
    # by send/recv: 1000 rows sent, 2000 received (and 2000 finished for the first table)
    assert 16 * (1000 + 2000 * 2) + 16 * (1000 + 2000) < need


# ---------------------------------------------------------------- one GPU

def _gpu():
    cp = pytest.importorskip("cupy")
    if not gpujoin.backend.cuda_available():
        pytest.skip("no usable GPU")
    return cp


def _hash(k):
    """common.cuh's hash_key: murmur3's finalizer, 32 bits of int32 keys, the low 32 of int64's."""
    if k.dtype == np.int32:
        h = k.astype(np.uint32)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        return h ^ (h >> np.uint32(16))
    return (_fmix64(k.astype(np.uint64)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _fmix64(h):
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def _rank(k, P):
    """The device shuffle's destination of one key column (device_shuffle.destinations)."""
    with np.errstate(over="ignore"):
        h = _fmix64((np.uint64(SEED_FIRST) * np.uint64(31)) ^ k.astype(np.int64).view(np.uint64))
        return (((h >> np.uint64(32)) * np.uint64(P)) >> np.uint64(32)).astype(np.int64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("P,n", [(2, 100_003), (3, 50_001), (2, 1)])
@pytest.mark.parametrize("cache", [False, True])
def test_the_fused_pass_groups_rows_by_rank_then_top_digit(dtype, P, n, cache):
    # scatter_placed with use_hash 3: row i lands in digit rank << top | top bits of its PHJ digit,
    # rank by rank, the places moved as the caller asks (here: every row shifted by 5 into a
    # longer buffer); with a digit cache, the histogram stores each row's digit and the pass reads it
    cp = _gpu()
    from gpujoin.cuda.primitives import Digits, exclusive_scan, radix_histogram, scatter_placed

    rng = np.random.default_rng(n)
    keys = np.where(rng.random(n) < 0.2, 3, rng.integers(-2**31, 2**31 - 1, n)).astype(dtype)
    ids = np.arange(n, dtype=np.int64)
    bits = 17
    top = radix_shuffle.top_bits(P, bits)
    digits = Digits(bits=(P - 1).bit_length() + top, shift=bits - top, use_hash=3, base=P | top << 32)
    k, v = cp.asarray(keys), [cp.asarray(ids)]
    stored = cp.full(n, 0xFFFF, cp.uint16) if cache else None
    offs = exclusive_scan(radix_histogram(k, v, digits, stable=False, digit_cache=stored)) + 5
    ko, vo = cp.full(n + 9, -1, dtype), cp.full(n + 9, -1, np.int64)
    scatter_placed(k, v, digits, offs, ko, [vo], digit_cache=stored)
    got = cp.asnumpy(vo)[5:5 + n]
    np.testing.assert_array_equal(np.sort(got), ids)
    np.testing.assert_array_equal(cp.asnumpy(ko)[5:5 + n], keys[got])
    d = (_rank(keys, P) << top) | ((_hash(keys) >> np.uint32(bits - top)) & np.uint32((1 << top) - 1))
    assert (np.diff(d[got]) >= 0).all()
    if cache:
        np.testing.assert_array_equal(cp.asnumpy(stored), d)
        with pytest.raises(ValueError, match="digit_cache"):  # (another size, or a plain digit)
            scatter_placed(k, v, digits, offs, ko, [vo], digit_cache=stored[:-1] if n > 1 else stored[:0])
        with pytest.raises(ValueError, match="digit_cache"):
            radix_histogram(k, v, Digits(bits=8), stable=False, digit_cache=stored)


@pytest.mark.gpu
def test_counts_launched_early_are_taken_only_for_the_same_tables_and_arguments():
    # radix_shuffle.count (dist.join launches it before the ranks agree): each chunk's sums are
    # its rows a (destination, top digit), as numpy finds them; fits() only where the shuffle's
    # agreed ranks, bits and chunks are the guessed ones and its columns these very arrays
    cp = _gpu()
    from gpujoin.cuda.table import DeviceTable

    rng = np.random.default_rng(5)
    n, P, bits, C = 70_001, 2, 17, 2
    keys = rng.integers(-2**62, 2**62, n)
    t = DeviceTable({"k": cp.asarray(keys), "v": cp.arange(n, dtype=cp.int64)})
    u = DeviceTable({"k": cp.asarray(keys[:5]), "w": cp.arange(5, dtype=cp.int64)})
    got = radix_shuffle.count([t, u], ["k", "k"], P, bits, C)
    top = radix_shuffle.top_bits(P, bits)
    d = (_rank(keys, P) << top) | ((_hash(keys) >> np.uint32(bits - top)) & np.uint32((1 << top) - 1))
    sums = cp.asnumpy(got.sums[0]).reshape(C, P << top)
    bounds = [lo for lo, _, _ in got.histograms[0]] + [n]
    for c in range(C):
        np.testing.assert_array_equal(sums[c], np.bincount(d[bounds[c]:bounds[c + 1]], minlength=P << top))
    assert cp.asnumpy(got.sums[1]).sum() == 5
    assert got.fits([t, u], ["k", "k"], P, bits, C)
    assert not got.fits([t, u], ["k", "k"], P, bits + 1, C) and not got.fits([t, u], ["k", "k"], P, bits, C + 1)
    assert not got.fits([t, u], ["k", "k"], 3, bits, C) and not got.fits([t], ["k"], P, bits, C)
    moved = DeviceTable({"k": t["k"].copy(), "v": t["v"]})  # (a key replaced since: another array)
    assert not got.fits([moved, u], ["k", "k"], P, bits, C)
    assert not got.fits([t, DeviceTable({"k": u["k"], "w": u["w"], "x": u["w"]})], ["k", "k"], P, bits, C)


def _pieces(rng, P, me, bits, top, keys, ids, C=1):
    """What rank ``me`` of ``P`` holds after the shuffle, built on one GPU: ``keys`` cut among P
    sources and C chunks, each (source, chunk)'s rows for ``me`` ordered by their top digit, laid
    out as DeviceLayout puts them (heads, bodies and tails apart); returns the received
    DeviceTable."""
    cp = _gpu()
    from gpujoin.cuda.table import DeviceTable

    src, chunk = rng.integers(0, P, keys.size), rng.integers(0, C, keys.size)
    top_digit = (_hash(keys) >> np.uint32(bits - top)) & np.uint32((1 << top) - 1)
    rows = rng.integers(0, 50, (P, C, P))  # other ranks' traffic (not here): any sizes
    for c in range(C):
        rows[:, c, me] = np.bincount(src[chunk == c], minlength=P)
    layout, _, _ = radix_shuffle._layout(rows, me)
    order = np.full(layout.rows, -1, np.int64)
    counts = []
    for c in range(C):
        sel = [(src == s) & (chunk == c) for s in range(P)]
        msgs = {s: np.flatnonzero(sel[s])[np.argsort(top_digit[sel[s]], kind="stable")] for s in range(P)}
        counts.append(np.stack([np.bincount(top_digit[sel[s]], minlength=1 << top) for s in range(P)]).astype(np.int64))
        _, _, (_, own_at, _) = layout.unit(c)
        order[own_at:own_at + msgs[me].size] = msgs[me]
        for s, ps in layout.received(c).items():
            for at, first, n in ps:
                order[at:at + n] = msgs[s][first:first + n]
    assert (order >= 0).all()
    t = DeviceTable({"k": cp.asarray(keys[order]), "id": cp.asarray(ids[order])})
    return radix_shuffle.received_table(t, "k", [t["k"], t["id"]], bits, top, layout, counts)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("P,me,bits,n,C", [(2, 0, 17, 200_003, 1), (2, 1, 12, 70_001, 2), (3, 2, 17, 100_000, 3),
                                           (4, 1, 16, 3, 2), (2, 0, 26, 90_001, 1), (2, 1, 17, 0, 2)])
def test_a_partition_from_received_pieces_equals_a_whole_one(dtype, P, me, bits, n, C):
    # radix_partition(runs=...): only the bits under the top ones partitioned, the first pass
    # reading the pieces (own rows, peers' heads, bodies and tails): the partitions and their
    # rows of a partition of the same rows laid out in one piece
    cp = _gpu()
    from gpujoin.cuda import primitives as prim

    rng = np.random.default_rng(bits + n)
    keys = np.where(rng.random(n) < 0.1, -7, rng.integers(-2**31, 2**31 - 1, n)).astype(dtype)
    ids = np.arange(n, dtype=np.int64)
    top = radix_shuffle.top_bits(P, bits)
    t = _pieces(rng, P, me, bits, top, keys, ids, C)
    runs = t.partitioning.runs
    assert runs.bits == top and runs.runs == C * (1 + 3 * (P - 1))
    k, (v,), off = prim.radix_partition(t["k"], [t["id"]], prim.Digits(bits=bits), stable=False, runs=runs)
    k2, (v2,), off2 = prim.radix_partition(cp.asarray(keys), [cp.asarray(ids)], prim.Digits(bits=bits),
                                           stable=False)
    np.testing.assert_array_equal(cp.asnumpy(off), cp.asnumpy(off2))
    got = cp.asnumpy(v)
    np.testing.assert_array_equal(np.sort(got), ids)
    np.testing.assert_array_equal(cp.asnumpy(k), keys[got])
    digit = _hash(keys[got]) & np.uint32((1 << bits) - 1)
    assert (np.diff(digit.astype(np.int64)) >= 0).all()
    del k2, v2
    # the same pieces in columns padded past them (the copy engines' windows): the passes' tiles
    # and partitions bounded by the pieces' rows (Runs.rows), the padding never read
    assert runs.rows == n
    pad = 3 * 8192 + 5
    kp = cp.concatenate([t["k"], cp.full(pad, 5, dtype)])
    vp = cp.concatenate([t["id"], cp.full(pad, -1, np.int64)])
    k3, (v3,), off3 = prim.radix_partition(kp, [vp], prim.Digits(bits=bits), stable=False, runs=runs)
    np.testing.assert_array_equal(cp.asnumpy(off3), cp.asnumpy(off))  # (two passes too: P = 3)
    part = np.repeat(np.arange(off.size - 1), np.diff(cp.asnumpy(off)))  # (each row's partition;
    got3 = cp.asnumpy(v3)[:n]  # the unstable passes order a partition's rows as their atomics fall)
    np.testing.assert_array_equal(got3[np.lexsort((got3, part))], got[np.lexsort((got, part))])


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "semi", "anti"])
def test_a_join_of_received_pieces_equals_the_join(how):
    # gpujoin.join of two DeviceTables that carry a shuffle's pieces: PHJ (named, and auto's
    # choice) starts from them (partitioned_bits in its stats) and gives the rows of the join
    cp = _gpu()
    from gpujoin.plan.device_join import execute_device_join
    from gpujoin.testing import assert_tables_equal

    rng = np.random.default_rng(11)
    P, me, bits = 2, 1, 17
    top = radix_shuffle.top_bits(P, bits)
    lk = rng.permutation(300_000).astype(np.int64)
    rk = rng.integers(0, 400_000, 350_000).astype(np.int64)
    lt = _pieces(rng, P, me, bits, top, lk, np.arange(lk.size) * 2)
    rt = _pieces(rng, P, me, bits, top, rk, np.arange(rk.size) * 3, C=2)
    lt.columns["a"], rt.columns["b"] = lt.columns.pop("id"), rt.columns.pop("id")
    want = gpujoin.join(lt.to_arrow(), rt.to_arrow(), "k", how=how, device="cpu")
    # the first table finished in the shuffle (every bit: its rows handed to PHJ as they are)
    done = radix_shuffle.finished(lt)
    assert done.partitioning.runs.bits == bits and done.partitioning.runs.in_place
    assert_tables_equal(done.to_arrow().sort_by("a"), lt.to_arrow().sort_by("a"))
    from gpujoin.cuda.primitives import Digits, radix_partition

    k, (a,), off = radix_partition(done["k"], [done["a"]], Digits(bits=bits), stable=False,
                                   runs=done.partitioning.runs)
    assert k is done["k"] and a is done["a"] and off is done.partitioning.runs.part_off
    for left in (lt, done):
        for algorithm in ("phj-tr", "phj-ur", "auto"):
            out, stats = execute_device_join(left, rt, "k", how=how, algorithm=algorithm)
            if stats.algorithm.startswith("phj"):
                assert stats.params.get("partitioned_bits") == top, stats.params
            assert_tables_equal(out.to_arrow(), want)
    # another radix_bits asked: the pieces are not used, the rows are the same
    out, stats = execute_device_join(lt, rt, "k", how=how, algorithm="phj-tr", radix_bits=15)
    assert "partitioned_bits" not in stats.params
    assert_tables_equal(out.to_arrow(), want)
    # a table made from a partitioned one keeps no pieces, nor one whose key column was replaced
    assert lt.select(["k", "a"]).partitioning is None
    swapped = _pieces(rng, P, me, bits, top, lk, np.arange(lk.size) * 2)
    swapped.columns["k"] = cp.asarray(lk)  # (rows in another order: the pieces would lie)
    swapped.columns["a"] = cp.arange(lk.size, dtype=cp.int64) * 2
    swapped.columns.pop("id")
    out, stats = execute_device_join(swapped, rt, "k", how=how, algorithm="phj-tr", radix_bits=bits)
    assert "partitioned_bits" not in stats.params
    assert_tables_equal(out.to_arrow(), want)
