"""The host side of the streaming path (outofcore/stream.py) on the CPU: no GPU needed."""


def test_parallel_imap_keeps_order_bounds_the_window_and_runs_inside_the_pool():
    """stream.parallel_imap: results in the items' order, no more than ``ahead`` started beyond
    what was consumed, an early stop leaves nothing behind, and a call from one of the pool's
    own threads runs in line (it would otherwise wait on itself)."""
    import threading
    import time

    from gpujoin.outofcore.stream import parallel_imap, parallel_map

    started = []
    lock = threading.Lock()

    def slow(x):
        with lock:
            started.append(x)
        time.sleep(0.001 * (x % 3))
        return x * x

    assert list(parallel_imap(slow, range(50), ahead=4)) == [x * x for x in range(50)]
    started.clear()
    it = parallel_imap(slow, range(100), ahead=3)
    assert [next(it) for _ in range(5)] == [0, 1, 4, 9, 16]
    time.sleep(0.05)
    assert len(started) <= 5 + 3
    it.close()
    assert parallel_map(lambda n: list(parallel_imap(lambda x: x + 1, range(n))), [3, 4]) == [[1, 2, 3], [1, 2, 3, 4]]


def test_pairs_merge_read_and_close():
    """stream.Pairs: segments merged in order, read as contiguous copies, released once (a
    context manager); the CPU's join_where hands its pairs over as one such segment."""
    import numpy as np

    from gpujoin.outofcore.stream import Pairs

    class Arena:
        closed = 0

        def close(self):
            Arena.closed += 1

    a = Pairs([(np.array([0, 1]), np.array([5, 6]))], [Arena()])
    b = Pairs([(np.array([2]), np.array([7])), (np.empty(0, np.int64), np.empty(0, np.int64))], [Arena()])
    with Pairs.merge([a, b, Pairs()]) as both:
        assert len(both) == 3
        li, ri = both.arrays()
        assert li.tolist() == [0, 1, 2] and ri.tolist() == [5, 6, 7]
    assert Arena.closed == 2 and both.segments == [] and len(both) == 0
    assert [x.size for x in Pairs().arrays()] == [0, 0]


def test_release_host_memory_is_public_and_safe_without_a_gpu():
    import gpujoin

    assert "release_host_memory" in gpujoin.__all__
    assert gpujoin.release_host_memory() is None
