"""The physical anchor: FAISS IndexHNSWFlat on the same vectors, in process.

Same M and efConstruction as the database indexes; efSearch swept. Searches
run one query at a time on one thread (like one database client), so the
queries/s is what the algorithm costs with no database around it.
"""

from __future__ import annotations

import time

import numpy as np

from . import metrics


def run_faiss(rows: np.ndarray, queries: np.ndarray, truth: np.ndarray, metric: str,
              m: int, efc: int, efs: list, k: int, build_threads: int = 2,
              log=print) -> dict:
    import faiss

    x = np.ascontiguousarray(rows, dtype=np.float32)
    q = np.ascontiguousarray(queries, dtype=np.float32)
    if metric == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
    fm = faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT
    index = faiss.IndexHNSWFlat(x.shape[1], m, fm)
    index.hnsw.efConstruction = efc
    faiss.omp_set_num_threads(build_threads)
    log(f"    faiss: building IndexHNSWFlat (M={m}, efConstruction={efc}, "
        f"{build_threads} threads) ...", flush=True)
    t = time.perf_counter()
    step = max(10000, len(x) // 10)
    for s in range(0, len(x), step):
        index.add(x[s:s + step])
        log(f"    faiss: added {min(len(x), s + step)}/{len(x)} "
            f"({time.perf_counter() - t:.1f} s)", flush=True)
    build_s = time.perf_counter() - t
    faiss.omp_set_num_threads(1)
    points = []
    kk = max(k, 100) if truth.shape[1] >= 100 else k
    for ef in efs:
        index.hnsw.efSearch = max(ef, k)
        # One query at a time, as a single client would issue them.
        lat = []
        ids = np.empty((len(q), k), dtype=np.int64)
        for i in range(len(q)):
            t = time.perf_counter()
            _, I = index.search(q[i:i + 1], k)
            lat.append(time.perf_counter() - t)
            ids[i] = I[0]
        s = metrics.latency_summary(lat)
        point = {"ef_search": ef, "recall@1": metrics.recall_at(ids, truth, 1),
                 "recall@10": metrics.recall_at(ids, truth, min(10, k)), **s}
        if kk == 100:
            index.hnsw.efSearch = max(ef, 100)
            _, I100 = index.search(q, 100)
            point["recall@100"] = metrics.recall_at(I100, truth, 100)
            index.hnsw.efSearch = max(ef, k)
        points.append(point)
    faiss.omp_set_num_threads(build_threads)
    return {"engine": "FAISS IndexHNSWFlat", "version": faiss.__version__,
            "build_s": build_s, "m": m, "ef_construction": efc,
            "threads_build": build_threads, "threads_search": 1, "points": points}
