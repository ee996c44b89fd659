"""Distance filters side by side with pgvector's hnsw, in one run on one server.

    .venv/bin/python -m shnsw.bench.ranges [--set sentences] [--radii 0.2,0.3,0.4,0.5] [--queries 100] \
        [--orders default,relaxed]

pgvector documents `WHERE embedding <=> q < r ORDER BY embedding <=> q LIMIT k`
as the way to combine a distance filter with its index; a similarity
threshold (`1 - (embedding <=> q) > s`) is the same filter. For each radius
both engines run the held-out queries in both forms, at their defaults
(pgvector: ef_search 40, iterative scans off; streamhnsw: ef_search 40,
strict order), warm, one client, and the table reports per engine the rows
returned, the rows within r that an exact scan finds (capped at k), and the
client-side latency (p50 and p90). `--orders relaxed` runs the same with
both engines' iterative scans in relaxed order (`hnsw.iterative_scan` and
`streamhnsw.iterative_scan = relaxed_order`), as pgvector recommends for
filtered queries. Sets are shnsw.bench.recall's (cosine ones: sentences,
glove, cos128, sentences30k).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from .filters import pct
from .recall import load_set
from .. import data
from ..cluster import Cluster

AMS = ("hnsw", "streamhnsw")
K = 10


def exact_within(rows: np.ndarray, queries: np.ndarray, r: float) -> list:
    """Rows within cosine distance r of each query, capped at K."""
    x = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    out = []
    for q in queries:
        d = 1.0 - x @ (q / np.linalg.norm(q))
        out.append(min(K, int(np.count_nonzero(d < r))))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench.ranges", description=__doc__.split("\n")[0])
    ap.add_argument("--set", default="sentences")
    ap.add_argument("--radii", default="0.2,0.3,0.4,0.5")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--orders", default="default",
                    help="comma-separated: default (both engines' defaults), relaxed")
    args = ap.parse_args(argv)
    rows, queries, metric = load_set(args.set)
    if metric != "cosine":
        sys.exit("range_compare measures cosine sets")
    queries = queries[:args.queries]
    lits = [data.vector_literal(q) for q in queries]
    settings = {"shared_buffers": "2GB", "maintenance_work_mem": "2GB", "jit": "off",
                "max_parallel_maintenance_workers": "0"}
    with Cluster(name="shnsw-range", settings=settings,
                 connect_options={"prepare_threshold": None}) as cl:
        cl.execute("CREATE EXTENSION streamhnsw CASCADE")
        with cl.connect() as conn:
            for am in AMS:
                t = f"rc_{am}"
                data.load(conn, t, rows)
                conn.execute(f"CREATE INDEX ON {t} USING {am} (embedding vector_cosine_ops) "
                             "WITH (m = 16, ef_construction = 64)")
                conn.execute(f"VACUUM ANALYZE {t}")
            print(f"| {args.set}: order | radius | form | exact rows (capped at {K}) | "
                  "pgvector rows | pgvector p50 / p90 ms | streamhnsw rows | "
                  "streamhnsw p50 / p90 ms |")
            print("|---|---|---|---|---|---|---|---|")
            for order, r in ((o, float(x)) for o in args.orders.split(",")
                             for x in args.radii.split(",")):
                if order not in ("default", "relaxed"):
                    sys.exit(f"unknown order {order}")
                value = "relaxed_order" if order == "relaxed" else "DEFAULT"
                conn.execute(f"SET hnsw.iterative_scan = {value}")
                conn.execute(f"SET streamhnsw.iterative_scan = {value}")
                exact = sum(exact_within(rows, queries, r))
                forms = (("d < r", "embedding <=> %(q)s::vector < %(r)s"),
                         ("1 - d > 1 - r", "1 - (embedding <=> %(q)s::vector) > 1 - %(r)s"))
                for label, cond in forms:
                    line = f"| {order} | {r} | `{label}` | {exact} |"
                    for am in AMS:
                        sql = (f"SELECT id FROM rc_{am} WHERE {cond} "
                               f"ORDER BY embedding <=> %(q)s::vector LIMIT {K}")
                        for q in lits[:10]:     # warm
                            conn.execute(sql, {"q": q, "r": r}).fetchall()
                        ms, n = [], 0
                        for q in lits:
                            t0 = time.perf_counter()
                            n += len(conn.execute(sql, {"q": q, "r": r}).fetchall())
                            ms.append((time.perf_counter() - t0) * 1000)
                        line += f" {n} | {statistics.median(ms):.2f} / {pct(ms, 0.9):.2f} |"
                    print(line, flush=True)


if __name__ == "__main__":
    main()
