"""A restart, both engines: `python -m shnsw.bench --preset restart`.

One server with both libraries preloaded (shared_preload_libraries =
'streamhnsw,pg_prewarm'), the data set in two tables, one indexed by
pgvector's hnsw and one by streamhnsw. Both are warmed by queries (the
shared cache built, the buffers loaded; pg_prewarm's autoprewarm records
them), then the server restarts with the tables' and indexes' files dropped
from the OS cache as well (a failover or a host restart). Measured:

- each engine's first query after the restart (a new connection, at once);
- how long after the restart the work that warms each engine back up has
  finished: streamhnsw's shared cache copy listed ready (rebuilt by its
  warmer from the list it wrote at shutdown), pgvector's buffers reloaded
  by autoprewarm (its log line);
- p50 of the same queries before the restart and 10 s after it.

One run; settings as BENCHMARKS.md's (shared_buffers 2GB and the rest).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

from .. import data, demo_citus
from ..cluster import Cluster
from . import datasets, pg, report

ROOT = Path(__file__).resolve().parents[3]
K = demo_citus.K
ENGINES = (("pgvector hnsw", "hnsw"), ("streamhnsw", "streamhnsw"))
SETTINGS = {"shared_buffers": "2GB", "io_method": "worker", "io_workers": 8,
            "effective_io_concurrency": 16, "jit": "off", "maintenance_work_mem": "1GB",
            "shared_preload_libraries": "'streamhnsw,pg_prewarm'"}


def _latencies(conn, table, queries):
    """Latency (ms) of each query: the demo's cosine top-10 search loop."""
    return demo_citus.search(conn, table, queries)[1]


def _cache_ready(conn, index):
    row = conn.execute("SELECT state FROM streamhnsw_cache_list() "
                       "WHERE index = %s::regclass AND state <> 'dropped'", (index,)).fetchone()
    return row is not None and row[0] == "ready"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench --preset restart",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", choices=("sentences", "synthetic"), default="sentences")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384, help="synthetic only")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--ef-search", type=int, default=40)
    ap.add_argument("--after", type=float, default=10.0, help="seconds after the restart")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "reports")
    a = ap.parse_args(argv)
    ds = (datasets.sentences(n_rows=a.rows, n_queries=500) if a.dataset == "sentences"
          else datasets.synthetic(a.rows, a.dim, "cosine", n_queries=500))
    queries = ds.queries[:a.queries]
    res = {"settings": {"dataset": ds.name, "queries": len(queries), "ef_search": a.ef_search,
                        "after_s": a.after, "server": SETTINGS, "k": K}}
    with Cluster(name="shnsw-restart", settings=SETTINGS) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        c.execute("CREATE EXTENSION pg_prewarm")
        with c.connect() as conn:
            for _, am in ENGINES:
                table = f"r_{am}"
                data.load(conn, table, ds.rows)
                conn.execute(f"CREATE INDEX {table}_idx ON {table} USING {am} "
                             "(embedding vector_cosine_ops)")
                conn.execute(f"VACUUM ANALYZE {table}")
            conn.execute(f"ALTER DATABASE postgres SET hnsw.ef_search = {a.ef_search}")
            conn.execute(f"ALTER DATABASE postgres SET streamhnsw.ef_search = {a.ef_search}")
        with c.connect() as conn:
            conn.execute("SELECT streamhnsw_cache_load('r_streamhnsw_idx')")
            for _, am in ENGINES:
                _latencies(conn, f"r_{am}", queries)             # the server's caches
            files = pg.relation_files(conn, c.datadir, [f"r_{am}" for _, am in ENGINES] +
                                      [f"r_{am}_idx" for _, am in ENGINES])
        # measured as after the restart: a new connection's queries, so the
        # two differ by the restart alone, not by a connection's first touches
        before = {}
        for _, am in ENGINES:
            with c.connect() as conn:
                before[am] = statistics.median(_latencies(conn, f"r_{am}", queries))
        c.stop()
        pg.drop_os_cache(files)
        c.start()
        t0 = time.perf_counter()
        first = {}
        for _, am in ENGINES:
            with c.connect() as conn:
                first[am] = _latencies(conn, f"r_{am}", queries[:1])[0]
        ready = None
        with c.connect() as conn:
            while time.perf_counter() - t0 < 120:
                if _cache_ready(conn, "r_streamhnsw_idx"):
                    ready = time.perf_counter() - t0
                    break
                time.sleep(0.05)
        time.sleep(max(0.0, a.after - (time.perf_counter() - t0)))
        after = {}
        for _, am in ENGINES:
            with c.connect() as conn:
                after[am] = statistics.median(_latencies(conn, f"r_{am}", queries))
        log = c.log_tail(200_000)
        m = re.findall(r"autoprewarm successfully prewarmed (\d+) of (\d+)", log)
        res["pgvector_autoprewarm"] = m[-1] if m else None
    res["engines"] = {am: {"before_p50_ms": before[am], "first_query_ms": first[am],
                           "after_p50_ms": after[am]} for _, am in ENGINES}
    res["streamhnsw_cache_ready_s"] = ready
    lines = [f"# A restart: both engines, {ds.name}", "",
             f"shared_preload_libraries 'streamhnsw,pg_prewarm' (autoprewarm on), "
             f"shared_buffers 2GB, io_method worker; ef_search {a.ef_search}; the tables' and "
             f"indexes' files dropped from the OS cache at the restart; {len(queries)} queries "
             f"(p50 over them); a new connection for each measurement, before the restart as after it. One run.", "",
             "| engine | p50 ms before | first query after the restart ms | "
             f"p50 ms {a.after:.0f} s after |", "|---|---:|---:|---:|"]
    for name, am in ENGINES:
        e = res["engines"][am]
        lines.append(f"| {name} | {e['before_p50_ms']:.2f} | {e['first_query_ms']:.1f} | "
                     f"{e['after_p50_ms']:.2f} |")
    pw = res["pgvector_autoprewarm"]
    lines += ["", f"- streamhnsw's shared cache copy listed ready by "
              + (f"{ready:.1f} s after the restart (rebuilt by its warmer)" if ready is not None
                 else "not within 120 s"),
              f"- autoprewarm: " + (f"prewarmed {pw[0]} of {pw[1]} blocks (all relations)"
                                    if pw else "no completion line in the log")]
    md = "\n".join(lines) + "\n"
    report.write_standalone(a.out / f"restart-{a.dataset}", res, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
