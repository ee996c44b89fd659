"""The shared cache (issue 16, src/README "Shared cache").

Results must be identical with the image and without it (streamhnsw.shared_cache
off reads every node through shared buffers), on built, insert-built and
vacuumed indexes, after slot reuse, on a hot standby; writers keep the image
exact (no invalidation per insert or VACUUM); concurrent inserts, deletes,
VACUUM and searches with the image never miss a committed row nor return a
deleted one; the size limit, eviction and fallbacks hold.
"""

import os
import re
import threading
import time

import numpy as np
import pytest

from shnsw import data
from shnsw.cluster import Cluster
from harness.replica import Standby

K = 10


def knn(conn, table, q, k=K, op="<->"):
    lit = data.vector_literal(q)
    return conn.execute(f"SELECT id, embedding {op} %s FROM {table} "
                        f"ORDER BY embedding {op} %s LIMIT {k}", (lit, lit)).fetchall()


def explain_shared(conn, table, q, op="<->"):
    lit = data.vector_literal(q)
    plan = conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF) SELECT id FROM {table} "
                        f"ORDER BY embedding {op} %s LIMIT {K}", (lit,)).fetchall()
    lines = [r[0].strip() for r in plan if "shared cache" in r[0]]
    assert lines, plan
    return lines[0]


def cache_row(conn, index):
    rows = conn.execute("SELECT state, bytes, nodes, hits, misses, builds, invalidations, "
                        "refreshes, evictions, insert_searches, outgrown "
                        "FROM streamhnsw_cache_list() "
                        "WHERE index = %s::regclass AND state <> 'dropped'", (index,)).fetchall()
    if not rows:
        return None
    keys = ("state", "bytes", "nodes", "hits", "misses", "builds", "invalidations",
            "refreshes", "evictions", "insert_searches", "outgrown")
    return dict(zip(keys, rows[0]))


def clear_cache(conn):
    """Drop the images of this database's indexes (the session cluster holds
    other tests' images, built lazily by their scans)."""
    conn.execute("SELECT streamhnsw_cache_drop(c.oid) FROM streamhnsw_cache_list() l "
                 "JOIN pg_class c ON c.oid = l.index "
                 "WHERE l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                 "AND l.state = 'ready'")


def indexed_table(conn, table, rows):
    """Load rows into table, index them (L2) and drop this database's images."""
    data.load(conn, table, rows)
    conn.execute(f"CREATE INDEX {table}_idx ON {table} USING streamhnsw (embedding vector_l2_ops)")
    clear_cache(conn)


def wait_ready(conn, index, timeout=60):
    """Wait until the image of index is ready (built in the background)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = cache_row(conn, index)
        if st is not None and st["state"] == "ready":
            return st
        time.sleep(0.05)
    raise AssertionError(f"no image of {index} after {timeout} s: {cache_row(conn, index)}")


BACKGROUND = "streamhnsw shared cache: not used (build started in the background)"
REFRESHING = ("streamhnsw shared cache: not used (behind the index, refresh started in "
              "the background)")


def same_on_off(conn, table, queries, op="<->"):
    """Every query gives the same rows and distances with the image and without."""
    for q in queries:
        conn.execute("SET streamhnsw.shared_cache = on")
        on = knn(conn, table, q, op=op)
        conn.execute("SET streamhnsw.shared_cache = off")
        off = knn(conn, table, q, op=op)
        conn.execute("SET streamhnsw.shared_cache = on")
        assert on == off, (on, off)


@pytest.mark.parametrize("metric,op,opclass", [("l2", "<->", "vector_l2_ops"),
                                               ("cosine", "<=>", "vector_cosine_ops")])
def test_identical_built_insert_vacuum_reuse(conn, metric, op, opclass):
    rows, queries = data.clustered(4000, 24, seed=11, n_queries=30)
    table = f"sg_{metric}"
    data.load(conn, table, rows)
    conn.execute(f"CREATE INDEX {table}_idx ON {table} USING streamhnsw (embedding {opclass})")
    conn.execute("SET streamhnsw.shared_cache = on")
    clear_cache(conn)
    # the first scan starts the build in the background and searches through
    # buffers; so does every scan until the image is ready
    assert explain_shared(conn, table, queries[0], op).startswith(BACKGROUND)
    same_on_off(conn, table, queries[:3], op)
    wait_ready(conn, f"{table}_idx")
    assert "shared cache: used, nodes from cache=" in explain_shared(conn, table, queries[1], op)
    same_on_off(conn, table, queries, op)

    # single-row inserts, each written through (no invalidation), each
    # searching for its neighbours in the image: it stays current through
    # every insert (an insert's search counts no scan hit); with the image
    # off, an insert's search goes through buffers
    more, _ = data.clustered(600, 24, seed=12, n_queries=1)
    before = cache_row(conn, f"{table}_idx")
    for i, v in enumerate(more):
        conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", (100000 + i, data.vector_literal(v)))
    after = cache_row(conn, f"{table}_idx")
    assert after["insert_searches"] - before["insert_searches"] == len(more), (before, after)
    assert after["hits"] == before["hits"] and after["misses"] == before["misses"]
    conn.execute("SET streamhnsw.shared_cache = off")
    conn.execute(f"INSERT INTO {table} VALUES (99999, %s)",
                 (data.vector_literal(np.roll(more[0], 1)),))
    conn.execute("SET streamhnsw.shared_cache = on")
    assert cache_row(conn, f"{table}_idx")["insert_searches"] == after["insert_searches"]
    same_on_off(conn, table, queries, op)
    # every inserted row is found by a search for its own vector, from the image
    # (wide enough a search that it is not a question of recall)
    conn.execute("SET streamhnsw.ef_search = 200")
    for i, v in enumerate(more[:100]):
        assert 100000 + i in [r[0] for r in knn(conn, table, v, op=op)]
    same_on_off(conn, table, more[:100], op)
    conn.execute("RESET streamhnsw.ef_search")

    # VACUUM marks, repairs and frees; inserts reuse the freed slots
    conn.execute(f"DELETE FROM {table} WHERE id % 4 = 0")
    conn.execute(f"VACUUM {table}")
    same_on_off(conn, table, queries, op)
    data.load(conn, table, more, start_id=200000, create=False)
    same_on_off(conn, table, queries, op)
    # 1,200 rows on 4,000 outgrow the copy's eighth of room: a scan has it
    # rebuilt larger in the background; never invalidated by the writes
    wait_ready(conn, f"{table}_idx")
    assert "shared cache: used" in explain_shared(conn, table, queries[2], op)
    st = cache_row(conn, f"{table}_idx")
    assert st["builds"] == 1 + st["outgrown"] and st["invalidations"] == 0, st
    assert st["hits"] > 0


def test_insert_built_index(conn):
    """An index created empty and filled by inserts (retraining included)."""
    rows, queries = data.clustered(3000, 16, seed=21, n_queries=20)
    conn.execute("DROP TABLE IF EXISTS sg_ins")
    conn.execute("CREATE TABLE sg_ins (id bigint PRIMARY KEY, embedding vector(16))")
    conn.execute("CREATE INDEX sg_ins_idx ON sg_ins USING streamhnsw (embedding vector_l2_ops)")
    clear_cache(conn)
    data.load(conn, "sg_ins", rows[:50], create=False)
    assert conn.execute("SELECT streamhnsw_cache_load('sg_ins_idx')").fetchone()[0] > 0
    # retraining (the index doubles) re-encodes every page: written through
    data.load(conn, "sg_ins", rows[50:], start_id=50, create=False)
    same_on_off(conn, "sg_ins", queries)
    # 60 times the rows it was built on: the first scan has the copy rebuilt
    # larger (test_copy_grows_with_inserts), never invalidated
    st = wait_ready(conn, "sg_ins_idx")
    assert st["invalidations"] == 0 and st["builds"] == 2 and st["outgrown"] == 1, st
    same_on_off(conn, "sg_ins", queries)


def fallback_nodes(line):
    """(nodes read from the cache, nodes read through buffers) of an EXPLAIN line."""
    m = re.search(r"nodes from cache=(\d+) through buffers=(\d+)", line)
    assert m, line
    return int(m.group(1)), int(m.group(2))


def test_copy_grows_with_inserts(conn):
    """An index built small, then grown by inserts (how an application
    usually starts): once inserts fill a copy's spare room, the next scan
    has it rebuilt with half again its size as room, and scans read every
    node from the cache again; growth within that room needs no rebuild.
    Before, pages past the first eighth of room were read through buffers
    for good (issue 49, hole 5)."""
    rows, queries = data.clustered(9000, 16, seed=23, n_queries=10)
    conn.execute("DROP TABLE IF EXISTS sg_grow")
    indexed_table(conn, "sg_grow", rows[:2000])
    conn.execute("SET streamhnsw.shared_cache_background = off")
    try:
        line = explain_shared(conn, "sg_grow", queries[0])
        assert "used" in line and fallback_nodes(line)[1] == 0, line
        assert cache_row(conn, "sg_grow_idx")["builds"] == 1
        # three times the rows: far past an eighth of room
        data.load(conn, "sg_grow", rows[2000:6000], start_id=2000, create=False)
        line = explain_shared(conn, "sg_grow", queries[1])
        cached, through = fallback_nodes(line)
        assert "used" in line and cached > 0 and through == 0, line
        st = cache_row(conn, "sg_grow_idx")
        assert st["builds"] == 2 and st["outgrown"] == 1, st
        # 40 % more fits in the half of room the rebuilt copy has
        data.load(conn, "sg_grow", rows[6000:8400], start_id=6000, create=False)
        for q in queries[2:5]:
            line = explain_shared(conn, "sg_grow", q)
            assert "used" in line and fallback_nodes(line)[1] == 0, line
        st = cache_row(conn, "sg_grow_idx")
        assert st["builds"] == 2 and st["outgrown"] == 1 and st["invalidations"] == 0, st
        same_on_off(conn, "sg_grow", queries)
    finally:
        conn.execute("RESET streamhnsw.shared_cache_background")


def test_outgrown_copy_serves_while_a_larger_one_is_built(conn):
    """In the background (the default), a copy that inserts outgrew keeps
    serving while a worker builds a larger one beside it (a successor no
    scan or writer sees), which then takes its place and catches up on the
    writes it missed by their page LSNs. Before, the outgrown copy was
    dropped at once and scans read through buffers until the new one was
    ready. The worker is held in its build for 3 s
    (streamhnsw.debug_cache_build_delay); rows inserted meanwhile are found."""
    rows, queries = data.clustered(9000, 16, seed=24, n_queries=10)
    conn.execute("DROP TABLE IF EXISTS sg_succ")
    indexed_table(conn, "sg_succ", rows[:2000])
    assert explain_shared(conn, "sg_succ", queries[0]).startswith(BACKGROUND)
    wait_ready(conn, "sg_succ_idx")
    data.load(conn, "sg_succ", rows[2000:6000], start_id=2000, create=False)
    conn.execute("SET streamhnsw.debug_cache_build_delay = '3s'")
    try:
        line = explain_shared(conn, "sg_succ", queries[1])
        assert "used" in line and not line.startswith(BACKGROUND), line
        build_worker(conn)
        # the outgrown copy serves, the larger one is being built
        line = explain_shared(conn, "sg_succ", queries[2])
        assert "used" in line and fallback_nodes(line)[1] > 0, line
        st = cache_row(conn, "sg_succ_idx")
        assert st["state"] == "ready" and st["builds"] == 1, st
        data.load(conn, "sg_succ", rows[6000:6500], start_id=6000, create=False)
    finally:
        conn.execute("RESET streamhnsw.debug_cache_build_delay")
    deadline = time.time() + 60
    next_id = 100000
    while cache_row(conn, "sg_succ_idx")["builds"] < 2:
        assert time.time() < deadline, cache_row(conn, "sg_succ_idx")
        # writes while the larger copy is built and swapped in
        data.load(conn, "sg_succ", rows[6500:6510], start_id=next_id, create=False)
        next_id += 10
        time.sleep(0.05)
    st = wait_ready(conn, "sg_succ_idx")
    assert st["outgrown"] == 1 and st["builds"] == 2, st
    for q in queries[3:6]:
        line = explain_shared(conn, "sg_succ", q)
        assert "used" in line and fallback_nodes(line)[1] == 0, line
    same_on_off(conn, "sg_succ", queries)
    for i, v in enumerate(rows[6000:6050]):
        assert 6000 + i in [r[0] for r in knn(conn, "sg_succ", v)]


def test_successor_build_yields_to_vacuum_truncation(conn):
    """A worker building a larger copy beside an outgrown one gives the
    index's lock up when a VACUUM truncation waits for it, as a first
    build does: the free pages at the end are cut, and the VACUUM does not
    wait out the build (held for 30 s by streamhnsw.debug_cache_build_delay)."""
    rows, queries = data.clustered(6000, 16, seed=25, n_queries=2)
    conn.execute("DROP TABLE IF EXISTS sg_sucvac")
    indexed_table(conn, "sg_sucvac", rows[:1500])
    assert explain_shared(conn, "sg_sucvac", queries[0]).startswith(BACKGROUND)
    wait_ready(conn, "sg_sucvac_idx")
    data.load(conn, "sg_sucvac", rows[1500:], start_id=1500, create=False)
    conn.execute("SET streamhnsw.debug_cache_build_delay = '30s'")
    try:
        assert "used" in explain_shared(conn, "sg_sucvac", queries[1])
        pid, _ = build_worker(conn)
        conn.execute("DELETE FROM sg_sucvac")
        t0 = time.time()
        conn.execute("VACUUM sg_sucvac")
        assert time.time() - t0 < 20
        meta = conn.execute("SELECT node_count, deleted_count, free_count "
                            "FROM streamhnsw_metapage('sg_sucvac_idx')").fetchone()
        assert meta == (0, 0, 0), meta
    finally:
        conn.execute("RESET streamhnsw.debug_cache_build_delay")
    data.load(conn, "sg_sucvac", rows[:300], create=False)
    same_on_off(conn, "sg_sucvac", queries)


def test_copy_current_under_a_stream_of_inserts(cluster):
    """A copy refreshed while another session inserts without pause ends
    current: a refresh (here the one that follows a regrowth's swap, which
    catches up on the writes the larger copy missed) and a build take as
    their token the metapage's state at their end, under the metapage's
    lock, not the state read before the pages were copied, which the writes
    meanwhile left behind for as long as writes went on (every scan then
    read through buffers). Searches use the copy while the inserts go on.
    The refresh is held for 1 s after reading its token
    (streamhnsw.debug_cache_build_delay), as on a large index."""
    rows, queries = data.clustered(20000, 16, seed=26, n_queries=5)
    stop = threading.Event()
    with cluster.connect() as c:
        c.execute("DROP TABLE IF EXISTS sg_stream")
        indexed_table(c, "sg_stream", rows[:2000])
        assert explain_shared(c, "sg_stream", queries[0]).startswith(BACKGROUND)
        wait_ready(c, "sg_stream_idx")
        data.load(c, "sg_stream_rows", rows[2000:], start_id=2000)

        def insert():
            with cluster.connect() as w:
                for i in range(2000, 20000, 200):
                    if stop.is_set():
                        break
                    w.execute("INSERT INTO sg_stream SELECT * FROM sg_stream_rows "
                              f"WHERE id >= {i} AND id < {i + 200}")

        # the regrowth's worker waits 1 s after reading its token, inserts going on
        c.execute("SET streamhnsw.debug_cache_build_delay = '1s'")
        t = threading.Thread(target=insert)
        t.start()
        try:
            deadline = time.time() + 60
            used = 0
            while used < 3:
                assert t.is_alive(), ("the inserts ended first", cache_row(c, "sg_stream_idx"))
                assert time.time() < deadline, explain_shared(c, "sg_stream", queries[1])
                line = explain_shared(c, "sg_stream", queries[1])
                used += "shared cache: used" in line and cache_row(c, "sg_stream_idx")["builds"] > 1
                time.sleep(0.05)
        finally:
            stop.set()
            t.join()
            c.execute("RESET streamhnsw.debug_cache_build_delay")
        same_on_off(c, "sg_stream", queries)


def test_background_build_is_not_the_warmers(conn):
    """A build a scan asks a worker for is a lazy build of now: its copy's
    last use is the build's (a request left uninitialized once passed the
    worker a stack value as the warmer's "last used before the restart",
    which also kept the build from evicting idle copies)."""
    rows, queries = data.clustered(2000, 16, seed=27, n_queries=1)
    conn.execute("DROP TABLE IF EXISTS sg_lazy")
    indexed_table(conn, "sg_lazy", rows)
    assert explain_shared(conn, "sg_lazy", queries[0]).startswith(BACKGROUND)
    wait_ready(conn, "sg_lazy_idx")
    assert conn.execute("SELECT last_used BETWEEN now() - interval '1 minute' AND "
                        "clock_timestamp() FROM streamhnsw_cache_list() "
                        "WHERE index = 'sg_lazy_idx'::regclass").fetchone()[0]


def test_list_load_drop_reindex(conn):
    rows, queries = data.clustered(2000, 16, seed=31, n_queries=5)
    data.load(conn, "sg_list", rows)
    conn.execute("CREATE INDEX sg_list_idx ON sg_list USING streamhnsw (embedding vector_l2_ops)")
    clear_cache(conn)
    size = conn.execute("SELECT streamhnsw_cache_load('sg_list_idx')").fetchone()[0]
    st = cache_row(conn, "sg_list_idx")
    assert st["state"] == "ready" and st["bytes"] == size and st["nodes"] == 2000, st
    assert conn.execute("SELECT streamhnsw_cache_drop('sg_list_idx')").fetchone()[0] is True
    assert conn.execute("SELECT streamhnsw_cache_drop('sg_list_idx')").fetchone()[0] is False
    assert cache_row(conn, "sg_list_idx")["state"] == "none"
    # a new relfilenode never reaches the old image
    conn.execute("SELECT streamhnsw_cache_load('sg_list_idx')")
    conn.execute("REINDEX INDEX sg_list_idx")
    assert explain_shared(conn, "sg_list", queries[0]).startswith(BACKGROUND)
    wait_ready(conn, "sg_list_idx")
    assert cache_row(conn, "sg_list_idx")["builds"] == 1
    same_on_off(conn, "sg_list", queries)
    conn.execute("TRUNCATE sg_list")
    data.load(conn, "sg_list", rows[:500], create=False)
    same_on_off(conn, "sg_list", queries)
    with pytest.raises(Exception, match="not a streamhnsw index"):
        conn.execute("SELECT streamhnsw_cache_load('sg_list_pkey')")


def test_dropped_and_rewritten_indexes_free_their_images(conn):
    """An image no scan can reach any more, because its index was dropped or
    now lives in another relfilenode (REINDEX, TRUNCATE), gives its memory
    back the next time a backend of the database lists, loads or asks for
    images, instead of holding dynamic shared memory until eviction."""
    rows, _ = data.clustered(1500, 16, seed=53, n_queries=1)
    indexed_table(conn, "sg_gone", rows)
    oid = conn.execute("SELECT 'sg_gone_idx'::regclass::oid").fetchone()[0]

    def listed():
        return conn.execute("SELECT count(*), coalesce(sum(bytes), 0) FROM streamhnsw_cache_list() "
                            "WHERE index::oid = %s", (oid,)).fetchone()

    size = conn.execute("SELECT streamhnsw_cache_load('sg_gone_idx')").fetchone()[0]
    assert listed() == (1, size)
    conn.execute("REINDEX INDEX sg_gone_idx")
    assert listed() == (0, 0)
    size = conn.execute("SELECT streamhnsw_cache_load('sg_gone_idx')").fetchone()[0]
    assert listed() == (1, size)
    conn.execute("TRUNCATE sg_gone")
    assert listed() == (0, 0)
    data.load(conn, "sg_gone", rows, create=False)
    conn.execute("SELECT streamhnsw_cache_load('sg_gone_idx')")
    assert listed()[0] == 1
    conn.execute("DROP TABLE sg_gone")
    assert listed() == (0, 0)


def test_fresh_connection_uses_image(cluster):
    rows, queries = data.clustered(2000, 16, seed=41, n_queries=3)
    with cluster.connect() as c:
        indexed_table(c, "sg_fresh", rows)
        c.execute("SELECT streamhnsw_cache_load('sg_fresh_idx')")
    with cluster.connect() as c:
        assert "shared cache: used" in explain_shared(c, "sg_fresh", queries[0])


def test_size_limit_eviction_fallback(cluster):
    with cluster.connect() as c:
        for t, seed in (("sg_a", 51), ("sg_b", 52), ("sg_big", 53)):
            n = 20000 if t == "sg_big" else 5000
            rows, _ = data.clustered(n, 64, seed=seed, n_queries=1)
            data.load(c, t, rows)
            c.execute(f"CREATE INDEX {t}_idx ON {t} USING streamhnsw (embedding vector_l2_ops)")
        _, queries = data.clustered(10, 64, seed=54, n_queries=5)
        clear_cache(c)
        a = c.execute("SELECT streamhnsw_cache_load('sg_a_idx')").fetchone()[0]
        # room for one of the small images only
        limit_mb = (a * 3 // 2) // (1024 * 1024) + 1
        limit = limit_mb * 1024 * 1024
        assert 2 * a > limit
        c.execute(f"SET streamhnsw.shared_cache_size = '{limit_mb}MB'")
        b = c.execute("SELECT streamhnsw_cache_load('sg_b_idx')").fetchone()[0]
        assert b is not None
        assert cache_row(c, "sg_a_idx")["state"] == "none"
        assert cache_row(c, "sg_a_idx")["evictions"] == 1
        total = c.execute("SELECT sum(bytes) FROM streamhnsw_cache_list() "
                          "WHERE state <> 'none'").fetchone()[0]
        assert total <= limit
        # too big: NULL from load, the scan falls back, results identical
        assert c.execute("SELECT streamhnsw_cache_load('sg_big_idx')").fetchone()[0] is None
        assert "larger than" in explain_shared(c, "sg_big", queries[0])
        same_on_off(c, "sg_big", queries)
        # nothing fits at all
        c.execute("SET streamhnsw.shared_cache_size = 0")
        assert "not used" in explain_shared(c, "sg_a", queries[0])
        same_on_off(c, "sg_a", queries)
        c.execute("RESET streamhnsw.shared_cache_size")
        # off: no image is used, none is built
        c.execute("SET streamhnsw.shared_cache = off")
        assert "shared cache: off" in explain_shared(c, "sg_a", queries[0])


def test_default_size_follows_shared_buffers(cluster):
    """streamhnsw.shared_cache_size's default (-1) is half of shared_buffers,
    at least 256MB, resolved when set so that SHOW tells the size in force."""
    def sizes(c):
        c.execute("LOAD 'streamhnsw'")
        shown = c.execute("SHOW streamhnsw.shared_cache_size").fetchone()[0]
        boot = c.execute("SELECT boot_val FROM pg_settings "
                         "WHERE name = 'streamhnsw.shared_cache_size'").fetchone()[0]
        c.execute("SET streamhnsw.shared_cache_size = '100MB'")
        explicit = c.execute("SHOW streamhnsw.shared_cache_size").fetchone()[0]
        c.execute("SET streamhnsw.shared_cache_size = -1")
        auto = c.execute("SHOW streamhnsw.shared_cache_size").fetchone()[0]
        c.execute("RESET streamhnsw.shared_cache_size")
        reset = c.execute("SHOW streamhnsw.shared_cache_size").fetchone()[0]
        return shown, boot, explicit, auto, reset

    with cluster.connect() as c:
        assert c.execute("SHOW shared_buffers").fetchone()[0] == "256MB"
        assert sizes(c) == ("256MB", "-1", "100MB", "256MB", "256MB")
    with Cluster(name="shnsw-cache-auto", settings={"shared_buffers": "1GB"}) as big:
        with big.connect() as c:
            assert sizes(c) == ("512MB", "-1", "100MB", "512MB", "512MB")


def test_concurrent_insert_vacuum_search(cluster):
    """With the image on, a search never misses a committed row nor returns a
    deleted one while inserts, deletes and VACUUM run beside it."""
    dim = 16
    rows, _ = data.clustered(3000, dim, seed=61, n_queries=1)
    extra, _ = data.clustered(1500, dim, seed=62, n_queries=1)
    with cluster.connect() as c:
        data.load(c, "sg_conc", rows)
        c.execute("CREATE INDEX sg_conc_idx ON sg_conc USING streamhnsw (embedding vector_l2_ops)")
        clear_cache(c)
        c.execute("SELECT streamhnsw_cache_load('sg_conc_idx')")
        before = cache_row(c, "sg_conc_idx")

    committed = {}          # id -> vector, inserted and committed
    deleted = set()         # ids whose DELETE committed
    lock = threading.Lock()
    stop = threading.Event()
    errors = []

    def inserter():
        try:
            with cluster.connect() as c:
                for i, v in enumerate(extra):
                    if stop.is_set():
                        break
                    c.execute("INSERT INTO sg_conc VALUES (%s, %s)",
                              (10000 + i, data.vector_literal(v)))
                    with lock:
                        committed[10000 + i] = v
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def deleter():
        try:
            with cluster.connect() as c:
                for i in range(0, 3000, 7):
                    if stop.is_set():
                        break
                    c.execute("DELETE FROM sg_conc WHERE id = %s", (i,))
                    with lock:
                        deleted.add(i)
                    if i % 140 == 0:
                        c.execute("VACUUM sg_conc")
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=inserter), threading.Thread(target=deleter)]
    for t in threads:
        t.start()
    checked = 0
    try:
        with cluster.connect() as c:
            c.execute("SET streamhnsw.ef_search = 100")
            deadline = time.time() + 60
            while any(t.is_alive() for t in threads) and time.time() < deadline:
                with lock:
                    ids = list(committed)[-20:]
                    gone = set(deleted)
                    vecs = [committed[i] for i in ids]
                for i, v in zip(ids, vecs):
                    found = [r[0] for r in knn(c, "sg_conc", v)]
                    assert i in found, (i, found)
                    assert not gone & set(found), gone & set(found)
                    checked += 1
                # deleted rows' own vectors never bring them back
                for i in list(gone)[-10:]:
                    found = [r[0] for r in knn(c, "sg_conc", rows[i])]
                    assert i not in found
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert checked > 50
    with cluster.connect() as c:
        after = wait_ready(c, "sg_conc_idx")
        # the copy was kept through the writes, rebuilt only when they outgrew it
        assert after["builds"] - before["builds"] == after["outgrown"] - before["outgrown"], \
            (before, after)
        assert after["invalidations"] == 0, after
        assert after["hits"] > before["hits"]
        queries = rows[:20] + 0.01
        same_on_off(c, "sg_conc", queries)
        c.execute("VACUUM sg_conc")
        same_on_off(c, "sg_conc", queries)


def test_standby_identical_and_refreshed():
    """On a hot standby nothing writes through; the metapage token makes scans
    refresh the image after replayed changes, and results stay identical."""
    rows, queries = data.clustered(3000, 16, seed=71, n_queries=20)
    more, _ = data.clustered(300, 16, seed=72, n_queries=1)
    with Cluster(name="shnsw-sg-primary", listen_tcp=True) as primary:
        primary.execute("CREATE EXTENSION streamhnsw CASCADE")
        with primary.connect() as c:
            data.load(c, "sg_rep", rows)
            c.execute("CREATE INDEX sg_rep_idx ON sg_rep USING streamhnsw (embedding vector_l2_ops)")
        with Standby(primary) as standby:
            standby.catch_up(primary)
            with standby.connect() as s:
                # built in the background on the standby too
                assert explain_shared(s, "sg_rep", queries[0]).startswith(BACKGROUND)
                wait_ready(s, "sg_rep_idx")
                assert "shared cache: used" in explain_shared(s, "sg_rep", queries[0])
                same_on_off(s, "sg_rep", queries)
                with primary.connect() as c:
                    for i, v in enumerate(more):
                        c.execute("INSERT INTO sg_rep VALUES (%s, %s)",
                                  (50000 + i, data.vector_literal(v)))
                    c.execute("DELETE FROM sg_rep WHERE id % 5 = 0")
                    c.execute("VACUUM sg_rep")
                    data.load(c, "sg_rep", more, start_id=60000, create=False)
                standby.catch_up(primary)
                # the first scan hands the refresh to a worker, reading
                # through buffers itself (no pass over the index in a query)
                assert explain_shared(s, "sg_rep", queries[0]).startswith(REFRESHING)
                same_on_off(s, "sg_rep", queries)
                for i, v in enumerate(more[:50]):
                    found = [r[0] for r in knn(s, "sg_rep", v)]
                    assert 50000 + i in found or 60000 + i in found
                deadline = time.time() + 60
                while "shared cache: used" not in explain_shared(s, "sg_rep", queries[1]):
                    assert time.time() < deadline, "the copy was not refreshed"
                    time.sleep(0.05)
                st = cache_row(s, "sg_rep_idx")
                assert st["refreshes"] >= 1 and st["state"] == "ready", st
                assert st["builds"] == 1, st   # refreshed, not rebuilt
                same_on_off(s, "sg_rep", queries)


def test_fallback_when_dsm_fails():
    """Dynamic shared memory that cannot be had (here: mmap segments in a
    directory the server may not write, small segments from
    min_dynamic_shared_memory): scans and streamhnsw_cache_load fall back to
    the buffer path, never an error."""
    import os
    # a 12 MB image; the DSM registry's own small segments (its table, the
    # statistics, this cache's registry) come from min_dynamic_shared_memory
    rows, queries = data.clustered(60000, 32, seed=81, n_queries=10)
    with Cluster(name="shnsw-sg-nodsm",
                 settings={"dynamic_shared_memory_type": "mmap",
                           "min_dynamic_shared_memory": "8MB"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        with c.connect() as conn:
            data.load(conn, "sg_nodsm", rows)
            conn.execute("CREATE INDEX sg_nodsm_idx ON sg_nodsm USING streamhnsw (embedding vector_l2_ops)")
        dyn = os.path.join(c.datadir, "pg_dynshmem")
        mode = os.stat(dyn).st_mode
        os.chmod(dyn, 0o500)
        try:
            with c.connect() as conn:
                # the background worker's build fails; the scans never do, and
                # once the worker has given up they say why
                assert explain_shared(conn, "sg_nodsm", queries[0]).startswith(BACKGROUND)
                same_on_off(conn, "sg_nodsm", queries[:2])
                deadline = time.time() + 60
                while "no dynamic shared memory" not in explain_shared(conn, "sg_nodsm", queries[0]):
                    assert time.time() < deadline
                    time.sleep(0.1)
                assert cache_row(conn, "sg_nodsm_idx")["state"] == "none"
                # built in the scan (streamhnsw.shared_cache_background off): the same
                conn.execute("SET streamhnsw.shared_cache_background = off")
                assert "no dynamic shared memory" in explain_shared(conn, "sg_nodsm", queries[0])
                conn.execute("RESET streamhnsw.shared_cache_background")
                assert conn.execute("SELECT streamhnsw_cache_load('sg_nodsm_idx')").fetchone()[0] is None
                same_on_off(conn, "sg_nodsm", queries)
                # writes with no image go on as before
                conn.execute("INSERT INTO sg_nodsm SELECT id + 1000000, embedding FROM sg_nodsm LIMIT 50")
                same_on_off(conn, "sg_nodsm", queries)
        finally:
            os.chmod(dyn, mode)
        with c.connect() as conn:
            # once memory can be had again (after the retry delay, or on request)
            assert conn.execute("SELECT streamhnsw_cache_load('sg_nodsm_idx')").fetchone()[0] > 0
            assert "shared cache: used" in explain_shared(conn, "sg_nodsm", queries[1])


def test_every_page_write_goes_through_the_wrappers():
    """Write-through relies on every page write of the extension going
    through the page-write API (pagewrite.h): only cache_write.o may call
    GenericXLog itself, and every other object that writes pages calls
    shnsw_write_start instead."""
    import shutil
    import subprocess
    from pathlib import Path
    objs = sorted((Path(__file__).resolve().parents[2] / "src").glob("*.o"))
    if not objs or shutil.which("nm") is None:
        pytest.skip("no built objects or no nm")
    undefined = {o.name: subprocess.run(["nm", "-u", str(o)], capture_output=True,
                                        text=True).stdout for o in objs}
    direct = [name for name, syms in undefined.items()
              if name != "cache_write.o" and "GenericXLog" in syms]
    assert direct == [], direct
    assert "GenericXLogStart" in undefined.get("cache_write.o", "GenericXLogStart")
    writers = {name for name, syms in undefined.items() if "shnsw_write_start" in syms}
    assert {"insert.o", "vacuum.o", "truncate.o", "quantizer.o"} <= writers, writers


def test_preloaded():
    """The same with the library in shared_preload_libraries."""
    rows, queries = data.clustered(2000, 16, seed=91, n_queries=5)
    with Cluster(name="shnsw-sg-preload",
                 settings={"shared_preload_libraries": "'streamhnsw'",
                           "shared_buffers": "768MB"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        with c.connect() as conn:
            # the default size resolved in the postmaster, from shared_buffers
            assert conn.execute("SHOW streamhnsw.shared_cache_size").fetchone()[0] == "384MB"
            data.load(conn, "sg_pre", rows)
            conn.execute("CREATE INDEX sg_pre_idx ON sg_pre USING streamhnsw (embedding vector_l2_ops)")
            assert explain_shared(conn, "sg_pre", queries[0]).startswith(BACKGROUND)
            wait_ready(conn, "sg_pre_idx")
            same_on_off(conn, "sg_pre", queries)
        with c.connect() as conn:
            assert "shared cache: used" in explain_shared(conn, "sg_pre", queries[1])


def test_no_worker_builds_in_scan():
    """No background worker can be started (max_worker_processes = 0): the
    scan that finds no image builds it itself, as with
    streamhnsw.shared_cache_background off; never an error."""
    rows, queries = data.clustered(2000, 16, seed=93, n_queries=5)
    with Cluster(name="shnsw-sg-noworker", settings={"max_worker_processes": "0"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        with c.connect() as conn:
            data.load(conn, "sg_nw", rows)
            conn.execute("CREATE INDEX sg_nw_idx ON sg_nw USING streamhnsw (embedding vector_l2_ops)")
            assert explain_shared(conn, "sg_nw", queries[0]).startswith(
                "streamhnsw shared cache: built by this scan, used")
            same_on_off(conn, "sg_nw", queries)
            assert cache_row(conn, "sg_nw_idx")["builds"] == 1


def test_background_build_scans_meanwhile(cluster):
    """While the image is built in the background, other connections' scans
    search through buffers (never wait, never build a second image) and give
    the same results; one build in all."""
    rows, queries = data.clustered(20000, 64, seed=95, n_queries=20)
    with cluster.connect() as c:
        data.load(c, "sg_bg", rows)
        c.execute("CREATE INDEX sg_bg_idx ON sg_bg USING streamhnsw (embedding vector_l2_ops)")
        clear_cache(c)
        c.execute("SET streamhnsw.shared_cache = off")
        expected = [knn(c, "sg_bg", q) for q in queries]
        c.execute("RESET streamhnsw.shared_cache")
        assert explain_shared(c, "sg_bg", queries[0]).startswith(BACKGROUND)
        seen = set()
        with cluster.connect() as c2:
            for i, q in enumerate(queries):
                line = explain_shared(c2, "sg_bg", q)
                seen.add(line.split(",")[0])
                assert knn(c2, "sg_bg", q) == expected[i]
        assert seen <= {"streamhnsw shared cache: not used (being built)",
                        "streamhnsw shared cache: used"}, seen
        st = wait_ready(c, "sg_bg_idx")
        assert st["builds"] == 1 and st["nodes"] == 20000, st
        with cluster.connect() as c3:
            assert "shared cache: used" in explain_shared(c3, "sg_bg", queries[0])
            assert [knn(c3, "sg_bg", q) for q in queries] == expected


def build_worker(conn, timeout=60):
    """The pid and backend_xmin of the background image build waiting in its
    streamhnsw.debug_cache_build_delay (so in its build, holding its lock)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        rows = conn.execute("SELECT pid, backend_xmin::text FROM pg_stat_activity "
                            "WHERE backend_type = 'streamhnsw shared cache build' "
                            "AND wait_event_type = 'Extension'").fetchall()
        if rows:
            return rows[0]
        time.sleep(0.02)
    raise AssertionError("no background image build seen")


def test_background_build_does_not_hold_back_vacuum(cluster):
    """A background build of the image holds no snapshot (a VACUUM meanwhile
    removes every dead row) and gives the index's lock up when VACUUM's
    truncation waits for it (the free pages at the end are cut), instead of
    making that VACUUM keep rows and skip its cut. The worker is kept in its
    build for 30 s (streamhnsw.debug_cache_build_delay)."""
    rows, queries = data.clustered(3000, 16, seed=97, n_queries=3)
    with cluster.connect() as c:
        indexed_table(c, "sg_vac", rows)
        c.execute("SET streamhnsw.debug_cache_build_delay = '30s'")
        assert explain_shared(c, "sg_vac", queries[0]).startswith(BACKGROUND)
        pid, xmin = build_worker(c)
        assert xmin is None, f"the image build holds back the xmin horizon at {xmin}"
        assert c.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND granted "
                         "AND relation = 'sg_vac_idx'::regclass", (pid,)).fetchone()[0] == 1
        c.execute("DELETE FROM sg_vac")
        t0 = time.time()
        c.execute("VACUUM sg_vac")
        took = time.time() - t0
        # every row removed, every node freed and the free pages cut
        meta = c.execute("SELECT node_count, deleted_count, free_count "
                         "FROM streamhnsw_metapage('sg_vac_idx')").fetchone()
        assert meta == (0, 0, 0), meta
        assert c.execute("SELECT n_dead_tup FROM pg_stat_user_tables "
                         "WHERE relname = 'sg_vac'").fetchone()[0] == 0
        assert took < 20, took  # the worker gave up; VACUUM did not wait out its 30 s
        deadline = time.time() + 30
        while c.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                        (pid,)).fetchone()[0]:
            assert time.time() < deadline, "the build did not give up"
            time.sleep(0.05)
        # no failure noted: the next scan asks for a build again, which succeeds
        c.execute("RESET streamhnsw.debug_cache_build_delay")
        data.load(c, "sg_vac", rows[:500], create=False)
        assert explain_shared(c, "sg_vac", queries[1]).startswith(BACKGROUND)
        wait_ready(c, "sg_vac_idx")
        same_on_off(c, "sg_vac", queries)


@pytest.mark.parametrize("command", ["DROP DATABASE {db}",
                                     "CREATE DATABASE {db}_copy TEMPLATE {db}"])
def test_background_build_gives_way_to_database_commands(cluster, command):
    """A background build is a connection to the index's database: a DROP
    DATABASE, or a CREATE DATABASE copying it as a template, waits only 5 s
    for the database's sessions to leave, and signals autovacuum workers
    alone. The build gives way (its worker leaves at once) instead of making
    the command fail with "being accessed by other users". The worker is
    kept in its build for 60 s (streamhnsw.debug_cache_build_delay)."""
    db = "sg_dropdb"
    rows, queries = data.clustered(2000, 16, seed=98, n_queries=1)
    cluster.execute(f"DROP DATABASE IF EXISTS {db}_copy")
    cluster.execute(f"DROP DATABASE IF EXISTS {db}")
    cluster.execute(f"CREATE DATABASE {db}")
    try:
        with cluster.connect(db) as c:
            c.execute("CREATE EXTENSION streamhnsw CASCADE")
            indexed_table(c, "sg_db", rows)
            c.execute("SET streamhnsw.debug_cache_build_delay = '60s'")
            assert explain_shared(c, "sg_db", queries[0]).startswith(BACKGROUND)
            pid, _ = build_worker(c)
        with cluster.connect() as c:
            t0 = time.time()
            c.execute(command.format(db=db))
            assert time.time() - t0 < 20
            assert c.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                             (pid,)).fetchone()[0] == 0
    finally:
        cluster.execute(f"DROP DATABASE IF EXISTS {db}_copy")
        cluster.execute(f"DROP DATABASE IF EXISTS {db}")


def test_search_pool_after_errors(cluster):
    """Scans reuse one backend's search arrays from one scan to the next
    (search.c's search pool). A scan that ends in an error never gives them
    back: later scans, in a subtransaction of the same transaction (which
    allocate their own) and in later transactions (the pool is freed at the
    end of the failed one), still return exactly what a sequential scan does."""
    rows, queries = data.clustered(3000, 16, seed=99, n_queries=4)
    with cluster.connect() as c:
        indexed_table(c, "sg_pool", rows)
        c.execute("SET streamhnsw.ef_search = 400")

        def exact(q):
            c.execute("SET enable_indexscan = off")
            r = [x[0] for x in c.execute(
                "SELECT id FROM sg_pool ORDER BY embedding <-> %s LIMIT 10",
                (data.vector_literal(q),)).fetchall()]
            c.execute("RESET enable_indexscan")
            return r

        def failing(q):
            # fails after the scan has returned rows: the search is mid-way
            with pytest.raises(Exception, match="division by zero"):
                c.execute("SELECT id, 1 / (row_number() OVER () - 5) FROM "
                          "(SELECT id FROM sg_pool ORDER BY embedding <-> %s LIMIT 50) s",
                          (data.vector_literal(q),)).fetchall()

        truth = [exact(q) for q in queries]
        knn(c, "sg_pool", queries[0])

        def pool_bytes():
            r = c.execute("SELECT sum(total_bytes) FROM pg_backend_memory_contexts "
                          "WHERE name = 'streamhnsw search pool'").fetchone()[0]
            return r or 0

        kept = pool_bytes()
        assert kept > 0  # the scan's arrays were kept for the next one
        for _ in range(20):
            for q in queries:
                failing(q)
        assert pool_bytes() <= kept  # freed after each failed transaction, not leaked
        c.execute("BEGIN")
        c.execute("SAVEPOINT a")
        failing(queries[0])
        c.execute("ROLLBACK TO SAVEPOINT a")
        assert [[r[0] for r in knn(c, "sg_pool", q)] for q in queries] == truth
        c.execute("COMMIT")
        assert [[r[0] for r in knn(c, "sg_pool", q)] for q in queries] == truth
        same_on_off(c, "sg_pool", queries)


def test_insert_found_by_next_search_from_image(cluster):
    """Every row an INSERT commits is found by the very next search in another
    backend, and that search reads the image (written through by the insert,
    not thrown away or refreshed)."""
    rows, _ = data.clustered(4000, 32, seed=101, n_queries=1)
    more, _ = data.clustered(150, 32, seed=102, n_queries=1)
    with cluster.connect() as a, cluster.connect() as b:
        indexed_table(a, "sg_next", rows)
        a.execute("SELECT streamhnsw_cache_load('sg_next_idx')")
        before = cache_row(a, "sg_next_idx")
        for i, v in enumerate(more):
            a.execute("INSERT INTO sg_next VALUES (%s, %s)", (50000 + i, data.vector_literal(v)))
            assert "shared cache: used" in explain_shared(b, "sg_next", v)
            assert 50000 + i in [r[0] for r in knn(b, "sg_next", v)], i
        after = cache_row(a, "sg_next_idx")
        assert after["builds"] == before["builds"] and after["refreshes"] == before["refreshes"], after


def finds_own_rows(conn, table, rows, ids):
    """Each row is found by a search for its own vector (ef 200: not a
    question of recall) through the shared cache."""
    conn.execute("SET streamhnsw.ef_search = 200")
    for i, v in zip(ids, rows):
        assert i in [r[0] for r in knn(conn, table, v)], (table, i)
    assert "shared cache: used" in explain_shared(conn, table, rows[0])
    conn.execute("RESET streamhnsw.ef_search")


def test_one_backend_never_reaches_an_old_image(cluster):
    """One backend keeps its mapping of an index's image and its cached
    description (rd_amcache) across scans. Between two of its scans another
    backend drops the image, inserts, REINDEXes, TRUNCATEs, drops and
    recreates the index, retrains the quantizer: each next scan returns the
    right rows and never searches an old image."""
    rows, queries = data.clustered(3000, 16, seed=71, n_queries=10)
    with cluster.connect() as c1, cluster.connect() as c2:
        c1.execute("SET enable_seqscan = off")    # the table shrinks below
        indexed_table(c2, "sg_memo", rows[:1500])
        c2.execute("SELECT streamhnsw_cache_load('sg_memo_idx')")
        for _ in range(2):
            assert "shared cache: used" in explain_shared(c1, "sg_memo", queries[0])
        same_on_off(c1, "sg_memo", queries)

        # dropped by another backend: the remembered image must not be used
        assert c2.execute("SELECT streamhnsw_cache_drop('sg_memo_idx')").fetchone()[0]
        assert explain_shared(c1, "sg_memo", queries[0]).startswith(BACKGROUND)
        wait_ready(c1, "sg_memo_idx")
        same_on_off(c1, "sg_memo", queries)

        # inserts change the metapage: the image follows, the rows are found
        for i, v in enumerate(rows[1500:1600]):
            c2.execute("INSERT INTO sg_memo VALUES (%s, %s)", (1500 + i, data.vector_literal(v)))
        finds_own_rows(c1, "sg_memo", rows[1500:1600], range(1500, 1600))
        same_on_off(c1, "sg_memo", queries)

        # REINDEX: a new relfilenode has no image yet
        c2.execute("REINDEX INDEX sg_memo_idx")
        assert explain_shared(c1, "sg_memo", queries[0]).startswith(BACKGROUND)
        same_on_off(c1, "sg_memo", queries)
        wait_ready(c1, "sg_memo_idx")
        same_on_off(c1, "sg_memo", queries)

        # TRUNCATE and other rows: only they can come back
        c2.execute("TRUNCATE sg_memo")
        data.load(c2, "sg_memo", rows[2000:2600], start_id=2000, create=False)
        got = [r[0] for q in queries for r in knn(c1, "sg_memo", q)]
        assert got and all(2000 <= i < 2600 for i in got), got
        same_on_off(c1, "sg_memo", queries)

        # DROP and CREATE again: a new OID
        c2.execute("DROP INDEX sg_memo_idx")
        c2.execute("CREATE INDEX sg_memo_idx ON sg_memo USING streamhnsw (embedding vector_l2_ops)")
        c2.execute("SELECT streamhnsw_cache_load('sg_memo_idx')")
        finds_own_rows(c1, "sg_memo", rows[2000:2100], range(2000, 2100))
        same_on_off(c1, "sg_memo", queries)

        # retraining: an empty index filled by inserts retrains as it doubles
        c2.execute("TRUNCATE sg_memo")
        data.load(c2, "sg_memo", rows[:40], create=False)
        c2.execute("SELECT streamhnsw_cache_load('sg_memo_idx')")
        finds_own_rows(c1, "sg_memo", rows[:40], range(40))
        data.load(c2, "sg_memo", rows[40:1000], start_id=40, create=False)
        finds_own_rows(c1, "sg_memo", rows[:1000:10], range(0, 1000, 10))
        same_on_off(c1, "sg_memo", queries)

        c2.execute("DROP TABLE sg_memo")


def cached_tables(conn, tables, rows):
    """Each table loaded with rows, indexed, and its index's copy loaded."""
    for t in tables:
        data.load(conn, t, rows)
        conn.execute(f"CREATE INDEX {t}_idx ON {t} USING streamhnsw (embedding vector_l2_ops)")
        assert conn.execute(f"SELECT streamhnsw_cache_load('{t}_idx')").fetchone()[0] > 0


def test_restart_without_preloading_comes_back_warm():
    """Without preloading, the list of copies is rewritten whenever one is
    built, and the first scan after a restart that asks for a background
    build starts the warmer: the other index's copy comes back ready
    before any scan of it, its last use the one before the restart. The
    warmer reads the last life's list: a copy built in this life before the
    first request neither overwrites it (sg_l2 came back only by chance
    before) nor makes a fresh server start a warmer (which held an xmin
    while it ran: an isolation spec's VACUUM once removed nothing)."""
    rows, queries = data.clustered(2000, 16, seed=96, n_queries=3)
    with Cluster(name="shnsw-sg-warm-lazy") as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        with c.connect() as conn:
            cached_tables(conn, ("sg_l1", "sg_l2"), rows)
            data.load(conn, "sg_l3", rows)
            conn.execute("CREATE INDEX sg_l3_idx ON sg_l3 USING streamhnsw (embedding vector_l2_ops)")
            # the first life's first request: no last list, no warmer
            assert explain_shared(conn, "sg_l3", queries[0]).startswith(BACKGROUND)
            wait_ready(conn, "sg_l3_idx")
            before = conn.execute("SELECT last_used FROM streamhnsw_cache_list() "
                                  "WHERE index = 'sg_l2_idx'::regclass").fetchone()[0]
            conn.execute("SELECT streamhnsw_cache_drop('sg_l3_idx')")
        assert "rebuilt the shared cache's copies" not in c.log_tail(20000)
        c.restart()
        with c.connect() as conn:
            assert conn.execute("SELECT count(*) FROM streamhnsw_cache_list()").fetchone()[0] == 0
            # a copy built in the scan, before any request: the list is rewritten
            conn.execute("SET streamhnsw.shared_cache_background = off")
            assert "built by this scan" in explain_shared(conn, "sg_l3", queries[0])
            conn.execute("RESET streamhnsw.shared_cache_background")
            assert explain_shared(conn, "sg_l1", queries[0]).startswith(BACKGROUND)
            st = wait_ready(conn, "sg_l2_idx")
            assert st["hits"] == 0 and st["misses"] == 0, st
            used = conn.execute("SELECT last_used FROM streamhnsw_cache_list() "
                                "WHERE index = 'sg_l2_idx'::regclass").fetchone()[0]
            assert used == before, (used, before)
            assert "shared cache: used" in explain_shared(conn, "sg_l2", queries[1])
            same_on_off(conn, "sg_l2", queries)
        log = c.log_tail(20000)
        assert "rebuilt the shared cache's copies" in log
        assert "streamhnsw_cache.list" not in log, log   # no write failed
        assert not os.path.exists(os.path.join(c.datadir, "streamhnsw_cache.list.last"))


def test_preloaded_restart_comes_back_warm():
    """With the library preloaded, the copies that existed at shutdown are
    rebuilt after the restart by the warmer, in the background, before any
    scan asks: cache_list shows them ready with no hit, their last use the
    one before the restart (so eviction keeps its order), and the first
    scan uses them."""
    rows, queries = data.clustered(2000, 16, seed=95, n_queries=3)
    with Cluster(name="shnsw-sg-warm",
                 settings={"shared_preload_libraries": "'streamhnsw'"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        with c.connect() as conn:
            cached_tables(conn, ("sg_w1", "sg_w2"), rows)
            for t in ("sg_w1", "sg_w2"):
                assert "shared cache: used" in explain_shared(conn, t, queries[0])
            before = {r[0]: r[1] for r in conn.execute(
                "SELECT index::regclass::text, last_used FROM streamhnsw_cache_list() "
                "WHERE state = 'ready'")}
            assert set(before) == {"sg_w1_idx", "sg_w2_idx"}
        c.restart()
        assert os.path.exists(os.path.join(c.datadir, "streamhnsw_cache.list"))
        with c.connect() as conn:
            for t in ("sg_w1", "sg_w2"):
                st = wait_ready(conn, f"{t}_idx")
                assert st["hits"] == 0 and st["misses"] == 0, st
                used = conn.execute("SELECT last_used FROM streamhnsw_cache_list() "
                                    "WHERE index = %s::regclass", (f"{t}_idx",)).fetchone()[0]
                assert used == before[f"{t}_idx"], (used, before)
            assert "shared cache: used" in explain_shared(conn, "sg_w2", queries[1])
            same_on_off(conn, "sg_w1", queries)
        assert "rebuilt the shared cache's copies" in c.log_tail(20000)
