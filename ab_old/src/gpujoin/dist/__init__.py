"""Multi-GPU and distributed joins (papers 000 and 001).

One host, several GPUs (paper 000; ``gpus=`` of ``gpujoin.join``, ``join_where``, ``group_by``):
``devices`` (the GPUs, one host thread each), ``hybrid`` (radix partition, partition pairs spread
over the GPUs), ``gsm`` (global sort-merge with ``merge_path``), ``nested_loop`` (the peer-to-peer
ring of ``join_where``), ``groupby``.

Ranks over MPI (paper 001): ``comm.Communicator`` (ranks and hosts), ``shuffle`` (hash partition
and the one- and two-level all-to-all), ``join.join`` and ``join.group_by`` (SPMD: each rank its
slice in, its slice out), and ``model`` (paper 001 at scales not run here).
"""

from .comm import Communicator
from .join import group_by, join

__all__ = ["Communicator", "join", "group_by"]
