"""CREATE INDEX time, memory and recall at several maintenance_work_mem sizes.

Loads seeded clustered data once, then for each maintenance_work_mem builds
a streamhnsw index and a pgvector hnsw index (serial builds:
max_parallel_maintenance_workers = 0; m 16, ef_construction 64 for both),
each in a fresh backend, while a thread samples the backend's private memory
(RssAnon in /proc/<pid>/status, every millisecond). Prints one row per
build: time, whether the graph spilled (rows built in memory), peak RssAnon
growth, VmHWM growth (includes the shared buffers the backend touched) and
recall@10 at ef_search 40 over the held-out queries.

    .venv/bin/python -m shnsw.bench.build_memory \
        --rows 50000 --dim 128 --mwm 1MB,8MB,64MB,1GB

With --defaults SETS (e.g. 1000000x128,200000x768) it instead measures
CREATE INDEX at a user's default settings: the benchmark server's settings
(shnsw.bench.pg.DEFAULT_SETTINGS: shared_buffers 2GB, io_method worker, ...)
with maintenance_work_mem 64MB and max_parallel_maintenance_workers 2
(PostgreSQL's defaults; it plans the workers as for any user), m 16,
ef_construction 64, cosine, on seeded clustered data generated in float32
chunks (never a float64 copy of the whole set). Both engines build on the
same table, one after the other, while a thread samples the leader and its
parallel workers every 0.5 s: peak private memory (sum of RssAnon) and the
largest shared-memory footprint of one process (RssShmem: DSM graph plus
the shared buffers it touched). Prints wall time, peak memory, index size,
workers seen, the spill NOTICE and recall@10 at ef_search 40 over 1,000
held-out queries, and writes JSON lines to --out.

    nice -n 10 .venv/bin/python -m shnsw.bench.build_memory \
        --defaults 1000000x128,200000x768 --out /tmp/builds.jsonl

Needs to read the server's /proc entries (the same machine, as root or as
the server's user).
"""

from __future__ import annotations

import argparse
import json
import re
import time

import numpy as np

from .. import data
from . import pg
from .pg import MemorySampler, status_kb
from ..cluster import Cluster


def one_build(c, am, mwm, queries, truth, workers="0"):
    spill = re.compile(r"after (\d+) (rows|tuples)")
    notices = []
    with c.connect() as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        if workers != "default":
            conn.execute(f"SET max_parallel_maintenance_workers = {int(workers)}")
        conn.execute(f"SET maintenance_work_mem = '{mwm}'")
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        st0 = status_kb(pid)
        with MemorySampler(pid, every=0.001) as mem:
            t = time.time()
            conn.execute(f"CREATE INDEX bm_idx ON bm USING {am} (embedding vector_l2_ops)")
            secs = time.time() - t
        hwm1 = status_kb(pid)["VmHWM"]
        conn.execute("SET streamhnsw.ef_search = 40")
        conn.execute("SET hnsw.ef_search = 40")
        sql = "SELECT id FROM bm ORDER BY embedding <-> %s::vector LIMIT 10"
        ids = [[r[0] for r in conn.execute(sql, (data.vector_literal(q),)).fetchall()]
               for q in queries]
        rec = data.recall(ids, truth, 10)
        if am == "streamhnsw":
            bad = conn.execute("SELECT count(*) FROM streamhnsw_verify('bm_idx')").fetchone()[0]
            assert bad == 0, bad
        conn.execute("DROP INDEX bm_idx")
    m = [spill.search(n) for n in notices if "no longer fits" in n]
    inmem = m[0].group(1) if m and m[0] else "all"
    if any("building on SQ8 codes" in n for n in notices):
        inmem += " (codes)"
    return secs, inmem, mem.peak_private // 1024 - st0["RssAnon"], hwm1 - st0["VmHWM"], rec


def clustered_f32(n, dim, seed, n_queries, chunk=50_000):
    """Seeded clustered rows and held-out queries, normalized (cosine),
    float32 throughout: the mixture of shnsw.data.clustered (Zipf-like
    cluster sizes, per-cluster spread), drawn chunk by chunk so that a
    million rows never exist as float64."""
    rng = np.random.default_rng(seed)
    n_clusters = max(8, int(np.sqrt(n + n_queries) / 2))
    weights = 1.0 / np.arange(1, n_clusters + 1) ** 0.8
    weights /= weights.sum()
    centers = rng.standard_normal((n_clusters, dim), dtype=np.float32)
    spread = rng.uniform(0.15, 0.45, size=n_clusters).astype(np.float32)
    total = n + n_queries
    labels = rng.choice(n_clusters, size=total, p=weights)
    x = np.empty((total, dim), dtype=np.float32)
    for s in range(0, total, chunk):
        e = min(total, s + chunk)
        lab = labels[s:e]
        x[s:e] = centers[lab] + rng.standard_normal((e - s, dim), dtype=np.float32) \
            * spread[lab, None]
        x[s:e] /= np.linalg.norm(x[s:e], axis=1, keepdims=True)
    return x[:n], x[n:]


class _NoticeCluster:
    """The cluster, with connections that collect NOTICEs (DEBUG1 too) and
    end statements after timeout_s (0: never)."""

    def __init__(self, c, notices, timeout_s=0, settings=None):
        self.c, self.notices, self.timeout_s = c, notices, timeout_s
        self.settings = settings or {}

    def connect(self, *a, **k):
        opts = "-c client_min_messages=debug1"
        for name, value in self.settings.items():
            opts += f" -c {name}={value}"
        if self.timeout_s:
            opts += f" -c statement_timeout={int(self.timeout_s * 1000)}"
        conn = self.c.connect(*a, options=opts, **k)
        conn.add_notice_handler(lambda d: self.notices.append(d.message_primary))
        return conn


def default_build(c, am, table, queries, truth, log, timeout_s=0, settings=None):
    """One CREATE INDEX at the server's settings, with progress, memory,
    size, NOTICEs, the workers planned and recall@10 at ef_search 40.
    A build still running after timeout_s is cancelled: the progress lines
    logged every minute are then the result."""
    eng = pg.Engine(am, am, table, f"{table}_{am}_idx",
                    "hnsw.ef_search" if am == "hnsw" else "streamhnsw.ef_search", {})
    notices = []
    load0 = loadavg()
    t0 = time.perf_counter()
    try:
        b = pg.build_index(_NoticeCluster(c, notices, timeout_s, settings), eng, "vector",
                           "cosine", 16,
                           64, log=lambda m, flush=True: log(f"{table} {m}", flush=True),
                           poll=60.0)
    except Exception as e:  # psycopg.errors.QueryCanceled
        return {"am": am, "cancelled_after_s": round(time.perf_counter() - t0),
                "loadavg_start_end": [load0, loadavg()],
                "error": str(e).splitlines()[0],
                "notices": [n for n in notices if "maintenance_work_mem" in n
                            or "worker" in n]}
    load1 = loadavg()
    with c.connect() as conn:
        conn.execute("SET streamhnsw.ef_search = 40")
        conn.execute("SET hnsw.ef_search = 40")
        sql = pg.query_sql(eng, "vector", "cosine", 10)
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN " + sql, (data.vector_literal(queries[0]),)).fetchall())
        assert eng.index in plan, plan
        t = time.perf_counter()
        ids = [[r[0] for r in conn.execute(sql, (data.vector_literal(q),)).fetchall()]
               for q in queries]
        qsecs = time.perf_counter() - t
        rec = data.recall(ids, truth, 10)
        if am == "streamhnsw":
            bad = conn.execute(f"SELECT count(*) FROM streamhnsw_verify('{eng.index}')"
                               ).fetchone()[0]
            assert bad == 0, bad
        conn.execute(f"DROP INDEX {eng.index}")
    return {"am": am, "build_s": round(b["build_s"], 1),
            "peak_private_mb": round(b["build_peak_bytes"] / 2**20, 1),
            "peak_shmem_one_process_mb": round(b["build_peak_shmem_bytes"] / 2**20, 1),
            "workers_seen": b["build_workers"],
            "index_mb": round(b["index_bytes"] / 2**20, 1),
            "table_mb": round(b["table_bytes"] / 2**20, 1),
            "recall10_ef40": round(rec, 4), "queries_s": round(len(queries) / qsecs, 1),
            "loadavg_start_end": [load0, load1],
            "notices": [n for n in notices if "maintenance_work_mem" in n or "worker" in n
                        or "build phases" in n or "rows in memory" in n]}


def loadavg() -> str:
    """The machine's 1-minute load average (builds are timed on shared machines)."""
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def stop_at_seconds(stop_at: str | None) -> float:
    """Seconds from now until --stop-at HH:MM (UTC, today), at least 60; 0
    (no limit) without it."""
    import datetime as dt
    if not stop_at:
        return 0
    now = dt.datetime.now(dt.timezone.utc)
    hh, mm = (int(x) for x in stop_at.split(":"))
    stop = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    return max(60.0, (stop - now).total_seconds())


def defaults_main(args) -> None:
    import threading
    log = print
    timeout_s = stop_at_seconds(args.stop_at)
    settings = {**pg.DEFAULT_SETTINGS, "maintenance_work_mem": "64MB",
                "max_parallel_maintenance_workers": 2}
    with Cluster(name="shnsw-builddef", settings=settings) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        shown = c.execute("SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', ' "
                          "ORDER BY name) FROM pg_settings WHERE name = ANY(%s)",
                          (sorted(settings),))
        log(f"server settings: {shown[0][0]}", flush=True)
        for spec in args.defaults.split(","):
            n, dim = (int(x) for x in spec.lower().split("x"))
            t = time.perf_counter()
            rows, queries = clustered_f32(n, dim, args.seed, args.queries)
            truth = data.ground_truth(rows, queries, 10, metric="cosine", batch=64)
            log(f"{n} x {dim}: data and ground truth in {time.perf_counter() - t:.0f} s",
                flush=True)
            table = f"bd{n}x{dim}"
            ams = args.am.split(",")
            tables = [f"{table}_{am}" for am in ams] if args.concurrent else [table]
            for tb in tables:
                with c.connect() as conn:
                    data.load(conn, tb, rows)
                    conn.execute(f"ALTER TABLE {tb} SET (autovacuum_enabled = off)")
                    conn.execute(f"VACUUM (FREEZE, ANALYZE) {tb}")
            del rows
            if args.concurrent:
                # both engines at once, each on its own copy: the same load for both
                out = {}
                th = [threading.Thread(target=lambda am=am, tb=tb: out.__setitem__(
                    am, default_build(c, am, tb, queries, truth, log, timeout_s)))
                    for am, tb in zip(ams, tables)]
                for t in th:
                    t.start()
                for t in th:
                    t.join()
                for am in ams:
                    r = {"rows": n, "dim": dim, "seed": args.seed, "queries": len(queries),
                         "concurrent": True, **out[am]}
                    log(json.dumps(r), flush=True)
                    if args.out:
                        with open(args.out, "a") as f:
                            f.write(json.dumps(r) + "\n")
                continue
            for am in ams:
                log(f"{n} x {dim}: CREATE INDEX USING {am} ...", flush=True)
                r = {"rows": n, "dim": dim, "seed": args.seed, "queries": len(queries),
                     **default_build(c, am, table, queries, truth, log, timeout_s)}
                log(json.dumps(r), flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(r) + "\n")
            for tb in tables:
                with c.connect() as conn:
                    conn.execute(f"DROP TABLE {tb}")


SETS = {
    # name: loader of a stored set (SHNSW_DATA_DIR), cosine
    "sentences": lambda: __import__("shnsw.bench.datasets", fromlist=["x"]).sentences(
        n_rows=100_000),
    "synthetic768": lambda: __import__("shnsw.bench.datasets", fromlist=["x"]).synthetic(
        100_000, 768),
}


def sets_main(args) -> None:
    """--sets: stored sets at several (maintenance_work_mem, workers) pairs,
    both engines at once on their own copy of the table (the same load for
    both), at the benchmark server's settings otherwise."""
    import threading
    log = print
    timeout_s = stop_at_seconds(args.stop_at)
    if args.build_timeout:
        timeout_s = args.build_timeout
    configs = [(c.split(":")[0], int(c.split(":")[1])) for c in args.configs.split(",")]
    ams = args.am.split(",")
    with Cluster(name="shnsw-buildsets", settings=dict(pg.DEFAULT_SETTINGS)) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        for name in args.sets.split(","):
            ds = SETS[name]()
            rows = ds.rows[:args.rows] if args.rows else ds.rows
            if len(rows) != len(ds.rows):
                truth = data.ground_truth(rows, ds.queries, 10, metric="cosine", batch=64)
            else:
                truth = ds.truth[:, :10]
            n, dim = rows.shape
            tables = {am: f"bs_{name}_{am}" for am in ams}
            for tb in tables.values():
                with c.connect() as conn:
                    data.load(conn, tb, rows)
                    conn.execute(f"ALTER TABLE {tb} SET (autovacuum_enabled = off, "
                                 "parallel_workers = 2)")
                    conn.execute(f"VACUUM (FREEZE, ANALYZE) {tb}")
            for mwm, workers in configs:
                settings = {"maintenance_work_mem": mwm,
                            "max_parallel_maintenance_workers": workers}
                out = {}
                th = [threading.Thread(target=lambda am=am: out.__setitem__(
                    am, default_build(c, am, tables[am], ds.queries, truth, log, timeout_s,
                                      settings)))
                      for am in ams]
                for t in th:
                    t.start()
                for t in th:
                    t.join()
                for am in ams:
                    with open("/proc/loadavg") as f:
                        load = f.read().split()[:3]
                    r = {"set": name, "rows": n, "dim": dim, "mwm": mwm, "workers": workers,
                         "concurrent_with": [a for a in ams if a != am], "loadavg": load,
                         **out[am]}
                    log(json.dumps(r), flush=True)
                    if args.out:
                        with open(args.out, "a") as f:
                            f.write(json.dumps(r) + "\n")
            for tb in tables.values():
                with c.connect() as conn:
                    conn.execute(f"DROP TABLE {tb}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench.build_memory", description=__doc__.splitlines()[0])
    ap.add_argument("--defaults", default=None, metavar="NxD,...",
                    help="default-settings builds of these clustered sets (see above)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--concurrent", action="store_true",
                    help="--defaults: build both engines at the same time, each on its own "
                         "copy of the table (same load for both on a shared machine)")
    ap.add_argument("--stop-at", default=None, metavar="HH:MM",
                    help="--defaults: cancel builds still running at this UTC time")
    ap.add_argument("--out", default=None)
    ap.add_argument("--sets", default=None, metavar="NAME,...",
                    help="stored sets (sentences: 100k x 384, synthetic768: 100k x 768), "
                         "built at each of --configs with both engines at once")
    ap.add_argument("--configs", default="64MB:0,64MB:2,256MB:2,1GB:2",
                    metavar="MWM:WORKERS,...",
                    help="--sets: maintenance_work_mem and max_parallel_maintenance_workers")
    ap.add_argument("--build-timeout", type=float, default=0,
                    help="--sets: cancel a build still running after this many seconds")
    ap.add_argument("--rows", type=int, default=50000,
                    help="rows (--sets: the first this many of the set; 0: all)")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--mwm", default="1MB,8MB,64MB,1GB")
    ap.add_argument("--am", default="streamhnsw,hnsw")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--workers", default="0",
                    help="max_parallel_maintenance_workers, or 'default' to keep the server's (2)")
    args = ap.parse_args(argv)
    if args.defaults:
        defaults_main(args)
        return
    if args.sets:
        sets_main(args)
        return

    with Cluster(name="shnsw-buildmem", settings={"shared_buffers": "256MB",
                                                 "autovacuum": "off",
                                                 "max_wal_size": "4GB"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        rows, queries = data.clustered(args.rows, args.dim, seed=args.seed, n_queries=100)
        truth = data.ground_truth(rows, queries, 10)
        with c.connect() as conn:
            data.load(conn, "bm", rows)
        print(f"rows={args.rows} dim={args.dim} clustered seed={args.seed}, m 16, "
              f"ef_construction 64, max_parallel_maintenance_workers {args.workers}, recall@10 at ef_search 40 (100 queries)")
        print("| maintenance_work_mem | AM | build s | rows built in memory | "
              "peak RssAnon growth MB | VmHWM growth MB | recall@10 |")
        print("|---|---|---|---|---|---|---|")
        for mwm in args.mwm.split(","):
            for am in args.am.split(","):
                secs, inmem, anon, hwm, rec = one_build(c, am, mwm, queries, truth, args.workers)
                print(f"| {mwm} | {am} | {secs:.1f} | {inmem} | {anon / 1024:.1f} | "
                      f"{hwm / 1024:.1f} | {rec:.3f} |", flush=True)


if __name__ == "__main__":
    main()
