"""Seeded synthetic data, exact ground truth and fast loading into PostgreSQL.

The synthetic data is a Gaussian mixture with many clusters of unequal
sizes (uniform random data makes recall look worse and caches look better
than real embeddings do). Queries are drawn from the same mixture but are
not rows of the table.
"""

from __future__ import annotations

import struct

import numpy as np


def clustered(n: int, dim: int, seed: int = 0, n_clusters: int | None = None,
              normalize: bool = False, n_queries: int = 0):
    """Return (rows, queries): float32 arrays of shape (n, dim) and (n_queries, dim).

    Cluster sizes follow a Zipf-like law; each cluster has its own spread.
    """
    rng = np.random.default_rng(seed)
    if n_clusters is None:
        n_clusters = max(8, int(np.sqrt(n + n_queries) / 2))
    weights = 1.0 / np.arange(1, n_clusters + 1) ** 0.8
    weights /= weights.sum()
    centers = rng.normal(0.0, 1.0, size=(n_clusters, dim)).astype(np.float32)
    spread = rng.uniform(0.15, 0.45, size=n_clusters).astype(np.float32)
    total = n + n_queries
    labels = rng.choice(n_clusters, size=total, p=weights)
    x = centers[labels] + rng.normal(0.0, 1.0, size=(total, dim)).astype(np.float32) \
        * spread[labels, None]
    x = x.astype(np.float32)
    if normalize:
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x[:n], x[n:]


def sparse_clustered(n: int, dim: int, nnz: int, seed: int = 0, n_topics: int = 16,
                     n_queries: int = 0, query_nnz: int | None = None):
    """Return (rows, queries): lists of (indices, values) pairs (int32 indices
    ascending, 0-based; float32 values, all positive), like learned sparse
    embeddings (SPLADE): each vector is about seven tenths terms of its
    topic (a few hundred terms, Zipf-weighted; topics' sizes Zipf-like too)
    and the rest terms from the whole vocabulary, Zipf-weighted as words
    are. Queries have query_nnz terms (default nnz / 3) from the same mix.
    """
    rng = np.random.default_rng(seed)
    vocab_w = 1.0 / np.arange(1, dim + 1) ** 1.05
    vocab_w /= vocab_w.sum()
    vocab = rng.permutation(dim).astype(np.int32)
    topic_w = 1.0 / np.arange(1, n_topics + 1) ** 0.8
    topic_w /= topic_w.sum()
    topic_size = min(dim, max(4 * nnz, 300))
    topics = [rng.choice(dim, size=topic_size, replace=False).astype(np.int32)
              for _ in range(n_topics)]
    term_w = 1.0 / np.arange(1, topic_size + 1) ** 0.7
    term_w /= term_w.sum()

    def one(k):
        t = rng.choice(n_topics, p=topic_w)
        own = rng.choice(topics[t], size=min(topic_size, max(1, (7 * k) // 10)),
                         replace=False, p=term_w)
        other = vocab[rng.choice(dim, size=k - len(own), replace=False, p=vocab_w)]
        idx = np.unique(np.concatenate([own, other]))
        val = rng.lognormal(-0.5, 0.6, size=len(idx)).astype(np.float32)
        return idx, val

    rows = [one(nnz) for _ in range(n)]
    queries = [one(query_nnz or max(1, nnz // 3)) for _ in range(n_queries)]
    return rows, queries


def sparse_literal(idx, val, dim: int) -> str:
    """pgvector's sparsevec text form (1-based indices) of (indices, values)."""
    return "{" + ",".join(f"{i + 1}:{v:.9g}" for i, v in zip(idx, val)) + f"}}/{dim}"


def load_sparse(conn, table: str, rows: list, dim: int, start_id: int = 0) -> None:
    """Create `table (id bigint primary key, embedding sparsevec(dim))` and COPY
    rows ((indices, values) pairs) in; row i gets id start_id + i."""
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, embedding sparsevec({dim}))")
    with conn.cursor() as cur:
        with cur.copy(f"COPY {table} (id, embedding) FROM STDIN") as cp:
            for i, (idx, val) in enumerate(rows):
                cp.write(f"{start_id + i}\t{sparse_literal(idx, val, dim)}\n")
    conn.execute(f"ANALYZE {table}")


def sparse_ground_truth(rows: list, queries: list, k: int, metric: str = "ip") -> np.ndarray:
    """Exact k nearest neighbours (row indices, nearest first) of sparse
    (indices, values) queries among sparse rows, float32 numpy, through an
    inverted index (a query's terms select the rows it shares one with).

    metric: 'l2', 'ip' (negative inner product, as pgvector's <#>) or 'cosine'."""
    n = len(rows)
    idx = np.concatenate([i for i, _ in rows])
    val = np.concatenate([v for _, v in rows]).astype(np.float32)
    rid = np.repeat(np.arange(n), [len(i) for i, _ in rows])
    order = np.argsort(idx, kind="stable")
    idx, val, rid = idx[order], val[order], rid[order]
    sq = np.array([float(np.dot(v, v)) for _, v in rows], dtype=np.float32)
    out = np.empty((len(queries), k), dtype=np.int64)
    for j, (qi, qv) in enumerate(queries):
        dots = np.zeros(n, dtype=np.float32)
        lo, hi = np.searchsorted(idx, qi, "left"), np.searchsorted(idx, qi, "right")
        for a, b, w in zip(lo, hi, qv):
            dots[rid[a:b]] += val[a:b] * np.float32(w)    # a row has a term once
        if metric == "l2":
            d = sq - 2.0 * dots
        elif metric == "cosine":
            d = -dots / np.sqrt(np.maximum(sq, 1e-30))
        else:
            d = -dots
        part = np.argpartition(d, k - 1)[:k]
        out[j] = part[np.argsort(d[part], kind="stable")]
    return out


def ground_truth(rows: np.ndarray, queries: np.ndarray, k: int, metric: str = "l2",
                 batch: int = 256) -> np.ndarray:
    """Exact k nearest neighbours (row indices, nearest first), float32 numpy.

    metric: 'l2', 'ip' (negative inner product, as pgvector's <#>) or 'cosine'.
    """
    rows = np.asarray(rows, dtype=np.float32)
    queries = np.asarray(queries, dtype=np.float32)
    if metric == "cosine":
        rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    row_sq = (rows * rows).sum(axis=1)
    out = np.empty((len(queries), k), dtype=np.int64)
    for s in range(0, len(queries), batch):
        q = queries[s:s + batch]
        dots = q @ rows.T
        if metric == "l2":
            d = row_sq[None, :] - 2.0 * dots
        else:
            d = -dots
        part = np.argpartition(d, kth=min(k, d.shape[1] - 1), axis=1)[:, :k]
        pd = np.take_along_axis(d, part, axis=1)
        order = np.argsort(pd, axis=1, kind="stable")
        out[s:s + batch] = np.take_along_axis(part, order, axis=1)
    return out


def recall(found: list, truth: np.ndarray, k: int) -> float:
    """Mean recall@k: |found[:k] & truth[:k]| / k over all queries."""
    hits = 0
    for f, t in zip(found, truth):
        hits += len(set(list(f)[:k]) & set(t[:k].tolist()))
    return hits / (k * len(truth))


def vector_literal(v) -> str:
    return "[" + ",".join(repr(float(x)) for x in v) + "]"


def _binary_copy_payload(ids: np.ndarray, x: np.ndarray, typ: str) -> bytes:
    """PostgreSQL binary COPY data for rows (id int8, embedding vector|halfvec|bit):
    for bit, a row's non-zero elements are its set bits."""
    n, dim = x.shape
    if typ == "bit":
        packed = np.packbits(x != 0, axis=1)     # first element in the high bit, as bit(n)
        rec = np.dtype([("nf", ">i2"), ("idlen", ">i4"), ("id", ">i8"), ("vlen", ">i4"),
                        ("bits", ">i4"), ("v", np.uint8, (packed.shape[1],))])
        a = np.empty(n, dtype=rec)
        a["nf"], a["idlen"], a["id"] = 2, 8, ids
        a["vlen"], a["bits"], a["v"] = 4 + packed.shape[1], dim, packed
        return a.tobytes()
    if typ == "vector":
        elem = np.dtype(">f4")
    elif typ == "halfvec":
        elem = np.dtype(">f2")
    else:
        raise ValueError(f"unsupported type {typ}")
    vlen = 4 + dim * elem.itemsize
    rec = np.dtype([("nf", ">i2"), ("idlen", ">i4"), ("id", ">i8"), ("vlen", ">i4"),
                    ("dim", ">i2"), ("unused", ">i2"), ("v", elem, (dim,))])
    a = np.empty(n, dtype=rec)
    a["nf"] = 2
    a["idlen"] = 8
    a["id"] = ids
    a["vlen"] = vlen
    a["dim"] = dim
    a["unused"] = 0
    a["v"] = x
    return a.tobytes()


def load(conn, table: str, x: np.ndarray, typ: str = "vector", start_id: int = 0,
         create: bool = True, batch: int = 20000, progress=None) -> None:
    """Create `table (id bigint primary key, embedding typ(dim))` and COPY rows in.

    Row i of x gets id start_id + i. Uses binary COPY.
    """
    n, dim = x.shape
    if typ == "sparsevec":
        # dense rows, loaded as sparse ones (text COPY)
        rows = [(np.flatnonzero(r), r[np.flatnonzero(r)]) for r in x]
        if create:
            load_sparse(conn, table, rows, dim, start_id)
            return
        with conn.cursor() as cur:
            with cur.copy(f"COPY {table} (id, embedding) FROM STDIN") as cp:
                for i, (idx, val) in enumerate(rows):
                    cp.write(f"{start_id + i}\t{sparse_literal(idx, val, dim)}\n")
        conn.execute(f"ANALYZE {table}")
        return
    if create:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, embedding {typ}({dim}))")
    header = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
    with conn.cursor() as cur:
        with cur.copy(f"COPY {table} (id, embedding) FROM STDIN WITH (FORMAT binary)") as cp:
            cp.write(header)
            for s in range(0, n, batch):
                ids = np.arange(start_id + s, start_id + min(n, s + batch), dtype=np.int64)
                cp.write(_binary_copy_payload(ids, x[s:s + batch], typ))
                if progress:
                    progress(min(n, s + batch), n)
            cp.write(struct.pack(">h", -1))
    conn.execute(f"ANALYZE {table}")
