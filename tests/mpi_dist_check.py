"""Run under ``mpiexec -n P python tests/mpi_dist_check.py [RANKS_PER_NODE [DEVICE]]``
(tests/test_dist_join.py does, on the CPU; scripts/device_check.sh's tests-dist stage on the GPUs): every rank takes every P-th row of the same tables, the distributed join and group-by run
with both shuffles, and rank 0 checks the gathered result against gpujoin's one-process answer.
Exits non-zero on any difference (an assertion on rank 0 aborts the job)."""

import sys

import numpy as np
import pyarrow as pa

import gpujoin
from gpujoin.dist import Communicator, group_by, join
from gpujoin.testing import assert_tables_equal


def ipc(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def gathered(comm, table):
    parts = comm.allgather(ipc(table))
    return pa.concat_tables([pa.ipc.open_stream(p).read_all() for p in parts])


def check_build_side(stats, how, on, left, right, present=False):
    """A rank's local join built on the side the one-process join of the whole tables builds
    on, where the rank's received sides are near in size (a null key's row is received but not
    built on: 5% of left's).  ``present``: that join counts the rows whose keys are all present
    (a join of DeviceTables), else every row (host tables)."""
    from gpujoin.plan.join import build_on_left

    def rows(t):
        if not present:
            return t.num_rows
        valid = np.ones(t.num_rows, bool)
        for k in [on] if isinstance(on, str) else on:
            valid &= np.asarray(t[k].is_valid())
        return int(valid.sum())

    nl, nr = stats["rows_received"]
    if max(nl, nr) <= 1.5 * min(nl, nr):
        want = "left" if build_on_left(how, rows(left), rows(right)) else "right"
        assert stats["local_build_side"] == want, (how, on, stats)


def main():
    rpn = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else None
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"  # where each rank joins its rows
    comm = Communicator.from_mpi(ranks_per_node=rpn)
    rng = np.random.default_rng(7)
    n = 2000
    left = pa.table({"k": pa.array(rng.integers(0, 400, n), mask=rng.random(n) < 0.05),
                     "s": pa.array([f"s{i}" for i in rng.integers(0, 40, n)]), "a": np.arange(n)})
    right = pa.table({"k": rng.integers(0, 500, n), "s": pa.array([f"s{i}" for i in rng.integers(0, 40, n)]),
                      "b": rng.random(n)})
    # every third rank's slice is empty: ranks without rows still take part in every exchange
    mine = (lambda t: t.slice(0, 0)) if comm.rank % 3 == 2 else \
        (lambda t: t.take(np.arange(comm.rank, t.num_rows, comm.size)))
    rest = [r for r in range(comm.size) if r % 3 == 2]  # the rows of the empty ranks go to rank 0
    extra = (lambda t: pa.concat_tables([mine(t)] + [t.take(np.arange(r, t.num_rows, comm.size)) for r in rest])) \
        if comm.rank == 0 else mine
    layout = comm.allgather((comm.node, comm.local_rank))
    got = comm.allgather_array(np.array([[comm.rank, -comm.rank], [1, 2**40]], np.int64))  # the device shuffle's counts
    assert got.shape == (comm.size, 2, 2) and [g[0, 0] for g in got] == list(range(comm.size))
    assert (got[:, 1, 1] == 2**40).all() and (got[:, 0, 1] == -np.arange(comm.size)).all()
    if comm.rank == 0:
        print("layout (node, local rank):", layout, flush=True)
    for method in ("one-level", "two-level"):
        for how in ("inner", "left", "right", "full", "semi", "anti"):
            for on in ("k", ["k", "s"]):
                stats = {}
                compression = "cascaded" if how in ("inner", "full") else "auto"
                out = join(extra(left), extra(right), on, how=how, comm=comm, shuffle=method, device=device,
                           stats=stats, compression=compression)
                if compression == "cascaded" and comm.rank == 0:  # "a" (row ids) and "k" (right: no nulls)
                    assert {"a", "k"} <= set(stats["compression"]), stats["compression"]
                # every rank builds on the side the job's row counts pick, whatever it received
                check_build_side(stats, how, on, left, right)
                got = gathered(comm, out)
                if comm.rank == 0:
                    assert_tables_equal(got, gpujoin.join(left, right, on, how=how, device="cpu"))
        g = group_by(extra(right), ["s"], comm=comm, shuffle=method, device=device).agg(
            n=(None, "size"), t=("b", "sum"), m=("k", "max"))
        got = gathered(comm, g)
        if comm.rank == 0:
            assert_tables_equal(got, gpujoin.group_by(right, ["s"], device="cpu").agg(
                n=(None, "size"), t=("b", "sum"), m=("k", "max")), rel=1e-9)
        st = {}
        g = group_by(extra(left), "k", comm=comm, shuffle=method, device=device, compression="cascaded",
                     stats=st).agg(n=(None, "size"))
        if comm.size > 1 and comm.rank == 0:  # "a" (row ids) compressed on the way
            assert "a" in st["compression"], st
        got = gathered(comm, g)
        if comm.rank == 0:
            assert_tables_equal(got, gpujoin.group_by(left, "k", device="cpu").agg(n=(None, "size")))
    # keys that stress the hashing: one value everywhere, int64's ends, floats with -0.0 and NaN
    # (equal to 0.0 and to each other, as the one-process join has them), decimals, dates
    cases = {
        "equal": (pa.array(np.full(300, 7)), pa.array(np.full(200, 7))),
        "extremes": (pa.array(rng.choice([-(2**63), -1, 0, 2**63 - 1], 400)),
                     pa.array(rng.choice([-(2**63), 1, 0, 2**63 - 1], 300))),
        "floats": (pa.array(rng.choice([0.0, -0.0, np.nan, 1.5, -2.25], 400)),
                   pa.array(rng.choice([0.0, np.nan, 1.5, 3.0], 300))),
        "dates": (pa.array(rng.integers(0, 50, 400).astype(np.int32), pa.date32()),
                  pa.array(rng.integers(0, 60, 300).astype(np.int32), pa.date32())),
        "empty": (pa.array(rng.integers(0, 9, 400)), pa.array(np.zeros(0, np.int64))),
        # dictionary-encoded on each rank apart (below): the codes differ, the strings must meet
        "dictionary": (pa.array([f"w{i}" for i in rng.integers(0, 30, 400)], mask=rng.random(400) < 0.1),
                       pa.array([f"w{i}" for i in rng.integers(10, 40, 300)])),
    }
    for name, (lk, rk) in cases.items():
        lt = pa.table({"k": lk, "i": np.arange(len(lk))})
        rt = pa.table({"k": rk, "j": np.arange(len(rk))})
        for how in ("inner", "full", "anti"):
            sides = [extra(lt), extra(rt)]
            if name == "dictionary":
                sides = [m.set_column(0, "k", m["k"].dictionary_encode()) for m in sides]
            got = gathered(comm, join(*sides, "k", how=how, comm=comm, device=device))
            if comm.rank == 0:
                print(f"{name} {how}", flush=True)  # names the case when the check below fails
                got = pa.table({n: c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
                                for n, c in zip(got.column_names, got.columns)})
                assert_tables_equal(got, gpujoin.join(lt, rt, "k", how=how, device="cpu"))
    # a payload column of int32 on rank 1 and int64 elsewhere: a TypeError on every rank, for the
    # join and the group-by (the rows a rank receives are concatenated with its own schema: that
    # rank alone had failed there, and the others waited for it)
    odd = pa.table({"k": np.arange(10), "i": pa.array(np.arange(10), pa.int32() if comm.rank == 1 else pa.int64())})
    for what, run in (("join", lambda: join(odd, odd, "k", comm=comm, device=device)),
                      ("group-by", lambda: group_by(odd, "k", comm=comm, device=device).agg(n=(None, "size")))):
        raised_on_every_rank(comm, f"host {what}: a column's type differing on rank 1", run, TypeError,
                             lambda m: "columns" in m)
    null_keys_equal(comm, extra, left, right, lambda t: t, device)
    # shuffle="auto": on 2 hosts of 2 the crossover model with this job's links, measured, and
    # the same on every rank (the rails and hosts measure their own: ranks that chose apart hung)
    from gpujoin.dist.model import measured_rates

    assert len(set(comm.allgather(measured_rates(comm, device=device == "cuda")))) == 1
    stats = {}
    got = gathered(comm, join(extra(left), extra(right), "k", how="full", comm=comm, device=device, stats=stats))
    if comm.rank == 0:
        assert_tables_equal(got, gpujoin.join(left, right, "k", how="full", device="cpu"))
    auto_compression(left, right)
    if device == "cuda":
        device_tables(comm, extra, left, right)
    comm.barrier()
    print(f"rank {comm.rank} ok", flush=True)


def null_keys_equal(comm, extra, left, right, form, device="auto"):
    """nulls_equal=True with null keys on both sides (``form``: a rank's slice as passed to the
    join): every row with one goes to rank 0, where they meet."""
    rng = np.random.default_rng(3)
    right = right.set_column(0, "k", pa.array(right["k"].to_numpy(), mask=rng.random(right.num_rows) < 0.05))
    for how, buckets in (("inner", "auto"), ("left", 3), ("full", "auto"), ("anti", 3)):  # (buckets: GPU tables)
        for on in ("k", ["k", "s"]):
            out = join(form(extra(left)), form(extra(right)), on, how=how, comm=comm, device=device,
                       nulls_equal=True, buckets=buckets)
            got = gathered(comm, out if isinstance(out, pa.Table) else out.to_arrow())
            if comm.rank == 0:
                print(f"nulls_equal {how} {on} buckets {buckets}", flush=True)
                assert_tables_equal(got, gpujoin.join(left, right, on, how=how, device="cpu", nulls_equal=True))


def auto_compression(left, right):
    """``compression="auto"`` of host tables, every rank a host of its own: on a link of 1 MB/s
    the NumPy codec pays and the integer columns go compressed; on one of 1 PB/s none does."""
    import os

    for rate, pays in (("0.001", True), ("1e6", False)):
        os.environ["GPUJOIN_INTER_HOST_GBPS"] = rate  # read once by each new communicator
        comm = Communicator.from_mpi(ranks_per_node=1)
        stats = {}
        out = join(left.take(np.arange(comm.rank, left.num_rows, comm.size)),
                   right.take(np.arange(comm.rank, right.num_rows, comm.size)), "k", comm=comm,
                   shuffle="one-level", compression="auto", device="cpu", stats=stats)
        got = gathered(comm, out)
        if comm.size > 1:
            assert ("a" in stats["compression"]) == pays, stats
            assert ("a" in stats["compression_not_paying"]) != pays, stats
        if comm.rank == 0:
            assert_tables_equal(got, gpujoin.join(left, right, "k", device="cpu"))
    del os.environ["GPUJOIN_INTER_HOST_GBPS"]


def raised_on_every_rank(comm, label: str, run, error, expect) -> None:
    """``run()`` raises ``error``, its message passing ``expect``, on every rank where there are
    several (one rank has none to differ from, and no error); rank 0 prints ``label`` and what
    happened."""
    try:
        run()
        raised = None
    except error as err:
        raised = str(err)
    assert (raised is not None) == (comm.size > 1) and (raised is None or expect(raised)), raised
    if comm.rank == 0:
        print(f"{label}: {'raised on every rank' if raised else 'none'}", flush=True)


def device_tables(comm, extra, left, right):
    """Tables in GPU memory, shuffled over NCCL (or through the host where ranks share a GPU):
    each rank's string columns dictionary-coded over its own strings (re-coded by the join into
    one dictionary), a nullable payload; the result a DeviceTable a rank."""
    import pyarrow.compute as pc

    from gpujoin.cuda.table import DeviceTable
    from gpujoin.dist.cascaded import nvcomp

    # (left's keys hold nulls: they match nothing and stay on their rank)
    right = right.append_column("c", pa.array(np.arange(right.num_rows) % 7, mask=np.arange(right.num_rows) % 5 == 0))
    dev = lambda t: DeviceTable.from_arrow(extra(t))  # noqa: E731
    null_keys_equal(comm, extra, left, right, DeviceTable.from_arrow)
    # keys of two decimal scales: rescaled before the shuffle, so that 1.00 and 1.000 meet on one
    # rank (the radix shuffle too: "one-level"); each side's own key kept where not coalesced
    dl = left.set_column(0, "k", left["k"].cast(pa.int32()).cast(pa.decimal128(12, 2)))
    dr = right.set_column(0, "k", right["k"].cast(pa.int32()).cast(pa.decimal128(14, 3)))
    for how, coalesce in (("inner", None), ("full", False), ("left", True), ("anti", None)):
        for method in ("one-level", "two-level"):
            got = gathered(comm, join(dev(dl), dev(dr), "k", how=how, comm=comm, shuffle=method,
                                      coalesce=coalesce).to_arrow())
            if comm.rank == 0:
                print(f"device scales {method} {how} coalesce={coalesce}", flush=True)
                assert_tables_equal(got, gpujoin.join(dl, dr, "k", how=how, coalesce=coalesce, device="cpu"))
    # a key whose rescaling passes 64 bits on rank 1 only: a SchemaError on every rank, naming
    # rank 1 (the ranks share their failures in the sizes' allgather)
    from decimal import Decimal

    from gpujoin.errors import SchemaError

    vals = left["k"].cast(pa.int32()).cast(pa.decimal128(18, 2)).to_pylist()
    vals[1] = Decimal("9999999999999999.99")  # (x 10 passes int64 at scale 3; row 1 is rank 1's)
    big = left.set_column(0, "k", pa.array(vals, pa.decimal128(18, 2)))
    wide = right.set_column(0, "k", right["k"].cast(pa.int32()).cast(pa.decimal128(18, 3)))
    for method in ("one-level", "two-level"):
        raised_on_every_rank(comm, f"device scales past 64 bits on rank 1 {method}",
                             lambda: join(dev(big), dev(wide), "k", comm=comm, shuffle=method), SchemaError,
                             lambda m: m.startswith("rank 1:"))
    # left keys of int64 on rank 1 and int32 on the others, or a payload column of int32 there:
    # a TypeError on every rank, not bytes read as other values (the sizes' allgather carries a
    # hash of the columns' types; their names are compared where the hashes differ; no string
    # columns, which would have the ranks compare the names anyway)
    nl, nr = left.select(["k", "a"]), right.select(["k", "b", "c"])
    for what, odd_l, odd_r in (
            ("key", nl.set_column(0, "k", nl["k"].cast(pa.int64() if comm.rank == 1 else pa.int32())), nr),
            ("payload", nl, nr.set_column(2, "c", nr["c"].cast(pa.int32() if comm.rank == 1 else pa.int64())))):
        raised_on_every_rank(comm, f"device {what} types differing on rank 1",
                             lambda: join(dev(odd_l), dev(odd_r), "k", comm=comm), TypeError, lambda m: "columns" in m)
    for method in ("one-level", "two-level"):
        for how in ("inner", "left", "right", "full", "semi", "anti"):
            for on in ("k", ["k", "s"]):
                stats = {}
                # nvCOMP on the GPU where installed: every message compressed, or only those to
                # other hosts; the rows joined must not change
                compression = ("cascaded" if how in ("inner", "full") else "auto") if nvcomp() else "none"
                out = join(dev(left), dev(right), on, how=how, comm=comm, shuffle=method, stats=stats,
                           compression=compression)
                assert isinstance(out, DeviceTable) and stats["transport"] == "nccl", type(out)
                check_build_side(stats, how, on, left, right, present=True)
                if compression == "cascaded" and comm.rank == 0:  # "k": 0..499, bit-packed
                    assert "k" in stats["compression"], stats["compression"]
                    assert stats["wire_bytes_sent"] < stats["bytes_sent"], stats
                got = gathered(comm, out.to_arrow())
                if comm.rank == 0:
                    print(f"device {method} {how} {on}", flush=True)
                    assert_tables_equal(got, gpujoin.join(left, right, on, how=how, device="cpu"))
        g = group_by(dev(right), ["s"], comm=comm, shuffle=method).agg(n=(None, "size"), m=("k", "max"),
                                                                        c=("c", "sum"))
        got = gathered(comm, g.to_arrow())
        if comm.rank == 0:
            assert_tables_equal(got, gpujoin.group_by(right, ["s"], device="cpu").agg(
                n=(None, "size"), m=("k", "max"), c=("c", "sum")))
    # the local join in hash buckets, each joined as its rows arrive (3 and 7: not powers of two,
    # and on these small slices some of a rank's 7 x ranks runs are empty); where ranks share a
    # GPU (no NCCL) the tables are exchanged whole, one bucket
    for b in (3, 7):
        for how in ("inner", "left", "right", "full", "semi", "anti"):
            for on in ("k", ["k", "s"]):
                stats = {}
                out = join(dev(left), dev(right), on, how=how, comm=comm, shuffle="one-level", buckets=b,
                           stats=stats)
                assert stats["buckets"] == (b if comm.size > 1 and comm.nccl() is not None else 1), stats
                got = gathered(comm, out.to_arrow())
                if comm.rank == 0:
                    print(f"device buckets={b} {how} {on}", flush=True)
                    assert_tables_equal(got, gpujoin.join(left, right, on, how=how, device="cpu"))
    # the shuffle's partition doing the local PHJ's first radix pass (dist.radix_shuffle): one
    # int64 key, the other columns of one width, no validity masks; radix bits asked so that
    # these small slices take it (12: one pass left; 17: 9 bits; 18: no pass saved, not taken);
    # a rank without left rows; SMJ named: the plain shuffle
    from gpujoin.cuda.kernels import pass_count
    from gpujoin.dist import radix_shuffle

    lnum, rnum = left.filter(pc.is_valid(left.column("k"))).select(["k", "a"]), right.select(["k", "b"])
    fused = comm.size > 1 and comm.nccl() is not None
    import os

    early = set()  # (whether the histograms ran before the ranks agreed: radix_shuffle.count, taken)
    for rb, algorithm, empty, chunk in ((12, "auto", False, ""), (17, "phj-tr", True, "300"), (17, "phj-ur", False, ""),
                                        (18, "auto", False, ""), (12, "smj-tr", False, ""), (12, "auto", False, "200")):
        os.environ["GPUJOIN_SHUFFLE_CHUNK_ROWS"] = chunk  # ("300": each table in several chunks, some empty)
        os.environ["GPUJOIN_SHUFFLE_OVERLAP"] = "0" if chunk == "200" else "1"  # (each chunk after the last's group)
        for how in ("inner", "left", "right", "full", "semi", "anti"):
            stats = {}
            mine_l = extra(lnum).slice(0, 0) if empty and comm.rank == comm.size - 1 else extra(lnum)
            out = join(DeviceTable.from_arrow(mine_l), dev(rnum), "k", how=how, comm=comm, shuffle="one-level",
                       stats=stats, radix_bits=rb, algorithm=algorithm)
            takes = fused and algorithm != "smj-tr" and radix_shuffle.saves_a_pass(comm.size, rb)
            assert stats["shuffle_radix_bits"] == (rb if takes else None), stats
            assert stats["shuffle_counted_early"] in ((True, False) if takes else (False,)), stats
            early.add(stats["shuffle_counted_early"])
            if (takes and os.environ.get("GPUJOIN_NCCL_CE") == "force" and comm.copy_engine
                    and pass_count(rb - radix_shuffle.top_bits(comm.size, rb), True) == 1):
                assert stats["shuffle_copy_engine"] == [0, 1], stats  # (both tables by the copy engines)
            if takes and stats["local_algorithm"].startswith("phj"):
                # (a table by the copy engines arrives with every bit partitioned)
                done = rb if 1 in stats["shuffle_copy_engine"] else radix_shuffle.top_bits(comm.size, rb)
                assert stats["local_partitioned_bits"] == done, stats
            whole_l = pa.concat_tables(comm.allgather(mine_l))
            got = gathered(comm, out.to_arrow())
            if comm.rank == 0:
                print(f"device radix shuffle {rb} {algorithm} {how}: {stats['shuffle_radix_bits']}", flush=True)
                assert_tables_equal(got, gpujoin.join(whole_l, rnum, "k", how=how, device="cpu"))
    assert True in early or not fused, early  # (DeviceTables, NCCL made: every rank's guess right at times)
    os.environ.pop("GPUJOIN_SHUFFLE_CHUNK_ROWS")
    os.environ.pop("GPUJOIN_SHUFFLE_OVERLAP")
    # shuffle="auto" of tables in GPU memory: the crossover model with the links measured over
    # the device transport (NCCL; host memory and MPI where ranks share a GPU)
    got = gathered(comm, join(dev(left), dev(right), "k", how="full", comm=comm).to_arrow())
    if comm.rank == 0:
        assert_tables_equal(got, gpujoin.join(left, right, "k", how="full", device="cpu"))
        if comm.nodes > 1 and comm.local_size > 1:
            assert True in comm.rail()._link_GBps and True in comm._message_s, "NCCL links not measured"
            print(f"device auto shuffle: rail {comm.rail()._link_GBps}, host {comm.host()._link_GBps} GB/s, "
                  f"message {comm._message_s} s", flush=True)
    if comm.nccl() is not None:  # an NCCL communicator of the caller's (ranks on distinct GPUs)
        from cupy.cuda import nccl
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        uid = world.bcast(nccl.get_unique_id() if world.Get_rank() == 0 else None)
        theirs = Communicator.from_nccl(world, nccl.NcclCommunicator(world.Get_size(), uid, world.Get_rank()))
        got = gathered(comm, join(dev(left), dev(right), "k", how="full", comm=theirs).to_arrow())
        if comm.rank == 0:
            assert_tables_equal(got, gpujoin.join(left, right, "k", how="full", device="cpu"))


def run_or_abort(fn):
    """Run ``fn``; on any failure print it and end every rank (the others would wait in a
    collective for ever)."""
    try:
        fn()
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stdout.flush()
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)


if __name__ == "__main__":
    run_or_abort(main)
