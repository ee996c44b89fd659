"""Harnesses of the test suite (run pg_regress and isolation tests, durability
workloads, a streaming standby); not part of the product package."""

import sys
from pathlib import Path


def print_failure(cluster, diffs: Path, limit: int) -> None:
    """After a failed pg_regress-style run: its diffs (first `limit`
    characters) and the tail of the server log."""
    if diffs.exists():
        sys.stdout.write(diffs.read_text()[:limit])
    sys.stdout.write(cluster.log_tail(4000))
