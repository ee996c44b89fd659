-- VACUUM marks the nodes of dead rows deleted (never returned), repairs the
-- lists that named them and frees their slots, which new rows reuse. Rows
-- that survive a mass delete stay reachable, and an index whose rows were
-- all deleted accepts new ones.
-- 30 rows at a time: every scan sees every node, so answers are exact.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

SET enable_seqscan = off;
-- A scan that finds no shared cache builds it itself here: a background
-- build's worker holds an xmin while it connects and opens the index
-- (catalog reads), and a VACUUM in that window keeps the rows deleted just
-- before it, as with any session starting then.
SET streamhnsw.shared_cache_background = off;

CREATE TABLE vac_t (id int, val vector(3));
INSERT INTO vac_t
  SELECT i, ARRAY[i % 7, (i * 3) % 11, (i * i) % 13]::vector
  FROM generate_series(1, 30) i;
CREATE INDEX vac_idx ON vac_t USING streamhnsw (val) WITH (m = 4, ef_construction = 8);

-- delete all rows but three
DELETE FROM vac_t WHERE id > 3;
SELECT id FROM vac_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 10;
VACUUM vac_t;
SELECT node_count, deleted_count, free_count FROM streamhnsw_metapage('vac_idx');
SELECT streamhnsw_verify('vac_idx');
SELECT id FROM vac_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 10;
SELECT id FROM vac_t ORDER BY val <-> '[100,100,100]' LIMIT 10;

-- delete everything (VACUUM cuts the free pages at the end: no node is
-- left), then fill again
DELETE FROM vac_t;
VACUUM vac_t;
SELECT node_count, deleted_count, free_count FROM streamhnsw_metapage('vac_idx');
SELECT id FROM vac_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 10;
INSERT INTO vac_t
  SELECT i, ARRAY[i % 7, (i * 3) % 11, (i * i) % 13]::vector
  FROM generate_series(31, 60) i;
SELECT node_count, deleted_count, free_count FROM streamhnsw_metapage('vac_idx');
SELECT streamhnsw_verify('vac_idx');
SELECT id, val <-> '[1.4375,2.3125,3.0625]' AS distance
  FROM vac_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 3;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM vac_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 40) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[1.4375,2.3125,3.0625]')) FROM vac_t)
       AS same_as_seqscan;

-- deleted rows whose vectors come back under new ids (before VACUUM: they
-- join the nodes that still hold their vectors, which VACUUM then keeps)
DELETE FROM vac_t WHERE id % 2 = 0;
INSERT INTO vac_t
  SELECT i + 1000, ARRAY[i % 7, (i * 3) % 11, (i * i) % 13]::vector
  FROM generate_series(31, 60) i WHERE i % 2 = 0;
VACUUM vac_t;
SELECT node_count, deleted_count, free_count FROM streamhnsw_metapage('vac_idx');
SELECT streamhnsw_verify('vac_idx');
RESET enable_seqscan;
SELECT count(*) FROM vac_t;
SET enable_seqscan = off;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM vac_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 40) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[1.4375,2.3125,3.0625]')) FROM vac_t)
       AS same_as_seqscan;
SELECT bool_and(id < 1000 AND id % 2 = 1 OR id > 1000) AS only_live
  FROM (SELECT id FROM vac_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 40) s;

-- VACUUM FULL rebuilds the index from the live rows
VACUUM FULL vac_t;
SELECT m, ef_construction, node_count, deleted_count FROM streamhnsw_metapage('vac_idx');
SELECT streamhnsw_verify('vac_idx');
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM vac_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 40) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[1.4375,2.3125,3.0625]')) FROM vac_t)
       AS same_as_seqscan;

-- the index cannot order a table
CLUSTER vac_t USING vac_idx;

RESET enable_seqscan;
DROP TABLE vac_t;
