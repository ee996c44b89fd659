"""streamhnsw_verify reports the four corruptions of issue 49 that gave
silent wrong results: the metapage's quantizer-trained flag cleared while the
index holds nodes (every search then returns no row), every node's neighbour
count set to 0 (wrong rows), a row pointer naming a block past the table's
end or InvalidBlockNumber (rows dropped), and NaN or infinity inside a
stored vector (rows dropped; verify used to check only the vector's header).

Each corruption is written into its own index's file with the server
stopped and data checksums disabled, so that it reaches the access method.
"""

import math
import struct

from shnsw.cluster import Cluster

BLCKSZ = 8192
SPECIAL = BLCKSZ - 8          # page_type (u16), nslots (u16), magic (u32)
CONTENTS = 24                 # MAXALIGN(SizeOfPageHeaderData)
GRAPH, VECTOR = 3, 4
META_QUANT_TRAINED = CONTENTS + 19
META_NODE_SIZE = CONTENTS + 24


def graph_nodes(buf):
    """(offset of the record, header fields) of every used slot."""
    node_size = struct.unpack_from("<H", buf, META_NODE_SIZE)[0]
    for b in range(len(buf) // BLCKSZ):
        if struct.unpack_from("<H", buf, b * BLCKSZ + SPECIAL)[0] != GRAPH:
            continue
        nslots = struct.unpack_from("<H", buf, b * BLCKSZ + SPECIAL + 2)[0]
        for s in range(nslots):
            rec = b * BLCKSZ + CONTENTS + s * node_size
            flags = buf[rec + 7]
            vec_block, vec_offset = struct.unpack_from("<IH", buf, rec + 16)
            yield rec, flags, vec_block, vec_offset


def untrained(buf):
    buf[META_QUANT_TRAINED] = 0


def no_neighbours(buf):
    for rec, _, _, _ in graph_nodes(buf):
        struct.pack_into("<H", buf, rec + 14, 0)


def row_past_end(buf):
    rec = next(r for r, flags, _, _ in graph_nodes(buf) if flags == 0)
    struct.pack_into("<HH", buf, rec, 0xFFFF, 0xFFFF)      # InvalidBlockNumber


def nan_value(buf):
    _, _, vb, vo = next(n for n in graph_nodes(buf) if n[1] == 0)
    struct.pack_into("<f", buf, vb * BLCKSZ + CONTENTS + vo + 8 + 4 * 3, math.nan)


def inf_value(buf):
    nodes = [n for n in graph_nodes(buf) if n[1] == 0]
    _, _, vb, vo = nodes[len(nodes) // 2]
    struct.pack_into("<f", buf, vb * BLCKSZ + CONTENTS + vo + 8, math.inf)


CASES = {
    "untrained": (untrained, "says the quantizer is untrained, but the index holds"),
    "no_neighbours": (no_neighbours, "live nodes have no neighbour on layer 0"),
    "row_past_end": (row_past_end, "names heap block 4294967295, past the table's"),
    "nan_value": (nan_value, "whose dimension 3 is not finite"),
    "inf_value": (inf_value, "whose dimension 0 is not finite"),
}


def corrupt_stopped(c, paths, cases):
    """Stop the cluster, turn its checksums off, apply each case's corruption
    to its index's file (paths: relation file paths by case name), start it."""
    c.stop()
    r = c._run([c.bindir / "pg_checksums", "--disable", "-D", c.datadir], check=False)
    assert r.returncode == 0, r.stderr
    for name, (corrupt, _) in cases.items():
        path = c.datadir / paths[name]
        buf = bytearray(path.read_bytes())
        corrupt(buf)
        path.write_bytes(bytes(buf))
    c.start()


def test_verify_reports_silent_corruptions():
    with Cluster(name="shnsw-verify49", settings={"autovacuum": "off"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        paths = {}
        with c.connect() as conn:
            for name in ["sound"] + list(CASES):
                conn.execute(f"CREATE TABLE {name} (id int, v vector(8))")
                conn.execute(f"INSERT INTO {name} SELECT g, ARRAY[g % 17, g % 11, g % 7, g % 5, "
                             "g % 3, g % 13, g % 19, g]::vector FROM generate_series(1, 600) g")
                conn.execute(f"CREATE INDEX {name}_v ON {name} USING streamhnsw (v) WITH (m = 8)")
                assert conn.execute(f"SELECT * FROM streamhnsw_verify('{name}_v')").fetchall() == []
                paths[name] = conn.execute("SELECT pg_relation_filepath(%s)",
                                           (name + "_v",)).fetchone()[0]
            conn.execute("CHECKPOINT")
        corrupt_stopped(c, paths, CASES)
        with c.connect() as conn:
            assert conn.execute("SELECT * FROM streamhnsw_verify('sound_v')").fetchall() == []
            for name, (_, expect) in CASES.items():
                rows = [r[0] for r in conn.execute(f"SELECT * FROM streamhnsw_verify('{name}_v')")]
                assert any(expect in r for r in rows), (name, rows)


def test_corrupt_sparsevec_values():
    """A stored sparsevec (at its own size, 16 + 8 * nnz bytes) with a
    non-zero count past its size is reported by verify and stops a scan with
    the corruption error before pgvector's function could read past it;
    indices out of order and a size that is not its count's are reported."""
    import psycopg
    import pytest

    def stored(buf):
        return [(vb, vo) for _, flags, vb, vo in graph_nodes(buf) if flags == 0]

    def nnz_past(buf):
        vb, vo = stored(buf)[0]
        struct.pack_into("<i", buf, vb * BLCKSZ + CONTENTS + vo + 8, 5000)

    def unsorted(buf):
        vb, vo = stored(buf)[1]
        struct.pack_into("<ii", buf, vb * BLCKSZ + CONTENTS + vo + 16, 29000, 5)

    def size(buf):
        vb, vo = stored(buf)[2]
        struct.pack_into("<I", buf, vb * BLCKSZ + CONTENTS + vo, (16 + 8 * 2) << 2)

    def size_past(buf):
        vb, vo = stored(buf)[3]
        struct.pack_into("<I", buf, vb * BLCKSZ + CONTENTS + vo, 9000 << 2)

    cases = {"nnz_past": (nnz_past, "does not match the index's sparsevec(30000)"),
             "unsorted": (unsorted, "whose element 1 is invalid"),
             "size": (size, "does not match the index's sparsevec(30000)"),
             "size_past": (size_past, "does not match the index's sparsevec(30000)")}
    with Cluster(name="shnsw-verify-sparse", settings={"autovacuum": "off"}) as c:
        c.execute("CREATE EXTENSION streamhnsw CASCADE")
        paths = {}
        with c.connect() as conn:
            for name in cases:
                conn.execute(f"CREATE TABLE {name} (id int, v sparsevec(30000))")
                conn.execute(f"INSERT INTO {name} SELECT g, format('{{%s:1,%s:2,%s:%s}}/30000', "
                             "g % 50 + 1, 100 + g % 70, 20000 + g, g)::sparsevec "
                             "FROM generate_series(1, 200) g")
                conn.execute(f"CREATE INDEX {name}_v ON {name} USING streamhnsw "
                             "(v sparsevec_l2_ops) WITH (m = 8)")
                assert conn.execute(f"SELECT * FROM streamhnsw_verify('{name}_v')").fetchall() == []
                paths[name] = conn.execute("SELECT pg_relation_filepath(%s)",
                                           (name + "_v",)).fetchone()[0]
            conn.execute("CHECKPOINT")
        corrupt_stopped(c, paths, cases)
        with c.connect() as conn:
            for name, (_, expect) in cases.items():
                rows = [r[0] for r in conn.execute(f"SELECT * FROM streamhnsw_verify('{name}_v')")]
                assert any(expect in r for r in rows), (name, rows)
            conn.execute("SET enable_seqscan = off")
            for name in ("nnz_past", "size", "size_past"):
                with pytest.raises(psycopg.errors.IndexCorrupted, match="stored vector header"):
                    conn.execute(f"SELECT id FROM {name} ORDER BY v <-> '{{1:1}}/30000' "
                                 "LIMIT 300").fetchall()
