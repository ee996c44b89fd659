"""Would placing an inserted node beside its nearest neighbour give an
index filled by inserts a layout near a build's?  A simulation on a real
index's layer-0 graph (read from its relation file, tools/graphdump.py):
the nodes arrive in a random order; each goes to the graph page of the
first of its neighbours that arrived before it (of the first k), if that
page has a free slot, else to the page appends fill, which takes only
C - R nodes so that R slots a page stay for nodes placed beside a
neighbour. Reported: distinct pages a neighbour list spans beyond its
owner's (the pages a cold expansion reads) over 3,000 sampled nodes, and
graph pages against appends alone. The graph is the final one, not the
one each insert saw: an estimate of what placement could gain, not a
measurement of an index.

    SHNSW_DEVLOOP_DIR=/tmp/sent100k PYTHONPATH=python:tools \\
        .venv/bin/python bench/issue17/insert_placement_sim.py t_sh_idx
"""
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphdump  # noqa: E402
from devloop import cluster_and_shim  # noqa: E402

PER_PAGE = 15           # nodes a page at 384 dimensions, m 16


def pages_per_list(adj, page, sample):
    return sum(len({page[u] for u in adj[v]} - {page[v]}) for v in sample) / len(sample)


def place(adj, order, pos, reserve, k):
    page, count, open_page = [-1] * len(adj), [], -1
    for v in order:
        for u in [u for u in adj[v] if pos[u] < pos[v]][:k]:
            if count[page[u]] < PER_PAGE:
                page[v] = page[u]
                count[page[v]] += 1
                break
        else:
            if open_page < 0 or count[open_page] >= PER_PAGE - reserve:
                count.append(0)
                open_page = len(count) - 1
            page[v] = open_page
            count[open_page] += 1
    return page, len(count)


def main(index):
    c, _ = cluster_and_shim(False)
    with c.connect() as conn:
        g = graphdump.read_graph(conn, index)
    refs = sorted(g["nbrs"])
    num = {r: i for i, r in enumerate(refs)}
    adj = [[num[x] for x in g["nbrs"][r] if x in num] for r in refs]
    slot_bits = g["slot_bits"]
    rng = random.Random(1)
    sample = rng.sample(range(len(adj)), min(3000, len(adj)))
    print(f"{len(adj)} nodes; the build's layout: "
          f"{pages_per_list(adj, [r >> slot_bits for r in refs], sample):.2f} pages a list")
    order = list(range(len(adj)))
    rng.shuffle(order)
    pos = [0] * len(adj)
    for i, v in enumerate(order):
        pos[v] = i
    base, nbase = place(adj, order, pos, 0, 0)
    print(f"appends alone: {pages_per_list(adj, base, sample):.2f} pages a list, {nbase} pages")
    for reserve in (2, 4, 7, 10):
        for k in (1, 3):
            page, n = place(adj, order, pos, reserve, k)
            print(f"R {reserve}, k {k}: {pages_per_list(adj, page, sample):.2f} pages a list, "
                  f"{n} pages ({n / nbase:.2f}x)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "t_sh_idx")
