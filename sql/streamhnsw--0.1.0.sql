-- streamhnsw 0.1.0
\echo Use "CREATE EXTENSION streamhnsw CASCADE" to load this file. \quit

CREATE FUNCTION streamhnsw_version() RETURNS text
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION streamhnsw_version() IS 'version of the loaded streamhnsw library';

CREATE FUNCTION streamhnsw_cpu_features() RETURNS text[]
	AS 'MODULE_PATHNAME' LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION streamhnsw_cpu_features() IS 'SIMD features of this CPU that streamhnsw dispatches to at run time';

-- The access method

CREATE FUNCTION streamhnsw_handler(internal) RETURNS index_am_handler
	AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE ACCESS METHOD streamhnsw TYPE INDEX HANDLER streamhnsw_handler;
COMMENT ON ACCESS METHOD streamhnsw IS 'streaming HNSW index with SQ8 navigation and exact re-ranking';

-- Support functions 2 (distance family) and 3 (element type)

CREATE FUNCTION streamhnsw_l2_metric(internal) RETURNS internal
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION streamhnsw_ip_metric(internal) RETURNS internal
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION streamhnsw_cosine_metric(internal) RETURNS internal
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION streamhnsw_l1_metric(internal) RETURNS internal
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION streamhnsw_hamming_metric(internal) RETURNS internal
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION streamhnsw_jaccard_metric(internal) RETURNS internal
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION streamhnsw_vector_type(internal) RETURNS internal
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION streamhnsw_halfvec_type(internal) RETURNS internal
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION streamhnsw_bit_type(internal) RETURNS internal
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION streamhnsw_sparsevec_type(internal) RETURNS internal
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Operator classes, named as pgvector names them for hnsw. Function 1 is
-- the ORDER BY operator's own function: re-ranking computes the very value
-- ORDER BY sorts on.

CREATE OPERATOR CLASS vector_l2_ops
	DEFAULT FOR TYPE vector USING streamhnsw AS
	OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
	FUNCTION 1 l2_distance(vector, vector),
	FUNCTION 2 streamhnsw_l2_metric(internal),
	FUNCTION 3 streamhnsw_vector_type(internal);

CREATE OPERATOR CLASS vector_ip_ops
	FOR TYPE vector USING streamhnsw AS
	OPERATOR 1 <#> (vector, vector) FOR ORDER BY float_ops,
	FUNCTION 1 vector_negative_inner_product(vector, vector),
	FUNCTION 2 streamhnsw_ip_metric(internal),
	FUNCTION 3 streamhnsw_vector_type(internal);

CREATE OPERATOR CLASS vector_cosine_ops
	FOR TYPE vector USING streamhnsw AS
	OPERATOR 1 <=> (vector, vector) FOR ORDER BY float_ops,
	FUNCTION 1 cosine_distance(vector, vector),
	FUNCTION 2 streamhnsw_cosine_metric(internal),
	FUNCTION 3 streamhnsw_vector_type(internal);

CREATE OPERATOR CLASS vector_l1_ops
	FOR TYPE vector USING streamhnsw AS
	OPERATOR 1 <+> (vector, vector) FOR ORDER BY float_ops,
	FUNCTION 1 l1_distance(vector, vector),
	FUNCTION 2 streamhnsw_l1_metric(internal),
	FUNCTION 3 streamhnsw_vector_type(internal);

CREATE OPERATOR CLASS halfvec_l2_ops
	DEFAULT FOR TYPE halfvec USING streamhnsw AS
	OPERATOR 1 <-> (halfvec, halfvec) FOR ORDER BY float_ops,
	FUNCTION 1 l2_distance(halfvec, halfvec),
	FUNCTION 2 streamhnsw_l2_metric(internal),
	FUNCTION 3 streamhnsw_halfvec_type(internal);

CREATE OPERATOR CLASS halfvec_ip_ops
	FOR TYPE halfvec USING streamhnsw AS
	OPERATOR 1 <#> (halfvec, halfvec) FOR ORDER BY float_ops,
	FUNCTION 1 halfvec_negative_inner_product(halfvec, halfvec),
	FUNCTION 2 streamhnsw_ip_metric(internal),
	FUNCTION 3 streamhnsw_halfvec_type(internal);

CREATE OPERATOR CLASS halfvec_cosine_ops
	FOR TYPE halfvec USING streamhnsw AS
	OPERATOR 1 <=> (halfvec, halfvec) FOR ORDER BY float_ops,
	FUNCTION 1 cosine_distance(halfvec, halfvec),
	FUNCTION 2 streamhnsw_cosine_metric(internal),
	FUNCTION 3 streamhnsw_halfvec_type(internal);

CREATE OPERATOR CLASS halfvec_l1_ops
	FOR TYPE halfvec USING streamhnsw AS
	OPERATOR 1 <+> (halfvec, halfvec) FOR ORDER BY float_ops,
	FUNCTION 1 l1_distance(halfvec, halfvec),
	FUNCTION 2 streamhnsw_l1_metric(internal),
	FUNCTION 3 streamhnsw_halfvec_type(internal);

-- bit(n) (pgvector's operators on PostgreSQL's bit type), up to 64,000 bits

CREATE OPERATOR CLASS bit_hamming_ops
	FOR TYPE bit USING streamhnsw AS
	OPERATOR 1 <~> (bit, bit) FOR ORDER BY float_ops,
	FUNCTION 1 hamming_distance(bit, bit),
	FUNCTION 2 streamhnsw_hamming_metric(internal),
	FUNCTION 3 streamhnsw_bit_type(internal);

CREATE OPERATOR CLASS bit_jaccard_ops
	FOR TYPE bit USING streamhnsw AS
	OPERATOR 1 <%> (bit, bit) FOR ORDER BY float_ops,
	FUNCTION 1 jaccard_distance(bit, bit),
	FUNCTION 2 streamhnsw_jaccard_metric(internal),
	FUNCTION 3 streamhnsw_bit_type(internal);

-- sparsevec, up to 1,000 non-zero elements per indexed value

CREATE OPERATOR CLASS sparsevec_l2_ops
	FOR TYPE sparsevec USING streamhnsw AS
	OPERATOR 1 <-> (sparsevec, sparsevec) FOR ORDER BY float_ops,
	FUNCTION 1 l2_distance(sparsevec, sparsevec),
	FUNCTION 2 streamhnsw_l2_metric(internal),
	FUNCTION 3 streamhnsw_sparsevec_type(internal);

CREATE OPERATOR CLASS sparsevec_ip_ops
	FOR TYPE sparsevec USING streamhnsw AS
	OPERATOR 1 <#> (sparsevec, sparsevec) FOR ORDER BY float_ops,
	FUNCTION 1 sparsevec_negative_inner_product(sparsevec, sparsevec),
	FUNCTION 2 streamhnsw_ip_metric(internal),
	FUNCTION 3 streamhnsw_sparsevec_type(internal);

CREATE OPERATOR CLASS sparsevec_cosine_ops
	FOR TYPE sparsevec USING streamhnsw AS
	OPERATOR 1 <=> (sparsevec, sparsevec) FOR ORDER BY float_ops,
	FUNCTION 1 cosine_distance(sparsevec, sparsevec),
	FUNCTION 2 streamhnsw_cosine_metric(internal),
	FUNCTION 3 streamhnsw_sparsevec_type(internal);

CREATE OPERATOR CLASS sparsevec_l1_ops
	FOR TYPE sparsevec USING streamhnsw AS
	OPERATOR 1 <+> (sparsevec, sparsevec) FOR ORDER BY float_ops,
	FUNCTION 1 l1_distance(sparsevec, sparsevec),
	FUNCTION 2 streamhnsw_l1_metric(internal),
	FUNCTION 3 streamhnsw_sparsevec_type(internal);

-- Inspection

-- The inspection functions read every page of an index (verify also locks
-- it against writes): not for PUBLIC. GRANT EXECUTE to let a role run them;
-- it must also own the index or be a member of pg_monitor.
CREATE FUNCTION streamhnsw_verify(index regclass) RETURNS SETOF text
	AS 'MODULE_PATHNAME' LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION streamhnsw_verify(regclass) IS 'checks the structure of a streamhnsw index; returns one row per problem found';
REVOKE ALL ON FUNCTION streamhnsw_verify(regclass) FROM PUBLIC;

CREATE FUNCTION streamhnsw_metapage(index regclass,
	OUT version int, OUT dimensions int, OUT m int, OUT ef_construction int,
	OUT metric text, OUT element_type text, OUT quantizer_trained bool,
	OUT node_count bigint, OUT deleted_count bigint, OUT entry_level int,
	OUT cache_generation bigint, OUT nodes_per_page int, OUT total_blocks bigint,
	OUT free_count bigint)
	AS 'MODULE_PATHNAME' LANGUAGE C STRICT VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION streamhnsw_metapage(regclass) IS 'the metapage of a streamhnsw index';
REVOKE ALL ON FUNCTION streamhnsw_metapage(regclass) FROM PUBLIC;

-- Statistics

CREATE FUNCTION streamhnsw_stats(
	OUT scans bigint, OUT rounds bigint, OUT nodes_expanded bigint,
	OUT distances bigint, OUT reranked bigint, OUT pages_hit bigint,
	OUT pages_read bigint, OUT synchronous_reads bigint, OUT reads_ahead bigint,
	OUT speculative_pages bigint, OUT speculative_reads bigint,
	OUT speculative_used bigint, OUT speculative_wasted bigint, OUT waits bigint,
	OUT stalls bigint, OUT wait_ms double precision, OUT known_synchronous_reads bigint,
	OUT heap_prefetches bigint, OUT heap_reads bigint, OUT speculative_evicted bigint,
	OUT serial_waits bigint, OUT lookahead_avg double precision,
	OUT lookahead_histogram bigint[])
	AS 'MODULE_PATHNAME' LANGUAGE C STRICT VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION streamhnsw_stats() IS 'cumulative figures of all streamhnsw scans since the last reset';
-- Readable by any role: one row of server-wide sums that names no database,
-- index or query, as pg_stat_io and pg_stat_wal (src/README, Privileges).

CREATE FUNCTION streamhnsw_stats_reset() RETURNS void
	AS 'MODULE_PATHNAME' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION streamhnsw_stats_reset() IS 'sets the cumulative streamhnsw scan figures to zero';
REVOKE ALL ON FUNCTION streamhnsw_stats_reset() FROM PUBLIC;

-- The shared cache (src/README, "The shared cache")

CREATE FUNCTION streamhnsw_cache_load(index regclass) RETURNS bigint
	AS 'MODULE_PATHNAME' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION streamhnsw_cache_load(regclass) IS 'builds (or brings up to date) the shared cache''s copy of a streamhnsw index; returns its size in bytes, or NULL if it cannot have one';

CREATE FUNCTION streamhnsw_cache_drop(index regclass) RETURNS boolean
	AS 'MODULE_PATHNAME' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION streamhnsw_cache_drop(regclass) IS 'drops the shared cache''s copy of a streamhnsw index; true if it had one';

CREATE FUNCTION streamhnsw_cache_list(
	OUT index oid, OUT database oid, OUT state text, OUT bytes bigint,
	OUT nodes bigint, OUT graph_pages bigint, OUT upper_pages bigint,
	OUT hits bigint, OUT misses bigint, OUT builds bigint,
	OUT invalidations bigint, OUT refreshes bigint, OUT evictions bigint,
	OUT insert_searches bigint, OUT outgrown bigint, OUT last_used timestamptz)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION streamhnsw_cache_list() IS 'the shared cache''s copies of streamhnsw indexes the caller may read (every database''s for pg_monitor and pg_read_all_stats): state, size, nodes and counters';
