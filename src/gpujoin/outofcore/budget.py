"""Memory budgets: the GPU memory a join or group-by may use, and the host memory it needs.

``memory_limit`` (an argument of ``join`` and ``group_by``, ``--memory-limit`` in the CLI, or
the environment variable ``GPUJOIN_MEMORY_LIMIT``) caps the GPU memory gpujoin takes: it is how
a 141 GB GPU is made to behave like a 16 GB one, as papers 000 and 004 measure.  Under the cap
the planner places work in core or out of core (paper 004's Triton join); CuPy's memory pool is
held to the cap while the operation runs, so the cap is real, not advisory.

Host memory is checked before work starts: a result or a spill that cannot fit raises
``MemoryError`` naming the bytes, never a kill by the operating system.  Those checks read
``MemAvailable``; ``GPUJOIN_HOST_MEMORY`` overrides it (virtual machines whose memory grows as
it is used report too little there at first).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import threading

#: Unit multipliers of ``parse_bytes``: decimal for kB/MB/GB/TB (as Dask and pandas), binary
#: for KiB/MiB/GiB/TiB.
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
ENV_LIMIT = "GPUJOIN_MEMORY_LIMIT"
ENV_HOST = "GPUJOIN_HOST_MEMORY"


def parse_bytes(value, what: str = "memory_limit") -> int:
    """Bytes from an int, a float, or a string such as ``"16GB"``, ``"512 MiB"``, ``"1.5e9"``.

    Raises
    ------
    ValueError
        Not a size, negative, or an unknown unit (the message lists the units).
    TypeError
        Neither a number nor a string.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{what} must be a number of bytes or a string such as '16GB', got {type(value).__name__}")
    if isinstance(value, str):
        m = _PATTERN.match(value)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise ValueError(f"{what}={value!r} is not a size; write bytes or a number with a unit "
                             f"(B, kB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. '16GB'")
        n = float(m.group(1)) * _UNITS[unit]
    else:
        n = float(value)
    if not n >= 0:
        raise ValueError(f"{what} must be at least 0 bytes, got {value!r}")
    return int(n)


def resolve_memory_limit(memory_limit=None) -> int | None:
    """The GPU memory cap in bytes: ``memory_limit`` if given, else ``GPUJOIN_MEMORY_LIMIT``,
    else None (the GPU's free memory is the budget)."""
    if memory_limit is None:
        memory_limit = os.environ.get(ENV_LIMIT) or None
        what = ENV_LIMIT
    else:
        what = "memory_limit"
    return None if memory_limit is None else parse_bytes(memory_limit, what)


def gpu_budget(limit: int | None) -> int:
    """GPU bytes an operation may use: ``limit`` (a resolved memory_limit), else what is free."""
    if limit is not None:
        return limit
    from ..cuda.runtime import free_bytes

    return free_bytes()


def host_available() -> int:
    """Host memory available to a new allocation, in bytes (``GPUJOIN_HOST_MEMORY``, else the
    kernel's ``MemAvailable``; without /proc, the physical memory)."""
    env = os.environ.get(ENV_HOST)
    if env:
        return parse_bytes(env, ENV_HOST)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_host(need: int, what: str, hint: str) -> None:
    """Raise MemoryError before work starts when ``need`` bytes of host memory are not there.

    ``what`` names the allocation (e.g. "the join's result of 2,000,000,000 rows"), ``hint``
    what to do instead.
    """
    from .stream import HostArena

    have = host_available() + sum(b.nbytes for b in HostArena._cache)  # kept spill buffers are reusable
    if need > have:
        raise MemoryError(f"{what} needs about {gib(need)} of host memory but {gib(have)} is available; "
                          f"{hint} (or set {ENV_HOST} if this machine's memory grows as it is used)")


#: Bytes an output row takes beyond its gather maps (its materialized columns), where the planner
#: knows them: set around a join's match (plan.join), read by the match's own check before it
#: allocates the maps (``check_pairs``), so that a result host memory cannot hold fails before the
#: maps take what memory there is (they alone had passed, then the columns' check failed after).
OUTPUT_ROW_BYTES: contextvars.ContextVar[int] = contextvars.ContextVar("gpujoin_output_row_bytes", default=0)


def check_pairs(pairs: int, map_bytes: int) -> None:
    """MemoryError before a join's ``pairs`` output rows are allocated where host memory cannot
    hold their gather maps (``map_bytes`` a row) and, where the planner set them
    (``OUTPUT_ROW_BYTES``), their columns."""
    cols = OUTPUT_ROW_BYTES.get()
    check_host(pairs * (map_bytes + cols),
               f"the join's {pairs:,} output rows (their gather maps{' and columns' if cols else ''})",
               "add a key column, filter the inputs, ask for less (how='semi')"
               + (", or pass sink= to have the output built and handed over a batch at a time" if cols else ""))


def gib(n: int) -> str:
    """``n`` bytes for a message: GiB with two decimals, or the bytes themselves below 10 MiB."""
    return f"{n / 2**30:.2f} GiB" if n >= 10 << 20 else f"{n:,} bytes"


#: Caps in force, by GPU: CuPy's pool limit before the first, and each holding thread's stack
#: of limits (several workers of a multi-GPU join may run on one GPU, as the tests do on a
#: machine of one; each is owed its own budget, so the pool is held to their sum).
_caps: dict[int, dict] = {}
_caps_lock = threading.Lock()


#: Functions that let go of the device memory a cache keeps between calls (nvCOMP's codecs'
#: scratch buffers, dist.cascaded): a memory cap calls them when CuPy's pool, its free blocks
#: freed, still holds more than the cap, or holds pieces in use at all.  A cache's lasting
#: pieces count against every later cap, and one small piece keeps its whole
#: pooled chunk (split from a larger freed block) out of reach: after the nvCOMP tests, 26
#: out-of-core tests under 2-4 MB caps failed; later 512 bytes a codec kept pinned a 2 MiB chunk
#: under a 2 MiB cap (the pool holding exactly the cap).
_releasers: list = []


def on_memory_cap(release) -> None:
    """Register ``release()`` (no arguments; True when it let anything go): drop a cache's device
    memory when a memory cap needs the room (gpu_memory_cap)."""
    if release not in _releasers:
        _releasers.append(release)


def _trim(pool, limit: int) -> None:
    """Make room for a cap of ``limit`` bytes: a pool holding more than the cap frees its cached
    blocks; the caches registered with on_memory_cap let go whenever pieces are in use (a cache's
    may pin whole chunks; no cap-taking path keeps codecs, so this costs them nothing)."""
    if pool.total_bytes() > limit:
        pool.free_all_blocks()
    if _releasers and pool.used_bytes() and any([release() for release in _releasers]):
        pool.free_all_blocks()  # (a list: every cache lets go)


def _set_cap(pool, entry) -> None:
    total = sum(stack[-1] for stack in entry["holders"].values())
    pool.set_limit(size=max(total, pool.used_bytes()))


@contextlib.contextmanager
def gpu_memory_cap(limit: int | None):
    """Hold CuPy's memory pool of the current GPU to ``limit`` bytes (None: no cap) inside the
    block.

    The pool keeps its cached free blocks (CuPy frees them itself when an allocation would pass
    the cap), so a repeated operation allocates nothing new; only a pool already holding more
    than the cap is trimmed on entry, outside the lock (its free blocks; the caches registered
    with on_memory_cap when pieces are in use).  (Freeing every block on entry, under
    the lock, serialized the threads of a multi-GPU join: on four H200s the fourth GPU began
    pass 1 236 ms after the first, and every run paid cudaMalloc again.)  The previous cap is
    restored when the last holder leaves.  A cap inside another
    in the same thread replaces it while it lasts; threads that hold caps on the same GPU at
    once (workers sharing it) are held to the sum of their limits.  An allocation past the cap
    raises MemoryError naming memory_limit.
    """
    if limit is None:
        yield
        return
    import cupy as cp

    pool = cp.get_default_memory_pool()
    dev, me = cp.cuda.Device().id, threading.get_ident()
    _trim(pool, limit)  # (the pool's cached blocks count in the operation's peak_gpu_bytes)
    with _caps_lock:
        entry = _caps.get(dev)
        if entry is None:
            entry = _caps[dev] = {"before": pool.get_limit(), "holders": {}}
        entry["holders"].setdefault(me, []).append(limit)
        _set_cap(pool, entry)
    try:
        yield
    except cp.cuda.memory.OutOfMemoryError as e:  # an allocation past the cap: name the cap
        raise MemoryError(f"GPU memory_limit={limit:,} bytes reached ({e}); raise memory_limit, or pass host "
                          f"tables so that out-of-core execution takes over") from None
    finally:
        with _caps_lock, cp.cuda.Device(dev):
            stack = entry["holders"][me]
            stack.pop()
            if not stack:
                del entry["holders"][me]
            if entry["holders"]:
                _set_cap(pool, entry)
            else:
                pool.set_limit(size=entry["before"])
                del _caps[dev]
