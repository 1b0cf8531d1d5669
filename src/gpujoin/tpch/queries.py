"""TPC-H queries written against gpujoin: every join is ``gpujoin.join``, every group-by
``gpujoin.group_by``; filters, expressions, ordering and limits are Arrow compute on the tables.

Each query takes the loaded tables (name to ``pyarrow.Table``) and the device, and returns its
result with the columns of the official query text, in its order.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from ..plan.groupby import group_by
from ..plan.join import join

Tables = dict[str, pa.Table]


def _date(s: str) -> pa.Scalar:
    return pa.scalar(dt.date.fromisoformat(s), pa.date32())


def _dec(col, v) -> pa.Scalar:
    """A decimal literal of the column's type, so Arrow compares decimals exactly."""
    return pa.scalar(Decimal(str(v)), col.type)


def _revenue(t: pa.Table) -> pa.ChunkedArray:
    """l_extendedprice * (1 - l_discount), exact in decimal arithmetic like the SQL."""
    disc = t["l_discount"]
    return pc.multiply(t["l_extendedprice"], pc.subtract(_dec(disc, 1), disc))


def _where(t: pa.Table, mask, columns: list[str]) -> pa.Table:
    """``columns`` of ``t``'s rows where ``mask`` holds: projected before filtering, so the filter
    copies only the columns the query reads (DuckDB pushes projections down the same way)."""
    return t.select(columns).filter(mask)


def _sort_limit(t: pa.Table, keys: list[tuple[str, str]], limit: int | None = None) -> pa.Table:
    t = t.sort_by(keys)
    return t.slice(0, limit) if limit is not None else t


class Query:
    """The device each operator of a query runs on: joins on ``device``, group-bys on
    ``group_by_device`` (default: the same)."""

    def __init__(self, device: str = "auto", group_by_device: str | None = None):
        self.device = device
        self.group_by_device = group_by_device or device

    def j(self, left, right, left_on, right_on, how="inner"):
        return join(left, right, left_on=left_on, right_on=right_on, how=how, device=self.device)

    def g(self, table, by, **aggs):
        return group_by(table, by, device=self.group_by_device).agg(**aggs)


def q3(T: Tables, q: Query) -> pa.Table:
    c = _where(T["customer"], pc.equal(T["customer"]["c_mktsegment"], "BUILDING"), ["c_custkey"])
    o = T["orders"]
    o = _where(o, pc.less(o["o_orderdate"], _date("1995-03-15")),
               ["o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"])
    li = T["lineitem"]
    li = _where(li, pc.greater(li["l_shipdate"], _date("1995-03-15")),
                ["l_orderkey", "l_extendedprice", "l_discount"])
    o = q.j(o, c, "o_custkey", "c_custkey", how="semi")
    lo = q.j(li, o, "l_orderkey", "o_orderkey")
    lo = lo.append_column("volume", _revenue(lo))
    g = q.g(lo, ["l_orderkey", "o_orderdate", "o_shippriority"], revenue=("volume", "sum"))
    g = _sort_limit(g, [("revenue", "descending"), ("o_orderdate", "ascending")], 10)
    return g.select(["l_orderkey", "revenue", "o_orderdate", "o_shippriority"])


def q5(T: Tables, q: Query) -> pa.Table:
    r = _where(T["region"], pc.equal(T["region"]["r_name"], "ASIA"), ["r_regionkey"])
    n = q.j(T["nation"].select(["n_nationkey", "n_name", "n_regionkey"]), r, "n_regionkey", "r_regionkey", "semi")
    s = q.j(T["supplier"].select(["s_suppkey", "s_nationkey"]), n.select(["n_nationkey", "n_name"]),
            "s_nationkey", "n_nationkey")
    o = T["orders"]
    o = _where(o, pc.and_(pc.greater_equal(o["o_orderdate"], _date("1994-01-01")),
                          pc.less(o["o_orderdate"], _date("1995-01-01"))), ["o_orderkey", "o_custkey"])
    oc = q.j(o, T["customer"].select(["c_custkey", "c_nationkey"]), "o_custkey", "c_custkey")
    li = T["lineitem"].select(["l_orderkey", "l_suppkey", "l_extendedprice", "l_discount"])
    lo = q.j(li, oc.select(["o_orderkey", "c_nationkey"]), "l_orderkey", "o_orderkey")
    los = q.j(lo, s, ["l_suppkey", "c_nationkey"], ["s_suppkey", "s_nationkey"])
    los = los.append_column("volume", _revenue(los))
    g = q.g(los, ["n_name"], revenue=("volume", "sum"))
    return _sort_limit(g, [("revenue", "descending")])


def q7(T: Tables, q: Query) -> pa.Table:
    nat = T["nation"]
    n = _where(nat, pc.is_in(nat["n_name"], pa.array(["FRANCE", "GERMANY"])), ["n_nationkey", "n_name"])
    s = q.j(T["supplier"].select(["s_suppkey", "s_nationkey"]), n, "s_nationkey", "n_nationkey")
    s = s.rename_columns(["s_suppkey", "s_nationkey", "supp_nation"])
    c = q.j(T["customer"].select(["c_custkey", "c_nationkey"]), n, "c_nationkey", "n_nationkey")
    c = c.rename_columns(["c_custkey", "c_nationkey", "cust_nation"])
    li = T["lineitem"]
    li = _where(li, pc.and_(pc.greater_equal(li["l_shipdate"], _date("1995-01-01")),
                            pc.less_equal(li["l_shipdate"], _date("1996-12-31"))),
                ["l_orderkey", "l_suppkey", "l_extendedprice", "l_discount", "l_shipdate"])
    ls = q.j(li, s.select(["s_suppkey", "supp_nation"]), "l_suppkey", "s_suppkey")
    lso = q.j(ls, T["orders"].select(["o_orderkey", "o_custkey"]), "l_orderkey", "o_orderkey")
    t = q.j(lso, c.select(["c_custkey", "cust_nation"]), "o_custkey", "c_custkey")
    fg = pc.and_(pc.equal(t["supp_nation"], "FRANCE"), pc.equal(t["cust_nation"], "GERMANY"))
    gf = pc.and_(pc.equal(t["supp_nation"], "GERMANY"), pc.equal(t["cust_nation"], "FRANCE"))
    t = t.filter(pc.or_(fg, gf))
    t = t.append_column("l_year", pc.year(t["l_shipdate"])).append_column("volume", _revenue(t))
    g = q.g(t, ["supp_nation", "cust_nation", "l_year"], revenue=("volume", "sum"))
    return _sort_limit(g, [("supp_nation", "ascending"), ("cust_nation", "ascending"), ("l_year", "ascending")])


def q10(T: Tables, q: Query) -> pa.Table:
    o = T["orders"]
    o = _where(o, pc.and_(pc.greater_equal(o["o_orderdate"], _date("1993-10-01")),
                          pc.less(o["o_orderdate"], _date("1994-01-01"))), ["o_orderkey", "o_custkey"])
    li = T["lineitem"]
    li = _where(li, pc.equal(li["l_returnflag"], "R"), ["l_orderkey", "l_extendedprice", "l_discount"])
    cn = q.j(T["customer"].select(["c_custkey", "c_name", "c_acctbal", "c_phone", "c_address", "c_comment",
                                   "c_nationkey"]),
             T["nation"].select(["n_nationkey", "n_name"]), "c_nationkey", "n_nationkey")
    lo = q.j(li, o, "l_orderkey", "o_orderkey")
    t = q.j(lo, cn, "o_custkey", "c_custkey")
    t = t.append_column("volume", _revenue(t))
    by = ["o_custkey", "c_name", "c_acctbal", "c_phone", "n_name", "c_address", "c_comment"]
    g = q.g(t, by, revenue=("volume", "sum")).rename_columns(["c_custkey"] + by[1:] + ["revenue"])
    g = _sort_limit(g, [("revenue", "descending"), ("c_custkey", "ascending")], 20)
    return g.select(["c_custkey", "c_name", "revenue", "c_acctbal", "n_name", "c_address", "c_phone", "c_comment"])


def q12(T: Tables, q: Query) -> pa.Table:
    li = T["lineitem"]
    mask = pc.and_(pc.and_(pc.is_in(li["l_shipmode"], pa.array(["MAIL", "SHIP"])),
                           pc.less(li["l_commitdate"], li["l_receiptdate"])),
                   pc.and_(pc.less(li["l_shipdate"], li["l_commitdate"]),
                           pc.and_(pc.greater_equal(li["l_receiptdate"], _date("1994-01-01")),
                                   pc.less(li["l_receiptdate"], _date("1995-01-01")))))
    li = _where(li, mask, ["l_orderkey", "l_shipmode"])
    t = q.j(li, T["orders"].select(["o_orderkey", "o_orderpriority"]), "l_orderkey", "o_orderkey")
    high = pc.is_in(t["o_orderpriority"], pa.array(["1-URGENT", "2-HIGH"])).cast(pa.int64())
    t = t.append_column("high", high).append_column("low", pc.subtract(1, high))
    g = q.g(t, ["l_shipmode"], high_line_count=("high", "sum"), low_line_count=("low", "sum"))
    return _sort_limit(g, [("l_shipmode", "ascending")])


def q18(T: Tables, q: Query) -> pa.Table:
    li = T["lineitem"].select(["l_orderkey", "l_quantity"])
    per_order = q.g(li, ["l_orderkey"], qty=("l_quantity", "sum"))
    big = per_order.filter(pc.greater(per_order["qty"], pa.scalar(Decimal(300), per_order["qty"].type)))
    o = q.j(T["orders"].select(["o_orderkey", "o_custkey", "o_orderdate", "o_totalprice"]),
            big.select(["l_orderkey"]), "o_orderkey", "l_orderkey", "semi")
    oc = q.j(o, T["customer"].select(["c_custkey", "c_name"]), "o_custkey", "c_custkey")
    t = q.j(li, oc, "l_orderkey", "o_orderkey")
    by = ["c_name", "o_custkey", "l_orderkey", "o_orderdate", "o_totalprice"]
    g = q.g(t, by, sum_qty=("l_quantity", "sum"))
    g = g.rename_columns(["c_name", "c_custkey", "o_orderkey", "o_orderdate", "o_totalprice", "sum_qty"])
    return _sort_limit(g, [("o_totalprice", "descending"), ("o_orderdate", "ascending"), ("o_orderkey", "ascending")],
                       100)


def q19(T: Tables, q: Query) -> pa.Table:
    li = T["lineitem"]
    qty = li["l_quantity"]
    li = _where(li, pc.and_(pc.and_(pc.is_in(li["l_shipmode"], pa.array(["AIR", "AIR REG"])),
                                    pc.equal(li["l_shipinstruct"], "DELIVER IN PERSON")),
                            pc.and_(pc.greater_equal(qty, _dec(qty, 1)), pc.less_equal(qty, _dec(qty, 30)))),
                ["l_partkey", "l_quantity", "l_extendedprice", "l_discount"])
    p = T["part"]
    p = _where(p, pc.and_(pc.is_in(p["p_brand"], pa.array(["Brand#12", "Brand#23", "Brand#34"])),
                          pc.and_(pc.greater_equal(p["p_size"], 1), pc.less_equal(p["p_size"], 15))),
               ["p_partkey", "p_brand", "p_container", "p_size"])
    t = q.j(li, p, "l_partkey", "p_partkey")
    qty = t["l_quantity"]

    def branch(brand, containers, lo, size):
        return pc.and_(pc.and_(pc.equal(t["p_brand"], brand), pc.is_in(t["p_container"], pa.array(containers))),
                       pc.and_(pc.and_(pc.greater_equal(qty, _dec(qty, lo)), pc.less_equal(qty, _dec(qty, lo + 10))),
                               pc.less_equal(t["p_size"], size)))

    keep = pc.or_(pc.or_(branch("Brand#12", ["SM CASE", "SM BOX", "SM PACK", "SM PKG"], 1, 5),
                         branch("Brand#23", ["MED BAG", "MED BOX", "MED PKG", "MED PACK"], 10, 10)),
                  branch("Brand#34", ["LG CASE", "LG BOX", "LG PACK", "LG PKG"], 20, 15))
    t = t.filter(keep)
    rev = _revenue(t)
    total = pc.sum(rev) if len(rev) else pa.scalar(None, pa.decimal128(38, 4))
    return pa.table({"revenue": pa.array([total.as_py()], pa.decimal128(38, rev.type.scale))})


def lo_join(T: Tables, q: Query) -> pa.Table:
    """Paper 001's lineitem-orders join; the checksum is computed from this output by the runner."""
    return q.j(T["lineitem"].select(["l_orderkey"]), T["orders"].select(["o_orderkey", "o_orderpriority"]),
               "l_orderkey", "o_orderkey").select(["o_orderpriority"])


QUERIES: dict[str, Callable[[Tables, Query], pa.Table]] = {
    "3": q3, "5": q5, "7": q7, "10": q10, "12": q12, "18": q18, "19": q19, "lo": lo_join,
}
SQL_FILES = {"3": "q3.sql", "5": "q5.sql", "7": "q7.sql", "10": "q10.sql", "12": "q12.sql", "18": "q18.sql",
             "19": "q19.sql", "lo": "lo_join.sql"}
TABLES_USED = {
    "3": ["customer", "orders", "lineitem"], "5": ["region", "nation", "supplier", "customer", "orders", "lineitem"],
    "7": ["nation", "supplier", "customer", "orders", "lineitem"],
    "10": ["customer", "nation", "orders", "lineitem"], "12": ["orders", "lineitem"],
    "18": ["customer", "orders", "lineitem"], "19": ["part", "lineitem"], "lo": ["orders", "lineitem"],
}
