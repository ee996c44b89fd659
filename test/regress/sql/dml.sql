-- Changing a table under a streamhnsw index: inserts into an index built
-- empty and after a build, multi-row INSERT, COPY, UPDATE, DELETE + VACUUM,
-- aborted inserts, TRUNCATE, REINDEX, unlogged tables. Never more than 40
-- rows, fewer than ef_search: each scan sees every node, so complete
-- answers are certain; distances are exact and free of ties.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

SET enable_seqscan = off;
-- scans build the shared cache themselves: a background build's worker
-- holds an xmin while it starts, and a VACUUM then would keep dead rows
SET streamhnsw.shared_cache_background = off;

-- an index created on an empty table
CREATE TABLE dml_t (id int, val vector(2));
CREATE INDEX dml_idx ON dml_t USING streamhnsw (val vector_l2_ops) WITH (m = 4, ef_construction = 16);
SELECT dimensions, m, ef_construction, metric, element_type, quantizer_trained,
       node_count, deleted_count
  FROM streamhnsw_metapage('dml_idx');
SELECT id FROM dml_t ORDER BY val <-> '[1,1]' LIMIT 5;
SELECT streamhnsw_verify('dml_idx');

-- the first row trains the quantizer
INSERT INTO dml_t VALUES (1, '[1,1]');
SELECT quantizer_trained, node_count FROM streamhnsw_metapage('dml_idx');
SELECT id, val <-> '[7.25,3.375]' AS distance FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 5;

-- a multi-row INSERT, with values outside the range the first row trained
INSERT INTO dml_t SELECT i, ARRAY[i, (i * i) % 17]::vector FROM generate_series(2, 25) i;
SELECT node_count FROM streamhnsw_metapage('dml_idx');
SELECT id, val, val <-> '[7.25,3.375]' AS distance
  FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 5;
SELECT id, val, val <-> '[24.5,0.25]' AS distance
  FROM dml_t ORDER BY val <-> '[24.5,0.25]' LIMIT 3;
-- all rows through the index, in the order of a sequential sort
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 40) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[7.25,3.375]')) FROM dml_t)
       AS same_as_seqscan;

-- COPY
COPY dml_t (id, val) FROM stdin;
26	[30.5,30.5]
27	[-3,-4]
28	[12.5,2]
\.
SELECT node_count FROM streamhnsw_metapage('dml_idx');
SELECT id FROM dml_t ORDER BY val <-> '[30,30]' LIMIT 1;
SELECT id FROM dml_t ORDER BY val <-> '[-2,-3]' LIMIT 1;
SELECT id FROM dml_t ORDER BY val <-> '[12.25,2.125]' LIMIT 2;
SELECT streamhnsw_verify('dml_idx');

-- rows of an aborted transaction are never returned
BEGIN;
INSERT INTO dml_t VALUES (100, '[7,3]'), (101, '[7.25,3.5]');
SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 3;
ROLLBACK;
SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 3;

-- UPDATE: the new version is found at its new place, the old one is gone
UPDATE dml_t SET val = '[100,100]' WHERE id = 7;
SELECT id, val FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 3;
SELECT id, val FROM dml_t ORDER BY val <-> '[99,99]' LIMIT 1;

-- DELETE: deleted rows are never returned, before and after VACUUM
DELETE FROM dml_t WHERE id % 3 = 0;
SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 5;
VACUUM dml_t;
-- 31 nodes: 28 rows, the 2 aborted ones and the updated row's new
-- version; 12 deleted: 9 deleted rows, 2 aborted, the old version
SELECT node_count, deleted_count FROM streamhnsw_metapage('dml_idx');
SELECT streamhnsw_verify('dml_idx');
SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 5;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 40) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[7.25,3.375]')) FROM dml_t)
       AS same_as_seqscan;
SELECT count(*) FROM (SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 40) s;
-- a second VACUUM finds nothing more to delete
VACUUM dml_t;
SELECT node_count, deleted_count FROM streamhnsw_metapage('dml_idx');
-- inserting after VACUUM
INSERT INTO dml_t VALUES (29, '[7.25,3.25]');
SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 2;
SELECT node_count, deleted_count FROM streamhnsw_metapage('dml_idx');
SELECT streamhnsw_verify('dml_idx');

-- REINDEX rebuilds from the live rows only
REINDEX INDEX dml_idx;
SELECT m, ef_construction, quantizer_trained, node_count, deleted_count
  FROM streamhnsw_metapage('dml_idx');
SELECT streamhnsw_verify('dml_idx');
SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 5;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 40) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[7.25,3.375]')) FROM dml_t)
       AS same_as_seqscan;
REINDEX INDEX CONCURRENTLY dml_idx;
SELECT node_count, deleted_count FROM streamhnsw_metapage('dml_idx');
SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 3;

-- TRUNCATE empties the index; it works again afterwards
TRUNCATE dml_t;
SELECT quantizer_trained, node_count, deleted_count FROM streamhnsw_metapage('dml_idx');
SELECT id FROM dml_t ORDER BY val <-> '[7.25,3.375]' LIMIT 5;
SELECT streamhnsw_verify('dml_idx');
INSERT INTO dml_t VALUES (1, '[5,5]'), (2, '[6,6]'), (3, '[8,8]');
SELECT id FROM dml_t ORDER BY val <-> '[7.25,7.25]' LIMIT 5;
SELECT node_count FROM streamhnsw_metapage('dml_idx');
SELECT streamhnsw_verify('dml_idx');
DROP TABLE dml_t;

-- CREATE INDEX CONCURRENTLY
CREATE TABLE dml_c (id int, val vector(2));
INSERT INTO dml_c SELECT i, ARRAY[i, (i * i) % 17]::vector FROM generate_series(1, 25) i;
CREATE INDEX CONCURRENTLY dml_c_idx ON dml_c USING streamhnsw (val);
SELECT indisvalid FROM pg_index WHERE indexrelid = 'dml_c_idx'::regclass;
SELECT id FROM dml_c ORDER BY val <-> '[7.25,3.375]' LIMIT 3;
DROP TABLE dml_c;

-- an unlogged table, indexed when empty and when filled
CREATE UNLOGGED TABLE dml_u (id int, val vector(2));
CREATE INDEX dml_u_empty ON dml_u USING streamhnsw (val vector_cosine_ops);
INSERT INTO dml_u SELECT i, ARRAY[i, (i * i) % 17]::vector FROM generate_series(1, 25) i;
CREATE INDEX dml_u_full ON dml_u USING streamhnsw (val vector_l2_ops);
SELECT relname, relpersistence FROM pg_class
  WHERE relname IN ('dml_u_empty', 'dml_u_full') ORDER BY relname;
SELECT metric, node_count FROM streamhnsw_metapage('dml_u_empty');
SELECT metric, node_count FROM streamhnsw_metapage('dml_u_full');
SELECT streamhnsw_verify('dml_u_empty');
SELECT streamhnsw_verify('dml_u_full');
SELECT id, val <-> '[7.25,3.375]' AS distance
  FROM dml_u ORDER BY val <-> '[7.25,3.375]' LIMIT 3;
SELECT id, val <=> '[7.25,3.375]' AS distance
  FROM dml_u ORDER BY val <=> '[7.25,3.375]' LIMIT 3;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM dml_u ORDER BY val <=> '[7.25,3.375]' LIMIT 40) s)
     = (SELECT array_agg(id ORDER BY cosine_distance(val, '[7.25,3.375]')) FROM dml_u)
       AS same_as_seqscan;
DROP TABLE dml_u;

-- a temporary table
CREATE TEMP TABLE dml_tmp (id int, val halfvec(2));
INSERT INTO dml_tmp SELECT i, ARRAY[i, (i * i) % 17]::halfvec FROM generate_series(1, 25) i;
CREATE INDEX dml_tmp_idx ON dml_tmp USING streamhnsw (val halfvec_ip_ops);
SELECT id, val <#> '[7.25,3.375]' AS distance
  FROM dml_tmp ORDER BY val <#> '[7.25,3.375]' LIMIT 3;
SELECT streamhnsw_verify('dml_tmp_idx');
DROP TABLE dml_tmp;

RESET enable_seqscan;
