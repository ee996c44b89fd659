"""pytest fixtures: real PostgreSQL 18 clusters with pgvector and streamhnsw."""

import sys
from pathlib import Path

import pytest

# the product package (python/) and the test harnesses (test/harness)
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "test"))

from shnsw.cluster import Cluster  # noqa: E402

# Test connections never prepare statements on their own. psycopg prepares a
# statement after its fifth execution, and the server then reuses a plan made
# under the settings of that moment: a test that computes the exact answer
# with enable_indexscan off and then runs the same text through the index
# would measure the sequential scan's plan again (the halfvec insert-recall
# parity test measured pgvector's "recall" so). Tests that want a prepared
# statement say so (PREPARE, or prepare=True). Every cluster the tests
# create, here or in test/harness, connects so.
Cluster.connect_defaults = {"prepare_threshold": None}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "citus: needs Citus, built from its source tarball by python/shnsw/citus.py "
        "(skipped with the reason where the tarball is absent; deselect with -m 'not citus')")


@pytest.fixture(scope="session")
def cluster():
    """One cluster shared by the tests that do not restart or crash it.

    Autovacuum is off: its ANALYZE of a table holds a snapshot while it
    samples, and a test's own VACUUM in that window removes nothing, so
    that the tests asserting what a VACUUM does failed now and then on a
    loaded machine (test_churn, test_cancel, test_durability's
    cache-generation test). No test here relies on autovacuum."""
    with Cluster(name="shnsw-pytest", settings={"shared_buffers": "256MB",
                                                "maintenance_work_mem": "512MB",
                                                "autovacuum": "off"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        yield c


@pytest.fixture
def conn(cluster):
    with cluster.connect() as conn:
        yield conn


@pytest.fixture
def private_cluster():
    """A cluster of the test's own, for tests that restart or crash the server."""
    with Cluster(name="shnsw-private") as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        yield c
