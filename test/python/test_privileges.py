"""The inspection functions need privileges and lock only streamhnsw indexes.

streamhnsw_verify and streamhnsw_metapage are revoked from PUBLIC; a role
granted EXECUTE must still own the index or be a member of pg_monitor. An
OID that is not a streamhnsw index gets an error before any lock is taken:
with another session holding AccessExclusiveLock on the relation, the call
errors at once instead of waiting for it. The shared cache's
functions check the same way before locking, streamhnsw_cache_list shows a
plain role only what it may read, and debug settings are superuser-only.
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


def refused_at_once(conn, f, oid, err, msg):
    """f(oid) raises err (matching msg) within a second, without queueing
    behind another session's lock on the relation, and leaves nothing of
    it locked by this session."""
    t0 = time.monotonic()
    with pytest.raises(err, match=msg):
        call(conn, f, oid)
    assert time.monotonic() - t0 < 1.0
    assert conn.execute("SELECT count(*) FROM pg_locks WHERE relation = %s "
                        "AND pid = pg_backend_pid()", (oid,)).fetchone()[0] == 0


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
                    refused_at_once(conn, f, objects[target], psycopg.errors.WrongObjectType,
                                    "is not a streamhnsw index")
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


# ---------- the shared cache's functions (issue 49, hole 9) ----------

CACHE_FUNCS = ["streamhnsw_cache_load(%s)", "streamhnsw_cache_drop(%s)"]


def test_cache_functions_check_before_locking(cluster, objects):
    """cache_load and cache_drop refuse a relation the caller has no rights
    on, or one that is not a streamhnsw index, without queueing behind
    another session's AccessExclusiveLock on it."""
    for target, err, msg in (("priv_idx", psycopg.errors.InsufficientPrivilege,
                              "permission denied for index priv_idx"),
                             ("priv_t", psycopg.errors.WrongObjectType,
                              "is not a streamhnsw index"),
                             ("priv_btree", psycopg.errors.WrongObjectType,
                              "is not a streamhnsw index")):
        kind = "TABLE" if target == "priv_t" else "INDEX"
        with cluster.connect(autocommit=False) as holder:
            holder.execute(f"DROP {kind} {target}")
            with as_role(cluster, "shnsw_nopriv") as conn:
                conn.execute("SET lock_timeout = '3s'")
                for f in CACHE_FUNCS:
                    refused_at_once(conn, f, objects[target], err, msg)
            holder.rollback()
    # the owner loads and drops its own index's image
    with as_role(cluster, "shnsw_owner") as conn:
        conn.execute("INSERT INTO priv_own SELECT g, ARRAY[g, 1, 2]::vector "
                     "FROM generate_series(1, 30) g")
        assert call(conn, CACHE_FUNCS[0], objects["priv_own_idx"])[0][0] > 0
        assert call(conn, CACHE_FUNCS[1], objects["priv_own_idx"])[0][0] is True


def test_cache_list_shows_only_what_the_role_may_read(cluster, objects):
    cluster.execute("DROP DATABASE IF EXISTS priv_other")
    cluster.execute("CREATE DATABASE priv_other")
    other = psycopg.connect(host=str(cluster.sockdir), port=cluster.port, user="postgres",
                            dbname="priv_other", autocommit=True)
    try:
        other.execute("CREATE EXTENSION streamhnsw CASCADE")
        other.execute("CREATE TABLE o (id int, v vector(3))")
        other.execute("INSERT INTO o SELECT g, ARRAY[g, 2, 3]::vector FROM generate_series(1, 40) g")
        other.execute("CREATE INDEX o_idx ON o USING streamhnsw (v)")
        assert other.execute("SELECT streamhnsw_cache_load('o_idx')").fetchone()[0] > 0
        with as_role(cluster, "shnsw_owner") as conn:
            conn.execute("INSERT INTO priv_own SELECT g, ARRAY[g, 1, 2]::vector "
                         "FROM generate_series(1, 30) g")
            assert call(conn, CACHE_FUNCS[0], objects["priv_own_idx"])[0][0] > 0
        cluster.execute("SELECT streamhnsw_cache_load('priv_idx')")

        def listed(role):
            with as_role(cluster, role) as conn:
                return {r[0] for r in conn.execute("SELECT index FROM streamhnsw_cache_list()")}, \
                    {r[0] for r in conn.execute("SELECT database FROM streamhnsw_cache_list()")}

        mydb = cluster.execute("SELECT oid FROM pg_database WHERE datname = current_database()")[0][0]
        idx, dbs = listed("shnsw_nopriv")
        assert idx == set() and dbs == set()
        idx, dbs = listed("shnsw_owner")
        assert idx == {objects["priv_own_idx"]} and dbs == {mydb}
        cluster.execute("GRANT SELECT ON priv_t TO shnsw_nopriv")
        try:
            idx, dbs = listed("shnsw_nopriv")
            assert idx == {objects["priv_idx"]} and dbs == {mydb}
        finally:
            cluster.execute("REVOKE SELECT ON priv_t FROM shnsw_nopriv")
        # pg_monitor members see every database's images
        idx, dbs = listed("shnsw_monitor")
        assert {objects["priv_idx"], objects["priv_own_idx"]} <= idx
        assert len(dbs) >= 2 and mydb in dbs
    finally:
        other.execute("SELECT streamhnsw_cache_drop('o_idx')")
        other.close()
        cluster.execute("DROP DATABASE priv_other")
    # it frees registry entries (sweep_dropped): never in a parallel worker
    assert cluster.execute("SELECT proparallel FROM pg_proc WHERE proname = "
                           "'streamhnsw_cache_list'")[0][0] == "u"


def test_cache_load_does_not_evict_other_roles_images(cluster, objects):
    """An index owner's cache_load makes room only by evicting images it could
    drop itself (or idle ones): another role's image in use stays."""
    cluster.execute("CREATE TABLE priv_big (id int, v vector(3))")
    cluster.execute("CREATE TABLE priv_own_big (id int, v vector(3))")
    try:
        for t in ("priv_big", "priv_own_big"):
            cluster.execute(f"INSERT INTO {t} SELECT g, ARRAY[g, g % 13, g % 7]::vector "
                            "FROM generate_series(1, 6000) g")
            cluster.execute(f"CREATE INDEX {t}_idx ON {t} USING streamhnsw (v)")
        cluster.execute("ALTER TABLE priv_own_big OWNER TO shnsw_owner")
        a = cluster.execute("SELECT streamhnsw_cache_load('priv_own_big_idx')")[0][0]
        cluster.execute("SELECT streamhnsw_cache_drop('priv_own_big_idx')")
        b = cluster.execute("SELECT streamhnsw_cache_load('priv_big_idx')")[0][0]
        # room for one of the two only (with the other small images around)
        limit_mb = max(a, b) // (1024 * 1024) + 1
        assert a + b > limit_mb * 1024 * 1024, (a, b)
        cluster.execute(f"ALTER ROLE shnsw_owner SET streamhnsw.shared_cache_size = '{limit_mb}MB'")
        try:
            with as_role(cluster, "shnsw_owner") as conn:
                notices = []
                conn.add_notice_handler(
                    lambda d: notices.append((d.message_primary, d.message_detail or "")))
                got = conn.execute("SELECT streamhnsw_cache_load('priv_own_big_idx')").fetchone()[0]
                assert got is None
                assert any("other roles' indexes" in d for _, d in notices), notices
            state = cluster.execute("SELECT state, evictions FROM streamhnsw_cache_list() "
                                    "WHERE index = 'priv_big_idx'::regclass")[0]
            assert state == ("ready", 0), state
            # a superuser's request may evict it
            with cluster.connect() as conn:
                conn.execute(f"SET streamhnsw.shared_cache_size = '{limit_mb}MB'")
                assert conn.execute("SELECT streamhnsw_cache_load('priv_own_big_idx')").fetchone()[0] > 0
            assert cluster.execute("SELECT state FROM streamhnsw_cache_list() "
                                   "WHERE index = 'priv_big_idx'::regclass")[0][0] == "none"
        finally:
            cluster.execute("ALTER ROLE shnsw_owner RESET streamhnsw.shared_cache_size")
    finally:
        cluster.execute("DROP TABLE priv_big, priv_own_big")


# the developer settings of options.c, and of the shared cache
OPTION_DEBUG = ["streamhnsw.debug_" + n for n in (
    "discard_caches", "list_conflicts", "io_cap", "keep_lists", "build_floats")]
CACHE_DEBUG = ["streamhnsw.debug_" + n for n in ("image_build_delay", "dsm_fail")]


def test_debug_settings_hidden_and_superuser_only(cluster, objects):
    """Developer settings are compiled into the assertion build only (make
    DEV=1, which make test builds); there a superuser reads them by name, no
    one sees them in SHOW ALL or pg_settings, and a plain role can set none
    of them. A release build has none, so no one can set them at all. The
    A/B switch of the previous release's read-ahead rules is gone."""
    names = OPTION_DEBUG + CACHE_DEBUG
    with cluster.connect() as conn:
        conn.execute("LOAD 'streamhnsw'")
        present = {n: conn.execute("SELECT current_setting(%s, true)", (n,)).fetchone()[0]
                   is not None for n in names}
        assert len({present[n] for n in OPTION_DEBUG}) == 1, present     # one build flag
        assert conn.execute("SELECT current_setting('streamhnsw.debug_reader_main', true)"
                            ).fetchone()[0] is None
        assert not conn.execute("SELECT name FROM pg_settings "
                                "WHERE name LIKE 'streamhnsw.debug%'").fetchall()
    with as_role(cluster, "shnsw_nopriv") as conn:
        conn.execute("SELECT count(*) FROM streamhnsw_cache_list()")    # loads the library
        shown = [r[0] for r in conn.execute("SHOW ALL").fetchall()]
        assert not [n for n in shown if n.startswith("streamhnsw.debug")]
        assert "streamhnsw.ef_search" in shown
        assert not conn.execute("SELECT name FROM pg_settings "
                                "WHERE name LIKE 'streamhnsw.debug%'").fetchall()
        assert conn.execute("SELECT count(*) FROM pg_settings "
                            "WHERE name = 'streamhnsw.ef_search'").fetchone()[0] == 1
        for n in names:
            with pytest.raises(psycopg.errors.InsufficientPrivilege if present[n]
                               else psycopg.Error):
                conn.execute(f"SET {n} = DEFAULT")
            with pytest.raises(psycopg.errors.InsufficientPrivilege if present[n]
                               else psycopg.Error):
                conn.execute(f"SELECT set_config('{n}', '1', false)")


def test_stats_are_server_wide_figures_any_role_may_read(cluster, objects):
    """streamhnsw_stats() stays readable by any role, by decision (src/README,
    Privileges): one row of server-wide sums (scans, pages, waits), with no
    database, index or query in it, as pg_stat_io and pg_stat_wal, which
    PostgreSQL shows to every role. Resetting them is revoked from PUBLIC."""
    with as_role(cluster, "shnsw_nopriv") as conn:
        cur = conn.execute("SELECT * FROM streamhnsw_stats()")
        assert len(cur.fetchall()) == 1
        types = {c.type_code for c in cur.description}
        # bigint, double precision, bigint[]: figures only, no oid or text
        assert types <= {20, 701, 1016}, types
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT streamhnsw_stats_reset()")
