-- Operator classes bit_hamming_ops (<~>, pgvector's hamming_distance) and
-- bit_jaccard_ops (<%>, jaccard_distance) on bit(n). 40 rows of 12 bits
-- (every value distinct) and 40 < ef_search: the search sees every node,
-- so the complete answer is certain. Distances tie, so the checks compare
-- the index's sequence of distances with the sorted one and its rows with
-- all rows; the queries shown with their rows have one nearest row.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

CREATE TABLE bitops (id int PRIMARY KEY, b bit(12));
INSERT INTO bitops SELECT i, ((i * 1103) % 4096)::bit(12) FROM generate_series(1, 40) i;
-- NULLs are not indexed, as in pgvector
INSERT INTO bitops VALUES (41, NULL);

SET enable_seqscan = off;

-- bit_hamming_ops
CREATE INDEX bitops_h ON bitops USING streamhnsw (b bit_hamming_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM bitops ORDER BY b <~> '000101100111' LIMIT 5;
SELECT id, b, b <~> '000100110101' AS distance
  FROM bitops ORDER BY b <~> '000100110101' LIMIT 1;
SELECT array_agg(d) AS index_distances FROM
  (SELECT b <~> '101010101010' AS d FROM bitops ORDER BY b <~> '101010101010' LIMIT 41) s;
SELECT (SELECT array_agg(d) FROM
          (SELECT b <~> '101010101010' AS d FROM bitops ORDER BY b <~> '101010101010' LIMIT 41) s)
     = (SELECT array_agg(hamming_distance(b, '101010101010') ORDER BY hamming_distance(b, '101010101010'))
          FROM bitops WHERE b IS NOT NULL)
       AS same_as_seqscan,
       (SELECT count(DISTINCT id) FROM
          (SELECT id FROM bitops ORDER BY b <~> '101010101010' LIMIT 41) s) AS rows;
SELECT metric, element_type, dimensions, node_count FROM streamhnsw_metapage('bitops_h');
SELECT streamhnsw_verify('bitops_h');
-- inserts after the build, a delete and VACUUM keep the order exact
INSERT INTO bitops VALUES (42, '101010101011');
DELETE FROM bitops WHERE id = 30;
VACUUM bitops;
SELECT id, b <~> '101010101010' AS distance
  FROM bitops ORDER BY b <~> '101010101010' LIMIT 1;
SELECT (SELECT array_agg(d) FROM
          (SELECT b <~> '111000111000' AS d FROM bitops ORDER BY b <~> '111000111000' LIMIT 41) s)
     = (SELECT array_agg(b <~> '111000111000' ORDER BY b <~> '111000111000') FROM bitops WHERE b IS NOT NULL)
       AS same_as_seqscan;
SELECT streamhnsw_verify('bitops_h');
-- another class's operator cannot use it
EXPLAIN (COSTS OFF)
SELECT id FROM bitops ORDER BY b <%> '101010101010' LIMIT 5;
-- a query of another length: pgvector's error
SELECT id FROM bitops ORDER BY b <~> '1010' LIMIT 1;
-- a NULL query returns rows, in no particular order
SELECT count(*) FROM (SELECT id FROM bitops ORDER BY b <~> NULL LIMIT 100) s;
-- a distance bound ends the scan at the rows within it
SELECT (SELECT array_agg(d) FROM
          (SELECT b <~> '111000111000' AS d FROM bitops WHERE b <~> '111000111000' <= 4
            ORDER BY b <~> '111000111000' LIMIT 41) s)
     = (SELECT array_agg(b <~> '111000111000' ORDER BY b <~> '111000111000')
          FROM bitops WHERE hamming_distance(b, '111000111000') <= 4)
       AS same_as_seqscan;
DROP INDEX bitops_h;

-- bit_jaccard_ops, with zero vectors: at distance 1 from everything
-- (pgvector's jaccard_distance), and indexed
INSERT INTO bitops VALUES (43, '000000000000'), (44, '000000000000');
CREATE INDEX bitops_j ON bitops USING streamhnsw (b bit_jaccard_ops);
EXPLAIN (COSTS OFF)
SELECT id FROM bitops ORDER BY b <%> '000100110101' LIMIT 5;
SELECT id, b, b <%> '000100110101' AS distance
  FROM bitops ORDER BY b <%> '000100110101' LIMIT 1;
SELECT (SELECT array_agg(round(d::numeric, 12)) FROM
          (SELECT b <%> '110011001100' AS d FROM bitops ORDER BY b <%> '110011001100' LIMIT 50) s)
     = (SELECT array_agg(round(jaccard_distance(b, '110011001100')::numeric, 12)
                    ORDER BY jaccard_distance(b, '110011001100'))
          FROM bitops WHERE b IS NOT NULL)
       AS same_as_seqscan;
-- a zero query: every row at distance 1
SELECT count(*), min(d), max(d) FROM
  (SELECT b <%> '000000000000' AS d FROM bitops ORDER BY b <%> '000000000000' LIMIT 50) s;
SELECT metric, element_type, dimensions FROM streamhnsw_metapage('bitops_j');
SELECT streamhnsw_verify('bitops_j');
DROP INDEX bitops_j;

-- an index built empty takes its rows by inserts (codes are the bytes)
CREATE TABLE bitempty (id int, b bit(70));
CREATE INDEX bitempty_h ON bitempty USING streamhnsw (b bit_hamming_ops);
INSERT INTO bitempty
  SELECT i, (lpad(((i * 2654435761) % 4294967296)::bit(32)::text, 38, '0') ||
             ((i * 40503) % 4294967296)::bit(32)::text)::bit(70)
  FROM generate_series(1, 30) i;
SELECT (SELECT array_agg(d) FROM
          (SELECT b <~> (SELECT b FROM bitempty WHERE id = 7) AS d FROM bitempty
            ORDER BY b <~> (SELECT b FROM bitempty WHERE id = 7) LIMIT 30) s)
     = (SELECT array_agg(b <~> (SELECT b FROM bitempty WHERE id = 7)
                    ORDER BY b <~> (SELECT b FROM bitempty WHERE id = 7)) FROM bitempty)
       AS same_as_seqscan;
SELECT id FROM bitempty ORDER BY b <~> (SELECT b FROM bitempty WHERE id = 7) LIMIT 1;
SELECT streamhnsw_verify('bitempty_h');

-- limits as pgvector's hnsw: bit(64000) at most, bit(n) only
CREATE TABLE bitdims (b64000 bit(64000), b64001 bit(64001), vb varbit(8), vbn varbit);
CREATE INDEX ON bitdims USING streamhnsw (b64001 bit_hamming_ops);
CREATE INDEX ON bitdims USING streamhnsw (vb bit_hamming_ops);
CREATE INDEX ON bitdims USING streamhnsw (vbn bit_jaccard_ops);
-- a node of 64,000 bits fits a page with m up to 17 (the default is 16)
CREATE INDEX ON bitdims USING streamhnsw (b64000 bit_hamming_ops) WITH (m = 18);
CREATE INDEX bitdims_big ON bitdims USING streamhnsw (b64000 bit_jaccard_ops);
INSERT INTO bitdims (b64000) SELECT repeat('01', 32000)::bit(64000);
INSERT INTO bitdims (b64000) SELECT repeat('0011', 16000)::bit(64000);
SELECT b64000 <%> repeat('01', 32000)::bit(64000) AS distance
  FROM bitdims ORDER BY b64000 <%> repeat('01', 32000)::bit(64000) LIMIT 2;
SELECT streamhnsw_verify('bitdims_big');

DROP TABLE bitops, bitempty, bitdims;
