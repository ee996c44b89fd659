-- Operator classes sparsevec_l2_ops (<->), sparsevec_ip_ops (<#>),
-- sparsevec_cosine_ops (<=>) and sparsevec_l1_ops (<+>) on pgvector's
-- sparsevec. 40 rows < ef_search: the search sees every node, so the
-- complete answer is certain. sparsevec(100000) navigates on a sketch of
-- 1,024 dimensions (src/README, Sparse vectors), sparsevec(6) on itself.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

CREATE TABLE sp (id int PRIMARY KEY, v sparsevec(100000));
INSERT INTO sp SELECT i, format('{%s:%s,%s:%s,%s:%s}/100000',
    (i * 37) % 100 + 1, i % 7 + 1, 200 + (i * 11) % 300, (i * 3) % 5 - 1.5,
    90000 + i, (i % 4) * 0.25 + 0.1)::sparsevec
  FROM generate_series(1, 40) i;
-- NULLs are not indexed, nor zero vectors under cosine, as in pgvector
INSERT INTO sp VALUES (41, NULL), (42, '{}/100000');

SET enable_seqscan = off;

-- sparsevec_l2_ops
CREATE INDEX sp_l2 ON sp USING streamhnsw (v sparsevec_l2_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM sp ORDER BY v <-> '{38:3,211:0.5}/100000' LIMIT 5;
SELECT id, v <-> '{38:2,211:0.5}/100000' AS distance
  FROM sp ORDER BY v <-> '{38:2,211:0.5}/100000' LIMIT 3;
SELECT (SELECT array_agg(d) FROM
          (SELECT v <-> '{5:1,300:-1,90010:0.5}/100000' AS d FROM sp
            ORDER BY v <-> '{5:1,300:-1,90010:0.5}/100000' LIMIT 50) s)
     = (SELECT array_agg(l2_distance(v, '{5:1,300:-1,90010:0.5}/100000')
                    ORDER BY l2_distance(v, '{5:1,300:-1,90010:0.5}/100000'))
          FROM sp WHERE v IS NOT NULL)
       AS same_as_seqscan,
       (SELECT count(DISTINCT id) FROM
          (SELECT id FROM sp ORDER BY v <-> '{5:1,300:-1,90010:0.5}/100000' LIMIT 50) s) AS rows;
SELECT metric, element_type, dimensions, node_count FROM streamhnsw_metapage('sp_l2');
SELECT streamhnsw_verify('sp_l2');
-- inserts after the build, a delete and VACUUM keep the order exact
INSERT INTO sp VALUES (43, '{38:2,211:0.5}/100000'), (44, '{7:1,99999:4}/100000');
DELETE FROM sp WHERE id = 30;
VACUUM sp;
SELECT id, v <-> '{38:2,211:0.5}/100000' AS distance
  FROM sp ORDER BY v <-> '{38:2,211:0.5}/100000' LIMIT 1;
SELECT (SELECT array_agg(d) FROM
          (SELECT v <-> '{1:2,250:1}/100000' AS d FROM sp ORDER BY v <-> '{1:2,250:1}/100000' LIMIT 50) s)
     = (SELECT array_agg(v <-> '{1:2,250:1}/100000' ORDER BY v <-> '{1:2,250:1}/100000')
          FROM sp WHERE v IS NOT NULL)
       AS same_as_seqscan;
SELECT streamhnsw_verify('sp_l2');
-- another class's operator cannot use it
EXPLAIN (COSTS OFF)
SELECT id FROM sp ORDER BY v <=> '{38:3}/100000' LIMIT 5;
-- a query of another dimension count: pgvector's error
SELECT id FROM sp ORDER BY v <-> '{1:1}/3' LIMIT 1;
-- a NULL query returns every indexed row, in no particular order
SELECT count(*) FROM (SELECT id FROM sp ORDER BY v <-> NULL LIMIT 100) s;
DROP INDEX sp_l2;

-- sparsevec_ip_ops
CREATE INDEX sp_ip ON sp USING streamhnsw (v sparsevec_ip_ops);
SELECT (SELECT array_agg(d) FROM
          (SELECT v <#> '{38:1,250:2,90020:3}/100000' AS d FROM sp
            ORDER BY v <#> '{38:1,250:2,90020:3}/100000' LIMIT 50) s)
     = (SELECT array_agg(d ORDER BY d) FROM
          (SELECT sparsevec_negative_inner_product(v, '{38:1,250:2,90020:3}/100000') AS d
             FROM sp WHERE v IS NOT NULL) s)
       AS same_as_seqscan;
SELECT metric, element_type FROM streamhnsw_metapage('sp_ip');
SELECT streamhnsw_verify('sp_ip');
DROP INDEX sp_ip;

-- sparsevec_cosine_ops: the zero vector (id 42) is not indexed
CREATE INDEX sp_cos ON sp USING streamhnsw (v sparsevec_cosine_ops);
SELECT (SELECT array_agg(round(d::numeric, 6)) FROM
          (SELECT v <=> '{38:1,250:2}/100000' AS d FROM sp
            ORDER BY v <=> '{38:1,250:2}/100000' LIMIT 50) s)
     = (SELECT array_agg(round(d::numeric, 6) ORDER BY d) FROM
          (SELECT cosine_distance(v, '{38:1,250:2}/100000') AS d
             FROM sp WHERE v IS NOT NULL AND id <> 42) s)
       AS same_as_seqscan;
SELECT count(*) FROM (SELECT id FROM sp ORDER BY v <=> '{38:1}/100000' LIMIT 100) s;
-- a zero query: every distance is NaN, any order is right
SELECT count(*) FROM (SELECT id FROM sp ORDER BY v <=> '{}/100000' LIMIT 100) s;
SELECT node_count FROM streamhnsw_metapage('sp_cos');
SELECT streamhnsw_verify('sp_cos');
DROP INDEX sp_cos;

-- sparsevec_l1_ops
CREATE INDEX sp_l1 ON sp USING streamhnsw (v sparsevec_l1_ops);
SELECT (SELECT array_agg(d) FROM
          (SELECT v <+> '{40:3,90001:1}/100000' AS d FROM sp
            ORDER BY v <+> '{40:3,90001:1}/100000' LIMIT 50) s)
     = (SELECT array_agg(l1_distance(v, '{40:3,90001:1}/100000')
                    ORDER BY l1_distance(v, '{40:3,90001:1}/100000'))
          FROM sp WHERE v IS NOT NULL)
       AS same_as_seqscan;
SELECT streamhnsw_verify('sp_l1');
DROP INDEX sp_l1;

-- few dimensions: the value itself is the navigation vector, and an index
-- made empty trains on its first row
CREATE TABLE sp6 (id int, v sparsevec(6));
CREATE INDEX sp6_l2 ON sp6 USING streamhnsw (v sparsevec_l2_ops);
INSERT INTO sp6 SELECT i, format('{%s:%s,%s:%s}/6', i % 3 + 1, i, i % 3 + 4, 10 - i)::sparsevec
  FROM generate_series(1, 30) i;
SELECT id, v <-> '{1:4,4:6}/6' AS distance FROM sp6 ORDER BY v <-> '{1:4,4:6}/6' LIMIT 3;
SELECT (SELECT array_agg(d) FROM
          (SELECT v <-> '{2:7,5:2}/6' AS d FROM sp6 ORDER BY v <-> '{2:7,5:2}/6' LIMIT 40) s)
     = (SELECT array_agg(v <-> '{2:7,5:2}/6' ORDER BY v <-> '{2:7,5:2}/6') FROM sp6)
       AS same_as_seqscan;
SELECT dimensions, node_count FROM streamhnsw_metapage('sp6_l2');
SELECT streamhnsw_verify('sp6_l2');

-- limits: pgvector's hnsw indexes at most 1,000 non-zero elements
CREATE TABLE spbig (v sparsevec(1001));
INSERT INTO spbig VALUES (array_fill(1, ARRAY[1001])::vector::sparsevec);
CREATE INDEX ON spbig USING streamhnsw (v sparsevec_l2_ops);
TRUNCATE spbig;
CREATE INDEX spbig_l2 ON spbig USING streamhnsw (v sparsevec_l2_ops);
INSERT INTO spbig VALUES (array_fill(1, ARRAY[1001])::vector::sparsevec);
-- 1,000 are indexed
INSERT INTO spbig SELECT ('{' || string_agg(i || ':1', ',') || '}/1001')::sparsevec
  FROM generate_series(1, 1000) i;
SELECT streamhnsw_verify('spbig_l2');
DROP TABLE sp, sp6, spbig;
