-- Operator classes on vector: vector_l2_ops (the default), vector_ip_ops,
-- vector_cosine_ops. 30 rows of small integers and a query of exact binary
-- fractions: every distance is computed exactly and no two rows tie, so
-- the expected order is unique. 30 rows < ef_search (40): the search sees
-- every node, so the complete answer is certain.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

CREATE TABLE vops (id int PRIMARY KEY, val vector(3));
INSERT INTO vops
  SELECT i, ARRAY[i % 7, (i * 3) % 11, (i * i) % 13]::vector
  FROM generate_series(1, 30) i;

SET enable_seqscan = off;

-- vector_l2_ops, <->
CREATE INDEX vops_l2 ON vops USING streamhnsw (val vector_l2_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM vops ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT id, val, val <-> '[1.4375,2.3125,3.0625]' AS distance
  FROM vops ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 5;
-- the whole table through the index equals a sequential ORDER BY (the
-- function form of the operator is not indexable, so it sorts a seq scan)
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM vops ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 30) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[1.4375,2.3125,3.0625]')) FROM vops)
       AS same_as_seqscan;
SELECT streamhnsw_verify('vops_l2');
DROP INDEX vops_l2;

-- vector_ip_ops, <#> (negative inner product)
CREATE INDEX vops_ip ON vops USING streamhnsw (val vector_ip_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM vops ORDER BY val <#> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT id, val, val <#> '[1.4375,2.3125,3.0625]' AS distance
  FROM vops ORDER BY val <#> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM vops ORDER BY val <#> '[1.4375,2.3125,3.0625]' LIMIT 30) s)
     = (SELECT array_agg(id ORDER BY vector_negative_inner_product(val, '[1.4375,2.3125,3.0625]')) FROM vops)
       AS same_as_seqscan;
SELECT streamhnsw_verify('vops_ip');
DROP INDEX vops_ip;

-- vector_cosine_ops, <=>
CREATE INDEX vops_cos ON vops USING streamhnsw (val vector_cosine_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM vops ORDER BY val <=> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT id, val, val <=> '[1.4375,2.3125,3.0625]' AS distance
  FROM vops ORDER BY val <=> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM vops ORDER BY val <=> '[1.4375,2.3125,3.0625]' LIMIT 30) s)
     = (SELECT array_agg(id ORDER BY cosine_distance(val, '[1.4375,2.3125,3.0625]')) FROM vops)
       AS same_as_seqscan;
-- a scaled copy of a vector is at cosine distance 0
SELECT id, val <=> '[8,2,6]' AS distance
  FROM vops ORDER BY val <=> '[8,2,6]' LIMIT 1;
SELECT streamhnsw_verify('vops_cos');
DROP INDEX vops_cos;

-- the default operator class for vector is vector_l2_ops
CREATE INDEX vops_default ON vops USING streamhnsw (val);
SELECT c.opcname FROM pg_index i JOIN pg_opclass c ON c.oid = i.indclass[0]
  WHERE i.indexrelid = 'vops_default'::regclass;
EXPLAIN (COSTS OFF)
SELECT id FROM vops ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT id FROM vops ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 5;
-- an operator of another class cannot use it
EXPLAIN (COSTS OFF)
SELECT id FROM vops ORDER BY val <=> '[1.4375,2.3125,3.0625]' LIMIT 5;

-- the same in a prepared statement with the query as a parameter
PREPARE q(vector) AS SELECT id FROM vops ORDER BY val <-> $1 LIMIT 3;
EXPLAIN (COSTS OFF) EXECUTE q('[1.4375,2.3125,3.0625]');
EXECUTE q('[1.4375,2.3125,3.0625]');
EXECUTE q('[6,10,12]');
DEALLOCATE q;

-- equal distances: a second sort key is applied by an incremental sort
-- over the index's order (rows 4 and 11 tie, and so do 1 and 12)
EXPLAIN (COSTS OFF)
SELECT id FROM vops ORDER BY val <-> '[3,1,4]', id LIMIT 6;
SELECT id, val <-> '[3,1,4]' AS distance FROM vops ORDER BY val <-> '[3,1,4]', id LIMIT 6;
SELECT id, val <-> '[3,1,4]' AS distance FROM vops ORDER BY val <-> '[3,1,4]', id DESC LIMIT 6;
SELECT array_agg(id ORDER BY id) AS ids
  FROM (SELECT id FROM vops ORDER BY val <-> '[3,1,4]' FETCH FIRST 1 ROWS WITH TIES) s;

RESET enable_seqscan;
DROP TABLE vops;
