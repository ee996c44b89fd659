"""Builds that link their in-memory graph on half-precision vectors.

From 64 dimensions up a build on float vectors links on IEEE halves of them
(scaled by a power of two, src/README Build); the pages keep the exact
vectors and the SQ8 codes of the floats. The developer setting
streamhnsw.debug_build_floats links on floats instead, for comparison. Each
test builds the same table both ways and checks: streamhnsw_verify is clean,
the index has the same size (same rows, levels and codes), recall@10 at
ef_search 40 over 200 seeded queries is the float graph's within noise (a
difference of 0.02 is over three standard errors), and, for L2 and cosine,
a search for each row's own vector returns that row. Values far outside
binary16's range (1e5, above its largest value 65504) or deep in its
subnormals (1e-6) are where an unscaled conversion would break the graph.
"""

import re

import numpy as np
import pytest

from buildtest import CASE_IDS, CASES, build, check_own_vectors, load_case, search
from shnsw import data

FLOATS_FULL = re.compile(r"on float vectors no longer fits into maintenance_work_mem after (\d+) rows")


def size(conn, table):
    return conn.execute(f"SELECT pg_relation_size('{table}_idx')").fetchone()[0]


@pytest.mark.parametrize("typ,opclass,op,metric", CASES, ids=CASE_IDS)
def test_halves_match_floats(conn, typ, opclass, op, metric):
    rows, queries = data.clustered(4000, 96, seed=31, n_queries=200)
    table = f"bh_{typ}_{metric}"
    truth = load_case(conn, table, rows, queries, typ, metric)

    assert build(conn, table, opclass, floats=True) is None
    on_floats = data.recall(search(conn, table, queries, op, typ), truth, 10)
    floats_size = size(conn, table)
    conn.execute(f"DROP INDEX {table}_idx")

    assert build(conn, table, opclass, floats=False) is None
    on_halves = data.recall(search(conn, table, queries, op, typ), truth, 10)
    assert size(conn, table) == floats_size
    assert on_halves >= on_floats - 0.02, (on_floats, on_halves)
    assert on_halves >= 0.9, on_halves
    if metric != "ip":
        check_own_vectors(conn, table, rows, op, typ)
    conn.execute(f"DROP INDEX {table}_idx")

    # the parallel build links on halves too, in shared memory
    launched = build(conn, table, opclass, floats=False, workers=2)
    assert launched is not None and launched >= 1, launched
    parallel = data.recall(search(conn, table, queries, op, typ), truth, 10)
    assert parallel >= on_halves - 0.02, (on_halves, parallel)
    if metric != "ip":
        check_own_vectors(conn, table, rows, op, typ)
    conn.execute(f"DROP TABLE {table}")


@pytest.mark.parametrize("scale", [1e5, 1e-6])
def test_halves_far_from_unit_range(conn, scale):
    """L2 on values beyond binary16's range or in its subnormals: the build
    scales them by a power of two before rounding, so the graph is the
    float graph's within noise."""
    rows, queries = data.clustered(3000, 64, seed=32, n_queries=200)
    rows = (rows * scale).astype(np.float32)
    queries = (queries * scale).astype(np.float32)
    table = "bh_range"
    data.load(conn, table, rows)
    truth = data.ground_truth(rows, queries, 10, "l2")
    recalls = {}
    for floats in (True, False):
        build(conn, table, "vector_l2_ops", floats=floats)
        recalls[floats] = data.recall(search(conn, table, queries, "<->", "vector"), truth, 10)
        conn.execute(f"DROP INDEX {table}_idx")
    assert recalls[False] >= recalls[True] - 0.02, recalls
    assert recalls[False] >= 0.9, recalls
    conn.execute(f"DROP TABLE {table}")


def test_halves_fit_more_rows(conn):
    """maintenance_work_mem counts halves and codes (3 bytes a dimension)
    where a float graph counted floats (4): more rows fit before the build
    goes on to SQ8 codes."""
    rows, _ = data.clustered(6000, 256, seed=33, n_queries=1)
    data.load(conn, "bh_fit", rows)
    fits = {}
    for floats in (True, False):
        notices = []
        build(conn, "bh_fit", "vector_l2_ops", floats=floats, mem="4MB", notices=notices)
        found = [int(m.group(1)) for n in notices for m in [FLOATS_FULL.search(n)] if m]
        assert found, notices
        fits[floats] = found[0]
        conn.execute("DROP INDEX bh_fit_idx")
    # per row: 1,024 bytes of floats or 768 of halves and codes, beside
    # about 400 of lists and bookkeeping
    assert fits[False] > fits[True] * 1.15, fits
    conn.execute("DROP TABLE bh_fit")
