"""Where should re-ranking read exact vectors: the index's copies or the heap?

Measures, in one run on one server, streamhnsw with
streamhnsw.rerank_source = index and = heap (and pgvector's hnsw beside
them): hot latency, cold latency on local storage, cold latency with an
injected read delay, storage reads per query, recall@10, index size.

    PYTHONPATH=python .venv/bin/python -m shnsw.experiments.rerank_source \
        --rows 50000 --dim 768 --metric cosine

Prints a Markdown table; the settings are printed above it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from .. import data
from ..bench.pg import Engine, Evictor
from ..bench.shim import Shim, diff
from ..cluster import Cluster

SETTINGS = {"shared_buffers": "2GB", "maintenance_work_mem": "2GB", "io_method": "worker",
            "io_workers": 8, "effective_io_concurrency": 16, "jit": "off",
            "max_parallel_maintenance_workers": 0, "max_wal_size": "8GB"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--metric", default="cosine", choices=["cosine", "l2"])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--cold-queries", type=int, default=30)
    ap.add_argument("--delay-us", type=int, default=300)
    ap.add_argument("--ef", type=int, default=40)
    args = ap.parse_args(argv)
    op = "<=>" if args.metric == "cosine" else "<->"
    opclass = f"vector_{args.metric}_ops"
    rows, queries = data.clustered(args.rows, args.dim, seed=42, n_queries=args.queries,
                                   normalize=args.metric == "cosine")
    truth = data.ground_truth(rows, queries, 10, args.metric)
    shim = Shim.create()
    print(f"{args.rows} x {args.dim} clustered ({args.metric}), m=16, ef_construction=64, "
          f"ef_search={args.ef}, k=10; settings {SETTINGS}; injected delay {args.delay_us} us")
    out = []
    c = Cluster(name="shnsw-rerank", settings=SETTINGS)
    c.init()
    c.server_env = shim.server_env(c.datadir / "base")
    with c:
        with c.connect() as conn:
            conn.execute("CREATE EXTENSION streamhnsw CASCADE")
            conn.execute("CREATE EXTENSION pg_buffercache")
            conn.execute("CREATE EXTENSION pg_prewarm")
            engines = []
            for am in ("hnsw", "streamhnsw"):
                table = f"t_{am}"
                data.load(conn, table, rows)
                t = time.perf_counter()
                conn.execute(f"CREATE INDEX {table}_idx ON {table} USING {am} (embedding {opclass})")
                build = time.perf_counter() - t
                size = conn.execute(f"SELECT pg_relation_size('{table}_idx')").fetchone()[0]
                guc = "hnsw.ef_search" if am == "hnsw" else "streamhnsw.ef_search"
                if am == "hnsw":
                    engines.append((Engine("pgvector hnsw", am, table, f"{table}_idx", guc), {}, build, size))
                else:
                    for src in ("index", "heap"):
                        engines.append((Engine(f"streamhnsw rerank={src}", am, table, f"{table}_idx", guc),
                                        {"streamhnsw.rerank_source": src}, build, size))
            conn.execute("CHECKPOINT")
            for eng, gucs, build, size in engines:
                for k, v in {eng.ef_guc: args.ef, **gucs}.items():
                    conn.execute(f"SET {k} = '{v}'")
                sql = f"SELECT id FROM {eng.table} ORDER BY embedding {op} %s::vector LIMIT 10"
                lits = [data.vector_literal(q) for q in queries]
                # hot
                for rel in (eng.index, eng.table):
                    conn.execute("SELECT pg_prewarm(%s::regclass)", (rel,))
                for lit in lits[:20]:
                    conn.execute(sql, (lit,)).fetchall()
                hot, found = [], []
                for lit in lits:
                    t = time.perf_counter()
                    found.append([r[0] for r in conn.execute(sql, (lit,)).fetchall()])
                    hot.append(time.perf_counter() - t)
                rec = data.recall(found, truth, 10)
                # cold, then cold + delay
                ev = Evictor(conn, c.datadir, eng)
                res = {}
                for label, delay in (("cold", 0), ("delay", args.delay_us)):
                    shim.set(enabled=delay > 0, delay_us=delay)
                    lat, reads = [], []
                    for lit in lits[:args.cold_queries]:
                        ev(conn)
                        before = shim.counters()
                        t = time.perf_counter()
                        conn.execute(sql, (lit,)).fetchall()
                        lat.append(time.perf_counter() - t)
                        reads.append(diff(shim.counters(), before)["reads"])
                    shim.set(enabled=False)
                    res[label] = (statistics.median(lat) * 1e3, statistics.median(reads))
                out.append((eng.label, rec, statistics.median(hot) * 1e3, res["cold"][0],
                            res["delay"][0], res["delay"][1], size / 2**20, build))
                conn.execute("RESET ALL")
    shim.close()
    print()
    print("| engine | recall@10 | hot p50 ms | cold p50 ms | cold+delay p50 ms | reads/query | index MB | build s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in out:
        print(f"| {r[0]} | {r[1]:.3f} | {r[2]:.3f} | {r[3]:.2f} | {r[4]:.1f} | {r[5]:.0f} | {r[6]:.1f} | {r[7]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
