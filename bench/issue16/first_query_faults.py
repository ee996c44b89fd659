"""Where a new connection's first query takes its page faults.

For each engine in turn, on the kept dev-loop server (bench/issue17/devloop.py),
a new connection runs what any first vector query needs before it (a vector
literal, which loads pgvector's library; LOAD 'streamhnsw'; a primary-key
lookup on the table), then `perf record` on the backend's
exceptions:page_fault_user tracepoint while it runs its first ORDER BY
query, and the faulting addresses are assigned to the backend's mappings
(/proc/PID/maps: the shared graph image's segment, the main shared memory
area with the buffer pool, the backend's heap) and to the function that
faulted. Medians over --conns connections; the streamhnsw image is loaded
before (streamhnsw.shared_cache on for these sessions), and both engines'
tables and indexes are read into shared buffers (pg_prewarm) first.

    SHNSW_DEVLOOP_DIR=/tmp/sent100k PYTHONPATH=python:bench/issue17 \\
        .venv/bin/python bench/issue16/first_query_faults.py --conns 9

Needs root (perf on another user's process).
"""
from __future__ import annotations

import argparse
import collections
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "issue17"))
from devloop import STATE, cluster_and_shim  # noqa: E402

TABLES = {"pgvector": ("t_pg", "hnsw.ef_search"), "streamhnsw": ("t_sh", "streamhnsw.ef_search")}


def regions(pid: int) -> list[tuple[int, int, str]]:
    out = []
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        name = f[5] if len(f) >= 6 else "[anon]"
        if name.startswith("/dev/shm/PostgreSQL"):
            name = "dynamic shared memory"
        elif name in ("/dev/zero", "/SYSV00000000") or (len(f) >= 7 and f[-1] == "(deleted)"):
            name = "main shared memory"
        else:
            name = name.rsplit("/", 1)[-1]
        out.append((lo, hi, name))
    return out


def faults(path: Path, maps) -> tuple[collections.Counter, collections.Counter]:
    text = subprocess.run(["perf", "script", "-i", str(path), "-F", "ip,sym,trace"],
                          capture_output=True, text=True).stdout
    by_region, by_fn = collections.Counter(), collections.Counter()
    region = None
    for line in text.splitlines():
        if "address=" in line:
            addr = int(line.split("address=")[1].split()[0], 16)
            region = next((n for lo, hi, n in maps if lo <= addr < hi), "?")
            by_region[region] += 1
            continue
        f = line.split()
        if region and len(f) >= 2 and "exc_page_fault" not in line:
            by_fn[(region, f[1])] += 1
            region = None
    return by_region, by_fn


def one(c, engine: str, lit: str, ef: int, tmp: Path):
    table, guc = TABLES[engine]
    conn = c.connect()
    conn.autocommit = True
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    conn.execute(f"SET {guc} = {ef}")
    conn.execute("SELECT %s::vector IS NULL", (lit,)).fetchone()
    if engine == "streamhnsw":
        conn.execute("LOAD 'streamhnsw'")
        conn.execute("SET streamhnsw.shared_cache = on")
    conn.execute(f"SELECT id FROM {table} WHERE id = 1").fetchone()
    data = tmp / f"{engine}-{pid}.data"
    perf = subprocess.Popen(["perf", "record", "-q", "-g", "-e", "exceptions:page_fault_user",
                             "-p", str(pid), "-o", str(data)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    sql = f"SELECT id FROM {table} ORDER BY embedding <=> %s::vector LIMIT 10"
    t = time.perf_counter()
    conn.execute(sql, (lit,)).fetchall()
    first = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    conn.execute(sql, (lit,)).fetchall()
    second = (time.perf_counter() - t) * 1e3
    time.sleep(0.2)
    perf.send_signal(2)
    perf.wait()
    maps = regions(pid)
    conn.close()
    by_region, by_fn = faults(data, maps)
    return first, second, by_region, by_fn


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conns", type=int, default=9)
    ap.add_argument("--ef", type=int, default=40)
    ap.add_argument("--engines", default="pgvector,streamhnsw")
    a = ap.parse_args(argv)
    c, _ = cluster_and_shim(False)
    queries = np.load(STATE / "queries.npy")
    with c.connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        for rel in ("t_pg", "t_pg_idx", "t_sh", "t_sh_idx"):
            conn.execute("SELECT pg_prewarm(%s)", (rel,))
        conn.execute("SET streamhnsw.shared_cache = on")
        size = conn.execute("SELECT streamhnsw_cache_load('t_sh_idx')").fetchone()[0]
    print(f"image {size / 2**20:.1f} MB; ef_search {a.ef}; {a.conns} new connections each, "
          "engines alternating, a different query each")
    res = {e: {"first": [], "second": [], "regions": [], "fns": collections.Counter()}
           for e in a.engines.split(",")}
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.conns):
            lit = "[" + ",".join(f"{x:.7g}" for x in queries[i]) + "]"
            for e in res:
                first, second, by_region, by_fn = one(c, e, lit, a.ef, Path(d))
                res[e]["first"].append(first)
                res[e]["second"].append(second)
                res[e]["regions"].append(by_region)
                res[e]["fns"].update(by_fn)
    for e, r in res.items():
        names = sorted({n for x in r["regions"] for n in x},
                       key=lambda n: -statistics.median(x[n] for x in r["regions"]))
        total = statistics.median(sum(x.values()) for x in r["regions"])
        print(f"\n{e}: first query {statistics.median(r['first']):.2f} ms, second "
              f"{statistics.median(r['second']):.2f} ms (client side, medians); "
              f"page faults of the first: {total:.0f}")
        for n in names:
            med = statistics.median(x.get(n, 0) for x in r["regions"])
            if med:
                print(f"  {med:6.0f}  {n}")
        print("  by function (all connections):")
        for (region, fn), v in r["fns"].most_common(8):
            print(f"  {v / a.conns:6.1f}  {fn} ({region})")


if __name__ == "__main__":
    sys.exit(main())
