"""The benchmark run: one server, one table per access method, every mode.

Order of the phases (each optional):

  load + build (+ FAISS)  ->  hot sweep  ->  fresh  ->  concurrent  ->  mixed
  ->  cold sweep  ->  cold + latency sweep  ->  effective_io_concurrency sweep
  ->  index larger than shared_buffers (server restarted with small
      shared_buffers, then restored)  ->  insert rate (last: it adds rows)

The hot sweep decides, per engine, the smallest ef_search whose recall@10
reaches the target (0.95 by default): the fixed-ef modes (fresh, concurrent,
mixed, eic sweep) run there, so engines are compared at (about) equal
recall, and the cold sweeps run at the ef values around it so that their
latency can be interpolated at the target recall.  Query results do not
depend on what is cached, so the cold curves use the recall that the hot
sweep measured over all queries at the same ef_search.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import asdict

import numpy as np

from . import clients, metrics, pg
from .anchor import run_faiss
from .datasets import Dataset, Progress
from .shim import Shim, diff as shim_diff
from ..cluster import Cluster


class Log:
    def __init__(self):
        self.t0 = time.perf_counter()

    def __call__(self, msg="", flush=True):
        print(msg, flush=flush)

    def step(self, msg):
        print(f"[{time.perf_counter() - self.t0:6.0f} s] {msg}", flush=True)


def machine_info() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_kb"] = int(f.readline().split()[1])
    except OSError:
        pass
    return info


def _with_unit(setting: str, unit) -> str:
    """pg_settings value with its unit: '262144' '8kB' -> '2048MB'."""
    if not unit:
        return setting
    if unit == "8kB" and setting.lstrip("-").isdigit():
        kb = int(setting) * 8
        return f"{kb // 1024}MB" if kb % 1024 == 0 else f"{kb}kB"
    return setting + unit


def _shnsw_io_text(p) -> str:
    """streamhnsw's EXPLAIN I/O figures of a cold point, for the log."""
    if "pages_read" not in p:
        return ""
    return (f"  [streamhnsw read {p['pages_read']:.0f} sync {p['sync_reads']:.0f}"
            + (f" waits {p['waits']:.0f}" if "waits" in p else "")
            + f" pages/expansion {p.get('pages_per_expansion', 0):.1f}"
            f" reads/expansion {p.get('reads_per_expansion', 0):.1f}]")


def _point(engine, ef, lat, found, truth, k, extra=None) -> dict:
    p = {"engine": engine, "ef_search": ef, **metrics.latency_summary(lat)}
    if found is not None:
        p["recall@1"] = metrics.recall_at(found, truth, 1)
        p["recall@10"] = metrics.recall_at(found, truth, min(10, k))
    if extra:
        p.update(extra)
    return p


class Bench:
    def __init__(self, cfg: dict, ds: Dataset, log: Log | None = None):
        self.cfg = cfg
        self.ds = ds
        self.log = log or Log()
        self.k = cfg["k"]
        self.typ = cfg["type"]
        self.metric = ds.metric
        self.result = {"config": cfg, "dataset": ds.describe(), "machine": machine_info(),
                       "engines": {}, "modes": {}, "notes": []}
        self.lits = pg.literals(ds.queries)
        self.insert_lits = pg.literals(ds.inserts)

    # --- helpers ------------------------------------------------------------
    def note(self, msg):
        self.log(f"  note: {msg}")
        self.result["notes"].append(msg)

    def sql(self, eng, k=None):
        return pg.query_sql(eng, self.typ, self.metric, k or self.k)

    def conn(self, eng=None, ef=None, extra=None):
        c = self.cluster.connect()
        if eng is not None:
            pg.apply_gucs(c, eng.session_gucs(ef, extra))
        return c

    def lits_for(self, n, offset=0):
        n = min(n, len(self.lits))
        return self.lits[offset:offset + n], self.ds.truth[offset:offset + n]

    # --- setup ---------------------------------------------------------------
    def start(self):
        cfg = self.cfg
        settings = dict(pg.DEFAULT_SETTINGS)
        settings.update(cfg.get("settings") or {})
        self.settings = settings
        self.shim = Shim.create()
        self.cluster = Cluster(name="shnsw-bench", settings=settings)
        self.cluster.server_env.update(self.shim.server_env(self.cluster.datadir / "base"))
        self.cluster.init()
        self.cluster.start()
        with self.cluster.connect() as c:
            self.result["versions"] = pg.setup_extensions(c, self.log)
            rows = c.execute("SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s)",
                             (sorted(set(settings) | {"server_version", "block_size",
                                                     "io_combine_limit", "work_mem"}),)
                             ).fetchall()
            self.result["server_settings"] = {n: _with_unit(s, u) for n, s, u in rows}
            self.result["server_settings_requested"] = {k: str(v) for k, v in settings.items()}
            self.have_streamhnsw = pg.has_streamhnsw(c)
        self.result["shim"] = {"library": str(self.shim.lib), "control": str(self.shim.ctl_path),
                               "dir": self.cluster.server_env.get("SHNSW_PREAD_DIR")}
        self.engines = self._engines()
        self.result["engines"] = {e.label: {"am": e.am, "table": e.table, "index": e.index,
                                            "ef_guc": e.ef_guc, "gucs": e.gucs}
                                  for e in self.engines}

    def _engines(self):
        cfg = self.cfg
        out = []
        if "hnsw" in cfg["ams"]:
            out.append(pg.Engine("pgvector hnsw", "hnsw", "items_hnsw", "items_hnsw_idx",
                                 "hnsw.ef_search", dict(cfg.get("pgvector_gucs") or {})))
        if "streamhnsw" in cfg["ams"]:
            if not self.have_streamhnsw:
                self.note("the streamhnsw access method is not installed in this server: "
                          "pgvector and FAISS only")
            else:
                base = dict(cfg.get("streamhnsw_gucs") or {})
                modes = cfg.get("io_modes") or [None]
                for mode in modes:
                    g = dict(base)
                    label = "streamhnsw"
                    if mode is not None:
                        g["streamhnsw.io_mode"] = mode
                        label = f"streamhnsw[io_mode={mode}]"
                    out.append(pg.Engine(label, "streamhnsw", "items_streamhnsw",
                                         "items_streamhnsw_idx", "streamhnsw.ef_search", g))
        return out

    def stop(self):
        try:
            self.cluster.destroy()
        finally:
            self.shim.close()

    # --- phases ---------------------------------------------------------------
    def load_and_build(self):
        cfg, ds, log = self.cfg, self.ds, self.log
        built = {}
        for eng in self.engines:
            rec = self.result["engines"][eng.label]
            if eng.index in built:
                rec.update(built[eng.index])
                continue
            log.step(f"loading {len(ds.rows)} x {ds.dim} rows into {eng.table}")
            with self.cluster.connect() as c:
                load_s = pg.load_table(c, eng.table, ds.rows, self.typ,
                                       progress=Progress(f"COPY {eng.table}", out=log))
            log.step(f"building {eng.am} (m={cfg['m']}, ef_construction={cfg['ef_construction']})")
            b = pg.build_index(self.cluster, eng, self.typ, self.metric, cfg["m"],
                               cfg["ef_construction"], log=log)
            b["load_s"] = load_s
            log(f"    built in {b['build_s']:.1f} s, index {b['index_bytes'] / 2**20:.1f} MB, "
                f"peak private memory {b['build_peak_bytes'] / 2**20:.0f} MB (+ shared "
                f"{b['build_peak_shmem_bytes'] / 2**20:.0f} MB), {b['build_workers']} "
                "parallel workers", flush=True)
            with self.cluster.connect() as c:
                pg.check_plan(c, eng, self.sql(eng), self.lits[0])
            built[eng.index] = b
            rec.update(b)
        with self.cluster.connect() as c:
            c.execute("CHECKPOINT")

    def faiss(self):
        cfg, ds = self.cfg, self.ds
        self.log.step("FAISS anchor")
        n = min(cfg["hot_queries"], len(ds.queries))
        r = run_faiss(ds.rows, ds.queries[:n], ds.truth[:n], self.metric, cfg["m"],
                      cfg["ef_construction"], cfg["ef_search"], self.k, log=self.log)
        self.result["faiss"] = r

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
                    p = _point(eng.label, ef, lat[eng.label], found[eng.label], truth, self.k, extra)
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
            p = _point(eng.label, ef, lat, found, truth, self.k,
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

    def _cold_run(self, c, eng, ev, ef, lits, truth, delay_us, n_explain, eic=None):
        """Each query after eviction; returns a point (latency, reads, buffers)."""
        sql = self.sql(eng)
        pg.apply_gucs(c, {eng.ef_guc: ef})
        if eng.am == "streamhnsw":
            # Cold means the index pages are not in memory: the shared graph
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
        p = _point(eng.label, ef, lat, found, truth, self.k, extra)
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
                        + _shnsw_io_text(p), flush=True)
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
                    f"{p['storage_reads']:.0f}" + _shnsw_io_text(p), flush=True)
        self.result["modes"]["eic"] = {"queries": len(lits), "delay_us": delay,
                                       "points": points}

    def workers_sweep(self):
        """Cold + latency at the server's effective_io_concurrency with each
        io_workers of cfg["io_workers"] (3 is PostgreSQL's default; the
        suite's server runs 8): with io_method = worker each I/O worker reads
        one block at a time, so io_workers bounds a scan's reads in flight
        whatever effective_io_concurrency allows. The setting is reloaded
        (no restart: the shared graph image and the tables stay) and put
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
                        f"  reads/q {p['storage_reads']:.0f}" + _shnsw_io_text(p), flush=True)
        finally:
            self._reload_with({"io_workers": base})
        self.result["modes"]["workers"] = {"queries": len(lits), "delay_us": delay,
                                           "effective_io_concurrency":
                                               self.settings.get("effective_io_concurrency", 16),
                                           "points": points}

    def _reload_with(self, settings: dict):
        """Append settings to postgresql.conf and reload; waits until a new
        session shows them (returns them as the server has them)."""
        self.cluster.write_conf(settings)
        with self.cluster.connect() as c:
            c.execute("SELECT pg_reload_conf()")
        deadline = time.time() + 10
        while True:
            got = {n: v for n, (v, _) in self._server_settings(list(settings)).items()}
            if all(str(got.get(k)) == str(v) for k, v in settings.items()) or time.time() > deadline:
                return got
            time.sleep(0.2)

    def _server_settings(self, names: list) -> dict:
        """{name: (setting, unit)} as a new session sees them."""
        with self.cluster.connect() as c:
            return {n: (v, u) for n, v, u in c.execute(
                "SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s)",
                (names,)).fetchall()}

    def _restart_with(self, settings: dict):
        """Restart the server with these settings (appended to postgresql.conf)."""
        self.cluster.write_conf(settings)
        self.cluster.restart()
        return {n: _with_unit(v, u) for n, (v, u) in self._server_settings(list(settings)).items()}

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

    def run(self) -> dict:
        cfg = self.cfg
        modes = cfg["modes"]
        self.start()
        try:
            self.load_and_build()
            if "faiss" in modes:
                self.faiss()
            self.hot()                 # always: it picks the ef at target recall
            if "fresh" in modes:
                self.fresh()
            if "concurrent" in modes:
                self.concurrent()
            if "mixed" in modes:
                self.mixed()
            if "cold" in modes:
                self.cold(0)
            if "latency" in modes:
                self.cold(cfg["delay_us"])
            if "eic" in modes:
                self.eic_sweep()
            if "workers" in modes:
                self.workers_sweep()
            if "ltm" in modes:
                self.ltm()
            if "insert" in modes:
                self.inserts()
        finally:
            self.result["log_tail"] = self.cluster.log_tail(3000)
            self.stop()
        return self.result
