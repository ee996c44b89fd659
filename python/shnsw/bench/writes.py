"""Write-path benchmark: streamhnsw against pgvector's hnsw, same server, same rows.

For each access method, on its own copy of the table (same rows, same m and
ef_construction):

  1. load + CREATE INDEX, prewarm;
  2. single-row INSERTs of held-out rows: one client, then N clients at once
     (each client its own process and connection);
  3. recall@10 over the live rows, DELETE a seeded random fraction of the
     rows, CHECKPOINT, then time `VACUUM table` (progress sampled from
     pg_stat_progress_vacuum); index size before and after; recall@10 again;
  4. INSERT as many new rows as were deleted (one client): index size and
     recall@10 once more (does the index reuse the space it freed?).

Ground truth is exact (numpy, float32) over the rows live at each point.
The table has no other index (its primary key is dropped after loading), so
inserts and VACUUM touch only the vector index and the heap.

    python -m shnsw.bench.writes                          # 100k x 128, cosine
    python -m shnsw.bench.writes --rows 20000 --inserts 500

Writes bench-results/writes-<timestamp>/{results.json, report.md} and prints
the table.  See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import re
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psycopg

from . import datasets, metrics, pg
from .. import data as shdata
from .datasets import Progress
from .log import Log, machine_info, with_unit
from ..cluster import ROOT, Cluster

TABLES = {"hnsw": ("pgvector hnsw", "hnsw.ef_search"),
          "streamhnsw": ("streamhnsw", "streamhnsw.ef_search")}


# --- insert clients -------------------------------------------------------------

def _insert_client(args) -> dict:
    """One client process: waits for start_at, inserts its rows one per statement."""
    conninfo, options, sql, rows, start_at = args
    lat = []
    with psycopg.connect(conninfo, options=options, autocommit=True) as conn:
        while time.time() < start_at:
            time.sleep(0.001)
        for rid, lit in rows:
            t = time.perf_counter()
            conn.execute(sql, (rid, lit))
            lat.append(time.perf_counter() - t)
        end = time.time()
    return {"latencies": lat, "end": end}


def insert_clients(conninfo, options, sql, rows, n_clients) -> dict:
    """Insert `rows` ((id, literal) pairs) from n_clients processes at once."""
    start_at = time.time() + 2.0 + 0.5 * n_clients      # after the processes spawned
    jobs = [(conninfo, options, sql, rows[i::n_clients], start_at) for i in range(n_clients)]
    with mp.get_context("spawn").Pool(n_clients) as p:
        res = p.map(_insert_client, jobs)
    lat = [x for r in res for x in r["latencies"]]
    wall = max(r["end"] for r in res) - start_at
    s = metrics.latency_summary(lat)
    return {"clients": n_clients, "rows": len(lat), "seconds": wall,
            "rows_per_s": len(lat) / wall, "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]}


def insert_one_client(conn, sql, rows, label, log) -> dict:
    prog = Progress(label, out=log)
    lat = []
    t0 = time.perf_counter()
    for i, (rid, lit) in enumerate(rows):
        t = time.perf_counter()
        conn.execute(sql, (rid, lit))
        lat.append(time.perf_counter() - t)
        prog(i + 1, len(rows))
    wall = time.perf_counter() - t0
    s = metrics.latency_summary(lat)
    return {"clients": 1, "rows": len(lat), "seconds": wall, "rows_per_s": len(lat) / wall,
            "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]}


# --- VACUUM with progress ----------------------------------------------------------

def timed_vacuum(cluster, table, log, poll=0.2, every=5.0) -> dict:
    """Time `VACUUM table`; sample pg_stat_progress_vacuum from a second
    connection for a progress line and the (approximate) time in each phase."""
    phases, info = {}, []
    done = threading.Event()
    with cluster.connect() as conn:
        pid = conn.info.backend_pid
        conn.add_notice_handler(lambda d: info.append(d.message_primary))

        def watch():
            t0 = last = last_print = time.perf_counter()
            with cluster.connect() as w:
                while not done.wait(poll):
                    r = w.execute("SELECT phase, heap_blks_scanned, heap_blks_total, "
                                  "indexes_processed, indexes_total "
                                  "FROM pg_stat_progress_vacuum WHERE pid = %s",
                                  (pid,)).fetchone()
                    now = time.perf_counter()
                    if r:
                        phases[r[0]] = phases.get(r[0], 0.0) + (now - last)
                        if now - last_print >= every:
                            log(f"    VACUUM {table}: {r[0]}, heap {r[1]}/{r[2]} blocks, "
                                f"indexes {r[3]}/{r[4]} ({now - t0:.0f} s)", flush=True)
                            last_print = now
                    last = now

        th = threading.Thread(target=watch, daemon=True)
        th.start()
        t = time.perf_counter()
        try:
            conn.execute(f"VACUUM (VERBOSE) {table}")
        finally:
            done.set()
        secs = time.perf_counter() - t
        th.join(timeout=10)
    index_s = phases.get("vacuuming indexes", 0.0) + phases.get("cleaning up indexes", 0.0)
    m = re.search(r"tuples: (\d+) removed", "\n".join(info))
    return {"seconds": secs, "index_phases_s_sampled": index_s, "phases_s_sampled": phases,
            "poll_s": poll, "heap_tuples_removed": int(m.group(1)) if m else None,
            "verbose": info}


# --- the run --------------------------------------------------------------------------

def index_bytes(conn, index) -> int:
    return int(conn.execute("SELECT pg_relation_size(%s::regclass)", (index,)).fetchone()[0])


def recall(conn, eng, sql, ef, lits, truth) -> float:
    pg.apply_gucs(conn, {eng.ef_guc: ef})
    found = [[r[0] for r in conn.execute(sql, (lit,)).fetchall()] for lit in lits]
    return metrics.recall_at(found, truth, 10)


def plan(cfg, n_rows) -> dict:
    """Which ids are inserted, deleted and re-inserted (ids index rows + inserts)."""
    n_ins, nc = cfg["inserts"], cfg["clients"]
    live = n_rows + n_ins * 2
    n_del = int(round(cfg["delete_frac"] * live))
    rng = np.random.default_rng(cfg["seed"] + 1)
    ins1 = np.arange(n_rows, n_rows + n_ins)
    insn = np.arange(n_rows + n_ins, n_rows + 2 * n_ins)
    before = np.arange(live)
    deleted = np.sort(rng.choice(before, n_del, replace=False))
    after_vacuum = np.setdiff1d(before, deleted)
    reins = np.arange(live, live + n_del)
    return {"insert_1": ins1, f"insert_{nc}": insn, "deleted": deleted, "reinsert": reins,
            "live": {"before delete": before, "after VACUUM": after_vacuum,
                     "after re-insert": np.concatenate([after_vacuum, reins])}}


def sentence_chunks(n_rows, n_queries, n_inserts, seed, log) -> datasets.Dataset:
    """The real sentence embeddings as far as they are embedded: the stored
    chunks of 10,000 (in the corpus's seeded order) that cover n_rows +
    n_queries + n_inserts vectors, split with a seeded permutation into
    rows, held-out queries and rows to insert. For a run while the full
    set is still being embedded; its name says how many rows it has."""
    import glob
    files = sorted(glob.glob(str(datasets.DATA_DIR / "sentences-*-minilm-s42" / "chunk-*.npy")))
    need = n_rows + n_queries + n_inserts
    x = np.vstack([np.load(f) for f in files[:(need + 9999) // 10000]]).astype(np.float32)
    if len(x) < need:
        raise SystemExit(f"only {len(x)} sentence vectors embedded so far, {need} needed")
    x = x[:need]
    perm = np.random.default_rng(seed).permutation(need)
    rows = np.ascontiguousarray(x[np.sort(perm[:n_rows])])
    queries = np.ascontiguousarray(x[np.sort(perm[n_rows:n_rows + n_queries])])
    inserts = np.ascontiguousarray(x[np.sort(perm[n_rows + n_queries:])])
    log(f"  data: {need} stored sentence vectors ({len(files)} chunks)", flush=True)
    return datasets.Dataset(f"sentences (stored chunks) {n_rows}x{x.shape[1]}",
                            f"sentence-chunks-n{n_rows}-s{seed}", "cosine", rows, queries,
                            inserts, np.zeros((n_queries, 10), dtype=np.int64),
                            {"source": "stored chunks of the sentence embeddings", "seed": seed})


def run(cfg, log) -> dict:
    P = plan(cfg, cfg["rows"])
    # Held out: the queries, and every row inserted later (ids rows, rows + 1, ...).
    n_later = len(P["insert_1"]) + len(P[f"insert_{cfg['clients']}"]) + len(P["reinsert"])
    if cfg.get("dataset") == "sentence-chunks":
        ds = sentence_chunks(cfg["rows"], cfg["queries"], n_later, cfg["seed"], log)
    elif cfg.get("dataset", "synthetic") == "sentences":
        # the cached real set holds 1,000 held-out rows; more would mean embedding again
        ds = datasets.sentences(cfg["rows"], cfg["queries"], 1000, cfg["seed"], log=log)
    else:
        ds = datasets.synthetic(cfg["rows"], cfg["dim"], cfg["metric"], cfg["queries"],
                                n_later, cfg["seed"], k_truth=10, log=log)
    n_ins = 2 * len(P["insert_1"])
    if len(ds.inserts) < n_ins:
        raise SystemExit(f"{ds.name} holds {len(ds.inserts)} rows to insert, and --inserts "
                         f"{cfg['inserts']} inserts {n_ins} (once with 1 client, once with "
                         f"--clients): ask for at most {len(ds.inserts) // 2}, or use "
                         "--dataset sentence-chunks")
    if len(ds.inserts) >= n_later:
        vecs = np.vstack([ds.rows, ds.inserts[:n_later]])
    else:
        # not enough held-out rows: the re-inserted rows are new rows with the
        # vectors of the deleted ones (an UPDATE pattern), said in the notes
        base = np.vstack([ds.rows, ds.inserts[:n_ins]])
        vecs = np.vstack([base, base[P["deleted"]]])
    qlits = pg.literals(ds.queries)
    truth = {}
    for stage, ids in P["live"].items():
        log.step(f"ground truth {stage}: {len(ids)} live rows")
        pos = datasets.exact_knn(vecs[ids], ds.queries, 10, cfg["metric"],
                                 progress=Progress("ground truth", out=log))
        truth[stage] = ids[pos]

    def pairs(ids):
        return [(int(i), shdata.vector_literal(vecs[i])) for i in ids]

    settings = {**pg.DEFAULT_SETTINGS, **cfg["settings"]}
    result = {"config": cfg, "dataset": ds.describe(), "machine": machine_info(),
              "deleted_rows": int(len(P["deleted"])), "engines": {}, "notes": []}
    if len(ds.inserts) < n_later:
        result["notes"].append("re-inserted rows carry the deleted rows' vectors "
                               "(the data set has too few held-out rows)")
    cluster = Cluster(name="shnsw-writes", settings=settings)
    cluster.init()
    cluster.start()
    try:
        with cluster.connect() as c:
            result["versions"] = pg.setup_extensions(c, log)
            rows = c.execute("SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s)",
                             (sorted(set(settings) | {"server_version", "block_size",
                                                     "fsync", "wal_level"}),)).fetchall()
            result["server_settings"] = {n: with_unit(s, u) for n, s, u in rows}
            have_shnsw = pg.has_streamhnsw(c)
        ams = [a for a in cfg["ams"] if a != "streamhnsw" or have_shnsw]
        if len(ams) < len(cfg["ams"]):
            msg = "the streamhnsw access method is not installed: pgvector only"
            log(f"  note: {msg}")
            result["notes"].append(msg)
        gucs = {"synchronous_commit": cfg["synchronous_commit"]}
        for am in ams:
            label, ef_guc = TABLES[am]
            eng = pg.Engine(label, am, f"w_{am}", f"w_{am}_idx", ef_guc, dict(gucs))
            result["engines"][label] = run_engine(cluster, eng, cfg, ds, P, truth, qlits,
                                                  pairs, log)
    finally:
        result["log_tail"] = cluster.log_tail(3000)
        cluster.destroy()
    return result


def run_engine(cluster, eng, cfg, ds, P, truth, qlits, pairs, log) -> dict:
    nc, ef, metric = cfg["clients"], cfg["ef_search"], cfg["metric"]
    r = {"am": eng.am, "table": eng.table, "index": eng.index}
    sql_q = pg.query_sql(eng, "vector", metric, 10)
    sql_i = f"INSERT INTO {eng.table} (id, embedding) VALUES (%s, %s::vector)"
    log.step(f"{eng.label}: loading {len(ds.rows)} x {ds.dim} rows into {eng.table}")
    with cluster.connect() as c:
        r["load_s"] = pg.load_table(c, eng.table, ds.rows, "vector",
                                    progress=Progress(f"COPY {eng.table}", out=log))
        c.execute(f"ALTER TABLE {eng.table} DROP CONSTRAINT {eng.table}_pkey")
    log.step(f"{eng.label}: CREATE INDEX (m={cfg['m']}, ef_construction={cfg['ef_construction']})")
    b = pg.build_index(cluster, eng, "vector", metric, cfg["m"], cfg["ef_construction"], log=log)
    r.update(build_s=b["build_s"], index_bytes_built=b["index_bytes"], index_sql=b["sql"])
    log(f"    built in {b['build_s']:.1f} s, {b['index_bytes'] / 2**20:.1f} MB", flush=True)

    with cluster.connect() as c:
        pg.apply_gucs(c, eng.session_gucs())
        pg.check_plan(c, eng, sql_q, qlits[0])
        c.execute("CHECKPOINT")
        pg.prewarm(c, eng)
        log.step(f"{eng.label}: {len(P['insert_1'])} single-row INSERTs, 1 client")
        r["insert_1"] = insert_one_client(c, sql_i, pairs(P["insert_1"]), "INSERT", log)
        log(f"    {r['insert_1']['rows_per_s']:.0f} rows/s", flush=True)
    log.step(f"{eng.label}: {len(P[f'insert_{nc}'])} single-row INSERTs, {nc} clients")
    r[f"insert_{nc}"] = insert_clients(cluster.conninfo, eng.options(), sql_i,
                                       pairs(P[f"insert_{nc}"]), nc)
    log(f"    {r[f'insert_{nc}']['rows_per_s']:.0f} rows/s in total", flush=True)

    with cluster.connect() as c:
        pg.apply_gucs(c, eng.session_gucs())
        log.step(f"{eng.label}: recall@10 at ef_search {ef}, {len(qlits)} queries")
        r["recall_before_delete"] = recall(c, eng, sql_q, ef, qlits, truth["before delete"])
        r["index_bytes_before_delete"] = index_bytes(c, eng.index)
        n = int(c.execute(f"SELECT count(*) FROM {eng.table}").fetchone()[0])
        if n != len(P["live"]["before delete"]):
            raise RuntimeError(f"{eng.table} has {n} rows, expected "
                               f"{len(P['live']['before delete'])}")
        log.step(f"{eng.label}: DELETE {len(P['deleted'])} random rows, CHECKPOINT, VACUUM")
        t = time.perf_counter()
        c.execute(f"DELETE FROM {eng.table} WHERE id = ANY(%s)", (P["deleted"].tolist(),))
        r["delete_s"] = time.perf_counter() - t
        c.execute("CHECKPOINT")
    r["vacuum"] = timed_vacuum(cluster, eng.table, log)
    log(f"    VACUUM {r['vacuum']['seconds']:.2f} s (index phases ~"
        f"{r['vacuum']['index_phases_s_sampled']:.1f} s)", flush=True)
    if r["vacuum"]["heap_tuples_removed"] != len(P["deleted"]):
        raise RuntimeError(f"VACUUM removed {r['vacuum']['heap_tuples_removed']} tuples, "
                           f"expected {len(P['deleted'])}:\n" + "\n".join(r["vacuum"]["verbose"]))

    with cluster.connect() as c:
        pg.apply_gucs(c, eng.session_gucs())
        r["index_bytes_after_vacuum"] = index_bytes(c, eng.index)
        r["recall_after_vacuum"] = recall(c, eng, sql_q, ef, qlits, truth["after VACUUM"])
        log(f"    recall@10 {r['recall_before_delete']:.4f} -> {r['recall_after_vacuum']:.4f}",
            flush=True)
        log.step(f"{eng.label}: re-insert {len(P['reinsert'])} new rows, 1 client")
        r["reinsert"] = insert_one_client(c, sql_i, pairs(P["reinsert"]), "re-INSERT", log)
        r["index_bytes_after_reinsert"] = index_bytes(c, eng.index)
        r["recall_after_reinsert"] = recall(c, eng, sql_q, ef, qlits, truth["after re-insert"])
        log(f"    index {r['index_bytes_after_vacuum'] / 2**20:.1f} MB -> "
            f"{r['index_bytes_after_reinsert'] / 2**20:.1f} MB, recall@10 "
            f"{r['recall_after_reinsert']:.4f}", flush=True)
    return r


# --- output ---------------------------------------------------------------------------

def _f(v, fmt):
    return "–" if v is None else format(v, fmt)


def table(res) -> str:
    """Markdown: one row per figure, one column per engine, plus the ratio."""
    cfg = res["config"]
    nc, nd = cfg["clients"], res["deleted_rows"]
    engs = list(res["engines"])
    MB = 2 ** 20
    figures = [
        ("CREATE INDEX s", lambda e: e["build_s"], ".1f"),
        ("INSERT rows/s, 1 client", lambda e: e["insert_1"]["rows_per_s"], ",.0f"),
        ("INSERT p50 / p99 ms, 1 client",
         lambda e: (e["insert_1"]["p50_ms"], e["insert_1"]["p99_ms"]), ".2f"),
        (f"INSERT rows/s, {nc} clients (total)",
         lambda e: e[f"insert_{nc}"]["rows_per_s"], ",.0f"),
        (f"INSERT p50 / p99 ms, {nc} clients",
         lambda e: (e[f"insert_{nc}"]["p50_ms"], e[f"insert_{nc}"]["p99_ms"]), ".2f"),
        (f"VACUUM s after deleting {nd:,} rows", lambda e: e["vacuum"]["seconds"], ".2f"),
        ("  of which index phases (sampled every 0.2 s)",
         lambda e: e["vacuum"]["index_phases_s_sampled"], ".1f", False),
        ("index MB before delete", lambda e: e["index_bytes_before_delete"] / MB, ".1f"),
        ("index MB after VACUUM", lambda e: e["index_bytes_after_vacuum"] / MB, ".1f"),
        (f"index MB after re-inserting {nd:,} rows",
         lambda e: e["index_bytes_after_reinsert"] / MB, ".1f"),
        ("re-INSERT rows/s, 1 client", lambda e: e["reinsert"]["rows_per_s"], ",.0f"),
        (f"recall@10 before delete (ef_search {cfg['ef_search']})",
         lambda e: e["recall_before_delete"], ".4f"),
        ("recall@10 after VACUUM", lambda e: e["recall_after_vacuum"], ".4f"),
        ("recall@10 after re-insert", lambda e: e["recall_after_reinsert"], ".4f"),
    ]
    ratio = len(engs) == 2
    head = ["figure"] + engs + ([f"{engs[1]} / {engs[0]}"] if ratio else [])
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for label, get, fmt, *with_ratio in figures:      # no ratio for recall
        use_ratio = fmt != ".4f" and (with_ratio or [True])[0]
        vals = [get(res["engines"][e]) for e in engs]
        cells = [" / ".join(_f(x, fmt) for x in v) if isinstance(v, tuple) else _f(v, fmt)
                 for v in vals]
        if ratio:
            pairs = list(zip(*vals)) if isinstance(vals[0], tuple) else [vals]
            rr = [metrics.ratio(b, a) for a, b in pairs]
            cells.append("–" if None in rr or not use_ratio
                         else " / ".join(f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x" for x in rr))
        lines.append("| " + " | ".join([label] + cells) + " |")
    return "\n".join(lines)


def markdown(res) -> str:
    cfg, ds, v = res["config"], res["dataset"], res.get("versions", {})
    out = [f"# Write path: {ds['name']} ({ds['metric']})", "",
           f"Run {res['started']} on {res['machine'].get('cpu', '?')}, "
           f"{res['machine'].get('cpus')} CPUs; one server, engines one after the other on "
           "identical tables. A single run: compare the ratio, not absolute times.", "",
           f"- PostgreSQL {v.get('server')}, pgvector {v.get('vector')}, streamhnsw "
           f"{v.get('streamhnsw', 'not installed')}",
           f"- data: {ds['rows']} rows x {ds['dim']} ({ds['key']}), seed {cfg['seed']}; "
           f"{cfg['queries']} held-out queries, exact ground truth over the live rows",
           f"- index: m={cfg['m']}, ef_construction={cfg['ef_construction']}; recall at "
           f"ef_search {cfg['ef_search']} (same value for both: a before/after comparison "
           "per engine, not across engines); table has no other index",
           f"- inserts: {cfg['inserts']} rows with 1 client, {cfg['inserts']} with "
           f"{cfg['clients']} clients (processes), autocommit, synchronous_commit "
           f"{cfg['synchronous_commit']}; then DELETE {res['deleted_rows']} random rows "
           f"({cfg['delete_frac']:.0%}, seed {cfg['seed'] + 1}), CHECKPOINT, "
           f"`VACUUM (VERBOSE) table`; then {res['deleted_rows']} new rows re-inserted",
           "- server settings: " + ", ".join(f"`{k}={x}`" for k, x in
                                             sorted(res["server_settings"].items()))]
    out += [f"- note: {n}" for n in res["notes"]]
    out += ["", table(res), ""]
    return "\n".join(out)


def parse(argv=None) -> tuple:
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench.writes",
                                 description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--dataset", choices=["synthetic", "sentences", "sentence-chunks"],
                    default="synthetic",
                    help="sentences: the real 384-d sentence embeddings (cosine; --rows "
                         "100000 --queries 2000 use the cached set); sentence-chunks: the "
                         "same embeddings from the stored chunks, as many as --rows asks")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--metric", choices=["l2", "cosine", "ip"], default="cosine")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--queries", type=int, default=1000, help="held-out queries for recall")
    ap.add_argument("--inserts", type=int, default=1000,
                    help="rows inserted with 1 client, and again with --clients clients")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--delete-frac", type=float, default=0.10)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=64)
    ap.add_argument("--ef-search", type=int, default=40)
    ap.add_argument("--synchronous-commit", choices=["on", "off"], default="off")
    ap.add_argument("--am", dest="ams", type=lambda s: s.split(","),
                    default=["hnsw", "streamhnsw"], help="access methods: hnsw,streamhnsw")
    ap.add_argument("--server-set", action="append", default=[], metavar="NAME=V",
                    help="server setting (postgresql.conf)")
    ap.add_argument("--out", type=Path, help="output directory "
                    "(default bench-results/writes-<timestamp>)")
    a = ap.parse_args(argv)
    if any(x not in TABLES for x in a.ams):
        ap.error(f"--am: choose from {','.join(TABLES)}")
    if not 0 < a.delete_frac < 1:
        ap.error("--delete-frac must be between 0 and 1")
    if a.clients < 1 or a.inserts < a.clients:
        ap.error("need --clients >= 1 and --inserts >= --clients")
    settings = {}
    for kv in a.server_set:
        if "=" not in kv:
            ap.error(f"--server-set expects NAME=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        settings[k.strip()] = v.strip()
    if a.dataset in ("sentences", "sentence-chunks"):
        a.metric = "cosine"
    cfg = {k: getattr(a, k) for k in ("dataset", "rows", "dim", "metric", "seed", "queries", "inserts",
                                      "clients", "delete_frac", "m", "ef_construction",
                                      "ef_search", "synchronous_commit", "ams")}
    cfg["settings"] = settings
    return cfg, a.out


def main(argv=None) -> int:
    cfg, out = parse(argv)
    log = Log()
    started = dt.datetime.now(dt.timezone.utc)
    out = out or ROOT / "bench-results" / f"writes-{started.strftime('%Y%m%dT%H%M%SZ')}"
    log.step(f"streamhnsw write-path benchmark, output {out}")
    res = run(cfg, log)
    res["started"] = started.isoformat(timespec="seconds")
    res["elapsed_s"] = time.perf_counter() - log.t0
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(res)
    (out / "report.md").write_text(md)
    with open(out / "results.json", "w") as f:
        json.dump(res, f, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    print()
    print(table(res))
    print()
    for n in res["notes"]:
        print(f"note: {n}")
    print(f"report:  {out / 'report.md'}")
    print(f"json:    {out / 'results.json'}")
    log.step("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
