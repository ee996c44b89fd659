"""Pages the descent reads, and its chain of dependent reads, today and if
upper records carried their nodes' SQ8 codes.

The descent (greedy on layers >= 2, then a beam of 4 on layer 1) reads for
each node it expands the node's upper record (its lists: an upper page)
and, for each neighbour it computes a distance to, the neighbour's graph
record (its code: a graph page): two dependent reads a hop. With the code
in the upper record as well, a hop reads upper records only, one read a
hop, on upper pages that hold fewer records (each grows by `dims` bytes;
repacked here in today's order). This runs the descent on exact distances
over the kept dev-loop server's index (tools/graphdump.py) for held-out
queries and counts, per query, distinct pages of each kind and the hops.

    SHNSW_DEVLOOP_DIR=/tmp/sent100k PYTHONPATH=python:tools:bench/issue17 \\
        .venv/bin/python bench/issue17/descent_sim.py [--index t_shi_idx --table t_shi]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "issue16"))
from image_order_sim import beam, greedy, load  # noqa: E402
from devloop import STATE  # noqa: E402

PAGE_ROOM = 8192 - 24 - 16        # page header, special space


def record_size(level: int, m: int, code: int) -> int:
    counts = (2 * level + 3) & ~3
    return 4 + ((8 + counts + 4 * m * level + code + 7) & ~7)   # line pointer + record


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", default="t_sh_idx")
    ap.add_argument("--table", default="t_sh")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--beam", type=int, default=4)
    a = ap.parse_args(argv)
    g, refs, X = load(a.index, a.table)
    sb, m, dims = g["slot_bits"], g["m"], X.shape[1]
    idx = {r: i for i, r in enumerate(refs)}
    ups = sorted(g["upper_at"], key=lambda r: g["upper_at"][r])
    # today's upper pages, and the pages of a repacking with codes added
    new_page, page, used = {}, 0, 0
    for r in ups:
        sz = record_size(g["level"][r], m, dims)
        if used + sz > PAGE_ROOM:
            page, used = page + 1, 0
        new_page[r] = page
        used += sz
    n_up_now = len({b for b, _ in g["upper_at"].values()})
    print(f"{len(ups)} nodes of level >= 1 on {n_up_now} upper pages today; "
          f"{page + 1} upper pages with their codes")
    Q = np.load(STATE / "queries.npy")[:a.queries].astype(np.float32)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    now_up, now_graph, later, hops_all = [], [], [], []
    for q in Q:
        def dist(r):
            return 1.0 - float(X[idx[r]] @ q)
        expanded, touched = [], set()
        ep = g["entry"]
        de = dist(ep)
        touched.add(ep)
        top = g["level"][ep]
        for layer in range(top, 1, -1):
            ep, de = greedy(lambda c: g["upper"].get((c, layer), []), dist, ep, de,
                            touched, expanded)
        if top >= 1:
            beam(lambda c: g["upper"].get((c, 1), []), dist, ep, de, a.beam, touched, expanded)
        hops = len(expanded)
        now_up.append(len({g["upper_at"][c][0] for c in expanded if c in g["upper_at"]}))
        now_graph.append(len({r >> sb for r in touched}))
        later.append(len({new_page[r] for r in touched | set(expanded) if r in new_page}))
        hops_all.append(hops)
    print(f"{a.queries} queries, beam {a.beam} on layer 1: {np.mean(hops_all):.1f} hops a query")
    print(f"  today: {np.mean(now_up):.1f} upper pages + {np.mean(now_graph):.1f} graph pages "
          f"= {np.mean(now_up) + np.mean(now_graph):.1f} pages, two dependent reads a hop")
    print(f"  codes in upper records: {np.mean(later):.1f} upper pages, one read a hop")


if __name__ == "__main__":
    sys.exit(main())
