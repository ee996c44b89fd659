-- Extreme but finite values: distances that overflow to infinity, NaN
-- distances (pgvector computes in float4, so a product or a squared norm
-- can overflow), tiny magnitudes, one dimension. Every row with a numeric
-- distance must be found (a handful of rows, fewer than ef_search) and
-- those rows must come in distance order. (Where rows at NaN go is left
-- open here: ORDER BY puts NaN after every number.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

SET enable_seqscan = off;

CREATE TABLE edge_t (id int, val vector(2));
INSERT INTO edge_t VALUES
  (1, '[1,0]'), (2, '[0,1]'), (3, '[3e38,3e38]'), (4, '[2,1]'), (5, '[-1,3]');

-- what a sequential scan computes
SELECT id, val <-> '[2,-2]' AS l2, val <#> '[2,-2]' AS ip, val <=> '[2,-2]' AS cosine
  FROM edge_t ORDER BY id;

-- inner product: row 3 is at NaN (an overflowing sum of +inf and -inf)
CREATE INDEX edge_ip ON edge_t USING streamhnsw (val vector_ip_ops);
SELECT streamhnsw_verify('edge_ip');
SELECT count(*) AS numeric_rows, bool_and(d >= prev) AS ordered
  FROM (SELECT d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT val <#> '[2,-2]' AS d, row_number() OVER () AS ord
                  FROM (SELECT val FROM edge_t ORDER BY val <#> '[2,-2]' LIMIT 10) s1) s2
         WHERE d <> 'NaN') s3;
DROP INDEX edge_ip;

-- cosine: row 3's squared norm overflows, its distance is NaN
CREATE INDEX edge_cos ON edge_t USING streamhnsw (val vector_cosine_ops);
SELECT streamhnsw_verify('edge_cos');
SELECT count(*) AS numeric_rows, bool_and(d >= prev) AS ordered
  FROM (SELECT d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT val <=> '[2,-2]' AS d, row_number() OVER () AS ord
                  FROM (SELECT val FROM edge_t ORDER BY val <=> '[2,-2]' LIMIT 10) s1) s2
         WHERE d <> 'NaN') s3;
-- tiny vectors are not zero vectors: they are indexed and found
INSERT INTO edge_t VALUES (6, '[1e-20,0]'), (7, '[0,-1e-20]'), (8, '[1e30,-1e30]');
SELECT array_agg(id ORDER BY id) AS ids
  FROM (SELECT id FROM edge_t ORDER BY val <=> '[1,0]' LIMIT 2) s;
DROP INDEX edge_cos;

-- L2: distances overflow to Infinity, never NaN
CREATE INDEX edge_l2 ON edge_t USING streamhnsw (val vector_l2_ops);
SELECT streamhnsw_verify('edge_l2');
SELECT id, distance
  FROM (SELECT id, val <-> '[2,-2]' AS distance
          FROM edge_t ORDER BY val <-> '[2,-2]' LIMIT 6) s
 ORDER BY distance, id;
SELECT count(*) AS n, bool_and(d >= prev) AS ordered
  FROM (SELECT d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT val <-> '[2,-2]' AS d, row_number() OVER () AS ord
                  FROM (SELECT val FROM edge_t ORDER BY val <-> '[2,-2]' LIMIT 10) s1) s2) s3;
DROP TABLE edge_t;

-- halfvec extremes: the largest finite half, and subnormals
CREATE TABLE edge_h (id int, val halfvec(2));
INSERT INTO edge_h VALUES
  (1, '[65504,65504]'), (2, '[-65504,0]'), (3, '[0.0000001,0]'), (4, '[0,0.00006]'),
  (5, '[1,1]');
CREATE INDEX edge_h_l2 ON edge_h USING streamhnsw (val halfvec_l2_ops);
CREATE INDEX edge_h_cos ON edge_h USING streamhnsw (val halfvec_cosine_ops);
SELECT node_count FROM streamhnsw_metapage('edge_h_l2');
SELECT node_count FROM streamhnsw_metapage('edge_h_cos');
SELECT (SELECT array_agg(id) FROM (SELECT id FROM edge_h ORDER BY val <-> '[0,0]' LIMIT 10) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[0,0]')) FROM edge_h) AS same_as_seqscan;
SELECT id FROM edge_h ORDER BY val <=> '[1,0.001]' LIMIT 1;
SELECT id FROM edge_h ORDER BY val <=> '[0.001,1]' LIMIT 1;
DROP TABLE edge_h;

-- one dimension
CREATE TABLE edge_1 (id int, val vector(1));
INSERT INTO edge_1 SELECT i, ARRAY[i * 0.5]::vector FROM generate_series(-10, 10) i;
CREATE INDEX edge_1_l2 ON edge_1 USING streamhnsw (val);
SELECT id, val <-> '[1.375]' AS distance FROM edge_1 ORDER BY val <-> '[1.375]' LIMIT 3;
SELECT id FROM edge_1 ORDER BY val <-> '[-100]' LIMIT 2;
DROP INDEX edge_1_l2;
CREATE INDEX edge_1_cos ON edge_1 USING streamhnsw (val vector_cosine_ops);
-- 0 is not indexed; the rest are at cosine distance 0 or 2
SELECT val <=> '[-2]' AS distance, count(*)
  FROM (SELECT val FROM edge_1 ORDER BY val <=> '[-2]' LIMIT 30) s GROUP BY 1 ORDER BY 1;
SELECT count(*) AS n, bool_and(d >= prev) AS ordered
  FROM (SELECT d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT val <=> '[-2]' AS d, row_number() OVER () AS ord
                  FROM (SELECT val FROM edge_1 ORDER BY val <=> '[-2]' LIMIT 30) s1) s2) s3;

RESET enable_seqscan;
DROP TABLE edge_1;
