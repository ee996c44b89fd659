# VectorDBBench targets; for the top-level Makefile: `-include vdbbench/vdbbench.mk`.
#
#   make venv-vdb        the separate environment .venv-vdb (requirements-vdbbench.txt:
#                        vectordb-bench 2.0.0 and its dependencies, about 1.3 GB)
#   make test-vdbbench   test/python/test_vdbbench.py in that environment
#
# make test runs test_vdbbench.py too: in .venv it hands the test to .venv-vdb
# where that exists, and is skipped with the reason where it does not.

VDB_VENV ?= .venv-vdb
# not $(PYTHON): PGXS, included for these goals, sets that to its configure-time python
VDB_BASE_PYTHON ?= python3

.PHONY: venv-vdb test-vdbbench

$(VDB_VENV)/.stamp: requirements-vdbbench.txt
	$(VDB_BASE_PYTHON) -m venv $(VDB_VENV)
	$(VDB_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-vdbbench.txt
	touch $@

venv-vdb: $(VDB_VENV)/.stamp

test-vdbbench: venv venv-vdb
	$(MAKE) DEV=1 install
	PYTHONPATH=python:vdbbench $(VDB_VENV)/bin/python -m pytest -q -rs test/python/test_vdbbench.py
