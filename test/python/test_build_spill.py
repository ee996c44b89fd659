"""CREATE INDEX when the graph does not fit maintenance_work_mem.

The build builds the graph in memory on the rows that fit (a prefix of the
heap in scan order), writes it, and inserts the remaining rows through
aminsert. These tests build at maintenance_work_mem 1MB, where even the
SQ8-code graph holds only a few thousand rows, so most rows go through the
insert path, and check: the NOTICE, a clean streamhnsw_verify, that an
exact-match search finds rows of both parts, and recall against the same
build at large memory.
"""

import re

import numpy as np

from shnsw import data

SPILL = re.compile(r"no longer fits into maintenance_work_mem after (\d+) rows")
PHASE = "building index: inserting remaining tuples"


def build_at(conn, table, rows, opclass, mem, typ="vector", notices=None):
    """Load rows (id = row number, heap order) and build at maintenance_work_mem mem;
    return the number of rows of the in-memory part (None if nothing spilled)."""
    data.load(conn, table, rows, typ=typ)
    conn.execute("SET max_parallel_maintenance_workers = 0")
    conn.execute(f"SET maintenance_work_mem = '{mem}'")
    seen = []
    handler = lambda d: seen.append(d.message_primary)  # noqa: E731
    conn.add_notice_handler(handler)
    try:
        conn.execute(f"CREATE INDEX {table}_idx ON {table} USING streamhnsw (embedding {opclass})")
    finally:
        conn.remove_notice_handler(handler)
        conn.execute("RESET maintenance_work_mem")
    if notices is not None:
        notices.extend(seen)
    assert conn.execute(f"SELECT count(*) FROM streamhnsw_verify('{table}_idx')").fetchone()[0] == 0
    counts = [int(m.group(1)) for n in seen for m in [SPILL.search(n)] if m]
    return counts[0] if counts else None


def exact_matches(conn, table, rows, ids, op="<->", typ="vector"):
    """How many of ids an ORDER BY v <op> own-vector LIMIT 1 search returns."""
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET streamhnsw.ef_search = 200")
    sql = (f"SELECT id FROM {table} ORDER BY embedding {op} %s::{typ} LIMIT 1")
    plan = conn.execute("EXPLAIN (COSTS OFF) " + sql, (data.vector_literal(rows[0]),)).fetchall()
    assert any("Index Scan using" in r[0] for r in plan), plan
    found = 0
    for i in ids:
        got = conn.execute(sql, (data.vector_literal(rows[i]),)).fetchone()[0]
        found += got == i
    conn.execute("RESET enable_seqscan")
    conn.execute("RESET streamhnsw.ef_search")
    return found


def recall_at(conn, table, rows, queries, op="<->", typ="vector", metric="l2"):
    conn.execute("SET streamhnsw.ef_search = 40")
    sql = (f"SELECT id FROM {table} ORDER BY embedding {op} %s::{typ} LIMIT 10")
    ids = [[r[0] for r in conn.execute(sql, (data.vector_literal(q),) * 1).fetchall()]
           for q in queries]
    conn.execute("RESET streamhnsw.ef_search")
    return data.recall(ids, data.ground_truth(rows, queries, 10, metric), 10)


def sample_both_parts(n, nmem, k=40, seed=0):
    rng = np.random.default_rng(seed)
    mem = rng.choice(nmem, size=min(k, nmem), replace=False)
    rest = nmem + rng.choice(n - nmem, size=min(k, n - nmem), replace=False)
    return [int(i) for i in mem], [int(i) for i in rest]


def test_spill_10k_32_recall(conn):
    rows, queries = data.clustered(10000, 32, seed=11, n_queries=100)
    notices = []
    nmem = build_at(conn, "sp_32", rows, "vector_l2_ops", "1MB", notices=notices)
    assert nmem is not None and 0 < nmem < 10000, notices
    assert conn.execute("SELECT count(*) FROM sp_32").fetchone()[0] == 10000
    mem_ids, rest_ids = sample_both_parts(10000, nmem)
    assert exact_matches(conn, "sp_32", rows, mem_ids) == len(mem_ids)
    assert exact_matches(conn, "sp_32", rows, rest_ids) == len(rest_ids)
    spilled = recall_at(conn, "sp_32", rows, queries)

    # the same data built entirely in memory (the cluster's 512MB)
    assert build_at(conn, "sp_32_big", rows, "vector_l2_ops", "512MB") is None
    full = recall_at(conn, "sp_32_big", rows, queries)
    # Inserted rows are linked by the same SQ8 search and heuristic as the
    # build, with the quantizer trained on every row, so the graph should be
    # about as good; 0.02 is two misses per 100 (10 queries x 10), the
    # noise of 100 queries on graphs built in a different order.
    assert spilled >= full - 0.02, (spilled, full)


def test_spill_3k_768(conn):
    rows, _ = data.clustered(3000, 768, seed=12, n_queries=1)
    notices = []
    nmem = build_at(conn, "sp_768", rows, "vector_l2_ops", "1MB", notices=notices)
    assert nmem is not None and 0 < nmem < 3000, notices
    mem_ids, rest_ids = sample_both_parts(3000, nmem, k=25)
    assert exact_matches(conn, "sp_768", rows, mem_ids) == len(mem_ids)
    assert exact_matches(conn, "sp_768", rows, rest_ids) == len(rest_ids)


def test_spill_halfvec_cosine(conn):
    rows, _ = data.clustered(8000, 64, seed=13, n_queries=1)
    notices = []
    nmem = build_at(conn, "sp_half", rows, "halfvec_cosine_ops", "1MB", typ="halfvec",
                    notices=notices)
    assert nmem is not None and 0 < nmem < 8000, notices
    mem_ids, rest_ids = sample_both_parts(8000, nmem, k=25)
    assert exact_matches(conn, "sp_half", rows, mem_ids, op="<=>", typ="halfvec") == len(mem_ids)
    assert exact_matches(conn, "sp_half", rows, rest_ids, op="<=>", typ="halfvec") == len(rest_ids)


def test_spill_progress_and_cancel(cluster):
    """pg_stat_progress_create_index shows the insert phase with its own
    tuple counts; a cancel during that phase stops the build promptly and
    leaves no index."""
    import threading
    import time

    import psycopg

    rows, _ = data.clustered(20000, 32, seed=14, n_queries=1)
    with cluster.connect() as setup:
        data.load(setup, "sp_prog", rows)
    seen, result = [], {}
    with cluster.connect() as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute("SET maintenance_work_mem = '1MB'")
        conn.execute("SET max_parallel_maintenance_workers = 0")

        def run():
            try:
                conn.execute("CREATE INDEX sp_prog_idx ON sp_prog USING streamhnsw "
                             "(embedding vector_l2_ops)")
                result["ok"] = True
            except psycopg.errors.QueryCanceled:
                result["canceled"] = time.time()
        th = threading.Thread(target=run)
        with cluster.connect() as mon:
            th.start()
            cancel_at = None
            deadline = time.time() + 120
            while th.is_alive() and time.time() < deadline:
                r = mon.execute("SELECT phase, tuples_done, tuples_total FROM "
                                "pg_stat_progress_create_index WHERE pid = %s", (pid,)).fetchone()
                if r is not None:
                    seen.append(r)
                    # cancel once the insert phase has made some progress
                    if r[0] == PHASE and r[1] > 200 and cancel_at is None:
                        cancel_at = time.time()
                        mon.execute("SELECT pg_cancel_backend(%s)", (pid,))
                time.sleep(0.005)
            th.join()
            exists = mon.execute("SELECT count(*) FROM pg_class WHERE relname = 'sp_prog_idx'").fetchone()[0]
    phases = [s for s in seen if s[0] == PHASE]
    assert phases, sorted({s[0] for s in seen})
    # the insert phase counts only the rows it inserts
    totals = {s[2] for s in phases}
    assert len(totals) == 1 and 0 < totals.pop() < 20000, phases[:5]
    assert all(0 <= s[1] <= s[2] for s in phases), phases[:5]
    assert cancel_at is not None and "canceled" in result, (result, phases[-3:])
    assert result["canceled"] - cancel_at < 5, result["canceled"] - cancel_at
    assert exists == 0
