"""Writing numpy arrays as a VectorDBBench custom data set.

VectorDBBench reads a custom data set from one directory of parquet files
(its CustomDatasetConfig defaults):

    train.parquet           id int64 (0 .. n-1, the row's position), emb list<float32>
    test.parquet            id int64, emb list<float32>               (the queries)
    neighbors.parquet       id int64 (query id), neighbors_id list<int64>, nearest first
    scalar_labels.parquet   id int64, labels string                    (filtered cases)
    neighbors_labels_label_{p}p.parquet   the exact neighbours among rows labelled label_{p}p

Row ids must be positions: the loader looks a row's label up by its id.
Ground truth is exact k-NN in float32 (numpy), k = 100 by default, the depth
VectorDBBench searches at.  custom_case() returns the dict its
PerformanceCustomDataset case is built from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# The label filters written: label_1p keeps 1% of the rows (VectorDBBench's
# "filter rate 99%"), label_99p the other 99% ("filter rate 1%").
LABEL_PERCENTAGES = (0.01, 0.99)


def exact_knn(rows: np.ndarray, queries: np.ndarray, k: int, metric: str, batch: int = 256) -> np.ndarray:
    """Row positions of each query's k nearest rows, nearest first.

    metric is "l2", "ip" (largest inner product first, as pgvector's <#>)
    or "cosine".  Where there are fewer than k rows, all of them."""
    rows = np.asarray(rows, dtype=np.float32)
    queries = np.asarray(queries, dtype=np.float32)
    if metric == "cosine":
        rows = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-30)
        queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-30)
    k = min(k, len(rows))
    sq = (rows * rows).sum(axis=1) if metric == "l2" else None
    out = np.empty((len(queries), k), dtype=np.int64)
    for s in range(0, len(queries), batch):
        dots = queries[s : s + batch] @ rows.T
        d = sq[None, :] - 2.0 * dots if metric == "l2" else -dots
        part = np.argpartition(d, k - 1, axis=1)[:, :k] if k < len(rows) else np.tile(np.arange(len(rows)), (len(d), 1))
        order = np.argsort(np.take_along_axis(d, part, axis=1), axis=1, kind="stable")
        out[s : s + batch] = np.take_along_axis(part, order, axis=1)
    return out


def label_name(p: float) -> str:
    """VectorDBBench's label for a share p of the rows (LabelFilter.label_value)."""
    pct = p * 100
    return f"label_{int(pct)}p" if pct >= 1 else f"label_{pct:.1f}p"


def assign_labels(n: int, seed: int = 0) -> np.ndarray:
    """One label per row: a seeded 1% of rows label_1p, the rest label_99p."""
    rng = np.random.default_rng(seed)
    labels = np.full(n, label_name(0.99), dtype=object)
    labels[rng.choice(n, size=max(1, round(n * 0.01)), replace=False)] = label_name(0.01)
    return labels


def _vectors(x: np.ndarray) -> pa.Array:
    x = np.ascontiguousarray(x, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1]).cast(pa.list_(pa.float32()))


def _neighbors(truth: np.ndarray) -> pa.Array:
    truth = np.ascontiguousarray(truth, dtype=np.int64)
    return pa.FixedSizeListArray.from_arrays(pa.array(truth.reshape(-1)), truth.shape[1]).cast(pa.list_(pa.int64()))


def write(
    out_dir: Path,
    rows: np.ndarray,
    queries: np.ndarray,
    metric: str,
    k: int = 100,
    truth: np.ndarray | None = None,
    labels: bool = True,
    seed: int = 0,
) -> dict:
    """Write the data set into out_dir; return what custom_case() needs.

    truth, where given, is the unfiltered ground truth (row positions,
    at least k wide); otherwise it is computed.  With labels, the label
    file and the filtered ground truth of each share in LABEL_PERCENTAGES
    that has at least k rows are written too."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n, dim = rows.shape
    ids = pa.array(np.arange(n, dtype=np.int64))
    qids = pa.array(np.arange(len(queries), dtype=np.int64))
    pq.write_table(pa.table({"id": ids, "emb": _vectors(rows)}), out_dir / "train.parquet")
    pq.write_table(pa.table({"id": qids, "emb": _vectors(queries)}), out_dir / "test.parquet")
    if truth is None or truth.shape[1] < k:
        truth = exact_knn(rows, queries, k, metric)
    pq.write_table(pa.table({"id": qids, "neighbors_id": _neighbors(truth[:, :k])}), out_dir / "neighbors.parquet")

    label_percentages = []
    if labels:
        lab = assign_labels(n, seed)
        pq.write_table(pa.table({"id": ids, "labels": pa.array(lab.tolist(), pa.string())}),
                       out_dir / "scalar_labels.parquet")
        for p in LABEL_PERCENTAGES:
            keep = np.flatnonzero(lab == label_name(p))
            if len(keep) < k:
                continue  # VectorDBBench needs k true neighbours per query
            sub = keep[exact_knn(rows[keep], queries, k, metric)]
            pq.write_table(pa.table({"id": qids, "neighbors_id": _neighbors(sub)}),
                           out_dir / f"neighbors_labels_{label_name(p)}.parquet")
            label_percentages.append(p)
    return {"dir": str(out_dir.resolve()), "size": n, "dim": dim, "metric": metric,
            "label_percentages": label_percentages}


def custom_case(info: dict, name: str, label_percentage: float | None = None) -> dict:
    """The custom_case dict of VectorDBBench's PerformanceCustomDataset for a
    data set written by write(), unfiltered or with one label filter."""
    case = {
        "name": name if label_percentage is None else f"{name}, filter {label_name(label_percentage)}",
        "description": f"{info['size']} x {info['dim']} {info['metric']}, written by streamhnsw_vdb.dataset",
        "load_timeout": 36000,
        "optimize_timeout": 36000,
        "dataset_config": {
            "name": name,
            "dir": info["dir"],
            "size": info["size"],
            "dim": info["dim"],
            "metric_type": {"l2": "L2", "ip": "IP", "cosine": "COSINE"}[info["metric"]],
            "file_count": 1,
            "use_shuffled": False,
            "with_gt": True,
        },
    }
    if label_percentage is not None:
        case["use_filter"] = True
        case["label_percentage"] = label_percentage
    return case
