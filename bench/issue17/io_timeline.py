"""Where a cold query's time goes on the I/O workers: a storage timeline.

    PYTHONPATH=python:bench/issue17 .venv/bin/python bench/issue17/io_timeline.py \
        [--queries 3] [--engine streamhnsw] [--eic 16] [--ef 40] [--delay 300]

On devloop.py's kept server (SHNSW_DEVLOOP_DIR), as root (perf record -a):
each query is made cold as `devloop.py run` makes it, then run with the
latency shim on while perf records, system-wide, the shim's sleep
(clock_nanosleep), the read that follows it (pread64) in every process,
and the query's backend's waits (epoll_wait). A read is counted from the
start of its sleep to the end of its pread64, in the process that did it
(with io_method worker, an I/O worker; the backend itself for a
synchronous read, as pgvector's are). Per query it prints the latency,
the reads and their mean time (injected delay plus the disk's own), the
backend's waits and their total, and how many reads were in flight over
the query (sampled every 50 us): with io_method worker a worker performs
one read at a time, so a query whose reads are in flight on every worker
most of the time is bound by its number of reads, not by its chain of
round trips. devloop.py run gives the same queries' medians and EXPLAIN.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import devloop
from shnsw.bench import pg

EVENTS = ("syscalls:sys_enter_clock_nanosleep,syscalls:sys_exit_pread64,"
          "syscalls:sys_enter_epoll_wait,syscalls:sys_exit_epoll_wait")
LINE = re.compile(r"\s*\S+\s+(\d+)\s+\[\d+\]\s+([\d.]+):\s+(\S+):")


def parse(script: str, backend: int) -> tuple[list, list]:
    """(reads, waits) from perf script output: (start ms, end ms) pairs."""
    reads, waits = [], []
    sleeping, waiting = {}, None
    for line in script.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        pid, t, ev = int(m.group(1)), float(m.group(2)) * 1e3, m.group(3)
        if pid == backend and ev.endswith("enter_epoll_wait"):
            waiting = t
        elif pid == backend and ev.endswith("exit_epoll_wait") and waiting is not None:
            waits.append((waiting, t))
            waiting = None
        elif ev.endswith("enter_clock_nanosleep"):
            sleeping[pid] = t
        elif ev.endswith("exit_pread64") and pid in sleeping:
            reads.append((sleeping.pop(pid), t))
    return sorted(reads), waits


def in_flight(reads: list, t0: float, t1: float, step: float = 0.05) -> collections.Counter:
    h = collections.Counter()
    t = t0
    while t < t1:
        h[sum(1 for a, b in reads if a <= t < b)] += 1
        t += step
    return h


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=3)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--engine", default="streamhnsw", choices=sorted(devloop.ENGINES))
    ap.add_argument("--eic", type=int, default=16)
    ap.add_argument("--ef", type=int, default=40)
    ap.add_argument("--delay", type=int, default=300, help="injected us per read")
    a = ap.parse_args(argv)
    if shutil.which("perf") is None:
        print("perf is not installed", file=sys.stderr)
        return 2
    c, shim = devloop.cluster_and_shim(False)
    eng = devloop.ENGINES[a.engine]
    queries = np.load(devloop.STATE / "queries.npy")
    lits = pg.literals(queries[a.offset:a.offset + a.queries])
    conn = c.connect()
    pg.apply_gucs(conn, eng.session_gucs(a.ef, {"effective_io_concurrency": a.eic}))
    evict = pg.Evictor(conn, c.datadir, eng)
    sql = pg.query_sql(eng, "vector", "cosine", 10)
    backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    workers = conn.execute("SHOW io_workers").fetchone()[0]
    method = conn.execute("SHOW io_method").fetchone()[0]
    print(f"{eng.label}, ef_search {a.ef}, eic {a.eic}, io_method {method}, "
          f"io_workers {workers}, {a.delay} us a read")
    conn.execute(sql, (lits[0],)).fetchall()        # catalog and library loaded
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        for i, lit in enumerate(lits):
            evict(conn)
            rec = subprocess.Popen(["perf", "record", "-q", "-a", "-o", str(data),
                                    "-e", EVENTS], stderr=subprocess.DEVNULL)
            time.sleep(2.0)     # perf's start (it misses the query if shorter)
            shim.set(enabled=True, delay_us=a.delay)
            t = time.perf_counter()
            conn.execute(sql, (lit,)).fetchall()
            ms = (time.perf_counter() - t) * 1e3
            shim.set(enabled=False)
            time.sleep(0.2)
            rec.send_signal(signal.SIGINT)
            rec.wait()
            script = subprocess.run(["perf", "script", "-i", str(data), "-F",
                                     "comm,pid,cpu,time,event"], capture_output=True,
                                    text=True).stdout
            reads, waits = parse(script, backend)
            if not reads:
                print(f"query {a.offset + i}: {ms:.1f} ms, no delayed read seen")
                continue
            t0, t1 = reads[0][0], reads[-1][1]
            waits = [w for w in waits if t0 - 1.0 <= w[0] <= t1]
            h = in_flight(reads, t0, t1)
            n = sum(h.values())
            busy = sum(v for k, v in h.items() if k >= int(workers) - 1) / n if n else 0.0
            mean = sum(b - r for r, b in reads) / len(reads)
            print(f"query {a.offset + i}: {ms:.1f} ms; {len(reads)} reads over {t1 - t0:.1f} ms, "
                  f"{mean:.3f} ms each; backend waits {len(waits)}, "
                  f"{sum(b - s for s, b in waits):.1f} ms; "
                  f"{busy:.0%} of the time {int(workers) - 1}+ reads in flight")
            print("  reads in flight (share of 50 us samples): " +
                  " ".join(f"{k}:{v / n:.0%}" for k, v in sorted(h.items()) if v / n >= 0.005))
    return 0


if __name__ == "__main__":
    sys.exit(main())
