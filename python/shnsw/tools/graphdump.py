"""Read a streamhnsw index's layer-0 graph straight from its relation file,
for diagnosing reachability (not used by tests or benchmarks).

    g = read_graph(conn, "em_idx")  # after CHECKPOINT
    g["tid"][ref], g["flags"][ref], g["nbrs"][ref] (list of refs),
    g["upper"][(ref, layer)] (list of refs on layer >= 1),
    g["upper_at"][ref] = (block, line pointer) of a level >= 1 node's upper record
"""

import struct

BLCKSZ = 8192
PAGE_HEADER = 24
GRAPH_PAGE = 3


def relation_path(conn, index: str) -> str:
    conn.execute("CHECKPOINT")
    return conn.execute("SELECT current_setting('data_directory') || '/' || "
                        "pg_relation_filepath(%s)", (index,)).fetchone()[0]


def read_graph(conn, index: str) -> dict:
    with open(relation_path(conn, index), "rb") as f:
        raw = f.read()
    meta = raw[PAGE_HEADER:PAGE_HEADER + 64]
    m = struct.unpack_from("<H", meta, 12)[0]
    slot_bits = meta[20]
    node_size = struct.unpack_from("<H", meta, 24)[0]
    entry = struct.unpack_from("<I", meta, 32)[0]
    tid, flags, nbrs, level, upper_at, upper = {}, {}, {}, {}, {}, {}
    for blk in range(1, len(raw) // BLCKSZ):
        page = raw[blk * BLCKSZ:(blk + 1) * BLCKSZ]
        ptype, nslots = struct.unpack_from("<HH", page, BLCKSZ - 8)
        if ptype != GRAPH_PAGE:
            continue
        for s in range(nslots):
            off = PAGE_HEADER + s * node_size
            hi, lo, toff, lvl, fl = struct.unpack_from("<HHHBB", page, off)
            nn = struct.unpack_from("<H", page, off + 14)[0]
            ref = (blk << slot_bits) | s
            tid[ref] = ((hi << 16) | lo, toff)
            flags[ref] = fl
            level[ref] = lvl
            nbrs[ref] = list(struct.unpack_from(f"<{nn}I", page, off + 24))
            uhi, ulo, uoff = struct.unpack_from("<HHH", page, off + 8)
            if lvl > 0 and not fl & 2:
                upper_at[ref] = (((uhi << 16) | ulo), uoff, lvl)
    for ref, (ublk, uoff, lvl) in upper_at.items():
        page = raw[ublk * BLCKSZ:(ublk + 1) * BLCKSZ]
        lp = struct.unpack_from("<I", page, PAGE_HEADER + 4 * (uoff - 1))[0]
        item = lp & 0x7FFF
        node, ulvl = struct.unpack_from("<IB", page, item)
        counts = struct.unpack_from(f"<{ulvl}H", page, item + 8)
        base = item + 8 + ((2 * ulvl + 3) & ~3)
        for layer in range(1, ulvl + 1):
            at = base + 4 * (layer - 1) * m
            upper[(ref, layer)] = list(struct.unpack_from(f"<{counts[layer - 1]}I", page, at))
    return {"m": m, "slot_bits": slot_bits, "entry": entry, "tid": tid, "flags": flags,
            "nbrs": nbrs, "level": level, "upper": upper,
            "upper_at": {r: (b, o) for r, (b, o, _) in upper_at.items()}}
