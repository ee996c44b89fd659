"""CREATE INDEX time with and without parallel workers, streamhnsw beside
pgvector's hnsw, on the benchmark's data sets.

For each data set, maintenance_work_mem and max_parallel_maintenance_workers
it builds both indexes (m 16, ef_construction 64, each in a fresh backend;
unless --table-workers sets the table's parallel_workers, PostgreSQL plans
the workers as it would for a user: at maintenance_work_mem 64MB that is
one worker, since it wants 32MB per process, and none for a table whose
vectors are TOASTed, such as 768-d ones) and prints, per build: seconds, the
1-minute load average at its end, the workers PostgreSQL planned and
(streamhnsw) launched, whether the graph spilled, recall@10 at ef_search 40
(and at the --ef values) over the held-out queries, and (streamhnsw) the
seconds of each phase of the build as the leader saw them (DEBUG1).
--repeat N builds every combination N times, round after round, on the
same table; --am streamhnsw-floats is streamhnsw linking its graph on float
vectors instead of halves (streamhnsw.debug_build_floats), for A/B runs.

    .venv/bin/python -m shnsw.bench.build_parallel --sets sentences,synthetic768 --mwm 64MB,1GB --workers 0,2
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import time
from pathlib import Path

from .. import data
from . import datasets
from ..cluster import Cluster

PLANNED = re.compile(r"with request for (\d+) parallel workers")
LAUNCHED = re.compile(r"streamhnsw: (\d+) parallel workers launched")
PHASES = re.compile(r"build phases: (.*)")
LINKING = re.compile(r"(\d+) held-up nodes linked again in parallel and (\d+) alone "
                     r"\(([\d.]+) s linking, ([\d.]+) s alone\)")
SPILL = re.compile(r"no longer fits into maintenance_work_mem after (\d+) (rows|tuples)")


def load_set(name, rows=100_000, queries=200):
    if name == "sentences":
        return datasets.sentences(n_rows=100_000, n_queries=2000, n_inserts=1000)
    if name == "synthetic768":
        # the stored set with 200 queries, or 1,000 (and 1,000 inserts)
        if queries > 200:
            return datasets.synthetic(rows, 768, "cosine", n_queries=1000, n_inserts=1000)
        return datasets.synthetic(rows, 768, "cosine", n_queries=200, n_inserts=10)
    raise SystemExit(f"unknown set {name}")


def recall_at(conn, queries, truth, ef):
    conn.execute(f"SET streamhnsw.ef_search = {ef}")
    conn.execute(f"SET hnsw.ef_search = {ef}")
    sql = "SELECT id FROM bp ORDER BY embedding <=> %s::vector LIMIT 10"
    ids = [[r[0] for r in conn.execute(sql, (data.vector_literal(q),)).fetchall()]
           for q in queries]
    return round(data.recall(ids, truth, 10), 4)


def one_build(c, am, mwm, workers, queries, truth, efs=(40,)):
    notices = []
    label = am
    # streamhnsw-floats: streamhnsw linking on float vectors where it would
    # link on halves (the developer setting streamhnsw.debug_build_floats)
    floats = am == "streamhnsw-floats"
    if floats:
        am = "streamhnsw"
    with c.connect() as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        if floats:
            conn.execute("SET streamhnsw.debug_build_floats = on")
        conn.execute(f"SET max_parallel_maintenance_workers = {workers}")
        conn.execute(f"SET maintenance_work_mem = '{mwm}'")
        conn.execute("SET client_min_messages = debug1")
        t = time.perf_counter()
        conn.execute(f"CREATE INDEX bp_idx ON bp USING {am} (embedding vector_cosine_ops)")
        secs = time.perf_counter() - t
        conn.execute("RESET client_min_messages")
        rec = recall_at(conn, queries, truth, 40)
        more = {ef: recall_at(conn, queries, truth, ef) for ef in efs if ef != 40}
        size = conn.execute("SELECT pg_relation_size('bp_idx')").fetchone()[0]
        conn.execute("DROP INDEX bp_idx")
    planned = [int(m.group(1)) for n in notices for m in [PLANNED.search(n)] if m]
    launched = [int(m.group(1)) for n in notices for m in [LAUNCHED.search(n)] if m]
    spill = [m.group(1) for n in notices for m in [SPILL.search(n)] if m]
    # the leader's phases (streamhnsw, DEBUG1): where a parallel build's time goes
    phases = {}
    for n in notices:
        if (m := PHASES.search(n)):
            for part in m.group(1).split(", "):
                what, took, _ = part.rsplit(" ", 2)
                phases[what] = float(took)
        if (m := LINKING.search(n)):
            phases["relinked in parallel"] = int(m.group(1))
            phases["relinked alone"] = int(m.group(2))
            phases["link and relink (all processes)"] = float(m.group(3))
            phases["relink alone (leader)"] = float(m.group(4))
    load = os.getloadavg()[0]
    return {"am": label, "mwm": mwm, "max_workers": workers, "secs": round(secs, 2),
            "load1": round(load, 2),
            "planned": planned[0] if planned else 0,
            "launched": launched[0] if launched else None,
            "in_memory_rows": spill[0] if spill else "all",
            "codes": any("building on SQ8 codes" in n for n in notices),
            "recall10": rec, **({"recall10_at_ef": more} if more else {}),
            "size_mb": round(size / 2**20, 1),
            **({"phases_s": phases} if phases else {})}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench.build_parallel", description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="sentences,synthetic768")
    ap.add_argument("--mwm", default="64MB,1GB")
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--am", default="hnsw,streamhnsw",
                    help="access methods built one after the other, in this order; "
                         "streamhnsw-floats is streamhnsw with streamhnsw.debug_build_floats on "
                         "(its graph linked on float vectors, not halves)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="build every combination this many times, one round after the other, "
                         "on the same table (pairs run back to back)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--ef", default="40",
                    help="ef_search values recall@10 is measured at besides 40 (recall10)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--rows", type=int, default=100_000,
                    help="rows of synthetic768 (sentences is always the cached 100k set)")
    ap.add_argument("--table-workers", type=int, default=None,
                    help="set the table's parallel_workers (a table whose vectors are TOASTed, "
                         "as 768-d ones are, is too small for PostgreSQL to plan workers)")
    args = ap.parse_args(argv)
    results = []
    with Cluster(name="shnsw-buildpar", settings={"shared_buffers": "1GB",
                                                 "autovacuum": "off",
                                                 "max_wal_size": "8GB"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        for name in args.sets.split(","):
            ds = load_set(name, args.rows, args.queries)
            queries = ds.queries[:args.queries]
            truth = ds.truth[:args.queries, :10]
            with c.connect() as conn:
                data.load(conn, "bp", ds.rows)
                conn.execute("VACUUM bp")
                if args.table_workers is not None:
                    conn.execute(f"ALTER TABLE bp SET (parallel_workers = {args.table_workers})")
            combos = itertools.product(range(args.repeat), args.mwm.split(","),
                                       args.workers.split(","), args.am.split(","))
            for rnd, mwm, workers, am in combos:
                r = one_build(c, am, mwm, int(workers), queries, truth,
                              [int(e) for e in args.ef.split(",")])
                r["set"] = ds.name
                r["round"] = rnd
                results.append(r)
                print(json.dumps(r), flush=True)
                if args.out:
                    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
