"""VectorDBBench's performance case, pgvector's hnsw and streamhnsw side by side.

Writes a custom data set (streamhnsw_vdb.dataset) from the suite's data,
starts a throwaway cluster (shnsw.cluster) with pgvector and streamhnsw,
and hands VectorDBBench's own benchmark runner one task per engine and case:
its PerformanceCustomDataset case unfiltered, and with label filters keeping
1% and 99% of the rows where the data set has k rows in each.  Each task
loads the rows, builds the index (same m, ef_construction, ef_search,
maintenance_work_mem and workers for both), runs the serial search over
every query (recall, nDCG, p99) and the concurrency sweep (q/s).  Then
VectorDBBench's cold-latency runner (a cold pass, then a warm pass) on each
engine's table after a server restart with its files dropped from the OS
cache.

VectorDBBench's result files are copied into OUT/results/, and OUT/summary.md
gets a table of max q/s, serial p99, recall and load time side by side (also
printed), with the server settings.

Run it in the environment that has vectordb-bench (make venv-vdb), with the
suite's package on the path:

    PYTHONPATH=python:vdbbench nice -n 10 .venv-vdb/bin/python vdbbench/run.py \
        --out bench/reports/vdbbench-clustered --synthetic 100000 768 --metric cosine
    ... --arrays DIR      rows.npy, queries.npy (and truth.npy, row positions,
                          nearest first) written by the suite, e.g. the real
                          sentence set, which needs the embedding model of the
                          main environment
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(HERE), str(ROOT / "python")):
    if p not in sys.path:
        sys.path.insert(0, p)

ENGINES = ("pgvector", "streamhnsw")

# BENCHMARKS.md's server settings; written into the summary
SERVER_SETTINGS = {
    "shared_buffers": "2GB",
    "io_method": "worker",
    "io_workers": "8",
    "effective_io_concurrency": "16",
    "jit": "off",
    "maintenance_work_mem": "1GB",
    "max_parallel_maintenance_workers": "2",
    "max_connections": "100",
    "autovacuum": "off",
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="report directory")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--synthetic", nargs=2, type=int, metavar=("ROWS", "DIM"),
                     help="the suite's seeded clustered data (shnsw.data.clustered)")
    src.add_argument("--arrays", type=Path, metavar="DIR", help="rows.npy, queries.npy [, truth.npy]")
    src.add_argument("--resummarize", action="store_true",
                     help="run nothing: write OUT/summary.md again from OUT's summary.json and results/")
    ap.add_argument("--name", default=None, help="data set name in the results (default: from the source)")
    ap.add_argument("--metric", choices=("l2", "ip", "cosine"), default="cosine")
    ap.add_argument("--queries", type=int, default=1000, help="queries of a synthetic set")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--k", type=int, default=100, help="search depth (VectorDBBench's default 100)")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=64)
    ap.add_argument("--ef-search", type=int, default=None,
                    help="both engines (default: each engine's own default, 40)")
    ap.add_argument("--concurrency", default="1,2,4,8,16", help="client counts of the sweep")
    ap.add_argument("--duration", type=int, default=30, help="seconds per client count")
    ap.add_argument("--no-filters", action="store_true", help="only the unfiltered case")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-latency case")
    ap.add_argument("--cold-queries", type=int, default=1000,
                    help="queries of each pass of the cold-latency case (VectorDBBench's default 1000)")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--keep-data", action="store_true", help="keep the parquet files in OUT/dataset")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a server setting instead of the default (repeatable), e.g. shared_buffers=8GB; "
                         "maintenance_work_mem and max_parallel_maintenance_workers apply to both builds")
    a = ap.parse_args(argv)
    for item in a.set:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            ap.error(f"--set takes NAME=VALUE, not {item!r}")
        SERVER_SETTINGS[name.strip()] = value.strip()
    return a


def load_data(args) -> tuple[str, np.ndarray, np.ndarray, np.ndarray | None]:
    if args.synthetic:
        from shnsw.data import clustered

        n, dim = args.synthetic
        rows, queries = clustered(n, dim, seed=args.seed, normalize=args.metric == "cosine",
                                  n_queries=args.queries)
        return args.name or f"clustered {n}x{dim}", rows, queries, None
    rows = np.load(args.arrays / "rows.npy").astype(np.float32, copy=False)
    queries = np.load(args.arrays / "queries.npy").astype(np.float32, copy=False)
    tp = args.arrays / "truth.npy"
    truth = np.load(tp) if tp.exists() else None
    return args.name or args.arrays.name, rows, queries, truth


def engine_configs(args, cluster) -> dict:
    """engine -> (VectorDBBench DB member, its connection config, a factory of
    its index config): the same m, ef_construction, ef_search,
    maintenance_work_mem and workers for both."""
    from pydantic import SecretStr
    from streamhnsw_vdb import member
    from streamhnsw_vdb.config import StreamHNSWConfig, StreamHNSWIndexConfig
    from vectordb_bench.backend.clients import DB
    from vectordb_bench.backend.clients.pgvector.config import PgVectorConfig, PgVectorHNSWConfig

    build = {"maintenance_work_mem": SERVER_SETTINGS["maintenance_work_mem"],
             "max_parallel_workers": int(SERVER_SETTINGS["max_parallel_maintenance_workers"])}
    hnsw = {"m": args.m, "ef_construction": args.ef_construction, "ef_search": args.ef_search}
    conn = {"host": str(cluster.sockdir), "port": cluster.port, "db_name": "postgres"}
    return {
        "pgvector": (DB.PgVector,
                     PgVectorConfig(db_label="hnsw", user_name=SecretStr("postgres"), password=SecretStr(""),
                                    table_name="vdbbench_pgvector", **conn),
                     lambda: PgVectorHNSWConfig(**hnsw, **build)),
        "streamhnsw": (member(),
                       StreamHNSWConfig(db_label="streamhnsw", table_name="vdbbench_streamhnsw", **conn),
                       lambda: StreamHNSWIndexConfig(**hnsw, **build)),
    }


def make_tasks(args, cluster, info: dict, name: str) -> list:
    """One VectorDBBench TaskConfig per engine and case."""
    from streamhnsw_vdb import dataset
    from vectordb_bench.backend.cases import CaseType
    from vectordb_bench.models import CaseConfig, ConcurrencySearchConfig, TaskConfig

    engines = engine_configs(args, cluster)
    filters = [None] + ([] if args.no_filters else info["label_percentages"])
    sweep = ConcurrencySearchConfig(num_concurrency=[int(c) for c in args.concurrency.split(",")],
                                    concurrency_duration=args.duration)
    tasks = []
    for lp in filters:
        for engine in args.engines.split(","):
            db, db_config, case_config = engines[engine]
            tasks.append(TaskConfig(
                db=db, db_config=db_config, db_case_config=case_config(),
                case_config=CaseConfig(case_id=CaseType.PerformanceCustomDataset, k=args.k,
                                       custom_case=dataset.custom_case(info, name, lp),
                                       concurrency_search_config=sweep)))
    return tasks


def cold_latency(args, cluster, info: dict, queries: np.ndarray) -> dict:
    """VectorDBBench's cold-latency case (its ColdWarmSearchRunner: a cold
    pass over the queries, then a warm pass, one client) on each engine's
    table as the performance case left it, with the caches really dropped
    first: the server restarted (shared buffers and streamhnsw's shared
    copies empty) and the table's and indexes' files dropped from the OS
    cache. engine -> its cold and warm statistics (seconds)."""
    from shnsw.bench import pg
    from vectordb_bench.backend.clients import MetricType
    from vectordb_bench.backend.runner.cold_warm_runner import ColdWarmSearchRunner

    res = {}
    engines = engine_configs(args, cluster)
    for engine in args.engines.split(","):
        db, db_config, case_config = engines[engine]
        table = db_config.table_name
        cluster.restart()
        with cluster.connect() as conn:
            rels = [table] + [r[0] for r in conn.execute(
                "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = %s::regclass", (table,))]
            pg.drop_os_cache(pg.relation_files(conn, cluster.datadir, rels))
        index_config = case_config()
        # (the performance case's runner sets it from the data set)
        index_config.metric_type = MetricType[info["metric"].upper()]
        client = db.init_cls(dim=info["dim"], db_config=db_config.to_dict(), db_case_config=index_config,
                             drop_old=False, with_scalar_labels=False)
        runner = ColdWarmSearchRunner(db=client, test_data=list(queries), k=args.k,
                                      query_count=min(args.cold_queries, len(queries)))
        res[engine] = runner.run()
        print(f"cold latency {engine}: {res[engine]}", flush=True)
    return res


def cold_table(cold: dict) -> str:
    """The cold-latency case's Markdown table (ms)."""
    if not cold:
        return ""
    cols = [("cold", "first_query_latency", "first query"), ("cold", "avg_latency", "cold avg"),
            ("cold", "p95_latency", "cold p95"), ("cold", "p99_latency", "cold p99"),
            ("warm", "avg_latency", "warm avg"), ("warm", "p99_latency", "warm p99")]
    lines = ["", "", "Cold-latency case (VectorDBBench's ColdWarmSearchRunner, one client, after a restart "
             "and the files dropped from the OS cache; ms, pgvector / streamhnsw):", "",
             "| " + " | ".join(c[2] for c in cols) + " |", "|" + " --- |" * len(cols),
             "| " + " | ".join(" / ".join(f"{1000 * cold[e][f'{p}_stats'][key]:.2f}" if e in cold else "-"
                                          for e in ENGINES) for p, key, _ in cols) + " |"]
    return "\n".join(lines)


def plans(cluster, info: dict, metric: str) -> str:
    """The generic plan of each engine's search statement, per filter, on the
    tables the run left behind: a filtered case measures whatever the planner
    chose (index scan, or a sequential scan and sort, which is exact)."""
    from streamhnsw_vdb.dataset import label_name

    op = {"l2": "<->", "ip": "<#>", "cosine": "<=>"}[metric]
    out = []
    with cluster.connect() as conn:
        for table in ("vdbbench_pgvector", "vdbbench_streamhnsw"):
            cols = {r[0] for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0", (table,))}
            if not cols:
                continue
            wheres = [""] + [f"WHERE label = '{label_name(p)}'" for p in info["label_percentages"]
                             if "label" in cols]
            for where in wheres:
                q = (f"EXPLAIN (GENERIC_PLAN, COSTS OFF) SELECT id FROM {table} {where} "
                     f"ORDER BY embedding {op} $1::vector LIMIT $2::int")
                out.append(f"-- {table} {where}\n" + "\n".join(r[0] for r in conn.execute(q)))
    return "\n\n".join(out) + "\n"


def run_tasks(tasks: list, label: str) -> None:
    from vectordb_bench.interface import benchmark_runner

    benchmark_runner.run(tasks, label)
    while benchmark_runner.has_running():
        time.sleep(2)


def summarize(result_files: list[Path], k: int) -> tuple[str, list[dict]]:
    """The Markdown table, from VectorDBBench's own result files."""
    cells: dict[str, dict[str, dict]] = {}
    flat = []
    for f in result_files:
        for res in json.loads(f.read_text())["results"]:
            tc = res["task_config"]
            engine = "pgvector" if tc["db"] == "PgVector" else "streamhnsw"
            case = tc["case_config"]["custom_case"]["name"]
            m = res["metrics"]
            best = int(np.argmax(m["conc_qps_list"])) if m.get("conc_qps_list") else None
            row = {"case": case, "engine": engine, "label": res.get("label"),
                   "max_qps": m["qps"], "at_clients": m["conc_num_list"][best] if best is not None else None,
                   "serial_p99_ms": m["serial_latency_p99"] * 1000, "recall": m["recall"],
                   "ndcg": m["ndcg"], "load_s": m["load_duration"],
                   "insert_s": m["insert_duration"], "build_s": m["optimize_duration"],
                   "conc": dict(zip(m.get("conc_num_list", []), m.get("conc_qps_list", [])))}
            cells.setdefault(case, {})[engine] = row
            flat.append(row)

    def pair(case_rows, fmt, key):
        return " / ".join(fmt(case_rows[e][key]) if e in case_rows else "-" for e in ENGINES)

    lines = [f"| case (k = {k}) | max q/s (clients) | serial p99 ms | recall@{k} | nDCG@{k} | load s (insert + build) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for case, rows in cells.items():
        qps = " / ".join(f"{rows[e]['max_qps']:.0f} ({rows[e]['at_clients']})" if e in rows else "-" for e in ENGINES)
        load = " / ".join("-" if e not in rows else
                          f"{rows[e]['load_s']:.1f} ({rows[e]['insert_s']:.1f} + {rows[e]['build_s']:.1f})"
                          if rows[e]["insert_s"] > 0 else f"{rows[e]['load_s']:.1f} (table reused)"
                          for e in ENGINES)
        lines.append(f"| {case} | {qps} | {pair(rows, lambda v: f'{v:.2f}', 'serial_p99_ms')} | "
                     f"{pair(rows, lambda v: f'{v:.4f}', 'recall')} | {pair(rows, lambda v: f'{v:.4f}', 'ndcg')} | "
                     f"{load} |")
    # the sweep behind each max q/s
    counts = sorted({c for rows in cells.values() for r in rows.values() for c in r["conc"]})
    if counts:
        lines += ["", "q/s by client count (pgvector / streamhnsw):", "",
                  "| case | " + " | ".join(f"{c} client{'s' if c != 1 else ''}" for c in counts) + " |",
                  "| --- |" + " --- |" * len(counts)]
        for case, rows in cells.items():
            lines.append(f"| {case} | " + " | ".join(
                " / ".join(f"{rows[e]['conc'][c]:.0f}" if e in rows and c in rows[e]["conc"] else "-"
                           for e in ENGINES) for c in counts) + " |")
    return "\n".join(lines), flat


def main(argv=None) -> int:
    args = parse_args(argv)
    out = args.out.resolve()
    if args.resummarize:
        return resummarize(out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vdbbench-"))
    # VectorDBBench reads these once, at import, in this and its spawned processes
    os.environ["RESULTS_LOCAL_DIR"] = str(work / "results")
    os.environ["DATASET_LOCAL_DIR"] = str(work / "datasets")
    os.environ["LOG_FILE"] = str(out / "vectordb_bench.log")
    from shnsw.cluster import Cluster
    from streamhnsw_vdb import dataset

    name, rows, queries, truth = load_data(args)
    data_dir = out / "dataset" if args.keep_data else work / "dataset"
    t = time.perf_counter()
    info = dataset.write(data_dir, rows, queries, args.metric, k=args.k, truth=truth,
                         labels=not args.no_filters, seed=args.seed)
    print(f"data set {name}: {rows.shape[0]} x {rows.shape[1]} {args.metric}, {len(queries)} queries, "
          f"written in {time.perf_counter() - t:.1f} s; label filters {info['label_percentages']}", flush=True)

    label = f"vdbbench-{time.strftime('%Y%m%d%H%M%S')}"
    try:
        with Cluster(name="vdbbench", settings=SERVER_SETTINGS) as c:
            c.execute("CREATE EXTENSION streamhnsw CASCADE")
            versions = dict(c.execute("SELECT extname, extversion FROM pg_extension"))
            server = c.execute("SELECT version()")[0][0]
            run_tasks(make_tasks(args, c, info, name), label)
            (out / "plans.txt").write_text(plans(c, info, args.metric))
            cold = {} if args.no_cold else cold_latency(args, c, info, queries)
        files = sorted((work / "results").rglob("result_*.json"))
        if not files:
            print(f"no VectorDBBench result files; see {out / 'vectordb_bench.log'}", file=sys.stderr)
            return 1
        (out / "results").mkdir(exist_ok=True)
        for f in files:
            shutil.copy2(f, out / "results" / f"{f.parent.name}-{f.name}")
        if cold:
            (out / "results" / "cold_latency.json").write_text(json.dumps(cold, indent=1))
        table, flat = summarize(files, args.k)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    settings = {"server": server, "extensions": versions, "server_settings": SERVER_SETTINGS,
                "index": {"m": args.m, "ef_construction": args.ef_construction,
                          "ef_search": args.ef_search or "engine default (40)"},
                "data": {"name": name, "rows": int(rows.shape[0]), "dim": int(rows.shape[1]),
                         "metric": args.metric, "queries": int(len(queries)),
                         "label_filters": info["label_percentages"]},
                "k": args.k, "concurrency": args.concurrency, "duration_s": args.duration,
                "vectordb_bench": _version("vectordb-bench")}
    write_summary(out, settings, table, flat, cold)
    print(f"\nreport: {out}")
    return 0


def write_summary(out: Path, settings: dict, table: str, flat: list, cold: dict) -> None:
    """OUT/summary.json and OUT/summary.md (the table printed too)."""
    (out / "summary.json").write_text(json.dumps({"settings": settings, "results": flat,
                                                  "cold_latency": cold}, indent=1))
    table += cold_table(cold)
    (out / "summary.md").write_text(render_summary(settings, table))
    print(table)


def render_summary(settings: dict, table: str) -> str:
    """summary.md: the run's settings around the table."""
    d, ix = settings["data"], settings["index"]
    filters = ("Label filter label_1p keeps 1% of the rows, label_99p 99%.\n\n"
               if d.get("label_filters") else "Unfiltered case only.\n\n")
    head = (f"# VectorDBBench {settings['vectordb_bench']}: pgvector hnsw / streamhnsw\n\n"
            f"{d['name']}, {d['rows']} x {d['dim']} {d['metric']}, {d['queries']} queries; "
            f"m {ix['m']}, ef_construction {ix['ef_construction']}, ef_search {ix['ef_search']}; "
            f"concurrency {settings['concurrency']} for {settings['duration_s']} s each.\n"
            f"Cells are pgvector / streamhnsw. {filters}")
    tail = (f"\n\nServer: {settings['server']}; extensions {settings['extensions']}; settings "
            + ", ".join(f"{k}={v}" for k, v in settings["server_settings"].items())
            + ".\nVectorDBBench's own result files are in results/; the plans of the search statements "
            "in plans.txt (a filtered case measures the plan the planner chose).\n")
    return head + table + tail


def resummarize(out: Path) -> int:
    """Write OUT/summary.md again from OUT/summary.json's settings and the
    result files in OUT/results/ (after a change to the summary's form)."""
    settings = json.loads((out / "summary.json").read_text())["settings"]
    table, flat = summarize(sorted((out / "results").glob("*-result_*.json")), settings["k"])
    cp = out / "results" / "cold_latency.json"
    write_summary(out, settings, table, flat, json.loads(cp.read_text()) if cp.exists() else {})
    return 0


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    sys.exit(main())
