"""The index option ef_search in force, seen in the work a scan does.

An index made WITH (ef_search = 120) on 4,000 clustered 32-d rows (cosine):
while streamhnsw.ef_search is not set, a LIMIT 10 scan's first round
expands as many nodes as the option says (EXPLAIN (ANALYZE): "nodes
expanded", "streamhnsw search: ef_search=120 (index option)"), three times
what an index without the option expands at the setting's default 40; a
session's SET or SET LOCAL of the setting wins (even SET to 40), and RESET
or the end of the transaction gives the index's option back. Recall
follows: the option's wider search finds at least as many true neighbours.
"""

import pytest

from shnsw import data

N, DIM, K = 4000, 32, 10


@pytest.fixture(scope="module")
def efo(cluster):
    x, q = data.clustered(N, DIM, seed=47, n_queries=20)
    truth = data.ground_truth(x, q, K, metric="cosine")
    with cluster.connect() as conn:
        data.load(conn, "efo_wide", x)
        data.load(conn, "efo_plain", x)
        conn.execute("CREATE INDEX efo_wide_idx ON efo_wide USING streamhnsw "
                     "(embedding vector_cosine_ops) WITH (ef_search = 120)")
        conn.execute("CREATE INDEX efo_plain_idx ON efo_plain USING streamhnsw "
                     "(embedding vector_cosine_ops)")
    yield q, truth
    with cluster.connect() as conn:
        conn.execute("DROP TABLE efo_wide, efo_plain")


def _scan(conn, table, qv):
    """(nodes expanded, the 'streamhnsw search' line) of a LIMIT 10 scan."""
    plan = [r[0] for r in conn.execute(
        f"EXPLAIN (ANALYZE, COSTS OFF) SELECT id FROM {table} "
        f"ORDER BY embedding <=> %s::vector LIMIT {K}", (data.vector_literal(qv),)).fetchall()]
    assert any(f"Index Scan using {table}_idx" in line for line in plan), plan
    line = next(p for p in plan if "streamhnsw: rounds=" in p)
    used = next(p.strip() for p in plan if "streamhnsw search:" in p)
    return int(line.split("nodes expanded=")[1].split()[0]), used


def _recall(conn, table, q, truth):
    found = [[r[0] for r in conn.execute(
        f"SELECT id FROM {table} ORDER BY embedding <=> %s::vector LIMIT {K}",
        (data.vector_literal(v),)).fetchall()] for v in q]
    return data.recall(found, truth, K)


def test_index_option_at_default_and_set_overrides(cluster, efo):
    q, truth = efo
    with cluster.connect() as conn:
        conn.execute("SET enable_seqscan = off")
        for qv in q[:5]:
            wide, used = _scan(conn, "efo_wide", qv)
            assert used == "streamhnsw search: ef_search=120 (index option)"
            plain, used = _scan(conn, "efo_plain", qv)
            assert used == "streamhnsw search: ef_search=40 (streamhnsw.ef_search)"
            # the first round expands ef_search nodes (a LIMIT 10 needs no other)
            assert wide >= 120 and plain < 120, (wide, plain)
            assert wide >= 2 * plain, (wide, plain)

            conn.execute("SET streamhnsw.ef_search = 40")
            set40, used = _scan(conn, "efo_wide", qv)
            assert used == "streamhnsw search: ef_search=40 (streamhnsw.ef_search)"
            assert set40 == plain, (set40, plain)
            conn.execute("SET streamhnsw.ef_search = 300")
            set300, _ = _scan(conn, "efo_wide", qv)
            assert set300 >= 300 > wide, (set300, wide)
            conn.execute("RESET streamhnsw.ef_search")
            again, used = _scan(conn, "efo_wide", qv)
            assert used.endswith("(index option)") and again == wide

            with conn.transaction():
                conn.execute("SET LOCAL streamhnsw.ef_search = 20")
                local, _ = _scan(conn, "efo_wide", qv)
                assert local < plain, (local, plain)
            assert _scan(conn, "efo_wide", qv)[0] == wide

        r_wide = _recall(conn, "efo_wide", q, truth)
        r_plain = _recall(conn, "efo_plain", q, truth)
        print(f"\nrecall@{K}: index option ef_search 120 {r_wide:.3f}, default 40 {r_plain:.3f}")
        assert r_wide >= r_plain and r_wide >= 0.95, (r_wide, r_plain)


def test_alter_index_reaches_open_sessions(cluster, efo):
    """ALTER INDEX ... SET (ef_search) in one session reaches the next scan
    of another session that is open all along, without blocking it."""
    q, _ = efo
    with cluster.connect() as reader, cluster.connect() as admin:
        reader.execute("SET enable_seqscan = off")
        before, _ = _scan(reader, "efo_plain", q[0])
        with reader.transaction():
            # a reader holding its lock does not stop the ALTER
            _scan(reader, "efo_plain", q[0])
            admin.execute("SET lock_timeout = '5s'")
            admin.execute("ALTER INDEX efo_plain_idx SET (ef_search = 200)")
        after, used = _scan(reader, "efo_plain", q[0])
        assert used == "streamhnsw search: ef_search=200 (index option)"
        assert after >= 200 > before, (before, after)
        admin.execute("ALTER INDEX efo_plain_idx RESET (ef_search)")
        assert _scan(reader, "efo_plain", q[0])[0] == before
