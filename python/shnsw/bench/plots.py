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


def _style(eng, engines):
    if eng in STYLE:
        return STYLE[eng]
    others = [e for e in engines if e not in STYLE]
    return OTHER[others.index(eng) % len(OTHER)] if eng in others else OTHER[0]


def _title(res, what):
    ds = res["dataset"]
    return f"{what}\n{ds['name']} ({ds['metric']}), m={res['config']['m']}, " \
           f"ef_construction={res['config']['ef_construction']}"


def recall_qps(res, out: Path):
    hot = res["modes"].get("hot")
    if not hot:
        return None
    engines = list(res["engines"])
    fig, ax = plt.subplots(figsize=(7.5, 5))
    series = {e: [p for p in hot["points"] if p["engine"] == e] for e in engines}
    if res.get("faiss"):
        series["FAISS IndexHNSWFlat"] = res["faiss"]["points"]
    for e, pts in series.items():
        pts = sorted(pts, key=lambda p: p["ef_search"])
        if not pts:
            continue
        ax.plot([p["recall@10"] for p in pts], [p["qps"] for p in pts], label=e,
                **_style(e, engines + ["FAISS IndexHNSWFlat"]))
        for p in pts:
            ax.annotate(str(p["ef_search"]), (p["recall@10"], p["qps"]), fontsize=7,
                        textcoords="offset points", xytext=(3, 3))
    t = res["config"]["target_recall"]
    ax.axvline(t, color="k", linewidth=0.6, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries/s, one client (log)")
    ax.set_title(_title(res, "Hot: recall vs throughput (labels: ef_search)"), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    p = out / "recall_qps_hot.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


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
    fig.tight_layout()
    p = out / "recall_latency.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


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
    fig.tight_layout()
    p = out / "eic_latency.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


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
    fig.tight_layout()
    p = out / "build_size_insert.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def make_all(res, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    plots = {}
    for name, fn in (("recall vs queries/s (hot)", recall_qps),
                     ("recall vs latency", recall_latency),
                     ("latency vs effective_io_concurrency", eic_latency),
                     ("build, size, inserts", build_size)):
        try:
            p = fn(res, out)
        except Exception as e:  # a plot must not lose the run's numbers
            print(f"  plot {name!r} failed: {e}")
            p = None
        if p:
            plots[name] = p
    return plots
