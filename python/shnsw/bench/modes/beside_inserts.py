"""Mode beside-inserts: one searching client's hot queries/s alone and beside
a steady stream of single-row INSERTs into the same table.

The searcher runs prepared LIMIT k queries at ef* for `seconds`, first
alone, then while another process inserts `insert_rate` rows a second, each
its own transaction, from the held-out rows (then the held-out queries not
searched).  After every tenth insert a third connection searches for the
vector just inserted (LIMIT 1): it must be found, since a writer updates
streamhnsw's shared cache rather than leaving it stale.  The inserted rows are
deleted and the table vacuumed afterwards, so the mode runs last.
"""

from __future__ import annotations

import multiprocessing as mp
import time

from .. import pg

FIRST_ID = 10_000_000
CHECK_EVERY = 10
SEARCH_POOL = 500


def _inserter(conninfo, table, typ, op, lits, rate, stop_at, out):
    import psycopg

    conn = psycopg.connect(conninfo, autocommit=True)
    chk = psycopg.connect(conninfo, autocommit=True)
    chk.execute("SET enable_seqscan = off")
    check = f"SELECT id FROM {table} ORDER BY embedding {op} %s::{typ} LIMIT 1"
    n = checked = found = 0
    t0 = time.perf_counter()
    while time.perf_counter() < stop_at and n < len(lits):
        due = t0 + n / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        conn.execute(f"INSERT INTO {table} (id, embedding) VALUES (%s, %s::{typ})",
                     (FIRST_ID + n, lits[n]))
        if n % CHECK_EVERY == 0:
            checked += 1
            row = chk.execute(check, (lits[n],)).fetchone()
            found += row is not None and row[0] == FIRST_ID + n
        n += 1
    out.put((n, n / (time.perf_counter() - t0), checked, found))
    conn.close()
    chk.close()


class BesideInsertsMode:
    def _search_for(self, conn, sql, lits, secs) -> float:
        n = 0
        t = time.perf_counter()
        while time.perf_counter() - t < secs:
            conn.execute(sql, (lits[n % len(lits)],), prepare=True).fetchall()
            n += 1
        return n / (time.perf_counter() - t)

    def _clear_inserted(self, eng):
        with self.cluster.connect() as c:
            c.execute(f"DELETE FROM {eng.table} WHERE id >= %s", (FIRST_ID,))
            c.execute(f"VACUUM {eng.table}")

    def beside_inserts(self):
        cfg, log = self.cfg, self.log
        secs, rate = cfg["seconds"], cfg["insert_rate"]
        search = self.lits[:SEARCH_POOL]
        rows = self.insert_lits + self.lits[SEARCH_POOL:]
        op = pg.OPS[self.metric][1]
        ctx = mp.get_context("spawn")
        points = []
        for eng in self.engines:
            ef = self.ef_at_target[eng.label]
            log.step(f"beside-inserts: {eng.label}, ef {ef}, {secs} s alone, then beside "
                     f"{rate:g} inserts/s")
            self._clear_inserted(eng)
            with self.conn(eng, ef) as c:
                sql = self.sql(eng)
                self._search_for(c, sql, search, 3)          # warm
                alone = self._search_for(c, sql, search, secs)
                out = ctx.Queue()
                p = ctx.Process(target=_inserter,
                                args=(self.cluster.conninfo, eng.table, self.typ, op, rows,
                                      rate, time.perf_counter() + secs + 1, out))
                p.start()
                time.sleep(0.5)
                beside = self._search_for(c, sql, search, secs)
                n, got_rate, checked, found = out.get()
                p.join()
            self._clear_inserted(eng)
            points.append({"engine": eng.label, "ef_search": ef, "qps_alone": alone,
                           "qps_beside": beside, "ratio": beside / alone,
                           "insert_rate_target": rate, "inserts_per_s": got_rate,
                           "inserted": n, "checked": checked, "found": found})
            log(f"    alone {alone:.0f} q/s, beside {got_rate:.0f} inserts/s {beside:.0f} q/s "
                f"({beside / alone:.2f}); {found} of {checked} checked rows found by the "
                "next search", flush=True)
        self.result["modes"]["beside_inserts"] = {"seconds": secs, "insert_rate": rate,
                                                  "points": points}
