"""The types preset (python -m shnsw.bench --preset types) on tiny sizes:
each shape's run on a throwaway server of its own, both engines, and the
report drawn from it."""

import argparse

import numpy as np
import pytest

from shnsw import data
from shnsw.bench import datasets, log, vector_types


def _args(**kw):
    a = vector_types.parse(["--queries", "20", "--hot-passes", "1", "--cold-queries", "3",
                            "--latency-queries", "2", "--bit-ef-search", "40,80",
                            "--sparse-ef-search", "20,40",
                            # tables this small would be read by a sequential scan
                            "--server-set", "enable_seqscan=off"])
    return argparse.Namespace(**{**vars(a), **kw})


def _bit_set():
    """Clustered 256-d rows standing in for the sentences (the shape needs only
    rows, held-out queries and the exact cosine answers)."""
    rows, queries = data.clustered(2000, 256, seed=5, normalize=True, n_queries=20)
    truth = data.ground_truth(rows, queries, 10, "cosine")
    return datasets.Dataset("clustered 2000x256", "test-bit", "cosine", rows, queries,
                            np.zeros((0, 256), np.float32), truth)


@pytest.fixture(scope="module")
def runs():
    a = _args()
    out = {"bit": vector_types.run_shape("bit", _bit_set(), vector_types.config(a, "bit"),
                                         log.Log())}
    sparse = vector_types.sparse_set(1000, 30000, 100, "ip", 20, 42)
    out["sparse"] = vector_types.run_shape("sparse", sparse, vector_types.config(a, "sparse"),
                                           log.Log())
    return a, out


@pytest.mark.parametrize("shape", ["bit", "sparse"])
def test_both_engines_measured(runs, shape):
    """Each engine built its index and was measured hot (recall well above
    chance), cold from storage, and, for bit, by plain Hamming recall."""
    _, out = runs
    res = out[shape]
    assert list(res["engines"]) == ["pgvector hnsw", "streamhnsw"]
    for eng, info in res["engines"].items():
        assert info["index_bytes"] > 0 and info["build_s"] > 0
        hot = [p for p in res["modes"]["hot"]["points"] if p["engine"] == eng]
        assert len(hot) == 2 and max(p["recall@10"] for p in hot) > 0.5, hot
        cold = [p for p in res["modes"]["cold"]["points"] if p["engine"] == eng]
        assert cold and all(p["storage_reads"] > 0 for p in cold), cold
    if shape == "bit":
        ham = res["modes"]["hamming"]
        assert min(p["recall@10"] for p in ham["points"]) > 0.8, ham
        assert 0 < ham["exact_candidates_recall@10"] <= 1


def test_report(runs):
    """The report has both shapes, each with its figures side by side."""
    a, out = runs
    md = vector_types.markdown(out, a)
    assert "## bit: binary-quantized" in md and "## sparsevec: 30,000 dimensions" in md
    assert md.count("| build s |") == 2 and "plain Hamming recall@10 at ef_search 40" in md
