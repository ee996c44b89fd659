-- Many rows with the same vector. 35 copies of one vector and 4 other
-- rows: 39 rows, fewer than ef_search (40), so a scan must see every row.
-- The duplicates are all at distance 0 from each other; however the graph
-- links them, every row must stay reachable.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

SET enable_seqscan = off;

-- the smallest case: m = 4 (8 neighbours on layer 0) and 12 copies
CREATE TABLE dup_m (id int, val vector(2));
INSERT INTO dup_m SELECT i, '[1,1]' FROM generate_series(1, 12) i;
INSERT INTO dup_m VALUES (13, '[5,5]');
CREATE INDEX dup_m_idx ON dup_m USING streamhnsw (val) WITH (m = 4, ef_construction = 8);
SELECT id, val <-> '[5,5]' AS distance FROM dup_m ORDER BY val <-> '[5,5]' LIMIT 1;
SELECT count(*) FROM (SELECT id FROM dup_m ORDER BY val <-> '[1,1]' LIMIT 100) s;
DROP TABLE dup_m;

-- built over existing rows
CREATE TABLE dup_t (id int, val vector(2));
INSERT INTO dup_t SELECT i, '[1,1]' FROM generate_series(1, 35) i;
INSERT INTO dup_t VALUES (36, '[2,2]'), (37, '[3,3]'), (38, '[4,4]'), (39, '[5,5]');
CREATE INDEX dup_idx ON dup_t USING streamhnsw (val);
SELECT streamhnsw_verify('dup_idx');
SELECT count(*) FROM (SELECT id FROM dup_t ORDER BY val <-> '[1,1]' LIMIT 100) s;
SELECT id, val <-> '[5,5]' AS distance FROM dup_t ORDER BY val <-> '[5,5]' LIMIT 3;
-- [2,2] and [3,3] are equally near
SELECT array_agg(id ORDER BY id) AS ids
  FROM (SELECT id FROM dup_t ORDER BY val <-> '[2.5,2.5]' LIMIT 2) s;
SELECT array_agg(id ORDER BY id) AS ids
  FROM (SELECT id FROM dup_t WHERE id > 30 ORDER BY val <-> '[1,1]' LIMIT 10) s;
DROP TABLE dup_t;

-- inserted into an index built empty
CREATE TABLE dup_i (id int, val vector(2));
CREATE INDEX dup_i_idx ON dup_i USING streamhnsw (val);
INSERT INTO dup_i SELECT i, '[1,1]' FROM generate_series(1, 35) i;
INSERT INTO dup_i VALUES (36, '[2,2]'), (37, '[3,3]'), (38, '[4,4]'), (39, '[5,5]');
SELECT streamhnsw_verify('dup_i_idx');
SELECT count(*) FROM (SELECT id FROM dup_i ORDER BY val <-> '[1,1]' LIMIT 100) s;
SELECT id, val <-> '[5,5]' AS distance FROM dup_i ORDER BY val <-> '[5,5]' LIMIT 3;
SELECT array_agg(id ORDER BY id) AS ids
  FROM (SELECT id FROM dup_i WHERE id > 30 ORDER BY val <-> '[1,1]' LIMIT 10) s;
DROP TABLE dup_i;

-- under cosine, scaled copies are duplicates too
CREATE TABLE dup_c (id int, val halfvec(2));
INSERT INTO dup_c SELECT i, ARRAY[i, i]::halfvec FROM generate_series(1, 35) i;
INSERT INTO dup_c VALUES (36, '[1,2]'), (37, '[1,3]'), (38, '[1,4]'), (39, '[1,5]');
CREATE INDEX dup_c_idx ON dup_c USING streamhnsw (val halfvec_cosine_ops);
SELECT count(*) FROM (SELECT id FROM dup_c ORDER BY val <=> '[1,1]' LIMIT 100) s;
SELECT id FROM dup_c ORDER BY val <=> '[1,5]' LIMIT 1;
DROP TABLE dup_c;

-- pairs of equal vectors
CREATE TABLE dup_p (id int, val vector(2));
INSERT INTO dup_p SELECT i, ARRAY[(i / 2) % 6, (i / 2) / 6] FROM generate_series(0, 71) i;
CREATE INDEX dup_p_idx ON dup_p USING streamhnsw (val);
SELECT array_agg(id ORDER BY id) AS ids
  FROM (SELECT id FROM dup_p ORDER BY val <-> '[2.25,3.125]' LIMIT 2) s;

RESET enable_seqscan;
DROP TABLE dup_p;
