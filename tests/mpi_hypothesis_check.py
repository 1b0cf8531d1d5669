"""Run under ``mpiexec -n P python tests/mpi_hypothesis_check.py [RANKS_PER_NODE [DEVICE [EXAMPLES]]]``
(tests/test_dist_join.py does, with 2 ranks and with 4 as 2 hosts of 2): rank 0 draws tables with
Hypothesis (``strategies.join_pair``: duplicates, nulls, int64's ends, all-equal keys, Zipf,
int32 against int64, string and composite keys), the join type, the shuffle, null keys equal or
not, and which rank holds each row, and broadcasts the example; every rank joins its rows (``gpujoin.dist.join``, each rank
joining on DEVICE), and rank 0 checks the gathered result equals the one-process CPU join, row
for row.  A failure is shrunk on rank 0 while the other ranks follow its examples."""

import sys

import numpy as np
from hypothesis import given, settings, strategies as st

import gpujoin
from gpujoin.dist import Communicator, join
from gpujoin.testing import assert_tables_equal
from mpi_dist_check import gathered, run_or_abort
from strategies import join_pair

HOWS = ["inner", "left", "right", "full", "semi", "anti"]


def run(comm, example, device):
    """Every rank: its rows of the example's tables, joined across the ranks; the gathered result."""
    left, right, on, how, method, owners, nulls_equal = example
    mine = [t.take(np.flatnonzero(np.asarray(o, np.int64) == comm.rank)) for t, o in zip((left, right), owners)]
    return gathered(comm, join(mine[0], mine[1], on, how=how, comm=comm, shuffle=method, device=device,
                               nulls_equal=nulls_equal))


def main():
    rpn = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else None
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    examples = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    comm = Communicator.from_mpi(ranks_per_node=rpn)
    if comm.rank:
        while (example := comm.comm.bcast(None)) is not None:
            run(comm, example, device)
    else:
        @settings(max_examples=examples, deadline=None, database=None, derandomize=True)
        @given(data=st.data())
        def check(data):
            key_type = data.draw(st.sampled_from(["int", "int32", "string", "composite"]))
            left, right = data.draw(join_pair(key_type=key_type))
            owners = [data.draw(st.lists(st.integers(0, comm.size - 1), min_size=t.num_rows, max_size=t.num_rows))
                      for t in (left, right)]
            on = ["k", "k2"] if key_type == "composite" else "k"
            example = (left, right, on, data.draw(st.sampled_from(HOWS)),
                       data.draw(st.sampled_from(["one-level", "two-level"])), owners, data.draw(st.booleans()))
            comm.comm.bcast(example)
            assert_tables_equal(run(comm, example, device), gpujoin.join(left, right, on, how=example[3],
                                                                          nulls_equal=example[6], device="cpu"))

        try:
            check()
        finally:
            comm.comm.bcast(None)
    comm.barrier()
    print(f"rank {comm.rank} ok", flush=True)


if __name__ == "__main__":
    run_or_abort(main)
