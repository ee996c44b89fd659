"""Run the isolation tests (test/isolation/specs, pg_isolation_regress)
against a throwaway cluster.

Usage: PYTHONPATH=python:test python -m harness.isolation [test names]    (default: every spec)

pg_isolation_regress ships in the PostgreSQL installation's PGXS directory
($(pg_config --pkglibdir)/pgxs/src/test/isolation). Results and diffs go to
test/isolation/output/; on failure the diffs are printed. The exit status
is that of pg_isolation_regress (0 when every test passed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from shnsw.cluster import ROOT, Cluster, default_pg_config

from . import print_failure

ISO_DIR = ROOT / "test" / "isolation"


def isolation_regress(pg_config: Path) -> Path:
    out = subprocess.run([str(pg_config), "--pkglibdir"], check=True,
                         capture_output=True, text=True).stdout.strip()
    path = Path(out) / "pgxs" / "src" / "test" / "isolation" / "pg_isolation_regress"
    if not path.exists():
        raise SystemExit(f"pg_isolation_regress not found at {path}")
    return path


def main(argv: list[str]) -> int:
    pg_config = default_pg_config()
    tests = argv or sorted(p.stem for p in (ISO_DIR / "specs").glob("*.spec"))
    outdir = ISO_DIR / "output"
    outdir.mkdir(exist_ok=True)
    # no autovacuum, as in harness.regress: its ANALYZE's snapshot would
    # keep a spec's VACUUM from removing what the spec's output shows removed
    with Cluster(name="shnsw-isolation",
                 settings={"max_prepared_transactions": 10, "autovacuum": "off"}) as c:
        # with --use-existing, pg_regress neither creates the database nor
        # loads extensions
        c.execute("CREATE DATABASE shnsw_isolation")
        c.execute("CREATE EXTENSION streamhnsw CASCADE", dbname="shnsw_isolation")
        r = subprocess.run([str(isolation_regress(pg_config)),
                            f"--bindir={c.bindir}",
                            f"--inputdir={ISO_DIR}",
                            f"--expecteddir={ISO_DIR}",
                            f"--outputdir={outdir}",
                            "--use-existing",
                            f"--host={c.sockdir}", f"--port={c.port}", "--user=postgres",
                            "--dbname=shnsw_isolation",
                            *tests],
                           env=c.client_env())
        if r.returncode != 0:
            print_failure(c, outdir / "regression.diffs", 30000)
        return r.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
