"""Writes and durability (issue 4): concurrent writers and readers, crash and
recovery, physical replication, cache generation, recall after deletes, and
the index life cycle commands.

All randomness is seeded. Invariants are those of harness.durability: no
error; streamhnsw_verify() empty; the heap holds exactly the committed rows;
every row has an index entry (a full index scan returns it) and is found by
an exact-match search; deleted, rolled-back and lost rows are never
returned; returned distances are the rows' true distances, in order.

Exact-match searches run at the default ef_search; a row they miss is
searched again at streamhnsw.ef_search = 1000 (EF_CHECK, the widest search
the index offers), so that these tests are about what the index holds and
can reach after concurrency and crashes, not about recall at default
settings.

The randomized tests (concurrent workload, crash cycles) fail on any
violation that is not a symptom of a known limitation, and report xfail
when only such symptoms occurred (harness.durability.KNOWN_BUGS: a search
running while other sessions insert can miss a row until the next VACUUM).
What they check after VACUUM and after recovery is strict.
"""

import random
import threading
import time

import numpy as np
import psycopg
import pytest

from shnsw import data
from shnsw.cluster import Cluster
from harness.durability import (OPS, CrashCycles, Model, Workload, copy_rows,
                              check_index, crash, exact_match_missing, index_ids,
                              known_bug, meta, verify)
from harness.horizon import wait_for_quiet_horizon
from harness.replica import Standby

EF_CHECK = 1000


def make_table(conn, table, model, n, index=True, opclass="vector_l2_ops", unlogged=False):
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE {'UNLOGGED ' if unlogged else ''}TABLE {table} "
                 f"(id bigint PRIMARY KEY, embedding vector({model.dim}))")
    if n:
        ids = model.alloc(n)
        g = model.begin_insert(ids)
        copy_rows(conn, table, np.stack([model.vec(i) for i in ids]), ids[0])
        model.end_insert(g, True)
    if index:
        conn.execute(f"CREATE INDEX {table}_idx ON {table} USING streamhnsw (embedding {opclass})")


@pytest.fixture(scope="module")
def crash_cluster():
    """A cluster of this module's own, crashed again and again."""
    with Cluster(name="shnsw-crash") as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        yield c


# --- concurrency -------------------------------------------------------------

@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_concurrent_inserts_searches_deletes_and_vacuum(cluster, metric):
    """Two inserters (single-row, multi-row INSERT and COPY, some rolled back),
    two searchers, a deleter and a VACUUM loop for 10 s; every search and the
    final state checked."""
    model = Model(dim=16, seed=41)
    table = f"cw_{metric}"
    with cluster.connect() as conn:
        make_table(conn, table, model, 3000, opclass=OPS[metric][1])
    w = Workload(cluster, table, f"{table}_idx", metric, model, seed=41, inserters=2,
                 searchers=2, deleters=1, vacuum_every=1.5, ef_search=EF_CHECK, max_rows=5000)
    w.run_for(10, at_least={"vacuum": 3, "checked": 301})
    assert not any(t.is_alive() for t in w.threads)
    # every kind of work happened, and searches checked committed rows
    assert w.counts["insert"] > 100 and w.counts["delete"] > 50, w.counts
    assert w.counts["vacuum"] >= 3 and w.counts["checked"] > 300, w.counts
    assert len(model.aborted) > 0 and len(model.deleted) > 0
    with cluster.connect() as conn:
        conn.execute(f"VACUUM {table}")
        violations = model.violations + check_index(
            conn, table, f"{table}_idx", metric, model, random.Random(1), probes=200,
            ef_search=EF_CHECK)
        m = meta(conn, f"{table}_idx")
        # every rolled-back and deleted row's node is marked by the last VACUUM
        assert m["node_count"] - m["deleted_count"] == len(model.committed)
        conn.execute(f"DROP TABLE {table}")
    only_known_bugs(violations)


def only_known_bugs(violations):
    """Fail on any violation; when all of them are symptoms of the known
    limitations, report xfail naming them."""
    print("\n".join(violations))
    unknown = [v for v in violations if known_bug(v) is None]
    assert unknown == []
    known = sorted({known_bug(v) for v in violations})
    if known:
        pytest.xfail("known limitations: " + "; ".join(known))


# --- crash and recovery --------------------------------------------------------

def test_crash_cycles(crash_cluster):
    """24 seeded crash-and-recover cycles, 8 each of CREATE INDEX (plain or
    CONCURRENTLY, l2 or cosine), inserts (with searches, deletes, VACUUM) and
    VACUUM (crashed inside its index pass); kill -9 of the postmaster, kill -9
    of every server process, or an immediate shutdown."""
    cc = CrashCycles(crash_cluster, seed=2024, dim=16, initial=2000, max_rows=5000,
                     ef_search=EF_CHECK)
    cc.setup()
    violations = []
    for _ in range(24):
        violations += cc.run_cycle()
    assert cc.stats == {"build": 8, "insert": 8, "vacuum": 8}
    only_known_bugs(violations)


def index_file(conn, index):
    return conn.execute("SELECT current_setting('data_directory') || '/' || "
                        "pg_relation_filepath(%s)", (index,)).fetchone()[0]


def test_zero_page_from_interrupted_extension_is_harmless(crash_cluster):
    """A crash between ExtendBufferedRel() and the WAL record that initializes
    the new page leaves an all-zero page (PostgreSQL does not WAL-log the
    extension itself). Reproduced exactly: append a zero block while the
    server is down. Seen in the crash cycles after kill -9 during inserts."""
    c = crash_cluster
    model = Model(dim=16, seed=5)
    with c.connect() as conn:
        make_table(conn, "zp", model, 1000)
        path = index_file(conn, "zp_idx")
    c.stop()
    with open(path, "ab") as f:
        f.write(b"\0" * 8192)
    c.start()
    with c.connect() as conn:
        problems = verify(conn, "zp_idx")
        errors = []
        for sql in ["DELETE FROM zp WHERE id < 10", "VACUUM zp",
                    "INSERT INTO zp SELECT id + 5000, embedding FROM zp WHERE id < 300"]:
            try:
                conn.execute(sql)
            except psycopg.Error as e:
                errors.append(f"{sql}: {e}")
        problems += verify(conn, "zp_idx")
        scanned = None
        try:
            scanned = len(index_ids(conn, "zp", "zp_idx", "l2"))
        except psycopg.Error as e:
            errors.append(f"full index scan: {e}")
        assert errors == []
        assert problems == []
        assert scanned == 1000 - 10 + 290


def test_interrupted_vacuum_keeps_counts_consistent(cluster):
    """A VACUUM cancelled (or crashed) in the middle of the index pass: the
    pages already marked stay marked (generic WAL is not transactional) but
    the metapage's deleted_count is never updated, so verify reports a
    mismatch that later VACUUMs do not repair."""
    model = Model(dim=16, seed=6)
    with cluster.connect() as conn:
        make_table(conn, "iv", model, 4000)
        conn.execute("ALTER TABLE iv DROP CONSTRAINT iv_pkey")  # only our index to vacuum
        conn.execute("DELETE FROM iv WHERE id % 3 = 0")
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        err = {}

        def cancel_inside_index_pass():
            with cluster.connect() as mon:
                while True:
                    r = mon.execute("SELECT phase FROM pg_stat_progress_vacuum "
                                    "WHERE pid = %s", (pid,)).fetchall()
                    if r and r[0][0] == "vacuuming indexes":
                        time.sleep(0.1)
                        mon.execute("SELECT pg_cancel_backend(%s)", (pid,))
                        return
                    time.sleep(0.002)
        t = threading.Thread(target=cancel_inside_index_pass)
        t.start()
        conn.execute("SET vacuum_cost_delay = '1ms'")
        conn.execute("SET vacuum_cost_limit = 2")
        try:
            conn.execute("VACUUM iv")
        except psycopg.errors.QueryCanceled as e:
            err["e"] = e
        t.join()
        assert "e" in err, "VACUUM finished before it could be cancelled"
        conn.execute("RESET vacuum_cost_delay")
        assert verify(conn, "iv_idx") == []
        conn.execute("VACUUM iv")
        assert verify(conn, "iv_idx") == []
        assert meta(conn, "iv_idx")["deleted_count"] == 4000 // 3 + 1


def _during_vacuum_index_pass(cluster, table, fn, cost_limit=4):
    """Run VACUUM slowed down (cost delay) and call fn(conn) 0.1 s into its
    index pass; return fn's result and how long the index pass lasted (up to
    0.6 s: the VACUUM is cancelled then)."""
    out = {}
    with cluster.connect() as vc, cluster.connect() as mon, cluster.connect() as conn:
        pid = vc.execute("SELECT pg_backend_pid()").fetchone()[0]
        vc.execute("SET vacuum_cost_delay = '1ms'")
        vc.execute(f"SET vacuum_cost_limit = {cost_limit}")
        def vacuum():
            try:
                vc.execute(f"VACUUM {table}")
            except psycopg.errors.QueryCanceled:
                pass

        t = threading.Thread(target=vacuum)
        t.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and t.is_alive():
            r = mon.execute("SELECT phase FROM pg_stat_progress_vacuum WHERE pid = %s",
                            (pid,)).fetchall()
            if r and r[0][0] == "vacuuming indexes":
                break
            time.sleep(0.002)
        start = time.monotonic()
        time.sleep(0.1)
        out["result"] = fn(conn)
        # the pass must have lasted past the call (0.6 s will do): then the
        # VACUUM, which would crawl on for a minute, is cancelled
        while time.monotonic() < start + 0.6 and t.is_alive():
            r = mon.execute("SELECT phase FROM pg_stat_progress_vacuum WHERE pid = %s",
                            (pid,)).fetchall()
            if not r or r[0][0] != "vacuuming indexes":
                break
            time.sleep(0.002)
        out["pass"] = time.monotonic() - start
        mon.execute("SELECT pg_cancel_backend(%s)", (pid,))
        t.join()
    return out["result"], out["pass"]


def _timed(sql, params=()):
    def run(conn):
        t = time.monotonic()
        conn.execute(sql, params)
        return time.monotonic() - t
    return run


def test_vacuum_does_not_stall_searches(cluster):
    model = Model(dim=16, seed=19)
    with cluster.connect() as conn:
        make_table(conn, "vst", model, 10000)
        conn.execute("ALTER TABLE vst SET (autovacuum_enabled = off)")
        conn.execute("DELETE FROM vst WHERE id % 20 = 3")
    q = data.vector_literal(model.vec(7))
    latency, index_pass = _during_vacuum_index_pass(
        cluster, "vst", _timed("SELECT id FROM vst ORDER BY embedding <-> %s LIMIT 10", (q,)))
    assert index_pass > 0.5, "VACUUM's index pass was too short to test anything"
    assert latency < 0.2, (latency, index_pass)


def test_vacuum_does_not_stall_inserts(cluster):
    model = Model(dim=16, seed=21)
    with cluster.connect() as conn:
        make_table(conn, "vsi", model, 10000)
        conn.execute("ALTER TABLE vsi SET (autovacuum_enabled = off)")
        conn.execute("DELETE FROM vsi WHERE id % 20 = 3")
    v = data.vector_literal(model.vec(20000))
    latency, index_pass = _during_vacuum_index_pass(
        cluster, "vsi", _timed("INSERT INTO vsi VALUES (20000, %s)", (v,)))
    assert index_pass > 0.5, "VACUUM's index pass was too short to test anything"
    assert latency < 0.2, (latency, index_pass)


def test_inserts_hold_the_insert_lock_together(cluster):
    """Two sessions inserting many rows: at some moment both hold the index's
    insert lock (a page lock on block 0) at once, granted. With inserts
    serialized on it, as they were, at most one is ever granted."""
    model = Model(dim=32, seed=31)
    with cluster.connect() as conn:
        make_table(conn, "cil", model, 5000)
        oid = conn.execute("SELECT 'cil_idx'::regclass::oid").fetchone()[0]
    errors = []

    def insert(first):
        try:
            with cluster.connect() as c:
                for s in range(first, first + 6000, 500):
                    c.execute("INSERT INTO cil SELECT * FROM unnest(%s::bigint[], %s::vector[])",
                              (list(range(s, s + 500)),
                               [data.vector_literal(model.vec(j)) for j in range(s, s + 500)]))
        except Exception as e:  # reported below
            errors.append(e)
    threads = [threading.Thread(target=insert, args=(f,)) for f in (10000, 20000)]
    for t in threads:
        t.start()
    most = 0
    with cluster.connect() as mon:
        while any(t.is_alive() for t in threads) and most < 2:
            most = max(most, mon.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'page' AND relation = %s "
                "AND page = 0 AND granted", (oid,)).fetchone()[0])
    for t in threads:
        t.join()
    assert errors == []
    assert most == 2
    with cluster.connect() as conn:
        assert verify(conn, "cil_idx") == []
        # A back-link that prunes a full list can leave a node with few
        # in-links, from far away: a search may miss it until VACUUM links
        # it (README, Known limitations). After VACUUM every row is found.
        print("not found before VACUUM:",
              len(exact_match_missing(conn, "cil", "cil_idx", "l2", ef_search=EF_CHECK)))
        conn.execute("VACUUM cil")
        assert verify(conn, "cil_idx") == []
        assert exact_match_missing(conn, "cil", "cil_idx", "l2", ef_search=EF_CHECK) == []
        conn.execute("DROP TABLE cil")


def test_vacuum_frees_space_that_inserts_reuse(conn):
    """Deleting 40 % of the rows and vacuuming frees their slots; inserting
    as many new rows again takes them, so the index barely grows, and every
    row, old and new, is found by an exact-match search."""
    model = Model(dim=16, seed=37)
    make_table(conn, "fr", model, 5000)
    conn.execute("ALTER TABLE fr SET (autovacuum_enabled = off)")
    before = meta(conn, "fr_idx")
    conn.execute("DELETE FROM fr WHERE id % 5 IN (1, 3)")
    conn.execute("VACUUM fr")
    m = meta(conn, "fr_idx")
    assert m["deleted_count"] == m["free_count"] == 2000
    assert verify(conn, "fr_idx") == []
    for s in range(5000, 7000, 100):
        conn.execute("INSERT INTO fr SELECT * FROM unnest(%s::bigint[], %s::vector[])",
                     (list(range(s, s + 100)),
                      [data.vector_literal(model.vec(j)) for j in range(s, s + 100)]))
    after = meta(conn, "fr_idx")
    assert verify(conn, "fr_idx") == []
    # level-0 nodes (all but about 1 in m) take free slots
    assert after["free_count"] < 400, after
    assert after["node_count"] - before["node_count"] < 400, (before, after)
    assert after["total_blocks"] <= before["total_blocks"] * 1.1, (before, after)
    assert exact_match_missing(conn, "fr", "fr_idx", "l2", ef_search=EF_CHECK) == []
    conn.execute("DROP TABLE fr")


def test_inserted_vectors_fill_pages_as_a_build_does(crash_cluster):
    """Rows inserted one at a time into an index created on the empty table,
    by two sessions at once, store their exact vectors as a build does: one
    byte stream over runs of vector pages, a vector continued on the next page
    when it does not fit whole, so the index is within 4 % (and a run's
    unfilled pages) of one built on the same rows (before, each inserted
    vector had to fit whole on one page: at 768 dimensions two a page, a
    quarter of it empty, 1.25x the built size). The index
    verifies, every row is found by an exact-match search (so every vector
    that spans two pages reads back whole), also after a restart, which
    replays the WAL of the pages the inserts wrote, and inserts after it."""
    cluster = crash_cluster
    dim, n = 768, 1200
    rows = np.random.default_rng(41).standard_normal((n + 200, dim)).astype(np.float32)
    with cluster.connect() as conn:
        for t in ("vr_ins", "vr_built"):
            conn.execute(f"DROP TABLE IF EXISTS {t}")
            conn.execute(f"CREATE TABLE {t} (id bigint PRIMARY KEY, embedding vector({dim}))")
        conn.execute("CREATE INDEX vr_ins_idx ON vr_ins USING streamhnsw (embedding)")
    errors = []

    def insert(first):
        try:
            with cluster.connect() as c, c.pipeline():
                for i in range(first, n, 2):
                    c.execute("INSERT INTO vr_ins VALUES (%s, %s)",
                              (i, data.vector_literal(rows[i])))
        except Exception as e:  # reported below
            errors.append(e)
    threads = [threading.Thread(target=insert, args=(f,)) for f in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with cluster.connect() as conn:
        copy_rows(conn, "vr_built", rows[:n], 0)
        conn.execute("CREATE INDEX vr_built_idx ON vr_built USING streamhnsw (embedding)")
        size = {t: conn.execute(f"SELECT pg_relation_size('{t}_idx') / 8192").fetchone()[0]
                for t in ("vr_ins", "vr_built")}
        print("pages:", size)
        # the reserved run's pages not yet filled (at most 32) and a partial
        # vector's room at the end of each run
        assert size["vr_ins"] <= size["vr_built"] * 1.04 + 32, size
        assert verify(conn, "vr_ins_idx") == []
        assert exact_match_missing(conn, "vr_ins", "vr_ins_idx", "l2", ef_search=EF_CHECK) == []
    cluster.stop("immediate")
    cluster.start()
    with cluster.connect() as conn:
        assert verify(conn, "vr_ins_idx") == []
        assert exact_match_missing(conn, "vr_ins", "vr_ins_idx", "l2", ef_search=EF_CHECK) == []
        # inserts go on after recovery, into the run the metapage names
        for i in range(n, n + 200):
            conn.execute("INSERT INTO vr_ins VALUES (%s, %s)", (i, data.vector_literal(rows[i])))
        assert verify(conn, "vr_ins_idx") == []
        assert exact_match_missing(conn, "vr_ins", "vr_ins_idx", "l2", ef_search=EF_CHECK) == []
        conn.execute("DROP TABLE vr_ins, vr_built")


# --- replication ---------------------------------------------------------------

def compare(primary_conn, standby_conn, queries, op="<->", k=10):
    sql = f"SELECT id, embedding {op} %s::vector FROM rep ORDER BY embedding {op} %s::vector LIMIT {k}"
    for q in queries:
        lit = data.vector_literal(q)
        a = primary_conn.execute(sql, (lit, lit)).fetchall()
        b = standby_conn.execute(sql, (lit, lit)).fetchall()
        assert a == b, (q, a, b)
        assert len(a) == k


@pytest.mark.parametrize("mem", ["default", "1MB"])
def test_standby_returns_what_the_primary_returns(mem):
    """pg_basebackup + streaming replication over 127.0.0.1: after the build,
    inserts, and deletes + VACUUM, the standby answers every query with the
    same ids and distances, its metapage matches, and verify passes there.
    At maintenance_work_mem 1MB the build (two workers) inserts most rows
    after writing the graph, without WAL, and logs every page at its end."""
    rows, queries = data.clustered(6000, 32, seed=17, n_queries=40)
    with Cluster(name="shnsw-primary", listen_tcp=True) as p:
        p.execute("CREATE EXTENSION streamhnsw CASCADE")
        with p.connect() as pc:
            data.load(pc, "rep", rows[:4000])
            pc.execute("ALTER TABLE rep SET (parallel_workers = 2)")
        with Standby(p) as s, p.connect() as pc, s.connect() as sc:
            notices = []
            pc.add_notice_handler(lambda d: notices.append(d.message_primary))
            if mem != "default":
                pc.execute(f"SET maintenance_work_mem = '{mem}'")
            pc.execute("CREATE INDEX rep_idx ON rep USING streamhnsw (embedding)")
            pc.execute("RESET maintenance_work_mem")
            assert any("inserted" in n for n in notices) == (mem != "default"), notices
            plan = sc.execute("EXPLAIN (COSTS OFF) SELECT id FROM rep ORDER BY embedding "
                              "<-> %s::vector LIMIT 10", (data.vector_literal(queries[0]),))
            phases = []

            def check(phase):
                s.catch_up()
                assert any("Index Scan using rep_idx" in r[0] for r in
                           sc.execute("EXPLAIN (COSTS OFF) SELECT id FROM rep ORDER BY "
                                      "embedding <-> %s::vector LIMIT 10",
                                      (data.vector_literal(queries[0]),)).fetchall())
                compare(pc, sc, queries)
                assert verify(sc, "rep_idx") == [], phase
                assert meta(sc, "rep_idx") == meta(pc, "rep_idx"), phase
                phases.append(phase)
            del plan
            check("build")
            for i in range(4000, 5000):
                pc.execute("INSERT INTO rep VALUES (%s, %s)", (i, data.vector_literal(rows[i])))
            with pc.transaction():
                copy_rows(pc, "rep", rows[5000:6000], 5000)
            check("inserts")
            pc.execute("DELETE FROM rep WHERE id % 3 = 1")
            pc.execute("VACUUM rep")
            check("deletes and VACUUM")
            assert meta(sc, "rep_idx")["deleted_count"] == 2000
            assert phases == ["build", "inserts", "deletes and VACUUM"]


# --- cache generation ------------------------------------------------------------

def test_cache_generation_tracks_changes(conn):
    model = Model(dim=8, seed=9)
    make_table(conn, "cg", model, 500)
    q = data.vector_literal(model.vec(3))
    g0 = meta(conn, "cg_idx")["cache_generation"]
    for _ in range(5):
        conn.execute("SELECT id FROM cg ORDER BY embedding <-> %s LIMIT 5", (q,)).fetchall()
    assert meta(conn, "cg_idx")["cache_generation"] == g0, "a search changed the generation"
    conn.execute("INSERT INTO cg VALUES (100000, %s)", (data.vector_literal(model.vec(600)),))
    g1 = meta(conn, "cg_idx")["cache_generation"]
    assert g1 > g0
    conn.execute("DELETE FROM cg WHERE id < 50")
    wait_for_quiet_horizon(conn)
    conn.execute("VACUUM cg")
    g2 = meta(conn, "cg_idx")["cache_generation"]
    assert g2 > g1
    conn.execute("SELECT id FROM cg ORDER BY embedding <-> %s LIMIT 5", (q,)).fetchall()
    assert meta(conn, "cg_idx")["cache_generation"] == g2


# --- recall after inserts and after delete + VACUUM ---------------------------------

def test_recall_after_inserts_and_after_deleting_half(conn):
    rows, queries = data.clustered(10000, 32, seed=23, n_queries=100)
    data.load(conn, "rd", rows[:6000])
    conn.execute("CREATE INDEX rd_idx ON rd USING streamhnsw (embedding)")
    for i in range(6000, 10000, 4):
        conn.execute("INSERT INTO rd VALUES (%s, %s), (%s, %s), (%s, %s), (%s, %s)",
                     [x for j in range(i, i + 4) for x in (j, data.vector_literal(rows[j]))])

    def recall(live):
        truth = data.ground_truth(rows[live], queries, 10)
        found = []
        for q in queries:
            lit = data.vector_literal(q)
            found.append([r[0] for r in conn.execute(
                "SELECT id FROM rd ORDER BY embedding <-> %s::vector LIMIT 10", (lit,))])
        return data.recall(found, live[truth], 10)
    assert recall(np.arange(10000)) >= 0.95
    live = np.sort(np.random.default_rng(23).permutation(10000)[:5000])
    conn.execute("DELETE FROM rd WHERE NOT (id = ANY(%s))", (live.tolist(),))
    conn.execute("VACUUM rd")
    assert meta(conn, "rd_idx")["deleted_count"] == 5000
    assert verify(conn, "rd_idx") == []
    assert recall(live) >= 0.95


# --- reachability: the question behind EF_CHECK ----------------------------------------

def insert_in_batches(conn, table, model, n, batch=10):
    for i in range(0, n, batch):
        with conn.transaction():
            conn.execute(f"INSERT INTO {table} SELECT * FROM unnest(%s::bigint[], %s::vector[])",
                         (list(range(i, i + batch)),
                          [data.vector_literal(model.vec(j)) for j in range(i, i + batch)]))


def test_exact_match_finds_every_row(conn):
    """A fresh build (m 8, few links per node) and an index built by inserts:
    a search for each row's own vector finds it, at the widest ef_search."""
    model = Model(dim=16, seed=3)
    make_table(conn, "em", model, 5000, index=False)
    conn.execute("CREATE INDEX em_idx ON em USING streamhnsw (embedding) WITH (m = 8)")
    assert verify(conn, "em_idx") == []
    assert exact_match_missing(conn, "em", "em_idx", "l2", ef_search=EF_CHECK) == []
    make_table(conn, "em2", model, 0)
    insert_in_batches(conn, "em2", model, 5000)
    assert verify(conn, "em2_idx") == []
    assert exact_match_missing(conn, "em2", "em2_idx", "l2", ef_search=EF_CHECK) == []
    conn.execute("DROP TABLE em, em2")


def test_exact_match_at_default_ef_search_misses_no_more_than_pgvector(conn):
    """At the default ef_search an approximate index may miss a row's own
    vector (pgvector's hnsw does, on this data: 1 to 5 rows of 5,000 over
    three seeds); an index built by the same single-row inserts misses no
    more than pgvector's."""
    for seed in (3, 4):
        model = Model(dim=16, seed=seed)
        missed = {}
        for am, ops in (("streamhnsw", "vector_l2_ops"), ("hnsw", "vector_l2_ops")):
            make_table(conn, "emd", model, 0, index=False)
            conn.execute(f"CREATE INDEX emd_idx ON emd USING {am} (embedding {ops})")
            insert_in_batches(conn, "emd", model, 5000)
            with conn.transaction():
                conn.execute("SET LOCAL enable_seqscan = off")
                missed[am] = conn.execute(
                    "SELECT count(*) FROM emd t WHERE NOT EXISTS (SELECT FROM (SELECT t2.id "
                    "FROM emd t2 ORDER BY t2.embedding <-> t.embedding LIMIT 1) s "
                    "WHERE s.id = t.id)").fetchone()[0]
        conn.execute("DROP TABLE emd")
        assert missed["streamhnsw"] <= missed["hnsw"], (seed, missed)


def test_vacuum_after_heavy_churn_leaves_every_row_findable(cluster):
    """Inserts (some rolled back) and deletes with no VACUUM, until about
    three nodes in five are dead, then one VACUUM: every committed row is
    found by a search for its own vector. Before VACUUM searched for every
    node (pass 4b), whole small clusters whose links from the rest of the
    graph went with deleted nodes were missed here (6 runs of 8)."""
    model = Model(dim=16, seed=50)
    with cluster.connect() as conn:
        make_table(conn, "hc", model, 3000)
    w = Workload(cluster, "hc", "hc_idx", "l2", model, seed=50, inserters=2, searchers=0,
                 deleters=1, vacuum_every=0, max_rows=5000)
    w.run_for(10)
    assert not any(t.is_alive() for t in w.threads)
    with cluster.connect() as conn:
        conn.execute("VACUUM hc")
        m = meta(conn, "hc_idx")
        assert m["free_count"] > m["node_count"] // 3, m
        assert verify(conn, "hc_idx") == []
        assert exact_match_missing(conn, "hc", "hc_idx", "l2", ef_search=EF_CHECK) == []
        conn.execute("DROP TABLE hc")
    assert model.violations == []


def test_inserts_from_two_sessions_across_a_retrain(cluster):
    """The same rows inserted in the same order, by one session or by two
    sessions taking turns, across the retrain at twice the build size: the
    two-session index must be as searchable as the one-session one (the
    margin of 5 rows covers different heap TIDs, hence node levels)."""
    model = Model(dim=16, seed=2024)
    missed = {}
    for k in (1, 2):
        conns = [cluster.connect() for _ in range(k)]
        try:
            table = f"rt{k}"
            make_table(conns[0], table, Model(dim=16, seed=2024), 2000,
                       opclass="vector_cosine_ops")
            for n, s in enumerate(range(2000, 6000, 10)):
                conns[n % k].execute(
                    f"INSERT INTO {table} SELECT * FROM unnest(%s::bigint[], %s::vector[])",
                    (list(range(s, s + 10)),
                     [data.vector_literal(model.vec(j)) for j in range(s, s + 10)]))
            assert verify(conns[0], f"{table}_idx") == []
            missed[k] = len(exact_match_missing(conns[0], table, f"{table}_idx", "cosine"))
            conns[0].execute(f"DROP TABLE {table}")
        finally:
            for conn in conns:
                conn.close()
    assert missed[2] <= missed[1] + 5, missed


# --- life cycle commands ------------------------------------------------------------------

def test_reindex_truncate_drop_leave_working_indexes(conn):
    model = Model(dim=16, seed=13)
    make_table(conn, "lc", model, 3000, opclass="vector_cosine_ops")
    rng = random.Random(13)

    def sound(index="lc_idx"):
        assert check_index(conn, "lc", index, "cosine", model, rng, probes=20,
                           ef_search=EF_CHECK) == []

    sound()
    conn.execute("REINDEX INDEX lc_idx")
    sound()
    conn.execute("REINDEX INDEX CONCURRENTLY lc_idx")
    sound()
    conn.execute("REINDEX TABLE CONCURRENTLY lc")
    sound()
    assert conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = "
                        "'lc_idx'::regclass").fetchone()[0]
    # TRUNCATE: an empty index that learns from new rows
    conn.execute("TRUNCATE lc")
    m = meta(conn, "lc_idx")
    assert (m["node_count"], m["deleted_count"]) == (0, 0)
    model.deleted.update(model.committed)
    model.committed = type(model.committed)()
    ids = model.alloc(800)
    with conn.transaction():
        copy_rows(conn, "lc", np.stack([model.vec(i) for i in ids]), ids[0])
    model.committed.update(ids)
    sound()
    # CREATE INDEX CONCURRENTLY of a second index, then DROP INDEX (and CONCURRENTLY)
    conn.execute("CREATE INDEX CONCURRENTLY lc_idx2 ON lc USING streamhnsw "
                 "(embedding vector_cosine_ops)")
    sound("lc_idx2")
    conn.execute("DROP INDEX lc_idx2")
    conn.execute("DROP INDEX CONCURRENTLY lc_idx")
    q = data.vector_literal(model.vec(ids[5]))
    plan = conn.execute("EXPLAIN (COSTS OFF) SELECT id FROM lc ORDER BY embedding <=> %s "
                        "LIMIT 3", (q,)).fetchall()
    assert not any("lc_idx" in r[0] for r in plan)
    assert conn.execute("SELECT id FROM lc ORDER BY embedding <=> %s LIMIT 1",
                        (q,)).fetchone()[0] == ids[5]
    conn.execute("CREATE INDEX lc_idx ON lc USING streamhnsw (embedding vector_cosine_ops)")
    sound()
    conn.execute("DROP TABLE lc")
    assert conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'lc_idx%'"
                        ).fetchone()[0] == 0


def test_unlogged_index_survives_restart_and_comes_back_empty_after_crash(crash_cluster):
    c = crash_cluster
    model = Model(dim=16, seed=15)
    with c.connect() as conn:
        make_table(conn, "ul", model, 0, unlogged=True)   # empty-built: init fork
        ids = model.alloc(1500)
        for i in range(0, 1500, 50):
            conn.execute("INSERT INTO ul SELECT * FROM unnest(%s::bigint[], %s::vector[])",
                         (ids[i:i + 50], [data.vector_literal(model.vec(j))
                                          for j in ids[i:i + 50]]))
        model.committed.update(ids)
        assert check_index(conn, "ul", "ul_idx", "l2", model, random.Random(1),
                           ef_search=EF_CHECK) == []
        # an unlogged index built on rows, too
        conn.execute("CREATE INDEX ul_idx2 ON ul USING streamhnsw (embedding vector_cosine_ops)")
    c.restart()
    with c.connect() as conn:
        assert check_index(conn, "ul", "ul_idx", "l2", model, random.Random(2),
                           ef_search=EF_CHECK) == []
    crash(c, "kill9all")
    c.start()
    with c.connect() as conn:
        assert conn.execute("SELECT count(*) FROM ul").fetchone()[0] == 0
        for idx in ("ul_idx", "ul_idx2"):
            assert verify(conn, idx) == []
            m = meta(conn, idx)
            assert (m["node_count"], m["deleted_count"]) == (0, 0), (idx, m)
        model.deleted.update(model.committed)
        model.committed = type(model.committed)()
        ids = model.alloc(600)
        conn.execute("INSERT INTO ul SELECT * FROM unnest(%s::bigint[], %s::vector[])",
                     (ids, [data.vector_literal(model.vec(j)) for j in ids]))
        model.committed.update(ids)
        assert check_index(conn, "ul", "ul_idx", "l2", model, random.Random(3),
                           ef_search=EF_CHECK) == []
        assert verify(conn, "ul_idx2") == []
        assert index_ids(conn, "ul", "ul_idx2", "cosine") == set(ids)
        conn.execute("DROP TABLE ul")
