"""How much memory does VACUUM of a streamhnsw index take?

Builds an index on seeded clustered data, deletes a fraction of the rows,
and runs VACUUM at a given maintenance_work_mem while a thread samples the
backend's private memory (RssAnon in /proc/<pid>/status, every millisecond: the
backend's own allocations, not the shared buffers it maps). Prints the
backend's private memory before VACUUM, its peak during VACUUM, and the
difference, with the settings.

    .venv/bin/python -m shnsw.bench.vacuum_memory \
        --rows 300000 --dim 16 --delete 0.1 --mwm 8MB

Needs to read the server's /proc entries (the same machine, as root or as
the server's user).
"""

from __future__ import annotations

import argparse
import time

from .. import data
from .pg import MemorySampler, status_kb
from ..cluster import Cluster


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench.vacuum_memory", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300000)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--delete", type=float, default=0.1)
    ap.add_argument("--mwm", default="8MB")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args(argv)

    with Cluster(name="shnsw-vacmem", settings={"shared_buffers": "512MB",
                                                "maintenance_work_mem": "1GB",
                                                "autovacuum": "off",
                                                "max_wal_size": "4GB"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        rows, _ = data.clustered(args.rows, args.dim, seed=args.seed, n_queries=1)
        with c.connect() as conn:
            t = time.time()
            data.load(conn, "vm", rows)
            conn.execute("CREATE INDEX vm_idx ON vm USING streamhnsw (embedding vector_l2_ops)")
            build_s = time.time() - t
            every = max(2, round(1 / args.delete)) if args.delete > 0 else 0
            ndel = 0
            if every:
                ndel = conn.execute(f"DELETE FROM vm WHERE id % {every} = 0").rowcount
            size = conn.execute("SELECT pg_size_pretty(pg_relation_size('vm_idx'))").fetchone()[0]
        # a fresh backend, whose memory the load and the DELETE did not grow
        with c.connect() as conn:
            conn.execute(f"SET maintenance_work_mem = '{args.mwm}'")
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            before = status_kb(pid)["RssAnon"]
            with MemorySampler(pid, every=0.001) as mem:
                t = time.time()
                conn.execute("VACUUM (PARALLEL 0) vm")  # in this backend, not a worker
                vac_s = time.time() - t
            peak = mem.peak_private // 1024
            after = conn.execute("SELECT deleted_count FROM streamhnsw_metapage('vm_idx')").fetchone()[0]
    print(f"rows={args.rows} dim={args.dim} m=16 deleted={ndel} "
          f"(every {every}th row) index={size} build={build_s:.0f}s")
    print(f"VACUUM at maintenance_work_mem={args.mwm}: {vac_s:.1f}s, deleted_count after={after}")
    print(f"backend private memory (RssAnon): before={before} kB peak={peak} kB "
          f"growth={peak - before} kB")


if __name__ == "__main__":
    main()
