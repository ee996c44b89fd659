"""CREATE INDEX time, memory and recall at several maintenance_work_mem sizes.

Loads seeded clustered data once, then for each maintenance_work_mem builds
a streamhnsw index and a pgvector hnsw index (serial builds:
max_parallel_maintenance_workers = 0; m 16, ef_construction 64 for both),
each in a fresh backend, while a thread samples the backend's private memory
(RssAnon in /proc/<pid>/status, every millisecond). Prints one row per
build: time, whether the graph spilled (rows built in memory), peak RssAnon
growth, VmHWM growth (includes the shared buffers the backend touched) and
recall@10 at ef_search 40 over the held-out queries.

    PYTHONPATH=python .venv/bin/python tools/build_memory.py \
        --rows 50000 --dim 128 --mwm 1MB,8MB,64MB,1GB

Needs to read the server's /proc entries (the same machine, as root or as
the server's user).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from shnsw import data  # noqa: E402
from shnsw.bench.pg import MemorySampler, status_kb  # noqa: E402
from shnsw.cluster import Cluster  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--mwm", default="1MB,8MB,64MB,1GB")
    ap.add_argument("--am", default="streamhnsw,hnsw")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--workers", default="0",
                    help="max_parallel_maintenance_workers, or 'default' to keep the server's (2)")
    args = ap.parse_args()

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
