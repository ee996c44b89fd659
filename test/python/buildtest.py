"""Helpers shared by the build tests (test_parallel_build, test_build_halves):
CREATE INDEX with a given number of parallel workers, memory and link
representation, reading how many workers it launched from its DEBUG1
message; searches through the index; rows a LIMIT 1 search for their own
vector misses."""

import re

from shnsw import data

LAUNCHED = re.compile(r"streamhnsw: (\d+) parallel workers launched")

CASES = [
    # (type, opclass, operator, metric)
    ("vector", "vector_l2_ops", "<->", "l2"),
    ("vector", "vector_ip_ops", "<#>", "ip"),
    ("vector", "vector_cosine_ops", "<=>", "cosine"),
    ("halfvec", "halfvec_l2_ops", "<->", "l2"),
    ("halfvec", "halfvec_cosine_ops", "<=>", "cosine"),
]
CASE_IDS = [f"{c[0]}-{c[3]}" for c in CASES]


def load_case(conn, table, rows, queries, typ, metric):
    """Load rows into table (column type typ) with parallel_workers 2, so
    that a build may be parallel; returns the queries' exact top 10."""
    data.load(conn, table, rows, typ=typ)
    conn.execute(f"ALTER TABLE {table} SET (parallel_workers = 2)")
    return data.ground_truth(rows, queries, 10, metric)


def build(conn, table, opclass, workers=0, mem="512MB", notices=None, floats=None):
    """CREATE INDEX with max_parallel_maintenance_workers = workers, linking on
    floats (floats True: streamhnsw.debug_build_floats), halves (False) or as
    the build chooses (None); returns the number of workers the build
    launched (None: it did not build in parallel)."""
    seen = []
    handler = lambda d: seen.append(d.message_primary)  # noqa: E731
    settings = ["client_min_messages", "maintenance_work_mem", "max_parallel_maintenance_workers",
                "min_parallel_table_scan_size"]
    if floats is not None:
        conn.execute(f"SET streamhnsw.debug_build_floats = {'on' if floats else 'off'}")
        settings.append("streamhnsw.debug_build_floats")
    conn.execute(f"SET max_parallel_maintenance_workers = {workers}")
    conn.execute("SET min_parallel_table_scan_size = 0")
    conn.execute(f"SET maintenance_work_mem = '{mem}'")
    conn.execute("SET client_min_messages = debug1")
    conn.add_notice_handler(handler)
    try:
        conn.execute(f"CREATE INDEX {table}_idx ON {table} USING streamhnsw (embedding {opclass})")
    finally:
        conn.remove_notice_handler(handler)
        for setting in settings:
            conn.execute(f"RESET {setting}")
    if notices is not None:
        notices.extend(seen)
    assert conn.execute(f"SELECT count(*) FROM streamhnsw_verify('{table}_idx')").fetchone()[0] == 0
    launched = [int(m.group(1)) for n in seen for m in [LAUNCHED.search(n)] if m]
    return launched[0] if launched else None


def search(conn, table, queries, op, typ, k=10, ef=40):
    conn.execute("SET enable_seqscan = off")
    conn.execute(f"SET streamhnsw.ef_search = {ef}")
    sql = f"SELECT id FROM {table} ORDER BY embedding {op} %s::{typ} LIMIT {k}"
    plan = conn.execute("EXPLAIN (COSTS OFF) " + sql, (data.vector_literal(queries[0]),)).fetchall()
    assert any("Index Scan using" in r[0] for r in plan), plan
    out = [[r[0] for r in conn.execute(sql, (data.vector_literal(q),)).fetchall()] for q in queries]
    conn.execute("RESET enable_seqscan")
    conn.execute("RESET streamhnsw.ef_search")
    return out


def own_vector_missed(conn, table, rows, op, typ, ids, ef=200):
    """The rows of ids that a LIMIT 1 search for the row's own vector does not return."""
    got = search(conn, table, rows[ids], op, typ, k=1, ef=ef)
    return [i for i, r in zip(ids, got) if r != [i]]


def check_own_vectors(conn, table, rows, op, typ):
    """Every row is found by a search for its own vector (not under inner
    product, where a row is not its own nearest neighbour). A serial build
    misses none at ef_search 200; parallel builds on a loaded 2-core machine
    missed 0 or 1 of 8,000 (a node linked while its process was held up,
    src/README Build), which a wider search finds."""
    missed = own_vector_missed(conn, table, rows, op, typ, list(range(len(rows))))
    assert len(missed) <= 4, missed
    if missed:
        assert own_vector_missed(conn, table, rows, op, typ, missed, ef=1000) == []
