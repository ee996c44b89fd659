"""Parallel CREATE INDEX (src/buildpar.c).

Workers are forced the way a user would: the table's parallel_workers
storage parameter (PostgreSQL then ignores the table's size and
maintenance_work_mem when it plans them), min_parallel_table_scan_size 0,
max_parallel_maintenance_workers 2. How many workers the build launched is
read from its DEBUG1 message. Each parallel build is checked against a serial
build of the same table: streamhnsw_verify is clean, recall@10 is the serial
build's within noise (200 seeded queries: a difference of 0.02 is over three
standard errors), and, for L2 and cosine, a search for each row's own vector
returns that row. With no worker launched the leader links the nodes in the
serial build's order with its levels, so the index answers every query
exactly as the serial build's does.
"""

import re

import pytest

from buildtest import CASE_IDS, CASES, build, check_own_vectors, load_case, own_vector_missed, search
from shnsw import data

SPILL = re.compile(r"no longer fits into maintenance_work_mem after (\d+) rows")


@pytest.mark.parametrize("typ,opclass,op,metric", CASES, ids=CASE_IDS)
def test_parallel_matches_serial(conn, typ, opclass, op, metric):
    rows, queries = data.clustered(8000, 32, seed=21, n_queries=200)
    table = f"pb_{typ}_{metric}"
    truth = load_case(conn, table, rows, queries, typ, metric)

    assert build(conn, table, opclass, 0) is None
    serial = data.recall(search(conn, table, queries, op, typ), truth, 10)
    conn.execute(f"DROP INDEX {table}_idx")

    launched = build(conn, table, opclass, 2)
    assert launched is not None and launched >= 1, launched
    parallel = data.recall(search(conn, table, queries, op, typ), truth, 10)
    assert parallel >= serial - 0.02, (serial, parallel)
    assert parallel >= 0.9, parallel
    if metric != "ip":
        check_own_vectors(conn, table, rows, op, typ)
    conn.execute(f"DROP TABLE {table}")


def test_parallel_spills(conn):
    """At maintenance_work_mem 1MB the parallel build links the rows that fit
    and inserts the rest, as a serial build does."""
    rows, queries = data.clustered(10000, 32, seed=22, n_queries=200)
    data.load(conn, "pb_spill", rows)
    conn.execute("ALTER TABLE pb_spill SET (parallel_workers = 2)")
    notices = []
    launched = build(conn, "pb_spill", "vector_l2_ops", 2, mem="1MB", notices=notices)
    assert launched is not None and launched >= 1, notices
    nmem = [int(m.group(1)) for n in notices for m in [SPILL.search(n)] if m]
    assert nmem and 0 < nmem[0] < 10000, notices
    # every row of both parts is found by its own vector
    ids = list(range(0, 10000, 7))
    assert own_vector_missed(conn, "pb_spill", rows, "<->", "vector", ids) == []
    truth = data.ground_truth(rows, queries, 10)
    assert data.recall(search(conn, "pb_spill", queries, "<->", "vector"), truth, 10) >= 0.9
    conn.execute("DROP TABLE pb_spill")


def test_no_worker_launched_is_the_serial_build(conn):
    """max_parallel_workers 0: the build is planned parallel, launches no
    worker, and the leader alone builds the serial build's graph."""
    rows, queries = data.clustered(5000, 96, seed=23, n_queries=100)
    data.load(conn, "pb_zero", rows)
    conn.execute("ALTER TABLE pb_zero SET (parallel_workers = 2)")
    conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
    # the metapage after its header (the LSN and checksum differ): entry
    # point, counts and the codes' largest residual, which the parallel
    # build takes while it reads rows back and the serial one before it
    # writes the pages; not build_nonce (bytes 144-151 of the metapage's
    # data), random in every build
    meta_sql = ("SELECT substr(p, 25, 144) || substr(p, 25 + 152) "
                "FROM get_raw_page('pb_zero_idx', 0) p")
    for mem in ("512MB", "3MB"):  # on float vectors, then on SQ8 codes
        notices = []
        assert build(conn, "pb_zero", "vector_l2_ops", 0, mem=mem) is None
        serial = search(conn, "pb_zero", queries, "<->", "vector")
        size = conn.execute("SELECT pg_relation_size('pb_zero_idx')").fetchone()[0]
        serial_meta = conn.execute(meta_sql).fetchone()[0]
        conn.execute("DROP INDEX pb_zero_idx")
        conn.execute("SET max_parallel_workers = 0")
        try:
            launched = build(conn, "pb_zero", "vector_l2_ops", 2, mem=mem, notices=notices)
        finally:
            conn.execute("RESET max_parallel_workers")
        assert launched == 0, notices
        assert any("building on SQ8 codes" in n for n in notices) == (mem == "3MB"), notices
        assert search(conn, "pb_zero", queries, "<->", "vector") == serial
        assert conn.execute("SELECT pg_relation_size('pb_zero_idx')").fetchone()[0] == size
        assert conn.execute(meta_sql).fetchone()[0] == serial_meta
        conn.execute("DROP INDEX pb_zero_idx")
    conn.execute("DROP TABLE pb_zero")
