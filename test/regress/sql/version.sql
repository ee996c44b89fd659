CREATE EXTENSION streamhnsw CASCADE;
-- the library and the SQL script agree on the version
SELECT streamhnsw_version() = extversion AS version_matches
  FROM pg_extension WHERE extname = 'streamhnsw';
-- pgvector came along through CASCADE
SELECT extname FROM pg_extension WHERE extname IN ('vector', 'streamhnsw') ORDER BY 1;
-- features are a subset of the known names
SELECT streamhnsw_cpu_features() <@ ARRAY['sse4.2', 'avx2', 'fma', 'avx512f'] AS known_features;
