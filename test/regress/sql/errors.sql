-- Error messages: dimensions, NaN and infinity, columns and types that
-- cannot be indexed, unsupported index features, inspection functions on
-- other relations.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

SET enable_seqscan = off;

CREATE TABLE err_t (id int, val vector(3));
INSERT INTO err_t VALUES (1, '[1,2,3]'), (2, '[4,5,6]');
CREATE INDEX err_idx ON err_t USING streamhnsw (val);

-- wrong dimensions: the column's type rejects them before the index sees
-- them; a query of other dimensions is rejected by the scan
INSERT INTO err_t VALUES (3, '[1,2]');
INSERT INTO err_t VALUES (3, '[1,2,3,4]');
SELECT id FROM err_t ORDER BY val <-> '[1,2]' LIMIT 1;
SELECT id FROM err_t ORDER BY val <-> '[1,2,3,4]' LIMIT 1;
PREPARE err_q(vector) AS SELECT id FROM err_t ORDER BY val <-> $1 LIMIT 1;
EXECUTE err_q('[1,2,3]');
EXECUTE err_q('[1]');
DEALLOCATE err_q;

-- NaN and infinity: pgvector rejects them when the value is read
INSERT INTO err_t VALUES (3, '[NaN,1,1]');
INSERT INTO err_t VALUES (3, '[1,Infinity,1]');
INSERT INTO err_t VALUES (3, '[1,1,-Infinity]');
SELECT id FROM err_t ORDER BY val <-> '[NaN,1,1]' LIMIT 1;
SELECT id FROM err_t ORDER BY val <-> '[1,Infinity,1]' LIMIT 1;
-- nor can arithmetic produce them
SELECT id FROM err_t ORDER BY val <-> '[1e38,1,1]'::vector * '[10,1,1]' LIMIT 1;
-- halfvec: values beyond its range overflow
CREATE TABLE err_h (id int, val halfvec(2));
CREATE INDEX err_h_idx ON err_h USING streamhnsw (val);
INSERT INTO err_h VALUES (1, '[NaN,1]');
INSERT INTO err_h VALUES (1, '[Infinity,1]');
INSERT INTO err_h VALUES (1, '[70000,1]');
INSERT INTO err_h VALUES (1, '[1,2]'), (2, '[3,4]');
SELECT id FROM err_h ORDER BY val <-> '[1,1,1]' LIMIT 1;
SELECT id FROM err_h ORDER BY val <-> '[65504,0]' LIMIT 1;
SELECT id FROM err_h ORDER BY val <-> '[NaN,0]' LIMIT 1;
-- nothing was written by the failed statements
SELECT node_count FROM streamhnsw_metapage('err_idx');
SELECT node_count FROM streamhnsw_metapage('err_h_idx');
SELECT streamhnsw_verify('err_idx');
SELECT streamhnsw_verify('err_h_idx');

-- columns without dimensions
CREATE TABLE err_nodim (v vector, h halfvec);
CREATE INDEX ON err_nodim USING streamhnsw (v);
CREATE INDEX ON err_nodim USING streamhnsw (h halfvec_cosine_ops);

-- dimension limits: 2,000 for vector, 4,000 for halfvec
CREATE TABLE err_dims (v2000 vector(2000), v2001 vector(2001),
                       h4000 halfvec(4000), h4001 halfvec(4001));
CREATE INDEX ON err_dims USING streamhnsw (v2001);
CREATE INDEX ON err_dims USING streamhnsw (h4001 halfvec_ip_ops);
CREATE INDEX err_dims_v2000 ON err_dims USING streamhnsw (v2000 vector_cosine_ops);
CREATE INDEX err_dims_h4000 ON err_dims USING streamhnsw (h4000);
SELECT dimensions, metric, element_type FROM streamhnsw_metapage('err_dims_v2000');
SELECT dimensions, metric, element_type FROM streamhnsw_metapage('err_dims_h4000');
INSERT INTO err_dims (v2000) SELECT array_agg(i % 10)::vector FROM generate_series(1, 2000) i;
INSERT INTO err_dims (h4000) SELECT array_agg(i % 20)::halfvec FROM generate_series(1, 4000) i;
INSERT INTO err_dims (v2000) SELECT array_agg(i % 10)::vector FROM generate_series(1, 2001) i;
INSERT INTO err_dims (h4000) SELECT array_agg(i % 20)::halfvec FROM generate_series(1, 3999) i;
SELECT node_count FROM streamhnsw_metapage('err_dims_v2000');
SELECT node_count FROM streamhnsw_metapage('err_dims_h4000');
SELECT streamhnsw_verify('err_dims_v2000');
SELECT streamhnsw_verify('err_dims_h4000');
SELECT v2000 <=> (SELECT array_agg(i % 5)::vector FROM generate_series(1, 2000) i) AS distance
  FROM err_dims
 ORDER BY v2000 <=> (SELECT array_agg(i % 5)::vector FROM generate_series(1, 2000) i) LIMIT 1;
SELECT h4000 <-> (SELECT array_agg(i % 20)::halfvec FROM generate_series(1, 4000) i) AS distance
  FROM err_dims
 ORDER BY h4000 <-> (SELECT array_agg(i % 20)::halfvec FROM generate_series(1, 4000) i) LIMIT 1;

-- types without a streamhnsw operator class
CREATE TABLE err_types (i int, t text, s sparsevec(3), b bit(3), f float4[]);
CREATE INDEX ON err_types USING streamhnsw (i);
CREATE INDEX ON err_types USING streamhnsw (t);
CREATE INDEX ON err_types USING streamhnsw (s);
CREATE INDEX ON err_types USING streamhnsw (b);
CREATE INDEX ON err_types USING streamhnsw (f);
-- an operator class of the other type
CREATE INDEX ON err_t USING streamhnsw (val halfvec_l2_ops);
CREATE INDEX ON err_h USING streamhnsw (val vector_cosine_ops);
CREATE INDEX ON err_t USING streamhnsw (val sparsevec_cosine_ops);
-- sparsevec: a column without dimensions, more non-zero elements than
-- pgvector's hnsw indexes (1,000), a query of another dimension count
CREATE TABLE err_sparse (s sparsevec);
CREATE INDEX ON err_sparse USING streamhnsw (s sparsevec_l2_ops);
CREATE TABLE err_sparse_nnz (s sparsevec(2000));
CREATE INDEX err_sparse_nnz_idx ON err_sparse_nnz USING streamhnsw (s sparsevec_ip_ops);
INSERT INTO err_sparse_nnz SELECT array_agg(1)::vector::sparsevec FROM generate_series(1, 2000);
INSERT INTO err_sparse_nnz VALUES ('{1:1}/2000');
SELECT s <#> '{1:1}/5' FROM err_sparse_nnz ORDER BY s <#> '{1:1}/5' LIMIT 1;
DROP TABLE err_sparse, err_sparse_nnz;

-- unsupported index features
CREATE INDEX ON err_t USING streamhnsw (val, val);
CREATE INDEX ON err_t USING streamhnsw (val, id);
CREATE INDEX ON err_t USING streamhnsw (val) INCLUDE (id);
CREATE UNIQUE INDEX ON err_t USING streamhnsw (val);
CREATE INDEX ON err_t USING streamhnsw (val DESC);
CREATE INDEX ON err_t USING streamhnsw (val NULLS FIRST);
ALTER TABLE err_t ADD CONSTRAINT err_excl EXCLUDE USING streamhnsw (val WITH <->);
-- a scan without ORDER BY cannot use the index, even when forced
SET enable_indexscan = on;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM err_t WHERE id = 1;
RESET enable_bitmapscan;
-- backward scans are not possible: a cursor with SCROLL materializes
BEGIN;
DECLARE err_c SCROLL CURSOR FOR SELECT id FROM err_t ORDER BY val <-> '[1,2,3]' LIMIT 2;
FETCH 2 FROM err_c;
FETCH BACKWARD 1 FROM err_c;
COMMIT;

-- the inspection functions accept streamhnsw indexes only
CREATE INDEX err_btree ON err_t (id);
CREATE INDEX err_hnsw ON err_t USING hnsw (val vector_l2_ops);
SELECT streamhnsw_verify('err_btree');
SELECT streamhnsw_verify('err_hnsw');
SELECT streamhnsw_verify('err_t');
SELECT * FROM streamhnsw_metapage('err_btree');
SELECT * FROM streamhnsw_metapage('err_t');
SELECT streamhnsw_verify('no_such_index');
SELECT streamhnsw_verify(NULL);

RESET enable_seqscan;
DROP TABLE err_t, err_h, err_nodim, err_dims, err_types;
