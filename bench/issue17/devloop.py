"""Issue 17 dev loop: one kept server with pgvector's hnsw and streamhnsw on
the same rows, for cold A/B runs without rebuilding both indexes each time.

    PYTHONPATH=python .venv/bin/python bench/issue17/devloop.py setup [--dataset sentences]
    PYTHONPATH=python .venv/bin/python bench/issue17/devloop.py run --eic 16,64
    PYTHONPATH=python .venv/bin/python bench/issue17/devloop.py rebuild   # streamhnsw only
    PYTHONPATH=python .venv/bin/python bench/issue17/devloop.py stop

`run` measures cold + injected latency (python/shnsw/bench's shim): before
every query both engines' relations are evicted from shared buffers and the
OS cache; the engines alternate query by query (same query vector for both,
a different one each time); each streamhnsw query is then run once more,
cold again, under EXPLAIN (ANALYZE) for its I/O figures (--keep-os-cache:
evicted from shared buffers only, so a read costs the injected delay and a
copy, not the virtual disk's time too). Prints medians,
ratios, round trips (EXPLAIN waits + synchronous reads) and pages per
expansion, and writes the points as JSON. The benchmark suite
(python -m shnsw.bench) remains the reference; this is for iterating.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

from shnsw import data as shdata
from shnsw.bench import datasets, pg
from shnsw.bench.shim import Shim, diff as shim_diff
from shnsw.cluster import Cluster

STATE = Path(os.environ.get("SHNSW_DEVLOOP_DIR", "/tmp/cold3-dev"))
SETTINGS = {"shared_buffers": "2GB", "io_method": "worker", "io_workers": 16,
            "effective_io_concurrency": 16, "maintenance_work_mem": "1GB",
            "max_parallel_maintenance_workers": 2, "jit": "off", "max_wal_size": "8GB",
            "checkpoint_timeout": "30min", "track_io_timing": "on",
            "streamhnsw.shared_cache": "off"}
ENGINES = {"pgvector": pg.Engine("pgvector hnsw", "hnsw", "t_pg", "t_pg_idx", "hnsw.ef_search"),
           "streamhnsw": pg.Engine("streamhnsw", "streamhnsw", "t_sh", "t_sh_idx",
                                   "streamhnsw.ef_search",
                                   {"streamhnsw.shared_cache": "off"}),
           # the same index read by the previous release's read-ahead rules
           "shmain": pg.Engine("streamhnsw (main's reader)", "streamhnsw", "t_sh", "t_sh_idx",
                               "streamhnsw.ef_search",
                               {"streamhnsw.shared_cache": "off",
                                "streamhnsw.debug_reader_main": "on"}),
           # a second streamhnsw index on a copy of the rows (devloop.py clone):
           # the index built by the library installed now, beside the older one
           "streamhnsw2": pg.Engine("streamhnsw (new build)", "streamhnsw", "t_sh2", "t_sh2_idx",
                                    "streamhnsw.ef_search",
                                    {"streamhnsw.shared_cache": "off"}),
           # indexes created on empty tables and filled by inserts (devloop.py fill)
           "pgvector-ins": pg.Engine("pgvector hnsw (inserted)", "hnsw", "t_pgi", "t_pgi_idx",
                                     "hnsw.ef_search"),
           "streamhnsw-ins": pg.Engine("streamhnsw (inserted)", "streamhnsw", "t_shi", "t_shi_idx",
                                       "streamhnsw.ef_search",
                                       {"streamhnsw.shared_cache": "off"})}


class Chunks:
    """The real sentence vectors embedded so far (the shared store's chunk
    files, read only): positions 0..1999 are the queries, 2000..2999 the
    insert rows, the rest the table's rows (datasets.sentence_split)."""

    def __init__(self, rows: int):
        store = sorted(datasets.DATA_DIR.glob("sentences-*-minilm-s42"))[0]
        files = sorted(store.glob("chunk-*.npy"))
        x = np.concatenate([np.load(f) for f in files]).astype(np.float32)
        self.queries = np.ascontiguousarray(x[:2000])
        self.rows = np.ascontiguousarray(x[3000:3000 + rows])
        print(f"real sentences from {len(files)} chunks: {len(self.rows)} rows", flush=True)
        self.truth = datasets.exact_knn(self.rows, self.queries, 100, "cosine")


def load_dataset(name: str, rows: int, dim: int):
    if name == "chunks":
        return Chunks(rows)
    if name == "sentences":
        return datasets.sentences(n_rows=rows, n_queries=2000, n_inserts=1000)
    if name == "glove":
        return datasets.glove()
    return datasets.synthetic(rows, dim, "cosine")


def cluster_and_shim(create: bool):
    """The kept cluster (started) and its shim, from STATE."""
    meta = STATE / "meta.json"
    if create:
        STATE.mkdir(parents=True, exist_ok=True)
        shim = Shim.create()
        c = Cluster(settings=SETTINGS, base_dir=STATE / "pg", name="cold3-dev",
                    env=shim.server_env((STATE / "pg" / "data" / "base")))
        c.init()
        meta.write_text(json.dumps({"ctl": str(shim.ctl_path)}))
    else:
        info = json.loads(meta.read_text())
        shim = Shim(Path(info["ctl"]))
        c = Cluster(base_dir=STATE / "pg", name="cold3-dev",
                    env=shim.server_env((STATE / "pg" / "data" / "base")))
    c.write_conf({"port": c.port})
    try:
        c.start()
    except RuntimeError:
        # already running (a previous command left it up): read its port
        with open(c.datadir / "postmaster.pid") as f:
            lines = f.read().splitlines()
        c.port = int(lines[3])
        c.running = True
    return c, shim


def cmd_setup(a):
    ds = load_dataset(a.dataset, a.rows, a.dim)
    c, shim = cluster_and_shim(True)
    np.save(STATE / "queries.npy", ds.queries)
    np.save(STATE / "truth.npy", ds.truth)
    with c.connect() as conn:
        pg.setup_extensions(conn)
        for eng in ENGINES.values():
            pg.load_table(conn, eng.table, ds.rows, "vector")
    for eng in [ENGINES["pgvector"], ENGINES["streamhnsw"]]:
        r = pg.build_index(c, eng, "vector", "cosine", 16, 64, log=print, poll=30)
        print(f"{eng.label}: built in {r['build_s']:.0f} s, {r['index_bytes'] / 2**20:.0f} MB")
    with c.connect() as conn:
        conn.execute("CHECKPOINT")
    print(f"kept server in {STATE}, port {c.port}")


def cmd_rebuild(a):
    c, shim = cluster_and_shim(False)
    eng = ENGINES[a.engine]
    with c.connect() as conn:
        have = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (eng.table,)).fetchone()[0]
        if a.engine == "streamhnsw2" and not have:
            conn.execute(f"CREATE TABLE {eng.table} (LIKE t_pg INCLUDING ALL)")
            conn.execute(f"INSERT INTO {eng.table} SELECT * FROM t_pg")
            conn.execute(f"ALTER TABLE {eng.table} SET (autovacuum_enabled = off)")
            conn.execute(f"VACUUM (ANALYZE, FREEZE) {eng.table}")
        conn.execute(f"DROP INDEX IF EXISTS {eng.index}")
    r = pg.build_index(c, eng, "vector", "cosine", 16, 64, log=print, poll=30)
    with c.connect() as conn:
        conn.execute("CHECKPOINT")
    print(f"{eng.label}: built in {r['build_s']:.0f} s, {r['index_bytes'] / 2**20:.0f} MB")


def cmd_fill(a):
    """Copies of the rows into tables whose index (cosine, m 16,
    ef_construction 64) was created empty, filled by two clients inserting
    the rows in id order, 500 a statement (each row one index insert), for
    each engine in turn."""
    c, shim = cluster_and_shim(False)
    for key in ("pgvector-ins", "streamhnsw-ins"):
        eng = ENGINES[key]
        with c.connect() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {eng.table}")
            conn.execute(f"CREATE TABLE {eng.table} (LIKE t_pg)")
            conn.execute(f"ALTER TABLE {eng.table} SET (autovacuum_enabled = off)")
            conn.execute(f"CREATE INDEX {eng.index} ON {eng.table} USING {eng.am} "
                         "(embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)")
            lo, hi = conn.execute("SELECT min(id), max(id) FROM t_pg").fetchone()
        errors = []

        def insert(part):
            try:
                with c.connect() as cc:
                    cc.autocommit = True
                    for s in range(lo + part * 500, hi + 1, 1000):
                        cc.execute(f"INSERT INTO {eng.table} SELECT * FROM t_pg "
                                   "WHERE id >= %s AND id < %s ORDER BY id", (s, s + 500))
            except Exception as e:  # reported below
                errors.append(e)
        t0 = time.perf_counter()
        threads = [threading.Thread(target=insert, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        secs = time.perf_counter() - t0
        with c.connect() as conn:
            conn.execute(f"VACUUM (ANALYZE, FREEZE) {eng.table}")
            conn.execute("CHECKPOINT")
            mb = conn.execute("SELECT pg_relation_size(%s)", (eng.index,)).fetchone()[0] / 2**20
        print(f"{eng.label}: {secs:.0f} s to insert, index {mb:.0f} MB")


def cmd_stop(a):
    c, shim = cluster_and_shim(False)
    c.stop()


def cmd_restart(a):
    c, shim = cluster_and_shim(False)
    c.stop()
    cluster_and_shim(False)


SH_FIELDS = ("Nodes Expanded", "Pages Hit", "Pages Read", "Synchronous Reads", "Waits",
             "Serial Round Trips",
             "Reads Ahead", "Speculative Reads", "Speculative Used", "Speculative Wasted",
             "Re-ranked", "Serial Descent", "Serial Search", "Serial Re-rank", "Serial Other",
             "Reads Descent", "Reads Search", "Reads Re-rank", "Reads Other")


def explain_io(conn, sql, lit) -> dict:
    plan = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + sql, (lit,)).fetchone()[0]
    node = plan[0]["Plan"]
    while "streamhnsw I/O Mode" not in node and node.get("Plans"):
        node = node["Plans"][0]
    return {k: node.get("streamhnsw " + k, 0) for k in SH_FIELDS}


def cmd_run(a):
    c, shim = cluster_and_shim(False)
    if a.io_workers:
        c.write_conf({"io_workers": a.io_workers})
        with c.connect() as conn:
            conn.execute("SELECT pg_reload_conf()")
        time.sleep(1)
    queries = np.load(STATE / "queries.npy")
    truth = np.load(STATE / "truth.npy")
    first = a.offset
    lits = pg.literals(queries[first:first + a.queries])
    efs = {n: (a.ef_pg if e.am == "hnsw" else a.ef_sh) for n, e in ENGINES.items()}
    engines = [e for e in a.engines.split(",")]
    conns, evs = {}, {}
    for name in engines:
        eng = ENGINES[name]
        conn = c.connect()
        pg.apply_gucs(conn, eng.session_gucs(efs[name]))
        for k, v in (kv.split("=", 1) for kv in a.set):
            pg.apply_gucs(conn, {k: v})
        conns[name] = conn
        evs[name] = pg.Evictor(conn, c.datadir, eng, os_cache=not a.keep_os_cache)
    workers = conns[engines[0]].execute("SHOW io_workers").fetchone()[0]
    out = []
    load = os.getloadavg()
    for eic in [int(x) for x in a.eic.split(",")]:
        res = {n: {"lat": [], "recall": [], "io": [], "busy": [], "reads": []} for n in engines}
        for name in engines:
            pg.apply_gucs(conns[name], {"effective_io_concurrency": eic})
        for qi, lit in enumerate(lits):
            for name in engines:
                eng, conn = ENGINES[name], conns[name]
                sql = pg.query_sql(eng, "vector", "cosine", 10)
                evs[name](conn)
                shim.set(enabled=True, delay_us=a.delay)
                before = shim.counters()
                t = time.perf_counter()
                rows = conn.execute(sql, (lit,)).fetchall()
                res[name]["lat"].append((time.perf_counter() - t) * 1e3)
                d = shim_diff(shim.counters(), before)
                shim.set(enabled=False)
                # storage busy time in injected delays: the serial round
                # trips storage saw (the shim's busy counters), all reads
                # of the query (index, heap, catalog) included
                res[name]["busy"].append(d["busy_ns"] / 1e3 / a.delay if a.delay else 0.0)
                res[name]["reads"].append(d["reads"])
                got = {r[0] for r in rows}
                res[name]["recall"].append(len(got & set(truth[first + qi][:10].tolist())) / 10)
                if eng.am == "streamhnsw" and not a.no_explain:
                    evs[name](conn)
                    shim.set(enabled=True, delay_us=a.delay)
                    res[name]["io"].append(explain_io(conn, sql, lit))
                    shim.set(enabled=False)
        line = {"eic": eic, "io_workers": workers, "delay_us": a.delay, "load": load,
                "queries": len(lits), "set": a.set}
        for name in engines:
            line[name] = {"ef": efs.get(name, a.ef_sh), "p50_ms": statistics.median(res[name]["lat"]),
                          "recall": statistics.mean(res[name]["recall"]),
                          "lat": res[name]["lat"],
                          "storage_serial": statistics.median(res[name]["busy"]),
                          "storage_reads": statistics.median(res[name]["reads"])}
            io = res[name]["io"]
            if io:
                med = {k: statistics.median(x[k] for x in io) for k in SH_FIELDS}
                exp = sum(x["Nodes Expanded"] for x in io) or 1
                med["round_trips"] = statistics.median(x["Waits"] + x["Synchronous Reads"]
                                                       for x in io)
                med["pages_per_expansion"] = sum(x["Pages Hit"] + x["Pages Read"]
                                                 for x in io) / exp
                med["reads_per_expansion"] = sum(x["Pages Read"] for x in io) / exp
                line[name]["io"] = med
        out.append(line)
        msg = f"eic {eic:3d} io_workers {workers}:"
        for name in engines:
            msg += (f"  {name} p50 {line[name]['p50_ms']:.1f} ms (recall {line[name]['recall']:.3f},"
                    f" storage serial {line[name]['storage_serial']:.0f},"
                    f" reads {line[name]['storage_reads']:.0f})")
        for name in [n for n in engines if ENGINES[n].am == "streamhnsw"]:
            base = "pgvector-ins" if name.endswith("-ins") else "pgvector"
            if base in line:
                msg += f"  {name} ratio {line[base]['p50_ms'] / line[name]['p50_ms']:.1f}x"
        for name in [n for n in engines if "io" in line[n]]:
            io = line[name]["io"]
            msg += (f"\n    {name}: rt {io['round_trips']:.0f} serial "
                    f"{io['Serial Round Trips']:.0f} waits {io['Waits']:.0f} sync "
                    f"{io['Synchronous Reads']:.0f} read {io['Pages Read']:.0f} "
                    f"exp {io['Nodes Expanded']:.0f} pages/exp {io['pages_per_expansion']:.2f} "
                    f"reads/exp {io['reads_per_expansion']:.2f} spec {io['Speculative Reads']:.0f}"
                    f"/{io['Speculative Used']:.0f}"
                    f"\n      serial by phase: descent {io['Serial Descent']:.1f} search "
                    f"{io['Serial Search']:.1f} re-rank {io['Serial Re-rank']:.1f} other "
                    f"{io['Serial Other']:.1f}; reads {io['Reads Descent']:.0f}/"
                    f"{io['Reads Search']:.0f}/{io['Reads Re-rank']:.0f}/{io['Reads Other']:.0f}")
        msg += f"  (load {load[0]:.1f})"
        print(msg, flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
    for conn in conns.values():
        conn.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--dataset", default="sentences", choices=["sentences", "synthetic", "chunks", "glove"])
    s.add_argument("--rows", type=int, default=100_000)
    s.add_argument("--dim", type=int, default=384)
    rb = sub.add_parser("rebuild")
    rb.add_argument("--engine", default="streamhnsw", choices=["streamhnsw", "streamhnsw2"])
    sub.add_parser("fill")
    sub.add_parser("stop")
    sub.add_parser("restart")
    r = sub.add_parser("run")
    r.add_argument("--eic", default="16")
    r.add_argument("--queries", type=int, default=12)
    r.add_argument("--offset", type=int, default=0)
    r.add_argument("--ef-pg", type=int, default=48)
    r.add_argument("--ef-sh", type=int, default=48)
    r.add_argument("--delay", type=int, default=300)
    r.add_argument("--io-workers", type=int, default=0)
    r.add_argument("--engines", default="pgvector,streamhnsw")
    r.add_argument("--set", action="append", default=[], help="streamhnsw/pg GUC=V (both)")
    r.add_argument("--no-explain", action="store_true")
    r.add_argument("--keep-os-cache", action="store_true",
                   help="evict shared buffers only: reads cost the injected delay, not the disk's time")
    r.add_argument("--out")
    a = p.parse_args(argv)
    {"setup": cmd_setup, "rebuild": cmd_rebuild, "fill": cmd_fill, "stop": cmd_stop, "restart": cmd_restart,
     "run": cmd_run}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
