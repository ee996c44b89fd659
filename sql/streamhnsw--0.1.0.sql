-- streamhnsw 0.1.0
\echo Use "CREATE EXTENSION streamhnsw CASCADE" to load this file. \quit

CREATE FUNCTION streamhnsw_version() RETURNS text
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION streamhnsw_version() IS 'version of the loaded streamhnsw library';

CREATE FUNCTION streamhnsw_cpu_features() RETURNS text[]
	AS 'MODULE_PATHNAME' LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION streamhnsw_cpu_features() IS 'SIMD features of this CPU that streamhnsw dispatches to at run time';
