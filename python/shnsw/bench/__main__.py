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
    python -m shnsw.bench --preset types        # bit (re-ranked) and sparsevec, both engines
    python -m shnsw.bench --preset recall --help    # presets with a runner of their own:
                                                # writes, recall, range, filter, order,
                                                # churn, build-memory, build-parallel,
                                                # vacuum-memory, robustness

Writes bench-results/<timestamp>/{results.json, report.md, *.png} and prints
the comparison table and the paths.  See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import sys
import time
from pathlib import Path

from . import datasets, plots, report
from .log import Log
from .presets import ALL_MODES, BASE, PRESETS, STANDALONE
from .runner import Bench
from ..cluster import ROOT



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
    ap.add_argument("--preset", choices=sorted(PRESETS) + sorted(STANDALONE), default="default",
                    help="; ".join(f"{n}: {d}" for n, (_, d) in sorted(STANDALONE.items()))
                    + " (each with its own options: --preset NAME --help)")
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
    g.add_argument("--insert-rate", type=float,
                   help="inserts a second beside the searching client (beside-inserts, 100)")
    g.add_argument("--ltm-fractions", type=lambda s: [float(x) for x in s.split(",")],
                   help="index > shared_buffers: shared_buffers as fractions of "
                        "pgvector's index size (0.25)")
    g.add_argument("--ltm-seconds", type=float, help="timed query seconds per ltm point")
    ap.add_argument("--out", type=Path, help="output directory (default bench-results/<ts>)")
    a = ap.parse_args(argv)
    if a.preset in STANDALONE:
        ap.error(f"the {a.preset} preset has its own options: main() runs it "
                 f"(python -m shnsw.bench --preset {a.preset} --help)")

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
                "pgbench_clients", "mixed_vector_clients", "pgbench_scale", "insert_rows", "insert_rate",
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


def _standalone(argv):
    """The preset named on the command line when it has a runner of its own
    (STANDALONE), else None."""
    argv = sys.argv[1:] if argv is None else list(argv)
    for i, a in enumerate(argv):
        name = None
        if a == "--preset" and i + 1 < len(argv):
            name = argv[i + 1]
        elif a.startswith("--preset="):
            name = a.split("=", 1)[1]
        if name is not None:
            return name if name in STANDALONE else None
    return None


def _without_preset(argv):
    argv = sys.argv[1:] if argv is None else list(argv)
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--preset":
            skip = True
        elif not a.startswith("--preset="):
            out.append(a)
    return out


def main(argv=None) -> int:
    name = _standalone(argv)
    if name is not None:
        # a measurement with its own runner and options (its --help lists them)
        mod = importlib.import_module(f".{STANDALONE[name][0]}", __package__)
        if name == "robustness":
            return mod.main(argv)
        return mod.main(_without_preset(argv)) or 0
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
