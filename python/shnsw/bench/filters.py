"""Filtered queries side by side with pgvector's iterative scan: recall, time, plans.

    .venv/bin/python -m shnsw.bench.filters \
        --dir /tmp/filter-pg [--shapes d3,d128] [--queries 20] [--stop]

Keeps one cluster in --dir (created on first use, reused by later runs;
--stop stops it). Shapes (each one table, with a streamhnsw and a pgvector
hnsw index per metric, m 16, ef_construction 64, default build settings):

  d3    100,000 rows of vector(3), uniform in [0,1)^3 (the issue's shape)
  d128  30,000 rows of 128-d clustered data (shnsw.data.clustered, seed 5)

Every row has c = id % 500, so the filters are

  100 %  true            10 %   c < 50
  2 %    c < 10          0.2 %  c < 1

Both tables are larger than the default max_scan_tuples (20,000), so no
streamhnsw scan here sweeps the index: the answers come from the graph
walk, as on a large table.

Recall: for the 2 % and 0.2 % filters, LIMIT 10 and 20, every metric (l2,
cosine, ip), the index of each engine is forced (the other indexes are
marked invalid inside a rolled-back transaction, enable_seqscan off) and
each query's rows are compared with the exact answer (the same query
with index scans off). Default settings for both engines, except that
pgvector runs with hnsw.iterative_scan = strict_order (its default, off,
returns at most ef_search rows before the filter). Queries alternate
between the engines; time per query is client side, median and p90.

Plans: for each filter, LIMIT 20, L2, on a copy of the table that has
only one engine's index, the plan the planner chooses at default settings
and how many rows it returns (pgvector with iterative scan off and
strict_order).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from .. import data
from ..cluster import Cluster, open_kept

OPS = {"l2": ("<->", "vector_l2_ops"), "cosine": ("<=>", "vector_cosine_ops"),
       "ip": ("<#>", "vector_ip_ops")}
FILTERS = [("100%", "true"), ("10%", "c < 50"), ("2%", "c < 10"), ("0.2%", "c < 1")]
SETTINGS = {"shared_buffers": "512MB", "maintenance_work_mem": "512MB", "jit": "off"}


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def shape_data(name: str, n_queries: int):
    if name == "d3":
        rng = np.random.default_rng(3)
        return rng.random((100_000, 3), dtype=np.float32), rng.random((n_queries, 3), dtype=np.float32)
    if name == "d128":
        return data.clustered(30_000, 128, seed=5, n_queries=n_queries)
    raise SystemExit(f"unknown shape {name}")


def open_cluster(d: Path) -> Cluster:
    c = open_kept(d, SETTINGS, "filter")
    return c


def ensure(conn, name: str, rows: np.ndarray) -> None:
    """Table fc_NAME with both engines' indexes per metric; fc_NAME_s/_p for plans."""
    t = f"fc_{name}"
    if conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = %s",
                    (t,)).fetchone()[0] == 7:
        return
    log(f"loading {t}")
    data.load(conn, t, rows)
    conn.execute(f"ALTER TABLE {t} ADD COLUMN c int")
    conn.execute(f"UPDATE {t} SET c = id % 500")
    for metric, (_, ops) in OPS.items():
        for am, suf in (("streamhnsw", "s"), ("hnsw", "p")):
            t0 = time.time()
            conn.execute(f"CREATE INDEX {t}_{suf}_{metric} ON {t} USING {am} (embedding {ops})")
            log(f"built {t}_{suf}_{metric} in {time.time() - t0:.0f} s")
    conn.execute(f"VACUUM ANALYZE {t}")
    for am, suf in (("streamhnsw", "s"), ("hnsw", "p")):
        conn.execute(f"DROP TABLE IF EXISTS {t}_{suf}")
        conn.execute(f"CREATE TABLE {t}_{suf} AS SELECT * FROM {t}")
        conn.execute(f"CREATE INDEX ON {t}_{suf} USING {am} (embedding vector_l2_ops)")
        conn.execute(f"VACUUM ANALYZE {t}_{suf}")


def only_index(conn, table: str, keep: str) -> None:
    conn.execute("UPDATE pg_index SET indisvalid = (indexrelid = %s::regclass) "
                 "WHERE indrelid = %s::regclass", (keep, table))


def pct(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))]


def parse_variants(specs: list) -> list:
    """--variant NAME=SETTING[;SETTING...]: streamhnsw runs under each, side by side."""
    out = []
    for spec in specs or ["streamhnsw="]:
        name, _, gucs = spec.partition("=")
        out.append((name, [g for g in gucs.split(";") if g.strip()]))
    return out


def cells(filters: list, limits_filtered: list, limits_all: list):
    for sel, filt in FILTERS:
        if sel not in filters:
            continue
        for k in (limits_all if filt == "true" else limits_filtered):
            yield sel, filt, k


def recall(conn, name: str, queries: np.ndarray, variants: list, filters: list,
           limits_filtered: list, limits_all: list, metrics: list) -> list:
    t = f"fc_{name}"
    lits = [data.vector_literal(q) for q in queries]
    engines = [(v, f"{t}_s_{{}}", g) for v, g in variants]
    engines.append(("pgvector", f"{t}_p_{{}}", ["hnsw.iterative_scan = strict_order"]))
    out = []
    for metric in metrics:
        op = OPS[metric][0]
        for sel, filt, k in cells(filters, limits_filtered, limits_all):
            sql = f"SELECT id FROM {t} WHERE {filt} ORDER BY embedding {op} %s::vector LIMIT {k}"
            with conn.transaction(force_rollback=True):
                conn.execute("SET LOCAL enable_indexscan = off")
                truth = [{r[0] for r in conn.execute(sql, (lit,)).fetchall()} for lit in lits]
            res = {e[0]: {"hits": 0, "n": 0, "ms": []} for e in engines}
            for lit, tr in zip(lits, truth):
                for am, idx, gucs in engines:
                    with conn.transaction(force_rollback=True):
                        only_index(conn, t, idx.format(metric))
                        conn.execute("SET LOCAL enable_seqscan = off")
                        for g in gucs:
                            conn.execute("SET LOCAL " + g)
                        t0 = time.perf_counter()
                        got = [r[0] for r in conn.execute(sql, (lit,)).fetchall()]
                        res[am]["ms"].append((time.perf_counter() - t0) * 1000)
                    res[am]["hits"] += len(set(got) & tr)
                    res[am]["n"] += len(tr)
            row = f"| {name} | {metric} | {sel} | {k} |"
            for am, _, _ in engines:
                r = res[am]
                row += (f" {r['hits'] / max(r['n'], 1):.3f} | {statistics.median(r['ms']):.1f} / "
                        f"{pct(r['ms'], 0.9):.1f} |")
            print(row, flush=True)
            out.append(row)
    return out


def plans(conn, name: str, q: np.ndarray) -> None:
    lit = data.vector_literal(q)
    for label, filt in FILTERS:
        row = f"| {name} | {label} |"
        matching = conn.execute(f"SELECT count(*) FROM fc_{name} WHERE {filt}").fetchone()[0]
        for am, suf, guc in (("streamhnsw", "s", None), ("pgvector", "p", None),
                             ("pgvector strict_order", "p", "hnsw.iterative_scan = strict_order")):
            with conn.transaction(force_rollback=True):
                if guc:
                    conn.execute("SET LOCAL " + guc)
                sql = (f"SELECT id FROM fc_{name}_{suf} WHERE {filt} "
                       f"ORDER BY embedding <-> %s::vector LIMIT 20")
                plan = [r[0] for r in conn.execute("EXPLAIN " + sql, (lit,)).fetchall()]
                shape = "index" if any("Index Scan" in p for p in plan) else "seq+sort"
                got = len(conn.execute(sql, (lit,)).fetchall())
            row += f" {shape}, {got} of {min(20, matching)} |"
        print(row, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench.filters", description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/filter-pg")
    ap.add_argument("--shapes", default="d3,d128")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--metrics", default="l2,cosine,ip")
    ap.add_argument("--filters", default="2%,0.2%",
                    help="of 100%%,10%%,2%%,0.2%% (100%% is no WHERE clause)")
    ap.add_argument("--limits", default="10,20", help="LIMITs of the filtered queries")
    ap.add_argument("--limits-all", default="10,100", help="LIMITs of the unfiltered ones")
    ap.add_argument("--variant", action="append",
                    help="NAME=SETTING[;SETTING]: a streamhnsw column run under these "
                         "settings (repeatable; default: one column at default settings)")
    ap.add_argument("--no-plans", action="store_true")
    ap.add_argument("--stop", action="store_true")
    a = ap.parse_args(argv)
    c = open_cluster(Path(a.dir))
    if a.stop:
        c.stop()
        return
    variants = parse_variants(a.variant)
    filters = a.filters.split(",")
    lim = [int(x) for x in a.limits.split(",")]
    lim_all = [int(x) for x in a.limits_all.split(",")]
    with c.connect() as conn:
        shapes = {}
        for name in a.shapes.split(","):
            rows, queries = shape_data(name, a.queries)
            ensure(conn, name, rows)
            conn.execute(f"SELECT count(*) FROM fc_{name}")
            shapes[name] = queries
        head = "| shape | metric | filter | LIMIT |"
        for v, _ in variants + [("pgvector strict_order", None)]:
            head += f" {v} recall | {v} ms p50 / p90 |"
        print(head)
        print("|---" * (4 + 2 * (len(variants) + 1)) + "|")
        for name, queries in shapes.items():
            recall(conn, name, queries, variants, filters, lim, lim_all, a.metrics.split(","))
        if a.no_plans:
            return
        print()
        print("| shape | filter | streamhnsw | pgvector (iterative scan off) | pgvector strict_order |")
        print("|---|---|---|---|---|")
        for name, queries in shapes.items():
            plans(conn, name, queries[0])


if __name__ == "__main__":
    main()
