"""The inspection functions need privileges and lock only streamhnsw indexes.

streamhnsw_verify and streamhnsw_metapage are revoked from PUBLIC; a role
granted EXECUTE must still own the index or be a member of pg_monitor. An
OID that is not a streamhnsw index gets an error before any lock is taken:
with another session holding AccessExclusiveLock on the relation, the call
errors at once instead of waiting for it.
"""

import time

import psycopg
import pytest

FUNCS = ["streamhnsw_verify(%s)", "streamhnsw_metapage(%s)"]


@pytest.fixture(scope="module")
def objects(cluster):
    cluster.execute("""
        CREATE ROLE shnsw_nopriv LOGIN;
        CREATE ROLE shnsw_monitor LOGIN IN ROLE pg_monitor;
        CREATE ROLE shnsw_owner LOGIN;
        CREATE TABLE priv_t (id int PRIMARY KEY, v vector(3));
        INSERT INTO priv_t SELECT g, ARRAY[g, g % 7, 1]::vector FROM generate_series(1, 50) g;
        CREATE INDEX priv_idx ON priv_t USING streamhnsw (v);
        CREATE INDEX priv_btree ON priv_t (id);
        CREATE TABLE priv_own (id int, v vector(3));
        ALTER TABLE priv_own OWNER TO shnsw_owner;
        CREATE INDEX priv_own_idx ON priv_own USING streamhnsw (v);
    """)
    oids = {n: cluster.execute("SELECT %s::regclass::oid", (n,))[0][0]
            for n in ("priv_t", "priv_btree", "priv_idx", "priv_own_idx")}
    yield oids
    cluster.execute("""
        DROP TABLE priv_t, priv_own;
        REVOKE EXECUTE ON FUNCTION streamhnsw_verify(regclass), streamhnsw_metapage(regclass)
            FROM shnsw_nopriv, shnsw_monitor, shnsw_owner;
        DROP ROLE shnsw_nopriv; DROP ROLE shnsw_monitor; DROP ROLE shnsw_owner;
    """)


def as_role(cluster, role):
    return psycopg.connect(host=str(cluster.sockdir), port=cluster.port, user=role,
                           dbname="postgres", autocommit=True)


def call(conn, func, oid):
    return conn.execute(f"SELECT * FROM {func % '%s::oid::regclass'}", (oid,)).fetchall()


def test_not_executable_by_public(cluster, objects):
    with as_role(cluster, "shnsw_nopriv") as conn:
        for f in FUNCS:
            with pytest.raises(psycopg.errors.InsufficientPrivilege,
                               match="permission denied for function"):
                call(conn, f, objects["priv_idx"])
    # functions that write shared state never run in parallel workers
    assert cluster.execute("SELECT proparallel FROM pg_proc WHERE proname = "
                           "'streamhnsw_stats_reset'")[0][0] == "u"


def test_grant_needs_owner_or_pg_monitor(cluster, objects):
    cluster.execute("GRANT EXECUTE ON FUNCTION streamhnsw_verify(regclass), "
                    "streamhnsw_metapage(regclass) TO shnsw_nopriv, shnsw_monitor, shnsw_owner")
    with as_role(cluster, "shnsw_nopriv") as conn:
        for f in FUNCS:
            with pytest.raises(psycopg.errors.InsufficientPrivilege,
                               match="permission denied for index priv_idx"):
                call(conn, f, objects["priv_idx"])
    with as_role(cluster, "shnsw_monitor") as conn:
        assert call(conn, FUNCS[0], objects["priv_idx"]) == []
        assert call(conn, FUNCS[1], objects["priv_idx"])[0][7] == 50    # node_count
    with as_role(cluster, "shnsw_owner") as conn:
        assert call(conn, FUNCS[0], objects["priv_own_idx"]) == []
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            call(conn, FUNCS[0], objects["priv_idx"])


@pytest.mark.parametrize("target", ["priv_t", "priv_btree"])
def test_other_relations_error_before_locking(cluster, objects, target):
    """A table or a btree index gets an error, not a wait for its lock."""
    cluster.execute("GRANT EXECUTE ON FUNCTION streamhnsw_verify(regclass), "
                    "streamhnsw_metapage(regclass) TO shnsw_nopriv, shnsw_monitor")
    with cluster.connect(autocommit=False) as holder:
        # DROP takes AccessExclusiveLock on the relation until rollback
        kind = "TABLE" if target == "priv_t" else "INDEX"
        holder.execute(f"DROP {kind} {target}")
        for role in ("shnsw_nopriv", "shnsw_monitor"):
            with as_role(cluster, role) as conn:
                conn.execute("SET lock_timeout = '3s'")
                for f in FUNCS:
                    t0 = time.monotonic()
                    with pytest.raises(psycopg.errors.WrongObjectType,
                                       match="is not a streamhnsw index"):
                        call(conn, f, objects[target])
                    assert time.monotonic() - t0 < 1.0
                    # and nothing of it is locked by this session
                    assert conn.execute("SELECT count(*) FROM pg_locks WHERE relation = %s "
                                        "AND pid = pg_backend_pid()",
                                        (objects[target],)).fetchone()[0] == 0
        holder.rollback()
    # the index itself, while another session holds it: a user without
    # privileges is refused at once too
    with cluster.connect(autocommit=False) as holder:
        holder.execute("DROP INDEX priv_idx")
        with as_role(cluster, "shnsw_nopriv") as conn:
            conn.execute("SET lock_timeout = '3s'")
            t0 = time.monotonic()
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                call(conn, FUNCS[0], objects["priv_idx"])
            assert time.monotonic() - t0 < 1.0
        holder.rollback()
