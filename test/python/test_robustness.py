"""The robustness matrix, small (issue 45): what a default query costs on
degenerate data.

For each data shape of a handful that users store and that break bounds
(dimensions zero in every row, a constant dimension, dimensions with a
range of 1e-7, duplicated rows, un-normalized rows under cosine, inner
product on normalized and un-normalized rows, sentence-like rows with two
dimensions zero as halfvec and as vector, 3-d L2, 0/1 rows, L1 with four
dimensions 50 times the others), a few
thousand rows are indexed by streamhnsw and by pgvector's hnsw (same m,
ef_construction, rows), and 50 held-out queries `ORDER BY v <op> q LIMIT 10` run at default settings
(enable_seqscan off so that the small table uses the index). From
EXPLAIN (ANALYZE) of each streamhnsw query:

- no query sweeps the index (no "swept nodes", no "streamhnsw sweeps:");
- no query runs more than MAX_ROUNDS rounds;
- the worst query examines at most MAX_WORK_RATIO times the nodes of the
  median query (EXPLAIN's nodes expanded, in every round, plus swept
  nodes);

and streamhnsw's recall@10 over the shape is at least pgvector's at
ef_search 40 minus RECALL_SLACK (ties count: a row at the 10th nearest
distance is a hit). The assertions are on work, not time. A failure
prints the offending query's EXPLAIN.

The shapes and the ground truth come from shnsw.bench.robustness, the
benchmark preset this is a small version of (`--preset robustness`).
"""

import numpy as np
import pytest

from shnsw import data
from shnsw.bench import robustness as rb

N_ROWS = 4000
N_QUERIES = 50

# An unfiltered LIMIT at most ef_search is one search of width ef_search:
# a second round at most (issue 45: "never runs extra rounds").
MAX_ROUNDS = 2
# The worst query of a shape may examine this many times the nodes of the
# median one. One search of width ef_search expands about ef_search nodes
# whatever the query (40 to 50 here with relaxed order, worst/median 1.2 or
# less); a bounded second round doubles that at most, while the cliff's
# extra rounds expand 10 to 20 times as many and a sweep reads the index.
# Distances computed are not the measure: they vary 4x between healthy
# one-round queries of these small clustered tables (150 to 620), with how
# many new neighbours each expansion meets. The bar is the benchmark
# matrix's: 3x (measured: 1.3x at most here, 1.9x at 50,000 rows).
MAX_WORK_RATIO = 3.0
# recall@10 may trail pgvector's by this much (50 queries: one query
# missing one row is 0.002).
RECALL_SLACK = 0.02

SHAPES = ["zero-1pct-cos", "zero-10pct-cos", "const-dim-cos", "tiny-range-cos",
          "duplicates-cos", "unnormalized-cos", "ip-normalized", "ip-unnormalized",
          "sentence-like-384-cos", "sentence-like-384-halfvec-cos", "uniform-3-l2",
          "binary-128-l2", "heavy-tail-l1", "signs-256-hamming", "few-bits-64-jaccard",
          "splade-8192-ip"]


def _explain_excerpt(e):
    """The EXPLAIN lines that matter: the scan's own and the execution time."""
    keep = [line.strip() for line in e["text"].split("\n")
            if ("streamhnsw" in line and "look-ahead" not in line and "I/O" not in line)
            or "Index Scan" in line or "Execution Time" in line]
    return "\n    ".join(keep)


@pytest.mark.parametrize("name", SHAPES)
def test_default_query_cost(cluster, name):
    shape = rb.BY_NAME[name]
    rows, queries = rb.generate(shape, N_ROWS, N_QUERIES, seed=45)
    _, kth = rb.truth(rows, queries, shape.metric)
    ops = rb.opclass(shape)
    tables = {"hnsw": "rob_pgv", "streamhnsw": "rob_shnsw"}
    with cluster.connect() as conn:
        try:
            for am, t in tables.items():
                data.load(conn, t, rows, typ=shape.typ)
                conn.execute(f"CREATE INDEX {t}_idx ON {t} USING {am} (embedding {ops}) "
                             "WITH (m = 16, ef_construction = 64)")
                conn.execute(f"VACUUM ANALYZE {t}")
            rb.load_queries(conn, "rob_q", shape, queries)
            # the shared cache now, not in the background of the first queries
            conn.execute("SELECT streamhnsw_cache_load('rob_shnsw_idx'::regclass)")
            conn.execute("SET enable_seqscan = off")
            ef = int(conn.execute("SHOW streamhnsw.ef_search").fetchone()[0])
            assert ef == rb.EF_REPORT, "the default ef_search changed: update the test"

            sql = rb.query_sql(tables["streamhnsw"], shape)
            lits = [rb.vector_literal(q, shape.typ) for q in queries]
            exps = [rb.explain(conn, sql, lit) for lit in lits]
            assert all("Index Scan using rob_shnsw_idx" in e["text"] for e in exps), \
                exps[0]["text"]

            recall = {}
            for am, t in tables.items():
                plan = "\n".join(r[0] for r in conn.execute(
                    "EXPLAIN " + rb.batch_sql(t, "rob_q", shape)).fetchall())
                assert f"{t}_idx" in plan, plan
                guc = "hnsw.ef_search" if am == "hnsw" else "streamhnsw.ef_search"
                found = rb.run_batch(conn, t, "rob_q", shape, guc, ef)
                recall[am] = rb.recall_ties(found, rows, queries, shape.metric, kth)
            conn.execute("RESET hnsw.ef_search")
            conn.execute("RESET streamhnsw.ef_search")
        finally:
            conn.execute("RESET enable_seqscan")
            for t in list(tables.values()) + ["rob_q"]:
                conn.execute(f"DROP TABLE IF EXISTS {t}")

    s = rb.work_summary(exps)
    print(f"\n{name}: recall@10 streamhnsw {recall['streamhnsw']:.3f} pgvector "
          f"{recall['hnsw']:.3f}; nodes examined p50 {s['work_p50']:.0f} max "
          f"{s['work_max']} (x{s['work_max_over_median']:.1f}); distances p50 "
          f"{s['distances_p50']:.0f}; rounds max {s['rounds_max']}; "
          f"{s['swept_queries']} of {len(exps)} queries swept", end="")

    failures = []
    swept = [e for e in exps if e["sweep"]]
    if swept:
        failures.append((f"{len(swept)} of {len(exps)} default queries swept the index",
                         max(swept, key=lambda e: e.get("swept", 0))))
    many = [e for e in exps if e["rounds"] > MAX_ROUNDS]
    if many:
        failures.append((f"{len(many)} of {len(exps)} queries ran more than {MAX_ROUNDS} "
                         "rounds", max(many, key=lambda e: e["rounds"])))
    if s["work_max"] > MAX_WORK_RATIO * s["work_p50"]:
        failures.append((f"the worst query examined {s['work_max']} nodes, "
                         f"{s['work_max_over_median']:.1f}x the median's "
                         f"{s['work_p50']:.0f} (at most {MAX_WORK_RATIO}x)", rb.worst(exps)))
    if recall["streamhnsw"] < recall["hnsw"] - RECALL_SLACK:
        failures.append((f"recall@10 {recall['streamhnsw']:.3f} below pgvector's "
                         f"{recall['hnsw']:.3f} - {RECALL_SLACK}", None))
    if failures:
        msg = [f"{name} ({shape.metric}, {shape.typ}({shape.dim}), {N_ROWS} rows): "
               f"{len(failures)} check(s) failed"]
        for why, e in failures:
            msg.append(f"- {why}")
            if e is not None:
                msg.append("    " + _explain_excerpt(e))
        print("\n" + "\n".join(msg))
        pytest.fail("\n".join(msg), pytrace=False)


def test_shapes_deterministic_and_held_out():
    """Every shape: the same seed gives the same bytes, queries are not rows,
    no row or query has a zero norm under cosine, the shape's dimension."""
    for shape in rb.SHAPES:
        n = 300
        rows, queries = rb.generate(shape, n, 20, seed=45)
        again = rb.generate(shape, n, 20, seed=45)
        assert rows.shape == (n, shape.dim) and queries.shape == (20, shape.dim), shape.name
        assert np.array_equal(rows, again[0]) and np.array_equal(queries, again[1])
        assert np.isfinite(rows).all() and np.isfinite(queries).all()
        if shape.metric == "cosine":
            assert (np.linalg.norm(rows, axis=1) > 0).all(), shape.name
            assert (np.linalg.norm(queries, axis=1) > 0).all(), shape.name
        if shape.typ == "bit":
            assert set(np.unique(rows)) <= {0.0, 1.0}, shape.name
        if shape.typ != "bit" and shape.name != "binary-128-l2":   # (0/1 rows may repeat)
            rset = {r.tobytes() for r in rows}
            assert not any(q.tobytes() in rset for q in queries), shape.name

