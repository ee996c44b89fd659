"""sparsevec values stored at their own size (issue 50; src/README, Page
formats): the index's size beside pgvector's hnsw on the same rows, free
vector space reused only by values that fit, after deletes and VACUUM, and
the same pages after WAL replay (crash recovery and a standby).

All data is seeded; results are exact (every row is found by a search for
its own value, at distance 0), never a recall threshold.
"""

import re

import pytest

from shnsw import data
from shnsw.cluster import Cluster

from harness.durability import crash, meta, verify
from harness.replica import Standby

DIM = 30000


def sized_rows(n, seed, nnz_choices):
    """n seeded topic-shaped rows (data.sparse_clustered), as many of about
    each number of non-zero elements in nnz_choices."""
    rows = []
    for k, nnz in enumerate(nnz_choices):
        part = n // len(nnz_choices) + (k < n % len(nnz_choices))
        rows += data.sparse_clustered(part, DIM, nnz, seed=seed * 10 + k)[0]
    return rows


def insert(conn, table, rows, start):
    with conn.cursor() as cur:
        with cur.copy(f"COPY {table} (id, v) FROM STDIN") as cp:
            for i, (idx, val) in enumerate(rows):
                cp.write(f"{start + i}\t{data.sparse_literal(idx, val, DIM)}\n")


def missing_self_matches(conn, table):
    """Ids whose own value, searched through the index, does not come back
    at distance 0 (pgvector's function re-checks it), or that a full index
    scan does not return exactly once. The scans sweep (sweep_threshold 0:
    every live node offered, src/README, Scans), so this is about what the
    index holds and reads back, not about what a walk on the sketch
    reaches."""
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET streamhnsw.sweep_threshold = 0")
    conn.execute("SET streamhnsw.max_scan_tuples = 1000000")
    plan = "\n".join(r[0] for r in conn.execute(
        f"EXPLAIN (COSTS OFF) SELECT id FROM {table} ORDER BY v <-> '{{1:1}}/{DIM}' LIMIT 1"))
    assert "Index Scan" in plan, plan
    sql = (f"SELECT id, v <-> %s::sparsevec FROM {table} ORDER BY v <-> %s::sparsevec LIMIT 3")
    rows = conn.execute(f"SELECT id, v::text FROM {table} ORDER BY id").fetchall()
    missing = [rid for rid, lit in rows
               if not any(r == (rid, 0) for r in conn.execute(sql, (lit, lit)).fetchall())]
    full = [r[0] for r in conn.execute(
        f"SELECT id FROM {table} ORDER BY v <-> '{{1:1}}/{DIM}' LIMIT {len(rows) + 10}")]
    assert sorted(full) == [r[0] for r in rows]
    for name in ("enable_seqscan", "streamhnsw.sweep_threshold", "streamhnsw.max_scan_tuples"):
        conn.execute(f"RESET {name}")
    return missing


def size_rows():
    return data.sparse_clustered(3000, DIM, 50, seed=53)[0]


def index_sizes(conn, rows):
    """Build pgvector's hnsw and streamhnsw (both at their defaults) on rows;
    return both sizes in bytes and streamhnsw's metapage."""
    data.load_sparse(conn, "ss_size", rows, DIM)
    conn.execute("CREATE INDEX ss_size_pgv ON ss_size USING hnsw (embedding sparsevec_l2_ops)")
    conn.execute("CREATE INDEX ss_size_sh ON ss_size USING streamhnsw (embedding sparsevec_l2_ops)")
    assert verify(conn, "ss_size_sh") == []
    pgv, ours = (conn.execute("SELECT pg_relation_size(%s)", (i,)).fetchone()[0]
                 for i in ("ss_size_pgv", "ss_size_sh"))
    print(f"\nsparsevec 3,000 x ~50 nnz in {DIM} dims, index size: streamhnsw "
          f"{ours / 2**20:.2f} MB, pgvector hnsw {pgv / 2**20:.2f} MB ({ours / pgv:.2f}x)", end="")
    return ours, pgv, meta(conn, "ss_size_sh")


def test_sparsevec_values_stored_at_their_size(conn):
    """3,000 seeded rows of about 50 non-zero elements in 30,000 dimensions:
    the pages past the graph's (vector, upper and quantizer pages) take at
    most 1.25 times the values' own images (16 + 8 * nnz bytes). Values
    padded to 1,000 elements took 19 times (27.0 MB in all, 12.6 times
    pgvector's hnsw)."""
    rows = size_rows()
    try:
        ours, _, m = index_sizes(conn, rows)
        graph = -(-len(rows) // m["nodes_per_page"])
        values = sum(16 + 8 * len(idx) for idx, _ in rows)
        rest = (m["total_blocks"] - 1 - graph) * 8192
        print(f"; past the graph {rest / 2**20:.2f} MB for {values / 2**20:.2f} MB of values",
              end="")
        assert m["total_blocks"] * 8192 == ours
        assert rest <= 1.25 * values, (rest, values)
    finally:
        conn.execute("DROP TABLE IF EXISTS ss_size")


@pytest.mark.xfail(strict=True, reason="a node record holds a 1,024-byte SQ8 code of the "
                   "sketch (1,176 bytes at m 16): the graph pages alone take 1.8 times "
                   "pgvector's whole index on these rows (src/README, Known limits)")
def test_sparsevec_index_size_near_pgvector(conn):
    """The same rows: the index is at most 1.5 times pgvector's hnsw."""
    try:
        ours, pgv, _ = index_sizes(conn, size_rows())
        assert ours <= 1.5 * pgv, (ours, pgv)
    finally:
        conn.execute("DROP TABLE IF EXISTS ss_size")


def churn(conn, table, start):
    """Delete a third of the rows (the middle-sized and small ones among
    them), VACUUM, insert rows both larger and smaller than the freed ones,
    and VACUUM again; returns the next free id."""
    conn.execute(f"DELETE FROM {table} WHERE id % 3 = 0")
    conn.execute(f"VACUUM {table}")
    assert meta(conn, f"{table}_idx")["free_count"] > 0
    insert(conn, table, sized_rows(150, start, [200, 400]), start)
    insert(conn, table, sized_rows(150, start + 150, [3, 8]), start + 150)
    conn.execute(f"DELETE FROM {table} WHERE id % 7 = 0")
    conn.execute(f"VACUUM {table}")
    insert(conn, table, sized_rows(100, start + 300, [5, 60, 300]), start + 300)
    return start + 400


def make_sparse_table(conn, table, n=600, inserted=False):
    """A table of n rows of mixed sizes and its index, built on them or
    (inserted) created empty and filled by inserts."""
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, v sparsevec({DIM}))")
    if not inserted:
        insert(conn, table, sized_rows(n, 1, [4, 10, 40, 120]), 0)
    conn.execute(f"CREATE INDEX {table}_idx ON {table} USING streamhnsw (v sparsevec_l2_ops) "
                 "WITH (m = 8)")
    if inserted:
        insert(conn, table, sized_rows(n, 1, [4, 10, 40, 120, 900]), 0)


@pytest.mark.parametrize("inserted", [False, True], ids=["built", "inserted"])
def test_sparsevec_delete_vacuum_reinsert(conn, inserted):
    """Freed vector space is reused only by a value that fits it (a larger
    one goes to the stream's end): after deletes, VACUUM and inserts of
    larger and smaller values, verify reports nothing, the free list got
    used, and every row is found by a search for its own value. The index
    is built on its first rows, or created empty (its vectors appended in
    runs, up to 900 non-zero elements: more than half a page)."""
    try:
        make_sparse_table(conn, "ss_churn", inserted=inserted)
        churn(conn, "ss_churn", 10000)
        m = meta(conn, "ss_churn_idx")
        live = conn.execute("SELECT count(*) FROM ss_churn").fetchone()[0]
        assert m["node_count"] - m["deleted_count"] == live, (m, live)
        assert m["node_count"] < 600 + 400, m       # free slots were reused
        assert verify(conn, "ss_churn_idx") == []
        assert missing_self_matches(conn, "ss_churn") == []
        # the same through the shared cache's copy of the graph
        assert conn.execute("SELECT streamhnsw_cache_load('ss_churn_idx')").fetchone()[0] > 0
        plan = "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN (ANALYZE, COSTS OFF) SELECT id FROM ss_churn "
            f"ORDER BY v <-> '{{1:1}}/{DIM}' LIMIT 10"))
        assert re.search(r"nodes from cache=[1-9]", plan), plan
        assert missing_self_matches(conn, "ss_churn") == []
    finally:
        conn.execute("SELECT streamhnsw_cache_drop(oid) FROM pg_class "
                     "WHERE relname = 'ss_churn_idx'")
        conn.execute("DROP TABLE IF EXISTS ss_churn")


def test_sparsevec_wal_replay():
    """The same churn on a primary streaming to a standby, then a crash of
    the primary with no checkpoint since: the standby (after replaying
    everything) and the recovered primary answer with the same rows, verify
    reports nothing on either, and every row is found by its own value."""
    with Cluster(name="shnsw-sparse-primary", listen_tcp=True,
                 settings={"autovacuum": "off"}) as p:
        p.execute("CREATE EXTENSION streamhnsw CASCADE")
        with Standby(p, name="shnsw-sparse-standby") as s:
            with p.connect() as pc:
                pc.execute("CHECKPOINT")
                make_sparse_table(pc, "ss_wal", 400)
                churn(pc, "ss_wal", 10000)
            crash(p, "immediate")
            p.start()
            s.catch_up()
            with p.connect() as pc, s.connect() as sc:
                assert verify(pc, "ss_wal_idx") == []
                assert verify(sc, "ss_wal_idx") == []
                assert meta(sc, "ss_wal_idx") == meta(pc, "ss_wal_idx")
                assert missing_self_matches(pc, "ss_wal") == []
                assert missing_self_matches(sc, "ss_wal") == []
