"""Index size and recall under steady delete + insert churn, streamhnsw beside
pgvector's hnsw in one run on one server (the project's target "index size under
steady delete+insert churn: <= 1.0x pgvector's; bounded").

    .venv/bin/python -m shnsw.bench.churn [--set sentences] [--base 30000] [--frac 0.1] \\
        [--cycles 8] [--json out.json]

Both engines get identical rows in two tables, cosine, m 16,
ef_construction 64, built on the set's first --base rows. Each cycle
deletes the same random --frac of the live rows from both tables (a seeded
draw), VACUUMs both tables (autovacuum is off), then COPYs in as many new
rows, the set's next unused rows (new ids), into both. After the build and
after each cycle: each index's size (pg_relation_size), streamhnsw's node,
deleted and free slot counts (streamhnsw_metapage), its recall@10 at
ef_search 40 over held-out queries against the exact neighbours among the
rows live at that point, and the seconds the cycle's VACUUM and COPY took.
Sets: sentences (real sentence embeddings 100k x 384, the bench data set;
--base + cycles * frac * base rows must not exceed 100,000) and
clustered768 (synthetic clustered 768-d, cosine). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from .. import data
from ..cluster import Cluster

AMS = ("hnsw", "streamhnsw")
GUC = {"hnsw": "hnsw.ef_search", "streamhnsw": "streamhnsw.ef_search"}
EF = 40


def log(*a, **kw):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def load_set(name: str, need: int):
    if name == "sentences":
        from . import datasets
        ds = datasets.sentences(n_rows=100_000, n_queries=2000, n_inserts=1000, log=log)
        if need > len(ds.rows):
            sys.exit(f"--base and --cycles need {need} rows; the set has {len(ds.rows)}")
        return ds.rows[:need], ds.queries[:500]
    if name == "clustered768":
        return data.clustered(need, 768, seed=21, normalize=True, n_queries=300)
    sys.exit(f"unknown set {name}")


def recall_now(conn, rows, live_ids, queries, lits):
    """recall@10 of each engine at ef_search EF against the live rows' exact
    neighbours."""
    ids = np.array(sorted(live_ids), dtype=np.int64)
    truth = ids[data.ground_truth(rows[ids], queries, 10, "cosine")]
    out = {}
    for am in AMS:
        conn.execute(f"SET {GUC[am]} = {EF}")
        found = [[r[0] for r in conn.execute(
            f"SELECT id FROM c_{am} ORDER BY embedding <=> %s::vector LIMIT 10", (q,))]
            for q in lits]
        out[am] = data.recall(found, truth, 10)
    return out


def sizes(conn):
    return {am: conn.execute(f"SELECT pg_relation_size('c_{am}_idx')").fetchone()[0]
            for am in AMS}


def meta(conn):
    """streamhnsw's node, deleted and free slot counts (streamhnsw_metapage)."""
    r = conn.execute("SELECT node_count, deleted_count, free_count "
                     "FROM streamhnsw_metapage('c_streamhnsw_idx')").fetchone()
    return {"nodes": r[0], "deleted": r[1], "free": r[2]}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench.churn", description=__doc__.split("\n")[0])
    ap.add_argument("--set", default="sentences")
    ap.add_argument("--base", type=int, default=30000)
    ap.add_argument("--frac", type=float, default=0.1)
    ap.add_argument("--cycles", type=int, default=8)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    per_cycle = int(args.base * args.frac)
    rows, queries = load_set(args.set, args.base + args.cycles * per_cycle)
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    lits = [data.vector_literal(q) for q in queries]
    rng = np.random.default_rng(args.seed)
    settings = {"shared_buffers": "2GB", "maintenance_work_mem": "2GB", "jit": "off",
                "max_parallel_maintenance_workers": "0", "autovacuum": "off"}
    results = {"set": args.set, "rows": args.base, "dim": int(rows.shape[1]),
               "frac": args.frac, "cycles": []}
    with Cluster(name="shnsw-churn", settings=settings) as cl:
        cl.execute("CREATE EXTENSION streamhnsw CASCADE")
        with cl.connect() as conn:
            for am in AMS:
                data.load(conn, f"c_{am}", rows[:args.base])
                conn.execute(f"CREATE INDEX c_{am}_idx ON c_{am} USING {am} "
                             "(embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)")
            live = set(range(args.base))
            nxt = args.base
            row = {"cycle": 0, "size": sizes(conn), "meta": meta(conn),
                   "recall": recall_now(conn, rows, live, queries, lits)}
            results["cycles"].append(row)
            log("built", row)
            for c in range(1, args.cycles + 1):
                gone = rng.choice(np.array(sorted(live)), per_cycle, replace=False)
                live -= set(gone.tolist())
                new = np.arange(nxt, nxt + per_cycle)
                nxt += per_cycle
                live |= set(new.tolist())
                vac_s, ins_s = {}, {}
                for am in AMS:
                    conn.execute(f"DELETE FROM c_{am} WHERE id = ANY(%s)", (gone.tolist(),))
                    t = time.perf_counter()
                    conn.execute(f"VACUUM c_{am}")
                    vac_s[am] = round(time.perf_counter() - t, 2)
                    t = time.perf_counter()
                    data.load(conn, f"c_{am}", rows[new], start_id=int(new[0]), create=False)
                    ins_s[am] = round(time.perf_counter() - t, 2)
                row = {"cycle": c, "size": sizes(conn), "meta": meta(conn),
                       "recall": recall_now(conn, rows, live, queries, lits),
                       "vacuum_s": vac_s, "insert_s": ins_s}
                results["cycles"].append(row)
                log("cycle", row)
                if args.json:
                    Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"{args.set} {args.base} x {rows.shape[1]}, cosine, m 16, ef_construction 64; "
          f"each cycle deletes and inserts {per_cycle} rows ({args.frac:.0%}), VACUUM between; "
          f"recall@10 at ef_search {EF}; streamhnsw's nodes / deleted / free slots from "
          "streamhnsw_metapage()\n")
    print("| cycle | pgvector MB | streamhnsw MB | ratio | pgvector recall | streamhnsw recall "
          "| VACUUM s (pgv / sh) | COPY s (pgv / sh) | nodes / deleted / free |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results["cycles"]:
        s, rc = r["size"], r["recall"]
        v = r.get("vacuum_s", {})
        i = r.get("insert_s", {})
        print(f"| {r['cycle']} | {s['hnsw'] / 2**20:.1f} | {s['streamhnsw'] / 2**20:.1f} | "
              f"{s['streamhnsw'] / s['hnsw']:.3f} | {rc['hnsw']:.4f} | {rc['streamhnsw']:.4f} | "
              f"{v.get('hnsw', '-')} / {v.get('streamhnsw', '-')} | "
              f"{i.get('hnsw', '-')} / {i.get('streamhnsw', '-')} | "
              f"{r['meta']['nodes']} / {r['meta']['deleted']} / {r['meta']['free']} |")


if __name__ == "__main__":
    main()
