"""Recall of a streamhnsw index's graph itself, searched on exact distances:
tells a graph that misses neighbours from a scan (codes, bounds) that does.

    .venv/bin/python -m shnsw.tools.graph_recall [--rows 5000] \\
        [--dim 768] [--clients 2] [--efs 10,20,40]

On a throwaway cluster, the same clustered rows (cosine, seed 14, the
`cos768-ins` rows of shnsw.bench.recall by default) go into two
tables: one indexed while empty and filled by --clients sessions inserting
one row per statement, one built by CREATE INDEX after a COPY. For each
index the layer-0 and upper-layer lists are read from its file
(shnsw.tools.graphdump) and every query is searched as pgvector searches, on
exact cosine distances: greedy on the upper layers from the entry point,
then a beam of width ef_search on layer 0. Prints recall@10 of that search
and of the index's own scan (ORDER BY ... LIMIT 10 at the same
streamhnsw.ef_search) per ef_search, and the mean layer-0 list length.
"""

from __future__ import annotations

import argparse
import heapq
import threading

import numpy as np

from .graphdump import read_graph
from .. import data
from ..cluster import Cluster


def exact_search(g, unit, ref_row, q, ef):
    """pgvector's search order on exact cosine distances over graph g."""
    def dist(r):
        return 1.0 - float(unit[ref_row[r]] @ q)

    ep = g["entry"]
    de = dist(ep)
    for layer in range(g["level"][ep], 0, -1):
        changed = True
        while changed:
            changed = False
            for n in g["upper"].get((ep, layer), []):
                dn = dist(n)
                if dn < de:
                    ep, de, changed = n, dn, True
    visited = {ep}
    cand = [(de, ep)]
    best = [(-de, ep)]
    while cand:
        d, r = heapq.heappop(cand)
        if len(best) >= ef and d > -best[0][0]:
            break
        for n in g["nbrs"][r]:
            if n in visited or n not in ref_row:
                continue
            visited.add(n)
            dn = dist(n)
            if len(best) < ef or dn < -best[0][0]:
                heapq.heappush(cand, (dn, n))
                heapq.heappush(best, (-dn, n))
                if len(best) > ef:
                    heapq.heappop(best)
    return [ref_row[r] for _, r in sorted((-x, r) for x, r in best)][:10]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m shnsw.tools.graph_recall", description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--efs", default="10,20,40")
    args = ap.parse_args(argv)
    efs = [int(e) for e in args.efs.split(",")]
    rows, queries = data.clustered(args.rows, args.dim, seed=14, normalize=True,
                                   n_queries=300)
    truth = data.ground_truth(rows, queries, 10, "cosine")
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    lits = [data.vector_literal(q) for q in queries]
    settings = {"shared_buffers": "1GB", "maintenance_work_mem": "1GB", "jit": "off",
                "max_parallel_maintenance_workers": "0", "autovacuum": "off"}
    with Cluster(name="shnsw-graph-recall", settings=settings) as cl:
        cl.execute("CREATE EXTENSION streamhnsw CASCADE")
        with cl.connect() as conn:
            conn.execute(f"CREATE TABLE g_ins (id bigint, embedding vector({args.dim}))")
            conn.execute("CREATE INDEX g_ins_idx ON g_ins USING streamhnsw "
                         "(embedding vector_cosine_ops)")

            def insert(part):
                with cl.connect() as c:
                    for i in part:
                        c.execute("INSERT INTO g_ins VALUES (%s, %s)",
                                  (int(i), data.vector_literal(rows[i])))

            order = np.arange(args.rows)
            th = [threading.Thread(target=insert, args=(order[k::args.clients],))
                  for k in range(args.clients)]
            for t in th:
                t.start()
            for t in th:
                t.join()
            data.load(conn, "g_bld", rows)
            conn.execute("CREATE INDEX g_bld_idx ON g_bld USING streamhnsw "
                         "(embedding vector_cosine_ops)")
            print(f"{args.rows} x {args.dim} clustered (cosine), recall@10 over "
                  f"{len(queries)} queries\n")
            print("| index | search | " + " | ".join(f"ef {e}" for e in efs)
                  + " | mean layer-0 list |")
            print("| --- | --- | " + " | ".join("---" for _ in efs) + " | --- |")
            for table, what in (("g_ins", f"inserted ({args.clients} sessions)"),
                                ("g_bld", "built")):
                g = read_graph(conn, f"{table}_idx")
                tid_row = {}
                for ctid, i in conn.execute(f"SELECT ctid::text, id FROM {table}"):
                    b, o = ctid.strip("()").split(",")
                    tid_row[(int(b), int(o))] = i
                ref_row = {r: tid_row[t] for r, t in g["tid"].items() if t in tid_row}
                deg = np.mean([len(v) for v in g["nbrs"].values()])
                ex, sc = [], []
                for ef in efs:
                    ex.append(data.recall([exact_search(g, unit, ref_row, q, ef)
                                           for q in queries], truth, 10))
                    conn.execute(f"SET streamhnsw.ef_search = {ef}")
                    sc.append(data.recall([[r[0] for r in conn.execute(
                        f"SELECT id FROM {table} ORDER BY embedding <=> %s::vector LIMIT 10",
                        (q,))] for q in lits], truth, 10))
                print(f"| {what} | exact distances, graph only | "
                      + " | ".join(f"{x:.3f}" for x in ex) + f" | {deg:.1f} |")
                print(f"| {what} | the index's scan | "
                      + " | ".join(f"{x:.3f}" for x in sc) + " | |")


if __name__ == "__main__":
    main()
