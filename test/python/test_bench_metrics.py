"""Benchmark suite pieces that can be wrong silently: ground truth, recall,
interpolation at equal recall, data files and hold-out."""

import numpy as np
import pytest

from shnsw import data as shdata
from shnsw.bench import datasets, metrics


def brute_force(rows, queries, k, metric):
    out = []
    for q in queries:
        if metric == "l2":
            d = [float(np.sum((r.astype(np.float64) - q) ** 2)) for r in rows]
        elif metric == "ip":
            d = [-float(np.dot(r.astype(np.float64), q)) for r in rows]
        else:
            d = [1 - float(np.dot(r, q) / (np.linalg.norm(r) * np.linalg.norm(q)))
                 for r in rows.astype(np.float64)]
        out.append(np.argsort(d, kind="stable")[:k])
    return np.array(out)


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_ground_truth_matches_brute_force(metric):
    rows, queries = shdata.clustered(600, 12, seed=3, n_queries=25,
                                     normalize=metric == "cosine")
    truth = datasets.exact_knn(rows, queries, 10, metric, chunk=7)
    bf = brute_force(rows, queries, 10, metric)
    # Equal as sets per query (ties may order differently), same first hit.
    for a, b in zip(truth, bf):
        assert set(a.tolist()) == set(b.tolist())
    assert metrics.recall_at(truth, bf, 10) == 1.0


def test_recall_at():
    truth = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert metrics.recall_at([[1, 2, 3, 4], [5, 6, 7, 8]], truth, 4) == 1.0
    assert metrics.recall_at([[4, 3, 9, 9], [8, 0, 0, 0]], truth, 4) == pytest.approx(3 / 8)
    assert metrics.recall_at([[1], []], truth, 1) == 0.5
    assert metrics.recall_at([[2, 1], [5, 5]], truth, 1) == 0.5   # only the first counts
    assert metrics.recall_at([[1, 1, 1, 1], [5]], truth, 4) == pytest.approx(2 / 8)
    with pytest.raises(ValueError):
        metrics.recall_at([[1]], truth, 4)


def test_interpolation_at_equal_recall():
    pts = [(0.80, 1000.0), (0.90, 800.0), (0.96, 500.0), (0.99, 200.0)]
    assert metrics.at_recall(pts, 0.90) == pytest.approx(800.0)
    assert metrics.at_recall(pts, 0.95) == pytest.approx(550.0)
    assert metrics.at_recall(pts, 0.995) is None           # never reached
    assert metrics.at_recall(pts, 0.5) == pytest.approx(1000.0)
    # Latency (lower is better), order of points does not matter.
    lat = [(0.99, 4.0), (0.90, 1.0), (0.96, 2.0)]
    assert metrics.at_recall(lat, 0.93, higher_is_better=False) == pytest.approx(1.5)
    # A noisy, non-monotone sweep uses its frontier: a point that is both
    # slower and less accurate than another is ignored.
    noisy = [(0.90, 800.0), (0.92, 300.0), (0.96, 500.0)]
    assert metrics.at_recall(noisy, 0.92) == pytest.approx(500.0)
    assert metrics.ratio(6.0, 2.0) == 3.0 and metrics.ratio(1.0, None) is None


def test_latency_summary():
    s = metrics.latency_summary([0.001] * 99 + [0.101])
    assert s["p50_ms"] == pytest.approx(1.0)
    assert s["p99_ms"] > 1.0
    assert s["qps"] == pytest.approx(100 / 0.2)


def test_fvecs_npy_and_hold_out(tmp_path):
    x = np.random.default_rng(1).normal(size=(50, 7)).astype(np.float32)
    datasets.write_fvecs(tmp_path / "a.fvecs", x)
    np.save(tmp_path / "a.npy", x)
    assert np.array_equal(datasets.read_vectors(tmp_path / "a.fvecs"), x)
    assert np.array_equal(datasets.read_vectors(tmp_path / "a.npy"), x)
    rows, q, ins = datasets.hold_out(x, 5, 3, seed=0)
    assert len(rows) == 42 and len(q) == 5 and len(ins) == 3
    seen = {r.tobytes() for r in rows}
    assert not any(v.tobytes() in seen for v in np.concatenate([q, ins]))


def test_dataset_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "DATA_DIR", tmp_path)
    a = datasets.synthetic(500, 8, "l2", n_queries=20, n_inserts=5, k_truth=10, log=lambda *a, **k: None)
    b = datasets.synthetic(500, 8, "l2", n_queries=20, n_inserts=5, k_truth=10, log=lambda *a, **k: None)
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.truth, b.truth)
    assert a.truth.shape == (20, 10)
    assert any(tmp_path.iterdir())


def test_glove_ships_in_the_wheel():
    p = datasets.glove_path()
    x = np.load(p, mmap_mode="r")
    assert x.shape == (400000, 50) and x.dtype == np.float32


def test_writes_plan():
    from shnsw.bench import writes
    cfg = {"inserts": 30, "clients": 2, "delete_frac": 0.1, "seed": 5}
    p = writes.plan(cfg, 1000)
    live = p["live"]
    assert len(p["deleted"]) == 106 and len(set(p["deleted"].tolist())) == 106
    assert set(live["before delete"].tolist()) == set(range(1060))
    assert set(p["insert_1"].tolist()) | set(p["insert_2"].tolist()) == set(range(1000, 1060))
    assert not set(live["after VACUUM"].tolist()) & set(p["deleted"].tolist())
    assert len(live["after VACUUM"]) == 1060 - 106
    assert p["reinsert"].tolist() == list(range(1060, 1166))
    assert len(live["after re-insert"]) == 1060
    assert np.array_equal(writes.plan(cfg, 1000)["deleted"], p["deleted"])
