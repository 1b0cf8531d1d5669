"""Ranks of a distributed job (paper 001: one process per GPU, started by ``mpirun`` or ``srun``).

:class:`Communicator` names the ranks and their topology (which ranks share a host, from MPI's
shared-memory split; the rail of GPU y of every host) and carries control, sizes and host data
over MPI (mpi4py).  It is the only transport gpujoin uses between processes: no sockets of its
own.  ``Communicator.single()`` is the one-rank job (no MPI needed), so that code written for
ranks runs, and is tested, in one process.
"""

from __future__ import annotations

import numpy as np

#: Largest byte count of one message: MPI-3 counts are 32-bit ints.
MAX_MESSAGE_BYTES = (1 << 31) - 1


class _Self:
    """The part of mpi4py's Comm interface a one-rank job needs, without MPI."""

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1

    def allgather(self, obj):
        return [obj]

    def bcast(self, obj, root=0):
        return obj

    def Barrier(self):
        pass

    def alltoall(self, objs):
        return list(objs)

    def Alltoallv(self, send, recv):
        (sbuf, (scounts, sdispls), _), (rbuf, (rcounts, rdispls), _) = send, recv
        rbuf[rdispls[0]:rdispls[0] + rcounts[0]] = sbuf[sdispls[0]:sdispls[0] + scounts[0]]

    def Split(self, color, key=0):
        return self

    def Split_type(self, *args, **kwargs):
        return self

    def Abort(self, code=1):
        raise SystemExit(code)


class Communicator:
    """The ranks of a job and their hosts.

    Attributes
    ----------
    rank, size : this rank and the number of ranks
    node, nodes : this rank's host (0 .. nodes - 1, in order of the hosts' lowest ranks) and the
        number of hosts
    local_rank, local_size : this rank among the ranks of its host, and their number
    device : the GPU this rank uses (``local_rank`` modulo the host's GPUs), or None
    """

    def __init__(self, mpi_comm, node_comm=None):
        self.comm = mpi_comm
        self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        node_comm = mpi_comm if node_comm is None else node_comm
        self.node_comm = node_comm
        self.local_rank, self.local_size = node_comm.Get_rank(), node_comm.Get_size()
        lowest = min(node_comm.allgather(self.rank))  # this host's lowest rank names it
        hosts = sorted(set(mpi_comm.allgather(lowest)))
        self.nodes, self.node = len(hosts), hosts.index(lowest)
        self.device = None
        self._rail = None

    @staticmethod
    def from_mpi(comm=None, ranks_per_node: int | None = None) -> Communicator:
        """The ranks of ``comm`` (default ``MPI.COMM_WORLD``), hosts found by MPI's shared-memory
        split (or, with ``ranks_per_node`` k, ranks k*i .. k*i + k - 1 taken as host i: how one
        machine plays several hosts, to run the two-level shuffle); each rank's GPU is its local
        rank modulo the host's GPUs (when CuPy sees any), made the process's current device.

        Raises
        ------
        ImportError
            mpi4py is not installed (``pip install mpi4py``; Open MPI or MPICH underneath).
        """
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise ImportError("gpujoin.dist needs mpi4py for more than one rank: pip install mpi4py (with Open MPI "
                              "or MPICH); one process can use Communicator.single()") from e
        world = MPI.COMM_WORLD if comm is None else comm
        if ranks_per_node:
            node = world.Split(world.Get_rank() // ranks_per_node, world.Get_rank())
        else:
            node = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.Get_rank())
        out = Communicator(world, node)
        from .devices import device_count

        gpus = device_count()
        if gpus:  # the rank's GPU is its current device for everything it runs
            import cupy as cp

            out.device = out.local_rank % gpus
            cp.cuda.runtime.setDevice(out.device)
        return out

    @staticmethod
    def single() -> Communicator:
        """A job of one rank (no MPI)."""
        return Communicator(_Self())

    # ---------------------------------------------------------------- collectives
    def allgather(self, obj) -> list:
        return self.comm.allgather(obj)

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        """End every rank of the job with ``code`` (after a failure inside a collective, which the
        other ranks would wait on for ever)."""
        self.comm.Abort(code)

    def rail(self) -> Communicator:
        """The ranks of the same local rank on every host (paper 001's rail: GPU y of each node),
        ordered by host; this rank's index in it is its ``node``."""
        if self._rail is None:
            sub = self.comm.Split(self.local_rank, self.node)
            self._rail = Communicator(sub, _SelfNode())
        return self._rail

    def host(self) -> Communicator:
        """The ranks of this host, ordered by local rank."""
        return Communicator(self.node_comm)

    def alltoall_counts(self, counts: np.ndarray) -> np.ndarray:
        """Each rank sends ``counts[j]`` (int64 (size,)) to rank j; returns what each rank sent
        here (int64 (size,)): the size exchange before an all-to-all."""
        return np.asarray(self.comm.alltoall([int(c) for c in counts]), np.int64)

    def alltoallv(self, send: np.ndarray, send_counts: np.ndarray, recv_counts: np.ndarray) -> np.ndarray:
        """Variable all-to-all of host array ``send`` (rows grouped by destination rank, ``send_counts``
        rows to each): returns the rows received, grouped by source rank (``recv_counts`` from
        :meth:`alltoall_counts`).

        Raises
        ------
        ValueError
            One message would exceed MPI's 2^31 - 1 bytes (send the rows in batches).
        """
        item = send.dtype.itemsize
        sc, rc = np.asarray(send_counts, np.int64) * item, np.asarray(recv_counts, np.int64) * item
        if max(sc.max(initial=0), rc.max(initial=0)) > MAX_MESSAGE_BYTES:
            raise ValueError(f"an all-to-all message of {int(max(sc.max(), rc.max())):,} bytes exceeds MPI's "
                             f"{MAX_MESSAGE_BYTES:,}; send the rows in batches")
        recv = np.empty(int(recv_counts.sum()), send.dtype)
        sd = np.concatenate([[0], np.cumsum(sc)[:-1]]).astype(np.int64)
        rd = np.concatenate([[0], np.cumsum(rc)[:-1]]).astype(np.int64)
        s8 = np.ascontiguousarray(send).view(np.uint8).reshape(-1)
        r8 = recv.view(np.uint8).reshape(-1)
        byte = _byte_type(self.comm)
        self.comm.Alltoallv([s8, (sc.astype(np.int32), sd.astype(np.int32)), byte],
                            [r8, (rc.astype(np.int32), rd.astype(np.int32)), byte])
        return recv


class _SelfNode(_Self):
    """A rail's ranks are on different hosts: to the rail, each is a host of one rank."""


def _byte_type(comm):
    if isinstance(comm, _Self):
        return None
    from mpi4py import MPI

    return MPI.BYTE
