"""pytest fixtures: real PostgreSQL 18 clusters with pgvector and streamhnsw."""

import sys
from pathlib import Path

import pytest

# the product package (python/) and the test harnesses (test/harness)
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "test"))

from shnsw.cluster import Cluster  # noqa: E402


@pytest.fixture(scope="session")
def cluster():
    """One cluster shared by the tests that do not restart or crash it."""
    with Cluster(name="shnsw-pytest", settings={"shared_buffers": "256MB",
                                                "maintenance_work_mem": "512MB"}) as c:
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
