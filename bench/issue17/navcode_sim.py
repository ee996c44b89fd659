"""How small can a navigation code be? An offline look with FAISS, for
the next format change (issue 17: fewer pages per expansion; issue 16:
fewer bytes a query).

One HNSW graph per data set, built on the float vectors (FAISS
IndexHNSWFlat, M 16, ef_construction 64, inner product on normalized
vectors = cosine), is searched with the distances of a scalar quantizer
of 8, 6 or 4 bits a dimension (FAISS ScalarQuantizer, per-dimension
min/max ranges, as ours), the same graph for every code; the ef
candidates it returns are re-ranked on the exact vectors, as streamhnsw
re-ranks, and recall@10 is counted against the exact top 10. Only the
traversal's code changes, so the figures say how much accuracy a smaller
code costs the search, not how fast it is.

    SHNSW_DATA_DIR=.data PYTHONPATH=python .venv/bin/python bench/issue17/navcode_sim.py \
        --sets sentences,synthetic768,glove --out bench/issue17/results/navcode_sim.json
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from shnsw.bench import datasets

EFS = {"sentences": [20, 30, 40, 50, 60, 80],
       "synthetic768": [100, 150, 200, 250, 300],
       "glove": [60, 80, 100, 120, 150, 200]}
# product codes need a wider search for the same recall
EFS_PQ = {"sentences": [100, 120, 160, 200], "synthetic768": [400, 500, 600],
          "glove": [250, 300, 400]}


def load(name: str):
    quiet = lambda *a, **k: None  # noqa: E731
    if name == "sentences":
        return datasets.sentences(n_rows=100_000, n_queries=2000, n_inserts=1000, log=quiet)
    if name == "synthetic768":
        return datasets.synthetic(100000, 768, "cosine", log=quiet)
    if name == "glove":
        return datasets.glove(log=quiet)
    raise SystemExit(f"unknown set {name}")


def unit(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype="float32")
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def pq_sizes(d: int, pq: str) -> list[int]:
    """Sub-quantizer counts to try: --pq gives dimensions per sub-quantizer
    (8,4: d/8 and d/4 bytes a code); only those that divide d."""
    return [d // k for k in (int(v) for v in pq.split(",") if v) if d % k == 0]


def run(name: str, nq: int, pq: str = "", only_pq: bool = False) -> list[dict]:
    import faiss

    ds = load(name)
    x, q = unit(ds.rows), unit(ds.queries[:nq])
    truth = ds.truth[:nq, :10]
    d = x.shape[1]
    graph = faiss.IndexHNSWFlat(d, 16, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = 64
    graph.add(x)
    out = []
    codes = [("sq", bits, qt) for bits, qt in ((8, faiss.ScalarQuantizer.QT_8bit),
                                               (6, faiss.ScalarQuantizer.QT_6bit),
                                               (4, faiss.ScalarQuantizer.QT_4bit))
             if not only_pq]
    codes += [("pq", sub, None) for sub in pq_sizes(d, pq)]
    for kind, bits, qt in codes:
        if kind == "sq":
            idx = faiss.IndexHNSWSQ(d, qt, 16, faiss.METRIC_INNER_PRODUCT)
            code_bytes = d * bits // 8
        else:
            # product quantizer: bits = sub-quantizers of 8 bits (one byte each)
            idx = faiss.IndexHNSWPQ(d, bits, 16, 8, faiss.METRIC_INNER_PRODUCT)
            code_bytes = bits
        idx.train(x)
        idx.hnsw = graph.hnsw          # the float graph, searched on codes
        idx.storage.add(x)
        idx.ntotal = x.shape[0]
        for ef in EFS[name] + (EFS_PQ[name] if kind == "pq" else []):
            idx.hnsw.efSearch = ef
            faiss.cvar.hnsw_stats.reset()
            _, ids = idx.search(q, ef)
            ndis = faiss.cvar.hnsw_stats.ndis / nq
            nhops = faiss.cvar.hnsw_stats.nhops / nq
            hits = 0
            for i in range(nq):
                c = ids[i][ids[i] >= 0]
                top = c[np.argsort(-(x[c] @ q[i]))[:10]]
                hits += len(set(top.tolist()) & set(truth[i].tolist()))
            row = {"set": name, "dims": d, "code": kind,
                   "bits": bits if kind == "sq" else 8 * bits / d, "code_bytes": code_bytes,
                   "ef_search": ef, "recall@10": round(hits / (10 * nq), 4),
                   "distances": round(ndis), "expansions": round(nhops, 1)}
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="sentences,synthetic768,glove")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--pq", default="", help="product quantizers too: dimensions per "
                    "sub-quantizer, e.g. 8,4 (one byte each)")
    ap.add_argument("--only-pq", action="store_true", help="skip the scalar quantizers")
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    for name in a.sets.split(","):
        rows += run(name, a.queries, a.pq, a.only_pq)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"{len(rows)} points", file=sys.stderr)


if __name__ == "__main__":
    main()
