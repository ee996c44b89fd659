"""The streamhnsw benchmark suite: pgvector hnsw vs streamhnsw vs FAISS.

Run with ``python -m shnsw.bench`` (or ``make bench``); see bench/README.md.
"""
