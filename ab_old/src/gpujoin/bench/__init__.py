"""Benchmarks (``gpujoin bench``): the workloads of paper 003 §5, timed, written as JSON lines."""
