-- Index options m and ef_construction, and the GUCs streamhnsw.ef_search
-- and streamhnsw.max_scan_tuples: defaults, boundaries, error messages.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

CREATE TABLE opt_t (id int, val vector(3));
INSERT INTO opt_t
  SELECT i, ARRAY[i % 7, (i * 3) % 11, (i * i) % 13]::vector
  FROM generate_series(1, 30) i;

-- defaults: m 16, ef_construction 64
CREATE INDEX opt_default ON opt_t USING streamhnsw (val);
SELECT m, ef_construction FROM streamhnsw_metapage('opt_default');

-- ALTER INDEX changes the reloption, not the index: inserts and VACUUM keep
-- the ef_construction the index was built with (the metapage's)
ALTER INDEX opt_default SET (ef_construction = 1000);
DELETE FROM opt_t WHERE id > 25;
VACUUM opt_t;
INSERT INTO opt_t
  SELECT i, ARRAY[i % 7, (i * 3) % 11, (i * i) % 13]::vector
  FROM generate_series(26, 30) i;
SELECT m, ef_construction FROM streamhnsw_metapage('opt_default');
SELECT streamhnsw_verify('opt_default');
DROP INDEX opt_default;

-- m: 2 .. 100
CREATE INDEX opt_idx ON opt_t USING streamhnsw (val) WITH (m = 1);
CREATE INDEX opt_idx ON opt_t USING streamhnsw (val) WITH (m = 101);
CREATE INDEX opt_idx ON opt_t USING streamhnsw (val) WITH (m = -1);
CREATE INDEX opt_idx ON opt_t USING streamhnsw (val) WITH (m = 'many');
CREATE INDEX opt_m2 ON opt_t USING streamhnsw (val) WITH (m = 2);
CREATE INDEX opt_m100 ON opt_t USING streamhnsw (val) WITH (m = 100, ef_construction = 200);
SELECT m, ef_construction FROM streamhnsw_metapage('opt_m2');
SELECT m, ef_construction FROM streamhnsw_metapage('opt_m100');
SELECT streamhnsw_verify('opt_m2');
SELECT streamhnsw_verify('opt_m100');
DROP INDEX opt_m2, opt_m100;

-- ef_construction: 4 .. 1000, and at least 2 * m
CREATE INDEX opt_idx ON opt_t USING streamhnsw (val) WITH (ef_construction = 3);
CREATE INDEX opt_idx ON opt_t USING streamhnsw (val) WITH (ef_construction = 1001);
CREATE INDEX opt_idx ON opt_t USING streamhnsw (val) WITH (ef_construction = 4);
CREATE INDEX opt_idx ON opt_t USING streamhnsw (val) WITH (m = 100, ef_construction = 199);
CREATE INDEX opt_idx ON opt_t USING streamhnsw (val) WITH (m = 3, ef_construction = 5);
CREATE INDEX opt_efc4 ON opt_t USING streamhnsw (val) WITH (m = 2, ef_construction = 4);
CREATE INDEX opt_efc1000 ON opt_t USING streamhnsw (val) WITH (ef_construction = 1000);
SELECT m, ef_construction FROM streamhnsw_metapage('opt_efc4');
SELECT m, ef_construction FROM streamhnsw_metapage('opt_efc1000');
SELECT streamhnsw_verify('opt_efc4');
SELECT streamhnsw_verify('opt_efc1000');
DROP INDEX opt_efc1000;

-- m = 100 at the largest dimensions: big node records and exact vectors
-- that span pages
CREATE TABLE opt_big (id int, h halfvec(4000), v vector(2000));
INSERT INTO opt_big
  SELECT g, (SELECT array_agg((i * g) % 17) FROM generate_series(1, 4000) i)::halfvec,
            (SELECT array_agg((i * g) % 19) FROM generate_series(1, 2000) i)::vector
  FROM generate_series(1, 12) g;
CREATE INDEX opt_big_h ON opt_big USING streamhnsw (h) WITH (m = 100, ef_construction = 200);
CREATE INDEX opt_big_v ON opt_big USING streamhnsw (v vector_ip_ops) WITH (m = 100, ef_construction = 200);
INSERT INTO opt_big
  SELECT g, (SELECT array_agg((i * g) % 17) FROM generate_series(1, 4000) i)::halfvec,
            (SELECT array_agg((i * g) % 19) FROM generate_series(1, 2000) i)::vector
  FROM generate_series(13, 16) g;
SELECT dimensions, m, node_count FROM streamhnsw_metapage('opt_big_h');
SELECT dimensions, m, node_count FROM streamhnsw_metapage('opt_big_v');
SELECT streamhnsw_verify('opt_big_h');
SELECT streamhnsw_verify('opt_big_v');
SET enable_seqscan = off;
SELECT id, h <-> (SELECT h FROM opt_big WHERE id = 7) AS distance
  FROM opt_big ORDER BY h <-> (SELECT h FROM opt_big WHERE id = 7) LIMIT 1;
SELECT id, v <#> (SELECT v FROM opt_big WHERE id = 14) AS distance
  FROM opt_big ORDER BY v <#> (SELECT v FROM opt_big WHERE id = 14) LIMIT 1;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM opt_big ORDER BY v <#> (SELECT v FROM opt_big WHERE id = 14) LIMIT 16) s)
     = (SELECT array_agg(id ORDER BY vector_negative_inner_product(v, (SELECT v FROM opt_big WHERE id = 14)))
          FROM opt_big) AS same_as_seqscan;
RESET enable_seqscan;
DROP TABLE opt_big;

-- unknown options (ef_search: test ef_search_option)
CREATE INDEX opt_idx ON opt_t USING streamhnsw (val) WITH (ef_searches = 10);
CREATE INDEX opt_idx ON opt_t USING streamhnsw (val) WITH (lists = 10);

-- the smallest graph gives exact answers on this tiny table
SET enable_seqscan = off;
SELECT id, val <-> '[1.4375,2.3125,3.0625]' AS distance
  FROM opt_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 3;
SELECT (SELECT array_agg(id) FROM
          (SELECT id FROM opt_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 30) s)
     = (SELECT array_agg(id ORDER BY l2_distance(val, '[1.4375,2.3125,3.0625]')) FROM opt_t)
       AS same_as_seqscan;

-- ALTER INDEX SET checks the ranges too; a new m takes effect at REINDEX
ALTER INDEX opt_efc4 SET (m = 101);
ALTER INDEX opt_efc4 SET (ef_construction = 1001);
ALTER INDEX opt_efc4 SET (m = 4, ef_construction = 10);
SELECT reloptions FROM pg_class WHERE relname = 'opt_efc4';
SELECT m, ef_construction FROM streamhnsw_metapage('opt_efc4');
REINDEX INDEX opt_efc4;
SELECT m, ef_construction FROM streamhnsw_metapage('opt_efc4');
-- an ef_construction below 2 * m is refused when the index is built
ALTER INDEX opt_efc4 SET (ef_construction = 7);
REINDEX INDEX opt_efc4;
ALTER INDEX opt_efc4 RESET (m, ef_construction);
REINDEX INDEX opt_efc4;
SELECT m, ef_construction FROM streamhnsw_metapage('opt_efc4');

-- streamhnsw.ef_search: 1 .. 1000, default 40
SHOW streamhnsw.ef_search;
SET streamhnsw.ef_search = 0;
SET streamhnsw.ef_search = 1001;
SET streamhnsw.ef_search = 'wide';
SET streamhnsw.ef_search = 1000;
SHOW streamhnsw.ef_search;
SELECT id FROM opt_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 3;
SET streamhnsw.ef_search = 1;
SHOW streamhnsw.ef_search;
-- with a width of 1 the scan keeps searching until it has the LIMIT, and
-- its rows are still in exact distance order
SELECT count(*) AS n,
       bool_and(d >= prev) AS ordered
  FROM (SELECT d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT val <-> '[1.4375,2.3125,3.0625]' AS d, row_number() OVER () AS ord
                  FROM (SELECT val FROM opt_t
                         ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 10) s1) s2) s3;
RESET streamhnsw.ef_search;
SHOW streamhnsw.ef_search;

-- streamhnsw.max_scan_tuples: at least 1, default 20000
SHOW streamhnsw.max_scan_tuples;
SET streamhnsw.max_scan_tuples = 0;
SET streamhnsw.max_scan_tuples = -5;
SET streamhnsw.max_scan_tuples = 1;
SHOW streamhnsw.max_scan_tuples;
-- the first round (width ef_search 40) already holds the 30 rows
SELECT count(*) FROM (SELECT id FROM opt_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 30) s;
RESET streamhnsw.max_scan_tuples;

-- streamhnsw.iterative_scan: strict_order (default) or relaxed_order; both
-- return every one of the 30 rows once, strict_order in distance order
SHOW streamhnsw.iterative_scan;
SET streamhnsw.iterative_scan = off;
SET streamhnsw.iterative_scan = relaxed_order;
SELECT count(*), count(DISTINCT id)
  FROM (SELECT id FROM opt_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 40) s;
RESET streamhnsw.iterative_scan;
SET streamhnsw.ef_search = 1;
SELECT count(*) AS n, count(DISTINCT id) AS distinct_ids, bool_and(d >= prev) AS ordered
  FROM (SELECT id, d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT id, val <-> '[1.4375,2.3125,3.0625]' AS d, row_number() OVER () AS ord
                  FROM (SELECT id, val FROM opt_t
                         ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 40) s1) s2) s3;
RESET streamhnsw.ef_search;

-- streamhnsw.sweep_threshold: 0 to 1, default 1 (a scan never sweeps by
-- itself); 0: a strict scan whose budget covers the index sweeps right after
-- its first round, and a swept scan returns every row once, in distance order
SHOW streamhnsw.sweep_threshold;
SET streamhnsw.sweep_threshold = 1.5;
SET streamhnsw.sweep_threshold = -0.1;
SET streamhnsw.sweep_threshold = 0;
SET streamhnsw.ef_search = 1;
SELECT count(*) AS n, count(DISTINCT id) AS distinct_ids, bool_and(d >= prev) AS ordered
  FROM (SELECT id, d, lag(d, 1, '-Infinity') OVER (ORDER BY ord) AS prev
          FROM (SELECT id, val <-> '[1.4375,2.3125,3.0625]' AS d, row_number() OVER () AS ord
                  FROM (SELECT id, val FROM opt_t
                         ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 40) s1) s2) s3;
RESET streamhnsw.ef_search;
RESET streamhnsw.sweep_threshold;

-- the GUC prefix is reserved
SET streamhnsw.foo = 1;
SET streamhnsw.efsearch = 10;
SHOW streamhnsw.foo;
SELECT name, setting, min_val, max_val, boot_val, context
  FROM pg_settings
  WHERE name IN ('streamhnsw.ef_search', 'streamhnsw.max_scan_tuples') ORDER BY name;

RESET enable_seqscan;
DROP TABLE opt_t;
