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
