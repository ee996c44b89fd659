"""A corrupted index ends in an ERROR, never a crash or a hang (issue 20).

The setup is the issue's: 4000 random 32-d rows, m = 8, 2% of them deleted
and not yet vacuumed. The server is stopped, index files are edited, the
server is started, and on each corrupted index a verify, an ordered search,
an INSERT and a VACUUM run with statement_timeout. Each must end in an ERROR
or a correct result within STATEMENT_LIMIT seconds (the issue asks for one
second; this machine's two cores are shared with other builds, so the test
allows three and reports the slowest), no backend may die ("terminated by
signal" in the server log), and for the six listed corruptions verify must
name a corrupted block.

To keep the run short, every restart tests many corruptions at once: each
case has a table of its own (a copy of the same rows), and between rounds
the server is stopped and every table's heap, visibility map, free space map
and index files are written back from a pristine copy, so each case starts
from the same state. Data checksums are disabled, as on many existing
clusters, so that the edits reach the access method.

Besides the six listed corruptions, a few hundred single-byte changes at
seeded random offsets of every page type (metapage, quantizer, graph, vector
and upper pages) and a file cut to half its length run on smaller tables
(1500 rows), and so do 150 more aimed at the bytes of metapage fields,
node headers and neighbour lists, upper-layer records and stored vectors'
headers; there a search only has to be sane
(distinct rows, at most LIMIT of them, in order of distance): a changed code
byte can change which rows are found without anything being detectably
wrong.
"""

import random
import re
import struct
import threading
import time
from pathlib import Path

import psycopg
import pytest

from shnsw.cluster import Cluster

BLCKSZ = 8192
SPECIAL = BLCKSZ - 8          # page_type (u16), nslots (u16), magic (u32)
CONTENTS = 24                 # MAXALIGN(SizeOfPageHeaderData)
NODE_SIZE = 24 + 4 * 2 * 8 + 32        # m = 8, 32 dimensions: 120 bytes (format 4)
PAGE_TYPES = {1: "meta", 2: "quant", 3: "graph", 4: "vector", 5: "upper"}
STATEMENT_LIMIT = 3.0         # seconds; see the module docstring
FLIPS_PER_TYPE = 50
TABLES_PER_ROUND = 30
SEED = 20
OUTCOMES: dict = {}           # (statement, "ok" / "error") -> count, printed
ERRORS: dict = {}             # error message (numbers and names blanked) -> count

QUERY = "[" + ",".join(f"{(i * 37 % 101) / 101:.3f}" for i in range(32)) + "]"
NEW_ROW = "[" + ",".join(f"{(i * 53 % 97) / 97:.3f}" for i in range(32)) + "]"


def page_type(data: bytes, blk: int) -> int:
    return struct.unpack_from("<H", data, blk * BLCKSZ + SPECIAL)[0]


def blocks_of(data: bytes, ptype: int) -> list[int]:
    return [b for b in range(len(data) // BLCKSZ) if page_type(data, b) == ptype]


def put(buf: bytearray, off: int, fmt: str, value) -> None:
    struct.pack_into(fmt, buf, off, value)


# --- the six corruptions of the issue (each returns the blocks it changed) ---

def c1_nslots(buf):
    blks = blocks_of(buf, 3)
    for b in blks:
        put(buf, b * BLCKSZ + SPECIAL + 2, "<H", 0xFFFF)
    return blks


def c2_vec_size(buf):
    put(buf, 52, "<I", 0xFFFFFFF0)
    return [0]


def c3_vec_offset(buf):
    blks = blocks_of(buf, 3)
    for b in blks:
        for s in range(64):
            off = b * BLCKSZ + CONTENTS + s * NODE_SIZE + 20
            if off + 2 <= b * BLCKSZ + SPECIAL:
                put(buf, off, "<H", 0xFFFF)
    return blks


def c4_node_size(buf):
    put(buf, 48, "<H", 65535)
    return [0]


def c5_insert_graph_blk(buf):
    put(buf, 72, "<I", 0)
    return [0]


def c6_m_zero(buf):
    put(buf, 36, "<H", 0)
    return [0]


def c6_one_node(buf):
    blks = blocks_of(buf, 3)
    target = (blks[0] << 6) | 5            # slot_bits is 6 here
    for b in blks:
        nslots = struct.unpack_from("<H", buf, b * BLCKSZ + SPECIAL + 2)[0]
        for s in range(nslots):
            rec = b * BLCKSZ + CONTENTS + s * NODE_SIZE
            n = struct.unpack_from("<H", buf, rec + 14)[0]     # nneighbors
            for k in range(min(n, 16)):
                put(buf, rec + 24 + 4 * k, "<I", target)
    return blks


def c6_vector_ff(buf):
    blks = blocks_of(buf, 4)
    for b in blks:
        buf[b * BLCKSZ + CONTENTS:b * BLCKSZ + SPECIAL] = b"\xff" * (SPECIAL - CONTENTS)
    return blks


def truncate_half(buf):
    """The file cut to half its blocks (as after a lost write of its end)."""
    keep = len(buf) // BLCKSZ // 2
    del buf[keep * BLCKSZ:]
    return [keep]


LISTED = [c1_nslots, c2_vec_size, c3_vec_offset, c4_node_size, c5_insert_graph_blk,
          c6_m_zero, c6_one_node, c6_vector_ff]


def make_flip(ptype: int, rng: random.Random):
    """A change of one byte at a random offset of a random page of a type."""
    pick = rng.random()
    off_in_page = rng.randrange(BLCKSZ)
    value = rng.randrange(1, 256)

    def flip(buf):
        blks = blocks_of(buf, ptype)
        b = blks[int(pick * len(blks))]
        off = b * BLCKSZ + off_in_page
        buf[off] ^= value
        return [b]
    flip.__name__ = f"flip_{PAGE_TYPES[ptype]}_{off_in_page}_{value:02x}"
    return flip


def make_targeted(kind: str, rng: random.Random):
    """A change of one byte where a field lives: a node header or neighbour
    list, an upper-layer record, a metapage field, a stored vector's header."""
    pick, pick2, byte = rng.random(), rng.random(), rng.randrange(24)
    value = rng.randrange(1, 256)

    def flip(buf):
        graph = blocks_of(buf, 3)
        if kind == "meta":
            off = CONTENTS + rng_off(pick, 112)
            b = 0
        elif kind in ("node", "vectorhdr"):
            b = graph[int(pick * len(graph))]
            nslots = struct.unpack_from("<H", buf, b * BLCKSZ + SPECIAL + 2)[0]
            rec = b * BLCKSZ + CONTENTS + int(pick2 * nslots) * NODE_SIZE
            if kind == "node":
                off = rec + (byte if value & 1 else 24 + rng_off(pick2, 64))
            else:
                vblk, voff = struct.unpack_from("<IH", buf, rec + 16)
                b = vblk
                off = vblk * BLCKSZ + CONTENTS + voff + byte % 8
        else:                                   # upper record
            upper = blocks_of(buf, 5)
            b = upper[int(pick * len(upper))]
            lower, upper_start = struct.unpack_from("<HH", buf, b * BLCKSZ + 12)
            if value & 1:                       # an item pointer
                off = b * BLCKSZ + 24 + rng_off(pick2, max(lower - 24, 1))
            else:                               # record bytes
                off = b * BLCKSZ + upper_start + rng_off(pick2, max(SPECIAL - upper_start, 1))
        buf[off] ^= value
        return [b]
    flip.__name__ = f"targeted_{kind}_{byte}_{value:02x}"
    return flip


def rng_off(fraction: float, n: int) -> int:
    return min(int(fraction * n), n - 1)


# --- the cluster ------------------------------------------------------------

class Files:
    """The on-disk files of one table and its index, and their pristine bytes."""

    def __init__(self, datadir: Path, heap: str, index: str):
        self.forks = [datadir / (heap + fork) for fork in ("_fsm", "_vm")]
        paths = [datadir / heap, datadir / index] + [p for p in self.forks if p.exists()]
        self.index = datadir / index
        self.pristine = {p: p.read_bytes() for p in paths}

    def restore(self):
        for p, data in self.pristine.items():
            with open(p, "r+b") as f:
                f.write(data)
                f.truncate()
        for p in self.forks:
            if p not in self.pristine and p.exists():
                p.unlink()       # made by a VACUUM since: would skip pages


def run(cluster, conn, sql, params=None, limit=STATEMENT_LIMIT):
    """Run one statement; return (rows or None, error or None, seconds)."""
    watchdog = threading.Timer(30, lambda: cluster.crash())   # a hang fails the test
    watchdog.start()
    t0 = time.monotonic()
    try:
        cur = conn.execute(sql, params)
        rows = cur.fetchall() if cur.description else []
        return rows, None, time.monotonic() - t0
    except psycopg.errors.QueryCanceled as e:
        return None, e, time.monotonic() - t0
    except psycopg.OperationalError:
        raise
    except psycopg.Error as e:
        return None, e, time.monotonic() - t0
    finally:
        watchdog.cancel()


@pytest.fixture(scope="module")
def corrupt_cluster():
    with Cluster(name="shnsw-corrupt",
                 settings={"shared_buffers": "64MB", "max_connections": 20,
                           "autovacuum": "off"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        yield c


def setup_tables(c, names_rows):
    """Create the tables (copies of one seeded data set) and their indexes."""
    with c.connect() as conn:
        conn.execute("SELECT setseed(0.2)")
        conn.execute("CREATE TABLE r (id int PRIMARY KEY, v vector(32))")
        conn.execute("INSERT INTO r SELECT g, (SELECT array_agg(random())::vector "
                     "FROM generate_series(1, 32) WHERE g > 0) FROM generate_series(1, 4000) g")
        for name, nrows in names_rows:
            conn.execute(f"CREATE TABLE {name} (id int, v vector(32))")
            conn.execute(f"INSERT INTO {name} SELECT * FROM r WHERE id <= {nrows} ORDER BY id")
            conn.execute(f"CREATE INDEX {name}_v ON {name} USING streamhnsw (v) WITH (m = 8)")
            conn.execute(f"DELETE FROM {name} WHERE id % 50 = 3")
        conn.execute("CHECKPOINT")
        paths = {}
        for name, _ in names_rows:
            paths[name] = conn.execute(
                "SELECT pg_relation_filepath(%s), pg_relation_filepath(%s)",
                (name, name + "_v")).fetchone()
        answers = {}
        conn.execute("SET enable_seqscan = off")
        for name, _ in names_rows:
            answers[name] = conn.execute(
                f"SELECT id, v <-> %s::vector FROM {name} ORDER BY v <-> %s::vector LIMIT 10",
                (QUERY, QUERY)).fetchall()
            assert conn.execute(f"SELECT count(*) FROM streamhnsw_verify('{name}_v')").fetchone()[0] == 0
    c.stop()
    # the edits below must reach the access method: no checksums
    r = c._run([c.bindir / "pg_checksums", "--disable", "-D", c.datadir], check=False)
    assert r.returncode == 0, r.stderr
    files = {name: Files(c.datadir, *paths[name]) for name, _ in names_rows}
    return files, answers


def check_round(c, cases, files, answers, strict):
    """Apply cases[name] to each table's index, start, run the statements."""
    changed = {}
    for name, corrupt in cases.items():
        files[name].restore()
        buf = bytearray(files[name].pristine[files[name].index])
        changed[name] = corrupt(buf)
        files[name].index.write_bytes(bytes(buf))
    log_start = c.logfile.stat().st_size if c.logfile.exists() else 0
    c.start()
    failures, slowest = [], (0.0, "")
    with c.connect() as conn:
        conn.execute(f"SET statement_timeout = '{int(STATEMENT_LIMIT * 1000)}ms'")
        conn.execute("SET enable_seqscan = off")
        for name, corrupt in cases.items():
            what = f"{corrupt.__name__} on {name}"
            results = {}
            for label, sql, params in [
                    ("verify", f"SELECT * FROM streamhnsw_verify('{name}_v')", None),
                    ("search", f"SELECT id, v <-> %s::vector FROM {name} "
                               f"ORDER BY v <-> %s::vector LIMIT 10", (QUERY, QUERY)),
                    ("insert", f"INSERT INTO {name} VALUES (100000, %s)", (NEW_ROW,)),
                    ("vacuum", f"VACUUM {name}", None)]:
                rows, err, secs = run(c, conn, sql, params)
                results[label] = (rows, err)
                OUTCOMES[(label, "error" if err is not None else "ok")] = \
                    OUTCOMES.get((label, "error" if err is not None else "ok"), 0) + 1
                if err is not None:
                    kind = re.sub(r'"[^"]*"|\d+', "N", str(err).splitlines()[0])
                    ERRORS[kind] = ERRORS.get(kind, 0) + 1
                if secs > slowest[0]:
                    slowest = (secs, f"{label} {what}")
                if isinstance(err, psycopg.errors.QueryCanceled) or secs > STATEMENT_LIMIT:
                    failures.append(f"{label} {what}: took {secs:.1f}s ({err})")
                    continue
                if label == "search" and err is None:
                    ids = [r[0] for r in rows]
                    dists = [r[1] for r in rows]
                    if strict and rows != answers[name]:
                        failures.append(f"search {what}: wrong result without an error: {rows}")
                    if len(set(ids)) != len(ids) or len(ids) > 10 or \
                            any(b < a - 1e-6 for a, b in zip(dists, dists[1:])):
                        failures.append(f"search {what}: malformed result {rows}")
            if strict:
                rows, err = results["verify"]
                text = " | ".join(r[0] for r in rows or [])
                named = any(re.search(rf"\bblock {b}\b|\({b},", text) for b in changed[name])
                if err is not None or not named:
                    failures.append(f"verify {what}: does not name a block of {changed[name][:8]}: "
                                    f"{err or text[:300]}")
    c.stop()
    with open(c.logfile, "rb") as f:
        f.seek(log_start)
        log = f.read().decode(errors="replace")
    crashes = [l for l in log.splitlines()
               if "terminated by signal" in l or "TRAP" in l or "PANIC" in l]
    return failures + [f"server log: {l}" for l in crashes], slowest


def test_corruption_ends_in_error(corrupt_cluster):
    c = corrupt_cluster
    rng = random.Random(SEED)
    flips = [make_flip(t, rng) for t in PAGE_TYPES for _ in range(FLIPS_PER_TYPE)]
    flips += [make_targeted(k, rng) for k, n in (("meta", 30), ("node", 60), ("upper", 30),
                                                 ("vectorhdr", 30)) for _ in range(n)]
    rng.shuffle(flips)
    flips.insert(0, truncate_half)
    listed = [(f"l{i}", 4000) for i in range(len(LISTED))]
    small = [(f"f{i}", 1500) for i in range(TABLES_PER_ROUND)]
    files, answers = setup_tables(c, listed + small)

    failures, slowest = check_round(c, {n: f for (n, _), f in zip(listed, LISTED)},
                                    files, answers, strict=True)
    for start in range(0, len(flips), TABLES_PER_ROUND):
        batch = flips[start:start + TABLES_PER_ROUND]
        f, s = check_round(c, {n: fl for (n, _), fl in zip(small, batch)}, files, answers,
                           strict=False)
        failures += f
        slowest = max(slowest, s)
    print(f"{len(LISTED)} listed corruptions and {len(flips)} other changes; "
          f"slowest statement {slowest[0]:.2f}s ({slowest[1]}); outcomes {sorted(OUTCOMES.items())}")
    for kind, n in sorted(ERRORS.items(), key=lambda kv: -kv[1]):
        print(f"  {n:4d}  {kind}")
    assert not failures, "\n".join(failures[:40])
