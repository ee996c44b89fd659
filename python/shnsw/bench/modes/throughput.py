"""Modes concurrent and mixed: several vector clients at ef*, alone and
beside pgbench's TPC-B."""

from __future__ import annotations

import statistics
import time

from .. import clients, metrics, pg


class ThroughputModes:
    def concurrent(self):
        """n client processes per engine at its ef*, `hot_passes` passes with
        the engines taking turns (order alternating); q/s is the median of
        the passes, latencies are pooled."""
        cfg, log = self.cfg, self.log
        passes = max(1, cfg.get("hot_passes", 1))
        res = []
        for eng in self.engines:
            with self.conn(eng) as c:
                pg.prewarm(c, eng)
        for n in cfg["clients"]:
            qps = {e.label: [] for e in self.engines}
            lat = {e.label: [] for e in self.engines}
            for p_i in range(passes):
                order = self.engines if p_i % 2 == 0 else list(reversed(self.engines))
                for eng in order:
                    ef = self.ef_at_target[eng.label]
                    log.step(f"concurrent: {eng.label}, {n} clients, {cfg['seconds']} s, ef {ef}, "
                             f"pass {p_i + 1}/{passes}")
                    r = clients.run_vector_clients(self.cluster.conninfo, eng.options(ef),
                                                   self.sql(eng), self.lits, n, cfg["seconds"])
                    qps[eng.label].append(r["qps"])
                    lat[eng.label].extend(r["latencies"])
                    log(f"    {r['qps']:.1f} q/s", flush=True)
            for eng in self.engines:
                s = metrics.latency_summary(lat[eng.label])
                p = {"engine": eng.label, "ef_search": self.ef_at_target[eng.label], "clients": n,
                     "seconds": cfg["seconds"], "passes": passes,
                     "queries": len(lat[eng.label]), "qps": statistics.median(qps[eng.label]),
                     "qps_passes": qps[eng.label],
                     **{k: v for k, v in s.items() if k.endswith("_ms")}}
                res.append(p)
                log(f"    {eng.label}, {n} clients: median {p['qps']:.1f} q/s "
                    f"(passes {', '.join(f'{x:.0f}' for x in qps[eng.label])}), "
                    f"p50 {p['p50_ms']:.3f} ms, p99 {p['p99_ms']:.3f} ms", flush=True)
        self.result["modes"]["concurrent"] = {"points": res}

    def mixed(self):
        cfg, log = self.cfg, self.log
        env = self.cluster.client_env()
        with self.cluster.connect() as c:
            c.execute("DROP DATABASE IF EXISTS pgbench")
            c.execute("CREATE DATABASE pgbench")
        log.step(f"mixed: pgbench -i -s {cfg['pgbench_scale']}")
        clients.pgbench_init(self.cluster.bindir, env, "pgbench", cfg["pgbench_scale"])
        with self.cluster.connect() as c:
            c.execute("CHECKPOINT")
        secs = cfg["mixed_seconds"]
        res = {"pgbench_clients": cfg["pgbench_clients"], "vector_clients": cfg["mixed_vector_clients"],
               "seconds": secs, "pgbench_scale": cfg["pgbench_scale"], "points": []}
        log.step(f"mixed: pgbench alone, {cfg['pgbench_clients']} clients, {secs} s")
        pb = clients.pgbench_popen(self.cluster.bindir, env, "pgbench", cfg["pgbench_clients"], secs)
        out, err = pb.communicate()
        res["pgbench_alone"] = clients.parse_pgbench(out + err)
        log(f"    tps {res['pgbench_alone'].get('tps')}", flush=True)
        for eng in self.engines:
            ef = self.ef_at_target[eng.label]
            log.step(f"mixed: pgbench ({cfg['pgbench_clients']} clients) + {eng.label} "
                     f"({cfg['mixed_vector_clients']} clients), {secs} s, ef {ef}")
            with self.conn(eng) as c:
                pg.prewarm(c, eng)
            n = cfg["mixed_vector_clients"]
            start_at = time.time() + 3.0 + 0.5 * n
            pool, ar = clients.start_vector_clients(self.cluster.conninfo, eng.options(ef),
                                                    self.sql(eng), self.lits, n, start_at,
                                                    start_at + secs)
            while time.time() < start_at:
                time.sleep(0.01)
            pb = clients.pgbench_popen(self.cluster.bindir, env, "pgbench",
                                       cfg["pgbench_clients"], secs)
            out, err = pb.communicate()
            vres = ar.get()
            pool.close()
            pool.join()
            lat = [x for r in vres for x in r["latencies"]]
            s = metrics.latency_summary(lat)
            p = {"engine": eng.label, "ef_search": ef, "vector_queries": len(lat),
                 "vector_qps": len(lat) / secs, "pgbench": clients.parse_pgbench(out + err),
                 **{k: v for k, v in s.items() if k.endswith("_ms")}}
            res["points"].append(p)
            log(f"    vector {p['vector_qps']:.1f} q/s (p50 {p['p50_ms']:.2f} ms, "
                f"p99 {p['p99_ms']:.2f} ms), TPC-B tps {p['pgbench'].get('tps')}", flush=True)
        self.result["modes"]["mixed"] = res
