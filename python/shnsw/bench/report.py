"""Comparisons at equal recall, the Markdown report and the JSON file."""

from __future__ import annotations

import json
import math
from pathlib import Path

from . import metrics

BASELINE = "pgvector hnsw"

# (key, label, higher_is_better, target kind, target value, target text)
#   kind "ratio": streamhnsw / pgvector compared with the value
#   kind "abs":   the engine's own figure compared with the value
TARGETS = [
    ("recall_default", "recall@10 at ef_search 40 (default)", True, "abs", 0.95, ">= 0.95"),
    ("hot_qps", "hot: queries/s at recall@10 = {t}, 1 client", True, "ratio", 3.0, ">= 3x"),
    ("hot_qps_99", "hot: queries/s at recall@10 = 0.99, 1 client", True, None, None, ""),
    ("hot_p50", "hot: p50 ms at recall@10 = {t}", False, None, None, ""),
    ("pgbench_hot_qps", "hot with pgbench (C client, prepared, vector by key): q/s at ef*",
     True, None, None, ""),
    ("cold_p50", "cold (local disk): p50 ms at recall {t}", False, "ratio", 1 / 3, "<= 1/3"),
    ("lat_p50", "cold + {d} us/read: p50 ms at recall {t}", False, "ratio", 1 / 8, "<= 1/8"),
    ("lat_rt", "cold + {d} us/read: serial round trips (p50 / delay) at recall {t}", False,
     "ratio", 1 / 8, "<= 1/8"),
    ("lat_reads", "cold + {d} us/read: storage reads per query at ef*", False, None, None, ""),
    ("lat_bufread", "cold + {d} us/read: buffers read per query at ef*", False, None, None, ""),
    ("hot_hit", "hot: buffers hit per query at ef*", False, None, None, ""),
    ("fresh_p50", "fresh connection: p50 ms of a new connection's first query at ef*", False,
     None, None, ""),
    ("fresh_ratio", "fresh connection p50 / warm p50 at ef*", False, None, None, ""),
    ("fresh_net", "fresh connection: (fresh - warm) - (PK lookup fresh - warm), / warm, at ef*",
     False, "abs", 1.2, "<= 1.2x"),
    ("fresh_net_vec", "fresh connection: (fresh - warm) - (PK lookup with a vector literal fresh - "
     "warm), / warm, at ef*", False, None, None, ""),
    ("conc_qps", "concurrent: peak queries/s over {c} clients at ef*", True, None, None, ""),
    ("conc_clients", "concurrent: clients at the peak", None, None, None, ""),
    ("mixed_qps", "mixed: vector queries/s beside pgbench", True, "ratio", 2.0, ">= 2x"),
    ("mixed_tps", "mixed: TPC-B tps beside vector clients", True, "ratio", 1.0, "no lower"),
    ("beside_ratio", "search q/s beside a stream of single-row inserts / alone, at ef*", True,
     "abs", 0.8, ">= 0.8"),
    ("ltm_qps_kept", "index > shared_buffers ({f}), OS cache kept: q/s at ef*", True, "ratio",
     1.0, "ahead"),
    ("ltm_p99_kept", "index > shared_buffers ({f}), OS cache kept: p99 ms", False, None, None,
     ""),
    ("ltm_qps_dropped", "index > shared_buffers ({f}), OS cache dropped: q/s at ef*", True,
     "ratio", 1.0, "ahead"),
    ("ltm_p99_dropped", "index > shared_buffers ({f}), OS cache dropped: p99 ms", False, None,
     None, ""),
    ("size_mb", "index size MB", False, "ratio", 1.0, "<= 1.0x"),
    ("build_s", "build time s", False, "ratio", 0.7, "<= 0.7x"),
    ("build_mem_mb", "build memory MB (peak private + largest shared footprint)", False, None,
     None, ""),
    ("insert_rps", "single-row inserts/s", True, "ratio", 1.5, ">= 1.5x"),
    ("ef_star", "ef* = smallest ef_search with recall@10 >= {t}", None, None, None, ""),
]


def _pts(res, mode, engine):
    m = res["modes"].get(mode)
    if not m:
        return []
    return [p for p in m["points"] if p["engine"] == engine]


def summarize(res: dict) -> dict:
    """Per engine, the headline figures (at equal recall where it applies)."""
    t = res["config"]["target_recall"]
    out = {}
    for eng, info in res["engines"].items():
        s = {}
        hot = _pts(res, "hot", eng)
        d = {p["ef_search"]: p for p in hot}
        if 40 in d:
            s["recall_default"] = d[40]["recall@10"]
        s["hot_qps"] = metrics.at_recall([(p["recall@10"], p["qps"]) for p in hot], t, True)
        s["hot_qps_99"] = metrics.at_recall([(p["recall@10"], p["qps"]) for p in hot], 0.99, True)
        s["hot_p50"] = metrics.at_recall([(p["recall@10"], p["p50_ms"]) for p in hot], t, False)
        efs = res.get("ef_at_target", {}).get(eng)
        s["ef_star"] = efs
        if efs in d:
            s["hot_hit"] = d[efs].get("buffers_hit")
            s["hot_recall_at_ef_star"] = d[efs]["recall@10"]
        cold = _pts(res, "cold", eng)
        s["cold_p50"] = metrics.at_recall([(p["hot_recall@10"], p["p50_ms"]) for p in cold],
                                          t, False)
        lat = _pts(res, "cold_latency", eng)
        s["lat_p50"] = metrics.at_recall([(p["hot_recall@10"], p["p50_ms"]) for p in lat],
                                         t, False)
        s["lat_rt"] = metrics.at_recall([(p["hot_recall@10"], p.get("round_trips_p50"))
                                         for p in lat], t, False)
        for p in lat:
            if p["ef_search"] == efs:
                s["lat_reads"] = p["storage_reads"]
                s["lat_bufread"] = p["buffers_read"]
        for p in _pts(res, "fresh", eng):
            s["fresh_ratio"] = p["fresh_over_warm_p50"]
            s["fresh_net"] = p.get("fresh_extra_net_over_warm")
            s["fresh_net_vec"] = p.get("fresh_extra_net_vec_over_warm")
            s["fresh_p50"] = p["p50_ms"]
        conc = _pts(res, "concurrent", eng)
        if conc:
            top = max(conc, key=lambda p: p["qps"])   # the peak over the client sweep
            s["conc_qps"] = top["qps"]
            s["conc_clients"] = top["clients"]
        for p in _pts(res, "pgbench_hot", eng):
            s["pgbench_hot_qps"] = p["qps"]
        for p in _pts(res, "beside_inserts", eng):
            s["beside_ratio"] = p["ratio"]
        for p in _pts(res, "mixed", eng):
            s["mixed_qps"] = p["vector_qps"]
            s["mixed_tps"] = p["pgbench"].get("tps")
        ltm = _pts(res, "ltm", eng)
        if ltm:
            fr = _ltm_headline_fraction(res)
            for p in ltm:
                if p["fraction_of_reference"] == fr:
                    s[f"ltm_qps_{p['os_cache']}"] = p["qps"]
                    s[f"ltm_p50_{p['os_cache']}"] = p["p50_ms"]
                    s[f"ltm_p99_{p['os_cache']}"] = p["p99_ms"]
        if "index_bytes" in info:
            s["size_mb"] = info["index_bytes"] / 2**20
            s["build_s"] = info["build_s"]
            if info.get("build_peak_bytes") is not None:
                s["build_mem_mb"] = (info["build_peak_bytes"]
                                     + info.get("build_peak_shmem_bytes", 0)) / 2**20
        for p in _pts(res, "insert", eng):
            s["insert_rps"] = p["rows_per_s"]
        if not any(p for p in _pts(res, "insert", eng)):
            # Variants share one index (and one insert measurement).
            for p in (res["modes"].get("insert") or {}).get("points", []):
                if p["am"] == info["am"]:
                    s["insert_rps"] = p["rows_per_s"]
        out[eng] = s
    if res.get("faiss"):
        fp = res["faiss"]["points"]
        out["FAISS IndexHNSWFlat"] = {
            "hot_qps": metrics.at_recall([(p["recall@10"], p["qps"]) for p in fp], t, True),
            "hot_p50": metrics.at_recall([(p["recall@10"], p["p50_ms"]) for p in fp], t, False),
            "build_s": res["faiss"]["build_s"],
        }
        d = {p["ef_search"]: p for p in fp}
        if 40 in d:
            out["FAISS IndexHNSWFlat"]["recall_default"] = d[40]["recall@10"]
    return out


def _ltm_headline_fraction(res):
    """The shared_buffers fraction of the headline (the one nearest 1/4)."""
    m = res["modes"].get("ltm")
    if not m or not m["points"]:
        return None
    return min({p["fraction_of_reference"] for p in m["points"]},
               key=lambda f: abs(f - 0.25))


def _fmt(v, key=None):
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        if key and key.startswith("recall"):
            return f"{v:.4f}"
        a = abs(v)
        if a >= 1000:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:.0f}"
        if a >= 10:
            return f"{v:.1f}"
        if a >= 1:
            return f"{v:.2f}"
        return f"{v:.3f}"
    return str(v)


def _verdict(kind, val, ratio, higher, threshold):
    x = ratio if kind == "ratio" else val
    if kind is None or x is None:
        return ""
    ok = x >= threshold - 1e-12 if higher else x <= threshold + 1e-12
    return "met" if ok else "missed"


def comparison_table(res: dict, summary: dict) -> str:
    cfg = res["config"]
    t, dly = cfg["target_recall"], cfg["delay_us"]
    clients = ("/".join(map(str, cfg["clients"])) if cfg.get("clients") else "-")
    engines = [e for e in res["engines"]]
    others = [e for e in engines if e != BASELINE]
    have_base = BASELINE in engines
    has_faiss = "FAISS IndexHNSWFlat" in summary
    head = ["figure"] + engines
    for o in others:
        if have_base:
            head += [f"{o} / pgvector", "target"]
    if has_faiss:
        head.append("FAISS (in process)")
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    fr = _ltm_headline_fraction(res)
    frac_text = f"shared_buffers {fr:g} x pgvector's index" if fr is not None else ""
    for key, label, higher, kind, thr, ttext in TARGETS:
        vals = [summary[e].get(key) for e in engines]
        if all(v is None for v in vals) and not (has_faiss and summary["FAISS IndexHNSWFlat"].get(key)):
            continue
        row = [label.format(t=t, d=dly, c=clients, f=frac_text)] + [_fmt(v, key) for v in vals]
        for o in others:
            if not have_base:
                continue
            b, v = summary[BASELINE].get(key), summary[o].get(key)
            r = metrics.ratio(v, b) if kind != "abs" else None
            if kind == "abs":
                cell = "–"
                verdict = _verdict(kind, v, None, higher, thr)
            else:
                cell = f"{r:.2f}x" if r is not None else "–"
                verdict = _verdict(kind, v, r, higher, thr)
            row += [cell, f"{ttext} {verdict}".strip() if ttext else ""]
        if has_faiss:
            row.append(_fmt(summary["FAISS IndexHNSWFlat"].get(key), key))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    for r in rows:
        out.append("| " + " | ".join(_fmt(x) if not isinstance(x, str) else x for x in r) + " |")
    return "\n".join(out)


def _r(v):
    return "–" if v is None else f"{v:.4f}"


def markdown(res: dict, summary: dict, plots: dict) -> str:
    cfg, ds = res["config"], res["dataset"]
    md = [f"# streamhnsw benchmark: {ds['name']} ({ds['metric']})", ""]
    md.append(f"Run {res.get('started')} on {res['machine'].get('cpu', '?')}, "
              f"{res['machine'].get('cpus')} CPUs. Single run, one server, engines side by "
              "side; figures are medians or means over queries as labelled. Compare ratios, "
              "not absolute times, and never across runs.")
    md.append("")
    v = res.get("versions", {})
    md.append(f"- PostgreSQL {v.get('server')}, pgvector {v.get('vector')}, streamhnsw "
              f"{v.get('streamhnsw', 'not installed')} (access method "
              f"{'present' if v.get('streamhnsw_am') else 'absent'})"
              + (f", FAISS {res['faiss']['version']}" if res.get("faiss") else ""))
    md.append(f"- data: {ds['rows']} rows x {ds['dim']} ({ds['key']}), {ds['queries']} held-out "
              f"queries, exact ground truth k={ds['k_truth']}; column type {cfg['type']}")
    md.append(f"- index: m={cfg['m']}, ef_construction={cfg['ef_construction']}; k={cfg['k']}; "
              f"ef_search swept {cfg['ef_search']}; target recall@10 {cfg['target_recall']}; "
              f"ef* per engine {res.get('ef_at_target')}")
    md.append(f"- modes: {', '.join(cfg['modes'])}; injected delay {cfg['delay_us']} us per read "
              f"(LD_PRELOAD shim, io_method=worker)")
    md.append("- server settings: " + ", ".join(f"`{k}={v}`" for k, v in
                                               sorted(res["server_settings"].items())))
    for e, info in res["engines"].items():
        if info.get("gucs"):
            md.append(f"- {e} session settings: " +
                      ", ".join(f"`{k}={v}`" for k, v in info["gucs"].items()))
    for n in res.get("notes", []):
        md.append(f"- note: {n}")
    md += ["", "## Comparison", "", comparison_table(res, summary), ""]
    md.append("Ratios are the second engine's figure over pgvector's, at equal recall@10 "
              "(linear interpolation along each engine's ef_search sweep, on its frontier) "
              "where the figure says so; cold curves use the recall measured over all "
              "queries in the hot sweep at the same ef_search (results do not depend on the "
              "cache). ef* is the smallest swept ef_search reaching the target recall; the "
              "fixed-ef modes (fresh, concurrent, mixed, eic sweep) run there.")
    md.append("")
    hot = res["modes"].get("hot")
    if hot:
        md += ["## Hot (prewarmed, one client)", ""]
        rows = [[p["engine"], p["ef_search"], _r(p["recall@1"]), _r(p["recall@10"]),
                 _r(p.get("recall@100")), p["qps"], p["p50_ms"], p["p95_ms"], p["p99_ms"],
                 p.get("buffers_hit"), p.get("buffers_read")] for p in hot["points"]]
        if res.get("faiss"):
            rows += [["FAISS", p["ef_search"], _r(p["recall@1"]), _r(p["recall@10"]),
                      _r(p.get("recall@100")), p["qps"], p["p50_ms"], p["p95_ms"],
                      p["p99_ms"], "–", "–"] for p in res["faiss"]["points"]]
        md += [_table(["engine", "ef_search", "recall@1", "recall@10", "recall@100",
                       "queries/s", "p50 ms", "p95 ms", "p99 ms", "buffers hit/q",
                       "buffers read/q"], rows), ""]
        md.append(f"{hot['queries']} queries per point; buffers from EXPLAIN (ANALYZE, BUFFERS) "
                  f"on {cfg['explain_sample']} of them; recall@100 with LIMIT 100 at "
                  f"ef_search max(ef, 100) on {cfg['recall100_queries']} queries.")
        md.append("")
    for mode, title in (("cold", "Cold (evicted from shared buffers and the OS cache before "
                                  "each query), local disk"),
                        ("cold_latency", f"Cold + {cfg['delay_us']} us injected per read")):
        m = res["modes"].get(mode)
        if not m:
            continue
        md += [f"## {title}", ""]
        rows = [[p["engine"], p["ef_search"], _r(p["hot_recall@10"]), p["mean_ms"], p["p50_ms"],
                 p["p95_ms"], p["p99_ms"], p["storage_reads"], p["buffers_read"],
                 p["buffers_hit"], p.get("round_trips_p50")] for p in m["points"]]
        md += [_table(["engine", "ef_search", "recall@10", "mean ms", "p50 ms", "p95 ms",
                       "p99 ms", "storage reads/q", "buffers read/q", "buffers hit/q",
                       "round trips (p50/delay)"], rows), ""]
        md.append(f"{m['queries']} queries per point. Storage reads are read calls on the "
                  "relation files counted by the shim (a combined read of several blocks is "
                  "one); buffers from EXPLAIN on a sample.")
        md.append("")
    m = res["modes"].get("eic")
    if m:
        md += [f"## effective_io_concurrency sweep (cold + {m['delay_us']} us per read)", ""]
        rows = []
        for eng in res["engines"]:
            pts = [p for p in m["points"] if p["engine"] == eng]
            if not pts:
                continue
            base = pts[0]["mean_ms"]
            for p in pts:
                rows.append([eng, p["effective_io_concurrency"], p["mean_ms"],
                             f"{base / p['mean_ms']:.1f}", p["stdev_ms"], p["p50_ms"],
                             p["round_trips_p50"], p["storage_reads"], p["buffers_read"]])
        md += [_table(["engine", "eic", "avg ms", "speedup", "stdev", "p50 ms",
                       "round trips", "storage reads/q", "buffers read/q"], rows), ""]
        md.append(f"{m['queries']} cold queries per row at ef*; speedup against the first "
                  "row of the same engine.")
        md.append("")
    m = res["modes"].get("workers")
    if m:
        md += [f"## io_workers (cold + {m['delay_us']} us per read, effective_io_concurrency "
               f"{m['effective_io_concurrency']})", ""]
        base = {p["io_workers"]: p["p50_ms"] for p in m["points"]
                if p["engine"] in [e for e, i in res["engines"].items() if i.get("am") == "hnsw"]}
        rows = [[p["engine"], p["io_workers"], p["p50_ms"],
                 f"{base[p['io_workers']] / p['p50_ms']:.1f}x" if p["io_workers"] in base else "",
                 p["round_trips_p50"], p["storage_reads"], p.get("waits"),
                 p.get("sync_reads")] for p in m["points"]]
        md += [_table(["engine", "io_workers", "p50 ms", "pgvector p50 / p50", "round trips",
                       "storage reads/q", "waits", "synchronous reads"], rows), ""]
        md.append(f"{m['queries']} cold queries per row at ef*, the eic sweep's. With "
                  "io_method = worker each I/O worker reads one block at a time: io_workers "
                  "bounds the reads in flight (3 is PostgreSQL's default).")
        md.append("")
    m = res["modes"].get("ltm")
    if m:
        md += ["## Index larger than shared_buffers", ""]
        rows = [[p["engine"], p["shared_buffers_bytes"] / 2**20, p["index_bytes"] / 2**20,
                 f"{p['sb_over_index']:.2f}", p["os_cache"], p["ef_search"],
                 _r(p.get("hot_recall@10")), p["queries"], p["qps"], p["p50_ms"],
                 p["p95_ms"], p["p99_ms"], p["reads_per_query"]] for p in m["points"]]
        md += [_table(["engine", "shared_buffers MB", "index MB", "shared_buffers / index",
                       "OS cache", "ef_search", "recall@10", "queries", "queries/s",
                       "p50 ms", "p95 ms", "p99 ms", "reads/q"], rows), ""]
        md.append("One server for both engines, restarted with shared_buffers a fraction of "
                  "pgvector's index size (the same setting for every engine; a smaller "
                  "index fits a larger part of itself). Each engine starts with its "
                  "relations out of shared buffers, runs warm-up queries (steady state), "
                  f"then {m['seconds']} s of timed queries from one client at ef*. OS cache "
                  "kept: the relations' files are in the OS page cache (pg_prewarm 'read'), "
                  "so a shared-buffer miss costs a copy from the kernel; dropped: "
                  "posix_fadvise(DONTNEED) on their files before every query, so each miss "
                  "is a storage read. reads/q: read calls on the relation files per query "
                  "(the shim's counter).")
        md.append("")
    m = res["modes"].get("fresh")
    if m:
        md += ["## Fresh connection per query", ""]
        rows = [[p["engine"], p["ef_search"], _r(p["recall@10"]), p["p50_ms"], p["p95_ms"],
                 p["warm"]["p50_ms"], p["fresh_over_warm_p50"], p.get("pk_fresh_p50_ms"),
                 p.get("pk_warm_p50_ms"), p.get("fresh_extra_net_over_warm"),
                 p.get("vec_fresh_p50_ms"), p.get("vec_warm_p50_ms"),
                 p.get("fresh_extra_net_vec_over_warm"), p["connect_ms_p50"]]
                for p in m["points"]]
        md += [_table(["engine", "ef_search", "recall@10", "fresh p50 ms", "fresh p95 ms",
                       "warm p50 ms", "fresh / warm", "PK fresh p50 ms", "PK warm p50 ms",
                       "(fresh - warm - PK's) / warm", "PK + vector literal fresh p50 ms",
                       "PK + vector literal warm p50 ms", "(fresh - warm - PK + literal's) / warm",
                       "connect ms (untimed)"], rows), ""]
    m = res["modes"].get("concurrent")
    if m:
        md += ["## Concurrent clients (hot)", ""]
        rows = [[p["engine"], p["clients"], p["ef_search"], p["qps"], p["p50_ms"], p["p95_ms"],
                 p["p99_ms"]] for p in m["points"]]
        md += [_table(["engine", "clients", "ef_search", "queries/s", "p50 ms", "p95 ms",
                       "p99 ms"], rows), ""]
    m = res["modes"].get("mixed")
    if m:
        md += [f"## Mixed: pgbench TPC-B ({m['pgbench_clients']} clients, scale "
               f"{m['pgbench_scale']}) + {m['vector_clients']} vector clients, "
               f"{m['seconds']} s", ""]
        rows = [["pgbench alone", "–", "–", "–", "–", m["pgbench_alone"].get("tps")]]
        rows += [[p["engine"], p["ef_search"], p["vector_qps"], p["p50_ms"], p["p99_ms"],
                  p["pgbench"].get("tps")] for p in m["points"]]
        md += [_table(["engine", "ef_search", "vector q/s", "vector p50 ms", "vector p99 ms",
                       "TPC-B tps"], rows), ""]
    m = res["modes"].get("pgbench_hot")
    if m:
        md += [f"## Hot with pgbench: one client, {m['passes']} passes of {m['seconds']} s", ""]
        rows = [[p["engine"], p["ef_search"], p["qps"],
                 ", ".join(f"{x:.0f}" for x in p["qps_passes"])] for p in m["points"]]
        md += [_table(["engine", "ef_search", "queries/s (median)", "passes"], rows), ""]
    m = res["modes"].get("beside_inserts")
    if m:
        md += [f"## Searches beside {m['insert_rate']:g} single-row inserts a second, "
               f"{m['seconds']} s", ""]
        rows = [[p["engine"], p["ef_search"], p["qps_alone"], p["qps_beside"], p["ratio"],
                 p["inserts_per_s"], f"{p['found']} / {p['checked']}"] for p in m["points"]]
        md += [_table(["engine", "ef_search", "q/s alone", "q/s beside inserts", "ratio",
                       "inserts/s reached", "inserted rows found by the next search"],
                      rows), ""]
    m = res["modes"].get("insert")
    if m or res["engines"]:
        md += ["## Build, size, inserts", ""]
        rows = []
        ins = {p["am"]: p for p in (m or {}).get("points", [])}
        seen = set()
        for e, info in res["engines"].items():
            if info["am"] in seen or "build_s" not in info:
                continue
            seen.add(info["am"])
            p = ins.get(info["am"], {})
            mem = info.get("build_peak_bytes")
            shm = info.get("build_peak_shmem_bytes")
            rows.append([info["am"], info["load_s"], info["build_s"],
                         info["index_bytes"] / 2**20, info["table_bytes"] / 2**20,
                         mem / 2**20 if mem else None, shm / 2**20 if shm else None,
                         info.get("build_workers"),
                         p.get("rows_per_s"), p.get("p50_ms")])
        if res.get("faiss"):
            rows.append(["FAISS (2 threads)", "–", res["faiss"]["build_s"], "–", "–", "–",
                         "–", "–", "–", "–"])
        md += [_table(["index", "load s", "build s", "index MB", "table MB",
                       "build private MB (peak)", "build shared MB (peak, one process)",
                       "parallel workers", "inserts/s (synchronous_commit off)",
                       "insert p50 ms"], rows), ""]
        md.append("Build memory sampled every 0.5 s from /proc: private = the sum of RssAnon "
                  "of the building backend and its parallel workers; shared = the largest "
                  "RssShmem of one of them (dynamic shared memory, where a parallel build "
                  "may keep its graph, plus the shared-buffer pages it touched). "
                  f"maintenance_work_mem = {res['server_settings'].get('maintenance_work_mem')}.")
        md.append("")
    if plots:
        md += ["## Plots", ""]
        for name, path in plots.items():
            md.append(f"![{name}]({Path(path).name})")
        md.append("")
    return "\n".join(md)


def write(res: dict, outdir: Path, plots: dict) -> dict:
    outdir.mkdir(parents=True, exist_ok=True)
    summary = summarize(res)
    res["summary"] = summary
    res["plots"] = {k: str(v) for k, v in plots.items()}
    md = markdown(res, summary, plots)
    (outdir / "report.md").write_text(md)

    def default(o):
        try:
            import numpy as np
            if isinstance(o, np.generic):
                return o.item()
        except ImportError:  # pragma: no cover
            pass
        return str(o)

    with open(outdir / "results.json", "w") as f:
        json.dump(res, f, indent=1, default=default)
    return {"markdown": outdir / "report.md", "json": outdir / "results.json",
            "table": comparison_table(res, summary)}


def write_combined(results: list, outdir: Path, plots: dict, started) -> dict:
    """The top-level report of a preset with several data sets."""
    outdir.mkdir(parents=True, exist_ok=True)
    md = ["# streamhnsw benchmark: " + ", ".join(r["dataset"]["name"] for r in results), ""]
    md.append(f"Started {started.isoformat(timespec='seconds')}; one server per data set, "
              "engines side by side on it; compare ratios within a data set, never across "
              "runs. Each data set's own report (all modes, every point, settings) is "
              "linked below.")
    md.append("")
    for r in results:
        ds = r["dataset"]
        slug = "".join(c if c.isalnum() else "-" for c in ds["name"].lower()).strip("-")
        md.append(f"## {ds['name']} ({ds['metric']})")
        md.append("")
        extra = ""
        if ds.get("model"):
            extra = (f"; {ds.get('model')} ({ds.get('package')}), corpus {ds.get('source')}, "
                     f"{ds.get('corpus_lines')} distinct lines")
        md.append(f"- {ds['rows']} rows x {ds['dim']}, {ds['queries']} held-out queries"
                  f"{extra}; run took {r.get('elapsed_s', 0) / 60:.1f} min; "
                  f"[full report]({slug}/report.md)")
        md.append("- server settings: " + ", ".join(
            f"`{k}={v}`" for k, v in sorted(r["server_settings"].items())))
        md += ["", comparison_table(r, r.get("summary") or summarize(r)), ""]
    if plots:
        md += ["## Plots", ""]
        for name, path in plots.items():
            md.append(f"![{name}]({Path(path).name})")
        md.append("")
    (outdir / "report.md").write_text("\n".join(md))
    return {"markdown": outdir / "report.md"}


def write_standalone(stem: Path, res: dict, md: str) -> None:
    """A standalone preset's report: stem.json (the figures) and stem.md,
    printed too."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1, default=float))
    stem.with_suffix(".md").write_text(md)
    print(md)
