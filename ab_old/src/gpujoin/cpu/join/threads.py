"""Running a CPU kernel on a chosen number of threads (paper 002's thread-count axis)."""

from __future__ import annotations

import contextlib

import numba


@contextlib.contextmanager
def num_threads(threads: int | None):
    """Numba's thread pool bounded to ``threads`` (all when None) inside the block.

    Raises
    ------
    ValueError
        threads outside 1..numba.config.NUMBA_NUM_THREADS.
    """
    if threads is None:
        yield numba.get_num_threads()
        return
    top = numba.config.NUMBA_NUM_THREADS
    if not 1 <= threads <= top:
        raise ValueError(f"threads={threads}: this process has 1..{top} threads (NUMBA_NUM_THREADS)")
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        yield threads
    finally:
        numba.set_num_threads(before)
