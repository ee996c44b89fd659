"""The project's main job on an embedded default: `make demo`.

Starts a throwaway cluster, loads a seeded clustered dataset, builds
pgvector's hnsw and (once the access method exists) streamhnsw on identical
tables, runs held-out queries against both and prints the comparison.

Usage: python -m shnsw.demo [--rows N] [--dim D] [--queries Q] [--metric l2|cosine]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from . import data
from .cluster import Cluster

OPS = {"l2": ("vector_l2_ops", "<->"), "cosine": ("vector_cosine_ops", "<=>"),
       "ip": ("vector_ip_ops", "<#>")}


def run_index(conn, table, am, opclass, op, queries, truth, k, ef, m, efc):
    """Build one index, then time the queries at one ef_search; return figures."""
    t0 = time.perf_counter()
    conn.execute(f"CREATE INDEX {table}_idx ON {table} USING {am} (embedding {opclass}) "
                 f"WITH (m = {m}, ef_construction = {efc})")
    build_s = time.perf_counter() - t0
    size = conn.execute(f"SELECT pg_relation_size('{table}_idx')").fetchone()[0]
    guc = "hnsw.ef_search" if am == "hnsw" else "streamhnsw.ef_search"
    conn.execute(f"SET {guc} = {ef}")
    sql = f"SELECT id FROM {table} ORDER BY embedding {op} %s::vector LIMIT {k}"
    plan = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN " + sql, (data.vector_literal(queries[0]),)).fetchall())
    if f"{table}_idx" not in plan:
        raise RuntimeError(f"the planner did not use {am}:\n{plan}")
    for q in queries[:10]:                     # warm-up
        conn.execute(sql, (data.vector_literal(q),)).fetchall()
    found, times = [], []
    for q in queries:
        lit = data.vector_literal(q)
        t = time.perf_counter()
        rows = conn.execute(sql, (lit,)).fetchall()
        times.append(time.perf_counter() - t)
        found.append([r[0] for r in rows])
    times.sort()
    return {
        "index": am, "build_s": build_s, "size_mb": size / 2**20,
        "recall": data.recall(found, truth, k),
        "p50_ms": statistics.median(times) * 1e3,
        "p95_ms": times[int(0.95 * (len(times) - 1))] * 1e3,
        "qps": len(times) / sum(times),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--metric", choices=sorted(OPS), default="l2")
    ap.add_argument("--ef-search", type=int, default=40)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    k, m, efc = 10, 16, 64
    opclass, op = OPS[args.metric]

    print(f"streamhnsw demo: {args.rows} x {args.dim} clustered ({args.metric}), "
          f"{args.queries} held-out queries, m={m}, ef_construction={efc}, "
          f"ef_search={args.ef_search}, k={k}")
    rows, queries = data.clustered(args.rows, args.dim, seed=args.seed,
                                   n_queries=args.queries,
                                   normalize=args.metric == "cosine")
    truth = data.ground_truth(rows, queries, k, metric=args.metric)
    settings = {"shared_buffers": "512MB", "maintenance_work_mem": "1GB",
                "max_parallel_maintenance_workers": 0, "io_method": "worker",
                "effective_io_concurrency": 16}
    results = []
    with Cluster(name="shnsw-demo", settings=settings) as c, c.connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE")
        have_am = conn.execute(
            "SELECT count(*) FROM pg_am WHERE amname = 'streamhnsw'").fetchone()[0] > 0
        ams = ["hnsw"] + (["streamhnsw"] if have_am else [])
        for am in ams:
            table = f"items_{am}"
            t = time.perf_counter()
            data.load(conn, table, rows)
            print(f"  loaded {table} in {time.perf_counter() - t:.1f} s; building {am} ...",
                  flush=True)
            results.append(run_index(conn, table, am, opclass, op, queries, truth,
                                     k, args.ef_search, m, efc))
        if not have_am:
            print("  (the streamhnsw access method is not built yet: pgvector only)")
    print()
    print("| index | build s | size MB | recall@10 | p50 ms | p95 ms | queries/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['index']} | {r['build_s']:.2f} | {r['size_mb']:.1f} | {r['recall']:.3f} "
              f"| {r['p50_ms']:.3f} | {r['p95_ms']:.3f} | {r['qps']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
