"""Waiting for a quiet xmin horizon before a VACUUM whose effect a test asserts.

A VACUUM removes only rows no snapshot can still see. On the session-wide
test cluster an autovacuum ANALYZE of another test's table (it holds a
snapshot while it samples), or any other open snapshot in the database,
can hold the horizon back for seconds on a loaded machine, and a VACUUM in
that window removes nothing: a test of what VACUUM frees would then fail
for a reason that is not the index's.
"""

import time

HOLDERS = ("SELECT pid, backend_type, left(query, 60) FROM pg_stat_activity "
           "WHERE datname = current_database() AND pid <> pg_backend_pid() "
           "AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)")


def wait_for_quiet_horizon(conn, timeout: float = 120.0) -> list:
    """Wait until no other backend of this database holds a snapshot or an
    xid; returns the holders seen at first (printed, for the record)."""
    first = conn.execute(HOLDERS).fetchall()
    if first:
        print("waiting for snapshot holders:", first)
    deadline = time.monotonic() + timeout
    while conn.execute(HOLDERS).fetchall():
        if time.monotonic() > deadline:
            raise AssertionError(f"snapshot holders still there after {timeout} s: "
                                 f"{conn.execute(HOLDERS).fetchall()}")
        time.sleep(0.1)
    return first
