"""Rows an insert leaves unfindable: the experiment behind the insert's
upper-layer beam (src/README, Inserts; CHANGELOG).

    PYTHONPATH=python:test .venv/bin/python -m shnsw.tools.insert_findability \
        [--engine streamhnsw|hnsw] [--built 5000] [--clients 2] [--runs 6]

Each run: a table of --built rows of test_durability's clustered 32-d data
(64 clusters) with an index, then 12,000 more rows inserted by --clients
clients (500-row INSERTs), then VACUUM. Reports, per run, the rows that an
exact-match search for their own vector does not return first, at the
default ef_search and, for those, again at ef_search 1000 after VACUUM.
With --explain, each streamhnsw row missed after VACUUM is shown with its
out- and in-links' exact distances (shnsw.tools.graphdump), which is how the
wrong-cluster links were found. With --strays (streamhnsw), each run also
counts, before VACUUM, the rows whose nearest listed neighbour is more than
2.5 times (and 2.0) farther than their true nearest row: rows an insert's
search linked into another cluster, found whether or not a search misses
them yet (the measure behind the insert's second search, CHANGELOG).
"""

from __future__ import annotations

import argparse
import sys
import threading

import numpy as np

from .. import data
from ..cluster import Cluster
from . import HARNESS_MISSING

try:
    from harness.durability import Model, copy_rows, exact_match_missing
except ImportError:
    sys.exit(HARNESS_MISSING.replace("NAME", "insert_findability"))

INSERTED = 12000
BATCH = 500


def make(conn, engine: str, model: Model, n: int) -> None:
    conn.execute("DROP TABLE IF EXISTS fi")
    conn.execute(f"CREATE TABLE fi (id bigint PRIMARY KEY, embedding vector({model.dim}))")
    ids = model.alloc(n)
    g = model.begin_insert(ids)
    copy_rows(conn, "fi", np.stack([model.vec(i) for i in ids]), ids[0])
    model.end_insert(g, True)
    conn.execute(f"CREATE INDEX fi_idx ON fi USING {engine} (embedding vector_l2_ops)")


def insert_range(cluster: Cluster, model: Model, first: int, n: int) -> None:
    with cluster.connect() as c:
        for s in range(first, first + n, BATCH):
            c.execute("INSERT INTO fi SELECT * FROM unnest(%s::bigint[], %s::vector[])",
                      (list(range(s, s + BATCH)),
                       [data.vector_literal(model.vec(j)) for j in range(s, s + BATCH)]))


def explain(conn, missed) -> None:
    from .graphdump import read_graph
    g = read_graph(conn, "fi_idx")
    by_tid = {t: r for r, t in g["tid"].items() if not g["flags"][r] & 1}
    inlinks: dict = {}
    for r, ns in g["nbrs"].items():
        if not g["flags"][r] & 1:
            for n in ns:
                inlinks.setdefault(n, []).append(r)

    def dist(mid, r):
        t = g["tid"][r]
        return conn.execute("SELECT round((embedding <-> (SELECT embedding FROM fi WHERE id = %s))"
                            "::numeric, 2) FROM fi WHERE ctid = %s::tid",
                            (mid, f"({t[0]},{t[1]})")).fetchone()[0]
    for mid, fid, fd in missed:
        b, o = conn.execute("SELECT ctid::text FROM fi WHERE id = %s",
                            (mid,)).fetchone()[0].strip("()").split(",")
        ref = by_tid.get((int(b), int(o)))
        print(f"  row {mid}: nearest other row {fid} at {fd:.2f}; node {ref}")
        if ref is None:
            continue
        print("    out-links at", sorted(float(dist(mid, r)) for r in g["nbrs"][ref]))
        print("    in-links at ", sorted(float(dist(mid, r)) for r in inlinks.get(ref, [])))


def strays(conn, model: Model) -> list:
    """(id, nearest listed neighbour's distance, true nearest distance) of
    the rows whose list lies far beyond their true nearest neighbour."""
    from .graphdump import read_graph
    g = read_graph(conn, "fi_idx")
    tid_id = {}
    for ct, i in conn.execute("SELECT ctid::text, id FROM fi").fetchall():
        b, o = ct.strip("()").split(",")
        tid_id[(int(b), int(o))] = i
    refs = [r for r in g["nbrs"] if not g["flags"][r] & 1]
    pos = {r: k for k, r in enumerate(refs)}
    ids = [tid_id[tuple(g["tid"][r])] for r in refs]
    x = np.stack([model.vec(i) for i in ids]).astype(np.float32)
    sq = (x * x).sum(1)
    nearest = np.empty(len(refs), np.float32)
    for a in range(0, len(refs), 2000):
        d = sq[a:a + 2000, None] + sq[None, :] - 2 * x[a:a + 2000] @ x.T
        d[np.arange(d.shape[0]), a + np.arange(d.shape[0])] = np.inf
        nearest[a:a + 2000] = np.sqrt(np.maximum(d.min(1), 0))
    out = []
    for r in refs:
        k = pos[r]
        lst = [pos[n] for n in g["nbrs"][r] if n in pos]
        if not lst:
            continue
        near = float(np.sqrt(((x[lst] - x[k]) ** 2).sum(1)).min())
        if near > 2.5 * nearest[k] and near - nearest[k] > 2.0:
            out.append((ids[k], round(near, 2), round(float(nearest[k]), 2)))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m shnsw.tools.insert_findability", description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="streamhnsw", choices=("streamhnsw", "hnsw"))
    ap.add_argument("--built", type=int, default=5000)
    ap.add_argument("--clients", type=int, default=2, choices=(1, 2))
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--explain", action="store_true")
    ap.add_argument("--strays", action="store_true")
    a = ap.parse_args(argv)
    guc = "streamhnsw.ef_search" if a.engine == "streamhnsw" else "hnsw.ef_search"
    with Cluster(name="findability") as cl:
        cl.execute("CREATE EXTENSION streamhnsw CASCADE")
        total = nstrays = 0
        for run in range(a.runs):
            model = Model(dim=32, seed=31)
            with cl.connect() as conn:
                make(conn, a.engine, model, a.built)
            # ids above the built rows; two halves for two clients
            first = ((a.built + 9999) // 10000 + 1) * 10000
            halves = [(first, INSERTED // 2), (first + 10000, INSERTED // 2)]
            if a.clients == 1:
                insert_range(cl, model, *halves[0])
                insert_range(cl, model, *halves[1])
            else:
                ts = [threading.Thread(target=insert_range, args=(cl, model) + h) for h in halves]
                [t.start() for t in ts]
                [t.join() for t in ts]
            with cl.connect() as conn:
                before = exact_match_missing(conn, "fi", "fi_idx", "l2")
                if a.strays and a.engine == "streamhnsw":
                    st = strays(conn, model)
                    nstrays += len(st)
                    print(f"run {run}: strays {st}")
                conn.execute("VACUUM fi")
                conn.execute(f"SET {guc} = 1000")
                after = exact_match_missing(conn, "fi", "fi_idx", "l2")
                total += len(after)
                print(f"run {run}: missed at the default ef_search {len(before)}, "
                      f"after VACUUM at ef_search 1000 {len(after)}", flush=True)
                if after and a.explain and a.engine == "streamhnsw":
                    explain(conn, after)
        print(f"{a.engine}: {total} rows missed after VACUUM in {a.runs} runs"
              + (f", {nstrays} strays" if a.strays else ""))


if __name__ == "__main__":
    main()
