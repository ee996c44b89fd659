"""Recall side by side with pgvector's hnsw, in one run on one server.

    .venv/bin/python -m shnsw.bench.recall [--sets pgv-build,pgv-insert,clustered,...] [--runs 3]

Sets (all recall@10 over held-out queries unless said):
  pgv-build    pgvector's build-recall scenario: 10,000 rows of vector(3) and
               halfvec(3), ARRAY[random() * random(), ...], 20 queries
               ARRAY[random(), ...], recall@20 at the default ef_search, three
               metrics, five seeds (pgvector asks 0.99; ip 0.97; halfvec 0.98)
  pgv-insert   pgvector's insert-recall scenario: the same rows inserted by 10
               concurrent clients into an empty indexed table
  clustered    clustered 10k x 128 l2, built;  clustered-ins: the same, inserted
  cos768       clustered 5k x 768 cosine, built;  cos768-ins: the same, inserted
  uniform      uniform random 10k x 128 l2, built
  sentences    real sentence embeddings 100k x 384 cosine (bench data set);
               sentences30k: its first 30,000 rows (1,000 queries; more rows
               than max_scan_tuples, so no scan sweeps the whole index)
  cos128       clustered 30k x 128 cosine (the same reason for 30k)
  NAME-half    any set above: the index built on its first half, the rest
               inserted by 2 clients (an insert-built index that starts from
               a built graph), e.g. sentences30k-half
  NAME-ins     any set above: every row inserted by 2 clients into an index
               created on the empty table, e.g. sentences-ins
  glove        GloVe 6B 400k x 50 cosine (bench data set)

Both engines get identical rows in two tables, m 16, ef_construction 64, no
parallel maintenance workers. pgvector draws its levels from the server's
random state, so each small set is built --runs times (both engines) and the
median recall per ef_search is reported. Prints a Markdown table and writes
JSON (--json). Hot q/s is one client's rate over the query set, after a warm
pass; buffers read per cold query come from EXPLAIN (ANALYZE, BUFFERS) after
pg_buffercache_evict_relation on the index and table (--cold N queries).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

from .. import data
from ..cluster import Cluster

EFS = [10, 15, 20, 25, 30, 40, 50, 60, 80, 100, 150, 200]
OPS = {"l2": ("<->", "vector_l2_ops"), "cosine": ("<=>", "vector_cosine_ops"),
       "ip": ("<#>", "vector_ip_ops")}
AMS = ("hnsw", "streamhnsw")
GUC = {"hnsw": "hnsw.ef_search", "streamhnsw": "streamhnsw.ef_search"}


def log(*a, **_):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def interp_ef(curve, target=0.95):
    """Smallest ef_search (interpolated) at which recall reaches target."""
    pts = sorted(curve.items())
    prev = None
    for ef, r in pts:
        if r >= target:
            if prev is None or prev[1] >= r:
                return float(ef)
            return prev[0] + (ef - prev[0]) * (target - prev[1]) / (r - prev[1])
        prev = (ef, r)
    return None


def interp_qps(curve, qps, target=0.95):
    """q/s at recall target, interpolated along the (recall, q/s) curve."""
    pts = sorted(curve.items())
    for (e0, r0), (e1, r1) in zip(pts, pts[1:]):
        if r0 < target <= r1:
            t = (target - r0) / (r1 - r0)
            return qps[e0] + t * (qps[e1] - qps[e0])
    if pts and pts[0][1] >= target:
        return qps[pts[0][0]]
    return None


# --- pgvector's 3-d scenarios --------------------------------------------------

def pgv_scenario(conn, cl, path, typ, metric, seed):
    """recall@20 of both engines on one seed of pgvector's 3-d scenario."""
    op, opclass = OPS[metric]
    opclass = opclass.replace("vector", typ)
    rng = np.random.default_rng(seed)
    rows = (rng.random((10000, 3)) * rng.random((10000, 3))).astype(np.float32)
    qrng = np.random.default_rng(1000 + seed)
    queries = qrng.random((20, 3)).astype(np.float32)
    lits = [data.vector_literal(q) for q in queries]
    out = {}
    for am in AMS:
        t = f"p3_{am}"
        conn.execute(f"DROP TABLE IF EXISTS {t}")
        conn.execute(f"CREATE TABLE {t} (id bigint, embedding {typ}(3))")
        start = time.perf_counter()
        if path == "build":
            data.load(conn, t, rows, typ=typ, create=False)
            conn.execute(f"CREATE INDEX ON {t} USING {am} (embedding {opclass})")
        else:
            conn.execute(f"CREATE INDEX ON {t} USING {am} (embedding {opclass})")
            concurrent_insert(cl, t, rows, typ, clients=10)
        elapsed = time.perf_counter() - start
        sql = f"SELECT id FROM {t} ORDER BY embedding {op} %s::{typ} LIMIT 20"
        # never prepared: a plan cached under enable_indexscan off would
        # answer the index's queries too
        conn.execute("SET enable_indexscan = off")
        exact = [{r[0] for r in conn.execute(sql, (q,), prepare=False)} for q in lits]
        conn.execute("RESET enable_indexscan")
        conn.execute("SET enable_seqscan = off")
        got = [{r[0] for r in conn.execute(sql, (q,), prepare=False)} for q in lits]
        conn.execute("RESET enable_seqscan")
        out[am] = (sum(len(a & b) for a, b in zip(got, exact)) / sum(len(e) for e in exact),
                   elapsed)
        conn.execute(f"DROP TABLE {t}")
    return out


def concurrent_insert(cl, table, rows, typ, clients, start=0):
    """Insert rows[start:] (id = position) one statement each from `clients` connections."""
    errors = []

    def work(part):
        try:
            with cl.connect() as c:
                for i in part:
                    c.execute(f"INSERT INTO {table} (id, embedding) VALUES (%s, %s::{typ})",
                              (int(i), data.vector_literal(rows[i])))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(range(start + k, len(rows), clients),))
               for k in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def run_pgv(conn, cl, path, seeds, results):
    for typ in ("vector", "halfvec"):
        for metric in ("l2", "cosine", "ip"):
            vals = {am: [] for am in AMS}
            secs = {am: [] for am in AMS}
            for seed in seeds:
                r = pgv_scenario(conn, cl, path, typ, metric, seed)
                for am in AMS:
                    vals[am].append(r[am][0])
                    secs[am].append(r[am][1])
            want = 0.97 if metric == "ip" else 0.98 if typ == "halfvec" else 0.99
            key = f"pgv-{path} {typ} {metric}"
            results[key] = {"asked": want, "recall20": vals, "seconds": secs}
            log(key, "asked", want, {am: [round(v, 4) for v in vals[am]] for am in AMS})


# --- recall@10 sweeps ----------------------------------------------------------

def load_set(name):
    from . import datasets
    if name in ("clustered", "clustered-ins"):
        rows, q = data.clustered(10000, 128, seed=14, n_queries=500)
        return rows, q, "l2"
    if name in ("cos768", "cos768-ins"):
        rows, q = data.clustered(5000, 768, seed=14, normalize=True, n_queries=300)
        return rows, q, "cosine"
    if name == "uniform":
        rng = np.random.default_rng(14)
        x = rng.random((10500, 128), dtype=np.float32)
        return x[:10000], x[10000:], "l2"
    if name == "sentences30k":
        ds = datasets.sentences(n_rows=100_000, n_queries=2000, n_inserts=1000, log=log)
        return ds.rows[:30000], ds.queries[:1000], "cosine"
    if name == "cos128":
        rows, q = data.clustered(30000, 128, seed=14, normalize=True, n_queries=500)
        return rows, q, "cosine"
    if name == "sentences":
        ds = datasets.sentences(n_rows=100_000, n_queries=2000, n_inserts=1000, log=log)
        return ds.rows, ds.queries[:1000], "cosine"
    if name == "glove":
        ds = datasets.glove(log=log)
        return ds.rows, ds.queries[:1000], "cosine"
    raise ValueError(name)


def sweep(conn, table, am, op, lits, truth, efs):
    conn.execute("SET enable_seqscan = off")
    sql = f"SELECT id FROM {table} ORDER BY embedding {op} %s::vector LIMIT 10"
    rec, qps = {}, {}
    conn.execute(f"SET {GUC[am]} = 40")
    for q in lits[:200]:
        conn.execute(sql, (q,)).fetchall()      # warm
    for ef in efs:
        conn.execute(f"SET {GUC[am]} = {ef}")
        start = time.perf_counter()
        found = [[r[0] for r in conn.execute(sql, (q,))] for q in lits]
        qps[ef] = len(lits) / (time.perf_counter() - start)
        rec[ef] = data.recall(found, truth, 10)
    conn.execute(f"RESET {GUC[am]}")
    conn.execute("RESET enable_seqscan")
    return rec, qps


def cold_reads(conn, table, idx, op, lits, n):
    """Median buffers read per query after evicting the index and the table
    (streamhnsw's shared cache off: it survives the eviction)."""
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET streamhnsw.shared_cache = off")
    reads = []
    for q in lits[:n]:
        conn.execute("SELECT pg_buffercache_evict_relation(%s::regclass)", (idx,))
        conn.execute("SELECT pg_buffercache_evict_relation(%s::regclass)", (table,))
        plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id FROM {table} "
                            f"ORDER BY embedding {op} %s::vector LIMIT 10", (q,)).fetchone()[0]
        reads.append(plan[0]["Plan"]["Shared Read Blocks"])
    conn.execute("RESET enable_seqscan")
    conn.execute("RESET streamhnsw.shared_cache")
    return statistics.median(reads)


def run_set(conn, cl, name, runs, results, cold):
    half = name.endswith("-half")
    rows, queries, metric = load_set(name.removesuffix("-half").removesuffix("-ins"))
    op, opclass = OPS[metric]
    truth = data.ground_truth(rows, queries, 10, metric)
    lits = [data.vector_literal(q) for q in queries]
    insert = name.endswith("-ins")
    per = {am: {"recall": [], "qps": [], "build_s": [], "size_mb": None, "cold_reads": None}
           for am in AMS}
    for am in AMS:
        t = f"s_{am}"
        data.load(conn, t, rows)
        conn.execute(f"VACUUM ANALYZE {t}")
        for run in range(runs):
            conn.execute(f"DROP INDEX IF EXISTS s_{am}_idx")
            start = time.perf_counter()
            if half:
                conn.execute(f"TRUNCATE {t}")
                data.load(conn, t, rows[:len(rows) // 2], create=False)
                conn.execute(f"CREATE INDEX s_{am}_idx ON {t} USING {am} (embedding {opclass})")
                concurrent_insert(cl, t, rows, "vector", clients=2, start=len(rows) // 2)
            elif insert:
                conn.execute(f"TRUNCATE {t}")
                conn.execute(f"CREATE INDEX s_{am}_idx ON {t} USING {am} (embedding {opclass})")
                concurrent_insert(cl, t, rows, "vector", clients=2)
            else:
                conn.execute(f"CREATE INDEX s_{am}_idx ON {t} USING {am} (embedding {opclass})")
            per[am]["build_s"].append(time.perf_counter() - start)
            rec, qps = sweep(conn, t, am, op, lits, truth, EFS)
            per[am]["recall"].append(rec)
            per[am]["qps"].append(qps)
            log(name, am, f"run {run}", f"{per[am]['build_s'][-1]:.1f}s",
                " ".join(f"{ef}:{rec[ef]:.3f}" for ef in (10, 20, 40, 100)))
        per[am]["size_mb"] = conn.execute(
            f"SELECT pg_relation_size('s_{am}_idx') / 1048576.0").fetchone()[0]
        if cold:
            per[am]["cold_reads"] = cold_reads(conn, t, f"s_{am}_idx", op, lits, cold)
        conn.execute(f"DROP TABLE {t}")
    summary = {}
    for am in AMS:
        med = {ef: statistics.median(r[ef] for r in per[am]["recall"]) for ef in EFS}
        mq = {ef: statistics.median(r[ef] for r in per[am]["qps"]) for ef in EFS}
        summary[am] = {"recall": med, "qps": mq, "ef95": interp_ef(med),
                       "qps95": interp_qps(med, mq),
                       "build_s": statistics.median(per[am]["build_s"]),
                       "size_mb": float(per[am]["size_mb"]),
                       "cold_reads": per[am]["cold_reads"],
                       "runs": per[am]["recall"]}
    results[name] = {"rows": int(len(rows)), "dim": int(rows.shape[1]), "metric": metric,
                     "queries": len(lits), "insert": insert or half, "runs": runs, **summary}


def table(results):
    out = []
    pgv = [k for k in results if k.startswith("pgv-")]
    if pgv:
        out += ["| scenario | asked | pgvector recall@20 (5 seeds) | streamhnsw recall@20 |",
                "| --- | --- | --- | --- |"]
        for k in pgv:
            r = results[k]
            # an engine left out (--engines) shows as "-"
            f = lambda v: "-" if v is None else \
                f"{min(v):.4f}-{max(v):.4f} (median {statistics.median(v):.4f})"
            out.append(f"| {k} | {r['asked']} | {f(r['recall20'].get('hnsw'))} | "
                       f"{f(r['recall20'].get('streamhnsw'))} |")
        out.append("")
    sets = [k for k in results if not k.startswith("pgv-")]
    if sets:
        out += ["| set | engine | ef 10 | 20 | 40 | 100 | ef for 0.95 | q/s at 0.95 | "
                "build/insert s | MB | cold reads/q |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for k in sets:
            r = results[k]
            for am in AMS:
                s = r[am]
                ef95 = f"{s['ef95']:.0f}" if s["ef95"] else "> 200"
                q95 = f"{s['qps95']:.0f}" if s["qps95"] else "-"
                out.append(f"| {k} {r['rows']}x{r['dim']} {r['metric']} | {am} | " +
                           " | ".join(f"{s['recall'][ef]:.3f}" for ef in (10, 20, 40, 100)) +
                           f" | {ef95} | {q95} | {s['build_s']:.1f} | {s['size_mb']:.1f} | "
                           f"{s['cold_reads'] if s['cold_reads'] is not None else '-'} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench.recall", description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="pgv-build,pgv-insert,clustered,clustered-ins,cos768,"
                    "uniform,sentences,glove")
    ap.add_argument("--runs", type=int, default=3, help="builds per small set")
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--cold", type=int, default=50, help="queries for cold reads (0: off)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--engines", default="hnsw,streamhnsw",
                    help="which of hnsw,streamhnsw to run (one alone: recall before/after a "
                    "change, not a timing to compare)")
    args = ap.parse_args(argv)
    global AMS
    AMS = tuple(e for e in ("hnsw", "streamhnsw") if e in args.engines.split(","))
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {}
    settings = {"shared_buffers": "2GB", "maintenance_work_mem": "2GB", "jit": "off",
                "max_parallel_maintenance_workers": "0", "effective_io_concurrency": "16",
                "io_method": "worker", "io_workers": "8"}
    with Cluster(name="shnsw-recall", settings=settings) as cl:
        cl.execute("CREATE EXTENSION streamhnsw CASCADE")
        cl.execute("CREATE EXTENSION pg_buffercache")
        with cl.connect() as conn:
            for name in args.sets.split(","):
                log("set", name)
                if name in ("pgv-build", "pgv-insert"):
                    run_pgv(conn, cl, name.split("-")[1], seeds, results)
                else:
                    big = name in ("sentences", "glove")
                    run_set(conn, cl, name, 1 if big else args.runs, results, args.cold)
                if args.json:
                    Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    print(table(results))


if __name__ == "__main__":
    main()
