"""The comparison of `make demo` on a local Citus cluster: `make demo-citus`.

Builds Citus from its source tarball into a copy of the project's
PostgreSQL (cached under .build/, shnsw.citus), starts a coordinator and
two workers on this machine, distributes the same seeded rows into two
tables (32 shards each), indexes one with pgvector's hnsw and one with
streamhnsw from the coordinator (one index per shard), and prints, per
ef_search, each engine's recall@10 against the exact answer over all
shards and its latency through the coordinator.

How ef_search reaches the shards, as a user would set it: streamhnsw's as
the index option (ALTER INDEX ... SET (ef_search = N), stored on every
shard's index); pgvector's with SET LOCAL hnsw.ef_search inside a
transaction and citus.propagate_set_commands = 'local' (a plain SET on the
coordinator does not reach the shards). Sequential scans are turned off on
the shards the same way for both engines, so that each answers from its
index even on shards small enough for a sequential scan and sort.

Usage: python -m shnsw.demo_citus [--rows N] [--dim D] [--queries Q] [--shards S]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from . import citus, data

K = 10
ENGINES = (("pgvector hnsw", "hnsw"), ("streamhnsw", "streamhnsw"))


def search(conn, table, queries, prelude=()):
    """(ids per query, latency per query in ms) of cosine top-10 searches
    through the coordinator, run in one transaction after the statements of
    prelude (SET LOCAL ...: with citus.propagate_set_commands = 'local' they
    reach the shards)."""
    found, times = [], []
    with conn.transaction():
        for sql in prelude:
            conn.execute(sql)
        for q in queries:
            lit = data.vector_literal(q)
            t = time.perf_counter()
            rows = conn.execute(f"SELECT id FROM {table} ORDER BY embedding <=> %s::vector "
                                f"LIMIT {K}", (lit,)).fetchall()
            times.append((time.perf_counter() - t) * 1000)
            found.append([r[0] for r in rows])
    return found, times


def _search(conn, table, queries, am, ef):
    prelude = ["SET LOCAL enable_seqscan = off"]
    if am == "hnsw":
        prelude.append(f"SET LOCAL hnsw.ef_search = {ef}")
    return search(conn, table, queries, prelude)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=60000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)

    why = citus.unavailable()
    if why:
        print(f"demo-citus: cannot run: {why}", file=sys.stderr)
        return 1
    rows, queries = data.clustered(args.rows, args.dim, seed=args.seed, normalize=True,
                                   n_queries=args.queries)
    truth = data.ground_truth(rows, queries, K, "cosine")
    print(f"demo-citus: {args.rows:,} clustered rows of {args.dim} dimensions (cosine), "
          f"{args.queries} held-out queries, {args.shards} shards on 2 workers")
    with citus.CitusCluster(dev=False, settings={"shared_buffers": "256MB"}) as cc:
        with cc.connect(autocommit=True) as conn:
            conn.execute(f"SET citus.shard_count = {args.shards}")
            conn.execute("SET citus.propagate_set_commands = 'local'")
            build = {}
            for _, am in ENGINES:
                table = f"items_{am}"
                conn.execute(f"CREATE TABLE {table} (id bigint, embedding vector({args.dim}))")
                conn.execute(f"SELECT create_distributed_table('{table}', 'id')")
                data.load(conn, table, rows, create=False)
                t = time.perf_counter()
                conn.execute(f"CREATE INDEX {table}_idx ON {table} USING {am} "
                             "(embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)")
                build[am] = time.perf_counter() - t
            print("index build over all shards: " + ", ".join(
                f"{name} {build[am]:.1f} s" for name, am in ENGINES))
            print(f"\n{'engine':15s} {'ef_search':>9s} {'recall@10':>9s} "
                  f"{'p50 ms':>7s} {'p95 ms':>7s} {'queries/s':>9s}")
            for ef in (10, 20, 40, 80):
                for name, am in ENGINES:
                    table = f"items_{am}"
                    if am == "streamhnsw":
                        conn.execute(f"ALTER INDEX {table}_idx SET (ef_search = {ef})")
                    _search(conn, table, queries[:20], am, ef)      # warm-up
                    found, times = _search(conn, table, queries, am, ef)
                    times.sort()
                    print(f"{name:15s} {ef:9d} {data.recall(found, truth, K):9.3f} "
                          f"{statistics.median(times):7.2f} "
                          f"{times[int(0.95 * (len(times) - 1))]:7.2f} "
                          f"{len(times) / (sum(times) / 1000):9.0f}")
    print("\nOne client through the coordinator; every query runs on every shard. "
          "streamhnsw's ef_search is its index option, pgvector's SET LOCAL (README, "
          "Scaling out with Citus).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
