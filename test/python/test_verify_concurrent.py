"""streamhnsw_verify reports no false problems while rows are inserted.

verify takes a ShareLock on the index (src/README, Verification): it waits
for transactions that inserted into it to end and holds new inserts off
while it reads, so the counts it compares with the metapage are those of
the pages it read. Inserting sessions run throughout; every verify must
come back empty, and the inserts must all succeed.
"""

import threading
import time


def test_verify_during_inserts(cluster):
    cluster.execute("""
        CREATE TABLE vc (id serial, v vector(8));
        INSERT INTO vc (v) SELECT ARRAY[g % 13, g % 7, g % 5, g % 3, g, 1, 2, 3]::vector
            FROM generate_series(1, 2000) g;
        CREATE INDEX vc_idx ON vc USING streamhnsw (v) WITH (m = 4);
        DELETE FROM vc WHERE id % 4 = 0;
    """)
    stop = threading.Event()
    errors, inserted = [], [0]

    def insert_rows(seed):
        with cluster.connect() as conn:
            k = 0
            while not stop.is_set():
                k += 1
                try:
                    with conn.transaction():
                        conn.execute("INSERT INTO vc (v) SELECT ARRAY[%s, g, %s, 1, 2, 3, g, 0]"
                                     "::vector FROM generate_series(1, 5) g", (seed, k % 97))
                    inserted[0] += 5
                except Exception as e:         # noqa: BLE001 - reported below
                    errors.append(repr(e))
                    return

    def vacuum_rows():
        with cluster.connect() as conn:
            while not stop.is_set():
                conn.execute("VACUUM vc")
                time.sleep(0.05)

    threads = [threading.Thread(target=insert_rows, args=(s,)) for s in (1, 2)]
    threads.append(threading.Thread(target=vacuum_rows))
    for t in threads:
        t.start()
    problems = []
    try:
        with cluster.connect() as conn:
            deadline = time.monotonic() + 6
            runs = 0
            while time.monotonic() < deadline:
                problems += [r[0] for r in conn.execute(
                    "SELECT * FROM streamhnsw_verify('vc_idx')").fetchall()]
                runs += 1
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    print(f"{runs} verify runs during {inserted[0]} inserted rows")
    cluster.execute("DROP TABLE vc")
    assert not errors, errors
    assert problems == [], problems[:10]
    assert runs >= 5 and inserted[0] > 100
