"""Both engines on a local Citus cluster beside one node:
`python -m shnsw.bench --preset citus`.

A coordinator and two workers on this machine (shnsw.citus: Citus built
from its source tarball into a copy of the project's PostgreSQL) hold the
data set in a distributed table (32 shards by default); one plain server
holds it in one table. On each, for pgvector's hnsw and streamhnsw:

- build time of CREATE INDEX (on Citus, one index per shard, the workers
  building their shards at once);
- recall@10 against the exact answer over all rows and serial latency
  through the coordinator (p50, p99), per ef_search; the smallest ef_search
  that reaches the target recall is each engine's operating point, so the
  engines are compared at equal recall;
- queries per second at that point with 1 and 4 concurrent clients;
- a new coordinator connection's first query (Citus opens new worker
  connections for it: the shard backends' first queries);
- per worker: the bytes of its shard indexes and of its shared cache.

How ef_search reaches the shards, as a user would set it: streamhnsw's as
the index option (ALTER INDEX ... SET (ef_search = N), stored on every
shard's index); pgvector's with SET LOCAL hnsw.ef_search in a transaction
with citus.propagate_set_commands = 'local'. Sequential scans are turned
off on the shards the same way for both engines, so that each answers from
its index even on shards small enough for a sequential scan and sort.

The report goes to bench/reports/citus-<dataset>.md and .json; the scaling
page (docs/scaling.md) extrapolates from its per-shard figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

from .. import citus, data, demo_citus
from ..cluster import Cluster
from . import datasets
from . import report as report_mod

ROOT = Path(__file__).resolve().parents[3]
K = demo_citus.K
ENGINES = (("pgvector hnsw", "hnsw"), ("streamhnsw", "streamhnsw"))
EF = [10, 16, 24, 32, 40, 64, 96, 128, 200]
SETTINGS = {"shared_buffers": "1GB", "maintenance_work_mem": "512MB", "jit": "off",
            "max_parallel_maintenance_workers": 0}


def _load_dataset(a):
    if a.dataset == "sentences":
        return datasets.sentences(n_rows=a.rows, n_queries=a.queries, seed=a.seed)
    return datasets.synthetic(a.rows, a.dim, "cosine", n_queries=a.queries, seed=a.seed)


def _percentile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p * (len(v) - 1))))]


class Node:
    """One way to run a query: through a Citus coordinator or on one server."""

    def __init__(self, name, server, distributed):
        self.name, self.server, self.distributed = name, server, distributed

    def connect(self):
        return self.server.connect(autocommit=True)

    def set_ef(self, conn, table, am, ef):
        """ef_search as a user sets it; returns the SQL run before each batch."""
        if am == "streamhnsw":
            conn.execute(f"ALTER INDEX {table}_idx SET (ef_search = {ef})")
            return ["SET LOCAL enable_seqscan = off"]
        return ["SET LOCAL enable_seqscan = off", f"SET LOCAL hnsw.ef_search = {ef}"]

    def prepare(self, conn):
        if self.distributed:
            conn.execute("SET citus.propagate_set_commands = 'local'")


def _batch(conn, node, table, prelude, queries):
    """ids and latencies (ms) of queries run in one transaction."""
    node.prepare(conn)
    return demo_citus.search(conn, table, queries, prelude)


def _throughput(node, table, prelude, queries, clients, seconds):
    """Queries per second of `clients` connections for `seconds`."""
    counts = [0] * clients
    stop = time.perf_counter() + seconds

    def run(i):
        # each client its own rotation of the queries, 20 to a transaction
        order = np.roll(np.arange(len(queries)), -i * 37)
        with node.connect() as conn:
            j = 0
            while time.perf_counter() < stop:
                batch = [queries[order[(j + b) % len(queries)]] for b in range(20)]
                _batch(conn, node, table, prelude, batch)
                counts[i] += len(batch)
                j += 20
    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def _fresh(node, table, prelude, queries, n):
    """Latency (ms) of the first query of n new coordinator connections."""
    times = []
    for q in queries[:n]:
        with node.connect() as conn:
            times += _batch(conn, node, table, prelude, [q])[1]
    return times


def _memory(cc, table):
    """Per worker: bytes of the table's shard indexes and of its shared cache."""
    out = []
    for w in cc.workers:
        with w.connect() as conn:
            # the shard tables are table_<shardid>, each with its index;
            # Citus hides shards from pg_class unless asked
            conn.execute("SET citus.override_table_visibility = off")
            idx, shards = conn.execute(
                "SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0), count(*) "
                "FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid "
                "WHERE t.relname ~ %s", (f"^{table}_[0-9]+$",)).fetchone()
            cache = 0
            if "streamhnsw" in table:
                cache = conn.execute("SELECT coalesce(sum(bytes), 0) FROM streamhnsw_cache_list()"
                                     ).fetchone()[0]
        out.append({"worker": w.port, "index_bytes": int(idx), "cache_bytes": int(cache),
                    "shard_indexes": int(shards)})
    return out


def _run_node(node, ds, a, log):
    """Every measurement of both engines on one node (Citus or single)."""
    res = {}
    with node.connect() as conn:
        if node.distributed:
            conn.execute(f"SET citus.shard_count = {a.shards}")
        for name, am in ENGINES:
            table = f"items_{am}"
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"CREATE TABLE {table} (id bigint, embedding vector({ds.dim}))")
            if node.distributed:
                conn.execute(f"SELECT create_distributed_table('{table}', 'id')")
            data.load(conn, table, ds.rows, create=False)
            t = time.perf_counter()
            conn.execute(f"CREATE INDEX {table}_idx ON {table} USING {am} "
                         "(embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)")
            build_s = time.perf_counter() - t
            conn.execute(f"VACUUM ANALYZE {table}")
            log(f"  {node.name}, {name}: built in {build_s:.1f} s")
            sweep, point = [], None
            for ef in EF:
                prelude = node.set_ef(conn, table, am, ef)
                _batch(conn, node, table, prelude, ds.queries[:20])     # warm-up
                found, times = _batch(conn, node, table, prelude, ds.queries)
                rec = data.recall(found, ds.truth, K)
                row = {"ef_search": ef, "recall": rec, "p50_ms": statistics.median(times),
                       "p99_ms": _percentile(times, 0.99)}
                sweep.append(row)
                log(f"    ef {ef}: recall {rec:.3f}, p50 {row['p50_ms']:.2f} ms")
                if point is None and rec >= a.target_recall:
                    point = row
                    break
            point = point or sweep[-1]
            prelude = node.set_ef(conn, table, am, point["ef_search"])
            qps = {c: _throughput(node, table, prelude, ds.queries, c, a.seconds)
                   for c in a.clients}
            fresh = _fresh(node, table, prelude, ds.queries, a.fresh)
            res[am] = {"build_s": build_s, "sweep": sweep, "point": point,
                       "qps": {str(c): v for c, v in qps.items()},
                       "fresh_p50_ms": statistics.median(fresh),
                       "fresh_p99_ms": _percentile(fresh, 0.99)}
            log(f"    at ef {point['ef_search']}: " + ", ".join(
                f"{c} clients {v:.0f} q/s" for c, v in qps.items()) +
                f", fresh connection p50 {res[am]['fresh_p50_ms']:.1f} ms")
    return res


def _markdown(report):
    s = report["settings"]
    lines = [f"# Citus: both engines, {s['dataset_name']}", "",
             f"{s['rows']:,} rows x {s['dim']} (cosine), {s['queries']} held-out queries, "
             f"k = {K}; Citus {s['citus']}: a coordinator and {s['workers']} workers on one "
             f"machine, {s['shards']} shards; beside one plain server. m 16, ef_construction "
             f"64; server settings {s['server']}. Operating point: the smallest ef_search "
             f"with recall >= {s['target_recall']}. One run.", "",
             "| setup | engine | build s | ef_search | recall@10 | p50 ms | p99 ms | "
             + " | ".join(f"q/s {c} cl." for c in s["clients"]) + " | new conn. p50 ms |",
             "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(s["clients"]) + "---:|"]
    for setup in ("citus", "single"):
        for name, am in ENGINES:
            r = report[setup][am]
            p = r["point"]
            lines.append(f"| {setup} | {name} | {r['build_s']:.1f} | {p['ef_search']} | "
                         f"{p['recall']:.3f} | {p['p50_ms']:.2f} | {p['p99_ms']:.2f} | "
                         + " | ".join(f"{r['qps'][str(c)]:.0f}" for c in s["clients"])
                         + f" | {r['fresh_p50_ms']:.1f} |")
    lines += ["", "Per worker (Citus):", "",
              "| engine | worker | shard indexes | index MB | shared cache MB |",
              "|---|---:|---:|---:|---:|"]
    for name, am in ENGINES:
        for w in report["memory"][am]:
            lines.append(f"| {name} | {w['worker']} | {w['shard_indexes']} | "
                         f"{w['index_bytes'] / 2**20:.1f} | {w['cache_bytes'] / 2**20:.1f} |")
    lines += ["", "ef_search sweeps (recall, p50 ms):", ""]
    for setup in ("citus", "single"):
        for name, am in ENGINES:
            pts = ", ".join(f"{r['ef_search']}: {r['recall']:.3f} / {r['p50_ms']:.2f}"
                            for r in report[setup][am]["sweep"])
            lines.append(f"- {setup}, {name}: {pts}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench --preset citus",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", choices=("sentences", "synthetic"), default="sentences")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384, help="synthetic only")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--target-recall", type=float, default=0.95)
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--fresh", type=int, default=30, help="new connections measured")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "reports")
    a = ap.parse_args(argv)
    a.clients = [int(c) for c in a.clients.split(",")]
    why = citus.unavailable()
    if why:
        print(f"citus preset: cannot run: {why}", file=sys.stderr)
        return 2
    log = print
    ds = _load_dataset(a)
    log(f"citus preset: {ds.name}, {len(ds.queries)} queries")
    report = {"settings": {"dataset_name": ds.name, "rows": int(len(ds.rows)), "dim": ds.dim,
                           "queries": int(len(ds.queries)), "shards": a.shards, "workers": 2,
                           "citus": citus.tarball().name, "server": SETTINGS,
                           "target_recall": a.target_recall, "clients": a.clients,
                           "seconds": a.seconds}}
    with citus.CitusCluster(dev=False, settings=SETTINGS, say=log) as cc:
        report["citus"] = _run_node(Node("citus", cc.coordinator, True), ds, a, log)
        report["memory"] = {am: _memory(cc, f"items_{am}") for _, am in ENGINES}
    with Cluster(name="shnsw-citus-single", settings=SETTINGS) as single:
        single.execute("CREATE EXTENSION streamhnsw CASCADE")
        report["single"] = _run_node(Node("single", single, False), ds, a, log)
    report_mod.write_standalone(a.out / f"citus-{a.dataset}", report, _markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
