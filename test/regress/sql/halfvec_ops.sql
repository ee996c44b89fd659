-- Operator classes on halfvec: halfvec_l2_ops (the default), halfvec_ip_ops,
-- halfvec_cosine_ops. 30 rows of small integers and a query of exact binary
-- fractions: every distance is computed exactly and no two rows tie, so
-- the expected order is unique. 30 rows < ef_search (40): the search sees
-- every node, so the complete answer is certain.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

CREATE TABLE hops (id int PRIMARY KEY, val halfvec(3));
INSERT INTO hops
  SELECT i, ARRAY[i % 7, (i * 3) % 11, (i * i) % 13]::halfvec
  FROM generate_series(1, 30) i;

SET enable_seqscan = off;

-- halfvec_l2_ops, <->
CREATE INDEX hops_l2 ON hops USING streamhnsw (val halfvec_l2_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM hops ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT id, val, val <-> '[1.4375,2.3125,3.0625]' AS distance
  FROM hops ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 5;
-- the whole table through the index equals a sequential ORDER BY (the
-- function form of the operator is not indexable, so it sorts a seq scan)
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM hops ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 30) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[1.4375,2.3125,3.0625]')) FROM hops)
       AS same_as_seqscan;
SELECT streamhnsw_verify('hops_l2');
DROP INDEX hops_l2;

-- halfvec_ip_ops, <#> (negative inner product)
CREATE INDEX hops_ip ON hops USING streamhnsw (val halfvec_ip_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM hops ORDER BY val <#> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT id, val, val <#> '[1.4375,2.3125,3.0625]' AS distance
  FROM hops ORDER BY val <#> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM hops ORDER BY val <#> '[1.4375,2.3125,3.0625]' LIMIT 30) s)
     = (SELECT array_agg(id ORDER BY halfvec_negative_inner_product(val, '[1.4375,2.3125,3.0625]')) FROM hops)
       AS same_as_seqscan;
SELECT streamhnsw_verify('hops_ip');
DROP INDEX hops_ip;

-- halfvec_cosine_ops, <=>
CREATE INDEX hops_cos ON hops USING streamhnsw (val halfvec_cosine_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM hops ORDER BY val <=> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT id, val, val <=> '[1.4375,2.3125,3.0625]' AS distance
  FROM hops ORDER BY val <=> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM hops ORDER BY val <=> '[1.4375,2.3125,3.0625]' LIMIT 30) s)
     = (SELECT array_agg(id ORDER BY cosine_distance(val, '[1.4375,2.3125,3.0625]')) FROM hops)
       AS same_as_seqscan;
-- a scaled copy of a vector is at cosine distance 0
SELECT id, val <=> '[8,2,6]' AS distance
  FROM hops ORDER BY val <=> '[8,2,6]' LIMIT 1;
SELECT streamhnsw_verify('hops_cos');
DROP INDEX hops_cos;

-- the default operator class for halfvec is halfvec_l2_ops
CREATE INDEX hops_default ON hops USING streamhnsw (val);
SELECT c.opcname FROM pg_index i JOIN pg_opclass c ON c.oid = i.indclass[0]
  WHERE i.indexrelid = 'hops_default'::regclass;
EXPLAIN (COSTS OFF)
SELECT id FROM hops ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT id FROM hops ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 5;
-- an operator of another class cannot use it
EXPLAIN (COSTS OFF)
SELECT id FROM hops ORDER BY val <=> '[1.4375,2.3125,3.0625]' LIMIT 5;

-- the same in a prepared statement with the query as a parameter
PREPARE q(halfvec) AS SELECT id FROM hops ORDER BY val <-> $1 LIMIT 3;
EXPLAIN (COSTS OFF) EXECUTE q('[1.4375,2.3125,3.0625]');
EXECUTE q('[1.4375,2.3125,3.0625]');
EXECUTE q('[6,10,12]');
DEALLOCATE q;

-- equal distances: a second sort key is applied by an incremental sort
-- over the index's order (rows 4 and 11 tie, and so do 1 and 12)
EXPLAIN (COSTS OFF)
SELECT id FROM hops ORDER BY val <-> '[3,1,4]', id LIMIT 6;
SELECT id, val <-> '[3,1,4]' AS distance FROM hops ORDER BY val <-> '[3,1,4]', id LIMIT 6;
SELECT id, val <-> '[3,1,4]' AS distance FROM hops ORDER BY val <-> '[3,1,4]', id DESC LIMIT 6;
SELECT array_agg(id ORDER BY id) AS ids
  FROM (SELECT id FROM hops ORDER BY val <-> '[3,1,4]' FETCH FIRST 1 ROWS WITH TIES) s;

RESET enable_seqscan;
DROP TABLE hops;
