"""docs/performance.md from the benchmark suite's reports in bench/reports/.

    python -m shnsw.bench.pages [--reports bench/reports] [--out docs/performance.md]

Each report is one run of the suite (`python -m shnsw.bench ...`), pgvector's
hnsw and streamhnsw side by side on one server. A report is read from its
JSON file when there is one (rendered by the suite's own report code) and
from its Markdown report otherwise. The page keeps each run's settings next
to its figures, as the reports do, and never puts figures of two runs in
one comparison: the headline table takes each figure, ratio included, from
the latest run that measured it, and says which run that was.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# Server settings every suite run writes; a run with any other one set
# (huge_pages, ...) measured a tuned server and gives no headline figure.
STANDARD_SETTINGS = {
    "autovacuum", "block_size", "checkpoint_timeout", "effective_io_concurrency",
    "io_combine_limit", "io_method", "io_workers", "jit", "maintenance_work_mem",
    "max_connections", "max_parallel_maintenance_workers", "max_wal_size",
    "max_worker_processes", "server_version", "shared_buffers", "track_io_timing",
    "work_mem",
}

# Headline figures, in this order: a prefix of the comparison table's label.
HEADLINES = [
    "recall@10 at ef_search 40",
    "hot: queries/s at recall@10",
    "hot: p50 ms at recall@10",
    "concurrent: peak queries/s",
    "concurrent: queries/s",        # reports before the peak over a client sweep
    "cold (local disk): p50 ms",
    "cold + ",
    "index > shared_buffers",
    "fresh connection: (fresh - warm) - (PK lookup fresh - warm)",
    "mixed: ",
    "single-row inserts/s",
    "index size MB",
    "build time s",
]
SKIP_HEADLINE = ("buffers read per query", "storage reads per query", "p99 ms")

# Sections of a suite report not carried over (the page has no plots).
SKIP_SECTIONS = {"Plots"}


@dataclass
class Report:
    stem: str
    title: str                  # "sentences 100000x384 (cosine)"
    run: str                    # the report's "Run ... on ..." sentence
    started: str                # ISO timestamp, for "latest"
    bullets: list               # settings, as the report states them
    comparison: list            # [label, pgvector, streamhnsw, ratio, target]
    sections: list = field(default_factory=list)    # [(title, markdown body)]
    source: str = ""
    tuned: list = field(default_factory=list)       # non-standard server settings

    @property
    def anchor(self) -> str:
        return "run-" + re.sub(r"[^a-z0-9]+", "-", self.stem.lower()).strip("-")

    @property
    def modes(self) -> str:
        for b in self.bullets:
            if b.startswith("modes: "):
                return b[len("modes: "):].split(";")[0]
        return ""


def _cells(line: str) -> list:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_suite_markdown(stem: str, text: str, source: str) -> Report:
    """A suite report (python -m shnsw.bench) as written to report.md."""
    lines = text.splitlines()
    title = lines[0].removeprefix("# streamhnsw benchmark:").strip()
    run = next((l for l in lines if l.startswith("Run ")), "")
    m = re.match(r"Run (\S+) on (.*?)\. ", run)
    started = m.group(1) if m else ""
    run_text = f"Run {m.group(1)} on {m.group(2)}." if m else run
    bullets, sections, cur, body = [], [], None, []
    for line in lines[1:]:
        if line.startswith("## "):
            if cur is not None:
                sections.append((cur, "\n".join(body).strip()))
            cur, body = line[3:].strip(), []
        elif cur is None:
            if line.startswith("- "):
                bullets.append(line[2:])
        else:
            body.append(line)
    if cur is not None:
        sections.append((cur, "\n".join(body).strip()))
    comparison = []
    for name, sbody in sections:
        if name == "Comparison":
            rows = [l for l in sbody.splitlines() if l.startswith("|")]
            comparison = [_cells(l) for l in rows[2:]]
    tuned = []
    for b in bullets:
        # LIMIT k other than the suite's 10 measures another query: no headline
        limit = re.search(r"\bk=(\d+)", b) if b.startswith("index: ") else None
        if limit and limit.group(1) != "10":
            tuned.append(f"k={limit.group(1)}")
        if b.startswith("server settings: "):
            for k, v in re.findall(r"`([a-z_]+)=([^`]*)`", b):
                if k not in STANDARD_SETTINGS:
                    tuned.append(f"{k}={v}")
    rest = [(n, b) for n, b in sections if n not in SKIP_SECTIONS and n != "Comparison"]
    return Report(stem, title, run_text, started, bullets, comparison, rest, source, tuned)


def suite_report_from_json(stem: str, res: dict, source: str) -> Report:
    """A suite results.json, rendered by the suite's own report code."""
    from . import report
    text = report.markdown(res, report.summarize(res), {})
    return parse_suite_markdown(stem, text, source)


def _f(v, fmt="{:.2f}"):
    if v is None:
        return "–"
    return fmt.format(v)


def robustness_section(res: dict, source: str) -> tuple:
    """The robustness matrix's results.json as one side-by-side table."""
    cfg = res["config"]
    target = cfg["target_recall"]
    head = ["shape (metric, type, rows)", "recall@10 at ef_search 40",
            f"ef_search for recall {target}", "server time p50 ms, ef 40",
            "p99 ms, ef 40", f"p50 ms at recall {target}",
            "streamhnsw worst / median nodes", "streamhnsw max rounds, queries swept"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res["shapes"]:
        pg = r["engines"].get("pgvector hnsw", {})
        sh = r["engines"].get("streamhnsw", {})

        def pair(key, fmt="{:.2f}", at="at_ef40"):
            return (f"{_f(pg.get(at, {}).get(key), fmt)} / "
                    f"{_f(sh.get(at, {}).get(key), fmt)}")

        def at_target(e):
            ef = e.get("ef_for_target")
            return _f(e.get(f"at_ef{ef}", {}).get("time_p50_ms")) if ef else "–"

        s40 = sh.get("at_ef40", {})
        rows.append("| " + " | ".join([
            f"{r['shape']} ({r['metric']}, {r['type']}({r['dim']}), {r['rows']:,})",
            f"{_f(pg.get('recall', {}).get('40'), '{:.3f}')} / "
            f"{_f(sh.get('recall', {}).get('40'), '{:.3f}')}",
            f"{pg.get('ef_for_target') or 'not reached'} / "
            f"{sh.get('ef_for_target') or 'not reached'}",
            pair("time_p50_ms"), pair("time_p99_ms"),
            f"{at_target(pg)} / {at_target(sh)}",
            _f(s40.get("work_max_over_median"), "{:.1f}"),
            f"{s40.get('rounds_max', '–')}, {s40.get('swept_queries', '–')}",
        ]) + " |")
    settings = ", ".join(f"`{k}={v}`" for k, v in sorted(res["server_settings"].items()))
    v = res.get("versions", {})
    mach = res.get("machine", {})
    intro = [
        f"Run {res['started']} on {mach.get('cpu', '?')}, {mach.get('cpus')} CPUs "
        f"(`python -m shnsw.bench --preset robustness`; source `{source}`).",
        "",
        f"- PostgreSQL {v.get('server')}, pgvector {v.get('vector')}, streamhnsw "
        f"{v.get('streamhnsw')}",
        f"- per shape: the same rows in two tables, m={cfg['m']}, "
        f"ef_construction={cfg['ef_construction']}, {cfg['queries']} held-out queries, "
        f"LIMIT 10, ef_search swept {cfg['ef_search']}, warm; server time is EXPLAIN "
        "ANALYZE's Execution Time; recall@10 counts ties",
        f"- server settings: {settings}",
        "",
        "Each cell: pgvector hnsw / streamhnsw. Nodes: the nodes streamhnsw's worst "
        "query examined over the median query's; rounds and sweeps: a query that needed "
        "more than one search or read the whole index would show here.",
        "",
    ]
    return "\n".join(intro + rows)


def _rel(p: Path) -> Path:
    return p.relative_to(ROOT) if p.is_relative_to(ROOT) else p


# the standalone presets whose reports get a section: file prefix, heading
STANDALONE = (("citus-", "Scaling out: Citus"), ("growth-", "An index grown by inserts"),
              ("restart-", "A restart"), ("types-", "bit and sparsevec"))


def standalone_section(md: Path) -> str:
    """A standalone preset's report (python -m shnsw.bench --preset NAME) as
    written, under its source."""
    body = md.read_text().split("\n", 1)[1].strip()
    # its sections go under the page's heading of the report
    body = re.sub(r"^(#+) ", r"#\1 ", body, flags=re.M)
    more = ("; the projection to larger clusters: [bench/scaling.md](../bench/scaling.md)"
            if md.name.startswith("citus-") else "")
    return f"Source `{_rel(md)}`{more}.\n\n{body}"


def vdbbench_section(reports: Path) -> str | None:
    """VectorDBBench's runs (python -m shnsw.bench --preset vdbbench): each
    set's summary.md as written, under its source; None if there is none."""
    parts = []
    for md in sorted(reports.glob("vdbbench-*/summary.md")):
        body = md.read_text().split("\n", 1)[1].strip()
        parts.append(f"### {md.parent.name.removeprefix('vdbbench-')}\n\n"
                     f"Source `{_rel(md.parent)}/` (VectorDBBench's own result files in "
                     f"`results/`).\n\n{body}")
    if not parts:
        return None
    return ("VectorDBBench's performance case (k = 100, serial recall, nDCG and p99, "
            "then a sweep of client counts, each engine's peak q/s) and, where a run has it, "
            "its cold-latency case, pgvector's client and streamhnsw's "
            "([vdbbench/README.md](../vdbbench/README.md)) on one server per run.\n\n"
            + "\n\n".join(parts))


def load(reports: Path) -> tuple:
    """(suite reports, robustness page sections, standalone sections as
    (heading, text)) from a reports directory."""
    suites, robust, extra = [], [], []
    stems = sorted({p.stem for p in reports.glob("*.json")} |
                   {p.stem for p in reports.glob("*.md")})
    for stem in stems:
        js, md = reports / f"{stem}.json", reports / f"{stem}.md"
        if js.exists():
            res = json.loads(js.read_text())
            if "shapes" in res:
                robust.append(robustness_section(res, _rel(js)))
                continue
            heading = next((h for pre, h in STANDALONE if stem.startswith(pre)), None)
            if heading is not None and md.exists():
                extra.append((heading, standalone_section(md)))
                continue
            if "modes" in res and "engines" in res:
                suites.append(suite_report_from_json(stem, res, str(_rel(js))))
                continue
        if md.exists():
            text = md.read_text()
            if text.startswith("# streamhnsw benchmark:"):
                suites.append(parse_suite_markdown(stem, text, str(_rel(md))))
    vdb = vdbbench_section(reports)
    if vdb is not None:
        extra.append(("VectorDBBench", vdb))
    return suites, robust, extra


def dataset_key(r: Report) -> str:
    return r.title


def headlines(suites: list) -> list:
    """Per data set, each headline figure from the latest default-settings run with it."""
    out = []
    for ds in sorted({dataset_key(r) for r in suites}, key=_dataset_order):
        runs = sorted((r for r in suites if dataset_key(r) == ds and not r.tuned),
                      key=lambda r: r.started, reverse=True)
        rows = []
        for prefix in HEADLINES:
            seen = set()
            for r in runs:
                for row in r.comparison:
                    label = row[0]
                    if (not label.startswith(prefix) or label in seen
                            or any(s in label for s in SKIP_HEADLINE)):
                        continue
                    if len(row) < 5 or (row[1] == "–" and row[2] == "–"):
                        continue
                    seen.add(label)
                    rows.append((label, row[1], row[2], row[3], row[4], r))
        if rows:
            out.append((ds, rows))
    return out


def _dataset_order(title: str):
    order = ["sentences", "synthetic", "glove"]
    low = title.lower()
    return next((i for i, k in enumerate(order) if low.startswith(k)), len(order)), title


def render(suites: list, robust: list, reports: Path, extra: list = ()) -> str:
    rel = _rel(reports)
    md = [
        "# Performance",
        "",
        "<!-- Generated by `PYTHONPATH=python python -m shnsw.bench.pages` from "
        f"{rel}/; do not edit by hand. -->",
        "",
        "streamhnsw beside pgvector 0.8.6's `hnsw`, measured by the project's benchmark "
        "suite (`make bench`, `python -m shnsw.bench`; protocol and modes in "
        "[bench/README.md](../bench/README.md)). Every figure comes from one run on one "
        "server, both engines on identical tables with the same `m` and "
        "`ef_construction`, `ef_search` swept on both and compared at equal recall@10 "
        "(interpolated along each engine's sweep). The machine is a shared 2-vCPU "
        "virtual machine: compare ratios within a run, not absolute times across runs. "
        "Each run's server settings and data set are listed with its figures below.",
        "",
        "How to read the figures: *hot* is everything prewarmed; *cold* evicts the "
        "index and table from shared buffers and the OS cache before every query, and "
        "*cold + N us* also delays every storage read by N µs (cloud block storage: "
        "300); *fresh connection* is a new connection's first query net of what a "
        "primary-key lookup's first query costs, over a warm query's time; *index > "
        "shared_buffers* gives the server a quarter of pgvector's index size as "
        "shared_buffers. streamhnsw's hot and larger-than-memory figures include its "
        "shared cache (the README's \"The shared cache\").",
        "",
        "## Headline figures",
        "",
        "Per data set, each figure from the latest run that measured it at the suite's "
        "standard server settings (the run is linked; its ratio is within that run).",
        "",
    ]
    for ds, rows in headlines(suites):
        md += [f"### {ds}", "",
               "| figure | pgvector hnsw | streamhnsw | streamhnsw / pgvector | target | run |",
               "|---|---:|---:|---:|---|---|"]
        for label, pg, sh, ratio, target, r in rows:
            md.append(f"| {label} | {pg} | {sh} | {ratio} | {target} | "
                      f"[{r.modes or r.stem}](#{r.anchor}) |")
        md.append("")
    if robust:
        md += ["## On any data: the robustness matrix", "",
               "One data set per shape users store (zero and constant dimensions, "
               "outliers, duplicates, extreme norms, inner product, 0/1 and sparse rows, "
               "3 to 4,000 dimensions, halfvec, real sentence embeddings).", ""]
        for sec in robust:
            md += [sec, ""]
    for heading, sec in extra:
        md += [f"## {heading}", "", sec, ""]
    md += ["## Runs", "",
           "Each run as its report gives it: settings, the comparison at equal recall, "
           "and the per-mode tables (folded).", ""]
    for r in sorted(suites, key=lambda r: (_dataset_order(r.title), r.started)):
        md += [f'<a id="{r.anchor}"></a>', "",
               f"### {r.title}: {r.modes}", "",
               f"{r.run} Source: `{r.source}`.", ""]
        md += [f"- {b}" for b in r.bullets]
        if r.tuned:
            md.append(f"- beyond the suite's standard settings and LIMIT 10 (no headline figure): "
                      f"{', '.join(f'`{t}`' for t in r.tuned)}")
        md += ["",
               "| figure | pgvector hnsw | streamhnsw | streamhnsw / pgvector | target |",
               "|---|---:|---:|---:|---:|"]
        md += ["| " + " | ".join(row) + " |" for row in r.comparison]
        md.append("")
        for name, body in r.sections:
            md += ["<details>", f"<summary>{name}</summary>", "", body, "", "</details>", ""]
    return "\n".join(md).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shnsw.bench.pages", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=Path, default=ROOT / "bench" / "reports")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "performance.md")
    args = ap.parse_args(argv)
    reports = args.reports.resolve()
    suites, robust, extra = load(reports)
    if not suites and not robust:
        print(f"no suite reports in {reports}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(suites, robust, reports, extra))
    print(f"{args.out}: {len(suites)} suite runs, {len(robust)} robustness matrix")
    return 0


if __name__ == "__main__":
    sys.exit(main())
