-- amvalidate: the shipped operator classes are valid; broken ones are
-- reported with an INFO message per problem.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

SELECT opcname, amvalidate(oid)
  FROM pg_opclass
 WHERE opcmethod = (SELECT oid FROM pg_am WHERE amname = 'streamhnsw')
 ORDER BY opcname;
-- defaults: one per type
SELECT opcname, opcintype::regtype
  FROM pg_opclass
 WHERE opcmethod = (SELECT oid FROM pg_am WHERE amname = 'streamhnsw') AND opcdefault
 ORDER BY opcname;
-- the access method's properties
SELECT amname, amtype FROM pg_am WHERE amname = 'streamhnsw';
SELECT prop, pg_indexam_has_property((SELECT oid FROM pg_am WHERE amname = 'streamhnsw'), prop)
  FROM unnest(ARRAY['can_order', 'can_unique', 'can_multi_col', 'can_include']) AS prop;

-- support function 1 is not the ORDER BY operator's function
CREATE OPERATOR CLASS broken_fn1_ops FOR TYPE vector USING streamhnsw AS
  OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
  FUNCTION 1 cosine_distance(vector, vector),
  FUNCTION 2 streamhnsw_l2_metric(internal),
  FUNCTION 3 streamhnsw_vector_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_fn1_ops';

-- support function 2 is missing
CREATE OPERATOR CLASS broken_nofn2_ops FOR TYPE vector USING streamhnsw AS
  OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
  FUNCTION 1 l2_distance(vector, vector),
  FUNCTION 3 streamhnsw_vector_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_nofn2_ops';
-- an index cannot be built with it
CREATE TABLE amv_t (val vector(2));
INSERT INTO amv_t VALUES ('[1,1]');
CREATE INDEX ON amv_t USING streamhnsw (val broken_nofn2_ops);

-- support functions 2 and 3 swapped: neither is of the right kind
CREATE OPERATOR CLASS broken_swap_ops FOR TYPE vector USING streamhnsw AS
  OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
  FUNCTION 1 l2_distance(vector, vector),
  FUNCTION 2 streamhnsw_vector_type(internal),
  FUNCTION 3 streamhnsw_l2_metric(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_swap_ops';

-- support function 1 with a wrong signature
CREATE FUNCTION amv_dist(vector, vector) RETURNS float4
  AS 'SELECT (l2_distance($1, $2))::float4' LANGUAGE sql IMMUTABLE STRICT;
CREATE OPERATOR CLASS broken_sig_ops FOR TYPE vector USING streamhnsw AS
  OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
  FUNCTION 1 (vector, vector) amv_dist(vector, vector),
  FUNCTION 2 streamhnsw_l2_metric(internal),
  FUNCTION 3 streamhnsw_vector_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_sig_ops';

-- no operator at all
CREATE OPERATOR CLASS broken_noop_ops FOR TYPE vector USING streamhnsw AS
  FUNCTION 1 l2_distance(vector, vector),
  FUNCTION 2 streamhnsw_l2_metric(internal),
  FUNCTION 3 streamhnsw_vector_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_noop_ops';

-- the operator under another strategy number
CREATE OPERATOR CLASS broken_strat_ops FOR TYPE vector USING streamhnsw AS
  OPERATOR 2 <-> (vector, vector) FOR ORDER BY float_ops,
  FUNCTION 1 l2_distance(vector, vector),
  FUNCTION 2 streamhnsw_l2_metric(internal),
  FUNCTION 3 streamhnsw_vector_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_strat_ops';

-- support numbers beyond 3 are refused when the class is created
CREATE OPERATOR CLASS broken_fn4_ops FOR TYPE vector USING streamhnsw AS
  OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
  FUNCTION 1 l2_distance(vector, vector),
  FUNCTION 2 streamhnsw_l2_metric(internal),
  FUNCTION 3 streamhnsw_vector_type(internal),
  FUNCTION 4 streamhnsw_cosine_metric(internal);

-- the type function must describe the indexed type
CREATE OPERATOR CLASS broken_type_ops FOR TYPE vector USING streamhnsw AS
  OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
  FUNCTION 1 l2_distance(vector, vector),
  FUNCTION 2 streamhnsw_l2_metric(internal),
  FUNCTION 3 streamhnsw_halfvec_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_type_ops';

-- the metric must match the operator's distance
CREATE OPERATOR CLASS broken_metric_ops FOR TYPE vector USING streamhnsw AS
  OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
  FUNCTION 1 l2_distance(vector, vector),
  FUNCTION 2 streamhnsw_cosine_metric(internal),
  FUNCTION 3 streamhnsw_vector_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_metric_ops';
CREATE OPERATOR CLASS broken_l1_metric_ops FOR TYPE vector USING streamhnsw AS
  OPERATOR 1 <+> (vector, vector) FOR ORDER BY float_ops,
  FUNCTION 1 l1_distance(vector, vector),
  FUNCTION 2 streamhnsw_l2_metric(internal),
  FUNCTION 3 streamhnsw_vector_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_l1_metric_ops';
-- a bit class with the other bit metric, and one that says vector
CREATE OPERATOR CLASS broken_bit_metric_ops FOR TYPE bit USING streamhnsw AS
  OPERATOR 1 <~> (bit, bit) FOR ORDER BY float_ops,
  FUNCTION 1 hamming_distance(bit, bit),
  FUNCTION 2 streamhnsw_jaccard_metric(internal),
  FUNCTION 3 streamhnsw_bit_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_bit_metric_ops';
CREATE OPERATOR CLASS broken_bit_type_ops FOR TYPE bit USING streamhnsw AS
  OPERATOR 1 <%> (bit, bit) FOR ORDER BY float_ops,
  FUNCTION 1 jaccard_distance(bit, bit),
  FUNCTION 2 streamhnsw_jaccard_metric(internal),
  FUNCTION 3 streamhnsw_vector_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_bit_type_ops';
-- a sparsevec class that says halfvec
CREATE OPERATOR CLASS broken_sparse_type_ops FOR TYPE sparsevec USING streamhnsw AS
  OPERATOR 1 <+> (sparsevec, sparsevec) FOR ORDER BY float_ops,
  FUNCTION 1 l1_distance(sparsevec, sparsevec),
  FUNCTION 2 streamhnsw_l1_metric(internal),
  FUNCTION 3 streamhnsw_halfvec_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_sparse_type_ops';

-- a correct class of our own validates
CREATE OPERATOR CLASS amv_good_ops FOR TYPE vector USING streamhnsw AS
  OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
  FUNCTION 1 l2_distance(vector, vector),
  FUNCTION 2 streamhnsw_l2_metric(internal),
  FUNCTION 3 streamhnsw_vector_type(internal);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'amv_good_ops';
CREATE INDEX amv_good_idx ON amv_t USING streamhnsw (val amv_good_ops);
SELECT metric, element_type, node_count FROM streamhnsw_metapage('amv_good_idx');

DROP TABLE amv_t;
DROP OPERATOR FAMILY broken_fn1_ops USING streamhnsw;
DROP OPERATOR FAMILY broken_nofn2_ops USING streamhnsw;
DROP OPERATOR FAMILY broken_swap_ops USING streamhnsw;
DROP OPERATOR FAMILY broken_sig_ops USING streamhnsw;
DROP OPERATOR FAMILY broken_noop_ops USING streamhnsw;
DROP OPERATOR FAMILY broken_strat_ops USING streamhnsw;
DROP OPERATOR FAMILY broken_type_ops USING streamhnsw;
DROP OPERATOR FAMILY broken_metric_ops USING streamhnsw;
DROP OPERATOR FAMILY broken_l1_metric_ops USING streamhnsw;
DROP OPERATOR FAMILY broken_bit_metric_ops USING streamhnsw;
DROP OPERATOR FAMILY broken_bit_type_ops USING streamhnsw;
DROP OPERATOR FAMILY broken_sparse_type_ops USING streamhnsw;
DROP OPERATOR FAMILY amv_good_ops USING streamhnsw;
DROP FUNCTION amv_dist(vector, vector);
