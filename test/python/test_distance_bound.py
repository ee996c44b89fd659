"""A WHERE clause bounding the ORDER BY distance ends the scan.

pgvector documents `WHERE v <-> q < r ORDER BY v <-> q LIMIT k` as the way
to combine a distance filter with its index. When fewer than k rows lie
within r, a strict-order scan that did not know the bound would go on
offering rows the filter rejects, through the whole index; with the bound
(src/bound.c) it ends at the first row past r.

Each bounded query is compared with a control that filters on the same
distance but through an expression of a column (`r + 0 * i`), which
src/bound.c does not take as a bound: the same scan then runs past r.
Both must return the same rows (a strict-order scan returns no row nearer
than one it already returned; a relaxed-order one the same set), and
EXPLAIN shows which one ended at the bound and how many rows the filter
removed.
"""

import re

import pytest

DIM = 16
ROWS = 5000


@pytest.fixture(scope="module")
def table(cluster):
    with cluster.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS dbound")
        conn.execute(f"CREATE TABLE dbound (i int4 PRIMARY KEY, v vector({DIM}))")
        conn.execute("SELECT setseed(0.21)")
        conn.execute("INSERT INTO dbound SELECT i, ARRAY[" + ",".join(["random()"] * DIM)
                     + f"] FROM generate_series(1, {ROWS}) i")
        conn.execute("CREATE INDEX dbound_l2 ON dbound USING streamhnsw (v vector_l2_ops)")
        conn.execute("ANALYZE dbound")
    yield "dbound"
    with cluster.connect() as conn:
        conn.execute("DROP TABLE dbound")


def query_vector(conn, i):
    return conn.execute("SELECT v::text FROM dbound WHERE i = %s", (i,)).fetchone()[0]


def exact_distances(conn, q, n):
    """The n smallest exact distances to q (sequential scan and sort)."""
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        return [r[0] for r in conn.execute(
            "SELECT v <-> %s::vector FROM dbound ORDER BY 1 LIMIT %s", (q, n)).fetchall()]


def run(conn, sql, params):
    """Rows, and EXPLAIN ANALYZE's filter removals and distance-bound ends."""
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        rows = [r[0] if len(r) == 1 else tuple(r) for r in conn.execute(sql, params).fetchall()]
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql,
                                                    params).fetchall())
    assert "Index Scan using dbound_l2" in plan, plan
    removed = sum(int(x) for x in re.findall(r"Rows Removed by Filter: (\d+)", plan))
    ends = sum(int(x) for x in re.findall(r"ended at distance bound=(\d+)", plan))
    return rows, removed, ends


SHAPES = {
    "d < r": ("v <-> %(q)s::vector < %(r)s::float8", "v <-> %(q)s::vector < %(r)s::float8 + 0 * i"),
    "d <= r": ("v <-> %(q)s::vector <= %(r)s::float8", "v <-> %(q)s::vector <= %(r)s::float8 + 0 * i"),
    "r > d": ("%(r)s::float8 > v <-> %(q)s::vector", "%(r)s::float8 + 0 * i > v <-> %(q)s::vector"),
    "r >= d": ("%(r)s::float8 >= v <-> %(q)s::vector", "%(r)s::float8 + 0 * i >= v <-> %(q)s::vector"),
    "d < float4": ("v <-> %(q)s::vector < %(r)s::float4", "v <-> %(q)s::vector < %(r)s::float4 + 0 * i"),
    "d < (SELECT r)": ("v <-> %(q)s::vector < (SELECT %(r)s::float8)",
                       "v <-> %(q)s::vector < (SELECT %(r)s::float8) + 0 * i"),
    # monotone functions of the distance (a similarity threshold, pgvector's
    # negated inner product), inverted by the scan
    "1 - d > 1 - r": ("1 - (v <-> %(q)s::vector) > 1 - %(r)s::float8",
                      "1 - (v <-> %(q)s::vector) > 1 - %(r)s::float8 + 0 * i"),
    "d * -1 > -r": ("(v <-> %(q)s::vector) * -1 > -%(r)s::float8",
                    "(v <-> %(q)s::vector) * -1 > -%(r)s::float8 + 0 * i"),
    "-d >= -r": ("-(v <-> %(q)s::vector) >= -%(r)s::float8",
                 "-(v <-> %(q)s::vector) >= -%(r)s::float8 + 0 * i"),
    "(d + 2) / 4 < (r + 2) / 4": ("((v <-> %(q)s::vector) + 2) / 4 < (%(r)s::float8 + 2) / 4",
                                  "((v <-> %(q)s::vector) + 2) / 4 < (%(r)s::float8 + 2) / 4 + 0 * i"),
    "2 - d * 3 > 2 - 3r": ("2 - (v <-> %(q)s::vector) * 3 > 2 - 3 * %(r)s::float8",
                           "2 - (v <-> %(q)s::vector) * 3 > 2 - 3 * %(r)s::float8 + 0 * i"),
}


@pytest.mark.parametrize("clause", [
    "1 - (v <-> %(q)s::vector) < %(r)s",     # a lower bound on the distance
    "(v <-> %(q)s::vector) * -1 < %(r)s",
    "(v <-> %(q)s::vector) * i < %(r)s",     # not monotone in a known way
    "abs(v <-> %(q)s::vector) < %(r)s",      # a function: not taken
    "v <-> %(q)s::vector < %(r)s + random() * 0",  # volatile
])
def test_no_bound_is_taken_where_none_holds(conn, table, clause):
    """Shapes that do not bound the distance from above: the scan runs on."""
    q = query_vector(conn, 77)
    rows, removed, ends = run(conn, f"SELECT i FROM dbound WHERE {clause} "
                              "ORDER BY v <-> %(q)s::vector LIMIT 10", {"q": q, "r": -1.0})
    assert ends == 0, clause


EXACT = ("d < r", "d <= r", "r > d", "r >= d", "d < float4", "d < (SELECT r)")


@pytest.mark.parametrize("shape", list(SHAPES))
def test_bound_ends_the_scan_with_the_same_rows(conn, table, shape):
    bounded, control = SHAPES[shape]
    for qi in (7, 1234, 4321):
        q = query_vector(conn, qi)
        exact = exact_distances(conn, q, 60)
        # radii: nothing within (below the nearest row; q is a row, at 0),
        # exactly at the 3rd nearest row (< and <= differ there), between
        # the 5th and 6th, and far enough that LIMIT 10 ends the scan first
        for r, within in ((-1.0, 0), (exact[2], None), ((exact[4] + exact[5]) / 2, 5),
                          (exact[50], None)):
            params = {"q": q, "r": r}
            sql = "SELECT i FROM dbound WHERE {} ORDER BY v <-> %(q)s::vector LIMIT 10"
            rows, removed, ends = run(conn, sql.format(bounded), params)
            crows, cremoved, cends = run(conn, sql.format(control), params)
            label = (shape, qi, r)
            assert rows == crows, label
            assert cends == 0, label
            if within is not None:
                assert len(rows) == within, (label, rows)
            if len(rows) < 10:
                # fewer rows than the LIMIT within r: the bounded scan ended
                # at it without offering the filter a row (a bound inverted
                # through arithmetic is widened by a few units in the last
                # place: a row at the bound itself may be offered); the
                # control did not end
                assert ends == 1 and removed <= (0 if shape in EXACT else 1), (label, ends, removed)
                assert cremoved > 0, (label, cremoved)
            else:
                assert ends == 0, label


def test_bound_equal_to_a_row_distance(conn, table):
    """< excludes a row at exactly the bound, <= includes it."""
    q = query_vector(conn, 99)
    third = exact_distances(conn, q, 3)[2]
    sql = "SELECT i FROM dbound WHERE v <-> %(q)s::vector {} %(r)s ORDER BY v <-> %(q)s::vector LIMIT 10"
    lt, _, lt_ends = run(conn, sql.format("<"), {"q": q, "r": third})
    le, _, le_ends = run(conn, sql.format("<="), {"q": q, "r": third})
    assert (len(lt), len(le), lt_ends, le_ends) == (2, 3, 1, 1), (lt, le)


def test_null_bound_passes_no_row(conn, table):
    q = query_vector(conn, 5)
    rows, removed, ends = run(conn, "SELECT i FROM dbound WHERE v <-> %(q)s::vector < "
                              "(SELECT NULL::float8) ORDER BY v <-> %(q)s::vector LIMIT 10", {"q": q})
    assert (rows, removed, ends) == ([], 0, 1)


def test_prepared_generic_plan(conn, table):
    """A parameter of a generic plan is a bound too."""
    q = query_vector(conn, 42)
    r = exact_distances(conn, q, 5)[3]
    conn.execute("PREPARE dbq(vector, float8) AS SELECT i FROM dbound WHERE v <-> $1 <= $2 "
                 "ORDER BY v <-> $1 LIMIT 10")
    try:
        with conn.transaction():
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            conn.execute("SET LOCAL enable_seqscan = off")
            # EXECUTE is a utility statement: its arguments are literals
            execute = f"EXECUTE dbq('{q}', {r!r})"
            rows = conn.execute(execute).fetchall()
            plan = "\n".join(x[0] for x in conn.execute(
                "EXPLAIN (ANALYZE, COSTS OFF) " + execute).fetchall())
        assert len(rows) == 4, rows
        assert "$2" in plan and "ended at distance bound=1" in plan, plan
    finally:
        conn.execute("DEALLOCATE dbq")


def test_lateral_bound_changes_at_each_rescan(conn, table):
    """A nested loop's parameter: each outer row rescans with its own bound."""
    conn.execute(f"CREATE TEMP TABLE dbq (qi int4, qv vector({DIM}), r float8)")
    try:
        want = {}
        for qi, n in ((3, 0), (17, 2), (250, 4), (4000, 7)):
            q = query_vector(conn, qi)
            d = exact_distances(conn, q, n + 1)
            r = (d[n - 1] + d[n]) / 2 if n > 0 else -1.0
            conn.execute("INSERT INTO dbq VALUES (%s, %s, %s)", (qi, q, r))
            want[qi] = n
        sql = ("SELECT q.qi, n.i FROM dbq q CROSS JOIN LATERAL (SELECT d.i FROM dbound d "
               "WHERE d.v <-> q.qv < q.r{} ORDER BY d.v <-> q.qv LIMIT 10) n ORDER BY 1, 2")
        rows, removed, ends = run(conn, sql.format(""), {})
        crows, _, cends = run(conn, sql.format(" + 0 * d.i"), {})
        assert rows == crows
        got = {qi: sum(1 for r in rows if r[0] == qi) for qi in want}
        assert got == want, got
        assert (ends, removed, cends) == (4, 0, 0), (ends, removed, cends)
    finally:
        conn.execute("DROP TABLE dbq")


@pytest.mark.parametrize("shape", ["d < r", "r >= d", "1 - d > 1 - r", "2 - d * 3 > 2 - 3r"])
def test_relaxed_order_ends_at_the_bound(conn, table, shape):
    """Relaxed order returns rows as it finds them; it skips those past the
    bound and ends when no row it has not returned can be within it: the
    same set of rows as the control, which runs on through the index."""
    bounded, control = SHAPES[shape]
    sql = "SELECT i FROM dbound WHERE {} ORDER BY v <-> %(q)s::vector LIMIT 10"
    for qi in (11, 2222, 3333):
        q = query_vector(conn, qi)
        exact = exact_distances(conn, q, 60)
        for r, within in ((-1.0, 0), ((exact[3] + exact[4]) / 2, 4), (exact[50], 10)):
            params = {"q": q, "r": r}
            with conn.transaction():
                conn.execute("SET LOCAL streamhnsw.iterative_scan = relaxed_order")
                rows, removed, ends = run(conn, sql.format(bounded), params)
                crows, cremoved, cends = run(conn, sql.format(control), params)
            label = (shape, qi, r)
            assert sorted(rows) == sorted(crows) and len(rows) == within, (label, rows, crows)
            assert cends == 0, label
            if within < 10:
                assert ends == 1 and removed <= (0 if shape in EXACT else 1), (label, ends, removed)
                assert cremoved > 0, (label, cremoved)
            else:
                assert ends == 0, label


@pytest.mark.parametrize("typ", ["vector", "halfvec"])
@pytest.mark.parametrize("metric,op", [("l2", "<->"), ("cosine", "<=>"), ("ip", "<#>")])
def test_every_class_and_type(conn, typ, metric, op):
    """The bound ends the scan for every operator class, vector and halfvec,
    image on and off, with the rows of the unbounded control."""
    t = f"dbound_{typ}_{metric}"
    conn.execute(f"DROP TABLE IF EXISTS {t}")
    conn.execute(f"CREATE TABLE {t} (i int4 PRIMARY KEY, v {typ}(8))")
    conn.execute("SELECT setseed(0.57)")
    conn.execute(f"INSERT INTO {t} SELECT i, ARRAY[" + ",".join(["random() - 0.3"] * 8)
                 + "] FROM generate_series(1, 3000) i")
    conn.execute(f"CREATE INDEX ON {t} USING streamhnsw (v {typ}_{metric}_ops)")
    try:
        for cache in ("off", "on"):
            for qi in (5, 500):
                q = conn.execute(f"SELECT v::text FROM {t} WHERE i = %s", (qi,)).fetchone()[0]
                with conn.transaction():
                    conn.execute("SET LOCAL enable_indexscan = off")
                    d = [r[0] for r in conn.execute(
                        f"SELECT v {op} %s::{typ} FROM {t} ORDER BY 1 LIMIT 6", (q,)).fetchall()]
                r = (d[3] + d[4]) / 2
                sql = (f"SELECT i FROM {t} WHERE v {op} %(q)s::{typ} < %(r)s{{}} "
                       f"ORDER BY v {op} %(q)s::{typ} LIMIT 10")
                results = []
                for extra in ("", " + 0 * i"):
                    with conn.transaction():
                        conn.execute(f"SET LOCAL streamhnsw.shared_cache = {cache}")
                        conn.execute("SET LOCAL enable_seqscan = off")
                        rows = [x[0] for x in conn.execute(sql.format(extra), {"q": q, "r": r})]
                        plan = "\n".join(x[0] for x in conn.execute(
                            "EXPLAIN (ANALYZE, COSTS OFF) " + sql.format(extra), {"q": q, "r": r}))
                    results.append((rows, "ended at distance bound=1" in plan))
                (rows, ended), (crows, cended) = results
                label = (typ, metric, cache, qi)
                assert rows == crows and (ended, cended) == (True, False), (label, results)
                assert len(rows) <= 4, (label, rows)
    finally:
        conn.execute(f"DROP TABLE {t}")
