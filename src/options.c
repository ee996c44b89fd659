/*-------------------------------------------------------------------------
 *
 * options.c
 *	  Reloptions (m, ef_construction, ef_search) and the GUCs. The bottom
 *	  of the server side: the AM phases read these variables, and this
 *	  file calls none of them (src/README, Layers).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/rel.h"

#include "options.h"

int			shnsw_ef_search = SHNSW_DEFAULT_EF_SEARCH;
int			shnsw_max_scan_tuples = SHNSW_DEFAULT_MAX_SCAN_TUPLES;
int			shnsw_io_mode = SHNSW_IO_STREAM;
int			shnsw_max_read_ahead = SHNSW_DEFAULT_MAX_READ_AHEAD;
int			shnsw_lookahead_window = SHNSW_DEFAULT_LOOKAHEAD_WINDOW;
int			shnsw_heap_prefetch = SHNSW_DEFAULT_HEAP_PREFETCH;
bool		shnsw_debug_discard_caches = false;
bool		shnsw_debug_list_conflicts = false;
int			shnsw_debug_io_cap = -1;
bool		shnsw_debug_keep_lists = false;
bool		shnsw_debug_build_floats = false;
int			shnsw_iterative_scan = SHNSW_ITERATIVE_STRICT;
double		shnsw_sweep_threshold = SHNSW_DEFAULT_SWEEP_THRESHOLD;

static const struct config_enum_entry io_mode_options[] = {
	{"sync", SHNSW_IO_SYNC, false},
	{"stream", SHNSW_IO_STREAM, false},
	{NULL, 0, false}
};

static const struct config_enum_entry iterative_scan_options[] = {
	{"strict_order", SHNSW_ITERATIVE_STRICT, false},
	{"relaxed_order", SHNSW_ITERATIVE_RELAXED, false},
	{NULL, 0, false}
};

static relopt_kind shnsw_relopt_kind;

/* streamhnsw.ef_search's GUC record, for its source (shnsw_scan_ef_search) */
static struct config_generic *ef_search_guc = NULL;

/*
 * A setting as DefineCustom*Variable takes it: its type says which
 * (PGC_BOOL, PGC_INT, PGC_REAL or PGC_ENUM), boot, min and max are its
 * default and range (a bool's default: 0 or 1), options an enum's values.
 */
typedef struct ShnswSetting
{
	const char *name;
	const char *short_desc;
	const char *long_desc;
	enum config_type type;
	void	   *var;
	double		boot;
	double		min;
	double		max;
	const struct config_enum_entry *options;
} ShnswSetting;

/* What a user may set; PGC_USERSET. */
static const ShnswSetting user_settings[] = {
	{"streamhnsw.ef_search",
		"Size of the dynamic candidate list of a search.",
		"Larger values give better recall and slower searches. Where this setting is not set (SET, ALTER ROLE/DATABASE, postgresql.conf, connection options), an index's ef_search option applies.",
	PGC_INT, &shnsw_ef_search, SHNSW_DEFAULT_EF_SEARCH, SHNSW_MIN_EF_SEARCH, SHNSW_MAX_EF_SEARCH},
	{"streamhnsw.max_scan_tuples",
		"Maximum number of nodes a scan examines once its first round is done.",
		"Bounds iterative scans that keep searching for rows a WHERE clause filters out.",
	PGC_INT, &shnsw_max_scan_tuples, SHNSW_DEFAULT_MAX_SCAN_TUPLES, SHNSW_MIN_MAX_SCAN_TUPLES, INT_MAX},
	{"streamhnsw.sweep_threshold",
		"Share of the index a strict scan's walk sees before it reads the whole index (1: never).",
		"An opt-in for exact answers: when max_scan_tuples covers every node, a strict_order scan that has seen this share of the nodes reads every graph page once instead of running another round, so that no later row is returned on the graph's premise; 0 sweeps right after the first round, before any row is returned (exact and complete, at the cost of reading the index in every scan). The default, 1, never sweeps a scan by itself.",
	PGC_REAL, &shnsw_sweep_threshold, SHNSW_DEFAULT_SWEEP_THRESHOLD, 0.0, 1.0},
	{"streamhnsw.iterative_scan",
		"Order in which an iterative scan returns rows.",
		"strict_order returns rows in exact distance order, holding each back while a bounded extra search can still find a closer one, and skips a row found after a farther one was returned; relaxed_order returns each round's rows as soon as they are re-ranked, rows found late out of order.",
	PGC_ENUM, &shnsw_iterative_scan, SHNSW_ITERATIVE_STRICT, 0, 0, iterative_scan_options},
	{"streamhnsw.io_mode",
		"How scans read index pages.",
		"sync reads one page at a time; stream keeps asynchronous reads in flight.",
	PGC_ENUM, &shnsw_io_mode, SHNSW_IO_STREAM, 0, 0, io_mode_options},
	{"streamhnsw.max_read_ahead",
		"Maximum number of pages a scan keeps pinned for read-ahead.",
		"Also bounded by the backend's share of shared buffers.",
	PGC_INT, &shnsw_max_read_ahead, SHNSW_DEFAULT_MAX_READ_AHEAD, 1, 1024},
	{"streamhnsw.heap_prefetch",
		"Number of result rows whose heap blocks a scan reads ahead of the executor (0: none).",
		"The first rows a scan returns have their heap blocks read together; the window doubles as rows are consumed, within effective_io_concurrency.",
	PGC_INT, &shnsw_heap_prefetch, SHNSW_DEFAULT_HEAP_PREFETCH, 0, 1024},
	{"streamhnsw.lookahead_window",
		"Number of page accesses the read-ahead controller averages its miss rate over.",
		NULL,
	PGC_INT, &shnsw_lookahead_window, SHNSW_DEFAULT_LOOKAHEAD_WINDOW, 1, 4096},
};

#ifdef USE_ASSERT_CHECKING
/*
 * The developer settings: test hooks and A/B switches that only the
 * assertion build (make DEV=1, which make test uses) has, there
 * superuser-only and hidden from SHOW ALL and postgresql.conf.sample. A
 * release build has none of them; their variables keep the defaults above.
 */
static const ShnswSetting debug_settings[] = {
	{"streamhnsw.debug_discard_caches",
		"Discards the index's cached description at every access-method call (developer setting, for tests).",
		"Wipes and frees rd_amcache through a relcache invalidation, as debug_discard_caches does in servers built with assertions.",
	PGC_BOOL, &shnsw_debug_discard_caches, false},
	{"streamhnsw.debug_list_conflicts",
		"Makes every neighbour-list change find its list changed, until it runs out of retries (developer setting, for tests).",
		NULL,
	PGC_BOOL, &shnsw_debug_list_conflicts, false},
	{"streamhnsw.debug_io_cap",
		"Caps a scan's reads in flight (developer setting, for A/B measurements).",
		"-1: from io_method and io_workers (reader.c); 0: no cap beyond effective_io_concurrency.",
	PGC_INT, &shnsw_debug_io_cap, -1, -1, 1024},
	{"streamhnsw.debug_keep_lists",
		"Keeps the neighbour list of every node a search over the shared cache sees, as the buffer path does (developer setting, for A/B measurements).",
		"Off: the list is read from the cache when the node is expanded.",
	PGC_BOOL, &shnsw_debug_keep_lists, false},
	{"streamhnsw.debug_build_floats",
		"Builds the in-memory graph on float vectors where it would link on half-precision ones (developer setting, for A/B measurements).",
		"Off: a graph on floats of 64 dimensions or more links on halves; the index written is the same format either way.",
	PGC_BOOL, &shnsw_debug_build_floats, false},
};
#endif

/* define_settings registers the n settings of set with context and flags. */
static void
define_settings(const ShnswSetting *set, int n, GucContext context, int flags)
{
	for (const ShnswSetting *s = set; s < set + n; s++)
	{
		switch (s->type)
		{
			case PGC_BOOL:
				DefineCustomBoolVariable(s->name, s->short_desc, s->long_desc, (bool *) s->var,
										 s->boot != 0, context, flags, NULL, NULL, NULL);
				break;
			case PGC_INT:
				DefineCustomIntVariable(s->name, s->short_desc, s->long_desc, (int *) s->var,
										(int) s->boot, (int) s->min, (int) s->max,
										context, flags, NULL, NULL, NULL);
				break;
			case PGC_REAL:
				DefineCustomRealVariable(s->name, s->short_desc, s->long_desc, (double *) s->var,
										 s->boot, s->min, s->max, context, flags, NULL, NULL, NULL);
				break;
			case PGC_ENUM:
				DefineCustomEnumVariable(s->name, s->short_desc, s->long_desc, (int *) s->var,
										 (int) s->boot, s->options, context, flags, NULL, NULL, NULL);
				break;
			default:
				elog(ERROR, "setting \"%s\" has an unknown type", s->name);
		}
	}
}

/*
 * shnsw_init_options registers reloptions and GUCs; called once from _PG_init.
 */
void
shnsw_init_options(void)
{
	shnsw_relopt_kind = add_reloption_kind();
	add_int_reloption(shnsw_relopt_kind, "m",
					  "Maximum number of neighbours per node on upper layers (twice that on layer 0)",
					  SHNSW_DEFAULT_M, SHNSW_MIN_M, SHNSW_MAX_M_OPTION,
					  AccessExclusiveLock);
	add_int_reloption(shnsw_relopt_kind, "ef_construction",
					  "Size of the dynamic candidate list while building the graph",
					  SHNSW_DEFAULT_EF_CONSTRUCTION, SHNSW_MIN_EF_CONSTRUCTION,
					  SHNSW_MAX_EF_CONSTRUCTION, AccessExclusiveLock);

	/*
	 * Scans read ef_search at their start (shnsw_scan_ef_search), and
	 * nothing on disk depends on it: ALTER INDEX ... SET (ef_search) takes
	 * the lock of the other settings that leave reads and writes running
	 * (as fillfactor does), and conflicts only with VACUUM, ANALYZE, CREATE
	 * INDEX CONCURRENTLY and other such changes. Its default, -1, outside
	 * the range as autovacuum's reloptions have it, means "not given".
	 */
	add_int_reloption(shnsw_relopt_kind, "ef_search",
					  "Size of the dynamic candidate list of a search on this index, when streamhnsw.ef_search is not set",
					  -1, SHNSW_MIN_EF_SEARCH, SHNSW_MAX_EF_SEARCH,
					  ShareUpdateExclusiveLock);

	define_settings(user_settings, lengthof(user_settings), PGC_USERSET, 0);
	ef_search_guc = find_option("streamhnsw.ef_search", false, false, ERROR);
#ifdef USE_ASSERT_CHECKING
	define_settings(debug_settings, lengthof(debug_settings), PGC_SUSET,
					GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE);
#endif
	MarkGUCPrefixReserved("streamhnsw");
}

/*
 * shnsw_options parses and validates reloptions.
 */
bytea *
shnsw_options(Datum reloptions, bool validate)
{
	static const relopt_parse_elt tab[] = {
		{"m", RELOPT_TYPE_INT, offsetof(ShnswOptions, m)},
		{"ef_construction", RELOPT_TYPE_INT, offsetof(ShnswOptions, ef_construction)},
		{"ef_search", RELOPT_TYPE_INT, offsetof(ShnswOptions, ef_search)},
	};

	return (bytea *) build_reloptions(reloptions, validate, shnsw_relopt_kind,
									  sizeof(ShnswOptions), tab, lengthof(tab));
}

/* The m reloption (the build's; later the metapage's is what counts). */
int
shnsw_get_m(Relation index)
{
	ShnswOptions *opts = (ShnswOptions *) index->rd_options;

	return opts ? opts->m : SHNSW_DEFAULT_M;
}

/*
 * The ef_construction reloption: only a build reads it; inserts and VACUUM
 * use the metapage's (ShnswIndexInfo.ef_construction).
 */
int
shnsw_get_ef_construction(Relation index)
{
	ShnswOptions *opts = (ShnswOptions *) index->rd_options;

	return opts ? opts->ef_construction : SHNSW_DEFAULT_EF_CONSTRUCTION;
}

/*
 * shnsw_scan_ef_search: the ef_search a scan of `index` uses, and whether it
 * is the index's option (*from_index). The session's streamhnsw.ef_search
 * wins whenever it is set by any means: SET or SET LOCAL (even to 40), a
 * function's SET clause, ALTER ROLE/DATABASE, postgresql.conf or the
 * connection's options. Only at its built-in default does the index's
 * option apply, when the index has one.
 *
 * "Set" is the GUC's source, not its value. A check of the value could not
 * tell SET ef_search = 40 from no setting at all; a sentinel default (0:
 * "the index's option") would put a width no search has into SHOW,
 * pg_settings and every tool that reads them, and widen the setting's
 * range for that one meaning. The source is what PostgreSQL records for
 * every setting (pg_settings.source; RESET and SET ... TO DEFAULT return
 * it to the default), so SHOW keeps printing the setting itself (40) and
 * EXPLAIN (ANALYZE) prints the width each scan used and where it came from
 * ("streamhnsw search: ef_search=100 (index option)"). Citus's shard
 * connections carry no SET from the coordinator, so there the index's
 * option reaches every shard (README, Scaling out with Citus).
 */
int
shnsw_scan_ef_search(Relation index, bool *from_index)
{
	ShnswOptions *opts = (ShnswOptions *) index->rd_options;

	*from_index = opts != NULL && opts->ef_search > 0 &&
		ef_search_guc->source <= PGC_S_DYNAMIC_DEFAULT;
	return *from_index ? opts->ef_search : shnsw_ef_search;
}
