"""Scans past streamhnsw.max_scan_tuples.

On a table larger than the budget (30,000 rows, budget at its default
20,000), a filter that keeps almost nothing:

- the budget bounds what the scan examines: the walk stops once it has
  seen its first round and max_scan_tuples more nodes, returns what it
  found (a subset of the true rows, in exact order) and ends; it never
  reads the whole index (no sweep), every metric, vector and halfvec, as
  pgvector's iterative scan stops at its max_scan_tuples;
- a complete, exact answer is an explicit choice: with the budget
  covering the index and streamhnsw.sweep_threshold = 0 the scan sweeps
  before its first row and returns the exact rows (inner product too);
- an unfiltered LIMIT 10 never sweeps.

EXPLAIN says when the walk spent the budget ("max_scan_tuples spent=1")
and why a scan swept ("streamhnsw sweeps: ...").
"""

import numpy as np
import pytest

from shnsw import data

OPS = {"l2": ("<->", "vector_l2_ops", "halfvec_l2_ops"),
       "cosine": ("<=>", "vector_cosine_ops", "halfvec_cosine_ops"),
       "ip": ("<#>", "vector_ip_ops", "halfvec_ip_ops")}
N = 30000


@pytest.fixture(scope="module")
def budget_tables(cluster):
    """bt_vector and bt_halfvec: 30,000 rows of 3 dimensions, c = id % 500."""
    rng = np.random.default_rng(15)
    x = rng.random((N, 3), dtype=np.float32)
    with cluster.connect() as conn:
        for typ in ("vector", "halfvec"):
            t = f"bt_{typ}"
            conn.execute(f"DROP TABLE IF EXISTS {t}")
            data.load(conn, t, x, typ=typ)
            conn.execute(f"ALTER TABLE {t} ADD COLUMN c int")
            conn.execute(f"UPDATE {t} SET c = id % 500")
            conn.execute(f"VACUUM ANALYZE {t}")
    yield
    with cluster.connect() as conn:
        for typ in ("vector", "halfvec"):
            conn.execute(f"DROP TABLE IF EXISTS bt_{typ}")


def _index(conn, typ, metric):
    t = f"bt_{typ}"
    ops = OPS[metric][1 if typ == "vector" else 2]
    conn.execute(f"DROP INDEX IF EXISTS {t}_idx")
    conn.execute(f"CREATE INDEX {t}_idx ON {t} USING streamhnsw (embedding {ops})")
    return t


def _plan(conn, sql, params):
    plan = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql, params).fetchall()]
    assert any("Index Scan using" in line for line in plan), plan
    return plan


def _sweeps(plan):
    return next((line.strip() for line in plan if "streamhnsw sweeps:" in line), None)


def _exact(conn, sql, params):
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_indexscan = off")
        conn.execute("SET LOCAL enable_seqscan = on")
        return conn.execute(sql, params).fetchall()


def _figure(plan, label):
    line = next(line for line in plan if label in line)
    return int(line.split(label)[1].split()[0].rstrip(","))


@pytest.mark.parametrize("typ", ["vector", "halfvec"])
@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_filter_past_budget_stops_at_the_budget(conn, budget_tables, metric, typ):
    """6 of 30,000 rows match and the LIMIT asks for more: the scan returns
    the matching rows its walk reached within the budget, in exact order,
    examines no more than its first round and the budget, and ends."""
    t = _index(conn, typ, metric)
    op = OPS[metric][0]
    sql = (f"SELECT id, embedding {op} %s::{typ} FROM {t} WHERE id %% 5000 = 3 "
           f"ORDER BY embedding {op} %s::{typ} LIMIT 50")
    lit = "[0.5,0.25,0.75]"
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_seqscan = off")
        budget = int(conn.execute("SHOW streamhnsw.max_scan_tuples").fetchone()[0])
        assert budget < N
        got = conn.execute(sql, (lit, lit)).fetchall()
        truth = _exact(conn, sql, (lit, lit))
        assert len(truth) == 6
        d = [r[1] for r in got]
        assert d == sorted(d), got
        assert {r[0] for r in got} <= {r[0] for r in truth}, (got, truth)
        assert len({r[0] for r in got}) == len(got)
        plan = _plan(conn, sql, (lit, lit))
        assert _sweeps(plan) is None, plan
        assert _figure(plan, "max_scan_tuples spent=") == 1, plan
        # what the walk examined: the first round's nodes and the budget
        # (a round's last expansion can add up to 2m more)
        assert _figure(plan, "distances=") <= budget + 2000, plan
        removed = next(line for line in plan if "Rows Removed by Filter" in line)
        assert int(removed.split(":")[1]) < N - 6, plan


@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_opt_in_sweep_is_exact_past_any_budget(conn, budget_tables, metric):
    """With the budget covering the index and sweep_threshold = 0, a
    filtered scan returns the exact top rows (inner product too), and the
    one that keeps 6 rows returns all 6."""
    t = _index(conn, "vector", metric)
    op = OPS[metric][0]
    queries = np.random.default_rng(151).random((5, 3), dtype=np.float32)
    sql = (f"SELECT id, embedding {op} %s::vector FROM {t} WHERE c = 7 "
           f"ORDER BY embedding {op} %s::vector LIMIT 10")
    few = (f"SELECT id, embedding {op} %s::vector FROM {t} WHERE id %% 5000 = 3 "
           f"ORDER BY embedding {op} %s::vector LIMIT 50")
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL streamhnsw.max_scan_tuples = 1000000")
        conn.execute("SET LOCAL streamhnsw.sweep_threshold = 0")
        for q in queries:
            lit = data.vector_literal(q)
            got = conn.execute(sql, (lit, lit)).fetchall()
            truth = _exact(conn, sql, (lit, lit))
            # distances, not ids: rows can tie
            assert [r[1] for r in got] == [r[1] for r in truth], (lit, got, truth)
        lit = "[0.5,0.25,0.75]"
        got = conn.execute(few, (lit, lit)).fetchall()
        truth = _exact(conn, few, (lit, lit))
        assert len(truth) == 6 and [r[1] for r in got] == [r[1] for r in truth]
        why = _sweeps(_plan(conn, sql, (lit, lit)))
        assert why is not None and "first round (sweep_threshold 0)=1" in why, why


@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_unfiltered_limit_10_does_not_sweep(conn, budget_tables, metric):
    t = _index(conn, "vector", metric)
    op = OPS[metric][0]
    sql = f"SELECT id FROM {t} ORDER BY embedding {op} %s::vector LIMIT 10"
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_seqscan = off")
        for q in np.random.default_rng(152).random((5, 3), dtype=np.float32):
            plan = _plan(conn, sql, (data.vector_literal(q),))
            assert _sweeps(plan) is None, plan
