"""Mode pgbench-hot: hot queries/s from pgbench (a C client) instead of the
suite's Python client.

Each transaction is a prepared LIMIT k query whose vector comes from a table
of the held-out queries by primary key, so neither the parse of a text
literal (pgvector's vector_in is about a sixth of a backend's time in the
hot loop) nor Python's per-query cost is in the figure; both engines pay
the same lookup.  One client per engine at its ef*, an untimed pass each,
then `hot_passes` passes of `seconds` with the engines taking turns (order
alternating); q/s is the median of the passes.  A figure beside the hot
mode's, not instead of it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from .. import clients, pg

QUERY_TABLE = "bench_q"


class PgbenchHotMode:
    def _pgbench_script(self, eng, tmp: Path, nq: int) -> Path:
        op = pg.OPS[self.metric][1]
        f = tmp / f"{eng.table}.sql"
        f.write_text(f"\\set r random(0, {nq - 1})\n"
                     f"SELECT id FROM {eng.table} ORDER BY embedding {op} "
                     f"(SELECT v FROM {QUERY_TABLE} WHERE i = :r) LIMIT {self.k};\n")
        return f

    def _pgbench_pass(self, eng, script: Path) -> float:
        env = dict(self.cluster.client_env(), PGDATABASE="postgres",
                   PGOPTIONS=eng.options(self.ef_at_target[eng.label]))
        r = subprocess.run([str(self.cluster.bindir / "pgbench"), "-n", "-M", "prepared",
                            "-c", "1", "-T", str(int(self.cfg["seconds"])), "-f", str(script)],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"pgbench failed:\n{r.stdout}\n{r.stderr}")
        return clients.parse_pgbench(r.stdout + r.stderr)["tps"]

    def pgbench_hot(self):
        cfg, log = self.cfg, self.log
        passes = max(1, cfg.get("hot_passes", 1))
        lits = self.lits[:cfg["hot_queries"]]
        with self.cluster.connect() as c:
            c.execute(f"DROP TABLE IF EXISTS {QUERY_TABLE}")
            c.execute(f"CREATE TABLE {QUERY_TABLE} (i int PRIMARY KEY, v {self.typ})")
            with c.cursor() as cur:
                cur.executemany(f"INSERT INTO {QUERY_TABLE} VALUES (%s, %s::{self.typ})",
                                list(enumerate(lits)))
            c.execute(f"VACUUM ANALYZE {QUERY_TABLE}")
            for eng in self.engines:
                pg.prewarm(c, eng)
        qps = {e.label: [] for e in self.engines}
        with tempfile.TemporaryDirectory() as tmp:
            os.chmod(tmp, 0o755)
            scripts = {e.label: self._pgbench_script(e, Path(tmp), len(lits))
                       for e in self.engines}
            log.step(f"pgbench-hot: {', '.join(e.label for e in self.engines)}, one client, "
                     f"{passes} passes of {cfg['seconds']} s after an untimed one")
            for eng in self.engines:
                self._pgbench_pass(eng, scripts[eng.label])
            for p_i in range(passes):
                order = self.engines if p_i % 2 == 0 else list(reversed(self.engines))
                for eng in order:
                    qps[eng.label].append(self._pgbench_pass(eng, scripts[eng.label]))
                    log(f"    pass {p_i + 1}: {eng.label}: {qps[eng.label][-1]:.0f} q/s",
                        flush=True)
        with self.cluster.connect() as c:
            c.execute(f"DROP TABLE {QUERY_TABLE}")
        points = [{"engine": e.label, "ef_search": self.ef_at_target[e.label],
                   "qps": statistics.median(qps[e.label]), "qps_passes": qps[e.label]}
                  for e in self.engines]
        self.result["modes"]["pgbench_hot"] = {"queries": len(lits), "passes": passes,
                                               "seconds": cfg["seconds"], "points": points}
