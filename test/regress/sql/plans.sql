-- Plan choice with enable_seqscan on: the planner uses a streamhnsw index
-- for ORDER BY col <op> value LIMIT k, and not without an ORDER BY on the
-- indexed column or without a LIMIT. 3000 rows of 8 dimensions, ANALYZEd.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

CREATE TABLE plan_t (id int PRIMARY KEY, cat int, val vector(8), hval halfvec(8));
INSERT INTO plan_t
  SELECT i, i % 100, v, v::halfvec
  FROM generate_series(1, 3000) i,
       LATERAL (SELECT ARRAY[(i * 7) % 101, (i * 13) % 103, (i * 17) % 107, (i * 19) % 109,
                             (i * 23) % 113, (i * 29) % 127, (i * 31) % 131, (i * 37) % 137]::vector AS v) x;
CREATE INDEX plan_l2 ON plan_t USING streamhnsw (val vector_l2_ops);
CREATE INDEX plan_h_cos ON plan_t USING streamhnsw (hval halfvec_cosine_ops);
ANALYZE plan_t;
SHOW enable_seqscan;

-- ORDER BY ... LIMIT uses the index
EXPLAIN (COSTS OFF)
SELECT id FROM plan_t ORDER BY val <-> '[50,50,50,50,50,50,50,50]' LIMIT 10;
EXPLAIN (COSTS OFF)
SELECT id FROM plan_t ORDER BY hval <=> '[1,2,3,4,5,6,7,8]' LIMIT 10;
-- also with the query as a parameter of a generic plan
PREPARE plan_q(vector) AS SELECT id FROM plan_t ORDER BY val <-> $1 LIMIT 10;
SET plan_cache_mode = force_generic_plan;
EXPLAIN (COSTS OFF) EXECUTE plan_q('[50,50,50,50,50,50,50,50]');
RESET plan_cache_mode;
DEALLOCATE plan_q;
-- and the rows come back in exact distance order (the set itself is
-- approximate, so only its size and order are checked)
SELECT count(*) AS n, bool_and(d >= prev) AS ordered
  FROM (SELECT d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT val <-> '[50,50,50,50,50,50,50,50]' AS d, row_number() OVER () AS ord
                  FROM (SELECT val FROM plan_t
                         ORDER BY val <-> '[50,50,50,50,50,50,50,50]' LIMIT 10) s1) s2) s3;

-- no ORDER BY: the index is not used
EXPLAIN (COSTS OFF)
SELECT id FROM plan_t LIMIT 10;
EXPLAIN (COSTS OFF)
SELECT count(*) FROM plan_t;
EXPLAIN (COSTS OFF)
SELECT id FROM plan_t WHERE val <-> '[50,50,50,50,50,50,50,50]' < 30;
-- ORDER BY without LIMIT: exact sort of a sequential scan
EXPLAIN (COSTS OFF)
SELECT id FROM plan_t ORDER BY val <-> '[50,50,50,50,50,50,50,50]';
-- ORDER BY something the index cannot produce
EXPLAIN (COSTS OFF)
SELECT id FROM plan_t ORDER BY val <-> '[50,50,50,50,50,50,50,50]' DESC LIMIT 10;
EXPLAIN (COSTS OFF)
SELECT id FROM plan_t ORDER BY val <#> '[50,50,50,50,50,50,50,50]' LIMIT 10;
EXPLAIN (COSTS OFF)
SELECT id FROM plan_t ORDER BY l2_distance(val, '[50,50,50,50,50,50,50,50]') LIMIT 10;
EXPLAIN (COSTS OFF)
SELECT id FROM plan_t ORDER BY hval <-> '[1,2,3,4,5,6,7,8]' LIMIT 10;

-- without the index the same query sorts a sequential scan
DROP INDEX plan_l2;
EXPLAIN (COSTS OFF)
SELECT id FROM plan_t ORDER BY val <-> '[50,50,50,50,50,50,50,50]' LIMIT 10;

-- enable_seqscan = off must not push the index onto queries it cannot
-- serve (a scan without ORDER BY is an error): these still return rows
SET enable_seqscan = off;
SELECT count(*) FROM plan_t;
CREATE INDEX plan_part ON plan_t USING streamhnsw (val) WHERE cat = 1;
SELECT count(*) FROM plan_t WHERE cat = 1;
SELECT id FROM plan_t WHERE cat = 1 ORDER BY id LIMIT 3;
-- while ORDER BY ... LIMIT on the partial index's rows uses it
EXPLAIN (COSTS OFF)
SELECT id FROM plan_t WHERE cat = 1 ORDER BY val <-> '[50,50,50,50,50,50,50,50]' LIMIT 10;
-- a table whose only index is a streamhnsw one
CREATE TABLE plan_only (val vector(2));
INSERT INTO plan_only VALUES ('[1,1]'), ('[2,2]'), (NULL);
CREATE INDEX plan_only_idx ON plan_only USING streamhnsw (val);
SELECT count(*) FROM plan_only;
SELECT count(*) FROM plan_only WHERE val IS NOT NULL;
RESET enable_seqscan;

DROP TABLE plan_t, plan_only;
