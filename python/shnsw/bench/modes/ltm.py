"""Mode ltm: the index larger than shared_buffers, with the OS page cache
kept and dropped: steady-state queries/s, latency and reads per query."""

from __future__ import annotations

import statistics
import time

from .. import metrics, pg
from ..shim import diff as shim_diff


class LtmMode:
    def _ltm_run(self, eng, ef, cache: str, sql, lits):
        """Steady state of one engine with the current (small) shared_buffers:
        its relations start out of shared buffers; `cache` "kept": the OS page
        cache holds them (pg_prewarm 'read'); "dropped": their files are dropped
        from the OS cache (posix_fadvise DONTNEED) before every query, so each
        shared-buffer miss is a storage read.  Warm-up queries first (they fill
        shared_buffers with what the searches touch), then timed queries for
        ltm_seconds of query time (at most ltm_queries)."""
        cfg = self.cfg
        everything = [e for e in self.engines]
        with self.conn(eng, ef) as c:
            ev = pg.Evictor(c, self.cluster.datadir, eng)
            for other in everything:        # a clean start: nothing in shared buffers
                pg.Evictor(c, self.cluster.datadir, other)(c)
            if cache == "kept":
                for rel in ev.rels:
                    c.execute("SELECT pg_prewarm(%s::regclass, 'read')", (rel,))

            def before():
                if cache == "dropped":
                    pg.drop_os_cache(ev.files)

            n = len(lits)
            t_end = time.perf_counter() + cfg["ltm_warmup_seconds"]
            i = 0
            while i < cfg["ltm_warmup_queries"] or time.perf_counter() < t_end:
                before()
                c.execute(sql, (lits[i % n],)).fetchall()
                i += 1
                if i >= 20 * cfg["ltm_warmup_queries"]:
                    break
            warm_n = i
            lat, reads = [], []
            self.shim.set(enabled=True, delay_us=0)      # counts reads, adds nothing
            try:
                spent = 0.0
                while spent < cfg["ltm_seconds"] and len(lat) < cfg["ltm_queries"]:
                    before()
                    b = self.shim.counters()
                    t = time.perf_counter()
                    c.execute(sql, (lits[i % n],)).fetchall()
                    dt = time.perf_counter() - t
                    reads.append(shim_diff(self.shim.counters(), b)["reads"])
                    lat.append(dt)
                    spent += dt
                    i += 1
            finally:
                self.shim.set(enabled=False, delay_us=0)
        s = metrics.latency_summary(lat)
        return {"engine": eng.label, "ef_search": ef, "os_cache": cache,
                "warmup_queries": warm_n, "queries": len(lat),
                "reads_per_query": statistics.mean(reads) if reads else None, **s}

    def ltm(self):
        """Index larger than memory: shared_buffers a fraction (1/4 by default)
        of the index size, the same server settings for every engine."""
        cfg, log = self.cfg, self.log
        infos = self.result["engines"]
        base = [i for i in infos.values() if i["am"] == "hnsw" and "index_bytes" in i]
        ref = base[0] if base else next(i for i in infos.values() if "index_bytes" in i)
        sizes = {e.label: infos[e.label]["index_bytes"] for e in self.engines}
        lits = self.lits[:max(1, min(len(self.lits), cfg["ltm_query_pool"]))]
        orig = self.settings.get("shared_buffers", "128MB")
        points, runs = [], []
        try:
            for frac in cfg["ltm_fractions"]:
                sb_kb = max(2048, int(ref["index_bytes"] * frac / 1024) // 8 * 8)
                got = self._restart_with({"shared_buffers": f"{sb_kb}kB"})
                sb_bytes = sb_kb * 1024
                runs.append({"fraction_of_reference": frac, "shared_buffers": got,
                             "reference": ref["am"], "reference_index_bytes":
                             ref["index_bytes"]})
                for eng in self.engines:
                    ef = self.ef_at_target[eng.label]
                    for cache in cfg["ltm_os_cache"]:
                        log.step(f"index > shared_buffers: {eng.label}, shared_buffers "
                                 f"{got.get('shared_buffers')} ({frac:g} x {ref['am']}'s "
                                 f"index, {sb_bytes / sizes[eng.label]:.2f} x its own), "
                                 f"OS cache {cache}, ef {ef}")
                        p = self._ltm_run(eng, ef, cache, self.sql(eng), lits)
                        p["fraction_of_reference"] = frac
                        p["shared_buffers_bytes"] = sb_bytes
                        p["index_bytes"] = sizes[eng.label]
                        p["sb_over_index"] = sb_bytes / sizes[eng.label]
                        p["hot_recall@10"] = self.hot_recall[eng.label].get(ef)
                        points.append(p)
                        log(f"    {p['qps']:.1f} q/s, p50 {p['p50_ms']:.2f} ms, p99 "
                            f"{p['p99_ms']:.2f} ms, reads/q {p['reads_per_query']:.1f} "
                            f"({p['queries']} queries after {p['warmup_queries']} warm-up)",
                            flush=True)
        finally:
            self._restart_with({"shared_buffers": orig})
        self.result["modes"]["ltm"] = {"runs": runs, "points": points,
                                       "seconds": cfg["ltm_seconds"]}
