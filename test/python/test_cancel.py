"""Long streamhnsw operations stop soon after a cancel (issue 19).

pg_cancel_backend is sent while each statement is busy inside the access
method, and the statement must end with "canceling statement due to user
request" within CANCEL_LIMIT seconds of the cancel:

- CREATE INDEX of 40k x 64 rows (about 7 s here; the issue's 200k x 128
  would take minutes on this machine, and the interrupt checks are per
  node or per search step, so the size only changes how long the build
  would have run);
- an ordered search with streamhnsw.max_scan_tuples = 10,000,000 and a
  filter no row passes (it walks the whole graph: about 0.25 s at this
  size, so this one mostly shows the scan ends at all; the per-step check
  of the search loop is unit-tested in test/unit);
- an INSERT whose insert retrains the quantizer (caught while it holds the
  retrain's exclusive insert lock);
- a VACUUM repairing the graph after 50% of the rows were deleted (about 7 s).

The limit is 1.5 s rather than 1 s because this machine's two cores are
shared; the measured latencies are printed.
"""

import threading
import time

import psycopg
import pytest

from harness.horizon import wait_for_quiet_horizon

CANCEL_LIMIT = 1.5
LATENCIES: dict = {}


class Running:
    """A statement running on its own connection in a thread."""

    def __init__(self, cluster, sql, setup=()):
        self.conn = cluster.connect()
        for s in setup:
            self.conn.execute(s)
        self.pid = self.conn.info.backend_pid
        self.error = None
        self.ended = None
        self.thread = threading.Thread(target=self._run, args=(sql,))
        self.thread.start()

    def _run(self, sql):
        try:
            self.conn.execute(sql)
        except psycopg.Error as e:
            self.error = e
        self.ended = time.monotonic()

    def cancel_and_wait(self, admin, label):
        assert self.ended is None, f"{label} ended before the cancel: make it longer"
        admin.execute("SELECT pg_cancel_backend(%s)", (self.pid,))
        sent = time.monotonic()
        self.thread.join(30)
        assert not self.thread.is_alive(), f"{label} still running 30 s after a cancel"
        self.conn.close()
        latency = self.ended - sent
        LATENCIES[label] = round(latency, 3)
        print(f"{label}: ended {latency:.3f} s after the cancel")
        assert isinstance(self.error, psycopg.errors.QueryCanceled), \
            f"{label}: {self.error!r}"
        assert latency < CANCEL_LIMIT, f"{label}: ended {latency:.2f} s after the cancel"


def wait_busy(admin, pid, seconds):
    """Wait, checking that the backend is still running its statement."""
    time.sleep(seconds)
    state = admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s",
                          (pid,)).fetchone()
    assert state and state[0] == "active", state


@pytest.fixture(scope="module")
def big(cluster):
    with cluster.connect() as conn:
        conn.execute("SELECT setseed(0.3)")
        conn.execute("CREATE TABLE cancel_t (id int, v vector(64))")
        conn.execute("INSERT INTO cancel_t SELECT g, (SELECT array_agg(random())::vector "
                     "FROM generate_series(1, 64) WHERE g > 0) FROM generate_series(1, 40000) g")
    yield "cancel_t"
    cluster.execute("DROP TABLE cancel_t")


def test_cancel(cluster, big):
    with cluster.connect() as admin:
        # CREATE INDEX, while it builds the graph
        r = Running(cluster, f"CREATE INDEX cancel_t_v ON {big} USING streamhnsw (v)",
                    setup=["SET maintenance_work_mem = '256MB'",
                           # one process: parallel workers finish this build
                           # in under 2 s on an idle 2-core machine
                           "SET max_parallel_maintenance_workers = 0"])
        wait_busy(admin, r.pid, 1.0)
        r.cancel_and_wait(admin, "create index")
        assert admin.execute("SELECT count(*) FROM pg_class WHERE relname = 'cancel_t_v'"
                             ).fetchone()[0] == 0

        admin.execute("SET maintenance_work_mem = '256MB'")
        admin.execute(f"CREATE INDEX cancel_t_v ON {big} USING streamhnsw (v)")

        # a search that no row passes, with no budget to stop it
        r = Running(cluster,
                    f"SELECT id FROM {big} WHERE id < 0 "
                    f"ORDER BY v <-> (SELECT v FROM {big} WHERE id = 5) LIMIT 10",
                    setup=["SET streamhnsw.max_scan_tuples = 10000000",
                           "SET enable_seqscan = off"])
        time.sleep(0.05)
        if r.ended is None:
            r.cancel_and_wait(admin, "search")
        else:
            r.thread.join()
            r.conn.close()
            assert r.error is None, r.error
            print(f"search: the whole walk took under 0.05 s")

        # VACUUM repairing after half the rows are deleted
        admin.execute(f"DELETE FROM {big} WHERE id % 2 = 0")
        wait_for_quiet_horizon(admin)
        r = Running(cluster, f"VACUUM {big}")
        wait_busy(admin, r.pid, 2.0)
        r.cancel_and_wait(admin, "vacuum")


def test_cancel_retrain(cluster):
    """An INSERT is cancelled while its insert retrains the quantizer."""
    with cluster.connect() as admin:
        admin.execute("SELECT setseed(0.4)")
        admin.execute("CREATE TABLE cancel_q (id int, v vector(1024))")
        admin.execute("INSERT INTO cancel_q SELECT g, (SELECT array_agg(random())::vector "
                      "FROM generate_series(1, 1024) WHERE g > 0) FROM generate_series(1, 8000) g")
        # the index holds half the rows; moving the other half into it makes
        # it double, so the 4000th insert retrains on all 8000 vectors
        admin.execute("CREATE INDEX cancel_q_v ON cancel_q USING streamhnsw (v) "
                      "WITH (m = 4, ef_construction = 8) WHERE id <= 4000")
        oid = admin.execute("SELECT 'cancel_q_v'::regclass::oid").fetchone()[0]
        r = Running(cluster, "UPDATE cancel_q SET id = id - 4000 WHERE id > 4000")
        deadline = time.monotonic() + 60
        while r.ended is None and time.monotonic() < deadline:
            held = admin.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'page' AND relation = %s "
                "AND page = 0 AND mode = 'ExclusiveLock' AND granted AND pid = %s",
                (oid, r.pid)).fetchone()[0]
            if held:
                break
            time.sleep(0.005)
        assert r.ended is None, "the retrain was not seen: make the index larger"
        r.cancel_and_wait(admin, "insert retraining")
        admin.execute("DROP TABLE cancel_q")
