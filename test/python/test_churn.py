"""Space under churn (issue 18): freed slots take new nodes of any level, so
an index whose table keeps its row count under steady deletes and inserts
keeps its size."""

import numpy as np


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
    free_head_at = 24 + 100          # page header, then ShnswMetaPageData.free_head
    slot_bits = buf[24 + 18]
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
