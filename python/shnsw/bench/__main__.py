"""Benchmark streamhnsw against pgvector's hnsw (and FAISS, in process).

    python -m shnsw.bench                       # default: synthetic 100k x 128 and
                                                # real sentences 100k x 384
    python -m shnsw.bench --preset quick        # a one-minute smoke run
    python -m shnsw.bench --preset sentences    # real sentences, 200k x 384
    python -m shnsw.bench --preset glove        # GloVe 6B 50-d, 400k rows
    python -m shnsw.bench --preset 1m           # 1M x 384, build/size/memory, hot, cold
    python -m shnsw.bench --dataset file --file my.npy --metric l2
    python -m shnsw.bench --io-modes sync,stream    # A/B of streamhnsw.io_mode
    python -m shnsw.bench --preset robustness   # data shapes, both engines (robustness.py)

Writes bench-results/<timestamp>/{results.json, report.md, *.png} and prints
the comparison table and the paths.  See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from . import datasets, plots, report
from .runner import Bench, Log
from ..cluster import ROOT

ALL_MODES = ["faiss", "hot", "fresh", "concurrent", "mixed", "cold", "latency", "eic", "workers",
             "ltm", "insert"]

BASE = dict(
    dataset="synthetic", rows=100_000, dim=128, metric="cosine", type="vector", seed=42,
    queries=1000, k=10, m=16, ef_construction=64, target_recall=0.95,
    ef_search=[10, 16, 24, 32, 40, 48, 64, 96, 128, 200],
    hot_queries=500, hot_passes=3, warmup=20, explain_sample=20, recall100_queries=100,
    cold_queries=50, cold_explain_sample=10, cold_extra_above=2, latency_extra_above=0,
    latency_queries=20, delay_us=300,
    eic=[0, 1, 2, 4, 8, 16, 32, 64], eic_queries=12, eic_explain_sample=3,
    io_workers=[3, 8, 16],
    fresh_queries=100, clients=[2], seconds=10,
    mixed_seconds=15, pgbench_clients=2, mixed_vector_clients=2, pgbench_scale=5,
    insert_rows=1000, modes=list(ALL_MODES), ams=["hnsw", "streamhnsw"],
    io_modes=None, streamhnsw_gucs={}, pgvector_gucs={}, settings={},
    # index larger than shared_buffers (mode ltm)
    ltm_fractions=[0.25], ltm_os_cache=["kept", "dropped"], ltm_seconds=8,
    ltm_queries=3000, ltm_warmup_queries=200, ltm_warmup_seconds=3, ltm_query_pool=1000,
)

# The real data set's defaults (held-out queries: 2,000 sentences).
SENTENCES = dict(dataset="sentences", dim=384, queries=2000)

# A preset may list several data sets ("datasets"): each runs on its own
# server, one after the other, with the preset's settings plus its own.
PRESETS = {
    "default": dict(datasets=[dict(dataset="synthetic"),
                              dict(SENTENCES, rows=100_000, ltm_fractions=[0.125, 0.25, 0.5])]),
    "sentences": dict(SENTENCES, rows=200_000, ltm_fractions=[0.125, 0.25, 0.5],
                      ef_search=[10, 16, 24, 32, 40, 48, 64, 96, 128, 200, 300]),
    "quick": dict(rows=10_000, dim=64, queries=400, hot_queries=300,
                  ef_search=[10, 20, 40, 80, 160], explain_sample=5, recall100_queries=30,
                  cold_queries=20, cold_explain_sample=3, latency_queries=8,
                  eic=[0, 1, 4, 16], eic_queries=5, eic_explain_sample=2,
                  fresh_queries=30, seconds=3, mixed_seconds=5, pgbench_scale=1,
                  insert_rows=200, settings={"shared_buffers": "512MB"},
                  ltm_seconds=2, ltm_warmup_queries=50, ltm_warmup_seconds=1),
    # The real set, small: a smoke run of every mode on sentence embeddings.
    "quick-sentences": dict(SENTENCES, rows=10_000, queries=400, hot_queries=300,
                            ef_search=[10, 20, 40, 80, 160], explain_sample=5,
                            recall100_queries=30, cold_queries=20, cold_explain_sample=3,
                            latency_queries=8, eic=[0, 1, 4, 16], eic_queries=5,
                            eic_explain_sample=2, fresh_queries=30, seconds=3,
                            mixed_seconds=5, pgbench_scale=1, insert_rows=200,
                            settings={"shared_buffers": "512MB"}, ltm_seconds=2,
                            ltm_warmup_queries=50, ltm_warmup_seconds=1),
    "glove": dict(dataset="glove", metric="cosine", queries=1000,
                  ef_search=[10, 16, 24, 32, 40, 64, 96, 128, 200, 300, 400]),
    "large": dict(rows=1_000_000, dim=128, hot_queries=1000,
                  ef_search=[10, 16, 24, 32, 40, 64, 96, 128, 200, 300],
                  latency_queries=30, eic_queries=20, seconds=30, mixed_seconds=60,
                  settings={"shared_buffers": "4GB", "maintenance_work_mem": "2GB"}),
    # 1M rows at the dimension of real sentence embeddings (the corpus has
    # 332k distinct lines, so synthetic clustered data): build time, index
    # size and build memory, hot, cold, cold + latency, index > shared_buffers.
    # About 30-60 min on 2 cores (estimated from the 100k runs), most of it the builds.
    "1m": dict(rows=1_000_000, dim=384, hot_queries=300, queries=1000,
               modes=["hot", "fresh", "cold", "latency", "ltm"],
               ef_search=[16, 24, 32, 40, 64, 96, 128, 200],
               cold_queries=30, latency_queries=15, ltm_fractions=[0.25], ltm_seconds=10,
               settings={"shared_buffers": "6GB", "maintenance_work_mem": "4GB"}),
}


def _ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def _kv(s):
    if "=" not in s:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {s!r}")
    k, v = s.split("=", 1)
    return k.strip(), v.strip()


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench",
                                 description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--preset", choices=sorted(PRESETS) + ["robustness"], default="default",
                    help="robustness: the data-shape matrix, its own options "
                         "(--preset robustness --help)")
    g = ap.add_argument_group("data")
    g.add_argument("--dataset", choices=["synthetic", "sentences", "glove", "file"],
                   help="run this one data set (a preset may list several)")
    g.add_argument("--datasets", type=lambda s: s.split(","),
                   help="of the preset's data sets, run only these (e.g. sentences)")
    g.add_argument("--file", help=".npy or .fvecs file (with --dataset file)")
    g.add_argument("--rows", type=int, help="synthetic rows (or a limit for glove/file)")
    g.add_argument("--dim", type=int)
    g.add_argument("--metric", choices=["l2", "cosine", "ip"])
    g.add_argument("--type", choices=["vector", "halfvec"])
    g.add_argument("--seed", type=int)
    g.add_argument("--queries", type=int, help="held-out query vectors")
    g = ap.add_argument_group("index")
    g.add_argument("--m", type=int)
    g.add_argument("--ef-construction", type=int)
    g.add_argument("--ef-search", type=_ints, help="comma-separated sweep")
    g.add_argument("--k", type=int, help="LIMIT of the timed queries (default 10)")
    g.add_argument("--target-recall", type=float)
    g.add_argument("--am", dest="ams", type=lambda s: s.split(","),
                   help="access methods to run: hnsw,streamhnsw")
    g.add_argument("--io-modes", type=lambda s: s.split(","),
                   help="one streamhnsw engine per value of streamhnsw.io_mode (A/B)")
    g.add_argument("--streamhnsw-set", type=_kv, action="append", default=[],
                   metavar="GUC=V", help="session setting for the streamhnsw engines")
    g.add_argument("--pgvector-set", type=_kv, action="append", default=[],
                   metavar="GUC=V", help="session setting for the pgvector engine")
    g.add_argument("--server-set", type=_kv, action="append", default=[],
                   metavar="NAME=V", help="server setting (postgresql.conf)")
    g = ap.add_argument_group("modes")
    g.add_argument("--modes", type=lambda s: s.split(","),
                   help=f"subset of {','.join(ALL_MODES)} (hot always runs)")
    g.add_argument("--skip", type=lambda s: s.split(","), default=[],
                   help="modes to leave out")
    g.add_argument("--hot-queries", type=int)
    g.add_argument("--hot-passes", type=int, help="passes over the hot queries per ef_search, engines taking turns (median q/s)")
    g.add_argument("--cold-queries", type=int)
    g.add_argument("--latency-queries", type=int)
    g.add_argument("--delay-us", type=int, help="injected storage latency per read (300)")
    g.add_argument("--eic", type=_ints, help="effective_io_concurrency values to sweep")
    g.add_argument("--eic-queries", type=int)
    g.add_argument("--io-workers", type=_ints,
                   help="io_workers values of the workers mode (cold + latency at the server's eic)")
    g.add_argument("--fresh-queries", type=int)
    g.add_argument("--clients", type=_ints, help="concurrent client counts, e.g. 1,2,4")
    g.add_argument("--seconds", type=int, help="duration of each concurrent run")
    g.add_argument("--mixed-seconds", type=int)
    g.add_argument("--pgbench-clients", type=int)
    g.add_argument("--mixed-vector-clients", type=int)
    g.add_argument("--pgbench-scale", type=int)
    g.add_argument("--insert-rows", type=int)
    g.add_argument("--ltm-fractions", type=lambda s: [float(x) for x in s.split(",")],
                   help="index > shared_buffers: shared_buffers as fractions of "
                        "pgvector's index size (0.25)")
    g.add_argument("--ltm-seconds", type=float, help="timed query seconds per ltm point")
    ap.add_argument("--out", type=Path, help="output directory (default bench-results/<ts>)")
    a = ap.parse_args(argv)
    if a.preset == "robustness":
        ap.error("the robustness preset has its own options: main() runs it "
                 "(python -m shnsw.bench --preset robustness --help)")

    preset = dict(PRESETS[a.preset])
    sets = preset.pop("datasets", None) or [{}]
    if a.dataset:
        # One data set: the preset's entry for it if there is one.
        sets = [d for d in sets if d.get("dataset", BASE["dataset"]) == a.dataset][:1] or [{}]
    elif a.datasets:
        sets = [d for d in sets if d.get("dataset", preset.get("dataset", BASE["dataset"]))
                in a.datasets]
        if not sets:
            ap.error(f"preset {a.preset} has no data set among {a.datasets}")
    runs = [_one(ap, a, preset, d) for d in sets]
    return runs, a.out


def _one(ap, a, preset, extra):
    cfg = dict(BASE)
    cfg.update(preset)
    cfg.update(extra)
    cfg["preset"] = a.preset
    for key in ("dataset", "file", "rows", "dim", "metric", "type", "seed", "queries", "m",
                "ef_construction", "ef_search", "k", "target_recall", "ams", "io_modes",
                "modes", "hot_queries", "hot_passes", "cold_queries", "latency_queries", "delay_us", "eic",
                "io_workers",
                "eic_queries", "fresh_queries", "clients", "seconds", "mixed_seconds",
                "pgbench_clients", "mixed_vector_clients", "pgbench_scale", "insert_rows",
                "ltm_fractions", "ltm_seconds"):
        v = getattr(a, key, None)
        if v is not None:
            cfg[key] = v
    cfg["streamhnsw_gucs"] = {**cfg["streamhnsw_gucs"], **dict(a.streamhnsw_set)}
    cfg["pgvector_gucs"] = {**cfg["pgvector_gucs"], **dict(a.pgvector_set)}
    cfg["settings"] = {**cfg["settings"], **dict(a.server_set)}
    unknown = set(cfg["modes"]) - set(ALL_MODES)
    if unknown:
        ap.error(f"unknown modes {sorted(unknown)}; choose from {ALL_MODES}")
    cfg["modes"] = [m for m in ALL_MODES if m in cfg["modes"] and m not in a.skip]
    if cfg["dataset"] == "file" and not cfg.get("file"):
        ap.error("--dataset file needs --file PATH")
    if min(cfg["ef_search"]) < cfg["k"]:
        ap.error("every ef_search must be >= k (pgvector returns at most ef_search rows)")
    if cfg["dataset"] not in ("synthetic", "sentences") and a.rows is None:
        cfg["rows"] = None
    if cfg["dataset"] == "sentences":
        cfg["metric"] = "cosine"
    return cfg


def load_dataset(cfg, log):
    k_truth = max(100, cfg["k"])
    if cfg["dataset"] == "synthetic":
        return datasets.synthetic(cfg["rows"], cfg["dim"], cfg["metric"], cfg["queries"],
                                  cfg["insert_rows"], cfg["seed"], k_truth, log=log)
    if cfg["dataset"] == "sentences":
        return datasets.sentences(cfg["rows"], cfg["queries"], cfg["insert_rows"],
                                  cfg["seed"], k_truth, log=log)
    if cfg["dataset"] == "glove":
        cfg["metric"] = "cosine"
        return datasets.glove(cfg["queries"], cfg["insert_rows"], cfg["seed"],
                              limit=cfg.get("rows"), k_truth=k_truth, log=log)
    return datasets.from_file(cfg["file"], cfg["metric"], cfg["queries"], cfg["insert_rows"],
                              cfg["seed"], limit=cfg.get("rows") if cfg.get("rows") else None,
                              k_truth=k_truth, log=log)


def _slug(ds) -> str:
    return "".join(c if c.isalnum() else "-" for c in ds.name.lower()).strip("-")


def _wants_robustness(argv) -> bool:
    argv = sys.argv[1:] if argv is None else list(argv)
    for i, a in enumerate(argv):
        if a == "--preset" and i + 1 < len(argv):
            return argv[i + 1] == "robustness"
        if a == "--preset=robustness":
            return True
    return False


def main(argv=None) -> int:
    if _wants_robustness(argv):
        # the matrix of data shapes has its own runner and options
        from . import robustness
        return robustness.main(argv)
    runs, out = parse(argv)
    log = Log()
    started = dt.datetime.now(dt.timezone.utc)
    out = out or ROOT / "bench-results" / started.strftime("%Y%m%dT%H%M%SZ")
    log.step(f"streamhnsw benchmark, preset {runs[0]['preset']}, {len(runs)} data "
             f"set(s), output {out}")
    # Every data set first (a real set's first build is the long part): a
    # failure shows before any server work.
    loaded = []
    for cfg in runs:
        t = time.perf_counter()
        ds = load_dataset(cfg, log)
        cfg["metric"] = ds.metric
        log(f"  {ds.name}: {len(ds.rows)} rows x {ds.dim}, {len(ds.queries)} held-out "
            f"queries, metric {ds.metric} ({time.perf_counter() - t:.0f} s)")
        loaded.append((cfg, ds))
    results, written = [], []
    for cfg, ds in loaded:
        sub = out / _slug(ds) if len(loaded) > 1 else out
        log.step(f"=== {ds.name} -> {sub}")
        b = Bench(cfg, ds, log)
        b.result["started"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        t = time.perf_counter()
        res = b.run()
        res["elapsed_s"] = time.perf_counter() - t
        log.step(f"writing report for {ds.name}")
        pl = plots.make_all(res, sub)
        w = report.write(res, sub, pl)
        results.append(res)
        written.append((res, w, pl))
    if len(results) > 1:
        pl = plots.make_combined(results, out)
        top = report.write_combined(results, out, pl, started)
    for res, w, pl in written:
        print()
        print(f"## {res['dataset']['name']}")
        print(w["table"])
        print()
        for n in res.get("notes", []):
            print(f"note: {n}")
        print(f"report:  {w['markdown']}")
        print(f"json:    {w['json']}")
        for name, p in pl.items():
            print(f"plot:    {p}  ({name})")
    if len(results) > 1:
        print()
        print(f"summary: {top['markdown']}")
        for name, p in pl.items():
            print(f"plot:    {p}  ({name})")
    log.step("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
