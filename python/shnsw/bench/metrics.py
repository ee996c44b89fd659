"""Figures from raw measurements: recall@k, latency percentiles, and
comparisons at equal recall by linear interpolation along a curve."""

from __future__ import annotations

import math

import numpy as np


def recall_at(found, truth: np.ndarray, k: int) -> float:
    """Mean recall@k over queries: |found[:k] ∩ truth[:k]| / k.

    `found` is a sequence of id lists (row indices), one per query; a query
    that returned fewer than k ids simply scores lower.  Duplicate ids in a
    result count once.
    """
    truth = np.asarray(truth)
    if len(found) != len(truth):
        raise ValueError("found and truth must have one entry per query")
    if truth.shape[1] < k:
        raise ValueError(f"ground truth has only {truth.shape[1]} neighbours, need {k}")
    if len(truth) == 0:
        return float("nan")
    hits = 0
    for f, t in zip(found, truth):
        hits += len(set(int(i) for i in list(f)[:k]) & set(t[:k].tolist()))
    return hits / (k * len(truth))


def percentile(values, p: float) -> float:
    """The p-th percentile (0..100), linear interpolation; nan when empty."""
    if len(values) == 0:
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=float), p))


def latency_summary(seconds) -> dict:
    """p50/p95/p99/mean/stdev in milliseconds and queries/s of a serial run."""
    a = np.asarray(seconds, dtype=float)
    if a.size == 0:
        return {"n": 0}
    return {"n": int(a.size),
            "mean_ms": float(a.mean() * 1e3),
            "stdev_ms": float(a.std(ddof=1) * 1e3) if a.size > 1 else 0.0,
            "p50_ms": percentile(a, 50) * 1e3,
            "p95_ms": percentile(a, 95) * 1e3,
            "p99_ms": percentile(a, 99) * 1e3,
            "qps": float(a.size / a.sum()) if a.sum() > 0 else float("inf")}


def _frontier(points, higher_is_better: bool):
    """The best value reachable at recall >= r, as points sorted by recall.

    points: iterable of (recall, value).  The result is monotone: going to a
    higher recall never gets a better value (it is the Pareto frontier), so a
    noisy non-monotone sweep still interpolates sensibly.
    """
    pts = sorted((float(r), float(v)) for r, v in points
                 if r is not None and v is not None
                 and not math.isnan(r) and not math.isnan(v))
    if not pts:
        return []
    out = []
    best = None
    for r, v in reversed(pts):
        if best is None or (v > best if higher_is_better else v < best):
            best = v
        out.append((r, best))
    out.reverse()
    # Merge equal recalls (keep the best value, which the sweep made the first).
    merged = []
    for r, v in out:
        if merged and merged[-1][0] == r:
            continue
        merged.append((r, v))
    return merged


def at_recall(points, target: float, higher_is_better: bool = True):
    """Value (throughput or latency) at recall `target`, interpolated linearly.

    points: (recall, value) pairs from a parameter sweep.  The curve is first
    reduced to its frontier (best value at recall >= r).  Returns None when
    the sweep never reached the target recall.  A target below the lowest
    recall measured takes the value of the lowest point (a conservative
    reading: a cheaper setting would only be faster).
    """
    f = _frontier(points, higher_is_better)
    if not f or target > f[-1][0] + 1e-12:
        return None
    if target <= f[0][0]:
        return f[0][1]
    for (r0, v0), (r1, v1) in zip(f, f[1:]):
        if r0 <= target <= r1:
            if r1 == r0:
                return v1
            return v0 + (v1 - v0) * (target - r0) / (r1 - r0)
    return f[-1][1]  # pragma: no cover - unreachable with a sorted frontier


def ratio(a, b):
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    try:
        if math.isnan(a) or math.isnan(b):
            return None
    except TypeError:
        return None
    return a / b


def point(engine, ef, lat, found, truth, k, extra=None) -> dict:
    """One measured point of a sweep: latency summary, recall@1/@10 of what
    was found (when given) and the mode's extra figures."""
    p = {"engine": engine, "ef_search": ef, **latency_summary(lat)}
    if found is not None:
        p["recall@1"] = recall_at(found, truth, 1)
        p["recall@10"] = recall_at(found, truth, min(10, k))
    if extra:
        p.update(extra)
    return p
