"""The I/O pipeline: io modes agree, EXPLAIN shows what a scan did, cumulative
statistics add up, and many concurrent cold scans respect the pin limit."""

import multiprocessing as mp
import os

import numpy as np
import pytest

from shnsw import data
from shnsw.cluster import Cluster

MODES = ["sync", "stream"]


def evict(conn, cluster, rels):
    """Make relations cold: out of shared buffers and the OS page cache."""
    conn.execute("SELECT pg_buffercache_evict_relation(r) FROM unnest(%s::regclass[]) r", (rels,))
    for rel in rels:
        path = conn.execute("SELECT pg_relation_filepath(%s::regclass)", (rel,)).fetchone()[0]
        full = cluster.datadir / path
        fd = os.open(full, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@pytest.fixture(scope="module")
def io_cluster():
    with Cluster(name="shnsw-io", settings={"io_method": "worker", "io_workers": 4,
                                            "effective_io_concurrency": 16,
                                            "shared_buffers": "128MB",
                                            # the buffer path's I/O is under test
                                            "streamhnsw.shared_cache": "off"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        c.execute("CREATE EXTENSION pg_buffercache")
        rows, queries = data.clustered(20000, 64, seed=21, n_queries=30)
        with c.connect() as conn:
            data.load(conn, "io_t", rows)
            conn.execute("CREATE INDEX io_t_idx ON io_t USING streamhnsw (embedding vector_l2_ops)")
            conn.execute("CHECKPOINT")
        c.queries = queries
        yield c


def run(conn, q, limit=10, where=""):
    lit = data.vector_literal(q)
    return conn.execute(f"SELECT id, embedding <-> %s::vector FROM io_t {where} "
                        f"ORDER BY embedding <-> %s::vector LIMIT {limit}", (lit, lit)).fetchall()


@pytest.mark.parametrize("cold", [False, True])
@pytest.mark.parametrize("heap_prefetch", [0, 10])
def test_every_io_mode_returns_the_same_rows(io_cluster, cold, heap_prefetch):
    """Same rows in every io_mode, with the heap read ahead of the executor
    and without (the table is evicted too when cold)."""
    with io_cluster.connect() as conn:
        conn.execute("SET enable_seqscan = off")
        conn.execute(f"SET streamhnsw.heap_prefetch = {heap_prefetch}")
        for q in io_cluster.queries[:10]:
            results = {}
            for mode in MODES:
                conn.execute(f"SET streamhnsw.io_mode = {mode}")
                if cold:
                    evict(conn, io_cluster, ["io_t_idx", "io_t"])
                results[mode] = run(conn, q, limit=50, where="WHERE id %% 3 <> 0")
                # a LIMIT smaller than the first window, and one row
                results[mode + "5"] = run(conn, q, limit=5)
                results[mode + "1"] = run(conn, q, limit=1)
            assert results["sync"] == results["stream"]
            assert results["sync5"] == results["stream5"]
            assert results["sync1"] == results["stream1"]
            assert len(results["sync"]) == 50 and len(results["sync5"]) == 5


def test_heap_blocks_are_read_ahead(io_cluster):
    """A cold LIMIT 10 in stream mode starts the reads of its rows' heap
    blocks together (EXPLAIN's heap line); heap_prefetch = 0 does not."""
    with io_cluster.connect() as conn:
        conn.execute("SET streamhnsw.io_mode = stream")
        conn.execute("SET streamhnsw.heap_prefetch = 10")
        evict(conn, io_cluster, ["io_t_idx", "io_t"])
        lines = explain_lines(conn, io_cluster.queries[3])
        heap = [l for l in lines if l.startswith("streamhnsw heap:")]
        assert len(heap) == 1, lines
        h = parse(heap[0])
        assert 1 <= int(h["ahead"]) <= 10 and int(h["reads"]) >= 1
        conn.execute("SET streamhnsw.heap_prefetch = 0")
        evict(conn, io_cluster, ["io_t_idx", "io_t"])
        lines = explain_lines(conn, io_cluster.queries[3])
        assert not any(l.startswith("streamhnsw heap:") for l in lines)


def test_heap_read_ahead_probes_while_the_heap_is_hot(io_cluster):
    """After a run of heap read-aheads that all found their block cached, a
    backend reads ahead only the first row's block; the first probe that
    needs a read (the heap evicted) brings full read-ahead back at once."""
    with io_cluster.connect() as conn:
        conn.execute("SET streamhnsw.io_mode = stream")
        conn.execute("SET streamhnsw.heap_prefetch = 10")
        # the heap into shared buffers (a new backend's run of hits starts at 0)
        conn.execute("SELECT count(*) FROM io_t").fetchall()
        heap = []
        for q in io_cluster.queries[:10]:
            lines = explain_lines(conn, q)
            heap.append(parse(next(l for l in lines if l.startswith("streamhnsw heap:"))))
        # the first queries read ahead every row's block (hits); the last probe
        assert int(heap[0]["ahead"]) >= 5 and int(heap[0]["reads"]) == 0, heap
        assert int(heap[-1]["ahead"]) == 1 and int(heap[-1]["reads"]) == 0, heap
        evict(conn, io_cluster, ["io_t"])
        lines = explain_lines(conn, io_cluster.queries[11])
        h = parse(next(l for l in lines if l.startswith("streamhnsw heap:")))
        assert int(h["ahead"]) >= 5 and int(h["reads"]) >= 1, h


@pytest.fixture(scope="module")
def scattered(io_cluster):
    """Scattered neighbours: uniform random 128-d rows, whose neighbours lie
    on many pages (about 10 of a node's page reads per hop)."""
    rng = np.random.default_rng(5)
    rows = rng.random((6000, 128), dtype=np.float32)
    queries = rng.random((8, 128), dtype=np.float32)
    with io_cluster.connect() as conn:
        data.load(conn, "scat_t", rows)
        conn.execute("CREATE INDEX scat_t_idx ON scat_t USING streamhnsw (embedding vector_l2_ops)")
        conn.execute("CHECKPOINT")
    return queries


SCAT_SQL = "SELECT id FROM scat_t ORDER BY embedding <-> %s::vector LIMIT 10"
SCAT_STATS = ("SELECT pages_read, synchronous_reads, known_synchronous_reads, reads_ahead, "
              "speculative_reads, speculative_used, speculative_wasted, speculative_evicted "
              "FROM streamhnsw_stats()")


def scattered_cold(conn, cluster, q, eic):
    """One cold stream-mode query on scat_t at this effective_io_concurrency:
    its rows (checked against io_mode sync) and its reader's figures."""
    lit = data.vector_literal(q)
    conn.execute(f"SET effective_io_concurrency = {eic}")
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET streamhnsw.io_mode = sync")
    expect = conn.execute(SCAT_SQL, (lit,)).fetchall()
    conn.execute("SET streamhnsw.io_mode = stream")
    evict(conn, cluster, ["scat_t_idx", "scat_t"])
    conn.execute("SELECT streamhnsw_stats_reset()")
    assert conn.execute(SCAT_SQL, (lit,)).fetchall() == expect
    return dict(zip(("read", "sync", "known", "ahead", "spec_reads", "spec_used", "spec_wasted",
                     "spec_evicted"),
                    conn.execute(SCAT_STATS).fetchone()))


def test_cold_scan_reads_known_pages_ahead(io_cluster, scattered):
    """Cold, at the default effective_io_concurrency 16: every page whose
    need is known ahead (a hop's neighbours, the re-ranked vectors) is read
    ahead, none synchronously; only pages no request named (the descent's
    first pages) may be. The rows are those of io_mode sync."""
    with io_cluster.connect() as conn:
        total_read = total_sync = 0
        for q in scattered:
            st = scattered_cold(conn, io_cluster, q, 16)
            assert st["known"] == 0, st
            # read ahead: known pages started ahead, and guesses then used
            assert st["read"] > 50 and st["ahead"] + st["spec_used"] > st["read"] / 2, st
            total_read += st["read"]
            total_sync += st["sync"]
        # the descent's unrequested pages only: a few per scan
        assert total_sync <= 0.05 * total_read, (total_sync, total_read)


@pytest.mark.parametrize("eic", [4, 16, 64])
def test_every_cold_query_reads_at_most_5_percent_synchronously(io_cluster, scattered, eic):
    """At effective_io_concurrency 4 and more, no cold query (not just the
    sum) reads more than 5 % of its pages synchronously, and every guess is
    accounted for: each speculative read was used or wasted, once."""
    with io_cluster.connect() as conn:
        for q in scattered:
            st = scattered_cold(conn, io_cluster, q, eic)
            assert st["known"] == 0, st
            assert st["sync"] <= 0.05 * st["read"], st
            assert st["spec_used"] + st["spec_wasted"] == st["spec_reads"], st


@pytest.mark.parametrize("eic", [16, 64])
def test_round_trips_by_phase_add_up(io_cluster, scattered, eic):
    """EXPLAIN's serial round trips and page reads, by phase of the scan
    (descent, layer-0 search, re-rank, other), add up to the totals; a cold
    scan's descent reads at least the entry point's page, its search and
    re-rank read pages too. io_mode stream returns the same rows as
    io_mode sync."""
    sql = "EXPLAIN (ANALYZE, FORMAT JSON) " + SCAT_SQL
    with io_cluster.connect() as conn:
        conn.execute(f"SET effective_io_concurrency = {eic}")
        conn.execute("SET enable_seqscan = off")
        for q in scattered[:4]:
            lit = data.vector_literal(q)
            conn.execute("SET streamhnsw.io_mode = sync")
            expect = conn.execute(SCAT_SQL, (lit,)).fetchall()
            conn.execute("SET streamhnsw.io_mode = stream")
            evict(conn, io_cluster, ["scat_t_idx", "scat_t"])
            assert conn.execute(SCAT_SQL, (lit,)).fetchall() == expect
            evict(conn, io_cluster, ["scat_t_idx", "scat_t"])
            node = conn.execute(sql, (lit,)).fetchone()[0][0]["Plan"]["Plans"][0]
            phases = ("Descent", "Search", "Re-rank", "Other")
            serial = {p: node[f"streamhnsw Serial {p}"] for p in phases}
            reads = {p: node[f"streamhnsw Reads {p}"] for p in phases}
            assert sum(serial.values()) == node["streamhnsw Serial Round Trips"], node
            assert sum(reads.values()) == node["streamhnsw Pages Read"], node
            assert reads["Descent"] >= 1 and serial["Descent"] >= 1, node
            assert reads["Search"] > 0 and reads["Re-rank"] > 0, node
            # guesses, runs of the descent included: EXPLAIN prints before
            # the scan ends, so some may still be in flight or unused
            # (streamhnsw_stats(), after the end, balances them: above)
            assert (node["streamhnsw Speculative Used"] + node["streamhnsw Speculative Wasted"]
                    <= node["streamhnsw Speculative Reads"]), node


def explain_lines(conn, q):
    lit = data.vector_literal(q)
    rows = conn.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "
                        "SELECT id FROM io_t ORDER BY embedding <-> %s::vector LIMIT 10",
                        (lit,)).fetchall()
    return [r[0].strip() for r in rows]


def parse(line):
    """'name: k=v k=v' -> {k: v} for the key=value pairs of an EXPLAIN line."""
    out = {}
    for tok in line.replace("(", " ").replace(")", " ").split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out


def test_explain_shows_the_scan(io_cluster):
    with io_cluster.connect() as conn:
        conn.execute("SET streamhnsw.io_mode = stream")
        evict(conn, io_cluster, ["io_t_idx"])
        lines = explain_lines(conn, io_cluster.queries[0])
        main = [l for l in lines if l.startswith("streamhnsw:")]
        order = [l for l in lines if l.startswith("streamhnsw order:")]
        io = [l for l in lines if l.startswith("streamhnsw I/O:")]
        la = [l for l in lines if l.startswith("streamhnsw look-ahead:")]
        assert len(main) == len(order) == len(io) == len(la) == 1, lines
        # PostgreSQL 18's count of index searches: one graph search, as
        # pgvector's hnsw reports
        assert "Index Searches: 1" in lines, lines
        m = parse(main[0])
        assert int(m["rounds"]) >= 1 and int(m["expanded"]) > 0
        assert int(m["distances"]) > int(m["expanded"])
        # the first round re-ranks its 16 nearest candidates at once and
        # the rest of its ef_search (none deleted) only as far as the
        # LIMIT's rows need them (scan_defer), plus the parked ones strict
        # order re-ranked to prove the LIMIT's rows come first
        assert int(m["rounds"]) == 1
        assert 16 <= int(m["re-ranked"]) <= 40 + int(parse(order[0])["re-ranked"])
        i = parse(io[0])
        assert i["mode"] == "stream"
        assert int(i["read"]) > 0                 # cold: pages were read
        assert int(i["ahead"]) + int(i["speculative"]) > 0
        # serial round trips: at least the synchronous reads, at most every
        # wait and synchronous read
        assert int(i["synchronous"]) <= int(i["serial"]) <= int(i["trips"]), i
        assert int(i["serial"]) > 0
        assert "histogram=[" in la[0]
        # hot: everything hits
        lines = explain_lines(conn, io_cluster.queries[0])
        i = parse([l for l in lines if l.startswith("streamhnsw I/O:")][0])
        assert int(i["read"]) == 0 and int(i["hit"]) > 0
        assert int(i["serial"]) == int(i["trips"]) == 0
        # sync mode issues nothing ahead
        conn.execute("SET streamhnsw.io_mode = sync")
        evict(conn, io_cluster, ["io_t_idx"])
        lines = explain_lines(conn, io_cluster.queries[1])
        i = parse([l for l in lines if l.startswith("streamhnsw I/O:")][0])
        assert i["mode"] == "sync" and int(i["ahead"]) == 0 and int(i["speculative"]) == 0
        assert int(i["read"]) == int(i["synchronous"]) > 0
        # one round trip per read, nothing overlaps
        assert int(i["serial"]) == int(i["trips"]) == int(i["read"])
        # JSON carries the same figures as properties
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM io_t "
                            "ORDER BY embedding <-> %s::vector LIMIT 10",
                            (data.vector_literal(io_cluster.queries[2]),)).fetchone()[0][0]
        node = plan["Plan"]["Plans"][0]
        assert node["streamhnsw I/O Mode"] == "sync"
        assert 16 <= node["streamhnsw Re-ranked"] <= 40 + node["streamhnsw Parked Re-ranked"]
        # no lines without ANALYZE
        lit = data.vector_literal(io_cluster.queries[0])
        plain = conn.execute("EXPLAIN SELECT id FROM io_t ORDER BY embedding <-> %s::vector LIMIT 10",
                             (lit,)).fetchall()
        assert not any("streamhnsw" in r[0] for r in plain)


def test_known_reads_evict_speculative_ones(io_cluster):
    """A full in-flight table drops speculative pages to make room for known
    ones, waiting for their reads: outside AIO batch mode (reader.c asserts
    it in assertion builds). EXPLAIN counts those drops (evicted=), each also
    a wasted guess; with 4 pins and a wide search, the cold scans evict, and
    their rows are those of a scan without read-ahead."""
    limit_pins = 4
    with io_cluster.connect() as conn:
        conn.execute("SET streamhnsw.io_mode = stream")
        conn.execute(f"SET streamhnsw.max_read_ahead = {limit_pins}")
        conn.execute("SET streamhnsw.ef_search = 200")
        evicted = []
        for q in io_cluster.queries[:6]:
            evict(conn, io_cluster, ["io_t_idx"])
            lines = explain_lines(conn, q)
            i = parse([l for l in lines if l.startswith("streamhnsw I/O:")][0])
            assert int(i["read"]) > 0
            assert int(i["evicted"]) <= int(i["wasted"]), i
            evicted.append(int(i["evicted"]))
        assert all(e > 0 for e in evicted), evicted
        # and the rows are those of a scan without read-ahead
        conn.execute("SET streamhnsw.io_mode = sync")
        expect = run(conn, io_cluster.queries[0], limit=20)
        conn.execute("SET streamhnsw.io_mode = stream")
        evict(conn, io_cluster, ["io_t_idx"])
        assert run(conn, io_cluster.queries[0], limit=20) == expect
        # without the pin limit nothing needs evicting
        conn.execute("RESET streamhnsw.max_read_ahead")
        conn.execute("RESET streamhnsw.ef_search")
        evict(conn, io_cluster, ["io_t_idx"])
        lines = explain_lines(conn, io_cluster.queries[0])
        i = parse([l for l in lines if l.startswith("streamhnsw I/O:")][0])
        assert int(i["evicted"]) == 0, i


def test_cumulative_stats(io_cluster):
    with io_cluster.connect() as conn:
        conn.execute("SELECT streamhnsw_stats_reset()")
        assert conn.execute("SELECT scans, reranked FROM streamhnsw_stats()").fetchone() == (0, 0)
        # one round each: relaxed order re-ranks no parked rows past it
        conn.execute("SET streamhnsw.iterative_scan = relaxed_order")
        for q in io_cluster.queries[:5]:
            run(conn, q)
    with io_cluster.connect() as conn:
        scans, reranked, hist = conn.execute(
            "SELECT scans, reranked, lookahead_histogram FROM streamhnsw_stats()").fetchone()
        assert scans == 5 and reranked == 5 * 40
        assert len(hist) == 8


def _cold_worker(args):
    conninfo, queries, rels, datadir = args
    import psycopg
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SET streamhnsw.io_mode = stream")
        conn.execute("SET effective_io_concurrency = 64")
        conn.execute("SET streamhnsw.max_read_ahead = 1024")
        n = 0
        for q in queries:
            lit = data.vector_literal(q)
            rows = conn.execute("SELECT id FROM io_t ORDER BY embedding <-> %s::vector LIMIT 10",
                                (lit,)).fetchall()
            n += len(rows)
        return n


def test_many_concurrent_cold_scans_respect_pins():
    """shared_buffers tiny, 40 backends each asking for deep read-ahead."""
    with Cluster(name="shnsw-pins", settings={"io_method": "worker", "io_workers": 4,
                                              "shared_buffers": "2MB", "max_connections": 60,
                                              "effective_io_concurrency": 64}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        rows, queries = data.clustered(8000, 64, seed=3, n_queries=80)
        with c.connect() as conn:
            data.load(conn, "io_t", rows)
            conn.execute("CREATE INDEX io_t_idx ON io_t USING streamhnsw (embedding vector_l2_ops)")
        args = [(c.conninfo, queries[i::40][:2], None, None) for i in range(40)]
        ctx = mp.get_context("spawn")
        with ctx.Pool(40) as pool:
            counts = pool.map(_cold_worker, args)
        assert sum(counts) == 10 * sum(len(a[1]) for a in args)
        log = c.log_tail(200000)
        assert "no unpinned buffers" not in log
        assert "ERROR" not in log
