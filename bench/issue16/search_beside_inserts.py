"""Issue 16: one searching client's hot q/s alone and beside a steady stream
of single-row INSERTs (default 100 a second, each its own transaction, from
another process), for pgvector's hnsw and streamhnsw on the same rows.

Runs against a kept issue-17 dev-loop server (bench/issue17/devloop.py: the
tables t_pg and t_sh hold the same rows, one index each):

    SHNSW_DEVLOOP_DIR=/tmp/cold4/sent100k PYTHONPATH=python \\
        .venv/bin/python bench/issue16/search_beside_inserts.py --ef-pg 34 --ef-sh 33

The searcher runs prepared LIMIT 10 queries (held-out query vectors) for
--secs seconds, first alone, then while the inserter runs; inserted rows take
other held-out vectors and are deleted (and the table vacuumed) afterwards.
After every --check-every-th insert the inserter's own connection commits and
a third connection searches for the inserted vector (LIMIT 1): the row must
come back (the shared graph image is updated by the writer, not thrown
away). Prints q/s alone, q/s beside the inserts, their ratio, the insert
rate reached and the rows checked and found.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "issue17"))
import devloop  # noqa: E402

from shnsw.bench import pg  # noqa: E402

BASE_ID = 10_000_000


def inserter(dsn_kw, table, lits, rate, stop_at, check_every, sql_check, out):
    import psycopg

    conn = psycopg.connect(**dsn_kw, autocommit=True)
    chk = psycopg.connect(**dsn_kw, autocommit=True)
    chk.execute("SET enable_seqscan = off")
    n = checked = found = 0
    t0 = time.perf_counter()
    while time.perf_counter() < stop_at and n < len(lits):
        due = t0 + n / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        conn.execute(f"INSERT INTO {table} (id, embedding) VALUES (%s, %s::vector)",
                     (BASE_ID + n, lits[n]))
        if check_every and n % check_every == 0:
            checked += 1
            row = chk.execute(sql_check, (lits[n],)).fetchone()
            found += row is not None and row[0] == BASE_ID + n
        n += 1
    out.put((n, n / (time.perf_counter() - t0), checked, found))


def search(conn, sql, lits, secs):
    n = 0
    t = time.perf_counter()
    while time.perf_counter() - t < secs:
        conn.execute(sql, (lits[n % len(lits)],), prepare=True).fetchall()
        n += 1
    return n / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ef-pg", type=int, default=40)
    ap.add_argument("--ef-sh", type=int, default=40)
    ap.add_argument("--secs", type=float, default=20)
    ap.add_argument("--rate", type=float, default=100)
    ap.add_argument("--check-every", type=int, default=10)
    ap.add_argument("--engines", default="pgvector,streamhnsw")
    a = ap.parse_args()

    c, _ = devloop.cluster_and_shim(False)
    q = np.load(devloop.STATE / "queries.npy")
    lits = pg.literals(q[:500])
    ins = pg.literals(q[500:500 + int(a.rate * a.secs * 1.2) + 10])
    dsn_kw = {"host": str(c.sockdir), "port": c.port, "user": "postgres", "dbname": "postgres"}
    for name in a.engines.split(","):
        eng = devloop.ENGINES[name]
        ef = a.ef_pg if name == "pgvector" else a.ef_sh
        with c.connect() as conn:
            conn.execute(f"DELETE FROM {eng.table} WHERE id >= {BASE_ID}")
            conn.execute(f"VACUUM {eng.table}")
        conn = c.connect()
        pg.apply_gucs(conn, eng.session_gucs(ef))
        pg.apply_gucs(conn, {"streamhnsw.shared_cache": "on"})
        sql = pg.query_sql(eng, "vector", "cosine", 10)
        search(conn, sql, lits, 3)      # warm
        alone = search(conn, sql, lits, a.secs)
        check = (f"SELECT id FROM {eng.table} ORDER BY embedding <=> %s::vector LIMIT 1")
        out = mp.Queue()
        p = mp.Process(target=inserter, args=(dsn_kw, eng.table, ins, a.rate,
                                              time.perf_counter() + a.secs + 1, a.check_every,
                                              check, out))
        p.start()
        time.sleep(0.5)
        beside = search(conn, sql, lits, a.secs)
        p.join()
        n, rate, checked, found = out.get()
        conn.close()
        with c.connect() as conn2:
            conn2.execute(f"DELETE FROM {eng.table} WHERE id >= {BASE_ID}")
            conn2.execute(f"VACUUM {eng.table}")
        print(f"{eng.label} (ef_search {ef}): alone {alone:.0f} q/s, beside {rate:.0f} inserts/s "
              f"{beside:.0f} q/s ({beside / alone:.2f}), inserted {n}, checked {checked}, "
              f"found by the next search {found}  (load {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
