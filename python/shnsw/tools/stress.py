#!/usr/bin/env python3
"""Stress streamhnsw's writes and durability for as long as asked.

Alternates two phases on one throwaway cluster until --seconds have passed
or --cycles crash cycles have run (whichever comes first; 0 = no limit):

  crash   randomized crash-and-recover cycles (CREATE INDEX, inserts,
          VACUUM; kill -9 of the postmaster, of every server process, or an
          immediate shutdown at a random moment), each checked after recovery;
  load    the concurrent workload (inserters, searchers, a deleter, a VACUUM
          loop) for --load-seconds, every search checked, then the final
          state checked.

Every invariant violation is printed as it is found, tagged with the phase,
and summarized at the end (grouped, with the bugs already reported named).
Exit status 0 when nothing was violated, 1 otherwise.

    PYTHONPATH=python:test .venv/bin/python -m shnsw.tools.stress --seconds 3600
    PYTHONPATH=python:test .venv/bin/python -m shnsw.tools.stress --cycles 200 --seed 7
"""

from __future__ import annotations

import argparse
import collections
import logging
import random
import sys
import time

from ..cluster import Cluster
from . import HARNESS_MISSING

try:
    from harness.durability import (OPS, CrashCycles, Model, Workload, copy_rows,
                                    check_index, known_bug)
except ImportError:
    sys.exit(HARNESS_MISSING.replace("NAME", "stress"))

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shnsw.tools.stress", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600, help="total time budget (0: none)")
    ap.add_argument("--cycles", type=int, default=0, help="stop after this many crash cycles (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--rows", type=int, default=5000, help="rows kept in the tables, about")
    ap.add_argument("--crash-batch", type=int, default=12, help="crash cycles per crash phase")
    ap.add_argument("--load-seconds", type=float, default=30, help="length of each load phase")
    ap.add_argument("--no-load", action="store_true", help="crash cycles only")
    ap.add_argument("--no-crash", action="store_true", help="concurrent workload only")
    ap.add_argument("--ef-search", type=int, default=1000,
                    help="ef_search of the exact-match checks (default 1000; 0: the server's)")
    ap.add_argument("--metric", choices=["l2", "cosine"], default="l2",
                    help="operator class of the load phase's index")
    ap.add_argument("--inserters", type=int, default=2)
    ap.add_argument("--searchers", type=int, default=2)
    ap.add_argument("--kinds", default="build,insert,vacuum", help="crash cycle kinds")
    ap.add_argument("--how", default="kill9,kill9all,immediate", help="ways to crash")
    ap.add_argument("--keep", action="store_true", help="keep the cluster directory")
    ap.add_argument("--quiet", action="store_true", help="print violations only")
    args = ap.parse_args(argv)
    if args.no_load and args.no_crash:
        ap.error("nothing to do")
    # psycopg warns when it cannot roll back on a connection we killed
    logging.getLogger("psycopg").setLevel(logging.ERROR)

    t0 = time.monotonic()
    violations: list[tuple[str, str]] = []

    def log(msg):
        if not args.quiet:
            print(f"[{time.monotonic() - t0:8.1f}s] {msg}", flush=True)

    def report(phase, vs):
        for v in vs:
            violations.append((phase, v))
            kb = known_bug(v)
            print(f"VIOLATION [{phase}]{' (known: ' + kb + ')' if kb else ''}: {v}", flush=True)

    def time_left():
        return not args.seconds or time.monotonic() - t0 < args.seconds

    ef = args.ef_search or None
    rng = random.Random(args.seed)
    with Cluster(name="shnsw-stress") as c:
        if args.keep:
            c._own_dir = False
        log(f"cluster at {c.dir}, port {c.port}")
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        cc = CrashCycles(c, seed=args.seed, dim=args.dim, initial=min(2000, args.rows),
                         max_rows=args.rows, ef_search=ef, log=log)
        cc.KINDS = tuple(k for k in args.kinds.split(",") if k)
        cc.HOWS = tuple(h for h in args.how.split(",") if h)
        if not args.no_crash:
            cc.setup()
        loads = 0
        while time_left() and not (args.cycles and cc.cycles >= args.cycles):
            if not args.no_crash:
                for _ in range(args.crash_batch):
                    if not time_left() or (args.cycles and cc.cycles >= args.cycles):
                        break
                    try:
                        report("crash", cc.run_cycle())
                    except Exception as e:  # noqa: BLE001 - the harness itself failed
                        report("crash", [f"cycle {cc.cycles} aborted: {type(e).__name__}: {e}"])
                        if not c.running:
                            c.start()
            if args.no_load or not time_left():
                continue
            loads += 1
            table = "load_t"
            model = Model(dim=args.dim, seed=args.seed * 1000 + loads)
            with c.connect() as conn:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
                conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, "
                             f"embedding vector({args.dim}))")
                ids = model.alloc(min(3000, args.rows))
                g = model.begin_insert(ids)
                copy_rows(conn, table, np.stack([model.vec(i) for i in ids]), ids[0])
                model.end_insert(g, True)
                conn.execute(f"CREATE INDEX {table}_idx ON {table} USING streamhnsw "
                             f"(embedding {OPS[args.metric][1]})")
            secs = args.load_seconds
            if args.seconds:
                secs = max(1.0, min(secs, args.seconds - (time.monotonic() - t0)))
            w = Workload(c, table, f"{table}_idx", args.metric, model, seed=rng.randrange(1 << 30),
                         inserters=args.inserters, searchers=args.searchers, deleters=1,
                         vacuum_every=1.5, ef_search=ef, max_rows=args.rows)
            w.run_for(secs)
            vs = list(model.violations)
            with c.connect() as conn:
                conn.execute(f"VACUUM {table}")
                vs += check_index(conn, table, f"{table}_idx", args.metric, model, rng, probes=200,
                                  ef_search=ef)
            log(f"load {loads}: {secs:.0f}s, {w.counts}, {len(model.committed)} rows, "
                f"{'OK' if not vs else str(len(vs)) + ' violations'}")
            report(f"load {loads}", vs)
            if args.no_crash:
                continue

    print(f"\n{cc.cycles} crash cycles {dict(cc.stats)}, {loads} load phases, "
          f"{time.monotonic() - t0:.0f}s, {len(violations)} violations")
    groups = collections.Counter(known_bug(v) or "NOT KNOWN" for _, v in violations)
    for g, n in groups.most_common():
        print(f"  {n:5d}  {g}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
