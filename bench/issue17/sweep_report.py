"""Markdown table and plot of a devloop.py eic sweep (its --out JSON).

    python bench/issue17/sweep_report.py results/eic_x.json out.png [engine]
"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(path, png, eng="streamhnsw2"):
    d = json.load(open(path))
    print("| eic | pgvector p50 ms | streamhnsw p50 ms | speedup | EXPLAIN waits+sync "
          "| serial | serial by phase (descent/search/re-rank/other) | sync % of reads | reads |")
    print("|---|---|---|---|---|---|---|---|---|")
    for line in d:
        io = line[eng].get("io", {})
        pgv, sh = line["pgvector"]["p50_ms"], line[eng]["p50_ms"]
        sync = 100 * io["Synchronous Reads"] / max(io["Pages Read"], 1)
        print(f"| {line['eic']} | {pgv:.0f} | {sh:.1f} | {pgv / sh:.1f}x | "
              f"{io['round_trips']:.0f} | {io.get('Serial Round Trips', float('nan')):.0f} | "
              + "/".join(f"{io.get('Serial ' + p, float('nan')):.1f}"
                         for p in ("Descent", "Search", "Re-rank", "Other"))
              + f" | {sync:.1f} % | {io['Pages Read']:.0f} |")
    eics = [max(line["eic"], 0.5) for line in d]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(eics, [line["pgvector"]["p50_ms"] for line in d], "o-", label="pgvector hnsw")
    ax.plot(eics, [line[eng]["p50_ms"] for line in d], "s-", label="streamhnsw")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("effective_io_concurrency (0 plotted at 0.5)")
    ax.set_ylabel("cold p50 latency, ms (300 us per read)")
    ax.set_title(path.rsplit("/", 1)[-1].replace(".json", ""))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    main(*sys.argv[1:])
