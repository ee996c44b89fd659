"""Server-side pieces of the benchmark: engines (an index plus the settings a
query runs with), loading, building with progress, cache eviction, queries."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import data as shdata

OPS = {"l2": ("l2_ops", "<->"), "cosine": ("cosine_ops", "<=>"), "ip": ("ip_ops", "<#>"),
       "l1": ("l1_ops", "<+>"), "hamming": ("hamming_ops", "<~>"),
       "jaccard": ("jaccard_ops", "<%>")}

# Server settings of BENCHMARKS.md; every one is written into the report.
DEFAULT_SETTINGS = {
    "shared_buffers": "2GB",
    "io_method": "worker",
    "io_workers": 8,
    "effective_io_concurrency": 16,
    "jit": "off",
    "maintenance_work_mem": "1GB",
    "max_parallel_maintenance_workers": 2,
    "max_worker_processes": 16,
    "autovacuum": "off",          # no background reads during cold runs
    "max_wal_size": "8GB",        # no checkpoint in the middle of a measurement
    "checkpoint_timeout": "30min",
    "track_io_timing": "on",
    "max_connections": 60,
}


@dataclass
class Engine:
    """One thing to measure: an index of an access method plus session settings."""
    label: str            # e.g. "pgvector hnsw", "streamhnsw", "streamhnsw[io_mode=sync]"
    am: str               # hnsw | streamhnsw
    table: str
    index: str
    ef_guc: str           # hnsw.ef_search | streamhnsw.ef_search
    gucs: dict = field(default_factory=dict)   # extra session settings

    @property
    def is_baseline(self) -> bool:
        return self.am == "hnsw"

    def session_gucs(self, ef: int | None = None, extra: dict | None = None) -> dict:
        g = dict(self.gucs)
        if ef is not None:
            g[self.ef_guc] = ef
        if extra:
            g.update(extra)
        return g

    def options(self, ef: int | None = None, extra: dict | None = None) -> str:
        """libpq `options` string setting the engine's GUCs at connection time."""
        return " ".join(f"-c {k}={v}" for k, v in self.session_gucs(ef, extra).items())


def apply_gucs(conn, gucs: dict) -> None:
    for k, v in gucs.items():
        conn.execute(f"SET {k} = '{v}'")


def has_streamhnsw(conn) -> bool:
    return conn.execute("SELECT count(*) FROM pg_am WHERE amname = 'streamhnsw'"
                        ).fetchone()[0] > 0


def setup_extensions(conn, log=print) -> dict:
    """Create vector (+ streamhnsw when it installs), pg_buffercache, pg_prewarm."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
    err = None
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE")
    except Exception as e:          # the extension may not be installed (yet)
        err = str(e).strip().splitlines()[0]
        log(f"  streamhnsw extension not available: {err}")
    versions = {r[0]: r[1] for r in conn.execute(
        "SELECT extname, extversion FROM pg_extension").fetchall()}
    versions["server"] = conn.execute("SHOW server_version").fetchone()[0]
    versions["streamhnsw_am"] = has_streamhnsw(conn)
    if err:
        versions["streamhnsw_error"] = err
    return versions


def opclass(typ: str, metric: str) -> str:
    return f"{typ}_{OPS[metric][0]}"


def query_sql(eng: Engine, typ: str, metric: str, k: int) -> str:
    return (f"SELECT id FROM {eng.table} ORDER BY embedding {OPS[metric][1]} "
            f"%s::{typ} LIMIT {k}")


def literals(x: np.ndarray) -> list:
    return [shdata.vector_literal(v) for v in x]


# --- loading and building --------------------------------------------------------

def load_table(conn, table: str, rows, typ: str, progress=None, dim: int | None = None) -> float:
    """Load rows (an array; with dim, sparsevec (indices, values) pairs of
    dim dimensions) into a new table, frozen and analyzed; the seconds it took."""
    t = time.perf_counter()
    if dim is not None:
        shdata.load_sparse(conn, table, rows, dim)
    else:
        shdata.load(conn, table, rows, typ=typ, progress=progress)
    conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
    conn.execute(f"VACUUM (ANALYZE, FREEZE) {table}")
    return time.perf_counter() - t


def status_kb(pid: int) -> dict:
    """RssAnon, RssShmem and VmHWM of a process, in kB ({} if it is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("RssAnon", "RssShmem", "VmHWM"):
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def _parallel_workers(pid: int) -> list:
    """PIDs of the parallel workers serving backend `pid`."""
    tag = f"parallel worker for PID {pid}".encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if tag in f.read():
                    out.append(int(d))
        except OSError:
            continue
    return out


class MemorySampler:
    """Peak memory of a backend and its parallel workers, sampled every
    `every` s from /proc: private memory (sum of RssAnon) and the largest
    shared-memory footprint of one process (RssShmem: DSM segments and the
    shared-buffer pages it touched)."""

    def __init__(self, pid: int, every: float = 0.5):
        self.pid, self.every = pid, every
        self.peak_private = 0
        self.peak_shmem = 0
        self.max_workers = 0
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        n = 0
        workers = []
        while not self._stop.is_set():
            if n % 4 == 0:                      # the /proc scan costs more
                workers = _parallel_workers(self.pid)
                self.max_workers = max(self.max_workers, len(workers))
            n += 1
            st = [status_kb(p) for p in [self.pid] + workers]
            self.peak_private = max(self.peak_private,
                                    1024 * sum(x.get("RssAnon", 0) for x in st))
            self.peak_shmem = max([self.peak_shmem] + [1024 * x.get("RssShmem", 0)
                                                         for x in st])
            self._stop.wait(self.every)

    def __enter__(self):
        self._th.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._th.join(timeout=5)


def build_index(cluster, eng: Engine, typ: str, metric: str, m: int, efc: int,
                log=print, poll: float = 5.0, column: str = "embedding") -> dict:
    """CREATE INDEX on column (or a parenthesized expression) with a progress
    line every `poll` seconds from a second connection
    (pg_stat_progress_create_index)."""
    sql = (f"CREATE INDEX {eng.index} ON {eng.table} USING {eng.am} "
           f"({column} {opclass(typ, metric)}) WITH (m = {m}, ef_construction = {efc})")
    done = threading.Event()
    with cluster.connect() as conn:
        pid = conn.info.backend_pid

        def watch():
            t0 = time.perf_counter()
            with cluster.connect() as w:
                while not done.wait(poll):
                    r = w.execute("SELECT phase, tuples_done, tuples_total, blocks_done, "
                                  "blocks_total FROM pg_stat_progress_create_index "
                                  "WHERE pid = %s", (pid,)).fetchone()
                    el = time.perf_counter() - t0
                    if r:
                        phase, td, tt, bd, bt = r
                        extra = f", tuples {td}/{tt}" if tt else (
                            f", blocks {bd}/{bt}" if bt else "")
                        log(f"    building {eng.am}: {phase}{extra} ({el:.0f} s)",
                            flush=True)
                    else:
                        log(f"    building {eng.am}: ({el:.0f} s)", flush=True)

        th = threading.Thread(target=watch, daemon=True)
        th.start()
        t = time.perf_counter()
        try:
            with MemorySampler(pid) as mem:
                conn.execute(sql)
        finally:
            done.set()
        build_s = time.perf_counter() - t
        th.join(timeout=10)
        size = conn.execute("SELECT pg_relation_size(%s::regclass)", (eng.index,)
                            ).fetchone()[0]
        table_size = conn.execute("SELECT pg_table_size(%s::regclass)", (eng.table,)
                                  ).fetchone()[0]
    return {"build_s": build_s, "index_bytes": int(size), "table_bytes": int(table_size),
            "sql": sql, "build_peak_bytes": mem.peak_private,
            "build_peak_shmem_bytes": mem.peak_shmem, "build_workers": mem.max_workers}


def check_plan(conn, eng: Engine, sql: str, lit: str) -> str:
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, (lit,)).fetchall())
    if eng.index not in plan:
        raise RuntimeError(f"the planner did not use {eng.index} ({eng.label}):\n{plan}")
    return plan


# --- cache control ---------------------------------------------------------------

def relations(conn, eng: Engine) -> list:
    """The relations a search touches: index, table, TOAST table and TOAST index."""
    rels = [eng.index, eng.table]
    r = conn.execute("SELECT t.reltoastrelid::regclass::text, "
                     "(SELECT i.indexrelid::regclass::text FROM pg_index i "
                     " WHERE i.indrelid = t.reltoastrelid LIMIT 1) "
                     "FROM pg_class t WHERE t.oid = %s::regclass", (eng.table,)).fetchone()
    if r and r[0] and r[0] != "-":
        rels.append(r[0])
        if r[1]:
            rels.append(r[1])
    return rels


def relation_files(conn, datadir: Path, rels: list) -> list:
    """Every file of the relations: main fork segments .1, .2, ... and fsm/vm."""
    files = []
    for rel in rels:
        rp = conn.execute("SELECT pg_relation_filepath(%s::regclass)", (rel,)).fetchone()[0]
        base = Path(datadir) / rp
        for fork in ("", "_fsm", "_vm"):
            p = Path(str(base) + fork)
            seg = 0
            while True:
                q = p if seg == 0 else Path(f"{p}.{seg}")
                if not q.exists():
                    break
                files.append(q)
                seg += 1
    return files


def drop_os_cache(files: list) -> None:
    """posix_fadvise(DONTNEED) on each file (written back first, so that no
    dirty page survives)."""
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class Evictor:
    """Makes one engine's relations cold: out of shared buffers and the OS
    cache (os_cache=False: out of shared buffers only, so that a read costs
    the injected delay and a copy from the OS cache, not the disk's own
    time too)."""

    def __init__(self, conn, datadir: Path, eng: Engine, os_cache: bool = True):
        self.rels = relations(conn, eng)
        self.files = relation_files(conn, datadir, self.rels) if os_cache else []
        self.sql = ("SELECT coalesce(sum((pg_buffercache_evict_relation(r)).buffers_evicted), 0)"
                    " FROM unnest(%s::regclass[]) r")

    def __call__(self, conn) -> int:
        n = conn.execute(self.sql, (self.rels,)).fetchone()[0]
        drop_os_cache(self.files)
        return int(n)


def prewarm(conn, eng: Engine) -> int:
    """pg_prewarm the engine's relations; for streamhnsw also load the shared
    graph image now (its first scan would otherwise start the build in the
    background and the measurement could begin before it is ready)."""
    n = 0
    for rel in relations(conn, eng):
        n += conn.execute("SELECT pg_prewarm(%s::regclass)", (rel,)).fetchone()[0]
    if eng.am == "streamhnsw" and eng.gucs.get("streamhnsw.shared_cache", "on") != "off":
        conn.execute("SELECT streamhnsw_cache_load(%s::regclass)", (eng.index,))
    return n


# --- queries ------------------------------------------------------------------------

def explain_buffers(conn, sql: str, lit: str) -> dict:
    """Buffers hit and read by one execution (EXPLAIN ANALYZE, BUFFERS, JSON)."""
    r = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, (lit,)).fetchone()[0]
    if isinstance(r, str):
        r = json.loads(r)
    top = r[0]
    plan = top["Plan"]
    out = {"hit": plan.get("Shared Hit Blocks", 0),
           "read": plan.get("Shared Read Blocks", 0),
           "io_read_ms": plan.get("Shared I/O Read Time", plan.get("I/O Read Time", 0.0)),
           "exec_ms": top.get("Execution Time")}
    out.update(_streamhnsw_io(plan))
    return out


# The streamhnsw EXPLAIN fields a cold run reports (src/stats.c), by key.
_SHNSW_FIELDS = {"Nodes Expanded": "nodes_expanded", "Pages Hit": "pages_hit",
                 "Pages Read": "pages_read", "Synchronous Reads": "sync_reads",
                 "Waits": "waits", "Stalls": "stalls", "Reads Ahead": "reads_ahead",
                 "Speculative Reads": "spec_reads", "Speculative Wasted": "spec_wasted",
                 "Heap Prefetches": "heap_prefetches"}


def _streamhnsw_io(plan: dict) -> dict:
    """The streamhnsw scan's own I/O figures from an EXPLAIN JSON plan (the
    first node that has them), empty for other engines."""
    if "streamhnsw Pages Read" in plan:
        return {v: plan[f"streamhnsw {k}"] for k, v in _SHNSW_FIELDS.items()
                if f"streamhnsw {k}" in plan}
    for sub in plan.get("Plans", []):
        got = _streamhnsw_io(sub)
        if got:
            return got
    return {}
