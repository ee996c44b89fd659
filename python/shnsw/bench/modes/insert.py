"""Mode insert: single-row INSERTs of held-out rows, one client (last: it
adds rows)."""

from __future__ import annotations

import time

from .. import metrics


class InsertMode:
    def inserts(self):
        cfg, log = self.cfg, self.log
        n = min(cfg["insert_rows"], len(self.insert_lits))
        res = []
        done = set()
        base = len(self.ds.rows)
        for eng in self.engines:
            if eng.table in done:
                continue
            done.add(eng.table)
            log.step(f"inserts: {n} single-row INSERTs into {eng.table} ({eng.am})")
            with self.cluster.connect() as c:
                c.execute("SET synchronous_commit = off")
                sql = f"INSERT INTO {eng.table} (id, embedding) VALUES (%s, %s::{self.typ})"
                lat = []
                for i, lit in enumerate(self.insert_lits[:n]):
                    t = time.perf_counter()
                    c.execute(sql, (base + i, lit))
                    lat.append(time.perf_counter() - t)
                # Remove them again (the index keeps dead entries; nothing runs after).
                c.execute(f"DELETE FROM {eng.table} WHERE id >= %s", (base,))
            s = metrics.latency_summary(lat)
            p = {"engine": eng.label, "am": eng.am, "rows": n, "rows_per_s": s["qps"],
                 "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"], "synchronous_commit": "off"}
            res.append(p)
            log(f"    {p['rows_per_s']:.0f} rows/s (p50 {p['p50_ms']:.2f} ms)", flush=True)
        self.result["modes"]["insert"] = {"points": res}
