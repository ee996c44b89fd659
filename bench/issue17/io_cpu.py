"""CPU a cold query costs the backend and the I/O workers.

On the kept dev-loop server (devloop.py), for one engine: before each query
its relations are evicted from shared buffers (and, with --drop-os-cache,
from the OS cache), the shim injects --delay us per read, and the backend's
and every I/O worker's CPU time (/proc/PID/schedstat) are read around the
query. Prints medians: latency, backend CPU, the workers' CPU together, the
backend's context switches. With io_method = worker a read costs an I/O
worker a wake-up, the read and the completion; on a machine with few cores
that CPU, not the storage, can bound a cold query (README.md, eleventh
pass).

    SHNSW_DEVLOOP_DIR=/tmp/sent100k PYTHONPATH=python:bench/issue17 \\
        .venv/bin/python bench/issue17/io_cpu.py --engine streamhnsw --delay 0

Needs to read other users' /proc entries (root, or the server's user).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from devloop import ENGINES, STATE, cluster_and_shim  # noqa: E402

from shnsw.bench import pg  # noqa: E402


def cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def switches(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return sum(int(line.split(":")[1]) for line in f if "ctxt_switches" in line)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", default="streamhnsw", choices=sorted(ENGINES))
    ap.add_argument("--delay", type=int, default=300, help="us injected per read")
    ap.add_argument("--eic", type=int, default=16)
    ap.add_argument("--ef", type=int, default=40)
    ap.add_argument("--queries", type=int, default=12)
    ap.add_argument("--drop-os-cache", action="store_true")
    a = ap.parse_args(argv)
    c, shim = cluster_and_shim(False)
    eng = ENGINES[a.engine]
    lits = pg.literals(np.load(STATE / "queries.npy")[:a.queries])
    conn = c.connect()
    conn.autocommit = True
    pg.apply_gucs(conn, eng.session_gucs(a.ef))
    pg.apply_gucs(conn, {"effective_io_concurrency": a.eic})
    evict = pg.Evictor(conn, c.datadir, eng, os_cache=a.drop_os_cache)
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    workers = [r[0] for r in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'io worker'").fetchall()]
    sql = pg.query_sql(eng, "vector", "cosine", 10)
    lat, bcpu, wcpu, sw = [], [], [], []
    for lit in lits:
        evict(conn)
        shim.set(enabled=True, delay_us=a.delay)
        b0, w0, s0 = cpu_ns(pid), sum(cpu_ns(w) for w in workers), switches(pid)
        t = time.perf_counter()
        conn.execute(sql, (lit,)).fetchall()
        lat.append((time.perf_counter() - t) * 1e3)
        bcpu.append((cpu_ns(pid) - b0) / 1e6)
        wcpu.append((sum(cpu_ns(w) for w in workers) - w0) / 1e6)
        sw.append(switches(pid) - s0)
        shim.set(enabled=False)
    m = statistics.median
    print(f"{a.engine}, delay {a.delay} us, eic {a.eic}, OS cache "
          f"{'dropped' if a.drop_os_cache else 'kept'}, {len(lits)} queries: p50 {m(lat):.1f} ms, "
          f"backend CPU {m(bcpu):.1f} ms, I/O workers' CPU {m(wcpu):.1f} ms ({len(workers)} workers), "
          f"backend context switches {m(sw):.0f}")
    conn.close()


if __name__ == "__main__":
    sys.exit(main())
