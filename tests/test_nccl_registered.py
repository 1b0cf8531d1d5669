"""dist.registered's pool of NCCL-registered blocks, with a stand-in for the NCCL library (the
calls themselves run on the GPUs: scripts/device_check.sh radix-shuffle with
NCCL_TRIES=GPUJOIN_NCCL_REGISTER=1)."""

import pytest

from gpujoin.dist import registered


class FakeNccl:
    """ncclMemAlloc, ncclCommRegister and ncclMemFree over made-up addresses; ``fail``: the
    call that returns an error."""

    def __init__(self, fail=None):
        self.fail, self.next, self.live, self.registered = fail, 1 << 40, set(), []

    def ncclMemAlloc(self, ptr, size):
        if self.fail == "alloc":
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
