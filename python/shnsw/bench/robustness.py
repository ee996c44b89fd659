"""The robustness matrix: data shapes users store, both engines side by side.

    python -m shnsw.bench --preset robustness                 # every shape, 50,000 rows
    python -m shnsw.bench --preset robustness --rows 3000 --queries 50 \\
        --shapes zero-1pct-cos,ip-unnormalized                # a smoke run

One server; for each shape two tables with the same rows, one indexed with
pgvector's ``hnsw`` and one with ``streamhnsw`` (same m and ef_construction),
200 held-out queries from the same distribution, and per engine:

- recall@10 at ef_search 40, and the smallest ef_search of a sweep
  (10, 20, 40, 80, 160) reaching recall@10 0.95 ("not reached" otherwise);
- server time per query, p50 and p99: the Execution Time of
  ``EXPLAIN (ANALYZE, TIMING OFF, BUFFERS)`` of each query, at ef_search 40
  and at the engine's ef_search for recall 0.95;
- work per query, p50 and p99, and the worst query's work over the median's:
  for streamhnsw the nodes it examined as its EXPLAIN (ANALYZE) lines
  report, ``nodes expanded`` (``streamhnsw: rounds=...``: nodes whose
  neighbour lists the walk read, in every round) plus ``swept nodes``
  (``streamhnsw order: ...``: nodes a sweep read); for pgvector the shared
  buffers hit + read of the query (EXPLAIN (ANALYZE, BUFFERS); pgvector's
  EXPLAIN says nothing else about its work);
- for streamhnsw the distances it computed (p50, p99), the rounds (p50,
  max) and how many queries swept.

Streamhnsw runs at its default settings (only ef_search is set, and
enable_seqscan off so that small tables use the index). Recall counts ties:
a returned row is a hit when its exact distance is at most the k-th
nearest's (0/1 rows and duplicates have many equal distances, and an engine
returning another of the equal rows is not wrong). Ground truth is exact,
numpy float32, with the distances pgvector computes (halfvec rows and
queries rounded to float16 first).

The generators (``SHAPES``, :func:`generate`) are numpy only and seeded, so
the test suite's small matrix (test/python/test_robustness.py) imports them
without the benchmark's other dependencies.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

OPS = {"l2": ("l2_ops", "<->"), "cosine": ("cosine_ops", "<=>"), "ip": ("ip_ops", "<#>"),
       "l1": ("l1_ops", "<+>"), "hamming": ("hamming_ops", "<~>"),
       "jaccard": ("jaccard_ops", "<%>")}

K = 10
EF_SWEEP = [10, 20, 40, 80, 160]
EF_REPORT = 40
TARGET_RECALL = 0.95


# --- data shapes -----------------------------------------------------------------

def _gaussian(rng, n, dim):
    return rng.standard_normal((n, dim), dtype=np.float32)


def _clustered(rng, n, dim, n_clusters=None):
    """A Gaussian mixture with Zipf-like cluster sizes (as shnsw.data.clustered),
    drawn from rng so that rows and queries share the centers."""
    if n_clusters is None:
        n_clusters = max(8, int(np.sqrt(n) / 2))
    w = 1.0 / np.arange(1, n_clusters + 1) ** 0.8
    w /= w.sum()
    centers = rng.standard_normal((n_clusters, dim), dtype=np.float32)
    spread = rng.uniform(0.15, 0.45, n_clusters).astype(np.float32)
    lab = rng.choice(n_clusters, size=n, p=w)
    return (centers[lab] + rng.standard_normal((n, dim), dtype=np.float32)
            * spread[lab, None]).astype(np.float32)


def _normalize(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _log_uniform(rng, n, lo, hi):
    return np.exp(rng.uniform(math.log(lo), math.log(hi), n)).astype(np.float32)


def _zero_dims(frac):
    def make(rng, n, dim):
        x = _gaussian(rng, n, dim)
        z = max(1, round(frac * dim))
        # the same dimensions for every row and query: spread over the vector
        x[:, np.linspace(0, dim - 1, z).astype(int)] = 0.0
        return x
    return make


def _const_dim(rng, n, dim):
    x = _normalize(_clustered(rng, n, dim))
    x[:, 7] = 0.5                      # a bias-like dimension, the same in every row
    return x


def _tiny_range(rng, n, dim):
    x = _normalize(_clustered(rng, n, dim))
    d = np.arange(0, dim, 16)          # every 16th dimension: 8 of 128
    x[:, d] = np.float32(0.01) + rng.uniform(0, 1e-7, (n, len(d))).astype(np.float32)
    return x


def _heavy_tailed(rng, n, dim):
    x = _clustered(rng, n, dim)
    x[:, [3, 40, 77, 101]] *= 50.0     # outlier features, as transformers have
    return x


def _duplicates(rng, n, dim):
    """10 % of the rows are 10 copies each of n/100 distinct vectors
    (generate() makes half the queries near a duplicated row)."""
    x = _normalize(_clustered(rng, n, dim))
    groups = max(1, n // 100)
    src = rng.choice(n, groups, replace=False)
    at = rng.choice(n, groups * 10, replace=False)
    x[at] = np.repeat(x[src], 10, axis=0)
    return x


def _unnormalized_cos(rng, n, dim):
    return _normalize(_clustered(rng, n, dim)) * _log_uniform(rng, n, 1e-3, 1e3)[:, None]


def _ip_normalized(rng, n, dim):
    return _normalize(_clustered(rng, n, dim))


def _ip_unnormalized(rng, n, dim):
    return _normalize(_clustered(rng, n, dim)) * _log_uniform(rng, n, 0.3, 3.0)[:, None]


def _uniform(rng, n, dim):
    return rng.random((n, dim), dtype=np.float32)


def _binary(rng, n, dim):
    x = (rng.random((n, dim)) < 0.2).astype(np.float32)
    x[np.arange(n), rng.integers(0, dim, n)] = 1.0     # never all zero
    return x


def _signs(rng, n, dim):
    """Binary quantization (sign bits) of a Gaussian mixture: pgvector's
    documented use of bit indexes."""
    return (_clustered(rng, n, dim) > 0).astype(np.float32)


def _few_bits(rng, n, dim):
    """Ties everywhere: 3 bits set of 64 in each row (distances take a few
    values), a tenth of the rows all zero (at Jaccard distance 1 from
    everything, themselves included), a tenth in groups of 10 copies."""
    x = np.zeros((n, dim), dtype=np.float32)
    for i in range(n):
        x[i, rng.choice(dim, 3, replace=False)] = 1.0
    x[rng.random(n) < 0.1] = 0.0
    groups = max(1, n // 100)
    src = rng.choice(n, groups, replace=False)
    x[rng.choice(n, groups * 10, replace=False)] = np.repeat(x[src], 10, axis=0)
    return x


def _sparse(rng, n, dim):
    """95 % of each row zero; popular dimensions non-zero more often (Zipf),
    non-negative values (tf-idf, counts)."""
    p = 1.0 / np.arange(1, dim + 1) ** 0.7
    p = rng.permutation(p * (0.05 * dim / p.sum()))
    mask = rng.random((n, dim)) < np.minimum(p, 1.0)[None, :]
    mask[np.arange(n), rng.integers(0, dim, n)] = True
    return (mask * np.abs(rng.standard_normal((n, dim), dtype=np.float32))).astype(np.float32)


def _splade(rng, n, dim):
    """Topic-shaped learned sparse vectors (shnsw.data.sparse_clustered): 60
    non-zero elements a row, positive, as dense rows."""
    from .. import data
    rows, _ = data.sparse_clustered(n, dim, 60, seed=int(rng.integers(2 ** 31)))
    x = np.zeros((n, dim), dtype=np.float32)
    for i, (idx, val) in enumerate(rows):
        x[i, idx] = val
    return x


def _sentence_like(rng, n, dim):
    """A stand-in for halfvec-rounded sentence embeddings: clustered,
    normalized, 2 dimensions zero in every row (rounded to float16 by
    generate() for halfvec)."""
    x = _clustered(rng, n, dim)
    x[:, [17, 305]] = 0.0
    return _normalize(x)


@dataclass(frozen=True)
class Shape:
    name: str
    metric: str              # l2 | cosine | ip | l1 | hamming | jaccard
    dim: int
    make: object = field(repr=False)   # (rng, n, dim) -> float32 rows (0/1 for bit)
    typ: str = "vector"      # vector | halfvec | bit | sparsevec
    max_rows: int | None = None        # a cap for the widest shapes (build time)
    about: str = ""


SHAPES = [
    Shape("gaussian-128-cos", "cosine", 128, _gaussian, about="Gaussian"),
    Shape("clustered-128-l2", "l2", 128, _clustered, about="Gaussian mixture, not normalized"),
    Shape("zero-1pct-cos", "cosine", 128, _zero_dims(0.01),
          about="Gaussian, 1 % of dimensions (1) zero in every row and query"),
    Shape("zero-10pct-cos", "cosine", 128, _zero_dims(0.10),
          about="Gaussian, 10 % of dimensions (13) zero in every row and query"),
    Shape("const-dim-cos", "cosine", 128, _const_dim,
          about="clustered, normalized, one dimension 0.5 in every row"),
    Shape("tiny-range-cos", "cosine", 128, _tiny_range,
          about="clustered, normalized, 8 dimensions in 0.01 + [0, 1e-7)"),
    Shape("heavy-tail-cos", "cosine", 128, _heavy_tailed,
          about="clustered, 4 dimensions 50x the others"),
    Shape("duplicates-cos", "cosine", 128, _duplicates,
          about="clustered, normalized, 10 % of rows in groups of 10 equal rows; "
                "half the queries near a duplicated row"),
    Shape("unnormalized-cos", "cosine", 128, _unnormalized_cos,
          about="clustered directions, norms log-uniform 1e-3..1e3"),
    Shape("ip-normalized", "ip", 128, _ip_normalized, about="clustered, normalized"),
    Shape("ip-unnormalized", "ip", 128, _ip_unnormalized,
          about="clustered directions, norms log-uniform 0.3..3"),
    Shape("uniform-3-l2", "l2", 3, _uniform, about="uniform in the unit cube"),
    Shape("clustered-8-l2", "l2", 8, _clustered, about="Gaussian mixture"),
    Shape("clustered-1536-cos", "cosine", 1536, _ip_normalized, max_rows=20_000,
          about="clustered, normalized"),
    Shape("clustered-4000-halfvec-cos", "cosine", 4000, _ip_normalized, typ="halfvec",
          max_rows=10_000, about="clustered, normalized, float16"),
    Shape("binary-128-l2", "l2", 128, _binary, about="0/1, 20 % ones"),
    Shape("sparse-95pct-cos", "cosine", 128, _sparse,
          about="95 % zeros, Zipf-popular dimensions, non-negative"),
    Shape("sentence-like-384-cos", "cosine", 384, _sentence_like,
          about="stand-in for MiniLM sentences: clustered, normalized, 2 dimensions zero"),
    Shape("sentence-like-384-halfvec-cos", "cosine", 384, _sentence_like, typ="halfvec",
          about="the same, stored as halfvec (float16)"),
    Shape("clustered-128-l1", "l1", 128, _clustered, about="Gaussian mixture, L1 (<+>)"),
    Shape("heavy-tail-l1", "l1", 128, _heavy_tailed,
          about="clustered, 4 dimensions 50x the others, L1: their steps dominate the "
                "codes' error bound"),
    Shape("signs-256-hamming", "hamming", 256, _signs, typ="bit",
          about="sign bits of a Gaussian mixture, bit(256), Hamming (<~>)"),
    Shape("few-bits-64-jaccard", "jaccard", 64, _few_bits, typ="bit",
          about="3 bits of 64 set, a tenth all zero, a tenth in groups of 10 copies, "
                "Jaccard (<%>)"),
    Shape("splade-8192-ip", "ip", 8192, _splade, typ="sparsevec", max_rows=20000,
          about="sparsevec(8192), 60 topic-shaped non-zeros a row, inner product: "
                "navigation on a sketch, whose distances bound nothing"),
]
BY_NAME = {s.name: s for s in SHAPES}


def generate(shape: Shape, n: int, n_queries: int, seed: int = 42):
    """(rows, queries) of a shape, float32; deterministic for (shape, n, n_queries, seed).

    Queries come from the same distribution but are not rows (drawn in the
    same call, then split off). halfvec shapes are rounded to float16, as the
    column stores them."""
    rng = np.random.default_rng([seed, sum(map(ord, shape.name))])
    x = np.ascontiguousarray(shape.make(rng, n + n_queries, shape.dim), dtype=np.float32)
    perm = rng.permutation(n + n_queries)
    if shape.make is _duplicates:
        # queries: half drawn as usual, half a duplicated row plus small noise
        # queries: held-out rows that have no copy (a copy left in the
        # table would make the query a row), half of them then replaced by
        # a duplicated row plus small noise
        dup = np.zeros(len(x), dtype=bool)
        dup[_duplicated_rows(x)] = True
        qi = perm[~dup[perm]][:n_queries]
        rows = np.delete(x, qi, axis=0)
        q = x[qi].copy()
        half = n_queries // 2
        d = _duplicated_rows(rows)
        if len(d) and half:
            pick = rows[rng.choice(d, half)]
            noise = rng.standard_normal(pick.shape, dtype=np.float32) * 0.02
            q[:half] = _normalize(pick + noise / np.sqrt(shape.dim))
        queries = q
    else:
        queries = x[perm[:n_queries]]
        rows = x[np.sort(perm[n_queries:])]
    if shape.typ == "halfvec":
        rows = rows.astype(np.float16).astype(np.float32)
        queries = queries.astype(np.float16).astype(np.float32)
    return np.ascontiguousarray(rows), np.ascontiguousarray(queries)


def _duplicated_rows(x):
    """Indices of rows that have an equal row elsewhere."""
    _, inv, counts = np.unique(x, axis=0, return_inverse=True, return_counts=True)
    return np.nonzero(counts[inv.ravel()] > 1)[0]


# --- exact distances, ground truth, recall with ties ---------------------------------

def distances(rows: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    """Distances from q to every row in float32, as pgvector's operators give
    them: l2 (<->) the Euclidean distance, cosine (<=>) 1 - cos, ip (<#>)
    the negative inner product, l1 (<+>) the sum of absolute differences;
    on 0/1 rows (bit) hamming (<~>) the bits that differ, jaccard (<%>)
    1 - shared / either, 1 when none is shared (float64)."""
    if metric == "l2":
        d = rows - q[None, :]
        return np.sqrt((d * d).sum(axis=1, dtype=np.float32))
    if metric == "l1":
        return np.abs(rows - q[None, :]).sum(axis=1, dtype=np.float32)
    if metric == "hamming":
        return ((rows != 0) != (q[None, :] != 0)).sum(axis=1).astype(np.float32)
    if metric == "jaccard":
        a, b = rows != 0, q[None, :] != 0
        both, either = (a & b).sum(axis=1), (a | b).sum(axis=1)
        return np.where(both == 0, 1.0, 1.0 - both / np.maximum(either, 1))
    dots = rows @ q
    if metric == "ip":
        return -dots
    norms = np.linalg.norm(rows, axis=1) * np.linalg.norm(q)
    return (1.0 - dots / norms).astype(np.float32)


def truth(rows: np.ndarray, queries: np.ndarray, metric: str, k: int = K):
    """(ids, kth): the exact k nearest rows of each query and the k-th distance."""
    ids = np.empty((len(queries), k), dtype=np.int64)
    kth = np.empty(len(queries), dtype=np.float64)
    for i, q in enumerate(queries):
        d = distances(rows, q, metric)
        part = np.argpartition(d, k - 1)[:k]
        part = part[np.argsort(d[part], kind="stable")]
        ids[i] = part
        kth[i] = float(d[part[-1]])
    return ids, kth


def recall_ties(found, rows, queries, metric, kth, k: int = K) -> float:
    """Mean recall@k counting ties: a returned row (distinct ids only) is a
    hit when its exact distance is at most the k-th nearest distance (plus
    a float32 rounding margin)."""
    hits = 0
    for f, q, t in zip(found, queries, kth):
        f = list(dict.fromkeys(int(i) for i in list(f)[:k]))
        if not f:
            continue
        d = distances(rows[f], q, metric).astype(np.float64)
        hits += int((d <= t + 1e-6 * max(1.0, abs(t))).sum())
    return hits / (k * len(queries))


# --- EXPLAIN ---------------------------------------------------------------------------

_NUM = {"rounds": r"streamhnsw: rounds=(\d+)",
        "expanded": r"nodes expanded=(\d+)",
        "distances": r"\bdistances=(\d+)",
        "swept": r"swept nodes=(\d+)",
        "unproven": r"returned unproven=(\d+)",
        "exec_ms": r"Execution Time: ([0-9.]+) ms"}


def parse_explain(lines) -> dict:
    """Figures of one EXPLAIN (ANALYZE[, BUFFERS]) in text format: execution
    time, buffers hit + read of the top node, and for a streamhnsw scan its
    rounds, nodes expanded, distances, swept nodes and whether it swept."""
    text = "\n".join(lines)
    out = {"text": text}
    for k, pat in _NUM.items():
        m = re.search(pat, text)
        if m:
            out[k] = float(m.group(1)) if k == "exec_ms" else int(m.group(1))
    m = re.search(r"Buffers: shared((?: \w+=\d+)*)", text)
    b = dict(re.findall(r"(\w+)=(\d+)", m.group(1))) if m else {}
    out["buffers"] = int(b.get("hit", 0)) + int(b.get("read", 0))
    out["streamhnsw"] = "rounds" in out
    out["sweep"] = out.get("swept", 0) > 0 or "streamhnsw sweeps:" in text
    # streamhnsw: the nodes it examined, those whose neighbour lists the walk
    # read (nodes expanded) and those a sweep read; pgvector: buffers
    out["work"] = (out.get("expanded", 0) + out.get("swept", 0) if out["streamhnsw"]
                   else out["buffers"])
    return out


def explain(conn, sql: str, lit: str) -> dict:
    """EXPLAIN (ANALYZE, TIMING OFF, BUFFERS) of one query, parsed."""
    lines = [r[0] for r in conn.execute(
        "EXPLAIN (ANALYZE, TIMING OFF, BUFFERS) " + sql, (lit,)).fetchall()]
    return parse_explain(lines)


def vector_literal(v, typ: str = "vector") -> str:
    if typ == "bit":
        return "".join("1" if x else "0" for x in v)
    if typ == "sparsevec":
        nz = np.flatnonzero(v)
        return "{" + ",".join(f"{i + 1}:{float(v[i])!r}" for i in nz) + f"}}/{len(v)}"
    return "[" + ",".join(repr(float(x)) for x in v) + "]"


def opclass(shape: Shape) -> str:
    return f"{shape.typ}_{OPS[shape.metric][0]}"


def query_sql(table: str, shape: Shape, k: int = K) -> str:
    """One query's statement, with a parameter (so a % is written %%)."""
    cast = f"bit({shape.dim})" if shape.typ == "bit" else shape.typ
    return (f"SELECT id FROM {table} ORDER BY embedding "
            f"{OPS[shape.metric][1].replace('%', '%%')} %s::{cast} LIMIT {k}")


def batch_sql(table: str, qtable: str, shape: Shape, k: int = K) -> str:
    """Every query of qtable in one statement: (i, ids) per query."""
    return (f"SELECT q.i, ARRAY(SELECT t.id FROM {table} t ORDER BY t.embedding "
            f"{OPS[shape.metric][1]} q.v LIMIT {k}) FROM {qtable} q ORDER BY q.i")


def load_queries(conn, qtable: str, shape: Shape, queries: np.ndarray) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {qtable}")
    conn.execute(f"CREATE TABLE {qtable} (i int PRIMARY KEY, v {shape.typ}({shape.dim}))")
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {qtable} VALUES (%s, %s::{shape.typ}({shape.dim}))",
                        [(i, vector_literal(q, shape.typ)) for i, q in enumerate(queries)])


def run_batch(conn, table, qtable, shape, ef_guc, ef, k: int = K) -> list:
    """The ids each query returns at ef_search ef (all queries in one statement)."""
    conn.execute(f"SET {ef_guc} = {int(ef)}")
    return [r[1] for r in conn.execute(batch_sql(table, qtable, shape, k)).fetchall()]


def percentile(values, p):
    return float(np.percentile(np.asarray(values, dtype=float), p)) if len(values) else float("nan")


def work_summary(exps: list) -> dict:
    """p50/p99 of time and work over a list of parsed EXPLAINs, the worst
    query's work over the median's; for streamhnsw rounds and sweeps."""
    work = [e["work"] for e in exps]
    ms = [e["exec_ms"] for e in exps]
    med = percentile(work, 50)
    out = {"n": len(exps), "time_p50_ms": percentile(ms, 50), "time_p99_ms": percentile(ms, 99),
           "work_p50": med, "work_p99": percentile(work, 99), "work_max": max(work),
           "work_max_over_median": (max(work) / med) if med else None}
    if exps and exps[0]["streamhnsw"]:
        rounds = [e["rounds"] for e in exps]
        out.update(rounds_p50=percentile(rounds, 50), rounds_max=max(rounds),
                   swept_queries=sum(1 for e in exps if e["sweep"]),
                   swept_nodes_max=max(e.get("swept", 0) for e in exps),
                   distances_p50=percentile([e["distances"] for e in exps], 50),
                   distances_p99=percentile([e["distances"] for e in exps], 99))
    return out


def worst(exps: list) -> dict:
    """The EXPLAIN of the query with the most work."""
    return max(exps, key=lambda e: e["work"])


# --- the preset ------------------------------------------------------------------------

ENGINES = {"hnsw": ("pgvector hnsw", "hnsw.ef_search"),
           "streamhnsw": ("streamhnsw", "streamhnsw.ef_search")}


def _sentences(n: int, n_queries: int, seed: int, log):
    """The suite's real sentences (embedded once and cached by datasets.sentences)."""
    from . import datasets
    ds = datasets.sentences(n, n_queries, 0, seed, k_truth=K, log=log)
    return np.ascontiguousarray(ds.rows), np.ascontiguousarray(ds.queries)


REAL_SHAPES = [
    Shape("sentences-384-cos", "cosine", 384, None,
          about="the suite's real sentences (MiniLM, Debian corpus)"),
    Shape("sentences-384-halfvec-cos", "cosine", 384, None, typ="halfvec",
          about="the suite's real sentences stored as halfvec"),
]


def shape_data(shape: Shape, n: int, n_queries: int, seed: int, log=print):
    if shape.make is None:
        rows, queries = _sentences(n, n_queries, seed, log)
        if shape.typ == "halfvec":
            rows = rows.astype(np.float16).astype(np.float32)
            queries = queries.astype(np.float16).astype(np.float32)
        return rows, queries
    return generate(shape, n, n_queries, seed)


class Matrix:
    """One server, shape after shape: load, build both engines, measure, drop."""

    def __init__(self, cfg: dict, log):
        self.cfg, self.log = cfg, log

    def start(self):
        from ..cluster import Cluster
        from . import pg
        settings = dict(pg.DEFAULT_SETTINGS)
        settings.update(self.cfg.get("settings") or {})
        self.settings = settings
        self.cluster = Cluster(name="shnsw-robust", settings=settings)
        self.cluster.init()
        self.cluster.start()
        with self.cluster.connect() as c:
            self.versions = pg.setup_extensions(c, self.log)
            self.have_streamhnsw = pg.has_streamhnsw(c)

    def stop(self):
        self.cluster.destroy()

    def shape(self, shape: Shape) -> dict:
        from . import pg
        from .. import data as shdata
        from .datasets import Progress
        cfg, log = self.cfg, self.log
        n = cfg["rows"] if shape.max_rows is None else min(cfg["rows"], shape.max_rows)
        rows, queries = shape_data(shape, n, cfg["queries"], cfg["seed"], log)
        n = len(rows)
        ids, kth = truth(rows, queries, shape.metric)
        res = {"shape": shape.name, "about": shape.about, "metric": shape.metric,
               "type": shape.typ, "dim": shape.dim, "rows": n, "queries": len(queries),
               "capped": n < cfg["rows"], "engines": {}}
        ams = [a for a in cfg["ams"] if a != "streamhnsw" or self.have_streamhnsw]
        engines = []
        with self.cluster.connect() as c:
            load_queries(c, "rq", shape, queries)
            for am in ams:
                label, guc = ENGINES[am]
                eng = pg.Engine(label, am, f"rb_{am}", f"rb_{am}_idx", guc)
                shdata.load(c, eng.table, rows, typ=shape.typ)
                c.execute(f"VACUUM (ANALYZE, FREEZE) {eng.table}")
                b = pg.build_index(self.cluster, eng, shape.typ, shape.metric, cfg["m"],
                                   cfg["ef_construction"], log=log, poll=30)
                log(f"    {label}: built in {b['build_s']:.1f} s, "
                    f"{b['index_bytes'] / 2**20:.1f} MB")
                res["engines"][label] = {"build_s": b["build_s"], "index_bytes": b["index_bytes"]}
                engines.append(eng)
            c.execute("CHECKPOINT")
        for eng in engines:
            res["engines"][eng.label].update(self._measure(eng, shape, rows, queries, kth))
        with self.cluster.connect() as c:
            for eng in engines:
                c.execute(f"DROP TABLE {eng.table}")
            c.execute("DROP TABLE rq")
        return res

    def _measure(self, eng, shape, rows, queries, kth) -> dict:
        from . import pg
        cfg, log = self.cfg, self.log
        out = {"recall": {}}
        sql = query_sql(eng.table, shape)
        lits = [vector_literal(q, shape.typ) for q in queries]
        with self.cluster.connect() as c:
            pg.prewarm(c, eng)
            c.execute("SET enable_seqscan = off")
            plan = "\n".join(r[0] for r in c.execute("EXPLAIN " + sql, (lits[0],)).fetchall())
            bplan = "\n".join(r[0] for r in c.execute(
                "EXPLAIN " + batch_sql(eng.table, "rq", shape)).fetchall())
            if eng.index not in plan or eng.index not in bplan:
                raise RuntimeError(f"{eng.label} not used:\n{plan}\n{bplan}")
            run_batch(c, eng.table, "rq", shape, eng.ef_guc, EF_REPORT)     # warm-up
            for ef in cfg["ef_search"]:
                found = run_batch(c, eng.table, "rq", shape, eng.ef_guc, ef)
                out["recall"][ef] = recall_ties(found, rows, queries, shape.metric, kth)
            ef95 = next((ef for ef in sorted(cfg["ef_search"])
                         if out["recall"][ef] >= cfg["target_recall"]), None)
            out["ef_for_target"] = ef95
            for ef in sorted({EF_REPORT, ef95} - {None}):
                c.execute(f"SET {eng.ef_guc} = {ef}")
                exps = [explain(c, sql, lit) for lit in lits]
                s = work_summary(exps)
                w = worst(exps)
                s["worst_explain"] = w["text"].split("\n")
                out[f"at_ef{ef}"] = s
        r40 = out["recall"].get(EF_REPORT)
        s40 = out.get(f"at_ef{EF_REPORT}", {})
        log(f"    {eng.label}: recall@10 {r40:.3f} at ef {EF_REPORT}, ef for "
            f"{cfg['target_recall']} {ef95 or 'not reached'}, time p50/p99 "
            f"{s40['time_p50_ms']:.2f}/{s40['time_p99_ms']:.2f} ms, work p50/p99 "
            f"{s40['work_p50']:.0f}/{s40['work_p99']:.0f} (max/median "
            f"{s40['work_max_over_median']:.1f})"
            + (f", rounds max {s40['rounds_max']}, swept {s40['swept_queries']} queries"
               if "rounds_max" in s40 else ""))
        return out


def _fmt(v, f="{:.2f}"):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f.format(v)


def table(results: list, target: float) -> str:
    head = ("| shape | metric, type | rows | engine | recall@10 ef 40 | ef for "
            f"{target} | time p50 / p99 ms, ef 40 | time p50 / p99 ms, ef for {target} "
            "| work p50 / p99, ef 40 | worst / median work | distances p50 / p99 "
            "| rounds p50 / max | queries swept |")
    lines = [head, "|" + " --- |" * 13]
    for r in results:
        for label, e in r["engines"].items():
            s = e.get(f"at_ef{EF_REPORT}", {})
            ef95 = e.get("ef_for_target")
            t = e.get(f"at_ef{ef95}", {}) if ef95 else {}
            lines.append(
                f"| {r['shape']} | {r['metric']}, {r['type']}({r['dim']}) | {r['rows']} "
                f"| {label} | {_fmt(e['recall'].get(EF_REPORT), '{:.3f}')} "
                f"| {ef95 or 'not reached'} "
                f"| {_fmt(s.get('time_p50_ms'))} / {_fmt(s.get('time_p99_ms'))} "
                f"| {_fmt(t.get('time_p50_ms'))} / {_fmt(t.get('time_p99_ms'))} "
                f"| {_fmt(s.get('work_p50'), '{:.0f}')} / {_fmt(s.get('work_p99'), '{:.0f}')} "
                f"| {_fmt(s.get('work_max_over_median'), '{:.1f}')} "
                f"| {_fmt(s.get('distances_p50'), '{:.0f}')} / "
                f"{_fmt(s.get('distances_p99'), '{:.0f}')} "
                f"| {_fmt(s.get('rounds_p50'), '{:.0f}')} / {_fmt(s.get('rounds_max'), '{}')} "
                f"| {_fmt(s.get('swept_queries'), '{}')} |")
    return "\n".join(lines)


def report(res: dict) -> str:
    cfg = res["config"]
    out = [f"# Robustness matrix ({res['started']})", "",
           f"pgvector `hnsw` and `streamhnsw` on one server (PostgreSQL "
           f"{res['versions'].get('server')}, pgvector {res['versions'].get('vector')}, "
           f"streamhnsw {res['versions'].get('streamhnsw', 'not installed')}), "
           f"two tables with the same rows per shape, m {cfg['m']}, ef_construction "
           f"{cfg['ef_construction']}, {cfg['queries']} held-out queries per shape, "
           f"LIMIT {K}, ef_search swept over {cfg['ef_search']}; streamhnsw at its "
           "default settings otherwise, enable_seqscan off.", "",
           "- recall@10 counts ties (a row at the k-th nearest distance is a hit); "
           "exact ground truth in numpy float32 (halfvec rounded to float16).",
           "- time: server time per query, the Execution Time of "
           "EXPLAIN (ANALYZE, TIMING OFF, BUFFERS), one query at a time, warm.",
           "- work: streamhnsw the nodes it examined (EXPLAIN's nodes expanded, every "
           "round, + swept nodes), pgvector the shared buffers hit + read of the query "
           "(EXPLAIN (ANALYZE, BUFFERS)): not the same unit, compare each engine's "
           "worst/median ratio, not the figures. distances: what streamhnsw computed "
           "(walk and sweep).",
           f"- server settings: {res['server_settings']}", "",
           table(res["shapes"], cfg["target_recall"]), ""]
    capped = [r for r in res["shapes"] if r["capped"]]
    if capped:
        out.append("Fewer rows (build time): " + ", ".join(
            f"{r['shape']} {r['rows']}" for r in capped) + ".")
        out.append("")
    out.append("## Shapes")
    out.append("")
    for r in res["shapes"]:
        out.append(f"- `{r['shape']}` ({r['metric']}, {r['type']}({r['dim']})): {r['about']}")
    out.append("")
    out.append("## The worst streamhnsw query of each shape (ef_search 40)")
    for r in res["shapes"]:
        e = r["engines"].get("streamhnsw", {}).get(f"at_ef{EF_REPORT}")
        if not e:
            continue
        keep = [l for l in e["worst_explain"] if "streamhnsw" in l and "look-ahead" not in l
                or "Execution Time" in l]
        out += ["", f"`{r['shape']}`:", "", "```"] + [l.strip() for l in keep] + ["```"]
    return "\n".join(out) + "\n"


def parse(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench --preset robustness",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=["robustness"], default="robustness")
    ap.add_argument("--rows", type=int, default=50_000,
                    help="rows per shape (50,000; the 1,536-d and 4,000-d shapes are "
                         "capped at 20,000 and 10,000)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--shapes", type=lambda s: s.split(","),
                    help=f"a subset of: {','.join(s.name for s in SHAPES + REAL_SHAPES)}")
    ap.add_argument("--real-sentences", action="store_true",
                    help="add the suite's real sentences as vector and halfvec (embeds "
                         "them on the first run: ~10 min per 50k sentences here)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=64)
    ap.add_argument("--ef-search", type=lambda s: [int(x) for x in s.split(",")],
                    default=list(EF_SWEEP), help="sweep (must include 40)")
    ap.add_argument("--target-recall", type=float, default=TARGET_RECALL)
    ap.add_argument("--am", dest="ams", type=lambda s: s.split(","),
                    default=["hnsw", "streamhnsw"])
    ap.add_argument("--server-set", action="append", default=[], metavar="NAME=V")
    ap.add_argument("--out", help="output directory (default bench-results/<ts>)")
    a = ap.parse_args(argv)
    if EF_REPORT not in a.ef_search or min(a.ef_search) < K:
        ap.error(f"--ef-search must include {EF_REPORT} and be >= {K}")
    pool = SHAPES + (REAL_SHAPES if a.real_sentences else [])
    names = {s.name: s for s in SHAPES + REAL_SHAPES}
    if a.shapes:
        bad = [s for s in a.shapes if s not in names]
        if bad:
            ap.error(f"unknown shapes {bad}")
        pool = [names[s] for s in a.shapes]
    cfg = dict(preset="robustness", rows=a.rows, queries=a.queries, seed=a.seed, m=a.m,
               ef_construction=a.ef_construction, ef_search=sorted(a.ef_search),
               target_recall=a.target_recall, ams=a.ams,
               settings=dict(kv.split("=", 1) for kv in a.server_set),
               shapes=[s.name for s in pool])
    return cfg, pool, a.out


def main(argv=None) -> int:
    import datetime as dt
    import json
    import time
    from pathlib import Path
    from ..cluster import ROOT
    from .log import Log, machine_info
    cfg, pool, out = parse(argv)
    log = Log()
    started = dt.datetime.now(dt.timezone.utc)
    out = Path(out) if out else ROOT / "bench-results" / started.strftime("%Y%m%dT%H%M%SZ")
    log.step(f"robustness matrix: {len(pool)} shapes, {cfg['rows']} rows, "
             f"{cfg['queries']} queries each, output {out}")
    mx = Matrix(cfg, log)
    mx.start()
    res = {"config": cfg, "started": started.isoformat(timespec="seconds"),
           "machine": machine_info(), "versions": mx.versions,
           "server_settings": {k: str(v) for k, v in mx.settings.items()}, "shapes": []}
    out.mkdir(parents=True, exist_ok=True)
    try:
        for shape in pool:
            log.step(f"=== {shape.name} ({shape.metric}, {shape.typ}({shape.dim}))")
            t = time.perf_counter()
            r = mx.shape(shape)
            r["elapsed_s"] = time.perf_counter() - t
            res["shapes"].append(r)
            # written after every shape: an interrupted run keeps what it measured
            (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
            (out / "report.md").write_text(report(res))
    finally:
        mx.stop()
    print()
    print(table(res["shapes"], cfg["target_recall"]))
    print()
    print(f"report:  {out / 'report.md'}")
    print(f"json:    {out / 'results.json'}")
    log.step("done")
    return 0
