"""The order of the shared image's node records (src/README, "Shared cache",
Record order; issue 49, images that grow).

An index filled by inserts holds each page's nodes in the order they
arrived, far apart in the graph; its image is rebuilt with the records in
breadth-first graph order (a regrowth: the first image serves meanwhile),
found out from the first image's share of links to the same page. An index
CREATE INDEX laid out keeps neighbours together already, and its image is
not rebuilt. Results are identical either way, and to the buffer path's.

A cluster of their own: the build's DEBUG1 line (how many records it
placed in graph order, how many links it found to the same page) is what
they read, in the server log.
"""

import re
import time

import pytest

from shnsw import data
from shnsw.cluster import Cluster

from test_shared_cache import cache_row, explain_shared, fallback_nodes, same_on_off

BUILD_LINE = re.compile(r"streamhnsw cache: (first|regrowth) build, (\d+) nodes, "
                        r"(\d+) placed in graph order, (\d+) of (\d+) links to the same page")


@pytest.fixture(scope="module")
def ocluster():
    with Cluster(name="shnsw-order", settings={"shared_buffers": "256MB",
                                               "autovacuum": "off",
                                               "log_min_messages": "debug1"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        yield c


def builds_logged(cluster, nodes):
    """(kind, nodes, placed in graph order, links to the same page, links)
    of each build of an index of `nodes` nodes the log names."""
    return [(m.group(1),) + tuple(int(m.group(i)) for i in range(2, 6))
            for m in BUILD_LINE.finditer(cluster.log_tail(1 << 22))
            if int(m.group(2)) == nodes]


def wait_builds(conn, index, n, timeout=120):
    deadline = time.time() + timeout
    while True:
        st = cache_row(conn, index)
        if st is not None and st["state"] == "ready" and st["builds"] >= n:
            return st
        assert time.time() < deadline, st
        time.sleep(0.1)


def test_grown_index_image_rebuilt_in_graph_order(ocluster):
    """CREATE INDEX on 1,000 rows, 13,000 inserted: the first image of the
    grown index finds almost no links to the same page, and the next scan
    has it rebuilt in graph order beside it; the walk from the entry point
    places nearly every node, scans read every node from the image, and
    results are those of the buffer path."""
    rows, queries = data.clustered(14000, 16, seed=71, n_queries=20)
    with ocluster.connect() as conn:
        data.load(conn, "og", rows[:1000])
        conn.execute("CREATE INDEX og_idx ON og USING streamhnsw (embedding vector_l2_ops)")
        data.load(conn, "og", rows[1000:], start_id=1000, create=False)
        conn.execute("SELECT streamhnsw_cache_drop('og_idx')")
        explain_shared(conn, "og", queries[0])      # starts the first build
        wait_builds(conn, "og_idx", 1)
        explain_shared(conn, "og", queries[1])      # finds it out of order
        st = wait_builds(conn, "og_idx", 2)
        assert st["outgrown"] == 1, st
        logged = builds_logged(ocluster, 14000)
        kinds = [b[0] for b in logged]
        assert kinds[-2:] == ["first", "regrowth"], logged
        first, regrowth = logged[-2], logged[-1]
        assert first[3] * 64 < first[4], first          # links to the same page
        assert regrowth[2] >= 0.95 * 14000, regrowth    # placed by the walk
        for q in queries[2:8]:
            line = explain_shared(conn, "og", q)
            assert "used" in line and fallback_nodes(line)[1] == 0, line
        same_on_off(conn, "og", queries)
        # no more rebuilds without more inserts
        explain_shared(conn, "og", queries[9])
        time.sleep(1)
        assert cache_row(conn, "og_idx")["builds"] == 2


def test_laid_out_index_image_kept(ocluster):
    """An index built by CREATE INDEX on all its rows: its pages keep
    neighbours together (layout.c), its first image is kept."""
    rows, queries = data.clustered(13000, 16, seed=72, n_queries=10)
    with ocluster.connect() as conn:
        data.load(conn, "of", rows)
        conn.execute("CREATE INDEX of_idx ON of USING streamhnsw (embedding vector_l2_ops)")
        conn.execute("SELECT streamhnsw_cache_drop('of_idx')")
        explain_shared(conn, "of", queries[0])
        wait_builds(conn, "of_idx", 1)
        for q in queries[1:4]:
            line = explain_shared(conn, "of", q)
            assert "used" in line and fallback_nodes(line)[1] == 0, line
        time.sleep(1)
        st = cache_row(conn, "of_idx")
        assert st["builds"] == 1 and st["outgrown"] == 0, st
        first = [b for b in builds_logged(ocluster, 13000) if b[0] == "first"][-1]
        assert first[3] * 64 >= first[4], first
        same_on_off(conn, "of", queries)
