"""Run the pg_regress suite (PGXS installcheck) against a throwaway cluster.

Usage: PYTHONPATH=python:test python -m harness.regress [extra make arguments]
Exit status is that of pg_regress; on failure the diffs are printed.
"""

import subprocess
import sys

from shnsw.cluster import ROOT, Cluster, default_pg_config


def main(argv: list[str]) -> int:
    with Cluster(name="shnsw-regress") as c:
        r = subprocess.run(["make", "-C", str(ROOT), "installcheck",
                            f"PG_CONFIG={default_pg_config()}", *argv],
                           env=c.client_env())
        if r.returncode != 0:
            diffs = ROOT / "test" / "regress" / "regression.diffs"
            if diffs.exists():
                sys.stdout.write(diffs.read_text()[:20000])
            sys.stdout.write(c.log_tail(4000))
        return r.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
