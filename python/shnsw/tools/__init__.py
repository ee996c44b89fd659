"""What a maintainer runs by hand: `python -m shnsw.tools.NAME`.

  graphdump            read an index's graph straight from its relation file
  graph_recall         recall of an index's graph on exact distances beside its scan
  insert_findability   rows that concurrent inserts leave unfindable
  stress               crash cycles and the concurrent workload, for as long as asked

Benchmarks (comparisons with pgvector) are not here but in shnsw.bench.
"""

# stress and insert_findability drive the durability model of the test
# harness (test/harness), which is not part of the installed package.
HARNESS_MISSING = ("this tool uses the test harness (test/harness/durability.py): run it "
                   "from the source tree with test/ on the path, e.g. "
                   "PYTHONPATH=python:test .venv/bin/python -m shnsw.tools.NAME")
