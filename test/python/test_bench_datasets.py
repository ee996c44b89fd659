"""The real sentence-embedding data set: the corpus cleaning, the numpy
runtime of all-MiniLM-L6-v2 against the reference numbers, and that the
data-set builder is deterministic with queries disjoint from the rows.
Also the presets and the report pieces of the index > shared_buffers mode."""

import subprocess
import sys

import numpy as np
import pytest

from shnsw.bench import __main__ as cli
from shnsw.bench import corpus, datasets, embed, plots, report


@pytest.fixture(scope="module")
def model():
    return embed.model()


@pytest.fixture(scope="module")
def real_lines():
    """The real corpus (two pinned Debian packages), or None when apt-get
    cannot fetch them here (no package lists).  The suite never downloads
    them itself: the test runs the command its error names."""
    cdir = datasets.DATA_DIR / f"corpus-{corpus.CORPUS_VERSION}"
    quiet = lambda *a, **k: None  # noqa: E731
    try:
        return corpus.load(cdir, log=quiet)
    except RuntimeError as e:
        if "apt-get" not in str(e):
            raise
    r = subprocess.run(corpus.fetch_command(corpus.deb_dir(cdir)), shell=True,
                       capture_output=True)
    if r.returncode != 0:
        return None
    return corpus.load(cdir, log=quiet)


def test_embedder_matches_sentence_transformers(model):
    # The similarities sentence-transformers' README prints for all-MiniLM-L6-v2.
    e = model.encode(["The weather is lovely today.", "It's so sunny outside!",
                      "He drove to the stadium."])
    assert e.shape == (3, embed.DIM) and e.dtype == np.float32
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    sim = e @ e.T
    assert sim[0, 1] == pytest.approx(0.6660, abs=2e-3)
    assert sim[0, 2] == pytest.approx(0.1046, abs=2e-3)
    assert sim[1, 2] == pytest.approx(0.1411, abs=2e-3)


def test_embedding_does_not_depend_on_batch(model):
    texts = ["A man is eating food.", "A man is eating a piece of bread.",
             "The ace of clubs in quadrille and omber, with a much longer tail of words "
             "so that the padding differs a lot between the two batches."]
    alone = model.encode(texts[:1])
    together = model.encode(texts)
    assert np.allclose(alone[0], together[0], atol=1e-5)
    assert float(together[0] @ together[1]) == pytest.approx(0.7553, abs=2e-3)


def test_wordpiece():
    tok = embed.model().tokenizer
    assert tok.encode("Hello, world!") == [101, 7592, 1010, 2088, 999, 102]
    assert tok.pre_tokenize(tok.normalize("Café  au-lait\tNAÏVE")) == \
        ["cafe", "au", "-", "lait", "naive"]
    ids = tok.encode(" ".join(["word"] * 300), max_tokens=16)
    assert len(ids) == 16 and ids[0] == 101 and ids[-1] == 102


def test_gcide_and_wordnet_cleaning():
    gcide = (
        "00-database-info\n   This file was converted from the original database.\n\n"
        'Abdication \\Ab`di*ca"tion\\, n. [L. abdicatio: cf. F.\n   abdication.]\n'
        "   The act of abdicating; the renunciation of a high office.\n"
        "   [1913 Webster]\n\n"
        "   2. (Zool.) The posterior section of the body, behind the thorax.\n"
        "      [1913 Webster]\n\n"
        "         Think not that I am come to destroy the law.\n"
        "                                                  --Matt. v. 17.\n\n"
        "   Too short.\n\n"
        "   the act of abdicating; the renunciation of a high office.\n")
    got = list(corpus.gcide_lines(gcide))
    # Headword, pronunciation, etymology, source tag and citation go; the licence
    # preamble, too-short lines and lines opening with a label like "(Zool.)" are
    # left out.
    assert got == ["The act of abdicating; the renunciation of a high office.",
                   "Think not that I am come to destroy the law.",
                   "the act of abdicating; the renunciation of a high office."]
    assert corpus.dedupe(got) == got[:2]          # case-insensitive, first kept
    wn = ("  1 This software and database is being provided\n"
          "00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived "
          'or known or inferred to have its own distinct existence; "a living entity"  \n'
          "00002137 03 n 02 abstraction 0 abstract_entity 0 | a general concept formed; "
          '"the thing is not a real"; "it was a long walk in the rain"\n')
    assert list(corpus.wordnet_lines(wn)) == [
        "That which is perceived or known or inferred to have its own distinct existence.",
        "A general concept formed.", "the thing is not a real",
        "it was a long walk in the rain"]


def _sample_lines(real_lines, n=200):
    if real_lines is not None:
        rng = np.random.default_rng(5)
        return [real_lines[i] for i in sorted(rng.choice(len(real_lines), n, replace=False))]
    words = ["river", "stone", "quiet", "bright", "carries", "under", "music", "old",
             "winter", "harbor", "slowly", "green", "paper", "falls", "light", "road"]
    rng = np.random.default_rng(5)
    return corpus.dedupe(" ".join(rng.choice(words, 7)).capitalize() + "."
                         for _ in range(n + 20))[:n]


def test_sentence_set_is_deterministic_and_held_out(model, real_lines, tmp_path):
    lines = _sample_lines(real_lines)
    assert len(set(s.lower() for s in lines)) == len(lines) == 200
    a = datasets.sentence_split(lines, 150, 30, 20, seed=7, encode=model.encode, chunk=64,
                                log=lambda *x, **k: None)
    b = datasets.sentence_split(lines, 150, 30, 20, seed=7, encode=model.encode, chunk=64,
                                store=tmp_path / "store", log=lambda *x, **k: None)
    rows, queries, inserts, order = a
    assert rows.shape == (150, 384) and queries.shape == (30, 384) and inserts.shape == (20, 384)
    for x, y in zip(a, b):                        # same seed: the same bytes
        assert x.tobytes() == y.tobytes()
    # From the chunk store: a smaller set is a prefix, built from the same chunks.
    c = datasets.sentence_split(lines, 100, 30, 20, seed=7, encode=None, chunk=64,
                                store=tmp_path / "store", log=lambda *x, **k: None)
    assert c[0].tobytes() == rows[:100].tobytes() and c[1].tobytes() == queries.tobytes()
    # Queries and insert rows are other texts than the rows, and other vectors.
    qtext = {lines[i] for i in order[:30]}
    itext = {lines[i] for i in order[30:50]}
    rtext = {lines[i] for i in order[50:]}
    assert len(qtext) == 30 and len(rtext) == 150
    assert not (qtext & rtext) and not (itext & rtext) and not (qtext & itext)
    d = np.abs(queries[:, None, :] - rows[None, :, :]).max(axis=2)
    assert d.min() > 1e-3
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    # Another seed: other rows.
    e = datasets.sentence_split(lines, 150, 30, 20, seed=8, encode=model.encode, chunk=64,
                                log=lambda *x, **k: None)
    assert e[0].tobytes() != rows.tobytes()


def test_real_corpus_is_the_pinned_one(real_lines):
    if real_lines is None:
        pytest.skip("apt-get cannot download the pinned Debian packages here "
                    "(run apt-get update once)")
    assert len(real_lines) == corpus.EXPECTED_LINES
    assert corpus.digest(real_lines) == corpus.EXPECTED_SHA256
    assert len(real_lines) >= 202_000
    assert all(corpus.keep_line(s) for s in real_lines[::997])


def test_presets():
    runs, _ = cli.parse([])
    assert [r["dataset"] for r in runs] == ["synthetic", "sentences"]
    assert all("ltm" in r["modes"] for r in runs)
    assert runs[1]["rows"] == 100_000 and runs[1]["metric"] == "cosine"
    runs, _ = cli.parse(["--dataset", "sentences", "--rows", "5000"])
    assert len(runs) == 1 and runs[0]["dataset"] == "sentences" and runs[0]["rows"] == 5000
    runs, _ = cli.parse(["--preset", "1m"])
    assert runs[0]["rows"] == 1_000_000 and runs[0]["dim"] == 384
    runs, _ = cli.parse(["--preset", "sentences", "--ltm-fractions", "0.1,0.25"])
    assert runs[0]["rows"] == 200_000 and runs[0]["ltm_fractions"] == [0.1, 0.25]


def _fake_result(name):
    eng = {"pgvector hnsw": {"am": "hnsw", "index_bytes": 100 << 20, "build_s": 10.0,
                             "load_s": 1.0, "table_bytes": 50 << 20,
                             "build_peak_bytes": 64 << 20, "build_peak_shmem_bytes": 36 << 20},
           "streamhnsw": {"am": "streamhnsw", "index_bytes": 80 << 20, "build_s": 5.0,
                          "load_s": 1.0, "table_bytes": 50 << 20}}
    hot = [{"engine": e, "ef_search": ef, "recall@10": r, "recall@1": r, "qps": q,
            "p50_ms": 1000 / q, "p95_ms": 1, "p99_ms": 1}
           for e, pts in (("pgvector hnsw", [(20, 0.9, 1000), (40, 0.97, 600)]),
                          ("streamhnsw", [(20, 0.92, 2000), (40, 0.98, 1500)]))
           for ef, r, q in pts]
    ltm = [{"engine": e, "ef_search": 40, "os_cache": c, "fraction_of_reference": f,
            "shared_buffers_bytes": int(f * (100 << 20)), "index_bytes": s,
            "sb_over_index": f * (100 << 20) / s, "queries": 100, "warmup_queries": 10,
            "qps": q * f, "p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0, "reads_per_query": 5.0}
           for e, s, q in (("pgvector hnsw", 100 << 20, 100), ("streamhnsw", 80 << 20, 300))
           for c in ("kept", "dropped") for f in (0.125, 0.25, 0.5)]
    return {"config": dict(cli.BASE, modes=["hot", "ltm"]),
            "dataset": {"name": name, "key": name, "metric": "cosine", "rows": 1000, "dim": 8,
                        "queries": 10, "k_truth": 100},
            "engines": eng, "ef_at_target": {"pgvector hnsw": 40, "streamhnsw": 40},
            "server_settings": {"shared_buffers": "2GB", "maintenance_work_mem": "1GB"},
            "machine": {"cpu": "test", "cpus": 2}, "versions": {}, "notes": [],
            "modes": {"hot": {"points": hot, "queries": 10},
                      "ltm": {"points": ltm, "runs": [], "seconds": 1}}}


def test_ltm_summary_and_combined_report(tmp_path):
    res = [_fake_result("a set"), _fake_result("b set")]
    s = report.summarize(res[0])
    # The headline is the fraction nearest 1/4, per engine and OS cache state.
    assert s["pgvector hnsw"]["ltm_qps_kept"] == pytest.approx(25.0)
    assert s["streamhnsw"]["ltm_qps_dropped"] == pytest.approx(75.0)
    assert s["pgvector hnsw"]["build_mem_mb"] == pytest.approx(100.0)
    assert "build_mem_mb" not in s["streamhnsw"]
    table = report.comparison_table(res[0], s)
    assert "index > shared_buffers (shared_buffers 0.25 x pgvector's index)" in table
    assert "3.00x" in table
    md = report.markdown(res[0], s, {})
    assert "## Index larger than shared_buffers" in md
    pl = plots.make_combined(res, tmp_path)
    assert {p.name for p in pl.values()} == {"recall_qps_by_dataset.png",
                                            "ltm_qps_by_dataset.png"}
    assert all(p.stat().st_size > 10_000 for p in pl.values())
    for r in res:
        r["summary"] = report.summarize(r)
    w = report.write_combined(res, tmp_path, pl, __import__("datetime").datetime.now())
    text = w["markdown"].read_text()
    assert "## a set" in text and "## b set" in text and "ltm_qps_by_dataset.png" in text


def test_standalone_presets():
    # every preset with a runner of its own imports and is dispatched to it
    import importlib

    from shnsw.bench.presets import STANDALONE
    for name, (mod, _) in STANDALONE.items():
        assert callable(importlib.import_module(f"shnsw.bench.{mod}").main), name
    assert cli._standalone(["--preset", "recall", "--sets", "x"]) == "recall"
    assert cli._standalone(["--preset=churn"]) == "churn"
    assert cli._standalone(["--preset", "quick"]) is None
    assert cli._without_preset(["--preset", "recall", "--sets", "x"]) == ["--sets", "x"]


def test_product_does_not_import_benchmark_deps():
    # the product's commands run without FAISS or matplotlib
    code = ("import sys, shnsw.demo, shnsw.demo_citus, shnsw.citus, shnsw.cluster, shnsw.data; "
            "bad = sorted({m.split('.')[0] for m in sys.modules} & {'faiss', 'matplotlib'}); "
            "print(*bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
