"""docs/performance.md's generator (shnsw.bench.pages), on small reports
written here: no server."""

from pathlib import Path

from shnsw.bench import pages

SUITE = """# streamhnsw benchmark: sentences 1000x8 (cosine)

Run {started} on Test CPU, 2 CPUs. Single run.

- index: m=16, ef_construction=64; k={k}; ef_search swept [100]; target recall@10 0.95
- modes: hot, concurrent; injected delay 300 us per read
- server settings: `jit=off`, `shared_buffers=2048MB`

## Comparison

| figure | pgvector hnsw | streamhnsw | streamhnsw / pgvector | target |
|---|---:|---:|---:|---:|
| hot: queries/s at recall@10 = 0.95, 1 client | {pg} | {sh} | 2.00x | >= 3x missed |
"""

VDB = """# VectorDBBench 2.0.0: pgvector hnsw / streamhnsw

tiny 1000 x 8 cosine, 10 queries.

| case (k = 100) | max q/s (clients) | serial p99 ms | recall@100 | nDCG@100 | load s (insert + build) |
| --- | --- | --- | --- | --- | --- |
| tiny | 10 (2) / 30 (2) | 2.00 / 1.00 | 0.9 / 0.9 | 0.9 / 0.9 | 1.0 (0.5 + 0.5) / 1.0 (0.5 + 0.5) |
"""


def _write(d: Path, stem: str, started: str, k: int, pg: str, sh: str) -> None:
    (d / f"{stem}.md").write_text(SUITE.format(started=started, k=k, pg=pg, sh=sh))


def test_a_run_at_another_limit_gives_no_headline(tmp_path):
    """The latest run gives the headline figure, unless it ran LIMIT 100."""
    _write(tmp_path, "a-k10", "2026-01-01T00:00:00", 10, "100", "300")
    _write(tmp_path, "b-k100", "2026-02-01T00:00:00", 100, "50", "100")
    suites, robust, extra = pages.load(tmp_path)
    assert len(suites) == 2
    (ds, rows), = pages.headlines(suites)
    assert [(r[1], r[2], r[5].stem) for r in rows] == [("100", "300", "a-k10")]
    page = pages.render(suites, robust, tmp_path, extra)
    assert "no headline figure): `k=100`" in page


def test_vectordbbench_summaries_get_a_section(tmp_path):
    (tmp_path / "vdbbench-tiny").mkdir()
    (tmp_path / "vdbbench-tiny" / "summary.md").write_text(VDB)
    suites, robust, extra = pages.load(tmp_path)
    assert [h for h, _ in extra] == ["VectorDBBench"]
    page = pages.render(suites, robust, tmp_path, extra)
    assert "## VectorDBBench" in page and "### tiny" in page
    assert "| tiny | 10 (2) / 30 (2) |" in page
