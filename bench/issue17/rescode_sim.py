"""Residual codes: does coding each vector against its nearest k-means
centroid, with per-cluster ranges, rescue 4-bit navigation codes where a
global 4-bit code fails (the clustered synthetic set), and how much looser
are their error bounds than SQ8's? An offline look with FAISS and numpy,
for the next format decision (issues 16 and 17).

The graph (FAISS IndexHNSWFlat on the float vectors, M 16,
ef_construction 64, inner product on normalized vectors = cosine) is
searched over decoded codes (the same graph for every code), the ef
candidates are re-ranked on the exact vectors, recall@10 against the exact
top 10, as navcode_sim.py. Codes:

- sq8 / sq4: global per-dimension min/max, 255 / 15 steps (ours is sq8);
- rsq4-K: the residual to the nearest of K centroids, per-cluster
  per-dimension min/max, 15 steps (plus the centroid number).

"bound" is the mean over queries and the nodes a search met of the
rigorous bound on |q.x - q.x_hat| that per-dimension steps give
(sum_i |q_i| step_i / 2), relative to sq8's: what strict order's proof
would have to cover (a looser bound keeps rows back longer).

    SHNSW_DATA_DIR=.data PYTHONPATH=python .venv/bin/python bench/issue17/rescode_sim.py \\
        --sets sentences,synthetic768,glove --out bench/issue17/results/rescode_sim.json
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from navcode_sim import EFS, load, unit


def sq_code(x, lo, hi, levels):
    step = np.where(hi > lo, (hi - lo) / levels, 1.0).astype("float32")
    q = np.clip(np.rint((x - lo) / step), 0, levels)
    return (lo + q * step).astype("float32"), step


def codes(name, x, kinds):
    import faiss

    out = {}
    lo, hi = x.min(axis=0), x.max(axis=0)
    for kind in kinds:
        if kind in ("sq8", "sq4"):
            levels = 255 if kind == "sq8" else 15
            xh, step = sq_code(x, lo, hi, levels)
            out[kind] = (xh, np.broadcast_to(step, x.shape))
        else:
            k = int(kind.split("-")[1])
            km = faiss.Kmeans(x.shape[1], k, niter=20, seed=42, verbose=False)
            km.train(x)
            _, a = km.index.search(x, 1)
            a = a[:, 0]
            xh = np.empty_like(x)
            steps = np.empty((k, x.shape[1]), dtype="float32")
            for c in range(k):
                sel = a == c
                if not sel.any():
                    steps[c] = 1.0
                    continue
                r = x[sel] - km.centroids[c]
                rh, st = sq_code(r, r.min(axis=0), r.max(axis=0), 15)
                xh[sel] = km.centroids[c] + rh
                steps[c] = st
            out[kind] = (xh, steps[a])
        print(f"{name}: {kind} coded", file=sys.stderr, flush=True)
    return out


def run(name, nq, kinds):
    import faiss

    ds = load(name)
    x, q = unit(ds.rows), unit(ds.queries[:nq])
    truth = ds.truth[:nq, :10]
    d = x.shape[1]
    graph = faiss.IndexHNSWFlat(d, 16, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = 64
    graph.add(x)
    rows = []
    cs = codes(name, x, kinds)
    sq8_bound = None
    for kind in kinds:
        xh, steps = cs[kind]
        idx = faiss.IndexHNSWFlat(d, 16, faiss.METRIC_INNER_PRODUCT)
        idx.hnsw = graph.hnsw
        idx.storage.add(np.ascontiguousarray(xh))
        idx.ntotal = x.shape[0]
        for ef in EFS[name]:
            idx.hnsw.efSearch = ef
            _, ids = idx.search(q, ef)
            hits, bsum, bn = 0, 0.0, 0
            for i in range(nq):
                c = ids[i][ids[i] >= 0]
                top = c[np.argsort(-(x[c] @ q[i]))[:10]]
                hits += len(set(top.tolist()) & set(truth[i].tolist()))
                b = (np.abs(q[i]) * steps[c]).sum(axis=1) / 2
                bsum += float(b.sum())
                bn += len(c)
            bound = bsum / bn
            if kind == "sq8" and ef == EFS[name][0]:
                sq8_bound = bound
            row = {"set": name, "dims": d, "code": kind, "ef_search": ef,
                   "recall@10": round(hits / (10 * nq), 4), "bound": round(bound, 5),
                   "bound_vs_sq8": round(bound / sq8_bound, 2) if sq8_bound else None}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="sentences,synthetic768,glove")
    ap.add_argument("--codes", default="sq8,sq4,rsq4-256,rsq4-1024")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    for name in a.sets.split(","):
        rows += run(name, a.queries, a.codes.split(","))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
