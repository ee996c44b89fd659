"""VectorDBBench's cases, pgvector's client and streamhnsw's side by side:
`python -m shnsw.bench --preset vdbbench`.

VectorDBBench (vdbbench/, in its own environment .venv-vdb: `make venv-vdb`)
runs its performance case (serial recall, nDCG and p99, then the
concurrency sweep to each engine's peak q/s) and its label-filtered 1% and
99% variants on a custom data set written from the suite's data. The real
sentence set needs the embedding model of the main environment, so this
module writes the arrays here and hands them to vdbbench/run.py, which runs
in .venv-vdb; VectorDBBench's own result files and a summary table land in
bench/reports/vdbbench-<set>/.

Sets: `sentences` (the real sentence set, 100k x 384, cosine), `clustered`
(synthetic clustered 100k x 768, cosine) and `clustered-1m` (1M x 768: about
an hour of builds on two cores; a run for a report, not for CI). The default
is the sentences and 1M x 768; the 1M set needs more than the 100k defaults
(shared_buffers 8GB, maintenance_work_mem 6GB, ef_search 100: SETS below).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from . import datasets

ROOT = Path(__file__).resolve().parents[3]
VDB_PYTHON = ROOT / ".venv-vdb" / "bin" / "python"

SETS = {
    "sentences": dict(rows=100_000, queries=1000),
    "clustered": dict(rows=100_000, dim=768, queries=1000),
    # both graphs fit in maintenance_work_mem, the indexes in shared_buffers;
    # ef_search 100 for both, as the run of record (bench/reports/vdbbench-clustered-1m)
    "clustered-1m": dict(rows=1_000_000, dim=768, queries=1000,
                         run=["--set", "shared_buffers=8GB", "--set", "maintenance_work_mem=6GB",
                              "--ef-search", "100"]),
}


def _arrays(name: str, spec: dict, k: int, seed: int, into: Path) -> list[str]:
    """The run.py arguments that name the data set, writing arrays if needed."""
    if name.startswith("clustered"):
        # run.py generates synthetic sets itself (the suite's generator)
        return ["--synthetic", str(spec["rows"]), str(spec["dim"]),
                "--queries", str(spec["queries"]), "--name", f"clustered {spec['rows']}x{spec['dim']}"]
    ds = datasets.sentences(n_rows=spec["rows"], n_queries=spec["queries"], seed=seed,
                            k_truth=max(k, 100))
    np.save(into / "rows.npy", ds.rows.astype(np.float32))
    np.save(into / "queries.npy", ds.queries.astype(np.float32))
    np.save(into / "truth.npy", ds.truth[:, :k])
    return ["--arrays", str(into), "--name", ds.name]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench --preset vdbbench",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="sentences,clustered-1m",
                    help=f"comma-separated, of {', '.join(SETS)} (default: the real sentences and "
                         "1M x 768, about 1.5 hours on two cores; clustered is the 100k x 768 set)")
    ap.add_argument("--rows", type=int, default=None,
                    help="rows of each set instead of its size (a smoke run)")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    ap.add_argument("--duration", type=int, default=30, help="seconds per client count")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "reports")
    ap.add_argument("extra", nargs=argparse.REMAINDER,
                    help="after --, passed to vdbbench/run.py (e.g. -- --ef-search 64 --no-filters)")
    a = ap.parse_args(argv)
    if not VDB_PYTHON.exists():
        print(f"VectorDBBench's environment {VDB_PYTHON.parent.parent} is missing: run "
              "`make venv-vdb` (about 1.3 GB, a few minutes)", file=sys.stderr)
        return 2
    extra = [x for x in a.extra if x != "--"]
    for name in a.sets.split(","):
        if name not in SETS:
            ap.error(f"unknown set {name!r}; sets: {', '.join(SETS)}")
        spec = dict(SETS[name], **({"rows": a.rows} if a.rows else {}))
        with tempfile.TemporaryDirectory(prefix="vdb-arrays-") as tmp:
            source = _arrays(name, spec, a.k, a.seed, Path(tmp))
            cmd = [str(VDB_PYTHON), str(ROOT / "vdbbench" / "run.py"),
                   "--out", str(a.out / f"vdbbench-{name}"), "--metric", "cosine",
                   "--k", str(a.k), "--concurrency", a.concurrency,
                   "--duration", str(a.duration), "--seed", str(a.seed), *source,
                   *spec.get("run", []), *extra]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(ROOT / "python"), str(ROOT / "vdbbench")]))
            print("+", " ".join(cmd), flush=True)
            rc = subprocess.call(cmd, env=env, cwd=ROOT)
            if rc != 0:
                return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
