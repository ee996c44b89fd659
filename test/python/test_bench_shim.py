"""The latency shim really delays reads, and cold mode really reads from storage."""

import time

import numpy as np
import pytest

from shnsw import data as shdata
from shnsw.bench import pg
from shnsw.bench.shim import Shim, diff
from shnsw.cluster import Cluster


@pytest.fixture(scope="module")
def env():
    shim = Shim.create()
    c = Cluster(name="shnsw-bench-test", settings={
        "shared_buffers": "128MB", "io_method": "worker", "io_workers": 4,
        "autovacuum": "off", "maintenance_work_mem": "256MB"})
    c.server_env.update(shim.server_env(c.datadir / "base"))
    try:
        c.init()
        c.start()
        rows, queries = shdata.clustered(4000, 32, seed=5, n_queries=10)
        eng = pg.Engine("pgvector hnsw", "hnsw", "t", "t_idx", "hnsw.ef_search")
        with c.connect() as conn:
            pg.setup_extensions(conn, log=lambda *a, **k: None)
            pg.load_table(conn, "t", rows, "vector")
            conn.execute("CREATE INDEX t_idx ON t USING hnsw (embedding vector_l2_ops)")
            conn.execute("CHECKPOINT")
        yield c, shim, eng, pg.literals(queries)
    finally:
        c.destroy()
        shim.close()


def cold_query(c, conn, shim, eng, lit, delay_us):
    ev = pg.Evictor(conn, c.datadir, eng)
    sql = pg.query_sql(eng, "vector", "l2", 10)
    ev(conn)
    shim.set(enabled=True, delay_us=delay_us)
    before = shim.counters()
    t = time.perf_counter()
    conn.execute(sql, (lit,)).fetchall()
    el = time.perf_counter() - t
    d = diff(shim.counters(), before)
    ev(conn)
    bufs = pg.explain_buffers(conn, sql, lit)
    shim.set(enabled=False, delay_us=0)
    return el, d["reads"], bufs


def test_cold_mode_reads_from_storage(env):
    c, shim, eng, lits = env
    with c.connect() as conn:
        el, reads, bufs = cold_query(c, conn, shim, eng, lits[0], 0)
        assert bufs["read"] > 10
        assert reads > 10            # real read calls on the relation files
        pg.prewarm(conn, eng)
        hot = pg.explain_buffers(conn, pg.query_sql(eng, "vector", "l2", 10), lits[0])
        assert hot["read"] == 0 and hot["hit"] > 0


def test_latency_shim_delays_each_read(env):
    c, shim, eng, lits = env
    delay = 2000
    with c.connect() as conn:
        base, slow = [], []
        for lit in lits[1:4]:
            base.append(cold_query(c, conn, shim, eng, lit, 0))
            slow.append(cold_query(c, conn, shim, eng, lit, delay))
    for (t0, r0, b0), (t1, r1, b1) in zip(base, slow):
        assert r1 == pytest.approx(r0, rel=0.1)
        # The reads counted are the buffers read (a few may be combined).
        assert r1 <= b1["read"] * 1.1 + 2
    # pgvector reads one page at a time: every read adds its delay.  Summed
    # over the queries, so that one noisy query on a shared machine does not
    # decide; the sleep itself overshoots by some tens of microseconds.
    added = sum(s[0] for s in slow) - sum(b[0] for b in base)
    expected = sum(s[1] for s in slow) * delay / 1e6
    assert 0.9 * expected < added < 1.6 * expected, (added, expected)


def test_shim_counts_storage_busy_time(env):
    """The shim's busy counters: pgvector reads one page at a time, so each
    delayed read is a busy period of its own, and the busy time is at least
    the delays of all reads and at most the query's wall time."""
    c, shim, eng, lits = env
    delay = 1000
    with c.connect() as conn:
        ev = pg.Evictor(conn, c.datadir, eng)
        sql = pg.query_sql(eng, "vector", "l2", 10)
        ev(conn)
        shim.set(enabled=True, delay_us=delay)
        before = shim.counters()
        t = time.perf_counter()
        conn.execute(sql, (lits[5],)).fetchall()
        el = time.perf_counter() - t
        d = diff(shim.counters(), before)
        shim.set(enabled=False, delay_us=0)
    assert d["reads"] > 10, d
    assert d["bursts"] >= 0.9 * d["reads"], d
    assert d["bursts"] <= d["reads"], d
    assert 0.9 * d["reads"] * delay * 1000 <= d["busy_ns"] <= el * 1e9, (d, el)
