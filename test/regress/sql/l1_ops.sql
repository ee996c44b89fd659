-- Operator classes vector_l1_ops and halfvec_l1_ops, <+> (pgvector's
-- l1_distance). 30 distinct rows of integers (each dimension on its own
-- scale, so no two rows are at the same L1 distance from the query) and a
-- query of exact binary fractions: every distance is exact, also in
-- halfvec, and the expected order is unique. 30 rows < ef_search (40): the
-- search sees every node, so the complete answer is certain.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

CREATE TABLE l1ops (id int PRIMARY KEY, val vector(3), hval halfvec(3));
INSERT INTO l1ops
  SELECT i, v::vector, v::halfvec
  FROM generate_series(1, 30) i,
       LATERAL (SELECT ARRAY[i % 7, ((i * 3) % 11) * 8, ((i * i) % 13) * 96]::real[] AS v) a;
-- NULLs are not indexed, as in pgvector
INSERT INTO l1ops VALUES (31, NULL, NULL);

SET enable_seqscan = off;

-- vector_l1_ops
CREATE INDEX l1ops_v ON l1ops USING streamhnsw (val vector_l1_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM l1ops ORDER BY val <+> '[1.25,17.0625,300.25]' LIMIT 5;
SELECT id, val, val <+> '[1.25,17.0625,300.25]' AS distance
  FROM l1ops ORDER BY val <+> '[1.25,17.0625,300.25]' LIMIT 5;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM l1ops ORDER BY val <+> '[1.25,17.0625,300.25]' LIMIT 31) s)
     = (SELECT array_agg(id ORDER BY l1_distance(val, '[1.25,17.0625,300.25]'))
          FROM l1ops WHERE val IS NOT NULL)
       AS same_as_seqscan;
SELECT metric, element_type, node_count FROM streamhnsw_metapage('l1ops_v');
SELECT streamhnsw_verify('l1ops_v');
-- inserts after the build, a delete and VACUUM keep the order exact
INSERT INTO l1ops VALUES (32, '[1,17,300]', '[1,17,300]');
DELETE FROM l1ops WHERE id = 30;
VACUUM l1ops;
SELECT id, val <+> '[1.25,17.0625,300.25]' AS distance
  FROM l1ops ORDER BY val <+> '[1.25,17.0625,300.25]' LIMIT 3;
SELECT streamhnsw_verify('l1ops_v');
-- another class's operator cannot use it
EXPLAIN (COSTS OFF)
SELECT id FROM l1ops ORDER BY val <-> '[1.25,17.0625,300.25]' LIMIT 5;
DROP INDEX l1ops_v;

-- halfvec_l1_ops
CREATE INDEX l1ops_h ON l1ops USING streamhnsw (hval halfvec_l1_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM l1ops ORDER BY hval <+> '[1.25,17.0625,300.25]' LIMIT 5;
SELECT id, hval, hval <+> '[1.25,17.0625,300.25]' AS distance
  FROM l1ops ORDER BY hval <+> '[1.25,17.0625,300.25]' LIMIT 5;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM l1ops ORDER BY hval <+> '[1.25,17.0625,300.25]' LIMIT 31) s)
     = (SELECT array_agg(id ORDER BY l1_distance(hval, '[1.25,17.0625,300.25]'))
          FROM l1ops WHERE hval IS NOT NULL)
       AS same_as_seqscan;
SELECT metric, element_type, node_count FROM streamhnsw_metapage('l1ops_h');
SELECT streamhnsw_verify('l1ops_h');
DROP INDEX l1ops_h;

-- an index built empty trains on its first row, then takes the rest
CREATE TABLE l1empty (id int, val vector(3));
CREATE INDEX l1empty_v ON l1empty USING streamhnsw (val vector_l1_ops);
INSERT INTO l1empty SELECT id, val FROM l1ops WHERE val IS NOT NULL;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM l1empty ORDER BY val <+> '[1.25,17.0625,300.25]' LIMIT 30) s)
     = (SELECT array_agg(id ORDER BY l1_distance(val, '[1.25,17.0625,300.25]')) FROM l1empty)
       AS same_as_seqscan;
SELECT streamhnsw_verify('l1empty_v');

-- dimension limits as for the other classes
CREATE TABLE l1dims (v2001 vector(2001), h4001 halfvec(4001), v vector);
CREATE INDEX ON l1dims USING streamhnsw (v2001 vector_l1_ops);
CREATE INDEX ON l1dims USING streamhnsw (h4001 halfvec_l1_ops);
CREATE INDEX ON l1dims USING streamhnsw (v vector_l1_ops);
-- a query of other dimensions
SELECT id FROM l1ops ORDER BY val <+> '[1,2]' LIMIT 1;

DROP TABLE l1ops, l1empty, l1dims;
