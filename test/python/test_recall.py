"""Recall side by side with pgvector's hnsw on the same rows (issue 14).

Fixed seeds and small sizes, so each test runs in seconds. pgvector draws
its levels from the server's random state, so its recall moves a little
from run to run: its index is built three times and the median compared,
with the issue's 0.005.
"""

import random
import statistics
import threading

import numpy as np
import pytest

from shnsw import data

OPS = {"l2": ("<->", "vector_l2_ops"), "cosine": ("<=>", "vector_cosine_ops"),
       "ip": ("<#>", "vector_ip_ops"), "l1": ("<+>", "vector_l1_ops")}


def _recall(conn, table, op, lits, truth, k, ids=None):
    """recall@k of the index's answers; ids maps a row's id to its index in
    the truth (rows loaded in another order)"""
    found = [[r[0] if ids is None else int(ids[r[0]]) for r in conn.execute(
        f"SELECT id FROM {table} ORDER BY embedding {op} %s::vector LIMIT {k}", (lit,))]
        for lit in lits]
    return data.recall(found, truth, k)


@pytest.mark.parametrize("metric,path", [
    ("l2", "build"),
    ("cosine", "build"),
    ("l2", "insert"),
    ("cosine", "insert")])
def test_recall_not_below_pgvector(conn, metric, path):
    """
    recall@10 at ef_search 10, 20, 40 and 100 >= pgvector's - 0.005, the
    median of each engine over three builds (or three insert runs) of the
    same rows in three orders, the same for both. A graph is one draw:
    pgvector's levels are random, streamhnsw's are seeded, so one order is
    one sample of it. In the first order alone streamhnsw's insert-built
    graph gave 0.959 at ef_search 10 against pgvector's 0.961 to 0.966
    (a CI failure); over five orders the medians were 0.959 and 0.954.
    """
    rows, queries = data.clustered(4000, 64, seed=14, normalize=metric == "cosine",
                                   n_queries=100)
    truth = data.ground_truth(rows, queries, 10, metric)
    orders = [np.arange(len(rows))] + [np.random.default_rng(s).permutation(len(rows))
                                       for s in (1, 2)]
    op, opclass = OPS[metric]
    lits = [data.vector_literal(q) for q in queries]
    tables = {"hnsw": f"r_pgv_{metric}_{path}", "streamhnsw": f"r_sh_{metric}_{path}"}
    efs = (10, 20, 40, 100)
    found = {"hnsw": [], "streamhnsw": []}
    try:
        for am, table in tables.items():
            for order in orders:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
                if path == "build":
                    data.load(conn, table, rows[order])
                    conn.execute(f"CREATE INDEX ON {table} USING {am} (embedding {opclass})")
                else:
                    conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, "
                                 "embedding vector(64))")
                    conn.execute(f"CREATE INDEX ON {table} USING {am} (embedding {opclass})")
                    data.load(conn, table, rows[order], create=False)
                conn.execute("SET enable_seqscan = off")
                rec = {}
                for ef in efs:
                    conn.execute(f"SET hnsw.ef_search = {ef}")
                    conn.execute(f"SET streamhnsw.ef_search = {ef}")
                    rec[ef] = _recall(conn, table, op, lits, truth, 10, order)
                found[am].append(rec)
        for ef in efs:
            pgv = statistics.median(r[ef] for r in found["hnsw"])
            ours = statistics.median(r[ef] for r in found["streamhnsw"])
            print(f"\n{metric} {path} ef_search {ef}: streamhnsw {ours:.3f} pgvector {pgv:.3f}",
                  end="")
            assert ours >= pgv - 0.005, (ef, ours, pgv)
    finally:
        for setting in ("enable_seqscan", "hnsw.ef_search", "streamhnsw.ef_search"):
            conn.execute(f"RESET {setting}")
        for table in tables.values():
            conn.execute(f"DROP TABLE IF EXISTS {table}")


@pytest.mark.parametrize("typ", ["vector", "halfvec"])
def test_l1_recall_not_below_pgvector(conn, typ):
    """
    vector_l1_ops and halfvec_l1_ops: recall@10 at the default settings
    (ef_search 40 for both) against the exact L1 order (a sequential scan
    computing l1_distance on the stored values), 200 queries over 8,000
    seeded rows of 96 dimensions in 8 clusters (recall about 0.95, where a
    difference shows; streamhnsw links on half-precision copies from 64
    dimensions up): at least
    pgvector's hnsw - 0.005, its median over three builds on the same rows
    in the same run.
    """
    rows, queries = data.clustered(8000, 96, seed=50, n_clusters=8, n_queries=200)
    opclass = f"{typ}_l1_ops"
    lits = [data.vector_literal(q) for q in queries]
    tables = {"hnsw": f"r_pgv_l1_{typ}", "streamhnsw": f"r_sh_l1_{typ}"}
    sql = "SELECT id FROM {t} ORDER BY embedding <+> %s::" + typ + " LIMIT 10"
    try:
        for am, table in tables.items():
            data.load(conn, table, rows, typ=typ)
        with conn.transaction():
            conn.execute("SET LOCAL enable_indexscan = off")
            truth = [[r[0] for r in conn.execute(sql.format(t=tables["hnsw"]), (lit,))]
                     for lit in lits]
        found = indexed_recall(conn, tables, f"embedding {opclass}", sql, lits[0],
                               lambda t: _overlap(conn, sql.format(t=t), lits, truth))
        pgv = statistics.median(found["hnsw"])
        ours = found["streamhnsw"][0]
        print(f"\n{typ} l1 recall@10 at the default ef_search: streamhnsw {ours:.3f} "
              f"pgvector {pgv:.3f} (builds {found['hnsw']})", end="")
        assert ours >= pgv - 0.005, (ours, found["hnsw"])
    finally:
        for table in tables.values():
            conn.execute(f"DROP TABLE IF EXISTS {table}")


def assert_scenario_recall(conn, sql, queries, exact, metric, typ, label):
    """The check both pgvector scenarios end with: the index answers the
    queries (index scans forced) with recall@20 at least pgvector's test's
    threshold (0.99; inner product 0.97; halfvec 0.98). The caller resets
    enable_seqscan."""
    conn.execute("SET enable_seqscan = off")
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, (queries[0],)))
    assert "Index Scan" in plan
    hits = sum(len({r[0] for r in conn.execute(sql, (q,))} & e) for q, e in zip(queries, exact))
    recall = hits / sum(len(e) for e in exact)
    want = 0.97 if metric == "ip" else 0.98 if typ == "halfvec" else 0.99
    print(f"\n{typ} {metric}{label}: recall@20 {recall:.4f} (asked {want})", end="")
    assert recall >= want


@pytest.mark.parametrize("typ", ["vector", "halfvec"])
@pytest.mark.parametrize("metric", ["l2", "cosine", "ip", "l1"])
def test_pgvector_build_recall_scenario(conn, metric, typ):
    """
    pgvector's build-recall scenario: 10,000 rows of 3 dimensions,
    ARRAY[random() * random(), ...], 20 queries ARRAY[random(), ...],
    recall@20 at the default ef_search; the thresholds pgvector's own test
    asks of its hnsw (0.99; inner product 0.97; halfvec 0.98).
    """
    op, opclass = OPS[metric]
    opclass = opclass.replace("vector", typ)
    table = f"bs_{metric}_{typ}"
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (i int4, v {typ}(3))")
    conn.execute("SELECT setseed(0.14)")
    conn.execute(f"INSERT INTO {table} SELECT i, ARRAY[random() * random(), random() * random(),"
                 " random() * random()] FROM generate_series(1, 10000) i")
    rnd = random.Random(14)
    queries = [f"[{rnd.random()},{rnd.random()},{rnd.random()}]" for _ in range(20)]
    sql = f"SELECT i FROM {table} ORDER BY v {op} %s::{typ} LIMIT 20"
    try:
        exact = [{r[0] for r in conn.execute(sql, (q,))} for q in queries]
        conn.execute(f"CREATE INDEX ON {table} USING streamhnsw (v {opclass})")
        assert_scenario_recall(conn, sql, queries, exact, metric, typ, "")
    finally:
        conn.execute("RESET enable_seqscan")
        conn.execute(f"DROP TABLE {table}")


@pytest.mark.parametrize("typ", ["vector", "halfvec"])
@pytest.mark.parametrize("metric", ["l2", "cosine", "ip", "l1"])
def test_pgvector_insert_recall_scenario(cluster, conn, metric, typ):
    """
    pgvector's insert-recall scenario: an empty indexed table, 10,000 rows of
    ARRAY[random() * random(), ...] (3 dimensions) inserted one per
    statement by 10 concurrent clients, 20 queries ARRAY[random(), ...],
    recall@20 at the default ef_search, with the build scenario's
    thresholds (0.99; inner product 0.97; halfvec 0.98).
    """
    op, opclass = OPS[metric]
    opclass = opclass.replace("vector", typ)
    table = f"is_{metric}_{typ}"
    rnd = random.Random(1400)
    rows = [f"[{rnd.random() * rnd.random()},{rnd.random() * rnd.random()},"
            f"{rnd.random() * rnd.random()}]" for _ in range(10000)]
    queries = [f"[{rnd.random()},{rnd.random()},{rnd.random()}]" for _ in range(20)]
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (i int4, v {typ}(3))")
    conn.execute(f"CREATE INDEX ON {table} USING streamhnsw (v {opclass})")
    errors = []

    def client(k):
        try:
            with cluster.connect() as c:
                for i in range(k, len(rows), 10):
                    c.execute(f"INSERT INTO {table} VALUES (%s, %s::{typ})", (i, rows[i]))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sql = f"SELECT i FROM {table} ORDER BY v {op} %s::{typ} LIMIT 20"
    try:
        assert not errors, errors
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == len(rows)
        conn.execute("SET enable_indexscan = off")
        exact = [{r[0] for r in conn.execute(sql, (q,))} for q in queries]
        conn.execute("RESET enable_indexscan")
        assert_scenario_recall(conn, sql, queries, exact, metric, typ, " inserted")
    finally:
        conn.execute("RESET enable_seqscan")
        conn.execute(f"DROP TABLE {table}")


def indexed_recall(conn, tables, column, sql, first, measure):
    """Each engine's recall figures: its index on column is built (three
    times for pgvector, whose figure varies from build to build: the tests
    compare the median), its plan checked with the first query (sql, {t}
    the table), measured by measure(table), and dropped."""
    found = {am: [] for am in tables}
    for am, table in tables.items():
        for _ in range(3 if am == "hnsw" else 1):
            conn.execute(f"CREATE INDEX {table}_idx ON {table} USING {am} ({column})")
            with conn.transaction():
                conn.execute("SET LOCAL enable_seqscan = off")
                plan = "\n".join(r[0] for r in conn.execute(
                    "EXPLAIN " + sql.format(t=table), (first,)))
                assert f"Index Scan using {table}_idx" in plan, plan
                found[am].append(measure(table))
            conn.execute(f"DROP INDEX {table}_idx")
    return found


def _overlap(conn, sql, lits, truth):
    """recall@10 of sql's rows against the exact ids of each query."""
    got = [[r[0] for r in conn.execute(sql, (lit,))] for lit in lits]
    return sum(len(set(g) & set(t)) for g, t in zip(got, truth)) / (10 * len(lits))


def _bit_recall(conn, table, op, lits, kth, k):
    """Recall@k of the index on bit queries whose exact k-th distance is
    kth[i]: a returned row counts if it is no farther (Hamming and Jaccard
    distances tie, so the set of the k nearest is not unique)."""
    hits = 0
    for lit, bound in zip(lits, kth):
        got = [r[0] for r in conn.execute(
            f"SELECT b {op} %s::bit(256) AS d FROM {table} ORDER BY b {op} %s::bit(256) LIMIT {k}",
            (lit, lit))]
        hits += sum(1 for d in got if d <= bound)
    return hits / (k * len(lits))


@pytest.mark.parametrize("metric", ["hamming", "jaccard"])
def test_bit_recall_not_below_pgvector(conn, metric):
    """
    bit_hamming_ops and bit_jaccard_ops: recall@10 at the default settings
    (ef_search 40 for both) against the exact order (a sequential scan),
    200 queries over 8,000 rows of 256 bits, the binary quantization of
    seeded clustered vectors (pgvector's documented use of bit indexes); a
    row counts if it is no farther than the exact 10th (distances tie). At
    least pgvector's hnsw - 0.005, its median over three builds on the same
    rows in the same run.
    """
    # (a % in a statement with parameters is written %%)
    op, opclass = {"hamming": ("<~>", "bit_hamming_ops"),
                   "jaccard": ("<%%>", "bit_jaccard_ops")}[metric]
    rows, queries = data.clustered(8000, 256, seed=51, n_clusters=16, n_queries=200)
    lits = ["".join("1" if x > 0 else "0" for x in q) for q in queries]
    tables = {"hnsw": f"r_pgv_bit_{metric}", "streamhnsw": f"r_sh_bit_{metric}"}
    try:
        data.load(conn, "r_bit_src", rows)
        for table in tables.values():
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"CREATE TABLE {table} AS SELECT id, binary_quantize(embedding)::bit(256)"
                         " AS b FROM r_bit_src ORDER BY id")
        kth = []
        with conn.transaction():
            conn.execute("SET LOCAL enable_indexscan = off")
            for lit in lits:
                kth.append(conn.execute(
                    f"SELECT b {op} %s::bit(256) FROM {tables['hnsw']} ORDER BY 1 LIMIT 10 OFFSET 9",
                    (lit,)).fetchone()[0])
        sql = f"SELECT id FROM {{t}} ORDER BY b {op} %s::bit(256) LIMIT 10"
        found = indexed_recall(conn, tables, f"b {opclass}", sql, lits[0],
                               lambda t: _bit_recall(conn, t, op, lits, kth, 10))
        pgv = statistics.median(found["hnsw"])
        ours = found["streamhnsw"][0]
        print(f"\nbit {metric} recall@10 at the default ef_search: streamhnsw {ours:.3f} "
              f"pgvector {pgv:.3f} (builds {found['hnsw']})", end="")
        assert ours >= pgv - 0.005, (ours, found["hnsw"])
    finally:
        for table in (*tables.values(), "r_bit_src"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine", "l1"])
def test_sparsevec_recall_not_below_pgvector(conn, metric):
    """
    sparsevec_{l2,ip,cosine,l1}_ops: recall@10 at the default settings
    (ef_search 40 for both) against the exact order (a sequential scan with
    pgvector's own functions), 200 queries of about 30 non-zero elements
    over 3,000 seeded rows of about 100 in 30,000 dimensions, topic-shaped
    as learned sparse embeddings are (streamhnsw navigates on their sketch
    of 1,024 dimensions): at least pgvector's hnsw - 0.005, its median over
    three builds on the same rows in the same run.
    """
    op = {"l2": "<->", "ip": "<#>", "cosine": "<=>", "l1": "<+>"}[metric]
    dim = 30000
    rows, queries = data.sparse_clustered(3000, dim, 100, seed=52, n_queries=200)
    lits = [data.sparse_literal(i, v, dim) for i, v in queries]
    tables = {"hnsw": f"r_pgv_sp_{metric}", "streamhnsw": f"r_sh_sp_{metric}"}
    sql = "SELECT id FROM {t} ORDER BY embedding " + op + " %s::sparsevec LIMIT 10"
    try:
        for table in tables.values():
            data.load_sparse(conn, table, rows, dim)
        with conn.transaction():
            conn.execute("SET LOCAL enable_indexscan = off")
            truth = [[r[0] for r in conn.execute(sql.format(t=tables["hnsw"]), (lit,))]
                     for lit in lits]
        found = indexed_recall(conn, tables, f"embedding sparsevec_{metric}_ops", sql, lits[0],
                               lambda t: _overlap(conn, sql.format(t=t), lits, truth))
        pgv = statistics.median(found["hnsw"])
        ours = found["streamhnsw"][0]
        print(f"\nsparsevec {metric} recall@10 at the default ef_search: streamhnsw {ours:.3f} "
              f"pgvector {pgv:.3f} (builds {found['hnsw']})", end="")
        assert ours >= pgv - 0.005, (ours, found["hnsw"])
    finally:
        for table in tables.values():
            conn.execute(f"DROP TABLE IF EXISTS {table}")
