"""Space under churn (issue 18): freed slots take new nodes of any level, so
an index whose table keeps its row count under steady deletes and inserts
keeps its size."""

import numpy as np

from harness.horizon import wait_for_quiet_horizon


def size(conn, index):
    return conn.execute("SELECT pg_relation_size(%s)", (index,)).fetchone()[0]


def vec(a):
    return "[" + ",".join(f"{x:.6f}" for x in a) + "]"


def load(conn, table, ids, rows):
    with conn.cursor() as cur:
        with cur.copy(f"COPY {table} (id, v) FROM STDIN") as cp:
            for i, r in zip(ids, rows):
                cp.write_row((int(i), vec(r)))


def test_churn_keeps_the_size_bounded(conn):
    """10 cycles of deleting half of 10,000 rows, VACUUM, and inserting as
    many new ones: the index after the last cycle is at most 1.1x its size
    after the first."""
    rng = np.random.default_rng(18)
    n, dims = 10000, 8
    conn.execute("DROP TABLE IF EXISTS churn")
    conn.execute(f"CREATE TABLE churn (id int, v vector({dims}))")
    conn.execute("ALTER TABLE churn SET (autovacuum_enabled = false)")
    load(conn, "churn", range(n), rng.random((n, dims), dtype=np.float32))
    conn.execute("CREATE INDEX churn_idx ON churn USING streamhnsw (v)")
    live = np.arange(n)
    next_id = n
    sizes = []
    for cycle in range(10):
        gone = rng.choice(live, size=n // 2, replace=False)
        conn.execute("DELETE FROM churn WHERE id = ANY(%s)", (gone.tolist(),))
        wait_for_quiet_horizon(conn)
        conn.execute("VACUUM churn")
        new = np.arange(next_id, next_id + n // 2)
        next_id += n // 2
        load(conn, "churn", new, rng.random((n // 2, dims), dtype=np.float32))
        live = np.concatenate([np.setdiff1d(live, gone), new])
        sizes.append(size(conn, "churn_idx"))
    assert sizes[-1] <= 1.1 * sizes[0], sizes
    assert conn.execute("SELECT * FROM streamhnsw_verify('churn_idx')").fetchall() == []
    q = vec(rng.random(dims))
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        got = [r[0] for r in conn.execute(
            f"SELECT id FROM churn ORDER BY v <-> '{q}' LIMIT 10").fetchall()]
    exact = [r[0] for r in conn.execute(
        f"SELECT id FROM churn ORDER BY v <-> '{q}' LIMIT 10").fetchall()]
    assert len(set(got) & set(exact)) >= 8
    conn.execute("DROP TABLE churn")


def test_delete_all_vacuum_reinsert_keeps_the_size(conn):
    """pgvector's vacuum scenario: 10,000 rows of 3 dimensions, delete all,
    VACUUM, insert the same rows again: at most 1.02x the size; then delete
    all rows but one: the scan returns it."""
    mods = [int(x) for x in np.random.default_rng(11).integers(1, 1001, 3)]
    expr = "ARRAY[" + ", ".join(f"i % {m}" for m in mods) + "]"
    conn.execute("DROP TABLE IF EXISTS vsize")
    conn.execute("CREATE TABLE vsize (i int4, v vector(3))")
    conn.execute(f"INSERT INTO vsize SELECT i, {expr} FROM generate_series(1, 10000) i")
    conn.execute("CREATE INDEX vsize_idx ON vsize USING streamhnsw (v vector_l2_ops)")
    before = size(conn, "vsize_idx")
    conn.execute("DELETE FROM vsize")
    conn.execute("VACUUM vsize")
    conn.execute(f"INSERT INTO vsize SELECT i, {expr} FROM generate_series(1, 10000) i")
    after = size(conn, "vsize_idx")
    assert after <= 1.02 * before, (before, after)
    conn.execute("DELETE FROM vsize WHERE i != 123")
    conn.execute("VACUUM vsize")
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        assert conn.execute("SELECT i FROM vsize ORDER BY v <-> '[0,0,0]' "
                            "LIMIT 10").fetchall() == [(123,)]
    conn.execute("DROP TABLE vsize")


def test_corrupt_free_list_head_is_an_error(private_cluster):
    """A free-list head naming a slot beyond its graph page's slot count is
    a corrupt index: an INSERT (which reads the head to choose the new
    node's level, then to take the slot) ends in ERRCODE_INDEX_CORRUPTED
    naming the block, not in a silent skip of the free list."""
    import struct

    import psycopg

    c = private_cluster
    with c.connect() as conn:
        conn.execute("CREATE TABLE fl (id int, v vector(3))")
        conn.execute("ALTER TABLE fl SET (autovacuum_enabled = false)")
        conn.execute("INSERT INTO fl SELECT g, ARRAY[g, g % 7, g % 11]::vector "
                     "FROM generate_series(1, 500) g")
        conn.execute("CREATE INDEX fl_idx ON fl USING streamhnsw (v)")
        conn.execute("DELETE FROM fl WHERE id <= 100")
        conn.execute("VACUUM fl")
        path = conn.execute("SELECT pg_relation_filepath('fl_idx')").fetchone()[0]
        conn.execute("CHECKPOINT")
    c.stop()
    r = c._run([c.bindir / "pg_checksums", "--disable", "-D", c.datadir], check=False)
    assert r.returncode == 0, r.stderr
    f = c.datadir / path
    buf = bytearray(f.read_bytes())
    free_head_at = 24 + 108          # page header, then ShnswMetaPageData.free_head
    slot_bits = buf[24 + 20]
    head = struct.unpack_from("<I", buf, free_head_at)[0]
    assert head != 0xFFFFFFFF, "VACUUM left no free slot"
    blk = head >> slot_bits
    nslots = struct.unpack_from("<H", buf, blk * 8192 + 8192 - 8 + 2)[0]
    assert nslots < (1 << slot_bits)
    struct.pack_into("<I", buf, free_head_at, (blk << slot_bits) | ((1 << slot_bits) - 1))
    f.write_bytes(bytes(buf))
    c.start()
    with c.connect() as conn:
        try:
            conn.execute("INSERT INTO fl VALUES (1000, '[1,2,3]')")
            raise AssertionError("an insert through a corrupt free list succeeded")
        except psycopg.errors.IndexCorrupted as e:
            assert f"block {blk}" in str(e), str(e)


def _pages(conn, index):
    return conn.execute("SELECT pg_relation_size(%s) / 8192", (index,)).fetchone()[0]


def _random_rows(conn, table, first, last, dims=16):
    conn.execute(f"INSERT INTO {table} SELECT g, (SELECT array_agg(random())::vector "
                 f"FROM generate_series(1, {dims}) WHERE g > 0) "
                 f"FROM generate_series({first}, {last}) g")


def test_vacuum_truncates_free_pages_at_the_end(cluster):
    """Rows inserted after the build and then deleted leave whole free pages
    at the end of the index: VACUUM cuts them off, back to the built size,
    but not while another transaction holds a lock on the index (one that
    scanned it and is still open): that one may still follow references
    into them (src/README, VACUUM, truncation). Deleting every row cuts the
    index to its metapage and quantizer pages; inserting again works."""
    with cluster.connect() as conn, cluster.connect(autocommit=False) as other:
        conn.autocommit = True
        conn.execute("DROP TABLE IF EXISTS trunc")
        conn.execute("CREATE TABLE trunc (id int, v vector(16))")
        conn.execute("ALTER TABLE trunc SET (autovacuum_enabled = false)")
        conn.execute("SELECT setseed(0.5)")
        _random_rows(conn, "trunc", 1, 3000)
        conn.execute("CREATE INDEX trunc_idx ON trunc USING streamhnsw (v)")
        built = _pages(conn, "trunc_idx")
        _random_rows(conn, "trunc", 3001, 6000)
        grown = _pages(conn, "trunc_idx")
        assert grown > 1.5 * built, (built, grown)
        conn.execute("DELETE FROM trunc WHERE id > 3000")

        # an open transaction that used the index: no truncation
        other.execute("SET enable_seqscan = off")
        q = other.execute("SELECT v FROM trunc WHERE id = 7").fetchone()[0]
        assert len(other.execute("SELECT id FROM trunc ORDER BY v <-> %s LIMIT 5",
                                 (q,)).fetchall()) == 5
        conn.execute("VACUUM trunc")
        assert _pages(conn, "trunc_idx") == grown
        assert len(other.execute("SELECT id FROM trunc ORDER BY v <-> %s LIMIT 50",
                                 (q,)).fetchall()) == 50
        other.commit()

        # the next VACUUM (no dead rows left) cuts the free tail
        conn.execute("VACUUM trunc")
        assert _pages(conn, "trunc_idx") <= built
        assert conn.execute("SELECT * FROM streamhnsw_verify('trunc_idx')").fetchall() == []
        meta = conn.execute("SELECT node_count, free_count, total_blocks FROM "
                            "streamhnsw_metapage('trunc_idx')").fetchone()
        assert meta[2] == _pages(conn, "trunc_idx") and meta[0] < 3100, meta
        conn.execute("SET enable_seqscan = off")
        got = conn.execute("SELECT id FROM trunc ORDER BY v <-> %s LIMIT 10", (q,)).fetchall()
        assert got[0][0] == 7 and len(got) == 10
        _random_rows(conn, "trunc", 6001, 7000)
        assert conn.execute("SELECT * FROM streamhnsw_verify('trunc_idx')").fetchall() == []

        conn.execute("DELETE FROM trunc")
        conn.execute("VACUUM trunc")
        assert _pages(conn, "trunc_idx") <= 1 + 2      # metapage and quantizer page(s)
        assert conn.execute("SELECT * FROM streamhnsw_verify('trunc_idx')").fetchall() == []
        _random_rows(conn, "trunc", 1, 3000)
        assert _pages(conn, "trunc_idx") <= 1.02 * built
        assert conn.execute("SELECT * FROM streamhnsw_verify('trunc_idx')").fetchall() == []
        q = conn.execute("SELECT v FROM trunc WHERE id = 11").fetchone()[0]
        assert conn.execute("SELECT id FROM trunc ORDER BY v <-> %s LIMIT 1",
                            (q,)).fetchone()[0] == 11
        conn.execute("DROP TABLE trunc")


def test_truncation_beside_concurrent_scans_and_inserts(cluster):
    """VACUUM cycles that cut free pages at the end while other sessions
    search and insert in their own short transactions: no statement fails
    (a scan never follows a reference into a cut page), the index ends
    consistent, and at least one VACUUM did cut pages."""
    import threading

    with cluster.connect() as conn:
        conn.autocommit = True
        conn.execute("DROP TABLE IF EXISTS trc")
        conn.execute("CREATE TABLE trc (id int, v vector(16))")
        conn.execute("ALTER TABLE trc SET (autovacuum_enabled = false)")
        _random_rows(conn, "trc", 1, 2000)
        conn.execute("CREATE INDEX trc_idx ON trc USING streamhnsw (v)")
        stop = threading.Event()
        errors = []

        def worker(seed):
            with cluster.connect() as c:
                c.autocommit = True
                c.execute("SET enable_seqscan = off")
                k = 0
                while not stop.is_set():
                    k += 1
                    try:
                        if k % 3 == 0:
                            _random_rows(c, "trc", 100000 + seed * 100000 + k,
                                         100000 + seed * 100000 + k)
                        else:
                            rows = c.execute("SELECT id FROM trc ORDER BY v <-> "
                                             "(SELECT v FROM trc WHERE id = %s) LIMIT 10",
                                             (1 + (k * 7 + seed) % 2000,)).fetchall()
                            if len(rows) != 10:
                                errors.append(f"{len(rows)} rows")
                    except Exception as e:          # any error fails the test
                        errors.append(repr(e))
                        return

        threads = [threading.Thread(target=worker, args=(s,)) for s in range(2)]
        for t in threads:
            t.start()
        cut = 0
        try:
            for cycle in range(6):
                before = _pages(conn, "trc_idx")
                _random_rows(conn, "trc", 10000 + cycle * 2000, 10000 + cycle * 2000 + 1499)
                conn.execute(f"DELETE FROM trc WHERE id >= {10000 + cycle * 2000}")
                conn.execute("VACUUM trc")
                conn.execute("VACUUM trc")
                if _pages(conn, "trc_idx") < before + 10:
                    cut += 1
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert errors == [], errors[:5]
        assert conn.execute("SELECT * FROM streamhnsw_verify('trc_idx')").fetchall() == []
        assert cut >= 1
        conn.execute("DROP TABLE trc")
