"""Write a streamhnsw index's graph for layout_eval.c: uint32 n, m, entry,
then per node in storage order uint32 level, and for each layer 0..level
uint32 count and the node numbers of its neighbours there (node number =
position in storage order).

    SHNSW_DEVLOOP_DIR=/tmp/cold3-dev PYTHONPATH=python:tools \\
        .venv/bin/python bench/issue17/layout_dump.py t_sh_idx graph.bin
"""
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphdump  # noqa: E402
from devloop import cluster_and_shim  # noqa: E402


def main(index, out):
    c, _ = cluster_and_shim(False)
    with c.connect() as conn:
        g = graphdump.read_graph(conn, index)
    refs = sorted(g["nbrs"])
    num = {r: i for i, r in enumerate(refs)}
    with open(out, "wb") as f:
        f.write(struct.pack("<III", len(refs), g["m"], num[g["entry"]]))
        for r in refs:
            lvl = g["level"][r]
            f.write(struct.pack("<I", lvl))
            for layer in range(lvl + 1):
                lst = g["nbrs"][r] if layer == 0 else g["upper"].get((r, layer), [])
                nb = [num[x] for x in lst if x in num]
                f.write(struct.pack(f"<I{len(nb)}I", len(nb), *nb))
    print(f"{len(refs)} nodes, m {g['m']}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
