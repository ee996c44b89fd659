"""bit and sparsevec, both engines: `python -m shnsw.bench --preset types`.

Two shapes users store besides float vectors, each on a server of its own
(the suite's settings), the same rows in two tables, one indexed by
pgvector's hnsw and one by streamhnsw with the same m, ef_construction and
maintenance_work_mem:

- bit: the suite's real sentences (MiniLM, 384-d, cosine) stored as
  vector(384) and indexed on their binary quantization,
  `((binary_quantize(embedding)::bit(384)) bit_hamming_ops)`; searched as
  pgvector's README documents it: the --candidates (40) nearest by Hamming
  distance, re-ranked by the full vectors' cosine distance. Recall@10 of
  that answer against the exact nearest neighbours of the full vectors,
  and the index's plain Hamming recall@10 (LIMIT 10 by `<~>`; ties counted)
  against the exact Hamming neighbours;
- sparse: seeded topic-shaped sparsevec rows (shnsw.data.sparse_clustered:
  30,000 dimensions, about 100 non-zero elements a row, 16 topics with
  vocabularies of their own; queries of about 33 drawn apart, not rows),
  inner product by default; recall@10 against exact numpy answers.

Each shape runs the suite's own modes (runner.Bench): build time and index
size, the hot sweep of ef_search (one client, relations prewarmed,
streamhnsw's shared cache loaded, engines taking turns pass by pass: recall,
q/s, p50, p99), cold (before each query its relations are evicted from
shared buffers and their files from the OS cache, a new query each time;
streamhnsw's shared cache off) at local disk speed and with --delay-us
(300) injected per read. Figures are compared at equal recall@10: the
target (0.95), or the highest recall both engines reach when lower (the
bit shape's re-ranking of 40 candidates stops near 0.84 even with exact
Hamming neighbours).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

from .. import data as shdata
from . import datasets, metrics, pg, report, robustness
from .log import Log
from .presets import BASE
from .runner import Bench

ROOT = Path(__file__).resolve().parents[3]
K = 10


class SparseSet(datasets.Dataset):
    """A data set whose rows and queries are (indices, values) pairs."""

    @property
    def dim(self) -> int:
        return self.info["dim"]


def sparse_set(n, dim, nnz, metric, n_queries, seed, log=print) -> SparseSet:
    t = time.perf_counter()
    rows, queries = shdata.sparse_clustered(n, dim, nnz, seed=seed, n_queries=n_queries)
    truth = shdata.sparse_ground_truth(rows, queries, K, metric)
    log(f"  sparse rows, queries and exact answers in {time.perf_counter() - t:.0f} s")
    info = {"dim": dim, "nnz": nnz, "query_nnz": max(1, nnz // 3), "topics": 16, "seed": seed,
            "generator": "shnsw.data.sparse_clustered", "mean_nnz":
            float(np.mean([len(i) for i, _ in rows]))}
    return SparseSet(f"sparse {n}x{dim}", f"sparse-n{n}-d{dim}-nnz{nnz}-s{seed}", metric,
                     rows, queries, [], truth, info)


class BitBench(Bench):
    """Rows as vectors, the index on their binary quantization, queries
    re-ranked by the full vectors."""

    def __init__(self, cfg, ds, log=None):
        super().__init__(cfg, ds, log)
        self.bits = f"binary_quantize(embedding)::bit({ds.dim})"
        self.index_column = f"({self.bits})"
        self.index_typ, self.metric = "bit", "hamming"

    def sql(self, eng, k=None):
        # psycopg sends the %s as $1: the outer $1 is the same query vector
        return (f"SELECT id FROM (SELECT id, embedding FROM {eng.table} ORDER BY {self.bits} "
                f"<~> binary_quantize(%s::vector) LIMIT {self.cfg['candidates']}) "
                f"ORDER BY embedding <=> $1::vector LIMIT {k or self.k}")

    def hamming_sql(self, eng):
        return (f"SELECT id FROM {eng.table} ORDER BY {self.bits} <~> "
                f"binary_quantize(%s::vector) LIMIT {self.k}")

    def after_hot(self):
        super().after_hot()
        self.hamming_recall()

    def hamming_recall(self):
        """The index's own recall@10 by Hamming distance at each ef_search
        (ties counted), and what re-ranking the exact Hamming candidates
        would give: the ceiling of the re-ranked answer."""
        cfg, log = self.cfg, self.log
        n = min(cfg["hot_queries"], len(self.lits))
        # binary_quantize: a bit for each element > 0
        rows, queries = self.ds.rows > 0, self.ds.queries[:n] > 0
        kth, best = np.empty(n), []
        for i, q in enumerate(queries):
            d = robustness.distances(rows, q, "hamming")
            kth[i] = np.partition(d, K - 1)[K - 1]
            cand = np.argpartition(d, cfg["candidates"] - 1)[:cfg["candidates"]]
            best.append(cand[np.argsort(-(self.ds.rows[cand] @ self.ds.queries[i]))[:K]])
        ceiling = metrics.recall_at(best, self.ds.truth[:n], K)
        points = []
        for eng in self.engines:
            with self.conn(eng) as c:
                for ef in cfg["ef_search"]:
                    pg.apply_gucs(c, {eng.ef_guc: ef})
                    found = [[r[0] for r in c.execute(self.hamming_sql(eng), (lit,))]
                             for lit in self.lits[:n]]
                    r = robustness.recall_ties(found, rows, queries, "hamming", kth)
                    points.append({"engine": eng.label, "ef_search": ef, "recall@10": r})
                    log(f"    {eng.label:>16} ef {ef:4d}: Hamming recall@10 {r:.4f}")
        log(f"    exact Hamming top {cfg['candidates']} re-ranked: recall@10 {ceiling:.4f}")
        self.result["modes"]["hamming"] = {"queries": n, "points": points,
                                           "exact_candidates_recall@10": ceiling}


class SparseBench(Bench):
    def literals(self, x):
        return [shdata.sparse_literal(i, v, self.ds.dim) for i, v in x]

    def load_rows(self, c, eng):
        return pg.load_table(c, eng.table, self.ds.rows, "sparsevec", dim=self.ds.dim)


# --- the report -------------------------------------------------------------------

FIGURES = [("build s", "build_s"), ("index MB", "size_mb"), ("table MB", "table_mb"),
           ("recall@10 at ef_search 40", "recall_default"),
           ("plain Hamming recall@10 at ef_search 40 (ties counted)", "recall_hamming_40"),
           ("ef_search reaching recall@10 {t}", "ef_star"),
           ("hot: queries/s at recall@10 {t}, 1 client", "hot_qps"),
           ("hot: p50 ms at recall@10 {t}", "hot_p50"), ("hot: p99 ms at recall@10 {t}", "hot_p99"),
           ("cold (local disk): p50 ms at recall@10 {t}", "cold_p50"),
           ("cold + {d} us/read: p50 ms at recall@10 {t}", "lat_p50"),
           ("cold + {d} us/read: storage reads per query at ef*", "lat_reads")]


def figures(res: dict) -> dict:
    """Per engine: the suite's summary at equal recall plus hot p99, table
    size and the plain Hamming recall at ef_search 40."""
    out = report.summarize(res)
    t = res["config"]["target_recall"]
    for eng, s in out.items():
        hot = [p for p in res["modes"]["hot"]["points"] if p["engine"] == eng]
        s["hot_p99"] = metrics.at_recall([(p["recall@10"], p["p99_ms"]) for p in hot], t, False)
        s["table_mb"] = res["engines"][eng]["table_bytes"] / 2**20
        for p in res["modes"].get("hamming", {}).get("points", []):
            if p["engine"] == eng and p["ef_search"] == 40:
                s["recall_hamming_40"] = p["recall@10"]
    return out


def shape_section(title: str, res: dict, about: list) -> str:
    cfg, s = res["config"], figures(res)
    engines = list(res["engines"])
    base = engines[0]
    lines = [f"## {title}", ""] + [f"- {a}" for a in about] + [
        f"- {res['dataset']['rows']:,} rows, {cfg['hot_queries']} held-out queries "
        f"({cfg['hot_passes']} passes each, engines taking turns), ef_search swept "
        f"{cfg['ef_search']}; cold: {cfg['cold_queries']} queries per point, cold + "
        f"{cfg['delay_us']} us: {cfg['latency_queries']}; ran {res['elapsed_s'] / 60:.1f} min"]
    lines += [f"- note: {n}" for n in res.get("notes", [])]
    lines += ["", f"| figure | {' | '.join(engines)} | {engines[-1]} / {base} |",
              "|---|" + "---:|" * (len(engines) + 1)]
    for label, key in FIGURES:
        vals = [s[e].get(key) for e in engines]
        if all(v is None for v in vals):
            continue
        r = metrics.ratio(vals[-1], vals[0]) if key != "ef_star" else None
        lines.append(f"| {label.format(t=cfg['target_recall'], d=cfg['delay_us'])} | "
                     + " | ".join(report._fmt(v, key) for v in vals)
                     + f" | {f'{r:.2f}x' if r is not None else '–'} |")
    return "\n".join(lines + ["", per_ef_table(res), ""])


def per_ef_table(res: dict) -> str:
    """Every ef_search of the sweep: hot figures, plain Hamming recall and
    cold p50s where measured."""
    modes = res["modes"]
    by = {}
    for mode, key in (("hamming", "recall@10"), ("cold", "p50_ms"), ("cold_latency", "p50_ms")):
        for p in modes.get(mode, {}).get("points", []):
            by[(mode, p["engine"], p["ef_search"])] = p[key]
    rows = []
    for p in modes["hot"]["points"]:
        at = (p["engine"], p["ef_search"])
        rows.append([p["engine"], p["ef_search"], f"{p['recall@10']:.4f}",
                     report._fmt(by.get(("hamming",) + at), "recall"), p["qps"], p["p50_ms"],
                     p["p99_ms"], by.get(("cold",) + at), by.get(("cold_latency",) + at)])
    head = ["engine", "ef_search", "recall@10", "Hamming recall@10", "hot q/s", "hot p50 ms",
            "hot p99 ms", "cold p50 ms", f"cold + {res['config']['delay_us']} us p50 ms"]
    if "hamming" not in modes:
        head.pop(3)
        rows = [r[:3] + r[4:] for r in rows]
    return report._table(head, rows)


def markdown(runs: dict, a) -> str:
    first = next(iter(runs.values()))
    v, mach = first["versions"], first["machine"]
    out = ["# bit and sparsevec: both engines", "",
           f"Run {first['started']} on {mach.get('cpu', '?')}, {mach.get('cpus')} CPUs, "
           "shared with other work (noisy: compare ratios within this run). PostgreSQL "
           f"{v.get('server')}, pgvector {v.get('vector')}, streamhnsw {v.get('streamhnsw')} "
           f"({a.build} build). `python -m shnsw.bench --preset types`; each shape on a server "
           "of its own, the same rows in two tables, m "
           f"{a.m}, ef_construction {a.ef_construction} for both; server settings: "
           + ", ".join(f"`{k}={x}`" for k, x in sorted(first["server_settings"].items()))
           + ". Ratios are streamhnsw over pgvector at equal recall@10 (interpolated along "
           "each engine's ef_search sweep); cold figures take the recall the hot sweep "
           "measured at the same ef_search. One run.", ""]
    if "bit" in runs:
        r = runs["bit"]
        ham = r["modes"]["hamming"]
        out.append(shape_section(f"bit: binary-quantized sentences, re-ranked ({r['dataset']['name']})", r, [
            f"table `(id bigint, embedding vector({r['dataset']['dim']}))`; index "
            f"`USING am ((binary_quantize(embedding)::bit({r['dataset']['dim']})) "
            "bit_hamming_ops)`",
            f"query: `SELECT id FROM (SELECT id, embedding FROM t ORDER BY "
            f"binary_quantize(embedding)::bit({r['dataset']['dim']}) <~> binary_quantize($1) "
            f"LIMIT {a.candidates}) ORDER BY embedding <=> $1 LIMIT 10`",
            "recall@10: the re-ranked answer against the exact cosine nearest neighbours of "
            "the full vectors; re-ranking the exact Hamming top "
            f"{a.candidates} instead would give {ham['exact_candidates_recall@10']:.4f} (the "
            "ceiling of this query)",
            "plain Hamming recall@10: `ORDER BY bits <~> binary_quantize($1) LIMIT 10` against "
            "the exact Hamming neighbours, a row at the 10th distance counting (distances tie)",
            "streamhnsw widens a search whose LIMIT passes ef_search / 2 to twice ef_search "
            f"(README): at ef_search {a.candidates} the inner LIMIT {a.candidates} searches "
            f"{2 * a.candidates} wide"]))
    if "sparse" in runs:
        r = runs["sparse"]
        d = r["dataset"]
        out.append(shape_section(f"sparsevec: {d['dim']:,} dimensions, ~{d['nnz']} non-zero "
                                 f"({r['dataset']['name']}, {d['metric']})", r, [
            f"`shnsw.data.sparse_clustered` seed {d['seed']}: {d['topics']} topics (Zipf "
            f"sizes), a row about 7/10 terms of its topic and the rest Zipf over the whole "
            f"vocabulary, positive values; {d['mean_nnz']:.1f} non-zeros a row on average, "
            f"queries ~{d['query_nnz']} non-zeros, drawn apart (not rows)",
            f"index `USING am (embedding sparsevec_{pg.OPS[d['metric']][0]})`; query "
            f"`ORDER BY embedding {pg.OPS[d['metric']][1]} $1 LIMIT 10`; recall@10 against "
            "exact numpy answers (float32)",
            "streamhnsw navigates on a 1,024-dimension sketch of each row (a node record "
            "of 1,176 bytes at m 16) and stores each value at its own size (16 + 8 bytes "
            "a non-zero element): its index size is that, as measured"]))
    return "\n".join(out).rstrip() + "\n"


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench --preset types",
                                 description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(x) for x in s.split(",")]           # noqa: E731
    ap.add_argument("--shapes", type=lambda s: s.split(","), default=["bit", "sparse"])
    ap.add_argument("--bit-rows", type=int, default=100_000, help="real sentences")
    ap.add_argument("--candidates", type=int, default=40, help="re-ranked Hamming candidates")
    ap.add_argument("--bit-ef-search", type=ints, default=[40, 64, 100, 200])
    ap.add_argument("--sparse-rows", type=int, default=30_000)
    ap.add_argument("--sparse-dim", type=int, default=30_000)
    ap.add_argument("--sparse-nnz", type=int, default=100)
    ap.add_argument("--sparse-metric", choices=["ip", "l2", "cosine"], default="ip")
    ap.add_argument("--sparse-ef-search", type=ints, default=[10, 20, 40, 80, 160])
    ap.add_argument("--queries", type=int, default=500, help="hot queries (and Hamming recall)")
    ap.add_argument("--hot-passes", type=int, default=3)
    ap.add_argument("--cold-queries", type=int, default=50)
    ap.add_argument("--latency-queries", type=int, default=20)
    ap.add_argument("--delay-us", type=int, default=300)
    ap.add_argument("--target-recall", type=float, default=0.95)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=64)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--server-set", action="append", default=[], metavar="NAME=V")
    ap.add_argument("--build", default="release", help="the installed build, for the report")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "reports")
    a = ap.parse_args(argv)
    if set(a.shapes) - {"bit", "sparse"}:
        ap.error("--shapes: bit, sparse")
    return a


def config(a, shape: str) -> dict:
    cfg = dict(BASE, m=a.m, ef_construction=a.ef_construction, k=K, seed=a.seed,
               hot_queries=a.queries, hot_passes=a.hot_passes, cold_queries=a.cold_queries,
               latency_queries=a.latency_queries, delay_us=a.delay_us,
               target_recall=a.target_recall, recall100=False, preset="types", shape=shape,
               modes=["hot", "cold", "latency"], settings=dict(
                   kv.split("=", 1) for kv in a.server_set))
    if shape == "bit":
        cfg.update(dataset="sentences", type="vector", metric="cosine",
                   ef_search=a.bit_ef_search, candidates=a.candidates)
    else:
        cfg.update(dataset="sparse", type="sparsevec", metric=a.sparse_metric,
                   ef_search=a.sparse_ef_search)
    return cfg


def run_shape(shape: str, ds, cfg: dict, log) -> dict:
    """One shape on its own server: the suite's run with this shape's table,
    index and query."""
    b = (BitBench if shape == "bit" else SparseBench)(cfg, ds, log)
    b.result["started"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t = time.perf_counter()
    res = b.run()
    res["elapsed_s"] = time.perf_counter() - t
    return res


def main(argv=None) -> int:
    a = parse(argv)
    log = Log()
    runs = {}
    for shape in a.shapes:
        cfg = config(a, shape)
        log.step(f"=== {shape}")
        if shape == "bit":
            ds = datasets.sentences(a.bit_rows, 1000, 1000, a.seed, k_truth=100, log=log)
        else:
            ds = sparse_set(a.sparse_rows, a.sparse_dim, a.sparse_nnz, a.sparse_metric,
                            a.queries, a.seed, log)
        runs[shape] = run_shape(shape, ds, cfg, log)
    md = markdown(runs, a)
    name = "-".join(f"{s}{(a.bit_rows if s == 'bit' else a.sparse_rows) // 1000}k"
                    for s in a.shapes)
    report.write_standalone(a.out / f"types-{name}", {"runs": runs}, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
