"""PNG plots: recall against queries/s (hot), recall against latency (cold
modes), latency against effective_io_concurrency, build/size/inserts."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"pgvector hnsw": dict(color="tab:blue", marker="o"),
         "FAISS IndexHNSWFlat": dict(color="tab:gray", marker="^", linestyle="--")}
OTHER = [dict(color=c, marker=m) for c, m in
         (("tab:red", "s"), ("tab:green", "D"), ("tab:purple", "v"), ("tab:orange", "P"))]


def _save(fig, out: Path, name: str) -> Path:
    """Lay out, write out/name as PNG and close the figure; returns the path."""
    fig.tight_layout()
    p = out / name
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p

def _style(eng, engines):
    if eng in STYLE:
        return STYLE[eng]
    others = [e for e in engines if e not in STYLE]
    return OTHER[others.index(eng) % len(OTHER)] if eng in others else OTHER[0]


def _title(res, what):
    ds = res["dataset"]
    return f"{what}\n{ds['name']} ({ds['metric']}), m={res['config']['m']}, " \
           f"ef_construction={res['config']['ef_construction']}"


def _recall_qps_ax(ax, res, small=False):
    hot = res["modes"].get("hot")
    engines = list(res["engines"])
    series = {e: [p for p in hot["points"] if p["engine"] == e] for e in engines}
    if res.get("faiss"):
        series["FAISS IndexHNSWFlat"] = res["faiss"]["points"]
    for e, pts in series.items():
        pts = sorted(pts, key=lambda p: p["ef_search"])
        if not pts:
            continue
        ax.plot([p["recall@10"] for p in pts], [p["qps"] for p in pts], label=e,
                **_style(e, engines + ["FAISS IndexHNSWFlat"]))
        if not small:
            for p in pts:
                ax.annotate(str(p["ef_search"]), (p["recall@10"], p["qps"]), fontsize=7,
                            textcoords="offset points", xytext=(3, 3))
    t = res["config"]["target_recall"]
    ax.axvline(t, color="k", linewidth=0.6, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries/s, one client (log)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8 if small else 10)


def recall_qps(res, out: Path):
    if not res["modes"].get("hot"):
        return None
    fig, ax = plt.subplots(figsize=(7.5, 5))
    _recall_qps_ax(ax, res)
    ax.set_title(_title(res, "Hot: recall vs throughput (labels: ef_search)"), fontsize=10)
    return _save(fig, out, "recall_qps_hot.png")


def recall_latency(res, out: Path):
    modes = [(m, res["modes"][m]) for m in ("hot", "cold", "cold_latency") if res["modes"].get(m)]
    if not modes:
        return None
    engines = list(res["engines"])
    fig, axes = plt.subplots(1, len(modes), figsize=(5 * len(modes), 4.5), squeeze=False)
    for ax, (name, m) in zip(axes[0], modes):
        for e in engines:
            pts = sorted((p for p in m["points"] if p["engine"] == e), key=lambda p: p["ef_search"])
            if not pts:
                continue
            rk = "recall@10" if name == "hot" else "hot_recall@10"
            ax.plot([p[rk] for p in pts], [p["p50_ms"] for p in pts], label=e, **_style(e, engines))
        ax.axvline(res["config"]["target_recall"], color="k", linewidth=0.6, linestyle=":")
        ax.set_yscale("log")
        ax.set_xlabel("recall@10")
        ax.set_ylabel("p50 latency ms (log)")
        title = {"hot": "hot", "cold": "cold, local disk",
                 "cold_latency": f"cold + {m.get('delay_us')} us/read"}[name]
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(_title(res, "Recall vs p50 latency"), fontsize=10)
    return _save(fig, out, "recall_latency.png")


def eic_latency(res, out: Path):
    m = res["modes"].get("eic")
    if not m:
        return None
    engines = list(res["engines"])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.5))
    for e in engines:
        pts = sorted((p for p in m["points"] if p["engine"] == e),
                     key=lambda p: p["effective_io_concurrency"])
        if not pts:
            continue
        x = [p["effective_io_concurrency"] for p in pts]
        st = _style(e, engines)
        a1.errorbar(x, [p["mean_ms"] for p in pts], yerr=[p["stdev_ms"] for p in pts],
                    label=f"{e} mean", capsize=3, **st)
        a1.plot(x, [p["p50_ms"] for p in pts], linestyle=":", color=st["color"],
                label=f"{e} p50")
        a2.plot(x, [p["round_trips_p50"] for p in pts], label=f"{e} round trips (p50/delay)", **st)
        a2.plot(x, [p["storage_reads"] for p in pts], linestyle=":", color=st["color"],
                label=f"{e} storage reads")
    for a in (a1, a2):
        a.set_xscale("symlog", linthresh=1)
        a.set_xticks(sorted({p["effective_io_concurrency"] for p in m["points"]}))
        a.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        a.set_xlabel("effective_io_concurrency")
        a.grid(True, alpha=0.3)
        a.legend(fontsize=7)
    a1.set_ylabel("cold query latency ms")
    a1.set_ylim(bottom=0)
    a2.set_ylabel("per query")
    a2.set_ylim(bottom=0)
    fig.suptitle(_title(res, f"Cold + {m['delay_us']} us per read, at ef*"), fontsize=10)
    return _save(fig, out, "eic_latency.png")


def _ltm_ax(ax, res):
    m = res["modes"].get("ltm")
    engines = list(res["engines"])
    for e in engines:
        st = _style(e, engines)
        for cache, ls in (("kept", "-"), ("dropped", "--")):
            pts = sorted((p for p in m["points"] if p["engine"] == e and p["os_cache"] == cache),
                         key=lambda p: p["sb_over_index"])
            if pts:
                ax.plot([p["sb_over_index"] for p in pts], [p["qps"] for p in pts],
                        label=f"{e}, OS cache {cache}", linestyle=ls, marker=st["marker"],
                        color=st["color"])
        # The hot mode: everything in shared_buffers.
        hot = [p for p in (res["modes"].get("hot") or {}).get("points", [])
               if p["engine"] == e and p["ef_search"] == res.get("ef_at_target", {}).get(e)]
        sb = _bytes(res.get("server_settings", {}).get("shared_buffers"))
        size = res["engines"][e].get("index_bytes")
        if hot and sb and size:
            # Drawn at 1 (its real ratio is larger: shared_buffers holds everything).
            ax.plot([min(1.0, sb / size)], [hot[0]["qps"]], marker="*", markersize=11,
                    linestyle="", color=st["color"],
                    label=f"{e}, hot (all in shared_buffers, drawn at 1)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("shared_buffers / the engine's index size (log)")
    ax.set_ylabel("queries/s at ef*, one client (log)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _bytes(v):
    if not v:
        return None
    units = {"kB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
    for u, f in units.items():
        if str(v).endswith(u):
            return float(str(v)[:-len(u)]) * f
    try:
        return float(v) * 8192
    except ValueError:
        return None


def ltm_qps(res, out: Path):
    if not (res["modes"].get("ltm") or {}).get("points"):
        return None
    fig, ax = plt.subplots(figsize=(7.5, 5))
    _ltm_ax(ax, res)
    ax.set_title(_title(res, "Index larger than shared_buffers: throughput vs "
                             "shared_buffers / index size"), fontsize=10)
    return _save(fig, out, "ltm_qps.png")


def _eic_ax(ax, res):
    m = res["modes"].get("eic")
    engines = list(res["engines"])
    for e in engines:
        pts = sorted((p for p in m["points"] if p["engine"] == e),
                     key=lambda p: p["effective_io_concurrency"])
        if pts:
            ax.plot([p["effective_io_concurrency"] for p in pts], [p["p50_ms"] for p in pts],
                    label=e, **_style(e, engines))
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(sorted({p["effective_io_concurrency"] for p in m["points"]}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("effective_io_concurrency")
    ax.set_ylabel(f"cold + {m['delay_us']} us/read: p50 ms at ef*")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def make_combined(results: list, out: Path) -> dict:
    """One figure per question, one panel per data set."""
    out.mkdir(parents=True, exist_ok=True)
    plots = {}
    for name, fname, mode, fn in (
            ("recall vs queries/s, per data set", "recall_qps_by_dataset.png", "hot",
             lambda ax, r: _recall_qps_ax(ax, r, small=True)),
            ("cold latency vs effective_io_concurrency, per data set",
             "eic_latency_by_dataset.png", "eic", _eic_ax),
            ("queries/s vs shared_buffers / index size, per data set",
             "ltm_qps_by_dataset.png", "ltm", _ltm_ax)):
        rs = [r for r in results if (r["modes"].get(mode) or {}).get("points")]
        if not rs:
            continue
        try:
            fig, axes = plt.subplots(1, len(rs), figsize=(6 * len(rs), 4.6), squeeze=False)
            for ax, r in zip(axes[0], rs):
                fn(ax, r)
                ds = r["dataset"]
                ax.set_title(f"{ds['name']} ({ds['metric']})", fontsize=10)
            fig.suptitle(f"{name.split(',')[0]}; m={rs[0]['config']['m']}, "
                         f"ef_construction={rs[0]['config']['ef_construction']}", fontsize=11)
            plots[name] = _save(fig, out, fname)
        except Exception as e:  # a plot must not lose the run's numbers
            print(f"  plot {name!r} failed: {e}")
    return plots


def build_size(res, out: Path):
    infos = {}
    for e, info in res["engines"].items():
        if "build_s" in info and info["am"] not in infos:
            infos[info["am"]] = info
    if not infos:
        return None
    ins = {p["am"]: p["rows_per_s"] for p in (res["modes"].get("insert") or {}).get("points", [])}
    names = list(infos)
    figs = [("build time s", [infos[n]["build_s"] for n in names]),
            ("index size MB", [infos[n]["index_bytes"] / 2**20 for n in names])]
    if ins:
        figs.append(("single-row inserts/s", [ins.get(n, 0) for n in names]))
    fig, axes = plt.subplots(1, len(figs), figsize=(3.5 * len(figs), 3.8))
    for ax, (label, vals) in zip(axes, figs):
        ax.bar(names, vals, color=["tab:blue" if n == "hnsw" else "tab:red" for n in names])
        ax.set_title(label, fontsize=10)
        for i, v in enumerate(vals):
            ax.annotate(f"{v:.3g}", (i, v), ha="center", va="bottom", fontsize=8)
    fig.suptitle(_title(res, "Build, size, inserts"), fontsize=10)
    return _save(fig, out, "build_size_insert.png")


def make_all(res, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    plots = {}
    for name, fn in (("recall vs queries/s (hot)", recall_qps),
                     ("recall vs latency", recall_latency),
                     ("latency vs effective_io_concurrency", eic_latency),
                     ("queries/s vs shared_buffers / index size", ltm_qps),
                     ("build, size, inserts", build_size)):
        try:
            p = fn(res, out)
        except Exception as e:  # a plot must not lose the run's numbers
            print(f"  plot {name!r} failed: {e}")
            p = None
        if p:
            plots[name] = p
    return plots
