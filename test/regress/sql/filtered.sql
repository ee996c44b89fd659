-- Filtered queries: a WHERE clause on another column, and distance-range
-- filters. On 30 rows (fewer than ef_search) the answers are exact and
-- compared with a sequential scan; on 2000 rows the iterative scan must
-- keep searching until the LIMIT is met, in exact distance order.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

SET enable_seqscan = off;

-- tiny: exact answers
CREATE TABLE filt_small (id int, cat int, val vector(3));
INSERT INTO filt_small
  SELECT i, i % 4, ARRAY[i % 7, (i * 3) % 11, (i * i) % 13]::vector
  FROM generate_series(1, 30) i;
CREATE INDEX filt_small_idx ON filt_small USING streamhnsw (val);
EXPLAIN (COSTS OFF)
SELECT id FROM filt_small WHERE cat = 1 ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 3;
SELECT id, cat, val <-> '[1.4375,2.3125,3.0625]' AS distance
  FROM filt_small WHERE cat = 1 ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 3;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM filt_small WHERE cat = 2
            ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 5) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[1.4375,2.3125,3.0625]'))
          FROM (SELECT id, val FROM filt_small WHERE cat = 2
                 ORDER BY l2_distance(val, '[1.4375,2.3125,3.0625]') LIMIT 5) t)
       AS same_as_seqscan;
-- a filter that matches fewer rows than the LIMIT returns all of them
SELECT id FROM filt_small WHERE id IN (5, 17, 29)
  ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 10;
-- a filter that matches nothing returns nothing
SELECT id FROM filt_small WHERE cat = 99 ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 10;

-- distance ranges
EXPLAIN (COSTS OFF)
SELECT id FROM filt_small WHERE val <-> '[1.4375,2.3125,3.0625]' < 2.5
  ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 10;
SELECT id, val <-> '[1.4375,2.3125,3.0625]' AS distance
  FROM filt_small WHERE val <-> '[1.4375,2.3125,3.0625]' < 2.5
  ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 10;
SELECT id FROM filt_small WHERE val <-> '[1.4375,2.3125,3.0625]' < 0.5
  ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 10;
SELECT id, val <=> '[1.4375,2.3125,3.0625]' AS distance
  FROM filt_small WHERE val <=> '[1.4375,2.3125,3.0625]' < 0.01
  ORDER BY val <=> '[1.4375,2.3125,3.0625]' LIMIT 10;
-- both kinds of filter together
SELECT id FROM filt_small
  WHERE val <-> '[1.4375,2.3125,3.0625]' BETWEEN 2 AND 5 AND cat IN (0, 3)
  ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 10;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM filt_small
            WHERE val <-> '[1.4375,2.3125,3.0625]' BETWEEN 2 AND 5 AND cat IN (0, 3)
            ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 10) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[1.4375,2.3125,3.0625]'))
          FROM filt_small
         WHERE l2_distance(val, '[1.4375,2.3125,3.0625]') BETWEEN 2 AND 5 AND cat IN (0, 3))
       AS same_as_seqscan;
DROP TABLE filt_small;

-- 2000 rows, a filter matching 1 % of them (20 rows): LIMIT 10 returns 10
CREATE TABLE filt_t (id int, cat int, val vector(8));
INSERT INTO filt_t
  SELECT i, i % 100,
         ARRAY[(i * 7) % 101, (i * 13) % 103, (i * 17) % 107, (i * 19) % 109,
               (i * 23) % 113, (i * 29) % 127, (i * 31) % 131, (i * 37) % 137]::vector
  FROM generate_series(1, 2000) i;
CREATE INDEX filt_idx ON filt_t USING streamhnsw (val);
ANALYZE filt_t;
EXPLAIN (COSTS OFF)
SELECT id FROM filt_t WHERE cat = 7 ORDER BY val <-> '[50,50,50,50,50,50,50,50]' LIMIT 10;
SELECT count(*) AS n, bool_and(cat = 7) AS all_match, bool_and(d >= prev) AS ordered
  FROM (SELECT cat, d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT cat, val <-> '[50,50,50,50,50,50,50,50]' AS d, row_number() OVER () AS ord
                  FROM (SELECT cat, val FROM filt_t WHERE cat = 7
                         ORDER BY val <-> '[50,50,50,50,50,50,50,50]' LIMIT 10) s1) s2) s3;
-- the same with the smallest search width: more rounds, same guarantee
SET streamhnsw.ef_search = 1;
SELECT count(*) AS n, bool_and(cat = 42) AS all_match, bool_and(d >= prev) AS ordered
  FROM (SELECT cat, d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT cat, val <-> '[50,50,50,50,50,50,50,50]' AS d, row_number() OVER () AS ord
                  FROM (SELECT cat, val FROM filt_t WHERE cat = 42
                         ORDER BY val <-> '[50,50,50,50,50,50,50,50]' LIMIT 10) s1) s2) s3;
RESET streamhnsw.ef_search;
-- halfvec under cosine, a filter matching 1 %
CREATE INDEX filt_h_idx ON filt_t USING streamhnsw ((val::halfvec(8)) halfvec_cosine_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM filt_t WHERE cat = 13
  ORDER BY val::halfvec(8) <=> '[1,2,3,4,5,6,7,8]' LIMIT 10;
SELECT count(*) AS n, bool_and(cat = 13) AS all_match, bool_and(d >= prev) AS ordered
  FROM (SELECT cat, d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT cat, val::halfvec(8) <=> '[1,2,3,4,5,6,7,8]' AS d, row_number() OVER () AS ord
                  FROM (SELECT cat, val FROM filt_t WHERE cat = 13
                         ORDER BY val::halfvec(8) <=> '[1,2,3,4,5,6,7,8]' LIMIT 10) s1) s2) s3;
DROP INDEX filt_h_idx;
-- a filter matching nothing ends (the scan is bounded) and returns nothing
SELECT count(*) FROM (SELECT id FROM filt_t WHERE cat = 100
                       ORDER BY val <-> '[50,50,50,50,50,50,50,50]' LIMIT 10) s;
-- a distance range: every row returned is inside it, in order
SELECT count(*) FROM filt_t WHERE l2_distance(val, '[50,50,50,50,50,50,50,50]') < 60;
SELECT count(*) AS n,
       bool_and(d < 60) AS all_inside, bool_and(d >= prev) AS ordered
  FROM (SELECT d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT val <-> '[50,50,50,50,50,50,50,50]' AS d, row_number() OVER () AS ord
                  FROM (SELECT val FROM filt_t
                         WHERE val <-> '[50,50,50,50,50,50,50,50]' < 60
                         ORDER BY val <-> '[50,50,50,50,50,50,50,50]' LIMIT 10) s1) s2) s3;
SELECT count(*) FROM (SELECT id FROM filt_t WHERE val <-> '[50,50,50,50,50,50,50,50]' < 1
                       ORDER BY val <-> '[50,50,50,50,50,50,50,50]' LIMIT 10) s;

RESET enable_seqscan;
DROP TABLE filt_t;
