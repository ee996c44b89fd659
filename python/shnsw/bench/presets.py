"""The suite's presets: the base configuration every run starts from, and
the named presets (`python -m shnsw.bench --preset NAME`) that override it.
Kept apart from the command line so that the demo can start from BASE
without importing the plotting and report code."""

from __future__ import annotations

ALL_MODES = ["faiss", "hot", "pgbench-hot", "fresh", "concurrent", "mixed", "cold", "latency",
             "eic", "workers", "ltm", "insert", "beside-inserts"]

BASE = dict(
    dataset="synthetic", rows=100_000, dim=128, metric="cosine", type="vector", seed=42,
    queries=1000, k=10, m=16, ef_construction=64, target_recall=0.95,
    ef_search=[10, 16, 24, 32, 40, 48, 64, 96, 128, 200],
    hot_queries=500, hot_passes=3, warmup=20, explain_sample=20, recall100_queries=100,
    cold_queries=50, cold_explain_sample=10, cold_extra_above=2, latency_extra_above=0,
    latency_queries=20, delay_us=300,
    eic=[0, 1, 2, 4, 8, 16, 32, 64], eic_queries=12, eic_explain_sample=3,
    io_workers=[3, 8, 16],
    fresh_queries=100, clients=[2], seconds=10,
    mixed_seconds=15, pgbench_clients=2, mixed_vector_clients=2, pgbench_scale=5,
    insert_rows=1000, insert_rate=100, modes=list(ALL_MODES), ams=["hnsw", "streamhnsw"],
    io_modes=None, streamhnsw_gucs={}, pgvector_gucs={}, settings={},
    # index larger than shared_buffers (mode ltm)
    ltm_fractions=[0.25], ltm_os_cache=["kept", "dropped"], ltm_seconds=8,
    ltm_queries=3000, ltm_warmup_queries=200, ltm_warmup_seconds=3, ltm_query_pool=1000,
)

# The real data set's defaults (held-out queries: 2,000 sentences).
SENTENCES = dict(dataset="sentences", dim=384, queries=2000)

# A preset may list several data sets ("datasets"): each runs on its own
# server, one after the other, with the preset's settings plus its own.
PRESETS = {
    "default": dict(datasets=[dict(dataset="synthetic"),
                              dict(SENTENCES, rows=100_000, ltm_fractions=[0.125, 0.25, 0.5])]),
    "sentences": dict(SENTENCES, rows=200_000, ltm_fractions=[0.125, 0.25, 0.5],
                      ef_search=[10, 16, 24, 32, 40, 48, 64, 96, 128, 200, 300]),
    "quick": dict(rows=10_000, dim=64, queries=400, hot_queries=300,
                  ef_search=[10, 20, 40, 80, 160], explain_sample=5, recall100_queries=30,
                  cold_queries=20, cold_explain_sample=3, latency_queries=8,
                  eic=[0, 1, 4, 16], eic_queries=5, eic_explain_sample=2,
                  fresh_queries=30, seconds=3, mixed_seconds=5, pgbench_scale=1,
                  insert_rows=200, settings={"shared_buffers": "512MB"},
                  ltm_seconds=2, ltm_warmup_queries=50, ltm_warmup_seconds=1),
    # The real set, small: a smoke run of every mode on sentence embeddings.
    "quick-sentences": dict(SENTENCES, rows=10_000, queries=400, hot_queries=300,
                            ef_search=[10, 20, 40, 80, 160], explain_sample=5,
                            recall100_queries=30, cold_queries=20, cold_explain_sample=3,
                            latency_queries=8, eic=[0, 1, 4, 16], eic_queries=5,
                            eic_explain_sample=2, fresh_queries=30, seconds=3,
                            mixed_seconds=5, pgbench_scale=1, insert_rows=200,
                            settings={"shared_buffers": "512MB"}, ltm_seconds=2,
                            ltm_warmup_queries=50, ltm_warmup_seconds=1),
    "glove": dict(dataset="glove", metric="cosine", queries=1000,
                  ef_search=[10, 16, 24, 32, 40, 64, 96, 128, 200, 300, 400]),
    "large": dict(rows=1_000_000, dim=128, hot_queries=1000,
                  ef_search=[10, 16, 24, 32, 40, 64, 96, 128, 200, 300],
                  latency_queries=30, eic_queries=20, seconds=30, mixed_seconds=60,
                  settings={"shared_buffers": "4GB", "maintenance_work_mem": "2GB"}),
    # 1M rows at the dimension of real sentence embeddings (the corpus has
    # 332k distinct lines, so synthetic clustered data): build time, index
    # size and build memory, hot, cold, cold + latency, index > shared_buffers.
    # About 30-60 min on 2 cores (estimated from the 100k runs), most of it the builds.
    "1m": dict(rows=1_000_000, dim=384, hot_queries=300, queries=1000,
               modes=["hot", "fresh", "cold", "latency", "ltm"],
               ef_search=[16, 24, 32, 40, 64, 96, 128, 200],
               cold_queries=30, latency_queries=15, ltm_fractions=[0.25], ltm_seconds=10,
               settings={"shared_buffers": "6GB", "maintenance_work_mem": "4GB"}),
    # 1M x 768 (cosine, m 16, ef_construction 64), both engines built with the
    # same maintenance_work_mem (both graphs fit) and 2 parallel workers:
    # build time, size and memory, hot q/s at recall 0.95 and 0.99, a client
    # sweep to each engine's peak, a new connection's first query, cold reads.
    # About an hour on 2 cores.
    "1m-768": dict(rows=1_000_000, dim=768, hot_queries=300, queries=1000,
                   modes=["hot", "fresh", "concurrent", "cold"],
                   ef_search=[16, 24, 32, 40, 64, 96, 128, 200, 300, 400],
                   clients=[1, 2, 4, 8, 16], seconds=10, cold_queries=30,
                   settings={"shared_buffers": "10GB", "maintenance_work_mem": "6GB",
                             "max_parallel_maintenance_workers": 2}),
}

# Presets that are measurements of their own, each with its own runner and
# options (`--preset NAME --help`): preset name -> (module, what it measures).
STANDALONE = {
    "restart": ("restart", "a restart with both libraries preloaded: first query, warm-up, p50 after"),
    "growth": ("growth", "an index built small and grown by inserts, beside one built fresh"),
    "citus": ("citus_mode", "both engines on a local Citus cluster beside one node"),
    "vdbbench": ("vdbbench", "VectorDBBench's performance and filtered cases, both clients"),
    "robustness": ("robustness", "data shapes users store, both engines at default settings"),
    "types": ("vector_types", "bit (binary-quantized sentences, re-ranked) and sparsevec, "
              "both engines: build, size, recall, hot and cold"),
    "writes": ("writes", "inserts, deletes, VACUUM and space reuse"),
    "recall": ("recall", "recall@10 beside pgvector on pgvector's own scenarios and more sets"),
    "range": ("ranges", "distance filters and similarity thresholds"),
    "filter": ("filters", "filtered queries beside pgvector's iterative scans"),
    "order": ("order", "strict and relaxed order: rows returned, missed, time"),
    "churn": ("churn", "index size and recall under delete + insert churn"),
    "build-memory": ("build_memory", "CREATE INDEX time, memory and recall by maintenance_work_mem"),
    "build-parallel": ("build_parallel", "CREATE INDEX with and without parallel workers"),
    "vacuum-memory": ("vacuum_memory", "a VACUUM's peak private memory"),
}
