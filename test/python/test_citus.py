"""streamhnsw on a Citus cluster: a coordinator and two workers on this
machine (python/shnsw/citus.py builds Citus from its source tarball into a
copy of the project's PostgreSQL, once, and skips this tier with the reason
where the tarball is absent).

One distributed table of 20,000 rows (64-d Gaussian, normalized: harder
for a graph than clustered rows; cosine) in 32 shards, distributed by a
tenant column (200 tenants, 100 rows each; every shard holds some), as a
multi-tenant application would shard it. Exact answers come from numpy
(enable_indexscan set on the coordinator does not reach the shards); before
the index exists the coordinator's merged top 10 is checked against them by
distance.

- CREATE INDEX on the coordinator makes one streamhnsw index per shard;
- recall@10 of 30 multi-shard queries at default settings >= 0.95, every
  shard query an index scan with the LIMIT pushed down;
- the index option ef_search (ALTER INDEX from the coordinator) is in force
  on every shard (EXPLAIN (ANALYZE) with citus.explain_all_tasks: every
  task's "streamhnsw search" line names it), which a plain SET on the
  coordinator never changes, and SET LOCAL with
  citus.propagate_set_commands = 'local' overrides;
- a prepared statement with the vector as $1, executed more times than it
  takes PostgreSQL to switch to a generic plan, returns what the plain
  query returns;
- a filter on the distribution column routes the query to one shard
  (Task Count: 1), with recall against the tenant's exact answer;
- INSERT, DELETE and VACUUM through the coordinator, then search;
- a shard moved to the other worker (block_writes) keeps a working index
  there, and searches through the coordinator still return the right rows;
- a worker whose shared cache holds fewer copies than it has shard indexes
  answers as with the cache off.
"""

import re
import time

import numpy as np
import pytest

from shnsw import citus
from shnsw import data

pytestmark = pytest.mark.citus

N, DIM, K, NQ = 20000, 64, 10, 30
TENANTS = 200
SHARDS = 32
SEARCH = f"SELECT id FROM items ORDER BY embedding <=> %s::vector LIMIT {K}"
TENANT_SEARCH = (f"SELECT id FROM items WHERE tenant = %s "
                 f"ORDER BY embedding <=> %s::vector LIMIT {K}")


def _tenant(ids):
    return np.asarray(ids) % TENANTS


@pytest.fixture(scope="module")
def cc():
    why = citus.unavailable()
    if why:
        pytest.skip(why)
    with citus.CitusCluster() as c:
        yield c


@pytest.fixture(scope="module")
def items(cc):
    """The distributed table, its exact answers, then its index."""
    rng = np.random.default_rng(4701)
    xq = rng.normal(size=(N + NQ, DIM)).astype(np.float32)
    xq /= np.linalg.norm(xq, axis=1, keepdims=True)
    x, q = xq[:N], xq[N:]
    with cc.connect() as conn:
        conn.execute("SET citus.shard_count = %s" % SHARDS)
        conn.execute(f"CREATE TABLE items (id bigint NOT NULL, tenant int NOT NULL, "
                     f"embedding vector({DIM}))")
        conn.execute("SELECT create_distributed_table('items', 'tenant')")
        with conn.cursor().copy("COPY items (id, tenant, embedding) FROM STDIN") as cp:
            for i in range(N):
                cp.write_row((i, i % TENANTS, data.vector_literal(x[i])))
        conn.execute("ANALYZE items")
        truth = data.ground_truth(x, q, K, metric="cosine")
        # no index yet: the coordinator merges the shards' exact top 10s
        for qv, t in zip(q[:5], truth[:5]):
            got = conn.execute(f"SELECT embedding <=> %s::vector AS d FROM items "
                               f"ORDER BY d LIMIT {K}", (data.vector_literal(qv),)).fetchall()
            want = 1.0 - x[t] @ qv
            assert np.allclose([r[0] for r in got], want, atol=1e-5), (got, want)
        conn.execute("CREATE INDEX items_emb ON items USING streamhnsw "
                     "(embedding vector_cosine_ops)")
    return x, q, truth


def _search_all(conn, q, sql=SEARCH, **kw):
    return [[r[0] for r in conn.execute(sql, (data.vector_literal(v),), **kw).fetchall()]
            for v in q]


def _task_plans(conn, qv, sql=SEARCH, params=()):
    """EXPLAIN (ANALYZE) of a search with every task's plan; returns the lines."""
    conn.execute("SET citus.explain_all_tasks = on")
    try:
        return [r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql,
                                           (*params, data.vector_literal(qv))).fetchall()]
    finally:
        conn.execute("RESET citus.explain_all_tasks")


def _used(plan):
    return [p.strip() for p in plan if "streamhnsw search:" in p]


def _expanded(plan):
    return [int(p.split("nodes expanded=")[1].split()[0]) for p in plan
            if "streamhnsw: rounds=" in p]


def test_index_on_every_shard(cc, items):
    """One streamhnsw index per shard, on the worker that holds the shard."""
    shards = cc.execute("SELECT shardid, nodeport FROM citus_shards "
                        "WHERE table_name = 'items'::regclass")
    assert len(shards) == SHARDS
    per_worker = {}
    for w in cc.workers:
        with w.connect() as conn:
            conn.execute("SET citus.override_table_visibility = off")
            rows = conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_am a ON a.oid = c.relam "
                "WHERE a.amname = 'streamhnsw' AND c.relname ~ '^items_emb_[0-9]+$'").fetchall()
            per_worker[w.port] = {int(r[0].rsplit("_", 1)[1]) for r in rows}
    for shardid, port in shards:
        assert shardid in per_worker[port], (shardid, port, per_worker)
    assert all(len(v) >= SHARDS // 4 for v in per_worker.values()), per_worker


def test_recall_at_default_settings(cc, items):
    x, q, truth = items
    with cc.connect() as conn:
        plan = _task_plans(conn, q[0])
        assert any(f"Task Count: {SHARDS}" in p for p in plan), plan
        scans = [p for p in plan if "Index Scan using items_emb_" in p]
        assert len(scans) == SHARDS, "\n".join(plan)
        assert len([p for p in plan if "Limit" in p]) >= SHARDS + 1, plan
        assert set(_used(plan)) == {"streamhnsw search: ef_search=40 (streamhnsw.ef_search)"}
        r = data.recall(_search_all(conn, q), truth, K)
    print(f"\ncitus: recall@{K} over {SHARDS} shards at default settings: {r:.4f}")
    assert r >= 0.95, r


def test_index_option_reaches_every_shard(cc, items):
    x, q, truth = items
    with cc.connect() as conn:
        conn.execute("ALTER INDEX items_emb SET (ef_search = 100)")
        try:
            plan = _task_plans(conn, q[1])
            used = _used(plan)
            assert used == ["streamhnsw search: ef_search=100 (index option)"] * SHARDS, plan
            # an empty shard's scan expands nothing; the others a first round of 100
            expanded = _expanded(plan)
            assert len(expanded) == SHARDS
            assert all(e >= 100 or e == 0 for e in expanded), expanded
            assert sum(e >= 100 for e in expanded) >= SHARDS // 2, expanded

            # a plain SET on the coordinator does not reach the shards
            conn.execute("SET streamhnsw.ef_search = 200")
            assert _used(_task_plans(conn, q[1])) == used
            conn.execute("RESET streamhnsw.ef_search")

            # SET LOCAL, propagated, overrides the option on every shard
            conn.execute("SET citus.propagate_set_commands = 'local'")
            with conn.transaction():
                conn.execute("SET LOCAL streamhnsw.ef_search = 200")
                plan = _task_plans(conn, q[1])
            assert _used(plan) == ["streamhnsw search: ef_search=200 (streamhnsw.ef_search)"] \
                * SHARDS, plan
            assert all(e >= 200 or e == 0 for e in _expanded(plan))
            conn.execute("RESET citus.propagate_set_commands")

            r = data.recall(_search_all(conn, q), truth, K)
            print(f"\ncitus: recall@{K} with the index option ef_search 100: {r:.4f}")
            assert r >= 0.98, r

            # ALTER DATABASE reaches the workers, for new shard sessions (a
            # new coordinator session opens new ones); it overrides the option
            conn.execute("ALTER DATABASE postgres SET streamhnsw.ef_search = 60")
            try:
                with cc.connect() as fresh:
                    plan = _task_plans(fresh, q[1])
                assert _used(plan) == \
                    ["streamhnsw search: ef_search=60 (streamhnsw.ef_search)"] * SHARDS, \
                    "\n".join(plan)
            finally:
                conn.execute("ALTER DATABASE postgres RESET streamhnsw.ef_search")
            with cc.connect() as fresh:
                assert _used(_task_plans(fresh, q[1])) == used
        finally:
            conn.execute("ALTER INDEX items_emb RESET (ef_search)")
        assert set(_used(_task_plans(conn, q[1]))) == \
            {"streamhnsw search: ef_search=40 (streamhnsw.ef_search)"}


def test_prepared_statement(cc, items):
    """The vector as $1: SQL PREPARE and psycopg's protocol-level prepare,
    each run more often than the five custom plans before a generic one."""
    x, q, truth = items
    with cc.connect() as conn:
        plain = _search_all(conn, q[:8])
        conn.execute(f"PREPARE knn(vector) AS SELECT id FROM items "
                     f"ORDER BY embedding <=> $1 LIMIT {K}")
        # the literal in the EXECUTE text: a parameter of EXECUTE itself
        # reaches the workers untyped in Citus 14 ("could not determine
        # data type of parameter $1"), as with EXPLAIN EXECUTE (the notes)
        prepared = [[r[0] for r in conn.execute(
            f"EXECUTE knn('{data.vector_literal(v)}')").fetchall()] for v in q[:8]]
        assert prepared == plain
        plan = [r[0] for r in conn.execute(
            f"EXPLAIN (ANALYZE, COSTS OFF) EXECUTE knn('{data.vector_literal(q[0])}')").fetchall()]
        assert any(f"Task Count: {SHARDS}" in p for p in plan), plan
        conn.execute("DEALLOCATE knn")
    with cc.connect() as conn:
        again = [[r[0] for r in conn.execute(
            SEARCH, (data.vector_literal(v),), prepare=True).fetchall()] for v in q[:8]]
        assert again == plain
        assert data.recall(again, truth[:8], K) >= 0.95


def test_single_shard_routing(cc, items):
    """WHERE tenant = t: one task, on the shard holding t. The shard's
    planner picks its plan by cost: here a shard holds 10 tenants (about
    1,000 rows) and it reads them all (exact); with sequential scans off
    (SET LOCAL, propagated) the streamhnsw scan with the filter answers,
    and its recall is checked against the tenant's exact answer too."""
    x, q, truth = items
    tenant_of = _tenant(np.arange(N))
    cases = []
    for i, qv in enumerate(q[:15]):
        t = int(7 * i + 3) % TENANTS
        rows = np.flatnonzero(tenant_of == t)
        cases.append((t, qv, rows[data.ground_truth(x[rows], qv[None, :], K, metric="cosine")[0]]))
    exact = np.array([c[2] for c in cases])
    with cc.connect() as conn:
        by_cost = [[r[0] for r in conn.execute(TENANT_SEARCH, (t, data.vector_literal(qv))).fetchall()]
                   for t, qv, _ in cases]
        plan = _task_plans(conn, q[0], TENANT_SEARCH, (3,))
        assert any("Task Count: 1" in p for p in plan), "\n".join(plan)
        conn.execute("SET citus.propagate_set_commands = 'local'")
        with conn.transaction():
            conn.execute("SET LOCAL enable_seqscan = off")
            forced = [[r[0] for r in conn.execute(
                TENANT_SEARCH, (t, data.vector_literal(qv))).fetchall()] for t, qv, _ in cases]
            iplan = _task_plans(conn, q[0], TENANT_SEARCH, (3,))
        conn.execute("RESET citus.propagate_set_commands")
    assert any("Task Count: 1" in p for p in iplan), "\n".join(iplan)
    assert sum("Index Scan using items_emb_" in p for p in iplan) == 1, "\n".join(iplan)
    for found in (by_cost, forced):
        assert all(len(f) == K for f in found)
        assert all(tenant_of[i] == c[0] for f, c in zip(found, cases) for i in f)
    r_cost = data.recall(by_cost, exact, K)
    r_index = data.recall(forced, exact, K)
    shard_plan = "index" if any("Index Scan using" in p for p in plan) else "sequential scan"
    print(f"\ncitus: single-tenant recall@{K}: planner's choice ({shard_plan}) {r_cost:.4f}, "
          f"streamhnsw with the filter {r_index:.4f}")
    assert r_cost >= 0.95 and r_index >= 0.95, (r_cost, r_index)


def test_insert_delete_vacuum(cc, items):
    """New rows near the queries are found at once; deleted rows are never
    returned, before and after VACUUM; recall against the changed table."""
    x, q, truth = items
    rng = np.random.default_rng(4702)
    near = q[:10] + rng.normal(0, 0.01, size=(10, DIM)).astype(np.float32)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    new_ids = list(range(N, N + 10))
    gone = [int(t[0]) for t in truth[10:20]]
    with cc.connect() as conn:
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO items (id, tenant, embedding) VALUES (%s, %s, %s::vector)",
                            [(i, i % TENANTS, data.vector_literal(v))
                             for i, v in zip(new_ids, near)])
        for i, v in zip(new_ids, q[:10]):
            assert conn.execute(SEARCH, (data.vector_literal(v),)).fetchall()[0][0] == i
        conn.execute("DELETE FROM items WHERE id = ANY(%s)", (gone,))
        before = _search_all(conn, q[10:20])
        conn.execute("VACUUM items")
        after = _search_all(conn, q[10:20])
        assert not set(gone) & {i for f in before + after for i in f}
        alive = np.ones(N + 10, dtype=bool)
        alive[gone] = False
        allx = np.vstack([x, near])
        rows = np.flatnonzero(alive)
        t2 = rows[data.ground_truth(allx[rows], q, K, metric="cosine")]
        r = data.recall(_search_all(conn, q), t2, K)
        print(f"\ncitus: recall@{K} after insert + delete + VACUUM: {r:.4f}")
        assert r >= 0.95, r
        # put the table back as the other tests expect it
        conn.execute("DELETE FROM items WHERE id >= %s", (N,))
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO items (id, tenant, embedding) VALUES (%s, %s, %s::vector)",
                            [(i, i % TENANTS, data.vector_literal(x[i])) for i in gone])


def test_shard_move(cc, items):
    """Move the shard of one tenant to the other worker (block_writes): the
    index is built there and passes streamhnsw_verify, the multi-shard
    query's task for that shard scans it on the new worker, and tenant
    (through the moved index) and multi-shard searches still answer
    correctly."""
    x, q, truth = items
    t = 42
    shard = cc.execute("SELECT get_shard_id_for_distribution_column('items', %s)", (t,))[0][0]
    src = cc.execute("SELECT nodeport FROM citus_shards WHERE shardid = %s", (shard,))[0][0]
    dst = next(w.port for w in cc.workers if w.port != src)
    tenant_rows = np.flatnonzero(_tenant(np.arange(N)) == t)
    exact = np.array([tenant_rows[data.ground_truth(x[tenant_rows], v[None, :], K,
                                                    metric="cosine")[0]] for v in q[:10]])

    def tenant_search(conn):
        conn.execute("SET citus.propagate_set_commands = 'local'")
        with conn.transaction():
            conn.execute("SET LOCAL enable_seqscan = off")
            found = [[r[0] for r in conn.execute(
                TENANT_SEARCH, (t, data.vector_literal(v))).fetchall()] for v in q[:10]]
            plan = _task_plans(conn, q[0], TENANT_SEARCH, (t,))
        conn.execute("RESET citus.propagate_set_commands")
        return found, plan

    with cc.connect() as conn:
        before, _ = tenant_search(conn)
        conn.execute("SELECT citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s, "
                     "shard_transfer_mode := 'block_writes')", (shard, src, dst))
        assert conn.execute("SELECT nodeport FROM citus_shards WHERE shardid = %s",
                            (shard,)).fetchall() == [(dst,)]
    # a new session: its shard connections know the new placement
    with cc.connect() as conn:
        after, tplan = tenant_search(conn)
        plan = _task_plans(conn, q[0])
        r_all = data.recall(_search_all(conn, q), truth, K)
    for p in (tplan, plan):
        at = next(n for n, line in enumerate(p) if f"Index Scan using items_emb_{shard} " in line)
        node = next(line for line in reversed(p[:at]) if "Node: host=" in line)
        assert f"port={dst} " in node, "\n".join(p)
    with cc.worker_of_port(dst).connect() as w:
        w.execute("SET citus.override_table_visibility = off")
        # streamhnsw_verify returns one row per problem it finds
        assert w.execute("SELECT * FROM streamhnsw_verify(%s)",
                         (f"items_emb_{shard}",)).fetchall() == []
        n = w.execute(f"SELECT count(*) FROM items_{shard} WHERE tenant = %s", (t,)).fetchone()[0]
        assert n == len(tenant_rows)
    r_before = data.recall(before, exact, K)
    r_after = data.recall(after, exact, K)
    print(f"\ncitus: tenant recall@{K} through its index before the move {r_before:.4f}, "
          f"after {r_after:.4f}; all shards after {r_all:.4f}")
    assert r_after >= 0.95 and r_all >= 0.95, (r_after, r_all)


def _worker_copies(w):
    """(ready copies, their bytes, shard indexes) on worker w."""
    with w.connect() as c:
        c.execute("SET citus.override_table_visibility = off")
        ready, nbytes = c.execute("SELECT count(*), coalesce(sum(bytes), 0) "
                                  "FROM streamhnsw_cache_list() WHERE state = 'ready'").fetchone()
        shards = c.execute("SELECT count(*) FROM pg_class "
                           "WHERE relname ~ '^items_emb_[0-9]+$'").fetchone()[0]
    return ready, nbytes, shards


def test_worker_with_more_shards_than_its_cache_holds(cc, items):
    """Each worker's shared cache budget (1 MB) holds a few of its shard
    indexes' copies: those shards search their copy, the others search
    through buffers, and every answer is the one given with the cache off."""
    x, q, truth = items
    for w in cc.workers:
        with w.connect() as c:
            c.execute("SET citus.override_table_visibility = off")
            c.execute("SELECT streamhnsw_cache_drop(l.index) FROM streamhnsw_cache_list() l "
                      "WHERE l.state = 'ready'")
            c.execute("ALTER SYSTEM SET streamhnsw.shared_cache_size = '1MB'")
            c.execute("SELECT pg_reload_conf()")
    try:
        with cc.connect() as conn:
            # scans start the builds; those that fit in the budget finish
            deadline = time.time() + 60
            while True:
                on = _search_all(conn, q)
                copies = [_worker_copies(w) for w in cc.workers]
                if all(r >= 1 for r, _, _ in copies) or time.time() > deadline:
                    break
                time.sleep(0.5)
            for ready, nbytes, shards in copies:
                assert 1 <= ready < shards, copies
                assert nbytes <= 1024 * 1024, copies
            # the coordinator lists each worker's copies by shard index
            listed = conn.execute(
                "SELECT nodeport, success, result FROM run_command_on_workers("
                "$$SELECT string_agg(index::regclass::text, ',') FROM streamhnsw_cache_list() "
                "WHERE state = 'ready'$$) ORDER BY nodeport").fetchall()
            assert len(listed) == len(cc.workers), listed
            for port, ok, result in listed:
                names = result.split(",") if ok and result else []
                assert names and all(re.fullmatch(r"items_emb_[0-9]+", n) for n in names), listed
            plan = _task_plans(conn, q[0])
            cached = [p for p in plan if "shared cache: used" in p]
            assert 0 < len(cached) < SHARDS, "\n".join(plan)
            conn.execute("SET citus.propagate_set_commands = 'local'")
            with conn.transaction():
                conn.execute("SET LOCAL streamhnsw.shared_cache = off")
                off = _search_all(conn, q)
            conn.execute("RESET citus.propagate_set_commands")
        assert on == off
        assert data.recall(on, truth, K) >= 0.95
    finally:
        for w in cc.workers:
            with w.connect() as c:
                c.execute("ALTER SYSTEM RESET streamhnsw.shared_cache_size")
                c.execute("SELECT pg_reload_conf()")
