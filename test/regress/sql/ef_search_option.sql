-- The index option ef_search: boundaries and error messages, the lock ALTER
-- INDEX takes, and which ef_search a scan uses: the session's
-- streamhnsw.ef_search whenever it is set by any means, else the index's
-- option, else 40.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE;
RESET client_min_messages;

CREATE TABLE efo_t (id int, val vector(3));
INSERT INTO efo_t
  SELECT i, ARRAY[i % 7, (i * 3) % 11, (i * i) % 13]::vector
  FROM generate_series(1, 30) i;

-- the ef_search a scan of the query used, as EXPLAIN (ANALYZE) says
CREATE FUNCTION efo_used(
    q text DEFAULT $q$SELECT id FROM efo_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 3$q$)
  RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE line text;
BEGIN
  FOR line IN EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS OFF) ' || q
  LOOP
    IF line LIKE '%streamhnsw search:%' THEN
      RETURN NEXT btrim(line);
    END IF;
  END LOOP;
END $$;

-- ef_search: 1 .. 1000, as streamhnsw.ef_search
CREATE INDEX efo_idx ON efo_t USING streamhnsw (val) WITH (ef_search = 0);
CREATE INDEX efo_idx ON efo_t USING streamhnsw (val) WITH (ef_search = 1001);
CREATE INDEX efo_idx ON efo_t USING streamhnsw (val) WITH (ef_search = -1);
CREATE INDEX efo_idx ON efo_t USING streamhnsw (val) WITH (ef_search = 'wide');
CREATE INDEX efo_idx ON efo_t USING streamhnsw (val) WITH (ef_search = 1);
SELECT reloptions FROM pg_class WHERE relname = 'efo_idx';
DROP INDEX efo_idx;
CREATE INDEX efo_idx ON efo_t USING streamhnsw (val) WITH (ef_search = 1000, m = 4);
SELECT reloptions FROM pg_class WHERE relname = 'efo_idx';
-- the option is a search setting: the graph is built as without it
SELECT m, ef_construction FROM streamhnsw_metapage('efo_idx');
DROP INDEX efo_idx;

SET enable_seqscan = off;

-- no option: the session's setting, at its default
CREATE INDEX efo_idx ON efo_t USING streamhnsw (val);
SELECT efo_used();
SELECT id FROM efo_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 3;

-- ALTER INDEX SET: checked as in CREATE INDEX; it takes
-- ShareUpdateExclusiveLock, which lets scans, inserts and deletes run
ALTER INDEX efo_idx SET (ef_search = 0);
ALTER INDEX efo_idx SET (ef_search = 1001);
BEGIN;
ALTER INDEX efo_idx SET (ef_search = 100);
SELECT mode FROM pg_locks
  WHERE locktype = 'relation' AND relation = 'efo_idx'::regclass AND pid = pg_backend_pid();
COMMIT;
SELECT reloptions FROM pg_class WHERE relname = 'efo_idx';

-- the option applies while streamhnsw.ef_search is at its default
SHOW streamhnsw.ef_search;
SELECT efo_used();
SELECT id FROM efo_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 3;

-- a session's SET wins, even one to the default value
SET streamhnsw.ef_search = 40;
SELECT efo_used();
SET streamhnsw.ef_search = 7;
SELECT efo_used();
RESET streamhnsw.ef_search;
SELECT efo_used();

-- SET LOCAL wins for its transaction
BEGIN;
SET LOCAL streamhnsw.ef_search = 12;
SELECT efo_used();
COMMIT;
SELECT efo_used();

-- so does a function's SET clause
CREATE FUNCTION efo_used_at_9() RETURNS SETOF text LANGUAGE sql
  SET streamhnsw.ef_search = 9 AS $$ SELECT efo_used() $$;
SELECT efo_used_at_9();
SELECT efo_used();

-- and ALTER ROLE ... SET, in the role's new sessions
DO $$ BEGIN EXECUTE format('ALTER ROLE %I SET streamhnsw.ef_search = 15', current_user); END $$;
\c
SET enable_seqscan = off;
SELECT efo_used();
SELECT source FROM pg_settings WHERE name = 'streamhnsw.ef_search';
DO $$ BEGIN EXECUTE format('ALTER ROLE %I RESET streamhnsw.ef_search', current_user); END $$;
\c
SET enable_seqscan = off;
SELECT efo_used();
SELECT source FROM pg_settings WHERE name = 'streamhnsw.ef_search';

-- a new value of the option reaches the next scan; RESET removes it
ALTER INDEX efo_idx SET (ef_search = 3);
SELECT efo_used();
SELECT id FROM efo_t ORDER BY val <-> '[1.4375,2.3125,3.0625]' LIMIT 3;
ALTER INDEX efo_idx RESET (ef_search);
SELECT reloptions FROM pg_class WHERE relname = 'efo_idx';
SELECT efo_used();

-- beside the build options, and on a halfvec index
ALTER INDEX efo_idx SET (ef_search = 25, ef_construction = 100);
SELECT reloptions FROM pg_class WHERE relname = 'efo_idx';
SELECT efo_used();
DROP INDEX efo_idx;
CREATE INDEX efo_half ON efo_t USING streamhnsw ((val::halfvec(3)) halfvec_l2_ops) WITH (ef_search = 11);
SELECT efo_used($q$SELECT id FROM efo_t ORDER BY val::halfvec(3) <-> '[1,2,3]' LIMIT 1$q$);
SELECT id FROM efo_t ORDER BY val::halfvec(3) <-> '[1.4375,2.3125,3.0625]' LIMIT 3;

RESET enable_seqscan;
DROP FUNCTION efo_used_at_9();
DROP FUNCTION efo_used(text);
DROP TABLE efo_t;
