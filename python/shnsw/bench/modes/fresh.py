"""Mode fresh: a new connection's first query against the same query on a
warm connection, net of what any first query pays (a primary-key lookup,
with and without parsing the query's vector)."""

from __future__ import annotations

import time

from .. import metrics, pg


class FreshMode:
    def fresh(self):
        cfg, log = self.cfg, self.log
        lits, truth = self.lits_for(cfg["fresh_queries"])
        res = []
        for eng in self.engines:
            ef = self.ef_at_target[eng.label]
            log.step(f"fresh: {eng.label}, ef_search {ef}, {len(lits)} new connections")
            with self.conn(eng, ef) as c:
                pg.prewarm(c, eng)
                for lit in lits[:cfg["warmup"]]:
                    c.execute(self.sql(eng), (lit,)).fetchall()
                # The same queries on this warm connection: the reference.
                warm = []
                for lit in lits:
                    t = time.perf_counter()
                    c.execute(self.sql(eng), (lit,)).fetchall()
                    warm.append(time.perf_counter() - t)
            lat, found, connect, pk_fresh, vec_fresh = [], [], [], [], []
            opts = eng.options(ef)
            pk_sql = f"SELECT id FROM {eng.table} WHERE id = %s"
            # the same lookup that also parses the query's vector: pgvector's
            # library load and the literal, which the plain lookup does not
            # pay and every vector query on a new connection does, whatever
            # its index
            vec_sql = f"SELECT id FROM {eng.table} WHERE id = %s AND %s::{self.typ} IS NOT NULL"
            for i, lit in enumerate(lits):
                t0 = time.perf_counter()
                c = self.cluster.connect(options=opts)
                t = time.perf_counter()
                rows = c.execute(self.sql(eng), (lit,)).fetchall()
                lat.append(time.perf_counter() - t)
                connect.append(t - t0)
                c.close()
                found.append([r[0] for r in rows])
                # the same for a primary-key lookup: what every first query pays
                # (catalog caches, library loading), not the index's own share
                with self.cluster.connect(options=opts) as c:
                    t = time.perf_counter()
                    c.execute(pk_sql, (i,)).fetchall()
                    pk_fresh.append(time.perf_counter() - t)
                with self.cluster.connect(options=opts) as c:
                    t = time.perf_counter()
                    c.execute(vec_sql, (i, lit)).fetchall()
                    vec_fresh.append(time.perf_counter() - t)
            with self.cluster.connect(options=opts) as c:
                pk_warm, vec_warm = [], []
                for i in range(len(lits) + 5):
                    t = time.perf_counter()
                    c.execute(pk_sql, (i,)).fetchall()
                    pk_warm.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    c.execute(vec_sql, (i, lits[i % len(lits)])).fetchall()
                    vec_warm.append(time.perf_counter() - t)
                pk_warm, vec_warm = pk_warm[5:], vec_warm[5:]
            p = metrics.point(eng.label, ef, lat, found, truth, self.k,
                       {"warm": metrics.latency_summary(warm),
                        "connect_ms_p50": metrics.percentile(connect, 50) * 1e3,
                        "pk_fresh_p50_ms": metrics.percentile(pk_fresh, 50) * 1e3,
                        "pk_warm_p50_ms": metrics.percentile(pk_warm, 50) * 1e3,
                        "vec_fresh_p50_ms": metrics.percentile(vec_fresh, 50) * 1e3,
                        "vec_warm_p50_ms": metrics.percentile(vec_warm, 50) * 1e3})
            p["fresh_over_warm_p50"] = metrics.ratio(p["p50_ms"], p["warm"]["p50_ms"])
            # the figure: (fresh - warm) - (PK fresh - PK warm), over warm
            extra = (p["p50_ms"] - p["warm"]["p50_ms"]) - (p["pk_fresh_p50_ms"] - p["pk_warm_p50_ms"])
            p["fresh_extra_net_ms"] = extra
            p["fresh_extra_net_over_warm"] = metrics.ratio(extra, p["warm"]["p50_ms"])
            # the same net of the lookup that also parses a vector (the index's own share)
            vextra = (p["p50_ms"] - p["warm"]["p50_ms"]) - (p["vec_fresh_p50_ms"] - p["vec_warm_p50_ms"])
            p["fresh_extra_net_vec_ms"] = vextra
            p["fresh_extra_net_vec_over_warm"] = metrics.ratio(vextra, p["warm"]["p50_ms"])
            res.append(p)
            log(f"    fresh p50 {p['p50_ms']:.3f} ms, warm p50 {p['warm']['p50_ms']:.3f} ms, "
                f"ratio {p['fresh_over_warm_p50']:.2f}; PK lookup fresh "
                f"{p['pk_fresh_p50_ms']:.3f} ms, warm {p['pk_warm_p50_ms']:.3f} ms; extra net "
                f"of the PK's {extra:.3f} ms = {p['fresh_extra_net_over_warm']:.2f}x warm; PK lookup "
                f"with a vector literal fresh {p['vec_fresh_p50_ms']:.3f} ms, warm {p['vec_warm_p50_ms']:.3f} ms; "
                f"extra net of it {vextra:.3f} ms = {p['fresh_extra_net_vec_over_warm']:.2f}x warm",
                flush=True)
        self.result["modes"]["fresh"] = {"queries": len(lits), "points": res}
