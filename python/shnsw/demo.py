"""The project's main job on an embedded default: `make demo`.

Starts a throwaway cluster (with the benchmark's storage-latency shim
preloaded), loads a seeded clustered data set, builds pgvector's hnsw and
(once the access method exists) streamhnsw on identical tables, and prints,
side by side: hot throughput at equal recall, cold latency with 300 us
injected per storage read (and the number of serial round trips it means),
and the latency of a new connection's first query, each with one line on
what the number means.  A few minutes on 2 cores.

Usage: python -m shnsw.demo [--rows N] [--dim D] [--queries Q] [--metric l2|cosine]
                            [--sentences]   (the real sentence-embedding set instead)
"""

from __future__ import annotations

import argparse
import sys
import time

from .bench import datasets, metrics
from .bench.log import Log
from .bench.presets import BASE
from .bench.runner import Bench


def demo_config(args) -> dict:
    cfg = dict(BASE)
    cfg.update(
        dataset="sentences" if args.sentences else "synthetic", rows=args.rows,
        dim=args.dim, metric=args.metric, queries=args.queries, seed=args.seed,
        ef_search=[10, 20, 40, 80, 160], hot_queries=min(300, args.queries), warmup=10,
        explain_sample=3, recall100=False, cold_queries=0, latency_queries=12,
        latency_extra_above=0, delay_us=args.delay_us, fresh_queries=30, insert_rows=0,
        modes=["hot", "fresh", "latency"], preset="demo",
        settings={"shared_buffers": "512MB", "max_parallel_maintenance_workers": 0})
    return cfg


def _interp(points, key, target, higher):
    return metrics.at_recall([(p["recall@10"], p[key]) for p in points], target, higher)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--metric", choices=["l2", "cosine"], default="l2")
    ap.add_argument("--delay-us", type=int, default=300)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--sentences", action="store_true",
                    help="real sentence embeddings (384-d; the first run embeds them)")
    args = ap.parse_args(argv)
    cfg = demo_config(args)
    log = Log()
    t0 = time.perf_counter()
    if args.sentences:
        ds = datasets.sentences(args.rows, max(args.queries, 100), 0, args.seed, 10,
                                log=log)
        cfg["metric"] = "cosine"
    else:
        ds = datasets.synthetic(args.rows, args.dim, args.metric, args.queries, 0,
                                args.seed, 10, log=log)
    print(f"streamhnsw demo: {ds.name} ({ds.metric}), {len(ds.queries)} held-out queries, "
          f"m={cfg['m']}, ef_construction={cfg['ef_construction']}, k={cfg['k']}, "
          f"ef_search swept {cfg['ef_search']}", flush=True)
    res = Bench(cfg, ds, log).run()
    engines = list(res["engines"])
    target = cfg["target_recall"]
    hot = res["modes"]["hot"]["points"]
    lat = res["modes"].get("cold_latency", {}).get("points", [])
    fresh = {p["engine"]: p for p in res["modes"].get("fresh", {}).get("points", [])}
    rows = []

    def row(label, vals, fmt, higher=None):
        out = [label] + [fmt.format(v) if v is not None else "–" for v in vals]
        if len(vals) == 2 and None not in vals and vals[0]:
            out.append(f"{vals[1] / vals[0]:.2f}x")
        rows.append(out)

    per = {e: [p for p in hot if p["engine"] == e] for e in engines}
    row(f"hot q/s at recall@10 {target}", [_interp(per[e], "qps", target, True)
                                            for e in engines], "{:,.0f}")
    row(f"hot p50 ms at recall@10 {target}", [_interp(per[e], "p50_ms", target, False)
                                               for e in engines], "{:.3f}")
    cl = {e: [dict(p, **{"recall@10": p["hot_recall@10"]}) for p in lat if p["engine"] == e]
          for e in engines}
    row(f"cold + {args.delay_us} us/read: p50 ms at recall {target}",
        [_interp(cl[e], "p50_ms", target, False) for e in engines], "{:.1f}")
    row(f"cold + {args.delay_us} us/read: round trips at recall {target}",
        [_interp(cl[e], "round_trips_p50", target, False) for e in engines], "{:.0f}")
    row("fresh connection: first query p50 ms (at ef*)",
        [fresh[e]["p50_ms"] if e in fresh else None for e in engines], "{:.2f}")
    row("warm connection: same queries p50 ms (at ef*)",
        [fresh[e]["warm"]["p50_ms"] if e in fresh else None for e in engines], "{:.3f}")
    row("fresh extra net of a PK lookup's, x warm (target <= 1.2)",
        [fresh[e].get("fresh_extra_net_over_warm") if e in fresh else None for e in engines],
        "{:.2f}")
    row("ef* (smallest ef_search with recall@10 >= target)",
        [res["ef_at_target"].get(e) for e in engines], "{}")
    row("build s", [res["engines"][e].get("build_s") for e in engines], "{:.1f}")
    row("index MB", [res["engines"][e].get("index_bytes", 0) / 2**20 for e in engines],
        "{:.1f}")
    head = ["figure"] + engines + (["streamhnsw / pgvector"] if len(engines) == 2 else [])
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
    print("What the numbers mean:")
    print(f"- hot q/s: queries per second from one client with the index and table in "
          f"shared buffers, read off each engine's ef_search sweep where its recall@10 is "
          f"{target} (equal recall, not equal ef_search).")
    print(f"- cold + {args.delay_us} us/read p50: the median time of a query when nothing is "
          f"cached and every storage read waits {args.delay_us} us (cloud block storage), "
          "at the same recall.")
    print(f"- round trips: that latency divided by {args.delay_us} us: how many storage "
          "reads the query waited for one after another (reads issued together count once).")
    print("- fresh connection: a new connection's first query (what a recycled pool "
          "connection or a serverless request pays), the connect itself not timed; the warm "
          "line is the same queries on a connection that has run before.")
    print("- fresh extra net of a PK lookup's: (fresh - warm) minus the same difference for a "
          "primary-key lookup as a new connection's first query (catalog and library loading "
          "that any first query pays), divided by the warm time: the index's own fresh cost.")
    if len(engines) < 2:
        print("(the streamhnsw access method is not built yet: pgvector only)")
    print(f"\ndone in {time.perf_counter() - t0:.0f} s; the full suite: make bench "
          "(see bench/README.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
