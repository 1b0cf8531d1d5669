"""Ranks of a distributed job (paper 001: one process per GPU, started by ``mpirun`` or ``srun``).

:class:`Communicator` names the ranks and their topology (which ranks share a host, from MPI's
shared-memory split; the rail of GPU y of every host), carries control, sizes and host data over
MPI (mpi4py), and GPU data over NCCL (CuPy's bindings: grouped point-to-point sends and receives,
NCCL's all-to-all).  These are the only transports gpujoin uses between processes: no sockets of
its own.  ``Communicator.single()`` is the one-rank job (no MPI needed), so that code written for
ranks runs, and is tested, in one process.
"""

from __future__ import annotations

import os

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

    def Allgather(self, send, recv):
        recv[0] = send

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
    copy_engine : whether its NCCL communicator (made by :meth:`nccl`) runs all-to-alls of
        symmetric windows on the copy engines (``dist.registered``): False, True, or "force"
        (GPUJOIN_NCCL_CE=force on every rank: whatever the padding), the same on every rank
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
        self._rail = self._host = None
        self._nccl = None  # made at the first device all-to-all (a collective of every rank)
        self.copy_engine = False  # whether it runs all-to-alls on the copy engines (dist.registered)
        self._link_GBps: dict = {}  # by placement: False host data over MPI, True GPU data over NCCL
        self._message_s: dict = {}

    @staticmethod
    def from_mpi(comm=None, ranks_per_node: int | None = None) -> Communicator:
        """The ranks of ``comm`` (default ``MPI.COMM_WORLD``), hosts found by MPI's shared-memory
        split (or, with ``ranks_per_node`` k, ranks k*i .. k*i + k - 1 taken as host i: how one
        machine plays several hosts, to run the two-level shuffle); each rank's GPU is its rank
        among the processes of its real host (MPI's shared-memory split) modulo the host's GPUs
        (when CuPy sees any), made the process's current device: 8 ranks playing 4 hosts of 2
        on 8 GPUs take a GPU each (their played hosts' local ranks would put them on 2).

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
        real = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.Get_rank())
        node = world.Split(world.Get_rank() // ranks_per_node, world.Get_rank()) if ranks_per_node else real
        out = Communicator(world, node)
        local = real.Get_rank()
        if real is not node:
            real.Free()
        from .devices import device_count

        gpus = device_count()
        if gpus:  # the rank's GPU is its current device for everything it runs
            import cupy as cp

            out.device = local % gpus
            cp.cuda.runtime.setDevice(out.device)
        return out

    @staticmethod
    def single() -> Communicator:
        """A job of one rank (no MPI)."""
        return Communicator(_Self())

    @staticmethod
    def from_nccl(comm, nccl_comm) -> Communicator:
        """The ranks of ``comm`` (an mpi4py communicator, for control and sizes) with an existing
        ``cupy.cuda.nccl.NcclCommunicator`` over the same ranks, in the same order, for GPU data;
        each rank's GPU is the NCCL communicator's device.

        Raises
        ------
        ValueError
            The two communicators differ in size or in this rank's number.
        """
        out = Communicator.from_mpi(comm)
        if (nccl_comm.size(), nccl_comm.rank_id()) != (out.size, out.rank):
            raise ValueError(f"the NCCL communicator has rank {nccl_comm.rank_id()} of {nccl_comm.size()}, "
                             f"MPI rank {out.rank} of {out.size}: give both over the same ranks, in order")
        import cupy as cp

        out.device = nccl_comm.device_id()
        cp.cuda.runtime.setDevice(out.device)
        out._nccl = nccl_comm
        return out

    # ---------------------------------------------------------------- collectives
    def allgather(self, obj) -> list:
        return self.comm.allgather(obj)

    def allgather_array(self, a: np.ndarray) -> np.ndarray:
        """Every rank's ``a`` (NumPy, the same shape and dtype on every rank) stacked in rank
        order, (size, *a.shape): one MPI Allgather of the buffers, without pickling them."""
        a = np.ascontiguousarray(a)
        out = np.empty((self.size, *a.shape), a.dtype)
        self.comm.Allgather(a, out)
        return out

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
            self._rail.device = self.device
        return self._rail

    def host(self) -> Communicator:
        """The ranks of this host, ordered by local rank (one object a job: its NCCL communicator,
        made on first use, serves every later shuffle)."""
        if self._host is None:
            self._host = Communicator(self.node_comm)
            self._host.device = self.device
        return self._host

    def nccl(self):
        """This job's NCCL communicator (made on first use: every rank must call), or None when
        two of its ranks use one GPU (NCCL refuses a GPU twice in a communicator: device data
        then goes through host memory and MPI, see :meth:`alltoallv_device`)."""
        if self._nccl is None:
            import platform

            import cupy as cp
            from cupy.cuda import nccl

            from . import registered

            # whether this rank's environment and NCCL ask for the copy engines: every rank's
            # answer goes round with its host and GPU, so that all take the same path
            where = (platform.node(), cp.cuda.Device().pci_bus_id)
            everyone = self.comm.allgather((where, registered.copy_engine_wanted(True),
                                            os.environ.get("GPUJOIN_NCCL_CE") == "force"))
            if len({w for w, _, _ in everyone}) < len(everyone):
                self._nccl = False
            else:
                # on one host, NCCL's zero-CTA policy: ncclAlltoAll and ncclAllGather on the copy
                # engines (NCCL reads NCCL_CTA_POLICY at its first communicator of the process)
                wanted = len({w[0] for w, _, _ in everyone}) == 1 and all(a for _, a, _ in everyone)
                before = os.environ.get("NCCL_CTA_POLICY")
                if wanted:
                    os.environ["NCCL_CTA_POLICY"] = str(registered.CTA_POLICY_ZERO)
                try:
                    uid = self.comm.bcast(nccl.get_unique_id() if self.rank == 0 else None)
                    self._nccl = nccl.NcclCommunicator(self.size, uid, self.rank)
                finally:
                    if before is None:
                        os.environ.pop("NCCL_CTA_POLICY", None)
                self.copy_engine = ("force" if all(f for _, _, f in everyone) else True) if wanted else False
        return self._nccl or None

    @property
    def nccl_made(self) -> bool:
        """Whether :meth:`nccl` has made this job's NCCL communicator already (no collective)."""
        return bool(self._nccl)

    def _alltoall_s(self, per: int, dtype, reps: int, device: bool = False) -> float:
        """Seconds of an all-to-all of ``per`` values of ``dtype`` to every rank, the slowest
        rank's, median of ``reps`` (a collective): host arrays over MPI, or (``device``) GPU
        arrays through the shuffle's own transport (:meth:`alltoallv_device`: NCCL, the
        self-copy beside it), after one untimed run that makes the NCCL communicator."""
        import time

        counts = np.full(self.size, per, np.int64)
        if device:
            import cupy as cp

            send = cp.zeros(per * self.size, dtype)
            side = cp.cuda.Stream(non_blocking=True)  # the self-copy beside the NCCL group, as NCCL's own

            def once():
                self.alltoallv_device([send], counts, counts, self_stream=side)
                cp.cuda.get_current_stream().synchronize()
            once()
        else:
            send = np.zeros(per * self.size, dtype)

            def once():
                self.alltoallv(send, counts, counts)
        times = []
        for _ in range(reps):
            self.barrier()
            t0 = time.perf_counter()
            once()
            times.append(max(self.allgather(time.perf_counter() - t0)))
        return float(np.median(times))

    def measure_alltoall_GBps(self, nbytes: int = 1 << 26, reps: int = 3, device: bool = False) -> float:
        """GB/s each rank sends to the others in an all-to-all of ``nbytes`` a rank (split
        evenly), the slowest rank's, median of ``reps`` (a collective; inf for one rank): host
        data over MPI, or GPU data over NCCL (``device``)."""
        if self.size == 1:
            return float("inf")
        per = nbytes // self.size
        return per * (self.size - 1) / self._alltoall_s(per, np.uint8, reps, device) / 1e9

    def link_GBps(self, device: bool = False) -> float:
        """This communicator's all-to-all GB/s a rank, for host data (over MPI) or GPU data
        (``device``: over NCCL): for ranks on several hosts GPUJOIN_INTER_HOST_GBPS when set on
        every rank (a NIC's known rate), else measured once (:meth:`measure_alltoall_GBps`, 64
        MiB a rank) and kept.  A collective on first use."""
        if device not in self._link_GBps:
            given = os.environ.get("GPUJOIN_INTER_HOST_GBPS") if self.nodes > 1 else None
            self._link_GBps[device] = float(given) if given else self.measure_alltoall_GBps(device=device)
        return self._link_GBps[device]

    def message_s(self, reps: int = 5, device: bool = False) -> float:
        """Seconds a message of an all-to-all costs beyond its bytes (paper 001's per-message
        latency): an all-to-all of 8 bytes to every rank (host data over MPI, or GPU data over
        NCCL with ``device``), the slowest rank's, median of ``reps``, over the size - 1
        messages a rank sends.  Measured once (a collective); 0 for one rank."""
        if device not in self._message_s:
            self._message_s[device] = (0.0 if self.size == 1 else
                                       self._alltoall_s(1, np.int64, reps, device) / (self.size - 1))
        return self._message_s[device]

    def alltoall_counts(self, counts: np.ndarray) -> np.ndarray:
        """Each rank sends ``counts[j]`` (int64 (size,)) to rank j; returns what each rank sent
        here (int64 (size,)): the size exchange before an all-to-all."""
        return np.asarray(self.comm.alltoall([int(c) for c in counts]), np.int64)

    def alltoallv(self, send: np.ndarray, send_counts: np.ndarray, recv_counts: np.ndarray) -> np.ndarray:
        """Variable all-to-all of host array ``send`` (rows grouped by destination rank, ``send_counts``
        rows to each): returns the rows received, grouped by source rank (``recv_counts`` from
        :meth:`alltoall_counts`).

        Messages past MPI's 32-bit counts (``MAX_MESSAGE_BYTES``) go in rounds, the same number on
        every rank.
        """
        item = send.dtype.itemsize
        sc, rc = np.asarray(send_counts, np.int64) * item, np.asarray(recv_counts, np.int64) * item
        recv = np.empty(int(np.asarray(recv_counts).sum()), send.dtype)
        s8 = np.ascontiguousarray(send).view(np.uint8).reshape(-1)
        r8 = recv.view(np.uint8).reshape(-1)
        sd, rd = _starts(sc), _starts(rc)
        mine = int(max(sc.max(initial=0), rc.max(initial=0))) // MAX_MESSAGE_BYTES + 1
        rounds = max(self.comm.allgather(mine))
        byte = _byte_type(self.comm)
        for r in range(rounds):  # round r moves bytes [c * r // rounds, c * (r + 1) // rounds) of each message
            s0, s1, r0, r1 = sc * r // rounds, sc * (r + 1) // rounds, rc * r // rounds, rc * (r + 1) // rounds
            sbuf = np.concatenate([s8[a + b:a + c] for a, b, c in zip(sd, s0, s1)]) if len(sc) > 1 else \
                s8[s0[0]:s1[0]]
            rbuf = np.empty(int((r1 - r0).sum()), np.uint8)
            self.comm.Alltoallv([sbuf, ((s1 - s0).astype(np.int32), _starts(s1 - s0).astype(np.int32)), byte],
                                [rbuf, ((r1 - r0).astype(np.int32), _starts(r1 - r0).astype(np.int32)), byte])
            pos = 0
            for a, b, c in zip(rd, r0, r1):
                r8[a + b:a + c] = rbuf[pos:pos + c - b]
                pos += int(c - b)
        return recv

    def alltoallv_device(self, columns: list, send_counts: np.ndarray, recv_counts: np.ndarray,
                         self_stream=None) -> list:
        """:meth:`alltoallv` of GPU columns (CuPy arrays of one length, rows grouped by destination
        rank, ``send_counts`` to each): returns one CuPy array a column of the rows received
        (``recv_counts.sum()`` rows, laid out by :class:`DeviceLayout`: not by source rank).

        Over NCCL, every column's messages in one group of sends and receives on the current
        stream (paper 001's all-to-all), each message cut into a 16-byte-aligned body and short
        remainders (:func:`cut`); the rank's own rows are a device copy (on ``self_stream`` when
        given, beside the NCCL group; the current stream waits for it).  When ranks share a GPU
        (:meth:`nccl` is None), through host memory and MPI, grouped by source rank."""
        import cupy as cp

        sc, rc = np.asarray(send_counts, np.int64), np.asarray(recv_counts, np.int64)
        out = [cp.empty(int(rc.sum()), c.dtype) for c in columns]
        comm = self.nccl() if self.size > 1 else None
        if comm is None and self.size > 1:
            for c, o in zip(columns, out):
                o.set(self.alltoallv(cp.asnumpy(c), sc, rc))
            return out
        sd = _starts(sc)
        theirs = np.asarray(self.comm.alltoall([int(x) for x in sd]), np.int64)
        layout = DeviceLayout(self.rank, [(sd, sc, theirs, rc)])
        sends, recvs, (src, dst, rows) = layout.unit(0)
        if comm is not None:
            self.post_device(columns, out, sends, recvs)
        main = cp.cuda.get_current_stream()
        side = self_stream or main
        with side:
            for c, o in zip(columns, out):
                o[dst:dst + rows] = c[src:src + rows]
        if side is not main:
            main.wait_event(side.record())
        return out

    def post_device(self, columns: list, out: list, sends: list, recvs: list) -> None:
        """One NCCL group on the current stream: for each column of ``columns`` (CuPy arrays), the
        messages ``sends`` ((peer, first row, rows) of the column), and into the same column of
        ``out`` the messages ``recvs`` ((peer, first row, rows)).  NCCL matches one pair's
        messages in the order posted: both ends list them in the same order."""
        ss, rr = [], []
        for c, o in zip(columns, out):
            w = c.dtype.itemsize
            ss += [(j, c.data.ptr + start * w, rows * w) for j, start, rows in sends]
            rr += [(j, o.data.ptr + start * w, rows * w) for j, start, rows in recvs]
        self._nccl_group(ss, rr)

    def _nccl_group(self, sends: list, recvs: list) -> None:
        """The byte messages ``sends`` and ``recvs`` ((peer, device address, bytes)) in one NCCL
        group on the current stream, in the order listed."""
        import cupy as cp
        from cupy.cuda import nccl

        comm = self.nccl()
        stream = cp.cuda.get_current_stream().ptr
        nccl.groupStart()
        try:
            for j, addr, n in pieces(sends):
                comm.send(addr, n, nccl.NCCL_UINT8, j, stream)
            for j, addr, n in pieces(recvs):
                comm.recv(addr, n, nccl.NCCL_UINT8, j, stream)
        finally:
            nccl.groupEnd()

    def exchange_messages(self, sends: list, recvs: list) -> None:
        """Point-to-point byte messages between GPUs: ``sends`` ((peer, uint8 CuPy array)) go out,
        ``recvs`` ((peer, uint8 CuPy array to fill)) come in, each pair's in the order listed
        (both ends list them alike; no message to or from this rank).  Over NCCL in one group on
        the current stream; where ranks share a GPU (:meth:`nccl` is None) through host memory
        and one MPI all-to-all, each peer's messages in one."""
        import cupy as cp

        if self.size == 1:
            return
        if self.nccl() is not None:
            self._nccl_group([(j, a.data.ptr, a.nbytes) for j, a in sends if a.nbytes],
                             [(j, a.data.ptr, a.nbytes) for j, a in recvs if a.nbytes])
            return
        sc, rc = np.zeros(self.size, np.int64), np.zeros(self.size, np.int64)
        for j, a in sends:
            sc[j] += a.nbytes
        for j, a in recvs:
            rc[j] += a.nbytes
        order = sorted(range(len(sends)), key=lambda i: sends[i][0])  # stable: each peer's in order
        host = np.concatenate([cp.asnumpy(sends[i][1]) for i in order] or [np.empty(0, np.uint8)])
        got = self.alltoallv(host, sc, rc)
        pos = _starts(rc)
        for j, a in recvs:
            a.set(got[pos[j]:pos[j] + a.nbytes])
            pos[j] += a.nbytes


#: Largest NCCL message, bytes: longer ones go as several, cut alike at both ends (counts stay
#: well inside 32 bits, whatever NCCL does with them; a bench of 2 GiB messages printed nothing
#: for minutes on two H100s, 2026-11-25, cause not found).
MAX_NCCL_MESSAGE = 1 << 30


def pieces(messages: list, cap: int = MAX_NCCL_MESSAGE) -> list:
    """``messages`` ((peer, address, bytes)) with each longer than ``cap`` cut into pieces of at
    most ``cap`` bytes, in order: a sender and its receiver cut a message of n bytes alike, so
    NCCL's in-order matching of one pair's messages still pairs them."""
    out = []
    for j, addr, n in messages:
        out += [(j, addr + a, min(cap, n - a)) for a in range(0, n, cap)] if n > cap else [(j, addr, n)]
    return out


#: Rows of the aligned blocks the device all-to-all sends whole (16 bytes of a 1-byte column).
ALIGN_ROWS = 16


def cut(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """int64 (..., 3): each message of ``counts`` rows from row ``starts`` of its sender cut into
    (head, body, tail) rows, the body the whole ``ALIGN_ROWS`` blocks inside it: NCCL copies at
    full speed only between 16-byte aligned addresses (measured on two H200s: 210 GB/s a rank
    from unaligned buffers, 295 from aligned ones)."""
    a = ALIGN_ROWS
    lo = np.minimum(-(-starts // a) * a, starts + counts)
    hi = np.maximum((starts + counts) // a * a, lo)
    return np.stack([lo - starts, hi - lo, starts + counts - hi], axis=-1)


class DeviceLayout:
    """Where the messages of one or more all-to-alls (units, e.g. a table's chunks) land in one
    receive buffer: every unit's aligned bodies from every peer first (each a multiple of
    ``ALIGN_ROWS`` rows, so each starts aligned), then the peers' short heads and tails, then
    the rank's own rows.

    ``units``: per unit (my send starts (P,), my send counts (P,), each peer's send start of its
    rows for me (P,), each peer's count for me (P,)), int64 rows.
    """

    def __init__(self, rank: int, units: list):
        self.rank, self.units = rank, units
        peers = [j for j in range(len(units[0][1])) if j != rank] if units else []
        self.peers = peers
        theirs = [cut(ts[peers], tc[peers]) for _, _, ts, tc in units]
        bodies = np.cumsum([0] + [int(x) for c in theirs for x in c[:, 1]])
        rests = bodies[-1] + np.cumsum([0] + [int(x) for c in theirs for x in c[:, 0] + c[:, 2]])
        own = rests[-1] + np.cumsum([0] + [int(tc[rank]) for _, _, _, tc in units])
        self._theirs, self._bodies, self._rests, self._own = theirs, bodies, rests, own
        self.rows = int(own[-1])

    def unit(self, u: int) -> tuple[list, list, tuple[int, int, int]]:
        """(sends, recvs, (first own row in the unit's send buffer, its place here, rows)) of
        unit ``u``, as :meth:`Communicator.post_device` takes them."""
        sd, sc, _, _ = self.units[u]
        k = len(self.peers)
        sends, recvs = [], []
        for i, j in enumerate(self.peers):
            h, b, t = (int(x) for x in cut(sd[j], sc[j]))
            s0 = int(sd[j])
            sends += [(j, st, n) for st, n in ((s0 + h, b), (s0, h), (s0 + h + b, t)) if n]
            h, b, t = (int(x) for x in self._theirs[u][i])
            body, rest = int(self._bodies[u * k + i]), int(self._rests[u * k + i])
            recvs += [(j, st, n) for st, n in ((body, b), (rest, h), (rest + h, t)) if n]
        return sends, recvs, (int(sd[self.rank]), int(self._own[u]), int(sc[self.rank]))

    def received(self, u: int) -> dict[int, list[tuple[int, int, int]]]:
        """Where unit ``u``'s message from each peer lands: per peer, its pieces as (row in the
        receive buffer, row in the message, rows): the head, the aligned body and the tail."""
        k = len(self.peers)
        out = {}
        for i, j in enumerate(self.peers):
            h, b, t = (int(x) for x in self._theirs[u][i])
            body, rest = int(self._bodies[u * k + i]), int(self._rests[u * k + i])
            out[j] = [(rest, 0, h), (body, h, b), (rest + h, h + b, t)]
        return out


class _SelfNode(_Self):
    """A rail's ranks are on different hosts: to the rail, each is a host of one rank."""


def _starts(counts: np.ndarray) -> np.ndarray:
    """int64 start of each of ``counts``' consecutive runs."""
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def _byte_type(comm):
    if isinstance(comm, _Self):
        return None
    from mpi4py import MPI

    return MPI.BYTE
