"""Strict order side by side with pgvector: rows returned, recall, rows missed, time.

    .venv/bin/python -m shnsw.bench.order --dir /tmp/order-pg --sets syn384 [--limits 100,500] \
        [--efs 16,40] [--queries 100]

Keeps one cluster in --dir (created on first use, left running with
--keep so that later runs reuse its tables and indexes; --stop stops it).
Each set is two tables with identical rows, one indexed by streamhnsw, one
by pgvector's hnsw (m 16, ef_construction 64, parallel builds with 2
workers). Sets:

  syn384    synthetic clustered 100k x 384, cosine (shnsw.data.clustered, seed 42)
  syn768    synthetic clustered 100k x 768, cosine (seed 42)
  sentences real sentence embeddings 100k x 384, cosine (the bench data set)

For every LIMIT and ef_search, each engine and order (streamhnsw strict and
relaxed, pgvector strict_order and relaxed_order at the same ef_search and
its default max_scan_tuples) runs the same held-out queries, interleaved
query by query, and reports: rows returned (mean), recall against the
exact top LIMIT (numpy, float64), rows missing below the last row returned
(rows of the table nearer than the farthest row returned that are not in
the result: what a skip costs), queries with any such row, and the median
and p90/p99 time per query (client side, hot: a warm pass first).
streamhnsw's EXPLAIN line counts its skips and rounds (--explain).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from .. import data
from ..cluster import Cluster, open_kept

SETTINGS = {"shared_buffers": "2GB", "maintenance_work_mem": "1GB", "io_method": "worker",
            "io_workers": 8, "effective_io_concurrency": 16, "jit": "off",
            "max_parallel_maintenance_workers": 2, "max_worker_processes": 16}


def log(*a, **kw):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def dataset(name: str, n_queries: int):
    if name.startswith("syn"):
        dim = int(name[3:])
        rows, queries = data.clustered(100_000, dim, seed=42, normalize=True,
                                       n_queries=n_queries)
        return rows, queries
    if name == "sentences":
        from . import datasets
        ds = datasets.sentences(n_rows=100_000, n_queries=2000, n_inserts=1000, log=log)
        return ds.rows, ds.queries[:n_queries]
    raise SystemExit(f"unknown set {name}")


def open_cluster(d: Path) -> Cluster:
    c = open_kept(d, SETTINGS, "order")
    c.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
    return c


def ensure_tables(conn, name: str, rows: np.ndarray) -> None:
    for am, suffix in (("streamhnsw", "s"), ("hnsw", "p")):
        t = f"{name}_{suffix}"
        have = conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = %s",
                            (t,)).fetchone()[0]
        if have >= 2:
            continue
        log(f"loading {t}")
        data.load(conn, t, rows)
        conn.execute(f"ALTER TABLE {t} SET (parallel_workers = 2)")
        t0 = time.time()
        conn.execute(f"CREATE INDEX {t}_idx ON {t} USING {am} (embedding vector_cosine_ops)")
        log(f"built {t} ({am}) in {time.time() - t0:.0f} s")
        conn.execute(f"VACUUM ANALYZE {t}")


_normalized = {}


def exact(rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    # the rows normalized once per set, not per query (100k x 768 in float64
    # took about a second a query)
    rn = _normalized.get(id(rows))
    if rn is None:
        rn = rows.astype(np.float64)
        rn /= np.linalg.norm(rn, axis=1, keepdims=True)
        _normalized.clear()
        _normalized[id(rows)] = rn
    qn = q.astype(np.float64) / np.linalg.norm(q)
    return 1.0 - rn @ qn


MODES = [("streamhnsw", "strict", "s", "streamhnsw.iterative_scan = strict_order"),
         ("streamhnsw", "relaxed", "s", "streamhnsw.iterative_scan = relaxed_order"),
         ("pgvector", "strict", "p", "hnsw.iterative_scan = strict_order"),
         ("pgvector", "relaxed", "p", "hnsw.iterative_scan = relaxed_order")]


def measure(conn, name, rows, queries, limit, ef, explain, modes, s_table=None):
    conn.execute(f"SET streamhnsw.ef_search = {ef}")
    conn.execute(f"SET hnsw.ef_search = {ef}")
    res = {m[:2]: {"n": [], "recall": [], "missing": [], "ms": [], "skips": [],
                   "rounds": [], "reranked": []} for m in modes}
    stmts = {}
    for eng, order, suf, guc in modes:
        table = s_table if (suf == "n" and s_table) else f"{name}_{suf}"
        stmts[(eng, order)] = (guc, f"SELECT id, embedding <=> %s::vector FROM {table} "
                                    f"ORDER BY embedding <=> %s::vector LIMIT {limit}")
    lits = [data.vector_literal(q) for q in queries]
    # warm pass
    for eng, order, _, _ in modes:
        guc, sql = stmts[(eng, order)]
        conn.execute("SET " + guc)
        for lit in lits[:10]:
            conn.execute(sql, (lit, lit)).fetchall()
    for qi, lit in enumerate(lits):
        d = exact(rows, queries[qi])
        srt = np.sort(d)
        for eng, order, _, _ in modes:
            guc, sql = stmts[(eng, order)]
            conn.execute("SET " + guc)
            t = time.perf_counter()
            got = conn.execute(sql, (lit, lit)).fetchall()
            ms = (time.perf_counter() - t) * 1000
            r = res[(eng, order)]
            ids = np.array([g[0] for g in got], dtype=np.int64)
            r["n"].append(len(ids))
            r["ms"].append(ms)
            if len(ids) == 0:
                r["recall"].append(0.0)
                r["missing"].append(0)
                continue
            kth = srt[min(limit, len(srt)) - 1]
            r["recall"].append(float(np.sum(d[ids] <= kth + 1e-7)) / limit)
            last = d[ids].max()
            r["missing"].append(int(np.sum(d < last - 1e-7) - np.sum(d[ids] < last - 1e-7)))
            if explain and eng.startswith("streamhnsw"):
                plan = [x[0] for x in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql,
                                                   (lit, lit)).fetchall()]
                line = next(x for x in plan if "streamhnsw order:" in x)
                r["skips"].append(int(line.split("found after a farther row=")[1].split()[0]))
                line = next(x for x in plan if "streamhnsw: rounds=" in x)
                r["rounds"].append(int(line.split("rounds=")[1].split()[0]))
                r["reranked"].append(int(line.split("re-ranked=")[1].split()[0]))
    out = []
    for (eng, order), r in res.items():
        ms = sorted(r["ms"])
        p = lambda f: ms[min(len(ms) - 1, int(f * len(ms)))]  # noqa: E731
        line = (f"| {name} | {limit} | {ef} | {eng} {order} | {np.mean(r['n']):.1f} | "
                f"{np.mean(r['recall']):.4f} | {sum(r['missing'])} | "
                f"{sum(1 for x in r['missing'] if x > 0)} | {statistics.median(ms):.2f} | "
                f"{p(0.9):.2f} | {p(0.99):.2f} |")
        if r["skips"]:
            line += (f" skipped {sum(r['skips'])} in {sum(1 for x in r['skips'] if x)} q;"
                     f" rounds med {statistics.median(r['rounds'])} max {max(r['rounds'])};"
                     f" re-ranked med {statistics.median(r['reranked'])}"
                     f" max {max(r['reranked'])} |")
        out.append(line)
        print(line, flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench.order", description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/order-pg")
    ap.add_argument("--sets", default="syn384")
    ap.add_argument("--limits", default="100,500")
    ap.add_argument("--efs", default="16,40")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--engines", default="all", help="all, or streamhnsw")
    ap.add_argument("--explain", action="store_true")
    ap.add_argument("--set", action="append", default=[], help="extra SET for the session")
    ap.add_argument("--stop", action="store_true")
    ap.add_argument("--s-table", default=None,
                    help="a second streamhnsw table (SET stands for the set's name), e.g. "
                         "SET_n rebuilt by a newer build: measured as streamhnsw, the "
                         "SET_s index as streamhnsw-old, in the same run")
    a = ap.parse_args(argv)
    c = open_cluster(Path(a.dir))
    if a.stop:
        c.stop()
        return
    modes = MODES if a.engines == "all" else [m for m in MODES if m[0] == a.engines]
    if a.s_table:
        # the rebuilt index (suffix n) beside the old one (suffix s), same run
        modes = [(e, o, "n" if e == "streamhnsw" else suf, g) for e, o, suf, g in modes]
        modes.insert(1, ("streamhnsw-old", "strict", "s",
                         "streamhnsw.iterative_scan = strict_order"))
    print("| set | LIMIT | ef_search | engine | rows | recall | missing below last | "
          "queries missing | p50 ms | p90 ms | p99 ms | streamhnsw EXPLAIN |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with c.connect() as conn:
        for name in a.sets.split(","):
            rows, queries = dataset(name, a.queries)
            ensure_tables(conn, name, rows)
            for t in (f"{name}_s", f"{name}_p") + ((a.s_table.replace("SET", name),) if a.s_table else ()):
                conn.execute(f"SELECT pg_prewarm('{t}_idx')")
                conn.execute(f"SELECT pg_prewarm('{t}')")
            conn.execute("SET enable_seqscan = off")
            for s in a.set:
                conn.execute("SET " + s)
            for limit in [int(x) for x in a.limits.split(",")]:
                for ef in [int(x) for x in a.efs.split(",")]:
                    measure(conn, name, rows, queries, limit, ef, a.explain, modes,
                            a.s_table.replace("SET", name) if a.s_table else None)
    os.sync()


if __name__ == "__main__":
    main()
