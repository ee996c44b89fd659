"""The foundation: cluster manager life cycle, extension loading, build checks."""

import os
import subprocess

import psycopg
import pytest

from shnsw.cluster import ROOT, Cluster


def test_extension_reports_version(conn):
    lib, ext = conn.execute(
        "SELECT streamhnsw_version(), extversion FROM pg_extension "
        "WHERE extname = 'streamhnsw'").fetchone()
    assert lib == ext
    control = (ROOT / "streamhnsw.control").read_text()
    assert f"default_version = '{ext}'" in control


def test_cpu_features_match_the_machine(conn):
    feats = conn.execute("SELECT streamhnsw_cpu_features()").fetchone()[0]
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    assert ("avx2" in feats) == ("avx2" in flags)
    assert ("avx512f" in feats) == ("avx512f" in flags)


def test_two_clusters_run_side_by_side(cluster):
    with Cluster(name="shnsw-second") as other:
        assert other.port != cluster.port
        assert other.execute("SELECT 1")[0][0] == 1
        assert cluster.execute("SELECT 1")[0][0] == 1


def test_restart_keeps_data_and_crash_recovers(private_cluster):
    c = private_cluster
    c.execute("CREATE TABLE t (x int)")
    c.execute("INSERT INTO t SELECT generate_series(1, 100)")
    c.restart()
    assert c.execute("SELECT count(*) FROM t")[0][0] == 100
    c.execute("INSERT INTO t SELECT generate_series(101, 150)")
    c.crash("kill9")
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT 1")
    c.start()
    assert c.execute("SELECT count(*) FROM t")[0][0] == 150
    c.crash("immediate")
    c.start()
    assert c.execute("SELECT count(*) FROM t")[0][0] == 150
    assert "database system was interrupted" in c.log_tail(20000) or \
        "database system was not properly shut down" in c.log_tail(20000)


def test_server_environment_reaches_the_postmaster():
    with Cluster(name="shnsw-env", env={"SHNSW_PROBE": "42"}) as c:
        pid = c.postmaster_pid()
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        assert b"SHNSW_PROBE=42" in env


@pytest.mark.parametrize("pg_config,expect", [
    ("/nonexistent/pg_config", "pg_config not found"),
    ("FAKE15", "needs PostgreSQL 18"),
])
def test_bad_pg_config_stops_the_build(tmp_path, pg_config, expect):
    if pg_config == "FAKE15":
        fake = tmp_path / "pg_config"
        fake.write_text("#!/bin/sh\necho 'PostgreSQL 15.8'\n")
        fake.chmod(0o755)
        pg_config = str(fake)
    r = subprocess.run(["make", "-C", str(ROOT), "-n", f"PG_CONFIG={pg_config}"],
                       capture_output=True, text=True, env=os.environ.copy())
    assert r.returncode != 0
    assert expect in r.stderr
