"""dist.registered (NCCL-registered buffers, the copy engines' symmetric windows and exchanges)
and the communicator's copy-engine choice, with stand-ins for the NCCL library, MPI and CuPy (the
calls themselves run on the GPUs: scripts/device_check.sh radix-shuffle, CE_FORCE=1 and
NCCL_TRIES="GPUJOIN_NCCL_CE=0")."""

import os

import pytest

from gpujoin.dist import registered


class FakeNccl:
    """ncclMemAlloc, ncclCommRegister and ncclMemFree over made-up addresses; ``fail``: the
    call that returns an error."""

    def __init__(self, fail=None):
        self.fail, self.next, self.live, self.registered, self.deregistered = fail, 1 << 40, set(), [], []
        self.room = 0

    def ncclMemAlloc(self, ptr, size):
        if self.fail == "alloc" or self.room:  # (room: how many more calls fail)
            self.room -= bool(self.room)
            return 1
        ptr._obj.value, self.next = self.next, self.next + size.value
        self.live.add(ptr._obj.value)
        return 0

    def ncclCommRegister(self, comm, ptr, size, handle):
        if self.fail == "register":
            return 3
        self.registered.append((comm.value, ptr.value, size.value))
        handle._obj.value = len(self.registered)
        return 0

    def ncclCommWindowRegister(self, comm, ptr, size, handle, flags):
        if self.fail == "register":
            return 3
        self.registered.append((comm.value, ptr.value, size.value, flags))
        handle._obj.value = len(self.registered)
        return 0

    def ncclCommWindowDeregister(self, comm, handle):
        self.deregistered.append(handle.value)
        return 0

    def ncclMemFree(self, ptr):
        self.live.discard(ptr.value)
        return 0

    def ncclGetErrorString(self, rc):
        return {1: b"unhandled cuda error", 3: b"internal error"}[rc]


def test_blocks_are_rounded_registered_and_reused_by_size():
    g = registered.GRANULE
    lib = FakeNccl()
    pool = registered.Pool(lib, 77)
    a = pool.take(1)
    assert a[2] == g and lib.registered == [(77, a[0], g)]
    b = pool.take(g + 1)
    assert b[2] == 2 * g and b[0] != a[0]
    pool.give(a)
    assert pool.take(100) == a  # (the free block of that size, not a new registration)
    pool.give(b)
    assert pool.take(1) == b  # (the smallest free block that holds it, at most twice its size)
    big = pool.take(4 * g)
    pool.give(big)
    assert pool.take(1)[2] == g and len(lib.registered) == 4  # (not one past twice the size: a new one)
    assert pool.take(3 * g) == big
    # an array's owner gives its block back once nothing refers to it
    owner = registered._Owner(pool, b)
    del owner
    assert pool.take(2 * g) == b and pool.made == 8 * g


@pytest.mark.parametrize("fail,message", [("alloc", "ncclMemAlloc"), ("register", "ncclCommRegister")])
def test_a_failed_call_is_named_and_leaves_nothing_allocated(fail, message):
    lib = FakeNccl(fail)
    with pytest.raises(RuntimeError, match=f"{message}.*NCCL error .*unset GPUJOIN_NCCL_REGISTER"):
        registered.Pool(lib, 1).take(10)
    assert not lib.live


def test_off_unless_asked(monkeypatch):
    monkeypatch.delenv("GPUJOIN_NCCL_REGISTER", raising=False)
    assert not registered.enabled()
    monkeypatch.setenv("GPUJOIN_NCCL_REGISTER", "1")
    assert registered.enabled()


def test_windows_are_taken_alike_on_every_rank():
    # a window's registration is a collective and NCCL finds a peer's buffer by it: every rank
    # takes the same registration, reused where it is free on every rank, else a new one
    g = registered.GRANULE
    libs = [FakeNccl(), FakeNccl()]
    pools = [registered.Pool(lib, 5, window=True) for lib in libs]

    def take(nbytes):
        size = registered.rounded(nbytes)
        free = [sorted(b[3] for k, bs in p.free.items() if size <= k <= 2 * size for b in bs) for p in pools]

        def common(numbers):  # the allgather: every rank's free blocks, or its allocation's success ([-1])
            return numbers if numbers == [-1] else sorted(set(numbers).intersection(*map(set, free)))
        return [p.take(nbytes, common) for p in pools]

    a, b = take(1), take(1)
    assert [x[3] for x in a] == [0, 0] and [x[3] for x in b] == [1, 1]
    assert all(r[3] == registered.WIN_COLL_SYMMETRIC for lib in libs for r in lib.registered)
    pools[0].give(a[0])
    pools[0].give(b[0])
    pools[1].give(b[1])  # rank 1 still holds registration 0: both ranks reuse registration 1
    c = take(g)
    assert c == [b[0], b[1]]
    d = take(g)  # registration 0 is free on rank 0 only: a new one on both, registration 0 kept
    assert [x[3] for x in d] == [2, 2] and len(libs[0].registered) == len(libs[1].registered) == 3
    assert pools[0].free_bytes() == g and pools[1].free_bytes() == 0 and not libs[0].deregistered


def test_a_tables_windows_take_one_allgather_where_free_windows_hold_them():
    # a table's columns' windows in one collective: the numbers of every free block gathered
    # once, each column then taking the smallest free on every rank that holds it, in order
    g = registered.GRANULE
    libs = [FakeNccl(), FakeNccl()]
    pools = [registered.Pool(lib, 5, window=True) for lib in libs]
    calls = []

    def take_many(sizes):
        free = [sorted(b[3] for bs in p.free.values() for b in bs) for p in pools]

        def common(numbers):
            calls.append(numbers)
            return numbers if numbers == [-1] else sorted(set(numbers).intersection(*map(set, free)))
        return [p.take_many(sizes, common) for p in pools]

    first = take_many([g, 2 * g, g])  # nothing free: one gather, then each allocated alike
    assert [[b[3] for b in r] for r in first] == [[0, 1, 2], [0, 1, 2]]
    for p, r in zip(pools, first):
        for b in r:
            p.give(b)
    pools[1].take(1)  # (rank 1 holds registration 0 again: the smallest of one granule)
    calls.clear()
    again = take_many([g, g])  # the free ones: registrations 2 and 1 (one holds twice a granule)
    assert [[b[3] for b in r] for r in again] == [[2, 1], [2, 1]] and len(calls) == 2  # (one a rank)
    assert all(len(lib.registered) == 3 for lib in libs)


def test_windows_free_on_every_rank_make_room_when_an_allocation_fails():
    # a job whose tables grow: where a new window does not fit some rank's memory, the windows
    # free on every rank are deregistered and freed (after the GPU's work), in number order,
    # and the allocation is tried again
    g = registered.GRANULE
    libs, synced = [FakeNccl(), FakeNccl()], []
    pools = [registered.Pool(lib, 5, window=True, sync=lambda: synced.append(1)) for lib in libs]
    lists = []

    def take(nbytes):
        # both ranks step through each collective (an allgather of their lists) together, as threads
        import threading
        out, barrier = [None, None], threading.Barrier(2)

        def rank(r):
            def step(numbers):
                barrier.wait()
                if r == 0:
                    lists.append(numbers)
                barrier.wait()
                if r == 1:
                    lists.append(numbers)
                barrier.wait()
                a, b = lists[-2:]
                barrier.wait()
                return sorted(set(a) & set(b))
            try:
                out[r] = pools[r].take(nbytes, step)
            except (MemoryError, RuntimeError) as e:
                out[r] = e
        ts = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        errors = [x for x in out if isinstance(x, Exception)]
        if errors:
            assert len(errors) == 2  # (on every rank)
            raise errors[0] if isinstance(errors[0], MemoryError) else errors[1]
        return out

    a, b = take(1), take(1)  # registrations 0 and 1, of one granule
    for p, x, y in zip(pools, a, b):
        p.give(x)
    pools[0].give(b[0])  # registration 1 free on rank 0 only
    c = take(3 * g)  # neither fits, and memory allows it: both kept
    assert [x[3] for x in c] == [2, 2] and not libs[0].deregistered
    for p, x in zip(pools, c):
        p.give(x)
    libs[1].room = 1  # rank 1's next allocation fails once
    d = take(7 * g)
    assert [x[3] for x in d] == [3, 3]
    # registrations 0 and 2 were free on both ranks: freed there; 1 stays on rank 0
    assert [lib.deregistered for lib in libs] == [[a[0][1], c[0][1]], [a[1][1], c[1][1]]] and len(synced) == 2
    assert a[0][0] not in libs[0].live and c[0][0] not in libs[0].live and b[0][0] in libs[0].live
    assert pools[0].free_bytes() == g and pools[1].free_bytes() == 0
    libs[0].room = libs[1].room = 2  # fails, nothing left free on both to release: a MemoryError on both
    with pytest.raises(MemoryError, match="failed on a rank"):
        take(9 * g)
    libs[0].fail = "register"  # rank 0's registration fails: rank 1's raises too (it names rank 0's)
    with pytest.raises(RuntimeError, match="failed on another rank.*GPUJOIN_NCCL_CE=0"):
        take(g)


def test_a_window_that_one_rank_cannot_allocate_fails_on_every_rank():
    lib = FakeNccl("alloc")
    with pytest.raises(MemoryError, match="ncclMemAlloc of .* failed on a rank.*GPUJOIN_NCCL_CE=0"):
        registered.Pool(lib, 1, window=True).take(10, lambda numbers: numbers)
    ok = FakeNccl()
    with pytest.raises(MemoryError):  # its own allocation freed when another rank's failed
        registered.Pool(ok, 1, window=True).take(10, lambda numbers: [])
    assert not ok.live and not ok.registered


def test_the_copy_engine_is_asked_only_on_one_host_and_when_allowed(monkeypatch):
    monkeypatch.delenv("NCCL_CTA_POLICY", raising=False)
    monkeypatch.delenv("GPUJOIN_NCCL_CE", raising=False)
    monkeypatch.setattr(registered, "_library", lambda: type("Lib", (), {
        "ncclAlltoAll": 1, "ncclCommWindowRegister": 1, "ncclCommWindowDeregister": 1})())
    import sys  # (no NCCL here: its version is a stand-in's)
    import types
    fake = types.ModuleType("cupy.cuda.nccl")
    fake.get_version = lambda: 22809
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", fake)
    cuda = types.ModuleType("cupy.cuda")
    cuda.nccl = fake
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    sys.modules["cupy"].cuda = cuda
    assert registered.copy_engine_wanted(True) and not registered.copy_engine_wanted(False)
    monkeypatch.setenv("NCCL_CTA_POLICY", "1")  # the user's own policy stands
    assert not registered.copy_engine_wanted(True)
    monkeypatch.setenv("NCCL_CTA_POLICY", "2")
    assert registered.copy_engine_wanted(True)
    monkeypatch.setenv("GPUJOIN_NCCL_CE", "0")
    assert not registered.copy_engine_wanted(True)
    monkeypatch.delenv("GPUJOIN_NCCL_CE")
    fake.get_version = lambda: 22703  # before ncclAlltoAll
    assert not registered.copy_engine_wanted(True)


def test_the_exchanges_pass_bytes_to_nccl_and_name_a_refusal(monkeypatch):
    calls = []

    class Lib(FakeNccl):
        def ncclAllGather(self, send, recv, n, dtype, comm, stream):
            calls.append(("gather", send.value, recv.value, n.value, dtype, comm.value, stream.value))
            return 0

        def ncclAlltoAll(self, send, recv, n, dtype, comm, stream):
            return 3

    monkeypatch.setattr(registered, "_library", lambda: Lib())
    comm = type("Comm", (), {"nccl": lambda self: type("N", (), {"comm": 99})()})()
    registered.allgather(comm, 4096, 8192, 1 << 20, 7)
    assert calls == [("gather", 4096, 8192, 1 << 20, 1, 99, 7)]  # (bytes: ncclUint8)
    with pytest.raises(RuntimeError,
                       match=r"ncclAlltoAll\(16 bytes a rank\) failed.*internal error.*GPUJOIN_NCCL_CE=0"):
        registered.alltoall(comm, 1, 2, 16, 0)


class _TwoRanks:
    """Rank 0's view of a 2-rank MPI communicator: the other rank's answers to ``nccl()``'s
    allgather given as ``peer`` ((host, GPU), copy engines wanted, force)."""

    def __init__(self, peer):
        self.peer = peer

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 2

    def allgather(self, obj):
        return [obj, self.peer if isinstance(obj, tuple) and len(obj) == 3 else obj]

    def bcast(self, obj, root=0):
        return obj


@pytest.mark.parametrize("peer,wants,force,preset,expect,policy", [
    ((("h", "0000:02"), True, False), True, False, None, True, "2"),  # one host, both ask
    ((("h", "0000:02"), False, False), True, False, None, False, None),  # the other rank does not
    ((("h", "0000:02"), True, True), True, True, None, "force", "2"),  # both force
    ((("h", "0000:02"), True, False), True, True, None, True, "2"),  # force on one rank only
    ((("g", "0000:02"), True, False), True, False, None, False, None),  # two hosts
    ((("h", "0000:02"), True, False), True, False, "2", True, "2"),  # the user's own zero policy stays
    ((("h", "0000:01"), True, False), True, False, None, None, None),  # ranks sharing a GPU: no NCCL
])
def test_the_communicators_copy_engine_choice_is_every_ranks(monkeypatch, peer, wants, force, preset, expect,
                                                             policy):
    # every rank's answer goes round with its host and GPU: the path is the same on all ranks, and
    # NCCL_CTA_POLICY=2 is set only while the communicator is made (kept where the user set it)
    import sys
    import types

    from gpujoin.dist.comm import Communicator

    made = []
    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.get_unique_id = lambda: b"id"
    nccl.NcclCommunicator = lambda size, uid, rank: made.append(os.environ.get("NCCL_CTA_POLICY")) or 7
    cuda = types.ModuleType("cupy.cuda")
    cuda.nccl = nccl
    cuda.Device = lambda *a: types.SimpleNamespace(pci_bus_id="0000:01")
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    for name, mod in (("cupy", cupy), ("cupy.cuda", cuda), ("cupy.cuda.nccl", nccl)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr("platform.node", lambda: "h")
    monkeypatch.setattr(registered, "copy_engine_wanted", lambda one_host: wants)
    monkeypatch.delenv("NCCL_CTA_POLICY", raising=False)
    if preset:
        monkeypatch.setenv("NCCL_CTA_POLICY", preset)
    monkeypatch.setenv("GPUJOIN_NCCL_CE", "force" if force else "1")
    comm = Communicator(_TwoRanks(peer))
    got = comm.nccl()
    if expect is None:
        assert got is None and not made and comm.copy_engine is False
        return
    assert got == 7 and made == [policy] and comm.copy_engine == expect
    assert os.environ.get("NCCL_CTA_POLICY") == preset  # (restored)
