"""Mode hot: queries/s and recall at every ef_search on warm connections, and
the choice of ef* (the smallest ef_search reaching the target recall) that
the fixed-ef modes run at."""

from __future__ import annotations

import statistics
import time

from .. import metrics, pg


class HotMode:
    def hot(self):
        """Queries/s and recall at each ef_search, every engine on a warm
        connection. Each ef_search runs `hot_passes` passes over the queries,
        the engines taking turns pass by pass (their order alternating), and
        queries/s is the median of the passes: a slow spell on this machine
        then falls on both engines, not on whichever ran at that moment."""
        cfg, log = self.cfg, self.log
        lits, truth = self.lits_for(cfg["hot_queries"])
        passes = max(1, cfg.get("hot_passes", 1))
        points = []
        log.step(f"hot: {', '.join(e.label for e in self.engines)}, ef_search {cfg['ef_search']}, "
                 f"{len(lits)} queries x {passes} passes, engines interleaved")
        conns = {}
        try:
            for eng in self.engines:
                c = conns[eng.label] = self.conn(eng)
                pg.prewarm(c, eng)
            for ef in cfg["ef_search"]:
                lat = {e.label: [] for e in self.engines}
                qps = {e.label: [] for e in self.engines}
                found = {}
                for eng in self.engines:
                    c, sql = conns[eng.label], self.sql(eng)
                    pg.apply_gucs(c, {eng.ef_guc: ef})
                    for lit in lits[:cfg["warmup"]]:
                        c.execute(sql, (lit,)).fetchall()
                for p_i in range(passes):
                    order = self.engines if p_i % 2 == 0 else list(reversed(self.engines))
                    for eng in order:
                        c, sql = conns[eng.label], self.sql(eng)
                        rows_all, t_pass = [], 0.0
                        for lit in lits:
                            t = time.perf_counter()
                            rows = c.execute(sql, (lit,)).fetchall()
                            dt = time.perf_counter() - t
                            t_pass += dt
                            lat[eng.label].append(dt)
                            rows_all.append([r[0] for r in rows])
                        qps[eng.label].append(len(lits) / t_pass)
                        found.setdefault(eng.label, rows_all)
                for eng in self.engines:
                    c, sql, sql100 = conns[eng.label], self.sql(eng), self.sql(eng, 100)
                    extra = {}
                    ns = min(cfg["explain_sample"], len(lits))
                    bufs = [pg.explain_buffers(c, sql, lit) for lit in lits[:ns]]
                    extra["buffers_hit"] = statistics.mean(b["hit"] for b in bufs) if bufs else None
                    extra["buffers_read"] = statistics.mean(b["read"] for b in bufs) if bufs else None
                    if truth.shape[1] >= 100 and cfg.get("recall100", True):
                        pg.apply_gucs(c, {eng.ef_guc: max(ef, 100)})
                        n100 = min(cfg["recall100_queries"], len(lits))
                        f100 = [[r[0] for r in c.execute(sql100, (lit,)).fetchall()]
                                for lit in lits[:n100]]
                        extra["recall@100"] = metrics.recall_at(f100, truth[:n100], 100)
                        pg.apply_gucs(c, {eng.ef_guc: ef})
                    extra["qps_passes"] = qps[eng.label]
                    p = metrics.point(eng.label, ef, lat[eng.label], found[eng.label], truth, self.k, extra)
                    p["qps"] = statistics.median(qps[eng.label])
                    points.append(p)
                    log(f"    {eng.label:>16} ef {ef:4d}: recall@10 {p['recall@10']:.4f}  "
                        f"qps {p['qps']:8.1f} (passes {', '.join(f'{x:.0f}' for x in qps[eng.label])})  "
                        f"p50 {p['p50_ms']:.3f} ms  hit/q {extra['buffers_hit']:.0f}", flush=True)
        finally:
            for c in conns.values():
                c.close()
        self.result["modes"]["hot"] = {"queries": len(lits), "passes": passes, "points": points}
        self._choose_ef(points)

    def _choose_ef(self, points):
        """Per engine: the smallest ef_search reaching the target recall@10."""
        target = self.cfg["target_recall"]
        self.ef_at_target, self.hot_recall = {}, {}
        for eng in self.engines:
            pts = sorted((p for p in points if p["engine"] == eng.label),
                         key=lambda p: p["ef_search"])
            self.hot_recall[eng.label] = {p["ef_search"]: p["recall@10"] for p in pts}
            ok = [p["ef_search"] for p in pts if p["recall@10"] >= target]
            if ok:
                self.ef_at_target[eng.label] = ok[0]
            else:
                self.ef_at_target[eng.label] = pts[-1]["ef_search"]
                self.note(f"{eng.label} never reached recall@10 {target} in the hot sweep; "
                          f"fixed-ef modes use ef_search {pts[-1]['ef_search']}")
        self.result["ef_at_target"] = dict(self.ef_at_target)

    def _ef_around_target(self, eng, above: int = 0):
        """The ef values bracketing the target recall (for the cold sweeps),
        plus `above` more above it."""
        efs = sorted(self.hot_recall[eng.label])
        e = self.ef_at_target[eng.label]
        i = efs.index(e)
        lo = max(0, i - 1)
        hi = min(len(efs), i + 1 + above)
        return efs[lo:hi]
