-- One index scan per outer row (rescans with a new query each time), and
-- a cursor that reads the scan a few rows at a time. 30 rows: every scan
-- sees every node, so answers are exact; the reference is the function
-- form of the operator, which no index can serve.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

SET enable_seqscan = off;

CREATE TABLE rs_t (id int, val vector(3));
INSERT INTO rs_t
  SELECT i, ARRAY[i % 7, (i * 3) % 11, (i * i) % 13]::vector
  FROM generate_series(1, 30) i;
CREATE INDEX rs_idx ON rs_t USING streamhnsw (val);
CREATE TABLE rs_q (qid int, q vector(3));
INSERT INTO rs_q VALUES
  (1, '[1.4375,2.3125,3.0625]'), (2, '[6.0625,9.6875,11.9375]'),
  (3, '[0.0625,0.125,0.25]'), (4, '[100.5,100.25,100.125]'), (5, '[4.5,-3.25,2.75]');

-- a subquery per outer row
EXPLAIN (COSTS OFF)
SELECT qid, (SELECT array_agg(id) FROM (SELECT id FROM rs_t ORDER BY val <-> q LIMIT 3) s)
  FROM rs_q ORDER BY qid;
SELECT qid, (SELECT array_agg(id) FROM (SELECT id FROM rs_t ORDER BY val <-> q LIMIT 3) s) AS nearest
  FROM rs_q ORDER BY qid;
SELECT qid,
       (SELECT array_agg(id) FROM (SELECT id FROM rs_t ORDER BY val <-> q LIMIT 30) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, q)) FROM rs_t) AS same_as_seqscan
  FROM rs_q ORDER BY qid;

-- a LATERAL join
SELECT qid, n.id, n.distance
  FROM rs_q CROSS JOIN LATERAL
       (SELECT id, val <-> q AS distance FROM rs_t ORDER BY val <-> q LIMIT 2) n
 ORDER BY qid, n.distance;

-- a cursor without LIMIT: the planner expects to stop early and uses the
-- index; later fetches continue the same scan
BEGIN;
EXPLAIN (COSTS OFF)
DECLARE rs_c CURSOR FOR SELECT id FROM rs_t ORDER BY val <-> '[1.4375,2.3125,3.0625]';
DECLARE rs_c CURSOR FOR
  SELECT id, val <-> '[1.4375,2.3125,3.0625]' AS distance
  FROM rs_t ORDER BY val <-> '[1.4375,2.3125,3.0625]';
FETCH 3 FROM rs_c;
FETCH 2 FROM rs_c;
MOVE 20 FROM rs_c;
FETCH 10 FROM rs_c;
CLOSE rs_c;
COMMIT;

-- LIMIT with OFFSET
SELECT id FROM rs_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 3 OFFSET 2;
SELECT id FROM rs_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 0;

-- a partitioned table: one index per partition, merged in order
CREATE TABLE rs_p (id int, val vector(3)) PARTITION BY RANGE (id);
CREATE TABLE rs_p1 PARTITION OF rs_p FOR VALUES FROM (1) TO (16);
CREATE TABLE rs_p2 PARTITION OF rs_p FOR VALUES FROM (16) TO (31);
INSERT INTO rs_p SELECT id, val FROM rs_t;
CREATE INDEX rs_p_idx ON rs_p USING streamhnsw (val);
EXPLAIN (COSTS OFF)
SELECT id FROM rs_p ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT id FROM rs_p ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 5;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM rs_p ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 30) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[1.4375,2.3125,3.0625]')) FROM rs_p)
       AS same_as_seqscan;
SELECT c.relname, m.node_count
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
       LATERAL streamhnsw_metapage(c.oid) m
 WHERE i.inhparent = 'rs_p_idx'::regclass ORDER BY c.relname;
DROP TABLE rs_p;

RESET enable_seqscan;
DROP TABLE rs_t, rs_q;
