"""Scans past streamhnsw.max_scan_tuples (issue 15).

On a table larger than the budget (30,000 rows, budget at its default
20,000):

- a filtered inner-product LIMIT 10 at 0.2 % selectivity returns the
  exact top 10 (the sequential scan's answer), vector and halfvec: inner
  product sweeps at its second round whatever the budget;
- L2 and cosine, with a filter that keeps almost nothing, return every
  matching row: the walk spends the budget and the scan sweeps;
- an unfiltered LIMIT 10 does not sweep;
- with work_mem too small for the sweep's candidates the scan ends at the
  budget as before, and EXPLAIN shows no sweep.

EXPLAIN names why a scan swept ("streamhnsw sweeps: ...").
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


@pytest.mark.parametrize("typ", ["vector", "halfvec"])
def test_filtered_inner_product_past_budget_is_exact(conn, budget_tables, typ):
    t = _index(conn, typ, "ip")
    queries = np.random.default_rng(151).random((10, 3), dtype=np.float32)
    sql = (f"SELECT id, embedding <#> %s::{typ} FROM {t} WHERE c = 7 "
           f"ORDER BY embedding <#> %s::{typ} LIMIT 10")
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_seqscan = off")
        assert int(conn.execute("SHOW streamhnsw.max_scan_tuples").fetchone()[0]) < N
        for q in queries:
            lit = data.vector_literal(q)
            got = conn.execute(sql, (lit, lit)).fetchall()
            truth = _exact(conn, sql, (lit, lit))
            # distances, not ids: halfvec rows can tie
            assert [r[1] for r in got] == [r[1] for r in truth], (lit, got, truth)
            assert len({r[0] for r in got}) == 10
        why = _sweeps(_plan(conn, sql, (lit, lit)))
        assert why is not None and "inner product=1" in why, why


@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_filter_keeping_few_rows_returns_them_all(conn, budget_tables, metric):
    """6 of 30,000 rows match; the LIMIT asks for more: all 6, in exact order."""
    t = _index(conn, "vector", metric)
    op = OPS[metric][0]
    sql = (f"SELECT id, embedding {op} %s::vector FROM {t} WHERE id %% 5000 = 3 "
           f"ORDER BY embedding {op} %s::vector LIMIT 50")
    lit = "[0.5,0.25,0.75]"
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_seqscan = off")
        got = conn.execute(sql, (lit, lit)).fetchall()
        truth = _exact(conn, sql, (lit, lit))
        assert len(truth) == 6
        assert got == truth
        plan = _plan(conn, sql, (lit, lit))
        why = _sweeps(plan)
        assert why is not None and "max_scan_tuples spent=1" in why, plan
        # the budget bounds the walk, not the scan: every row was looked at
        removed = next(line for line in plan if "Rows Removed by Filter" in line)
        assert int(removed.split(":")[1]) == N - 6, plan

        # without room for the sweep, the scan ends at the budget as before
        conn.execute("SET LOCAL work_mem = '64kB'")
        conn.execute("SET LOCAL hash_mem_multiplier = 1")
        plan = _plan(conn, sql, (lit, lit))
        assert _sweeps(plan) is None, plan
        removed = next(line for line in plan if "Rows Removed by Filter" in line)
        assert int(removed.split(":")[1]) < N - 6, plan


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
