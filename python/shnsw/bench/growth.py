"""An index that grows by inserts, both engines: `python -m shnsw.bench --preset growth`.

How an application usually starts: CREATE INDEX on a small table (--base
rows), then the rows arrive by INSERT (--rows in all, each row through the
index's insert path; --batch rows per INSERT ... SELECT from a staging
table), while one client searches every --probe-every rows. For each engine:

- the insert rate (rows/s);
- streamhnsw: how long after the inserts end a search reads every node from
  the shared cache again (EXPLAIN: through buffers = 0), how many copies the
  growth took (builds, regrowths) and the copy's size;
- hot queries/s (one client, the index cached) and recall@10 on the grown
  index and on an index built fresh on the same rows, over a sweep of
  ef_search, and compared at equal recall as BENCHMARKS.md asks: the
  grown index's q/s at the recall the fresh one reaches at --ef-search,
  interpolated along its curve, against the fresh index's there.

One run; settings as BENCHMARKS.md's (shared_buffers 2GB and the rest).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from .. import data, demo_citus
from ..cluster import Cluster
from . import datasets, metrics, report

ROOT = Path(__file__).resolve().parents[3]
K = demo_citus.K
ENGINES = {"hnsw": "pgvector hnsw", "streamhnsw": "streamhnsw"}
SETTINGS = {"shared_buffers": "2GB", "io_method": "worker", "io_workers": 8,
            "effective_io_concurrency": 16, "jit": "off", "maintenance_work_mem": "1GB",
            "max_wal_size": "8GB", "checkpoint_timeout": "1800s", "autovacuum": "off"}
ROUNDS = 3
SWEEP = (20, 30, 40, 60, 80)    # ef_search values of the hot comparison
CACHE_LINE = re.compile(r"streamhnsw shared cache: (.*?), nodes from cache=(\d+) "
                        r"through buffers=(\d+)")


def _cache_line(conn, table, q):
    """(status, nodes from the cache, nodes through buffers) of one search."""
    plan = conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF) SELECT id FROM {table} "
                        f"ORDER BY embedding <=> %s::vector LIMIT {K}",
                        (data.vector_literal(q),)).fetchall()
    for (line,) in plan:
        m = CACHE_LINE.search(line)
        if m:
            return m.group(1), int(m.group(2)), int(m.group(3))
    return None, 0, 0


def _hot(conn, table, am, ef, queries, truth):
    """(queries/s, p50 ms, recall@10) of one client, after a warm-up pass."""
    prelude = [f"SET LOCAL {'hnsw' if am == 'hnsw' else 'streamhnsw'}.ef_search = {ef}",
               "SET LOCAL enable_seqscan = off"]
    demo_citus.search(conn, table, queries, prelude)
    t = time.perf_counter()
    found, lat = demo_citus.search(conn, table, queries, prelude)
    qps = len(queries) / (time.perf_counter() - t)
    recall = float(np.mean([len(set(f) & set(truth[i, :K].tolist())) / K
                            for i, f in enumerate(found)]))
    return qps, statistics.median(lat), recall


def _sweep(a):
    """The ef_search values of the hot comparison: SWEEP and --ef-search."""
    return sorted(set(SWEEP) | {a.ef_search})


def _nodes(conn, table, queries):
    """Mean nodes a streamhnsw search reads (EXPLAIN's cache line)."""
    return float(np.mean([sum(_cache_line(conn, table, q)[1:]) for q in queries]))


def _grow(conn, table, am, a, probe):
    """Insert the staged rows into table in batches, searching every
    probe_every rows; the insert rate (rows/s, searches excluded)."""
    spent = 0.0
    for s in range(a.base, a.rows, a.batch):
        t = time.perf_counter()
        conn.execute(f"INSERT INTO {table} SELECT id, embedding FROM g_stage "
                     f"WHERE id >= {s} AND id < {s + a.batch} ORDER BY id")
        spent += time.perf_counter() - t
        if (s - a.base) // a.probe_every != (s + a.batch - a.base) // a.probe_every:
            demo_citus.search(conn, table, probe)
    return (a.rows - a.base) / spent


def _cached_again(conn, table, q, timeout=600.0):
    """Seconds until a search reads every node from the shared cache."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        status, cached, through = _cache_line(conn, table, q)
        if status == "used" and cached > 0 and through == 0:
            return time.perf_counter() - t0
        time.sleep(0.2)
    return None


def _engine(c, am, ds, a, queries):
    table, fresh = f"g_{am}", f"g_{am}_fresh"
    res = {}
    with c.connect() as conn:
        data.load(conn, table, ds.rows[:a.base])
        conn.execute(f"CREATE INDEX {table}_idx ON {table} USING {am} "
                     "(embedding vector_cosine_ops)")
        print(f"  {ENGINES[am]}: inserting {a.rows - a.base} rows ...", flush=True)
        res["inserts_per_s"] = _grow(conn, table, am, a, queries[:1])
        if am == "streamhnsw":
            res["cached_again_s"] = _cached_again(conn, table, queries[0])
            row = conn.execute("SELECT builds, outgrown, bytes FROM streamhnsw_cache_list() "
                               "WHERE index = %s::regclass AND state = 'ready'",
                               (f"{table}_idx",)).fetchone()
            res["builds"], res["outgrown"], res["copy_bytes"] = row if row else (None,) * 3
        conn.execute(f"VACUUM ANALYZE {table}")
        print(f"  {ENGINES[am]}: building on all {a.rows} rows ...", flush=True)
        data.load(conn, fresh, ds.rows)
        t = time.perf_counter()
        conn.execute(f"CREATE INDEX {fresh}_idx ON {fresh} USING {am} "
                     "(embedding vector_cosine_ops)")
        res["fresh_build_s"] = time.perf_counter() - t
        conn.execute(f"VACUUM ANALYZE {fresh}")
        if am == "streamhnsw":
            conn.execute(f"SELECT streamhnsw_cache_load('{fresh}_idx')")
            res["grown_nodes"] = _nodes(conn, table, queries[:100])
            res["fresh_nodes"] = _nodes(conn, fresh, queries[:100])
        # alternating rounds, the median of each: a busy machine's noise
        # falls on both indexes alike
        efs = _sweep(a)
        runs = {(t, ef): [] for t in (table, fresh) for ef in efs}
        for _ in range(ROUNDS):
            for ef in efs:
                for t in (table, fresh):
                    runs[(t, ef)].append(_hot(conn, t, am, ef, queries, ds.truth))
        for key, t in (("grown", table), ("fresh", fresh)):
            res[f"{key}_sweep"] = {ef: tuple(statistics.median(r[i] for r in runs[(t, ef)])
                                             for i in range(3)) for ef in efs}
            res[key] = res[f"{key}_sweep"][a.ef_search]
        # equal recall: the fresh index's at ef_search, read off both curves
        # alike (metrics.at_recall: the best q/s reaching that recall)
        target = res["fresh"][2]
        res["equal_recall"] = {"recall": target} | {
            f"{key}_qps": metrics.at_recall([(v[2], v[0]) for v in res[f"{key}_sweep"].values()],
                                            target) for key in ("grown", "fresh")}
        res["index_mb"] = {t: conn.execute(f"SELECT pg_relation_size('{t}_idx')")
                           .fetchone()[0] / 2**20 for t in (table, fresh)}
        conn.execute(f"DROP TABLE {fresh}")
    return res


def _report(res, ds, a):
    s = res["engines"].get("streamhnsw", {})
    lines = [f"# An index grown by inserts: {ds.name}", "",
             f"CREATE INDEX on {a.base:,} rows, then {a.rows - a.base:,} rows inserted (each "
             f"through the index's insert path, {a.batch:,} per INSERT ... SELECT), one search "
             f"every {a.probe_every:,} rows; then {res['queries']} queries at each ef_search "
             "of the sweep below, one client, after a warm-up pass, "
             f"{ROUNDS} rounds alternating "
             f"(medians), on the grown index and on one built fresh on the same {a.rows:,} rows (cosine, m 16, ef_construction 64; "
             "shared_buffers 2GB). One run.", "",
             "| engine | inserts/s | grown q/s | fresh q/s | grown / fresh | grown recall@10 "
             "| fresh recall@10 | grown / fresh at equal recall | grown p50 ms | fresh p50 ms "
             "| index MB grown / fresh |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for am, e in res["engines"].items():
        g, f = e["grown"], e["fresh"]
        mb = list(e["index_mb"].values())
        eq = e.get("equal_recall") or {}
        eqr = metrics.ratio(eq.get("grown_qps"), eq.get("fresh_qps"))
        lines.append(f"| {ENGINES[am]} | {e['inserts_per_s']:,.0f} | {g[0]:,.0f} | {f[0]:,.0f} "
                     f"| {g[0] / f[0]:.2f} | {g[2]:.3f} | {f[2]:.3f} "
                     f"| {'n/a' if eqr is None else f'{eqr:.2f}'} | {g[1]:.2f} | {f[1]:.2f} "
                     f"| {mb[0]:.0f} / {mb[1]:.0f} |")
    lines += ["", f"Equal recall: each index's q/s at the recall@10 the fresh one reaches at "
              f"ef_search {a.ef_search}, interpolated along its sweep over ef_search "
              f"{', '.join(str(x) for x in _sweep(a))} "
              "(BENCHMARKS.md: compare at equal recall, never at equal ef_search). "
              "The sweep, q/s and recall@10, grown / fresh:", "",
              "| engine | ef_search | grown q/s | grown recall@10 | fresh q/s | fresh recall@10 |",
              "|---|---:|---:|---:|---:|---:|"]
    for am, e in res["engines"].items():
        for ef, gv in e.get("grown_sweep", {}).items():
            fv = e["fresh_sweep"][ef]
            lines.append(f"| {ENGINES[am]} | {ef} | {gv[0]:,.0f} | {gv[2]:.3f} | {fv[0]:,.0f} "
                         f"| {fv[2]:.3f} |")
    if s:
        again = s.get("cached_again_s")
        lines += ["", "- streamhnsw: a search read every node from the shared cache "
                  + (f"{again:.1f} s after the inserts ended" if again is not None
                     else "not within 600 s of the inserts' end")
                  + f"; the growth took {s['builds']} copies ({s['outgrown']} regrowths, each "
                  "built beside the outgrown copy, which served meanwhile); the copy is "
                  f"{(s['copy_bytes'] or 0) / 2**20:.0f} MB. Nodes read per search: "
                  f"{s['grown_nodes']:.0f} grown, {s['fresh_nodes']:.0f} fresh."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench --preset growth",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows in the end")
    ap.add_argument("--base", type=int, default=10_000, help="rows indexed by CREATE INDEX")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--probe-every", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--ef-search", type=int, default=40)
    ap.add_argument("--engines", default="hnsw,streamhnsw",
                    help="comma-separated among hnsw, streamhnsw")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "reports")
    a = ap.parse_args(argv)
    ds = datasets.synthetic(a.rows, a.dim, "cosine", n_queries=a.queries)
    queries = ds.queries[:a.queries]
    res = {"settings": {"dataset": ds.name, "rows": a.rows, "base": a.base, "batch": a.batch,
                        "probe_every": a.probe_every, "ef_search": a.ef_search,
                        "server": SETTINGS, "k": K},
           "queries": len(queries), "engines": {}}
    with Cluster(name="shnsw-growth", settings=SETTINGS) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        with c.connect() as conn:
            data.load(conn, "g_stage", ds.rows[a.base:], start_id=a.base)
        for am in a.engines.split(","):
            res["engines"][am] = _engine(c, am, ds, a, queries)
    md = _report(res, ds, a)
    report.write_standalone(a.out / f"growth-{a.rows // 1000}k-{a.dim}", res, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
