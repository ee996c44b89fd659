"""A physical standby of a Cluster: pg_basebackup plus streaming replication
over loopback (127.0.0.1) only.

    with Cluster(listen_tcp=True) as primary:
        with Standby(primary) as standby:
            primary.execute("...")
            standby.catch_up(primary)
            standby.execute("SELECT ...")

The primary must listen on 127.0.0.1 (Cluster(listen_tcp=True)); initdb's
default pg_hba.conf trusts replication connections from 127.0.0.1.
"""

from __future__ import annotations

import time

from shnsw.cluster import Cluster


class Standby(Cluster):
    """A hot standby streaming from `primary`."""

    def __init__(self, primary: Cluster, name: str = "shnsw-standby", **kw):
        super().__init__(name=name, pg_config=None, **kw)
        self.primary = primary

    def init(self) -> "Standby":
        if not self.primary.listen_tcp:
            raise ValueError("the primary must listen on 127.0.0.1 (listen_tcp=True)")
        self.sockdir.mkdir(parents=True, exist_ok=True)
        self._chown_tree(self.dir)
        r = self._run([self.bindir / "pg_basebackup", "-D", self.datadir,
                       "-h", "127.0.0.1", "-p", self.primary.port, "-U", "postgres",
                       "-X", "stream", "-R", "--checkpoint=fast", "--no-sync"],
                      check=False)
        if r.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed:\n{r.stdout}\n{r.stderr}")
        # -R wrote standby.signal and primary_conninfo (host=127.0.0.1);
        # the copied postgresql.conf names the primary's port and sockets
        self.write_conf({
            "port": self.port,
            "unix_socket_directories": f"'{self.sockdir}'",
            "listen_addresses": "''",
            "hot_standby": "on",
            **self.settings,
        })
        return self

    def catch_up(self, primary: Cluster | None = None, timeout: float = 60) -> None:
        """Wait until the standby has replayed everything the primary wrote."""
        primary = primary or self.primary
        lsn = primary.execute("SELECT pg_current_wal_insert_lsn()")[0][0]
        deadline = time.time() + timeout
        while time.time() < deadline:
            done = self.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))[0][0]
            if done:
                return
            time.sleep(0.05)
        raise TimeoutError(f"standby did not replay up to {lsn} within {timeout}s:\n"
                           f"{self.log_tail(3000)}")
