"""Would another order of the shared graph image cut a new connection's page faults?

A new backend takes a minor page fault for each 64 kB of the image its
first query touches (the kernel maps 16 pages a fault). This reads the
kept dev-loop server's streamhnsw index graph (tools/graphdump.py) and its
rows, runs HNSW searches for held-out queries on exact distances (greedy
descent, layer-0 beam of --ef) to get the records each query touches, and
counts the 64 kB windows of the image those records fall in when the image
holds the graph pages in their block order (as it does), in a random order,
in the breadth-first order of the page graph from the entry point's page,
and with the nodes themselves laid out by recursive bisection along the
principal direction of their vectors (pages refilled in that order). Also
distinct graph pages a query touches and pages a layer-0 list spans.

    SHNSW_DEVLOOP_DIR=/tmp/sent100k PYTHONPATH=python:tools:bench/issue17 \\
        .venv/bin/python bench/issue16/image_order_sim.py
"""
from __future__ import annotations

import argparse
import collections
import heapq
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "issue17"))
import graphdump  # noqa: E402
from devloop import STATE, cluster_and_shim  # noqa: E402

WINDOW = 65536


def load(index: str, table: str):
    c, _ = cluster_and_shim(False)
    with c.connect() as conn:
        g = graphdump.read_graph(conn, index)
        rows = conn.execute(f"SELECT ctid::text, embedding::text FROM {table}").fetchall()
    vec = {}
    for t, e in rows:
        b, o = t.strip("()").split(",")
        vec[(int(b), int(o))] = np.array(e.strip("[]").split(","), dtype=np.float32)
    refs = sorted(g["nbrs"])
    X = np.stack([vec[g["tid"][r]] for r in refs])
    return g, refs, X / np.linalg.norm(X, axis=1, keepdims=True)


def greedy(neighbours, dist, ep, de, touched, expanded):
    """One layer's greedy walk from ep (at distance de): the nearest node
    it reaches and its distance. Adds every node it computes a distance to
    to touched and every node whose list it reads to expanded."""
    changed = True
    while changed:
        changed = False
        expanded.append(ep)
        best = ep
        for n in neighbours(ep):
            touched.add(n)
            dn = dist(n)
            if dn < de:
                de, best, changed = dn, n, True
        ep = best
    return ep, de


def beam(neighbours, dist, ep, de, ef, touched, expanded):
    """One layer's beam search of width ef from ep (at distance de), as
    HNSW's SEARCH-LAYER; records touched and expanded as greedy does."""
    visited, cand, res = {ep}, [(de, ep)], [(-de, ep)]
    while cand:
        dc, c = heapq.heappop(cand)
        if dc > -res[0][0] and len(res) >= ef:
            break
        expanded.append(c)
        for n in neighbours(c):
            if n in visited:
                continue
            visited.add(n)
            touched.add(n)
            dn = dist(n)
            if len(res) < ef or dn < -res[0][0]:
                heapq.heappush(cand, (dn, n))
                heapq.heappush(res, (-dn, n))
                if len(res) > ef:
                    heapq.heappop(res)


def search(g, idx, X, q, ef):
    """Records an HNSW search touches (cosine on exact vectors)."""
    def dist(r):
        return 1.0 - float(X[idx[r]] @ q)
    ep = g["entry"]
    de = dist(ep)
    touched, expanded = {ep}, []
    for layer in range(g["level"][ep], 0, -1):
        ep, de = greedy(lambda c: [n for n in g["upper"].get((c, layer), []) if n in idx],
                        dist, ep, de, touched, expanded)
    beam(lambda c: [n for n in g["nbrs"][c] if n in idx], dist, ep, de, ef, touched, expanded)
    return touched


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", default="t_sh_idx")
    ap.add_argument("--table", default="t_sh")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--ef", type=int, default=40)
    a = ap.parse_args(argv)
    g, refs, X = load(a.index, a.table)
    sb = g["slot_bits"]
    idx = {r: i for i, r in enumerate(refs)}
    pages = sorted({r >> sb for r in refs})
    npp = max(r & ((1 << sb) - 1) for r in refs) + 1
    node_size = 8192 // npp            # about: npp records fill a page
    stride = -(-npp * node_size // 64) * 64
    Q = np.load(STATE / "queries.npy")[:a.queries].astype(np.float32)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    T = [[idx[r] for r in search(g, idx, X, q, a.ef)] for q in Q]
    N = len(refs)
    print(f"{N} nodes on {len(pages)} graph pages ({npp} a page, about {stride} bytes of "
          f"image each); {a.queries} queries at ef {a.ef}: "
          f"{np.mean([len(t) for t in T]):.0f} records touched a query")

    def report(name, slot_of):
        """slot_of[i]: node i's position in the image, in records."""
        win = np.mean([len({int(slot_of[i] // npp * stride + slot_of[i] % npp * node_size)
                             // WINDOW for i in t}) for t in T])
        pg = np.mean([len({int(slot_of[i]) // npp for i in t}) for t in T])
        sample = refs[::max(1, N // 3000)]
        span = np.mean([len({int(slot_of[idx[n]]) // npp for n in g["nbrs"][r] if n in idx})
                        for r in sample])
        print(f"  {name:38s} 64 kB windows/query {win:6.1f}  pages/query {pg:6.1f}  "
              f"pages/list {span:5.2f}")

    def by_pages(order):
        rank = {p: i for i, p in enumerate(order)}
        return np.array([rank[r >> sb] * npp + (r & ((1 << sb) - 1)) for r in refs])

    report("block order (the image today)", by_pages(pages))
    rng = np.random.default_rng(1)
    report("pages in random order", by_pages([pages[i] for i in rng.permutation(len(pages))]))
    adj = collections.defaultdict(collections.Counter)
    for r, lst in g["nbrs"].items():
        for n in lst:
            adj[r >> sb][n >> sb] += 1
    start = g["entry"] >> sb
    order, seen, dq = [], {start}, collections.deque([start])
    while dq:
        p = dq.popleft()
        order.append(p)
        for q, _ in adj[p].most_common():
            if q not in seen:
                seen.add(q)
                dq.append(q)
    order += [p for p in pages if p not in seen]
    report("pages breadth-first from the entry's", by_pages(order))
    out: list[int] = []

    def bisect(ix):
        if len(ix) <= npp:
            out.extend(ix.tolist())
            return
        Y = X[ix] - X[ix].mean(0)
        v = rng.standard_normal(Y.shape[1]).astype(np.float32)
        for _ in range(6):
            v = Y.T @ (Y @ v)
            v /= np.linalg.norm(v)
        o = np.argsort(Y @ v)
        h = (len(ix) // 2 // npp) * npp or len(ix) // 2
        bisect(ix[o[:h]])
        bisect(ix[o[h:]])
    bisect(np.arange(N))
    slot = np.empty(N, int)
    slot[np.array(out)] = np.arange(N)
    report("nodes by principal-direction bisection", slot)


if __name__ == "__main__":
    sys.exit(main())
