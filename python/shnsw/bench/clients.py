"""Client processes for the concurrent and mixed modes.

Each vector client is a separate process (multiprocessing, spawn) with its own
connection; it warms up, waits for a common start time, then runs queries
from its own slice of the query set in a loop until the end time, recording
each query's latency."""

from __future__ import annotations

import multiprocessing as mp
import re
import subprocess
import time

import psycopg


def _vector_client(args) -> dict:
    (conninfo, options, sql, lits, start_at, end_at, warmup) = args
    lat = []
    with psycopg.connect(conninfo, options=options, autocommit=True) as conn:
        for lit in lits[:warmup]:
            conn.execute(sql, (lit,)).fetchall()
        while time.time() < start_at:
            time.sleep(0.001)
        i = 0
        while True:
            now = time.perf_counter()
            if time.time() >= end_at:
                break
            conn.execute(sql, (lits[i % len(lits)],)).fetchall()
            lat.append(time.perf_counter() - now)
            i += 1
    return {"latencies": lat}


def run_vector_clients(conninfo: str, options: str, sql: str, lits: list, n: int,
                       seconds: float, warmup: int = 10, start_delay: float = 3.0,
                       pool=None) -> dict:
    """n processes for `seconds`; returns per-query latencies and the span."""
    slices = [lits[i::n] for i in range(n)]
    start_at = time.time() + start_delay + 0.5 * n
    end_at = start_at + seconds
    jobs = [(conninfo, options, sql, s, start_at, end_at, warmup) for s in slices]
    ctx = mp.get_context("spawn")
    with ctx.Pool(n) as p:
        res = p.map(_vector_client, jobs)
    lat = [x for r in res for x in r["latencies"]]
    return {"clients": n, "seconds": seconds, "queries": len(lat), "latencies": lat,
            "qps": len(lat) / seconds}


def start_vector_clients(conninfo, options, sql, lits, n, start_at, end_at, warmup=10):
    """Non-blocking variant (for the mixed mode): returns (pool, async_result)."""
    slices = [lits[i::n] for i in range(n)]
    jobs = [(conninfo, options, sql, s, start_at, end_at, warmup) for s in slices]
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(n)
    return pool, pool.map_async(_vector_client, jobs)


def pgbench_init(bindir, env, dbname: str, scale: int) -> str:
    r = subprocess.run([str(bindir / "pgbench"), "-i", "-q", "-s", str(scale), dbname],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pgbench -i failed:\n{r.stdout}\n{r.stderr}")
    return r.stdout + r.stderr


def pgbench_popen(bindir, env, dbname: str, clients: int, seconds: int):
    return subprocess.Popen([str(bindir / "pgbench"), "-n", "-c", str(clients),
                             "-j", str(clients), "-T", str(int(seconds)), dbname],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def parse_pgbench(out: str) -> dict:
    res = {}
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    if m:
        res["tps"] = float(m.group(1))
    m = re.search(r"latency average = ([0-9.]+) ms", out)
    if m:
        res["latency_avg_ms"] = float(m.group(1))
    m = re.search(r"number of transactions actually processed: (\d+)", out)
    if m:
        res["transactions"] = int(m.group(1))
    m = re.search(r"number of failed transactions: (\d+)", out)
    if m:
        res["failed"] = int(m.group(1))
    return res
