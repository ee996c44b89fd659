"""A small PostgreSQL cluster manager for tests, the demo and benchmarks.

Each Cluster lives in its own temporary directory with its own port and
Unix socket directory, so several can run at once. When the caller is root,
the server runs as an unprivileged system user (postgres refuses to run as
root); the caller keeps connecting as the database superuser ``postgres``.

    with Cluster(settings={"shared_buffers": "256MB"}) as c:
        with c.connect() as conn:
            conn.execute("CREATE EXTENSION streamhnsw CASCADE")
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

SERVER_USER = "streamhnsw"
ROOT = Path(__file__).resolve().parents[2]


def default_pg_config() -> Path:
    """The pg_config of the project environment, unless PG_CONFIG says otherwise."""
    env = os.environ.get("PG_CONFIG")
    if env:
        return Path(env)
    return ROOT / ".venv" / "pginstall" / "bin" / "pg_config"


def pg_bindir(pg_config: Path | None = None) -> Path:
    pg_config = pg_config or default_pg_config()
    out = subprocess.run([str(pg_config), "--bindir"], check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ensure_server_user() -> pwd.struct_passwd:
    """Return the unprivileged user the server runs as, creating it if needed."""
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home",
                        "--shell", "/usr/sbin/nologin", SERVER_USER],
                       check=True)
        return pwd.getpwnam(SERVER_USER)


def _make_traversable(path: Path) -> None:
    """Let other users reach `path`: add o+x to any ancestor that lacks it.

    Only used as root, for a checkout under a private directory (mktemp -d),
    so that the unprivileged server can load the installed extension.
    """
    for p in [path, *path.parents]:
        mode = p.stat().st_mode
        if not mode & 0o001:
            os.chmod(p, mode | 0o001)


class Cluster:
    """One throwaway PostgreSQL cluster."""

    # connect_options of clusters created without them (the test suite sets it)
    connect_defaults: dict = {}

    def __init__(self, settings: dict | None = None, env: dict | None = None,
                 pg_config: Path | None = None, base_dir: Path | None = None,
                 name: str = "shnsw", listen_tcp: bool = False,
                 connect_options: dict | None = None):
        self.bindir = pg_bindir(pg_config)
        # psycopg.connect keywords every connect() uses unless told otherwise
        self.connect_options = dict(self.connect_defaults if connect_options is None
                                    else connect_options)
        self.settings = dict(settings or {})
        self.server_env = dict(env or {})
        self.listen_tcp = listen_tcp
        self._own_dir = base_dir is None
        self.name = name
        self.dir = Path(base_dir or tempfile.mkdtemp(prefix=f"{name}-"))
        self.datadir = self.dir / "data"
        self.sockdir = self.dir / "sock"
        self.logfile = self.dir / "server.log"
        self.port = _free_port()
        self.running = False
        self.as_user = None
        if os.geteuid() == 0:
            self.as_user = _ensure_server_user()
            _make_traversable(self.bindir)

    # --- running programs -------------------------------------------------
    def _run(self, args: list, check: bool = True, **kw):
        """Run a server-side program (initdb, pg_ctl) as the server user."""
        extra = {}
        if self.as_user is not None:
            extra = dict(user=self.as_user.pw_uid, group=self.as_user.pw_gid,
                         extra_groups=[])
        env = os.environ.copy()
        env.update(self.server_env)
        env.pop("PGDATA", None)
        return subprocess.run([str(a) for a in args], check=check, env=env,
                              capture_output=True, text=True, **extra, **kw)

    def _chown_tree(self, path: Path) -> None:
        if self.as_user is None:
            return
        uid, gid = self.as_user.pw_uid, self.as_user.pw_gid
        os.chown(path, uid, gid)
        for root, dirs, files in os.walk(path):
            for n in dirs + files:
                os.chown(os.path.join(root, n), uid, gid)

    # --- life cycle --------------------------------------------------------
    def init(self) -> "Cluster":
        self.sockdir.mkdir(parents=True, exist_ok=True)
        self._chown_tree(self.dir)
        r = self._run([self.bindir / "initdb", "-D", self.datadir, "-U", "postgres",
                       "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"],
                      check=False)
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{r.stdout}\n{r.stderr}")
        conf = {
            "port": self.port,
            "unix_socket_directories": f"'{self.sockdir}'",
            "listen_addresses": "'127.0.0.1'" if self.listen_tcp else "''",
            "fsync": "on",
            "max_connections": 60,
            "jit": "off",
            "logging_collector": "off",
        }
        conf.update(self.settings)
        self.write_conf(conf)
        return self

    def write_conf(self, conf: dict) -> None:
        """Append settings to postgresql.conf (later lines win)."""
        with open(self.datadir / "postgresql.conf", "a") as f:
            for k, v in conf.items():
                f.write(f"{k} = {v}\n")

    def start(self, timeout: float = 60) -> "Cluster":
        deadline = time.time() + timeout
        while True:
            r = self._run([self.bindir / "pg_ctl", "-D", self.datadir, "-l",
                           self.logfile, "-w", "-t", str(int(timeout)), "start"],
                          check=False)
            if r.returncode == 0:
                break
            # After a crash, orphaned backends may still hold the old
            # shared memory for a moment: retry until they are gone.
            if time.time() > deadline or "shared memory" not in self.log_tail(4000):
                raise RuntimeError(f"server failed to start:\n{r.stdout}{r.stderr}\n"
                                   f"{self.log_tail()}")
            time.sleep(0.5)
        self.running = True
        return self

    def stop(self, mode: str = "fast") -> None:
        if not self.running:
            return
        self._run([self.bindir / "pg_ctl", "-D", self.datadir, "-m", mode, "-w",
                   "stop"], check=False)
        self.running = False

    def restart(self) -> None:
        self.stop()
        self.start()

    def postmaster_pid(self) -> int:
        with open(self.datadir / "postmaster.pid") as f:
            return int(f.readline())

    def crash(self, how: str = "kill9") -> None:
        """Crash the server: 'kill9' kills the postmaster, 'immediate' is pg_ctl -m immediate."""
        if how == "immediate":
            self.stop("immediate")
            return
        pid = self.postmaster_pid()
        os.kill(pid, signal.SIGKILL)
        # Children notice the postmaster's death and exit on their own.
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        self.running = False

    def destroy(self) -> None:
        try:
            if self.running:
                self.stop("immediate")
        finally:
            keep = os.environ.get("SHNSW_KEEP_LOGS")
            if keep and os.path.exists(self.logfile):
                # debugging aid: the server log outlives the cluster
                os.makedirs(keep, exist_ok=True)
                shutil.copy(self.logfile, os.path.join(
                    keep, f"{self.name}-{os.getpid()}-{int(time.time())}.log"))
            if self._own_dir:
                shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        if not self.datadir.exists():
            self.init()
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    # --- clients -----------------------------------------------------------
    @property
    def conninfo(self) -> str:
        return f"host={self.sockdir} port={self.port} user=postgres dbname=postgres"

    def client_env(self) -> dict:
        """Environment for client programs (psql, pg_regress, pgbench)."""
        env = os.environ.copy()
        env.update(PGHOST=str(self.sockdir), PGPORT=str(self.port), PGUSER="postgres")
        return env

    def connect(self, dbname: str = "postgres", autocommit: bool = True,
                **kw) -> psycopg.Connection:
        return psycopg.connect(host=str(self.sockdir), port=self.port,
                               user="postgres", dbname=dbname,
                               autocommit=autocommit, **{**self.connect_options, **kw})

    def execute(self, sql: str, params=None, dbname: str = "postgres") -> list:
        """Run one statement in a fresh connection; return its rows (or [])."""
        with self.connect(dbname) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def log_tail(self, nbytes: int = 8000) -> str:
        try:
            with open(self.logfile, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - nbytes))
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""


def open_kept(base_dir: Path, settings: dict, name: str) -> Cluster:
    """A cluster kept in base_dir across runs of a tool: reconnected to if
    it is still running (its port is remembered in base_dir/port), else
    started again, or created; streamhnsw (and pgvector) installed. The
    tool stops it when asked (Cluster.stop)."""
    c = Cluster(settings=settings, base_dir=base_dir, name=name)
    portfile = Path(base_dir) / "port"
    if c.datadir.exists() and (c.datadir / "postmaster.pid").exists() and portfile.exists():
        c.port = int(portfile.read_text())
        c.running = True
        try:
            c.execute("SELECT 1")
            return c
        except Exception:
            c.running = False
    if not c.datadir.exists():
        c.init()
    else:
        c.write_conf({"port": c.port})
    portfile.write_text(str(c.port))
    c.start()
    c.execute("CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE")
    return c
