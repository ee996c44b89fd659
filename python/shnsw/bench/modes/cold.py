"""Modes cold, latency, eic and workers: every query after its relations
are evicted from shared buffers and the OS cache, with or without the
shim's injected delay per read, across effective_io_concurrency and
io_workers."""

from __future__ import annotations

import statistics
import time

from .. import metrics, pg
from ..shim import diff as shim_diff


def shnsw_io_text(p) -> str:
    """streamhnsw's EXPLAIN I/O figures of a cold point, for the log."""
    if "pages_read" not in p:
        return ""
    return (f"  [streamhnsw read {p['pages_read']:.0f} sync {p['sync_reads']:.0f}"
            + (f" waits {p['waits']:.0f}" if "waits" in p else "")
            + f" pages/expansion {p.get('pages_per_expansion', 0):.1f}"
            f" reads/expansion {p.get('reads_per_expansion', 0):.1f}]")


class ColdModes:
    def _cold_run(self, c, eng, ev, ef, lits, truth, delay_us, n_explain, eic=None):
        """Each query after eviction; returns a point (latency, reads, buffers)."""
        sql = self.sql(eng)
        pg.apply_gucs(c, {eng.ef_guc: ef})
        if eng.am == "streamhnsw":
            # Cold means the index pages are not in memory: the shared cache
            # image survives the eviction of shared buffers and the OS cache,
            # so it is off here and the scan reads pages (its first build
            # after a restart is a different cost, not measured by this mode).
            pg.apply_gucs(c, {"streamhnsw.shared_cache": "off"})
        if eic is not None:
            pg.apply_gucs(c, {"effective_io_concurrency": eic})
        self.shim.set(enabled=True, delay_us=delay_us)
        try:
            lat, found, reads, sleep = [], [], [], []
            for lit in lits:
                ev(c)
                before = self.shim.counters()
                t = time.perf_counter()
                rows = c.execute(sql, (lit,)).fetchall()
                lat.append(time.perf_counter() - t)
                d = shim_diff(self.shim.counters(), before)
                reads.append(d["reads"])
                sleep.append(d["sleep_ns"] / 1e6)
                found.append([r[0] for r in rows])
            bufs = []
            for lit in lits[:n_explain]:
                ev(c)
                bufs.append(pg.explain_buffers(c, sql, lit))
        finally:
            self.shim.set(enabled=False, delay_us=0)
            if eic is not None:
                pg.apply_gucs(c, {"effective_io_concurrency": self.settings.get(
                    "effective_io_concurrency", 16)})
        extra = {"storage_reads": statistics.mean(reads),
                 "delay_ms_slept": statistics.mean(sleep),
                 "buffers_hit": statistics.mean(b["hit"] for b in bufs) if bufs else None,
                 "buffers_read": statistics.mean(b["read"] for b in bufs) if bufs else None,
                 "hot_recall@10": self.hot_recall[eng.label].get(ef),
                 "delay_us": delay_us}
        # streamhnsw's own figures (EXPLAIN lines): synchronous reads, waits,
        # and pages per expansion (page accesses and reads per node expanded)
        shn = [b for b in bufs if "pages_read" in b]
        if shn:
            for key in pg._SHNSW_FIELDS.values():
                vals = [b[key] for b in shn if key in b]
                if vals:
                    extra[key] = statistics.mean(vals)
            exp = sum(b["nodes_expanded"] for b in shn)
            if exp:
                extra["pages_per_expansion"] = sum(b["pages_read"] + b["pages_hit"]
                                                   for b in shn) / exp
                extra["reads_per_expansion"] = sum(b["pages_read"] for b in shn) / exp
        p = metrics.point(eng.label, ef, lat, found, truth, self.k, extra)
        if delay_us:
            p["round_trips_p50"] = p["p50_ms"] * 1e3 / delay_us
            p["round_trips_mean"] = p["mean_ms"] * 1e3 / delay_us
        if eic is not None:
            p["effective_io_concurrency"] = eic
        return p

    def cold(self, delay_us: int = 0):
        cfg, log = self.cfg, self.log
        name = "cold_latency" if delay_us else "cold"
        nq = cfg["latency_queries"] if delay_us else cfg["cold_queries"]
        # Queries not used by the other cold sweeps (a new vector each time).
        off = cfg["cold_queries"] if delay_us else 0
        off = off if off + nq <= len(self.lits) else 0
        lits, truth = self.lits_for(nq, off)
        points = []
        with self.cluster.connect() as c:
            c.execute("CHECKPOINT")
        for eng in self.engines:
            efs = self._ef_around_target(
                eng, cfg["latency_extra_above"] if delay_us else cfg["cold_extra_above"])
            log.step(f"{name}: {eng.label}, ef_search {efs}, {len(lits)} queries each"
                     + (f", {delay_us} us per read" if delay_us else ""))
            with self.conn(eng) as c:
                ev = pg.Evictor(c, self.cluster.datadir, eng)
                for ef in efs:
                    p = self._cold_run(c, eng, ev, ef, lits, truth, delay_us,
                                       cfg["cold_explain_sample"])
                    points.append(p)
                    log(f"    ef {ef:4d}: p50 {p['p50_ms']:.2f} ms  storage reads/q "
                        f"{p['storage_reads']:.0f}  buffers read/q {p['buffers_read']:.0f}"
                        + (f"  round trips {p['round_trips_p50']:.0f}" if delay_us else "")
                        + shnsw_io_text(p), flush=True)
                    if p["storage_reads"] == 0:
                        self.note(f"{name}: {eng.label} ef {ef} made no storage reads: "
                                  "the latency shim is not loaded or the cache was not dropped")
        self.result["modes"][name] = {"queries": len(lits), "delay_us": delay_us,
                                      "points": points}

    def _cold_points(self, eng, lits, truth, delay, eics):
        """Cold runs of eng at ef* on one connection, one per effective_io_concurrency
        of eics (None: the server's)."""
        ef = self.ef_at_target[eng.label]
        with self.conn(eng) as c:
            ev = pg.Evictor(c, self.cluster.datadir, eng)
            return [self._cold_run(c, eng, ev, ef, lits, truth, delay,
                                   self.cfg["eic_explain_sample"], eic=eic) for eic in eics]

    def _sweep_queries(self):
        """The eic and io_workers sweeps' queries: after the cold and latency
        modes' (a new vector each time), as many as eic_queries says."""
        cfg = self.cfg
        off = min(cfg["cold_queries"] + cfg["latency_queries"], len(self.lits) - cfg["eic_queries"])
        return self.lits_for(cfg["eic_queries"], max(0, off))

    def eic_sweep(self):
        cfg, log = self.cfg, self.log
        delay = cfg["delay_us"]
        lits, truth = self._sweep_queries()
        points = []
        for eng in self.engines:
            log.step(f"eic sweep: {eng.label}, ef {self.ef_at_target[eng.label]}, eic "
                     f"{cfg['eic']}, {len(lits)} cold queries each, {delay} us per read")
            for eic, p in zip(cfg["eic"], self._cold_points(eng, lits, truth, delay, cfg["eic"])):
                points.append(p)
                log(f"    eic {eic:3d}: mean {p['mean_ms']:.1f} ms  p50 {p['p50_ms']:.1f} ms"
                    f"  round trips {p['round_trips_p50']:.0f}  reads/q "
                    f"{p['storage_reads']:.0f}" + shnsw_io_text(p), flush=True)
        self.result["modes"]["eic"] = {"queries": len(lits), "delay_us": delay,
                                       "points": points}

    def workers_sweep(self):
        """Cold + latency at the server's effective_io_concurrency with each
        io_workers of cfg["io_workers"] (3 is PostgreSQL's default; the
        suite's server runs 8): with io_method = worker each I/O worker reads
        one block at a time, so io_workers bounds a scan's reads in flight
        whatever effective_io_concurrency allows. The setting is reloaded
        (no restart: the shared cache and the tables stay) and put
        back afterwards. Same queries as the eic sweep, each engine at ef*."""
        cfg, log = self.cfg, self.log
        delay = cfg["delay_us"]
        lits, truth = self._sweep_queries()
        base = self.settings.get("io_workers", 8)
        points = []
        try:
            for w in cfg["io_workers"]:
                got = self._reload_with({"io_workers": w})
                for eng in self.engines:
                    log.step(f"io_workers {got['io_workers']}: {eng.label}, ef "
                             f"{self.ef_at_target[eng.label]}, {len(lits)} cold queries, "
                             f"{delay} us per read")
                    p = self._cold_points(eng, lits, truth, delay, [None])[0]
                    p["io_workers"] = w
                    points.append(p)
                    log(f"    p50 {p['p50_ms']:.1f} ms  round trips {p['round_trips_p50']:.0f}"
                        f"  reads/q {p['storage_reads']:.0f}" + shnsw_io_text(p), flush=True)
        finally:
            self._reload_with({"io_workers": base})
        self.result["modes"]["workers"] = {"queries": len(lits), "delay_us": delay,
                                           "effective_io_concurrency":
                                               self.settings.get("effective_io_concurrency", 16),
                                           "points": points}
