"""Durability workloads for streamhnsw: a model of what was committed, a
concurrent insert/delete/search/VACUUM workload, crash-and-recover cycles,
and the invariant checks both use.

Shared by test/python/test_durability.py (bounded, seeded runs inside
`make test`) and shnsw.tools.stress (as long as asked).

Every row's vector is a function of its id (row `id` of one seeded array), so
any process can say what a row should contain. The Model records, for every
id, whether its insert was acknowledged as committed, explicitly rolled
back, or in flight when the server died (such a transaction's rows must be
all there or all absent after recovery), and likewise for deletes.

Invariants checked (a violation is a string; an empty list means sound):

- no statement fails except for the server being killed under it;
- after the run (or recovery): streamhnsw_verify() is empty; the heap holds
  exactly the committed, undeleted rows (in-flight transactions atomically
  resolved either way); every such row is found by an exact-match search
  through the index (ORDER BY embedding <op> its own vector LIMIT 1 returns
  it at distance 0); deleted, rolled-back and lost rows are never returned;
  returned distances are the true distances of the returned rows' vectors,
  in order; the metapage counts at least as many live nodes as rows;
- during the run, each search for a row committed before the search began
  and not deleted before it ended returns that row first, and no search
  returns a row rolled back or deleted before the search began.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import psycopg

from shnsw import data

OPS = {"l2": ("<->", "vector_l2_ops"), "cosine": ("<=>", "vector_cosine_ops")}


# --- the index's own reports ------------------------------------------------

def verify(conn, index: str) -> list[str]:
    """streamhnsw_verify's problems (empty: sound)."""
    return [r[0] for r in conn.execute(f"SELECT * FROM streamhnsw_verify('{index}')").fetchall()]


def meta(conn, index: str) -> dict:
    """streamhnsw_metapage's row, by column name."""
    cur = conn.execute(f"SELECT * FROM streamhnsw_metapage('{index}')")
    return dict(zip([d.name for d in cur.description], cur.fetchone()))


# --- killing a server ------------------------------------------------------

def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may contain spaces: the ppid follows the last ')'
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(name))
    return out


def _wait_gone(pids: list[int], timeout: float = 20) -> None:
    deadline = time.time() + timeout
    for p in pids:
        while time.time() < deadline:
            try:
                os.kill(p, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)


def crash(cluster, how: str) -> None:
    """Crash the cluster's server.

    'kill9'     SIGKILL to the postmaster only (Cluster.crash): backends notice
                its death and exit at their next wait, possibly after
                finishing (and committing) what they were doing;
    'kill9all'  stop the postmaster, then SIGKILL it and every one of its
                children at once: every process dies where it stands;
    'immediate' pg_ctl stop -m immediate (backends quit on SIGQUIT).
    """
    if how == "kill9all":
        pm = cluster.postmaster_pid()
        os.kill(pm, signal.SIGSTOP)
        kids = _children(pm)
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.kill(pm, signal.SIGKILL)
        _wait_gone([pm, *kids])
        cluster.running = False
    else:
        cluster.crash(how)


# --- the model of what was committed ----------------------------------------

class IndexedSet:
    """A set with O(1) add, discard and uniform random pick."""

    def __init__(self):
        self._list: list = []
        self._pos: dict = {}

    def add(self, x) -> None:
        if x not in self._pos:
            self._pos[x] = len(self._list)
            self._list.append(x)

    def update(self, xs) -> None:
        for x in xs:
            self.add(x)

    def discard(self, x) -> None:
        p = self._pos.pop(x, None)
        if p is None:
            return
        last = self._list.pop()
        if p < len(self._list):
            self._list[p] = last
            self._pos[last] = p

    def pick(self, rng):
        return self._list[rng.randrange(len(self._list))]

    def __contains__(self, x) -> bool:
        return x in self._pos

    def __len__(self) -> int:
        return len(self._list)

    def __iter__(self):
        return iter(list(self._list))


CHUNK = 1 << 16


@dataclass
class Model:
    dim: int
    seed: int
    committed: "IndexedSet" = field(default_factory=lambda: IndexedSet())  # committed, not deleted
    deleted: set = field(default_factory=set)      # delete committed
    aborted: set = field(default_factory=set)      # rolled back or lost
    pending_ins: list = field(default_factory=list)  # in-flight insert groups
    pending_del: list = field(default_factory=list)  # in-flight delete groups
    commit_time: dict = field(default_factory=dict)
    delete_start: dict = field(default_factory=dict)
    delete_commit: dict = field(default_factory=dict)
    next_id: int = 0

    def __post_init__(self):
        self.lock = threading.Lock()
        self.violations: list[str] = []
        self._chunks: dict = {}

    def violation(self, msg: str) -> None:
        with self.lock:
            self.violations.append(msg)

    def alloc(self, n: int) -> list[int]:
        with self.lock:
            ids = list(range(self.next_id, self.next_id + n))
            self.next_id += n
            return ids

    def vec(self, i: int) -> np.ndarray:
        """The vector of row i: seeded clustered data, 65536 rows per chunk."""
        c = i // CHUNK
        x = self._chunks.get(c)
        if x is None:
            x, _ = data.clustered(CHUNK, self.dim, seed=self.seed * 7919 + c, n_clusters=64)
            self._chunks[c] = x
        return x[i % CHUNK]

    # inserts
    def begin_insert(self, ids) -> tuple:
        g = tuple(ids)
        with self.lock:
            self.pending_ins.append(g)
        return g

    def end_insert(self, g: tuple, committed: bool) -> None:
        now = time.monotonic()
        with self.lock:
            self.pending_ins.remove(g)
            if committed:
                self.committed.update(g)
                for i in g:
                    self.commit_time[i] = now
            else:
                self.aborted.update(g)

    # deletes
    def pick_for_delete(self, rng: random.Random, n: int) -> tuple:
        with self.lock:
            busy = {i for g in self.pending_del for i in g}
            pool = [i for i in self._sample(rng, n * 3) if i not in busy]
            g = tuple(sorted(set(pool[:n])))
            self.pending_del.append(g)
            now = time.monotonic()
            for i in g:
                self.delete_start.setdefault(i, now)
            return g

    def _sample(self, rng, n):
        if not self.committed:
            return []
        return [self.committed.pick(rng) for _ in range(n)]

    def end_delete(self, g: tuple, committed: bool) -> None:
        now = time.monotonic()
        with self.lock:
            self.pending_del.remove(g)
            if committed:
                for i in g:
                    self.committed.discard(i)
                    self.deleted.add(i)
                    self.delete_commit[i] = now
            else:
                for i in g:
                    self.delete_start.pop(i, None)

    def random_committed(self, rng: random.Random):
        with self.lock:
            s = self._sample(rng, 1)
            return s[0] if s else None

    # after a crash
    def reconcile(self, heap_ids: set) -> None:
        """Resolve in-flight transactions from what the heap holds; record
        violations of atomicity and durability."""
        with self.lock:
            for g in self.pending_ins:
                present = heap_ids.intersection(g)
                if present and len(present) != len(g):
                    self.violations.append(
                        f"insert transaction half recovered: {len(present)} of {len(g)} rows "
                        f"(ids {g[0]}..{g[-1]})")
                if present:
                    self.committed.update(g)
                    for i in g:
                        self.commit_time[i] = 0.0
                else:
                    self.aborted.update(g)
            self.pending_ins.clear()
            for g in self.pending_del:
                present = heap_ids.intersection(g)
                if present and len(present) != len(g):
                    self.violations.append(
                        f"delete transaction half recovered: {len(present)} of {len(g)} rows remain")
                if not present:
                    for i in g:
                        self.committed.discard(i)
                        self.deleted.add(i)
                        self.delete_commit[i] = 0.0
                else:
                    for i in g:
                        self.delete_start.pop(i, None)
            self.pending_del.clear()




# --- writing rows -------------------------------------------------------------

def insert_rows(conn, table: str, model: Model, ids, style: str) -> None:
    """Insert rows `ids` in the current transaction: 'single' (one INSERT per
    row), 'multi' (one multi-row INSERT) or 'copy'."""
    if style == "single":
        for i in ids:
            conn.execute(f"INSERT INTO {table} (id, embedding) VALUES (%s, %s)",
                         (i, data.vector_literal(model.vec(i))))
    elif style == "multi":
        vals = ", ".join(f"({i}, '{data.vector_literal(model.vec(i))}')" for i in ids)
        conn.execute(f"INSERT INTO {table} (id, embedding) VALUES {vals}")
    else:
        arr = np.stack([model.vec(i) for i in ids])
        # data.load's binary COPY writes ids start_id.. ; ours are consecutive
        assert list(ids) == list(range(ids[0], ids[0] + len(ids)))
        copy_rows(conn, table, arr, ids[0])


def copy_rows(conn, table, arr, start):
    import struct
    header = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
    with conn.cursor() as cur:
        with cur.copy(f"COPY {table} (id, embedding) FROM STDIN WITH (FORMAT binary)") as cp:
            cp.write(header)
            cp.write(data._binary_copy_payload(
                np.arange(start, start + len(arr), dtype=np.int64), arr, "vector"))
            cp.write(struct.pack(">h", -1))


def insert_txn(conn, table: str, model: Model, rng: random.Random, max_batch: int = 20,
               rollback_share: float = 0.1) -> None:
    n = rng.randint(1, max_batch)
    ids = model.alloc(n)
    style = rng.choice(["single", "multi", "copy"])
    rollback = rng.random() < rollback_share
    g = model.begin_insert(ids)
    with conn.transaction(force_rollback=rollback):
        insert_rows(conn, table, model, ids, style)
    model.end_insert(g, committed=not rollback)


def delete_txn(conn, table: str, model: Model, rng: random.Random, max_batch: int = 20) -> None:
    g = model.pick_for_delete(rng, rng.randint(1, max_batch))
    if not g:
        model.end_delete(g, False)
        return
    conn.execute(f"DELETE FROM {table} WHERE id = ANY(%s)", (list(g),))
    model.end_delete(g, True)


# --- searching and checking -----------------------------------------------------

def distance(metric: str, a: np.ndarray, b: np.ndarray) -> float:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    if metric == "l2":
        return float(np.sqrt(((a - b) ** 2).sum()))
    return float(1 - (a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-5 * max(1.0, abs(a), abs(b))


def search(conn, table: str, metric: str, q: np.ndarray, k: int):
    op = OPS[metric][0]
    lit = data.vector_literal(q)
    return conn.execute(f"SELECT id, embedding {op} %s::vector FROM {table} "
                        f"ORDER BY embedding {op} %s::vector LIMIT {k}", (lit, lit)).fetchall()


def check_result(model: Model, metric: str, q, rows, where: str) -> list[str]:
    """Returned distances must be the rows' true distances, in order."""
    out = []
    prev = -np.inf
    for rid, d in rows:
        if rid >= model.next_id:
            out.append(f"{where}: returned unknown id {rid}")
            continue
        true = distance(metric, q, model.vec(rid))
        if not close(d, true):
            out.append(f"{where}: id {rid} distance {d} but its vector is at {true}")
        if d < prev - 1e-6:
            out.append(f"{where}: results out of order ({prev} then {d})")
        prev = d
    return out


def uses_index(conn, table: str, index: str, metric: str, q) -> bool:
    op = OPS[metric][0]
    lit = data.vector_literal(q)
    plan = conn.execute(f"EXPLAIN (COSTS OFF) SELECT id FROM {table} "
                        f"ORDER BY embedding {op} %s::vector LIMIT 5", (lit,)).fetchall()
    return any(f"Index Scan using {index}" in r[0] for r in plan)


def heap_ids(conn, table: str) -> set:
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        conn.execute("SET LOCAL enable_indexonlyscan = off")
        return {r[0] for r in conn.execute(f"SELECT id FROM {table}").fetchall()}


def index_ids(conn, table: str, index: str, metric: str) -> set:
    """Ids of the visible rows the index holds an entry for: an index scan
    ordered by distance to NULL returns every indexed row."""
    op = OPS[metric][0]
    sql = (f"SELECT id FROM {table} ORDER BY embedding {op} (SELECT NULL::vector) "
           f"LIMIT 1000000000")
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (COSTS OFF) " + sql).fetchall())
        if f"Index Scan using {index} on {table}" not in plan:
            raise AssertionError(f"NULL-ordered scan does not use {index}:\n{plan}")
        rows = conn.execute(sql).fetchall()
    ids = {r[0] for r in rows}
    if len(ids) != len(rows):
        raise AssertionError(f"{index}: a full index scan returned {len(rows) - len(ids)} "
                             f"rows twice")
    return ids


def exact_match_missing(conn, table: str, index: str, metric: str,
                        ef_search: int | None = None) -> list:
    """(id, found id, found distance) of heap rows that an exact-match search
    through the index does not return first (at distance 0).

    The search runs at the session's ef_search; with ef_search given, the
    rows it misses are searched again at that width (a row counts as found
    if either search finds it)."""
    op = OPS[metric][0]
    sql = (f"SELECT t.id, s.id, s.d FROM {table} t LEFT JOIN LATERAL "
           f"(SELECT t2.id, t2.embedding {op} t.embedding AS d FROM {table} t2 "
           f"ORDER BY t2.embedding {op} t.embedding LIMIT 1) s ON true "
           f"WHERE (s.id IS DISTINCT FROM t.id OR s.d <> 0)")
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (COSTS OFF) " + sql).fetchall())
        if f"Index Scan using {index} on {table} t2" not in plan:
            raise AssertionError(f"exact-match query does not use {index}:\n{plan}")
        miss = conn.execute(sql).fetchall()
        if miss and ef_search:
            conn.execute(f"SET LOCAL streamhnsw.ef_search = {int(ef_search)}")
            miss = conn.execute(sql + " AND t.id = ANY(%s)", ([m[0] for m in miss],)).fetchall()
    return miss


def check_index(conn, table: str, index: str, metric: str, model: Model,
                rng: random.Random, probes: int = 100, where: str = "",
                ef_search: int | None = None) -> list[str]:
    """The end-of-run / after-recovery checks; returns violations. An error
    from any check is a violation too (and the remaining checks still run)."""
    out: list[str] = []

    def step(name, fn):
        try:
            return fn()
        except psycopg.Error as e:
            out.append(f"{where}{name} failed: {type(e).__name__}: {str(e).strip()}")
            return None

    probs = step("streamhnsw_verify", lambda: [r[0] for r in conn.execute(
        f"SELECT * FROM streamhnsw_verify('{index}')").fetchall()]) or []
    for p in probs[:20]:
        out.append(f"{where}verify: {p}")
    heap = heap_ids(conn, table)
    with model.lock:
        committed = set(model.committed)
        gone = set(model.deleted) | set(model.aborted)
    lost = committed - heap
    if lost:
        out.append(f"{where}{len(lost)} committed rows missing from the heap, e.g. {sorted(lost)[:5]}")
    extra = heap - committed
    if extra:
        out.append(f"{where}{len(extra)} heap rows never committed (or deleted), e.g. {sorted(extra)[:5]}")
    indexed = step("full index scan", lambda: index_ids(conn, table, index, metric))
    if indexed is not None:
        unindexed = heap - indexed
        if unindexed:
            out.append(f"{where}{len(unindexed)} of {len(heap)} rows have no index entry, "
                       f"e.g. {sorted(unindexed)[:5]}")
    miss = step("exact-match search", lambda: exact_match_missing(conn, table, index, metric,
                                                                  ef_search))
    if miss:
        # A row the full index scan returns but a search misses is the known
        # limitation below (an insert's back-link left it few in-links; only
        # VACUUM relinks it, and crash recovery runs no VACUUM); a missed row
        # with no index entry, or any miss when the scan failed, stays strict.
        ids = {m[0] for m in miss}
        kind = ("indexed rows (the full index scan returns them) not found"
                if indexed is not None and ids <= indexed else "rows not found")
        out.append(f"{where}{len(miss)} of {len(heap)} {kind} by exact-match search "
                   f"(ef_search {ef_search or 'default'}), e.g. {miss[:5]}")
    counts = step("streamhnsw_metapage", lambda: conn.execute(
        f"SELECT node_count, deleted_count FROM streamhnsw_metapage('{index}')").fetchone())
    if counts and counts[0] - counts[1] < len(heap):
        out.append(f"{where}metapage counts {counts[0] - counts[1]} live nodes for {len(heap)} rows")

    def probe_gone():
        # deleted, rolled-back and lost rows are never returned; distances true
        gone_l = sorted(gone)
        for i in rng.sample(gone_l, min(probes, len(gone_l))):
            rows = search(conn, table, metric, model.vec(i), 5)
            for rid, _ in rows:
                if rid in gone or rid not in heap:
                    out.append(f"{where}search for gone row {i} returned row {rid} "
                               f"({'deleted' if rid in model.deleted else 'never committed'})")
            out.extend(check_result(model, metric, model.vec(i), rows, f"{where}probe {i}"))

    def queries():
        # plain queries from the data's distribution
        for _ in range(probes // 4):
            a, b = rng.randrange(model.next_id or 1), rng.randrange(model.next_id or 1)
            q = (model.vec(a) + model.vec(b)) / 2
            rows = search(conn, table, metric, q, 10)
            if len(rows) != min(10, len(heap)):
                out.append(f"{where}query returned {len(rows)} rows of {min(10, len(heap))}")
            for rid, _ in rows:
                if rid not in heap:
                    out.append(f"{where}query returned row {rid} not in the table")
            out.extend(check_result(model, metric, q, rows, f"{where}query"))
    step("searches for gone rows", probe_gone)
    step("queries", queries)
    return out


# --- the concurrent workload -------------------------------------------------------

class Workload:
    """Inserters, deleters, searchers and a VACUUM loop on one table, each on
    its own connection, for a bounded time or until stop()."""

    def __init__(self, cluster, table: str, index: str, metric: str, model: Model,
                 seed: int, inserters: int = 2, searchers: int = 2, deleters: int = 1,
                 vacuum_every: float = 1.5,
                 max_rows: int | None = None, ef_search: int | None = None):
        self.c = cluster
        self.table, self.index, self.metric, self.model = table, index, metric, model
        self.seed = seed
        self.plan = ([("insert", i) for i in range(inserters)]
                     + [("search", i) for i in range(searchers)]
                     + [("delete", i) for i in range(deleters)]
                     + ([("vacuum", 0)] if vacuum_every else []))
        self.vacuum_every = vacuum_every
        self.max_rows = max_rows
        self.ef_search = ef_search
        self.stop_ev = threading.Event()
        self.crashing = threading.Event()   # set by whoever kills the server
        self.threads: list[threading.Thread] = []
        self.counts = {"insert": 0, "search": 0, "delete": 0, "vacuum": 0, "checked": 0}
        self.errors: list[str] = []

    def start(self) -> "Workload":
        for kind, i in self.plan:
            t = threading.Thread(target=self._run, args=(kind, i), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self, timeout: float = 60) -> None:
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout)

    def run_for(self, seconds: float, at_least: dict[str, int] | None = None,
                cap: float = 60) -> None:
        """Run the workload for `seconds`; with `at_least`, go on (up to `cap`
        seconds in all) until each named count has reached its minimum, so a
        slow or loaded machine does the same amount of work as a fast one."""
        self.start()
        self.stop_ev.wait(seconds)
        deadline = time.monotonic() + max(0.0, cap - seconds)
        while at_least and time.monotonic() < deadline and any(
                self.counts[k] < n for k, n in at_least.items()):
            self.stop_ev.wait(0.25)
        self.stop()

    def _run(self, kind: str, i: int) -> None:
        rng = random.Random(f"{self.seed}-{kind}-{i}")
        try:
            conn = self.c.connect()
            with conn:
                getattr(self, "_" + kind)(conn, rng)
        except Exception as e:  # noqa: BLE001 - every error is a finding ...
            # ... except the server going away when we killed it
            if self.crashing.is_set() and isinstance(e, (psycopg.OperationalError,
                                                         psycopg.InterfaceError)):
                return
            self.model.violation(f"{kind}{i}: {type(e).__name__}: {e}")
            self.errors.append(f"{kind}{i}: {e}")

    def _insert(self, conn, rng):
        while not self.stop_ev.is_set():
            if self.max_rows and len(self.model.committed) >= self.max_rows:
                time.sleep(0.05)
                continue
            insert_txn(conn, self.table, self.model, rng)
            self.counts["insert"] += 1

    def _delete(self, conn, rng):
        while not self.stop_ev.is_set():
            if len(self.model.committed) < 200:
                time.sleep(0.05)
                continue
            delete_txn(conn, self.table, self.model, rng)
            self.counts["delete"] += 1
            time.sleep(rng.uniform(0, 0.02))

    def _vacuum(self, conn, rng):
        while not self.stop_ev.wait(rng.uniform(0.5, 1.5) * self.vacuum_every):
            conn.execute(f"VACUUM {self.table}")
            self.counts["vacuum"] += 1

    def _search(self, conn, rng):
        m = self.model
        if self.ef_search:
            conn.execute(f"SET streamhnsw.ef_search = {int(self.ef_search)}")
        while not self.stop_ev.is_set():
            target = m.random_committed(rng)
            if target is None:
                time.sleep(0.01)
                continue
            if rng.random() < 0.25:
                q = m.vec(target) + np.float32(0.05) * \
                    np.asarray([rng.gauss(0, 1) for _ in range(m.dim)], np.float32)
                exact = False
            else:
                q = m.vec(target)
                exact = True
            t0 = time.monotonic()
            rows = search(conn, self.table, self.metric, q, 5)
            t1 = time.monotonic()
            self.counts["search"] += 1
            for v in check_result(m, self.metric, q, rows, f"search {target}"):
                m.violation(v)
            with m.lock:
                for rid, _ in rows:
                    if rid in m.aborted:
                        m.violations.append(f"search returned rolled-back row {rid}")
                    dc = m.delete_commit.get(rid)
                    if dc is not None and dc < t0:
                        m.violations.append(f"search returned row {rid} deleted before it began")
                ds = m.delete_start.get(target)
                if exact and (ds is None or ds > t1) and m.commit_time.get(target, t1) < t0:
                    self.counts["checked"] += 1
                    if not rows or rows[0][0] != target:
                        m.violations.append(
                            f"exact-match search for committed row {target} returned "
                            f"{rows[:2]}")


# --- crash-and-recover cycles ---------------------------------------------------

class CrashCycles:
    """Randomized crash-and-recover cycles on one table and its index.

    Each cycle starts an operation in the background (CREATE INDEX, a burst
    of inserts/deletes/searches, or VACUUM after deletes), crashes the
    server at a random moment, restarts it (recovery) and checks every
    invariant. Returns violations; the model carries what was committed.
    """

    KINDS = ("build", "insert", "vacuum")
    HOWS = ("kill9", "kill9all", "immediate")

    def __init__(self, cluster, seed: int, dim: int = 16, initial: int = 2000,
                 max_rows: int = 5000, table: str = "crash_t", log=None,
                 ef_search: int | None = None, ms=(16,)):
        self.c = cluster
        self.seed = seed
        self.rng = random.Random(seed)
        self.model = Model(dim=dim, seed=seed)
        self.dim, self.initial, self.max_rows = dim, initial, max_rows
        self.table, self.index = table, f"{table}_idx"
        self.metric = "l2"
        self.ef_search = ef_search
        self.ms = ms
        self.build_secs = 0.3
        self.log = log or (lambda *a: None)
        self.cycles = 0
        self.stats = {k: 0 for k in self.KINDS}

    # setup and helpers
    def setup(self) -> None:
        with self.c.connect() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {self.table}")
            conn.execute(f"CREATE TABLE {self.table} (id bigint PRIMARY KEY, "
                         f"embedding vector({self.dim}))")
            ids = self.model.alloc(self.initial)
            g = self.model.begin_insert(ids)
            copy_rows(conn, self.table, np.stack([self.model.vec(i) for i in ids]), ids[0])
            self.model.end_insert(g, True)
            self._create_index(conn)

    def _create_index(self, conn) -> None:
        t = time.monotonic()
        conn.execute(f"CREATE INDEX {self.index} ON {self.table} USING streamhnsw "
                     f"(embedding {OPS[self.metric][1]})")
        self.build_secs = max(0.05, time.monotonic() - t)

    def _trim(self, conn) -> None:
        """Keep the table small: delete committed rows beyond max_rows."""
        excess = len(self.model.committed) - self.max_rows
        if excess > 0:
            g = self.model.pick_for_delete(self.rng, excess)
            conn.execute(f"DELETE FROM {self.table} WHERE id = ANY(%s)", (list(g),))
            self.model.end_delete(g, True)

    def _background(self, fn) -> tuple[threading.Thread, dict]:
        """Run fn(conn) in a thread on its own connection; report what happened."""
        res = {"done": False, "error": None}

        def run():
            try:
                with self.c.connect() as conn:
                    fn(conn)
                res["done"] = True
            except Exception as e:  # noqa: BLE001
                res["error"] = e
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t, res

    def _crash_and_restart(self, how: str, crashing: threading.Event | None = None) -> float:
        if crashing is not None:
            crashing.set()
        crash(self.c, how)
        t = time.monotonic()
        self.c.start()
        return time.monotonic() - t

    # cycles
    def run_cycle(self, kind: str | None = None, how: str | None = None) -> list[str]:
        kind = kind or self.KINDS[self.cycles % len(self.KINDS)]
        how = how or self.rng.choice(self.HOWS)
        self.cycles += 1
        self.stats[kind] += 1
        where = f"cycle {self.cycles} ({kind}, {how}): "
        before = len(self.model.violations)
        out = getattr(self, "_cycle_" + kind)(how, where)
        with self.model.lock:
            out = [where + v for v in self.model.violations[before:]] + out
        self.log(f"{where}{len(self.model.committed)} rows, "
                 f"{'OK' if not out else str(len(out)) + ' violations'}")
        return out

    def _cycle_build(self, how: str, where: str) -> list[str]:
        out = []
        with self.c.connect() as conn:
            self._trim(conn)
            conn.execute(f"DROP INDEX IF EXISTS {self.index}")
        self.metric = self.rng.choice(list(OPS))
        concurrently = self.rng.random() < 0.25
        sql = (f"CREATE INDEX {'CONCURRENTLY ' if concurrently else ''}{self.index} ON "
               f"{self.table} USING streamhnsw (embedding {OPS[self.metric][1]}) "
               f"WITH (m = {self.rng.choice(self.ms)})")
        delay = self.rng.uniform(0, 1.3 * self.build_secs * (3 if concurrently else 1))
        t, res = self._background(lambda conn: conn.execute(sql))
        time.sleep(delay)
        self._crash_and_restart(how)
        t.join(30)
        if res["error"] is not None and not isinstance(res["error"], (psycopg.OperationalError,
                                                                      psycopg.InterfaceError)):
            out.append(f"CREATE INDEX failed: {res['error']}")
        with self.c.connect() as conn:
            row = conn.execute("SELECT i.indisvalid FROM pg_index i JOIN pg_class c "
                               "ON c.oid = i.indexrelid WHERE c.relname = %s",
                               (self.index,)).fetchone()
            if res["done"] and (row is None or not row[0]):
                out.append("a CREATE INDEX that returned success is missing or invalid "
                           "after recovery")
            if row is not None and not row[0]:
                # CREATE INDEX CONCURRENTLY interrupted: as with any index, drop it
                conn.execute(f"DROP INDEX {self.index}")
                row = None
            if row is None:
                self._create_index(conn)
            else:
                self.log(f"{where}build had committed before the crash")
            out += check_index(conn, self.table, self.index, self.metric, self.model,
                               self.rng, ef_search=self.ef_search)
        return out

    def _cycle_insert(self, how: str, where: str) -> list[str]:
        with self.c.connect() as conn:
            self._trim(conn)
        w = Workload(self.c, self.table, self.index, self.metric, self.model,
                     seed=self.rng.randrange(1 << 30), inserters=2, searchers=1,
                     deleters=self.rng.choice([0, 1]),
                     vacuum_every=self.rng.choice([0, 0.3]), ef_search=self.ef_search)
        w.start()
        time.sleep(self.rng.uniform(0.2, 1.5))
        self._crash_and_restart(how, w.crashing)
        w.stop(30)
        return self._after_recovery(where)

    def _cycle_vacuum(self, how: str, where: str) -> list[str]:
        with self.c.connect() as conn:
            self._trim(conn)
            share = self.rng.uniform(0.1, 0.4)
            g = self.model.pick_for_delete(self.rng, int(len(self.model.committed) * share))
            conn.execute(f"DELETE FROM {self.table} WHERE id = ANY(%s)", (list(g),))
            self.model.end_delete(g, True)
        # slow VACUUM down so that the crash lands inside its index pass
        limit = self.rng.choice([2, 5])

        def vac(conn):
            conn.execute("SET vacuum_cost_delay = '1ms'")
            conn.execute(f"SET vacuum_cost_limit = {limit}")
            conn.execute(f"VACUUM {self.table}")
        w = None
        if self.rng.random() < 0.5:
            w = Workload(self.c, self.table, self.index, self.metric, self.model,
                         seed=self.rng.randrange(1 << 30), inserters=1, searchers=1,
                         deleters=0, vacuum_every=0, ef_search=self.ef_search).start()
        t, res = self._background(vac)
        with self.c.connect() as mon:
            deadline = time.monotonic() + 10
            while t.is_alive() and time.monotonic() < deadline:
                r = mon.execute("SELECT phase FROM pg_stat_progress_vacuum").fetchall()
                if any(p == "vacuuming indexes" for (p,) in r):
                    break
                time.sleep(0.005)
        time.sleep(self.rng.uniform(0, 0.35))
        self._crash_and_restart(how, w.crashing if w else None)
        t.join(30)
        if w:
            w.stop(30)
        if res["error"] is not None and not isinstance(res["error"], (psycopg.OperationalError,
                                                                      psycopg.InterfaceError)):
            self.model.violation(f"VACUUM failed: {res['error']}")
        return self._after_recovery(where)

    def _after_recovery(self, where: str) -> list[str]:
        with self.c.connect() as conn:
            self.model.reconcile(heap_ids(conn, self.table))
            out = check_index(conn, self.table, self.index, self.metric, self.model, self.rng,
                              ef_search=self.ef_search)
            # the recovered index takes writes: insert, vacuum, verify again
            try:
                insert_txn(conn, self.table, self.model, self.rng, rollback_share=0)
                conn.execute(f"VACUUM {self.table}")
                out += [f"after a post-recovery insert and VACUUM: verify: {r[0]}" for r in
                        conn.execute(f"SELECT * FROM streamhnsw_verify('{self.index}')")
                        .fetchall()]
            except psycopg.Error as e:
                out.append(f"insert or VACUUM after recovery failed: {type(e).__name__}: "
                           f"{str(e).strip()}")
        return out


# Symptoms of known limitations (README, Known limitations). The randomized
# tests report xfail when these are the only violations, and fail on any
# other.
KNOWN_BUGS = {
    # a search that runs while other sessions insert can miss a committed
    # row even at ef_search 1000: an insert's back-link prunes a full list
    # and can leave a node (an outlier, mostly) with few in-links, from far
    # away; the next VACUUM links every such node a search misses (README,
    # Known limitations). Checks after VACUUM or recovery are strict.
    "a row concurrent inserts left hard to find, until VACUUM":
        ("exact-match search for committed row",
         "indexed rows (the full index scan returns them) not found"),
}


def known_bug(violation: str) -> str | None:
    for bug, needles in KNOWN_BUGS.items():
        if any(n in violation for n in needles):
            return bug
    return None
