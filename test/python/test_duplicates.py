"""Identical vectors share a node holding several heap rows (issue 18):
every copy is returned, however many there are and however they arrive,
and VACUUM removes a node's dead rows without losing its live ones."""

import struct
import threading

import psycopg
import pytest


def count_near(conn, table, q, limit, ef=None):
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        if ef is not None:
            conn.execute(f"SET LOCAL streamhnsw.ef_search = {ef}")
        rows = conn.execute(f"SELECT id FROM {table} ORDER BY v <-> '{q}' "
                            f"LIMIT {limit}").fetchall()
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)), "a row returned twice"
    return ids


def verify(conn, index):
    problems = conn.execute(f"SELECT * FROM streamhnsw_verify('{index}')").fetchall()
    assert problems == [], problems


def test_520_copies_inserted_concurrently_are_all_returned(cluster, conn):
    """pgvector's duplicates scenario: 520 copies of one vector inserted by
    several sessions at once; LIMIT 1000 through the index returns all."""
    conn.execute("DROP TABLE IF EXISTS dup520")
    conn.execute("CREATE TABLE dup520 (id int, v vector(3))")
    conn.execute("CREATE INDEX dup520_idx ON dup520 USING streamhnsw (v)")
    conn.execute("INSERT INTO dup520 VALUES (0, '[1,1,1]')")

    def worker(w):
        with cluster.connect() as c:
            for i in range(w, 520, 4):
                if i > 0:
                    c.execute("INSERT INTO dup520 VALUES (%s, '[1,1,1]')", (i,))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(count_near(conn, "dup520", "[1,1,1]", 1000)) == 520
    verify(conn, "dup520_idx")
    nodes = conn.execute("SELECT node_count FROM streamhnsw_metapage('dup520_idx')").fetchone()[0]
    assert nodes < 520 / 2, nodes       # rows share nodes

    # VACUUM drops dead rows from shared nodes and keeps the live ones
    conn.execute("DELETE FROM dup520 WHERE id % 3 = 0")
    conn.execute("VACUUM dup520")
    left = count_near(conn, "dup520", "[1,1,1]", 1000)
    assert sorted(left) == [i for i in range(520) if i % 3 != 0]
    verify(conn, "dup520_idx")
    # and new copies go on finding room
    conn.execute("INSERT INTO dup520 SELECT 1000 + i, '[1,1,1]' FROM generate_series(1, 100) i")
    assert len(count_near(conn, "dup520", "[1,1,1]", 1000)) == len(left) + 100
    conn.execute("DELETE FROM dup520")
    conn.execute("VACUUM dup520")
    assert count_near(conn, "dup520", "[1,1,1]", 1000) == []
    verify(conn, "dup520_idx")
    conn.execute("DROP TABLE dup520")


def test_copies_among_other_rows_inserted_one_at_a_time(conn):
    """The README's old limitation: 200 copies among 100 other rows,
    inserted one at a time (m 4): all 300 rows come back, at the default
    ef_search and at 1000."""
    conn.execute("DROP TABLE IF EXISTS dup300")
    conn.execute("CREATE TABLE dup300 (id int, v vector(2))")
    conn.execute("CREATE INDEX dup300_idx ON dup300 USING streamhnsw (v) WITH (m = 4)")
    for i in range(1, 201):
        conn.execute("INSERT INTO dup300 VALUES (%s, '[1,1]')", (i,))
        if i % 2 == 0:
            k = i // 2
            conn.execute("INSERT INTO dup300 VALUES (%s, %s)", (1000 + k, f"[{k},{-k}]"))
    assert len(count_near(conn, "dup300", "[1,1]", 300)) == 300
    assert len(count_near(conn, "dup300", "[1,1]", 300, ef=1000)) == 300
    # a NULL query (every row) returns each row of a shared node
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        n = conn.execute("SELECT count(*) FROM (SELECT id FROM dup300 "
                         "ORDER BY v <-> NULL LIMIT 1000) s").fetchone()[0]
    assert n == 300
    conn.execute("VACUUM dup300")
    assert len(count_near(conn, "dup300", "[1,1]", 300)) == 300
    verify(conn, "dup300_idx")
    conn.execute("DROP TABLE dup300")


@pytest.mark.parametrize("version", [2, 3, 5])
def test_index_of_an_older_format_asks_for_reindex(private_cluster, version):
    """The current format (6) cannot read a format-2 index (one row per
    node), a format-3 one (the rows in every graph record) or a format-5 one
    (sparsevec values padded to 1,000 elements): every use says so and asks
    for REINDEX, which rebuilds it."""
    c = private_cluster
    with c.connect() as conn:
        conn.execute("CREATE TABLE oldfmt (id int, v vector(3))")
        conn.execute("INSERT INTO oldfmt SELECT i, ARRAY[i, i % 7, 1]::real[]::vector "
                     "FROM generate_series(1, 50) i")
        conn.execute("CREATE INDEX oldfmt_idx ON oldfmt USING streamhnsw (v)")
        conn.execute("CHECKPOINT")
        path = conn.execute("SELECT pg_relation_filepath('oldfmt_idx')").fetchone()[0]
    c.stop()
    # the edit must reach the access method: no checksums
    c._run([c.bindir / "pg_checksums", "--disable", "-D", c.datadir], check=False)
    with open(c.datadir / path, "r+b") as f:
        page = bytearray(f.read(8192))
        struct.pack_into("<I", page, 24 + 4, version)     # metapage: magic, then version
        f.seek(0)
        f.write(page)
    c.start()
    with c.connect() as conn:
        conn.execute("SET enable_seqscan = off")
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT id FROM oldfmt ORDER BY v <-> '[1,1,1]' LIMIT 3").fetchall()
        assert f"format version {version}" in str(e.value)
        assert e.value.diag.message_hint == "REINDEX the index."
        conn.execute("REINDEX INDEX oldfmt_idx")
        assert len(conn.execute("SELECT id FROM oldfmt ORDER BY v <-> '[1,1,1]' "
                                "LIMIT 3").fetchall()) == 3


def test_shared_rows_through_vacuum_cycles_and_reused_slots(conn):
    """Format 4 keeps a node's rows beyond its first in its upper record.
    Copies of 40 vectors (up to 12 each, so some overflow to a second
    node), inserted one at a time at m 4 (levels 0 to 3); three cycles of
    deleting a random third of the rows (some nodes lose all rows, some
    all but one, some keep several), VACUUM, and inserting new copies
    (into freed slots, whose upper records are rewritten): after each
    step every live row of every vector comes back from an exact-match
    query, no dead one does, and verify finds nothing. The graph record
    holds no room for extra rows: node_size is 24 + 8 m + dims."""
    import random

    rng = random.Random(4)
    conn.execute("DROP TABLE IF EXISTS dupcyc")
    conn.execute("CREATE TABLE dupcyc (id int, k int, v vector(3))")
    conn.execute("ALTER TABLE dupcyc SET (autovacuum_enabled = false)")
    conn.execute("CREATE INDEX dupcyc_idx ON dupcyc USING streamhnsw (v) WITH (m = 4)")
    conn.execute("CREATE TEMP TABLE dupw (v vector(128))")
    conn.execute("CREATE INDEX dupw_idx ON dupw USING streamhnsw (v) WITH (m = 16)")
    # 24 + 8 * 16 + 128 = 280 bytes: 29 records a page (format 3: 336, 24)
    assert conn.execute("SELECT nodes_per_page FROM "
                        "streamhnsw_metapage('dupw_idx')").fetchone()[0] == 29
    conn.execute("DROP TABLE dupw")

    def lit(k):
        return f"[{k},{(k * 7) % 13},1]"

    live = {}                    # id -> k
    next_id = [1]

    def add(k, n):
        for _ in range(n):
            conn.execute("INSERT INTO dupcyc VALUES (%s, %s, %s)", (next_id[0], k, lit(k)))
            live[next_id[0]] = k
            next_id[0] += 1

    def check():
        for k in range(40):
            want = sorted(i for i, kk in live.items() if kk == k)
            got = sorted(i for i in count_near(conn, "dupcyc", lit(k), 60, ef=200)
                         if live.get(i) == k or i not in live)
            assert got == want, (k, got, want)
        verify(conn, "dupcyc_idx")

    for k in range(40):
        add(k, 1 + k % 12)
    check()
    for cycle in range(3):
        gone = rng.sample(sorted(live), len(live) // 3)
        conn.execute("DELETE FROM dupcyc WHERE id = ANY(%s)", (gone,))
        for i in gone:
            del live[i]
        conn.execute("VACUUM dupcyc")
        check()
        for k in rng.sample(range(40), 15):
            add(k, 1 + rng.randrange(4))
        check()
    conn.execute("DROP TABLE dupcyc")
