"""Complete and correct scans (issue 15).

- A filter matching 10 of 100,000 rows: the default max_scan_tuples
  bounds the walk (it returns what it reached and ends, no sweep); with a
  budget covering the index it returns all 10. An unfiltered LIMIT 100000
  returns every row once, in order, with a complete scan opted into
  (sweep_threshold = 0); at the defaults every row not returned is one
  EXPLAIN counts as found after a farther row.
- Completeness: with max_scan_tuples at least the number of rows, a
  relaxed scan, and a strict one with sweep_threshold = 0, returns every
  live row exactly once (strict: in exact distance order), on built,
  insert-built and vacuumed indexes, for every metric, vector and halfvec;
  a strict scan at the defaults loses no row silently.
- Thousands of randomized scans (filters, LIMITs, ef_search, budgets, both
  orders): no duplicates; strict order is non-decreasing in exact distance;
  relaxed order with an unbounded budget returns min(LIMIT, matching rows).
- Filtered recall at 2 % and 0.2 % selectivity, LIMIT 10 and 20, on
  vector(3) and 128-d clustered data, next to pgvector's iterative scan.
- Plans for filters keeping 100 %, 10 %, 2 % and 0.2 % of rows, next to
  pgvector's; whatever is chosen returns the LIMIT.

Printed figures (pytest -s) are for the report; the assertions are the
guarantees.
"""

import random
import time

import numpy as np
import pytest

from shnsw import data

OPS = {"l2": ("<->", "vector_l2_ops", "halfvec_l2_ops"),
       "cosine": ("<=>", "vector_cosine_ops", "halfvec_cosine_ops"),
       "ip": ("<#>", "vector_ip_ops", "halfvec_ip_ops")}


def set_local(conn, settings):
    """SET LOCAL each name to its value (inside a transaction)."""
    for name, value in settings.items():
        conn.execute(f"SET LOCAL {name} = {value}")


def order_line(conn, sql, params=()):
    plan = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql, params).fetchall()]
    assert any("Index Scan using" in line for line in plan), plan
    return next(line for line in plan if "streamhnsw order:" in line)


def scan_counts(conn, sql, params=()):
    """EXPLAIN (ANALYZE) of sql: the rows its streamhnsw scan returned, and
    those it skipped as found after a farther row (strict order)."""
    plan = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql, params).fetchall()]
    node = next(line for line in plan if "Index Scan using" in line)
    rows = int(float(node.split("rows=")[1].split()[0]))
    line = next(line for line in plan if "streamhnsw order:" in line)
    return rows, int(line.split("found after a farther row=")[1].split()[0]), "\n".join(plan)


def test_issue_reproductions(conn):
    conn.execute("DROP TABLE IF EXISTS t43")
    conn.execute("CREATE TABLE t43 (i int4 PRIMARY KEY, v vector(3))")
    conn.execute("SELECT setseed(0.003)")
    conn.execute("INSERT INTO t43 SELECT i, ARRAY[random(), random(), random()] "
                 "FROM generate_series(1, 100000) i")
    conn.execute("CREATE INDEX ON t43 USING streamhnsw (v vector_l2_ops)")
    conn.execute("SET enable_seqscan = off")
    filtered = ("SELECT i FROM t43 WHERE i % 10000 = 0 "
                "ORDER BY v <-> (SELECT v FROM t43 WHERE i = 1) LIMIT 11")
    full = "SELECT i, v FROM t43 ORDER BY v <-> '[0.5,0.5,0.5]' LIMIT 100000"
    check = ("SELECT count(*), count(DISTINCT i), bool_and(d >= prev) FROM "
             "(SELECT i, d, lag(d, 1, '-Infinity') OVER (ORDER BY o) AS prev FROM "
             " (SELECT i, v <-> '[0.5,0.5,0.5]' AS d, row_number() OVER () AS o FROM "
             f"  ({full}) a) b) c")
    try:
        # the default budget bounds the walk: some of the 10, never a sweep
        n = conn.execute(f"SELECT count(*) FROM ({filtered}) t").fetchone()[0]
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + filtered))
        assert 1 <= n <= 10 and "max_scan_tuples spent=1" in plan, (n, plan)
        assert "streamhnsw sweeps:" not in plan, plan
        conn.execute("SET streamhnsw.max_scan_tuples = 1000000")
        assert conn.execute(f"SELECT count(*) FROM ({filtered}) t").fetchone()[0] == 10
        # a full scan at the defaults: in order, each row once, and every row
        # it does not return is one it counts as found after a farther row
        rows, skipped, plan = scan_counts(conn, full)
        n, distinct, ordered = conn.execute(check).fetchone()
        assert (n, distinct, ordered) == (rows, rows, True) and rows + skipped == 100000, plan
        # complete, opted into: every row, none found after a farther one
        conn.execute("SET streamhnsw.sweep_threshold = 0")
        assert conn.execute(check).fetchone() == (100000, 100000, True)
        line = order_line(conn, full)
        print("\n" + line.strip())
        assert "found after a farther row=0 " in line and "returned unproven=0 " in line, line
    finally:
        conn.execute("RESET enable_seqscan")
        conn.execute("RESET streamhnsw.max_scan_tuples")
        conn.execute("RESET streamhnsw.sweep_threshold")
        conn.execute("DROP TABLE t43")


@pytest.mark.parametrize("path", ["build", "insert", "vacuum"])
@pytest.mark.parametrize("typ", ["vector", "halfvec"])
@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_every_live_row_once(conn, metric, typ, path):
    """
    With max_scan_tuples covering every node, a relaxed scan and a strict
    one with sweep_threshold = 0 return every live row once, every metric;
    strict order in non-decreasing exact distance, with nothing found after
    a farther row (inner product too, where the graph's premise fails, and
    insert-built inner-product indexes, where some nodes are unreachable
    from the entry point). At the default threshold a strict scan is
    ordered too, and every row it does not return is one EXPLAIN counts
    as found after a farther row: none is lost silently. pgvector's
    strict_order count is printed beside.
    """
    n = 1500
    rows, queries = data.clustered(n, 16, seed=21, n_queries=3)
    op, vops, hops = OPS[metric]
    table = f"c_{metric}_{typ}_{path}"
    if path == "insert":
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, embedding {typ}(16))")
    else:
        data.load(conn, table, rows, typ=typ)
    conn.execute(f"CREATE INDEX ON {table} USING streamhnsw "
                 f"(embedding {vops if typ == 'vector' else hops})")
    if path == "insert":
        data.load(conn, table, rows, typ=typ, create=False)
    if metric == "ip":
        conn.execute(f"CREATE INDEX {table}_pgv ON {table} USING hnsw "
                     f"(embedding {vops if typ == 'vector' else hops})")
    live = set(range(n))
    if path == "vacuum":
        conn.execute(f"DELETE FROM {table} WHERE id % 3 = 1")
        conn.execute(f"VACUUM {table}")
        live = {i for i in live if i % 3 != 1}
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET streamhnsw.max_scan_tuples = 1000000")
    sql = (f"SELECT id, embedding {op} %s::{typ} FROM {table} "
           f"ORDER BY embedding {op} %s::{typ} LIMIT {n + 10}")
    try:
        for q in queries:
            lit = data.vector_literal(q)
            with conn.transaction(force_rollback=True):
                if metric == "ip":
                    _only_index(conn, table, f"{table}_embedding_idx")
                res = conn.execute(sql, (lit, lit)).fetchall()
                ids = [r[0] for r in res]
                assert len(ids) == len(set(ids)), "duplicates"
                d = [r[1] for r in res]
                assert d == sorted(d)
                assert set(ids) <= live
                rows, skipped, plan = scan_counts(conn, sql, (lit, lit))
                assert rows == len(ids) and rows + skipped == len(live), plan
                default_count = len(ids)
                conn.execute("SET LOCAL streamhnsw.sweep_threshold = 0")
                res = conn.execute(sql, (lit, lit)).fetchall()
                ids = [r[0] for r in res]
                assert len(ids) == len(set(ids)), "duplicates"
                d = [r[1] for r in res]
                assert d == sorted(d)
                assert set(ids) == live, (len(ids), len(live))
                line = order_line(conn, sql, (lit, lit))
                assert "found after a farther row=0 " in line, line
                conn.execute("SET LOCAL streamhnsw.sweep_threshold = 1")
                conn.execute("SET LOCAL streamhnsw.iterative_scan = relaxed_order")
                relaxed = [r[0] for r in conn.execute(sql, (lit, lit)).fetchall()]
                assert len(relaxed) == len(set(relaxed))
                assert set(relaxed) == live
                if metric != "ip":
                    continue
                _only_index(conn, table, f"{table}_pgv")
                conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
                conn.execute("SET LOCAL hnsw.max_scan_tuples = 1000000")
                pgv = conn.execute(sql, (lit, lit)).fetchall()
                print(f"\nip {typ} {path}: strict order returns {default_count} of {len(live)} "
                      f"({len(ids)} swept first; pgvector strict_order {len(pgv)}), "
                      f"relaxed {len(relaxed)}", end="")
    finally:
        conn.execute("RESET enable_seqscan")
        conn.execute("RESET streamhnsw.max_scan_tuples")
        conn.execute(f"DROP TABLE {table}")


def test_randomized_scans_ordered_without_duplicates(conn):
    n = 4000
    rows, queries = data.clustered(n, 8, seed=33, n_queries=200)
    data.load(conn, "rnd", rows)
    conn.execute("ALTER TABLE rnd ADD COLUMN c int")
    conn.execute("UPDATE rnd SET c = (id * 7919) % 1000")
    for metric, (op, vops, _) in OPS.items():
        conn.execute(f"CREATE INDEX ON rnd USING streamhnsw (embedding {vops})")
    conn.execute("DELETE FROM rnd WHERE id % 17 = 3")
    conn.execute("VACUUM ANALYZE rnd")
    cats = dict(conn.execute("SELECT id, c FROM rnd").fetchall())
    rng = random.Random(15)
    conn.execute("SET enable_seqscan = off")
    start = time.time()
    scans = 0
    try:
        # a fixed count, not a time budget: under load (CI beside other
        # work) a 45 s budget once ran only 388 scans and failed
        while scans < 2000:
            metric = rng.choice(list(OPS))
            op = OPS[metric][0]
            q = data.vector_literal(queries[rng.randrange(len(queries))])
            cut = rng.choice([None, None, rng.randint(1, 1000), rng.randint(1, 30)])
            limit = rng.choice([1, 10, 20, rng.randint(1, 400)])
            ef = rng.choice([40, rng.randint(1, 100)])
            budget = rng.choice([1000000, 1000000, 20000, rng.randint(1, 2000)])
            strict = rng.random() < 0.8
            conn.execute(f"SET streamhnsw.ef_search = {ef}")
            conn.execute(f"SET streamhnsw.max_scan_tuples = {budget}")
            conn.execute("SET streamhnsw.iterative_scan = "
                         + ("strict_order" if strict else "relaxed_order"))
            where = f"WHERE c < {cut}" if cut is not None else ""
            res = conn.execute(f"SELECT id, embedding {op} %s::vector FROM rnd {where} "
                               f"ORDER BY embedding {op} %s::vector LIMIT {limit}",
                               (q, q)).fetchall()
            ids = [r[0] for r in res]
            assert len(ids) == len(set(ids)), "duplicate rows"
            assert cut is None or all(cats[i] < cut for i in ids)
            if strict:
                d = [r[1] for r in res]
                assert d == sorted(d), (metric, cut, limit, ef, budget)
            if budget >= len(cats) and not strict:
                matching = sum(1 for c in cats.values() if cut is None or c < cut)
                assert len(ids) == min(limit, matching), (metric, cut, limit, ef, strict)
            scans += 1
    finally:
        for s in ("ef_search", "max_scan_tuples", "iterative_scan"):
            conn.execute(f"RESET streamhnsw.{s}")
        conn.execute("RESET enable_seqscan")
        conn.execute("DROP TABLE rnd")
    print(f"\n{scans} randomized scans in {time.time() - start:.1f} s")


def _exact(metric, x, q):
    """Exact distances of rows x to q as pgvector's operators define them (float64)."""
    x = x.astype(np.float64)
    q = q.astype(np.float64)
    if metric == "l2":
        return np.sqrt(((x - q) ** 2).sum(axis=1))
    if metric == "ip":
        return -(x @ q)
    return 1.0 - (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))


def test_strict_order_is_the_exact_order_of_what_it_returns(conn):
    """
    Thousands of randomized scans (metric, vector or halfvec, filter, LIMIT,
    ef_search, budget, sweep threshold) over an index built on half the
    rows, the other half inserted, some deleted and vacuumed. For every
    strict scan, checked against distances computed here in float64:
      - each returned distance is the row's exact distance, the list is in
        non-decreasing order and has no duplicates: the exact order
        restricted to what was returned;
      - when the scan returned no row on the graph walk's premise (EXPLAIN's
        "returned unproven=0": every row was returned after the scan had
        seen every node), no matching row nearer than the last returned one
        is missing, and the scan returned min(LIMIT, matching rows);
      - with a budget covering the index and streamhnsw.sweep_threshold = 0
        the scan sweeps before its first row: no row is unproven.
    Rows found after a farther row was returned ("found after a farther
    row" > 0) can only come from rows returned unproven: the search had not
    seen them when the farther row was returned (src/README, Scans).
    """
    n, dim = 4000, 8
    rows, queries = data.clustered(n, dim, seed=61, n_queries=100)
    conn.execute("DROP TABLE IF EXISTS sx")
    conn.execute(f"CREATE TABLE sx (id bigint PRIMARY KEY, embedding vector({dim}), "
                 f"h halfvec({dim}), c int)")

    def insert(lo, hi):
        conn.execute("INSERT INTO sx SELECT i, v::vector, v::vector::halfvec, (i * 7919) %% 1000 "
                     "FROM unnest(%s::bigint[], %s::text[]) AS u(i, v)",
                     (list(range(lo, hi)), [data.vector_literal(r) for r in rows[lo:hi]]))

    insert(0, n // 2)
    for metric, (op, vops, hops) in OPS.items():
        conn.execute(f"CREATE INDEX sx_v_{metric} ON sx USING streamhnsw (embedding {vops})")
        conn.execute(f"CREATE INDEX sx_h_{metric} ON sx USING streamhnsw (h {hops})")
    insert(n // 2, n)
    conn.execute("DELETE FROM sx WHERE id % 13 = 5")
    conn.execute("VACUUM ANALYZE sx")
    live = np.array([i for i in range(n) if i % 13 != 5])
    cats = np.array([(int(i) * 7919) % 1000 for i in range(n)])
    vecs = {"vector": rows, "halfvec": rows.astype(np.float16).astype(np.float32)}
    rng = random.Random(61)
    start = time.time()
    scans = exact_checked = swept_first = skipping = 0
    try:
        conn.execute("SET enable_seqscan = off")
        # a fixed count, not as many as a time allows: under CI's load a
        # time cap left too few scans (the randomized test above)
        while scans < 2000:
            metric = rng.choice(list(OPS))
            typ = rng.choice(["vector", "halfvec"])
            op = OPS[metric][0]
            col = "embedding" if typ == "vector" else "h"
            qv = queries[rng.randrange(len(queries))]
            q = data.vector_literal(qv)
            cut = rng.choice([None, None, rng.randint(1, 1000), rng.randint(1, 30)])
            limit = rng.choice([1, 10, 20, rng.randint(1, 300)])
            ef = rng.choice([40, rng.randint(1, 100)])
            budget = rng.choice([1000000, 1000000, 20000, rng.randint(1, 2000)])
            threshold = rng.choice([None, None, "0", "0.05"])
            strict = rng.random() < 0.85
            where = f"WHERE c < {cut}" if cut is not None else ""
            sql = (f"SELECT id, {col} {op} %s::{typ} FROM sx {where} "
                   f"ORDER BY {col} {op} %s::{typ} LIMIT {limit}")
            with conn.transaction(force_rollback=True):
                set_local(conn, {"streamhnsw.ef_search": ef,
                                 "streamhnsw.max_scan_tuples": budget,
                                 "streamhnsw.iterative_scan":
                                     "strict_order" if strict else "relaxed_order"})
                if threshold is not None:
                    set_local(conn, {"streamhnsw.sweep_threshold": threshold})
                res = conn.execute(sql, (q, q)).fetchall()
                line = order_line(conn, sql, (q, q)) if strict else None
            scans += 1
            ids = [r[0] for r in res]
            assert len(ids) == len(set(ids)), "duplicate rows"
            assert cut is None or all(cats[i] < cut for i in ids)
            if not strict:
                continue
            qq = qv.astype(np.float16).astype(np.float32) if typ == "halfvec" else qv
            got = np.array([r[1] for r in res])
            if len(ids):
                want = _exact(metric, vecs[typ][ids], qq)
                assert np.allclose(got, want, rtol=1e-4, atol=1e-4), (metric, typ)
            assert list(got) == sorted(got), (metric, typ, cut, limit, ef, budget, threshold)
            unproven = int(line.split("returned unproven=")[1].split()[0])
            skipping += int(line.split("found after a farther row=")[1].split()[0]) > 0
            if budget >= n and threshold == "0":
                assert unproven == 0, line
                swept_first += 1
            if unproven > 0:
                continue
            exact_checked += 1
            match = live if cut is None else live[cats[live] < cut]
            assert len(ids) == min(limit, len(match)), (metric, typ, cut, limit, line)
            if len(ids):
                d = _exact(metric, vecs[typ][match], qq)
                nearer = set(match[d < want[-1] - 1e-4 * (1 + abs(want[-1]))].tolist())
                assert nearer <= set(ids), (metric, typ, cut, limit, ef, budget, line)
    finally:
        conn.execute("RESET enable_seqscan")
        conn.execute("DROP TABLE sx")
    print(f"\n{scans} randomized scans in {time.time() - start:.1f} s: {exact_checked} strict "
          f"scans proven and checked exact ({swept_first} swept first); {skipping} strict scans "
          f"found a row after a farther one", end="")
    assert exact_checked >= 100


def _only_index(conn, table, keep):
    conn.execute("UPDATE pg_index SET indisvalid = (indexrelid = %s::regclass) "
                 "WHERE indrelid = %s::regclass", (keep, table))


@pytest.mark.parametrize("shape", ["d3", "d128"])
def test_filtered_recall_next_to_pgvector(conn, shape):
    if shape == "d3":
        rng = np.random.default_rng(3)
        x = rng.random((20000, 3), dtype=np.float32)
        q = rng.random((10, 3), dtype=np.float32)
    else:
        x, q = data.clustered(10000, 128, seed=5, n_queries=10)
    table = f"fr_{shape}"
    data.load(conn, table, x)
    conn.execute(f"ALTER TABLE {table} ADD COLUMN c int")
    conn.execute(f"UPDATE {table} SET c = id % 500")
    for metric, (op, vops, _) in OPS.items():
        conn.execute(f"CREATE INDEX {table}_s_{metric} ON {table} USING streamhnsw (embedding {vops})")
        conn.execute(f"CREATE INDEX {table}_p_{metric} ON {table} USING hnsw (embedding {vops})")
    conn.execute(f"VACUUM ANALYZE {table}")
    lits = [data.vector_literal(v) for v in q]
    failures = []
    try:
        for metric, (op, _, _) in OPS.items():
            for sel, filt in (("2%", "c %% 50 = 7"), ("0.2%", "c = 7")):
                for k in (10, 20):
                    sql = (f"SELECT id FROM {table} WHERE {filt} "
                           f"ORDER BY embedding {op} %s::vector LIMIT {k}")
                    with conn.transaction(force_rollback=True):
                        conn.execute("SET LOCAL enable_indexscan = off")
                        truth = [{r[0] for r in conn.execute(sql, (lit,)).fetchall()} for lit in lits]
                    out = {}
                    for am, idx, setting in (("streamhnsw", f"{table}_s_{metric}", None),
                                             ("pgvector", f"{table}_p_{metric}",
                                              "SET LOCAL hnsw.iterative_scan = strict_order")):
                        with conn.transaction(force_rollback=True):
                            _only_index(conn, table, idx)
                            conn.execute("SET LOCAL enable_seqscan = off")
                            if setting:
                                conn.execute(setting)
                            plan = conn.execute("EXPLAIN " + sql, (lits[0],)).fetchall()
                            assert any(idx in r[0] for r in plan), plan
                            t = time.time()
                            hits = 0
                            for lit, tr in zip(lits, truth):
                                hits += len({r[0] for r in conn.execute(sql, (lit,)).fetchall()} & tr)
                            out[am] = (hits / sum(len(tr) for tr in truth),
                                       (time.time() - t) / len(lits) * 1000)
                    print(f"\n{shape} {metric:6s} {sel:4s} LIMIT {k}: "
                          f"streamhnsw recall {out['streamhnsw'][0]:.3f} {out['streamhnsw'][1]:.1f} ms | "
                          f"pgvector strict_order recall {out['pgvector'][0]:.3f} {out['pgvector'][1]:.1f} ms",
                          end="")
                    # L2 and cosine: 0.99. Inner product, where a graph walk
                    # finds the wrong rows more often than not (both engines
                    # here), no sweep by default: at least pgvector's
                    # (exact answers opted into: test_scan_budget.py)
                    floor = 0.99 if metric != "ip" else out["pgvector"][0] - 0.005
                    if out["streamhnsw"][0] < floor:
                        failures.append((metric, sel, k, out))
    finally:
        conn.execute(f"DROP TABLE {table}")
    assert not failures, failures


def test_plans_by_selectivity_next_to_pgvector(conn):
    filters = [("100%", "true"), ("10%", "c < 5"), ("2%", "c = 7"), ("0.2%", "i % 500 = 7")]
    for am in ("streamhnsw", "hnsw"):
        t = f"pl_{am}"
        conn.execute(f"DROP TABLE IF EXISTS {t}")
        conn.execute(f"CREATE TABLE {t} (i int4, v vector(3), c int4)")
        conn.execute("SELECT setseed(0.5)")
        conn.execute(f"INSERT INTO {t} SELECT i, ARRAY[random(), random(), random()], i % 50 "
                     "FROM generate_series(1, 10000) i")
        conn.execute(f"CREATE INDEX ON {t} USING {am} (v vector_l2_ops)")
        conn.execute(f"ANALYZE {t}")
    chosen = {}
    try:
        for label, f in filters:
            line = f"\n{label:5s}"
            for am, setting in (("streamhnsw", None), ("hnsw", None),
                                ("hnsw", "SET LOCAL hnsw.iterative_scan = strict_order")):
                with conn.transaction(force_rollback=True):
                    if setting:
                        conn.execute(setting)
                    sql = f"SELECT i FROM pl_{am} WHERE {f} ORDER BY v <-> '[0.5,0.5,0.5]' LIMIT 20"
                    plan = conn.execute("EXPLAIN " + sql).fetchall()
                    shape = "index" if any("Index Scan" in r[0] for r in plan) else "seq+sort"
                    got = len(conn.execute(sql).fetchall())
                    line += f" | {am}{' strict' if setting else ''}: {shape} -> {got} rows"
                    if am == "streamhnsw":
                        chosen[label] = shape
                        # 20 or more rows match every filter here
                        assert got == 20, (label, shape, got)
            print(line, end="")
    finally:
        conn.execute("DROP TABLE pl_streamhnsw")
        conn.execute("DROP TABLE pl_hnsw")
    # pgvector's plan shapes: the index for no filter, an exact scan for 2 % and less
    assert chosen["100%"] == "index"
    assert chosen["2%"] == "seq+sort" and chosen["0.2%"] == "seq+sort"


@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_out_of_range_inserts_keep_strict_order(conn, metric):
    """
    Values inserted after the quantizer was trained, far outside its range,
    are clamped: their codes can be off by far more than half a step, until
    the index retrains (an eighth more rows than it trained on, here after
    the 250th). Strict order returns rows in non-decreasing exact distance,
    each once; a full scan returns all 2,300 rows with sweep_threshold = 0,
    and at the defaults every row it does not return is counted as found
    after a farther row, for queries among them and among the trained rows.
    LIMIT 10/100 answers rest on the graph walk: printed.
    """
    op, vops, _ = OPS[metric]
    rng = np.random.default_rng(7)
    table = f"oor_{metric}"
    data.load(conn, table, rng.random((2000, 4), dtype=np.float32))
    conn.execute(f"CREATE INDEX ON {table} USING streamhnsw (embedding {vops})")
    out = (rng.random((300, 4), dtype=np.float32) * 6 - 3)
    data.load(conn, table, out, create=False, start_id=2000)
    conn.execute(f"VACUUM ANALYZE {table}")
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET streamhnsw.max_scan_tuples = 1000000")
    exact = total = 0
    full, default_full = [], []
    try:
        for q in list(out[:3]) + list(rng.random((2, 4), dtype=np.float32)):
            lit = data.vector_literal(q)
            rows, skipped, plan = scan_counts(
                conn, f"SELECT id FROM {table} ORDER BY embedding {op} %s::vector LIMIT 2400",
                (lit,))
            assert rows + skipped == 2300, plan
            default_full.append(rows)
            for limit in (10, 100, 2400):
                # the full scan complete, opted into
                conn.execute(f"SET streamhnsw.sweep_threshold = {0 if limit == 2400 else 1}")
                res = conn.execute(f"SELECT id, embedding {op} %s::vector FROM {table} "
                                   f"ORDER BY embedding {op} %s::vector LIMIT {limit}",
                                   (lit, lit)).fetchall()
                ids = [r[0] for r in res]
                d = [r[1] for r in res]
                assert len(ids) == len(set(ids)), "duplicate rows"
                assert d == sorted(d), (metric, limit)
                assert len(ids) > 0
                if limit == 2400:
                    full.append(len(ids))
                else:
                    with conn.transaction(force_rollback=True):
                        conn.execute("SET LOCAL enable_indexscan = off")
                        conn.execute("SET LOCAL enable_seqscan = on")
                        truth = [r[0] for r in conn.execute(
                            f"SELECT embedding {op} %s::vector AS d FROM {table} "
                            f"ORDER BY d LIMIT {limit}", (lit,)).fetchall()]
                    exact += len(d) == len(truth) and np.allclose(d, truth, rtol=1e-6, atol=1e-6)
                    total += 1
            conn.execute("RESET streamhnsw.sweep_threshold")
        print(f"\n{metric}: {exact} of {total} LIMIT 10/100 answers exact; full scans "
              f"return {full} of 2300 rows swept first, {default_full} at the defaults", end="")
        assert full == [2300] * 5, full
    finally:
        conn.execute("RESET enable_seqscan")
        conn.execute("RESET streamhnsw.sweep_threshold")
        conn.execute("RESET streamhnsw.max_scan_tuples")
        conn.execute(f"DROP TABLE {table}")


def bounded_and_control(conn, table, op, lit, r, settings):
    """A distance filter `embedding op q < r` and its control, whose bound is
    an expression of a column (the scan cannot see it and runs on), under
    settings (SET LOCAL): for each, the sorted ids, whether EXPLAIN says the
    scan ended at the distance bound, and how many rows it re-ranked."""
    got = []
    for extra in ("", " + 0 * id"):
        sql = (f"SELECT id FROM {table} WHERE embedding {op} %(q)s::vector < %(r)s{extra} "
               f"ORDER BY embedding {op} %(q)s::vector LIMIT 10")
        with conn.transaction():
            set_local(conn, settings)
            ids = sorted(r[0] for r in conn.execute(sql, {"q": lit, "r": r}))
            plan = [x[0] for x in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql,
                                               {"q": lit, "r": r})]
        line = next(x for x in plan if "streamhnsw: rounds=" in x)
        got.append((ids, any("ended at distance bound=1" in x for x in plan),
                    int(line.split("re-ranked=")[1].split()[0]), "\n".join(plan)))
    return got


@pytest.mark.parametrize("order", ["strict_order", "relaxed_order"])
def test_out_of_range_inserts_distance_filter(conn, order):
    """
    A distance filter on an index with rows inserted far outside the
    quantizer's range, queries inside it: the marked rows near a query are
    re-ranked before the scan ends at the bound (relaxed order too, which
    otherwise re-ranks only what its rounds return, and without that ran
    on through all 2,300 rows), so the scan ends at the bound, early, with
    the exact rows within it, those of a control whose bound it cannot
    see.
    """
    rng = np.random.default_rng(7)
    table = "oor_filter"
    data.load(conn, table, rng.random((2000, 4), dtype=np.float32))
    conn.execute(f"CREATE INDEX ON {table} USING streamhnsw (embedding vector_l2_ops)")
    # 200: fewer than the eighth of 2,000 that makes the index retrain
    data.load(conn, table, rng.random((200, 4), dtype=np.float32) * 6 - 3, create=False,
              start_id=2000)
    try:
        for q in np.random.default_rng(3).random((20, 4), dtype=np.float32):
            lit = data.vector_literal(q)
            with conn.transaction():
                conn.execute("SET LOCAL enable_indexscan = off")
                d = [r[0] for r in conn.execute(f"SELECT embedding <-> %s::vector FROM {table} "
                                                "ORDER BY 1 LIMIT 5", (lit,))]
            got = bounded_and_control(conn, table, "<->", lit, (d[3] + d[4]) / 2,
                                      {"enable_seqscan": "off",
                                       "streamhnsw.iterative_scan": order})
            plan = got[0][3]
            assert len(got[0][0]) == 4 and got[0][0] == got[1][0], (order, [g[:3] for g in got])
            assert (got[0][1], got[1][1]) == (True, False), (order, [g[:3] for g in got])
            # ended early: the control, which cannot end, re-ranks every row
            assert got[0][2] * 4 < got[1][2], (order, [g[:3] for g in got])
            assert "first round bound: typical error, marked rows" in plan, plan
        # a query among the rows far out keeps the worst case (scan_query_inside)
        lit = conn.execute(f"SELECT embedding::text FROM {table} WHERE id = 2000").fetchone()[0]
        plan = "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN (ANALYZE, COSTS OFF) SELECT id FROM {table} "
            "ORDER BY embedding <-> %s::vector LIMIT 10", (lit,)))
        assert "first round bound: worst case (query outside the trained range)" in plan, plan
    finally:
        conn.execute(f"DROP TABLE {table}")


def test_out_of_range_inserts_end_after_the_first_round(conn):
    """
    An index filled by inserts retrains its quantizer each time it doubles,
    on the rows so far; rows inserted after the last retrain can fall
    outside its range. Such rows are marked with how far outside they lie,
    and only they are held to that wider bound: a LIMIT 10 at the default
    ef_search ends after its first round, as on the same rows built. (When
    one such row anywhere held every first round to the codes' worst-case
    error, these queries ran 2 rounds on average, up to 4.) The rows come
    back in exact order, and as many of the exact ones as the built index
    finds, less 0.02. A distance filter in relaxed order ends at its bound
    with the rows of an unbounded control. EXPLAIN says what held each
    first round: the typical error with marked rows by their excess, or,
    for the two queries that lie outside the range by more than a code's
    largest error, the worst case (one round sufficed for those too).
    """
    rows, queries = data.clustered(4500, 256, seed=14, normalize=True, n_queries=50)
    x = np.asarray(rows, dtype=np.float64)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    # the last retrain saw the first 4,096 rows; later ones outside its range
    outside = ((x[4096:] < x[:4096].min(0)) | (x[4096:] > x[:4096].max(0))).any(axis=1)
    assert outside.sum() > 10, outside.sum()
    # how far each query lies outside that range, in codes' largest errors
    lo, hi = x[:4096].min(0), x[:4096].max(0)
    step = (hi - lo) / 255
    qn = np.asarray(queries, dtype=np.float64)
    qn /= np.linalg.norm(qn, axis=1, keepdims=True)
    query_out = (np.linalg.norm(qn - np.clip(qn, lo - step / 2, hi + step / 2), axis=1)
                 / (np.sqrt((step ** 2).sum()) / 2))
    assert (query_out > 1.05).sum() > 0 and (query_out < 0.95).sum() > 40, query_out
    truth = data.ground_truth(rows, queries, 10, "cosine")
    found = {}
    try:
        for path in ("insert", "build"):
            table = f"oor1_{path}"
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, embedding vector(256))")
            if path == "insert":
                conn.execute(f"CREATE INDEX ON {table} USING streamhnsw (embedding vector_cosine_ops)")
            data.load(conn, table, rows, create=False)
            if path == "build":
                conn.execute(f"CREATE INDEX ON {table} USING streamhnsw (embedding vector_cosine_ops)")
            conn.execute("SET enable_seqscan = off")
            rounds, found[path], labels = [], [], []
            for q in queries:
                lit = data.vector_literal(q)
                res = conn.execute(f"SELECT id, embedding <=> %s::vector FROM {table} "
                                   "ORDER BY embedding <=> %s::vector LIMIT 10", (lit, lit)).fetchall()
                d = [r[1] for r in res]
                assert d == sorted(d), path
                found[path].append([r[0] for r in res])
                plan = [r[0] for r in conn.execute(
                    "EXPLAIN (ANALYZE, COSTS OFF) SELECT id FROM " + table +
                    " ORDER BY embedding <=> %s::vector LIMIT 10", (lit,)).fetchall()]
                line = next(p for p in plan if "streamhnsw: rounds=" in p)
                rounds.append(int(line.split("rounds=")[1].split()[0]))
                labels.append(next(p for p in plan if "first round bound:" in p).split(": ", 1)[1])
            print(f"\n{path}: rounds {sum(rounds) / len(rounds):.2f} mean, {max(rounds)} max; "
                  f"recall@10 {data.recall(found[path], truth, 10):.3f}", end="")
            assert max(rounds) == 1, (path, rounds)
            # what EXPLAIN says held the first round: a query outside the
            # range by more than a code's largest error keeps the worst case
            for far, label in zip(query_out, labels):
                if path == "build":
                    assert label == "typical error", label
                elif far > 1.05 or far < 0.95:
                    assert label == ("worst case (query outside the trained range)" if far > 1
                                     else "typical error, marked rows by how far outside the "
                                     "range they lie"), (far, label)
            # a distance filter in relaxed order ends at its bound, with the
            # rows of a control whose bound it cannot see (marked rows among them)
            for q in queries[:10]:
                lit = data.vector_literal(q)
                d = conn.execute(f"SELECT embedding <=> %s::vector FROM {table} "
                                 "ORDER BY 1 LIMIT 5", (lit,)).fetchall()
                got = bounded_and_control(conn, table, "<=>", lit, (d[3][0] + d[4][0]) / 2,
                                          {"streamhnsw.iterative_scan": "relaxed_order"})
                assert got[0][0] == got[1][0] and (got[0][1], got[1][1]) == (True, False), \
                    (path, [g[:3] for g in got])
        assert data.recall(found["insert"], truth, 10) >= data.recall(found["build"], truth, 10) - 0.02
    finally:
        conn.execute("RESET enable_seqscan")
        for path in ("insert", "build"):
            conn.execute(f"DROP TABLE IF EXISTS oor1_{path}")


def test_limit_past_half_ef_search_widens_the_first_round(conn):
    """
    A strict scan lets out the nearer half of its first round; a LIMIT past
    ef_search / 2 (ef_search equal to the LIMIT, as pgvector asks) used to
    run a second round that looked for twice ef_search new rows and let them
    out only below the frontier as it started, often a third: about twice
    the nodes a search of twice the width expands. Now the first round is
    continued as if it had been twice as wide (EXPLAIN counts that as a
    second round): LIMIT k at ef_search k expands about what ef_search 2k
    does, returns k rows in exact order, and finds at least as many true
    neighbours as pgvector's hnsw at the same ef_search, less 0.005.
    """
    rows, queries = data.clustered(8000, 64, seed=21, normalize=True, n_queries=100)
    truth = data.ground_truth(rows, queries, 40, "cosine")
    data.load(conn, "wid", rows)
    conn.execute("CREATE TABLE wid_pg AS SELECT * FROM wid")
    conn.execute("CREATE INDEX ON wid USING streamhnsw (embedding vector_cosine_ops)")
    conn.execute("CREATE INDEX ON wid_pg USING hnsw (embedding vector_cosine_ops)")
    conn.execute("SET enable_seqscan = off")
    # a budget below the index's size: no sweep, the walk alone
    conn.execute("SET streamhnsw.max_scan_tuples = 2000")
    try:
        for k in (10, 20, 40):
            figures = {}
            for ef in (k, 2 * k):
                conn.execute(f"SET streamhnsw.ef_search = {ef}")
                expanded, rounds, found = 0, [], []
                for q in queries:
                    lit = data.vector_literal(q)
                    res = conn.execute("SELECT id, embedding <=> %s::vector FROM wid "
                                       f"ORDER BY embedding <=> %s::vector LIMIT {k}",
                                       (lit, lit)).fetchall()
                    d = [r[1] for r in res]
                    assert len(res) == k and d == sorted(d) and len({r[0] for r in res}) == k
                    found.append([r[0] for r in res])
                    plan = [r[0] for r in conn.execute(
                        "EXPLAIN (ANALYZE, COSTS OFF) SELECT id FROM wid ORDER BY embedding "
                        f"<=> %s::vector LIMIT {k}", (lit,)).fetchall()]
                    line = next(p for p in plan if "streamhnsw: rounds=" in p)
                    rounds.append(int(line.split("rounds=")[1].split()[0]))
                    expanded += int(line.split("nodes expanded=")[1].split()[0])
                figures[ef] = (expanded, data.recall(found, truth, k), rounds)
            conn.execute(f"SET hnsw.ef_search = {k}")
            pg_found = [[r[0] for r in conn.execute(
                "SELECT id FROM wid_pg ORDER BY embedding <=> %s::vector LIMIT " + str(k),
                (data.vector_literal(q),)).fetchall()] for q in queries]
            pg_recall = data.recall(pg_found, truth, k)
            (e1, r1, rd1), (e2, r2, rd2) = figures[k], figures[2 * k]
            print(f"\nLIMIT {k}: ef_search {k}: {e1} nodes expanded, recall {r1:.3f} "
                  f"(pgvector {pg_recall:.3f}), rounds {sum(rd1) / len(rd1):.2f} mean; "
                  f"ef_search {2 * k}: {e2}, {r2:.3f}, {sum(rd2) / len(rd2):.2f}", end="")
            assert max(rd2) == 1, rd2
            assert e1 <= 1.3 * e2, (k, e1, e2)
            assert r1 >= pg_recall - 0.005, (k, r1, pg_recall)
    finally:
        for name in ("enable_seqscan", "streamhnsw.max_scan_tuples", "streamhnsw.ef_search",
                     "hnsw.ef_search"):
            conn.execute(f"RESET {name}")
        conn.execute("DROP TABLE IF EXISTS wid")
        conn.execute("DROP TABLE IF EXISTS wid_pg")


def test_sweep_threshold_zero_is_exact(conn):
    """
    With max_scan_tuples covering the index and streamhnsw.sweep_threshold
    = 0, a strict scan sweeps before returning any row: at a small
    ef_search, where the first round often settles in the wrong region
    (at the default threshold its rows are returned and later finds nearer
    than them are skipped: printed), every answer is the exact one and
    EXPLAIN counts no row found after a farther one.
    """
    rows, queries = data.clustered(10000, 128, seed=44, n_queries=20)
    data.load(conn, "swz", rows)
    conn.execute("CREATE INDEX swz_idx ON swz USING streamhnsw (embedding vector_l2_ops)")
    conn.execute("VACUUM ANALYZE swz")
    sql = "SELECT id, embedding <-> %s::vector FROM swz ORDER BY embedding <-> %s::vector LIMIT 100"
    skipped = {}
    try:
        for threshold in ("0.25", "0"):
            with conn.transaction(force_rollback=True):
                set_local(conn, {"enable_seqscan": "off", "streamhnsw.ef_search": 16,
                                 "streamhnsw.max_scan_tuples": 1000000,
                                 "streamhnsw.sweep_threshold": threshold})
                skipped[threshold] = 0
                for q in queries:
                    lit = data.vector_literal(q)
                    line = order_line(conn, sql, (lit, lit))
                    skipped[threshold] += int(line.split("found after a farther row=")[1].split()[0]) > 0
                    if threshold != "0":
                        continue
                    assert "found after a farther row=0 " in line, line
                    got = [r[1] for r in conn.execute(sql, (lit, lit)).fetchall()]
                    with conn.transaction(force_rollback=True):
                        conn.execute("SET LOCAL enable_indexscan = off")
                        conn.execute("SET LOCAL enable_seqscan = on")
                        truth = [r[1] for r in conn.execute(sql, (lit, lit)).fetchall()]
                    assert np.allclose(got, truth, rtol=1e-6, atol=1e-6)
        print(f"\nef_search 16 LIMIT 100, 20 queries with rows found after a farther row: "
              f"threshold 0.25 {skipped['0.25']}, threshold 0 {skipped['0']}", end="")
    finally:
        conn.execute("DROP TABLE swz")


def test_sweep_from_image_matches_buffers(conn):
    """
    A sweep reads the graph pages the shared cache holds from the cache
    (plain loads), the others through shared buffers: full and LIMIT scans
    that sweep return the same rows in the same order with the cache and
    without it, and every live row.
    """
    rows, queries = data.clustered(3000, 32, seed=8, n_queries=3)
    data.load(conn, "swi", rows)
    conn.execute("CREATE INDEX swi_idx ON swi USING streamhnsw (embedding vector_cosine_ops)")
    conn.execute("DELETE FROM swi WHERE id % 5 = 2")
    conn.execute("VACUUM ANALYZE swi")
    assert conn.execute("SELECT streamhnsw_cache_load('swi_idx')").fetchone()[0] is not None
    live = {i for i in range(3000) if i % 5 != 2}
    try:
        for limit in (3010, 50):
            sql = ("SELECT id, embedding <=> %s::vector FROM swi "
                   f"ORDER BY embedding <=> %s::vector LIMIT {limit}")
            for q in queries:
                lit = data.vector_literal(q)
                got = {}
                for cache in ("on", "off"):
                    with conn.transaction(force_rollback=True):
                        set_local(conn, {"enable_seqscan": "off",
                                         "streamhnsw.max_scan_tuples": 1000000,
                                         "streamhnsw.sweep_threshold": 0,
                                         "streamhnsw.shared_cache": cache})
                        got[cache] = conn.execute(sql, (lit, lit)).fetchall()
                        plan = [r[0] for r in conn.execute(
                            "EXPLAIN (ANALYZE, COSTS OFF) " + sql, (lit, lit)).fetchall()]
                        assert any("swept nodes=" in p and "swept nodes=0" not in p
                                   for p in plan), plan
                        if cache == "on":
                            assert any("shared cache: used" in p for p in plan), plan
                assert got["on"] == got["off"]
                ids = [r[0] for r in got["on"]]
                assert len(ids) == len(set(ids))
                if limit > 3000:
                    assert set(ids) == live
    finally:
        conn.execute("DROP TABLE swi")
