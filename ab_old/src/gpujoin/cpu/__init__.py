"""The CPU engine: multi-threaded Numba twins of gpujoin's algorithms (the reference backend)."""
