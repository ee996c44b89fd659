-- NULLs are not indexed; zero vectors are not indexed under cosine (their
-- cosine distance is NaN); an ORDER BY with a NULL query.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

SET enable_seqscan = off;

CREATE TABLE nulls_t (id int, val vector(3));
INSERT INTO nulls_t VALUES
  (1, '[1,1,1]'), (2, '[2,1,2]'), (3, NULL), (4, '[0,0,0]'), (5, '[1,2,4]'),
  (6, NULL), (7, '[-1,0,3]');

-- L2: the zero vector is indexed, NULLs are not
CREATE INDEX nulls_l2 ON nulls_t USING streamhnsw (val vector_l2_ops);
SELECT node_count, deleted_count FROM streamhnsw_metapage('nulls_l2');
SELECT id, val <-> '[0,0,1]' AS distance FROM nulls_t ORDER BY val <-> '[0,0,1]' LIMIT 10;
-- a NULL inserted after the build is not indexed either
INSERT INTO nulls_t VALUES (8, NULL), (9, '[0,0,1]');
SELECT node_count FROM streamhnsw_metapage('nulls_l2');
SELECT id FROM nulls_t ORDER BY val <-> '[0,0,1]' LIMIT 10;
-- a NULL query: every distance is NULL, so any order of the indexed rows is
-- right; NULL rows are still not returned (a constant NULL is folded by the
-- planner, so the query comes from a subquery)
EXPLAIN (COSTS OFF)
SELECT id FROM nulls_t ORDER BY val <-> (SELECT NULL::vector) LIMIT 10;
SELECT id, val <-> (SELECT NULL::vector) AS distance
  FROM nulls_t ORDER BY val <-> (SELECT NULL::vector), id LIMIT 10;
SELECT count(*) FROM (SELECT id FROM nulls_t ORDER BY val <-> (SELECT NULL::vector) LIMIT 10) s;
SELECT array_agg(id ORDER BY id) AS ids
  FROM (SELECT id FROM nulls_t ORDER BY val <-> (SELECT NULL::vector) LIMIT 10) s;
-- a literal NULL is folded: the ORDER BY disappears, no index is used and
-- rows with NULL vectors come back too
EXPLAIN (COSTS OFF)
SELECT id FROM nulls_t ORDER BY val <-> NULL LIMIT 10;
SELECT array_agg(id ORDER BY id) AS ids
  FROM (SELECT id FROM nulls_t ORDER BY val <-> NULL LIMIT 10) s;
SELECT streamhnsw_verify('nulls_l2');
DROP INDEX nulls_l2;

-- cosine: neither NULLs nor the zero vector are indexed
CREATE INDEX nulls_cos ON nulls_t USING streamhnsw (val vector_cosine_ops);
SELECT node_count FROM streamhnsw_metapage('nulls_cos');
SELECT id, val <=> '[1,1,2]' AS distance FROM nulls_t ORDER BY val <=> '[1,1,2]' LIMIT 10;
-- a zero vector inserted after the build is not indexed either
INSERT INTO nulls_t VALUES (10, '[0,0,0]'), (11, '[3,2,3]');
SELECT node_count FROM streamhnsw_metapage('nulls_cos');
SELECT id, val <=> '[1,1,2]' AS distance FROM nulls_t ORDER BY val <=> '[1,1,2]' LIMIT 10;
-- a sequential scan shows what the index leaves out: NULLs and the NaN
-- distances of zero vectors (which sort last)
SET enable_seqscan = on;
SET enable_indexscan = off;
SELECT id, val <=> '[1,1,2]' AS distance FROM nulls_t ORDER BY val <=> '[1,1,2]', id LIMIT 20;
RESET enable_indexscan;
SET enable_seqscan = off;
-- a zero query under cosine: every distance is NaN; the scan returns the
-- indexed rows without error
SELECT count(*) FROM (SELECT id FROM nulls_t ORDER BY val <=> '[0,0,0]' LIMIT 20) s;
SELECT DISTINCT val <=> '[0,0,0]' AS distance
  FROM (SELECT val FROM nulls_t ORDER BY val <=> '[0,0,0]' LIMIT 20) s;
SELECT count(*) FROM (SELECT id FROM nulls_t ORDER BY val <=> (SELECT NULL::vector) LIMIT 20) s;
SELECT streamhnsw_verify('nulls_cos');
DROP INDEX nulls_cos;

-- halfvec under cosine: the same
CREATE TABLE nulls_h (id int, val halfvec(2));
INSERT INTO nulls_h VALUES (1, '[1,0]'), (2, '[0,0]'), (3, NULL), (4, '[0,2]'), (5, '[1,1]');
CREATE INDEX nulls_h_cos ON nulls_h USING streamhnsw (val halfvec_cosine_ops);
SELECT node_count FROM streamhnsw_metapage('nulls_h_cos');
SELECT id, val <=> '[1,0]' AS distance FROM nulls_h ORDER BY val <=> '[1,0]' LIMIT 10;

-- a table of NULLs only: an empty index, scans return nothing
CREATE TABLE nulls_only (id int, val vector(2));
INSERT INTO nulls_only SELECT i, NULL FROM generate_series(1, 5) i;
CREATE INDEX nulls_only_idx ON nulls_only USING streamhnsw (val);
SELECT node_count, quantizer_trained FROM streamhnsw_metapage('nulls_only_idx');
SELECT id FROM nulls_only ORDER BY val <-> '[1,1]' LIMIT 5;
SELECT id FROM nulls_only ORDER BY val <-> (SELECT NULL::vector) LIMIT 5;
SELECT streamhnsw_verify('nulls_only_idx');

RESET enable_seqscan;
DROP TABLE nulls_t, nulls_h, nulls_only;
