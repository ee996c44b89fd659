/*-------------------------------------------------------------------------
 *
 * handler.c
 *	  The access method handler, reloptions, GUCs and cost estimation.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "access/reloptions.h"
#include "commands/progress.h"
#include "commands/vacuum.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "utils/float.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/selfuncs.h"
#include "utils/spccache.h"

#include "streamhnsw.h"

int			shnsw_ef_search = SHNSW_DEFAULT_EF_SEARCH;
int			shnsw_max_scan_tuples = SHNSW_DEFAULT_MAX_SCAN_TUPLES;
int			shnsw_io_mode = SHNSW_IO_STREAM;
int			shnsw_max_read_ahead = SHNSW_DEFAULT_MAX_READ_AHEAD;
int			shnsw_lookahead_window = SHNSW_DEFAULT_LOOKAHEAD_WINDOW;
int			shnsw_heap_prefetch = SHNSW_DEFAULT_HEAP_PREFETCH;
bool		shnsw_debug_discard_caches = false;
bool		shnsw_debug_list_conflicts = false;
int			shnsw_iterative_scan = SHNSW_ITERATIVE_STRICT;

static const struct config_enum_entry io_mode_options[] = {
	{"sync", SHNSW_IO_SYNC, false},
	{"prefetch", SHNSW_IO_PREFETCH, false},
	{"stream", SHNSW_IO_STREAM, false},
	{NULL, 0, false}
};

static const struct config_enum_entry iterative_scan_options[] = {
	{"strict_order", SHNSW_ITERATIVE_STRICT, false},
	{"relaxed_order", SHNSW_ITERATIVE_RELAXED, false},
	{NULL, 0, false}
};

static relopt_kind shnsw_relopt_kind;

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

	DefineCustomIntVariable("streamhnsw.ef_search",
							"Size of the dynamic candidate list of a search.",
							"Larger values give better recall and slower searches.",
							&shnsw_ef_search, SHNSW_DEFAULT_EF_SEARCH,
							SHNSW_MIN_EF_SEARCH, SHNSW_MAX_EF_SEARCH,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamhnsw.max_scan_tuples",
							"Maximum number of nodes a scan examines once its first round is done.",
							"Bounds iterative scans that keep searching for rows a WHERE clause filters out.",
							&shnsw_max_scan_tuples, SHNSW_DEFAULT_MAX_SCAN_TUPLES,
							SHNSW_MIN_MAX_SCAN_TUPLES, INT_MAX,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("streamhnsw.iterative_scan",
							 "Order in which an iterative scan returns rows.",
							 "strict_order returns rows in exact distance order, holding each back until no row the search can still find is closer; relaxed_order returns each round's rows as soon as they are re-ranked, rows found late out of order.",
							 &shnsw_iterative_scan, SHNSW_ITERATIVE_STRICT, iterative_scan_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("streamhnsw.io_mode",
							 "How scans read index pages.",
							 "sync reads one page at a time; prefetch adds posix_fadvise hints; stream keeps asynchronous reads in flight.",
							 &shnsw_io_mode, SHNSW_IO_STREAM, io_mode_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamhnsw.max_read_ahead",
							"Maximum number of pages a scan keeps pinned for read-ahead.",
							"Also bounded by the backend's share of shared buffers.",
							&shnsw_max_read_ahead, SHNSW_DEFAULT_MAX_READ_AHEAD, 1, 1024,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamhnsw.heap_prefetch",
							"Number of result rows whose heap blocks a scan reads ahead of the executor (0: none).",
							"The first rows a scan returns have their heap blocks read together; the window doubles as rows are consumed, within effective_io_concurrency.",
							&shnsw_heap_prefetch, SHNSW_DEFAULT_HEAP_PREFETCH, 0, 1024,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamhnsw.lookahead_window",
							"Number of page accesses the read-ahead controller averages its miss rate over.",
							NULL,
							&shnsw_lookahead_window, SHNSW_DEFAULT_LOOKAHEAD_WINDOW, 1, 4096,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("streamhnsw.debug_discard_caches",
							 "Discards the index's cached description at every access-method call (developer setting, for tests).",
							 "Wipes and frees rd_amcache through a relcache invalidation, as debug_discard_caches does in servers built with assertions.",
							 &shnsw_debug_discard_caches, false,
							 PGC_SUSET, GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);
	DefineCustomBoolVariable("streamhnsw.debug_list_conflicts",
							 "Makes every neighbour-list change find its list changed, until it runs out of retries (developer setting, for tests).",
							 NULL,
							 &shnsw_debug_list_conflicts, false,
							 PGC_SUSET, GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);
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
	};

	return (bytea *) build_reloptions(reloptions, validate, shnsw_relopt_kind,
									  sizeof(ShnswOptions), tab, lengthof(tab));
}

int
shnsw_get_m(Relation index)
{
	ShnswOptions *opts = (ShnswOptions *) index->rd_options;

	return opts ? opts->m : SHNSW_DEFAULT_M;
}

int
shnsw_get_ef_construction(Relation index)
{
	ShnswOptions *opts = (ShnswOptions *) index->rd_options;

	return opts ? opts->ef_construction : SHNSW_DEFAULT_EF_CONSTRUCTION;
}

/*
 * shnsw_costestimate: the search does its work before returning the rows
 * the LIMIT takes, so startup cost is the whole cost. To return k rows
 * that pass the query's other conditions (selectivity s), the scan returns
 * about k / s rows: it re-ranks at least ef_search of them and, past the
 * first round, about twice the rows it returns (a continuation round
 * doubles its width and returns only what is inside the frontier of the
 * one before), expanding each and reading up to 2m neighbour records per
 * expansion, m new ones on average, the whole index at most. Rows past
 * max_scan_tuples more examined nodes are only those already seen; such a
 * scan is charged as reading every node. The heap fetches of the k / s
 * rows are charged by the planner (cost_index prorates them by the LIMIT).
 * So a filter that keeps few rows makes the index cost as much as reading
 * the table, and a sequential scan and sort, which is exact, wins.
 *
 * Without ORDER BY the index is useless; without a LIMIT (or a tuple
 * fraction the planner expects to stop early at) the executor would read
 * every row through the index, so a sequential scan and sort is chosen.
 */
void
shnsw_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
				   Cost *indexStartupCost, Cost *indexTotalCost,
				   Selectivity *indexSelectivity, double *indexCorrelation,
				   double *indexPages)
{
	GenericCosts costs;
	IndexOptInfo *index = path->indexinfo;
	double		tuples = Max(index->tuples, 1.0);
	int			m = SHNSW_DEFAULT_M;
	double		visited;
	double		limit,
				selectivity,
				returned,
				reranked;
	double		random_page_cost,
				seq_page_cost,
				pages,
				page_cost;
	bool		limited = root->limit_tuples > 0 || root->tuple_fraction > 0.0;

	if (path->indexorderbys == NIL || !limited)
	{
		*indexStartupCost = get_float8_infinity();
		*indexTotalCost = get_float8_infinity();
		*indexSelectivity = 0;
		*indexCorrelation = 0;
		*indexPages = 0;
		/* PostgreSQL 18 compares disabled nodes before costs */
		path->path.disabled_nodes = 2;
		return;
	}

	{
		Relation	rel = index_open(index->indexoid, NoLock);

		m = shnsw_get_m(rel);
		index_close(rel, NoLock);
	}

	/* rows the LIMIT takes, and the share of index rows that pass the filters */
	if (root->limit_tuples > 0)
		limit = root->limit_tuples;
	else if (root->tuple_fraction >= 1.0)
		limit = root->tuple_fraction;
	else
		limit = root->tuple_fraction * Max(path->path.rows, 1.0);
	selectivity = clauselist_selectivity(root, index->indrestrictinfo, index->rel->relid,
										 JOIN_INNER, NULL);
	selectivity = Max(Min(selectivity, 1.0), 1.0 / tuples);
	returned = Min(Max(limit, 1.0) / selectivity, tuples);

	/* re-ranked rows; the search's distances (one per node record read) */
	reranked = Max((double) shnsw_ef_search, returned > shnsw_ef_search ? 2 * returned : returned);
	if (reranked > shnsw_ef_search + (double) shnsw_max_scan_tuples)
		reranked = tuples;
	reranked = Min(reranked, tuples);
	visited = reranked * Max(m, (double) shnsw_ef_search * 2 * m / Max(reranked, 1.0)) +
		log(tuples) / log(Max(m, 2)) * m;
	MemSet(&costs, 0, sizeof(costs));
	costs.numIndexTuples = Min(visited, tuples);
	genericcostestimate(root, path, loop_count, &costs);

	/*
	 * Neighbours are laid out near each other: count a page per m records.
	 * A sequential scan is charged only for its heap pages, not for the
	 * TOAST pages that hold vectors over ~2 kB nor for per-dimension work,
	 * so charge our page reads no more than that scan's page cost.
	 */
	get_tablespace_page_costs(index->reltablespace, &random_page_cost, &seq_page_cost);
	pages = Min(costs.numIndexPages, ceil(costs.numIndexTuples / m) + 1);
	page_cost = Min(pages * random_page_cost,
					Max(index->rel->pages, 1) * seq_page_cost);
	costs.indexTotalCost += page_cost - costs.numIndexPages * random_page_cost;
	costs.numIndexPages = pages;

	/* re-ranking reads and compares exact vectors */
	costs.indexTotalCost += reranked * 4 * cpu_operator_cost;

	*indexStartupCost = costs.indexTotalCost;
	*indexTotalCost = costs.indexTotalCost;
	*indexSelectivity = costs.indexSelectivity;
	*indexCorrelation = 0;
	*indexPages = costs.numIndexPages;
}

/*
 * shnsw_buildphasename names the CREATE INDEX phases in
 * pg_stat_progress_create_index.
 */
static char *
shnsw_buildphasename(int64 phasenum)
{
	switch (phasenum)
	{
		case PROGRESS_CREATEIDX_SUBPHASE_INITIALIZE:
			return "initializing";
		case SHNSW_PHASE_LOAD:
			return "loading tuples";
		case SHNSW_PHASE_GRAPH:
			return "building graph";
		case SHNSW_PHASE_WRITE:
			return "writing index";
		case SHNSW_PHASE_INSERT:
			return "inserting remaining tuples";
		default:
			return NULL;
	}
}

PG_FUNCTION_INFO_V1(streamhnsw_handler);

/*
 * streamhnsw_handler returns the IndexAmRoutine of the access method.
 */
Datum
streamhnsw_handler(PG_FUNCTION_ARGS)
{
	IndexAmRoutine *amroutine = makeNode(IndexAmRoutine);

	amroutine->amstrategies = 0;
	amroutine->amsupport = SHNSW_NPROCS;
	amroutine->amoptsprocnum = 0;
	amroutine->amcanorder = false;
	amroutine->amcanorderbyop = true;
	amroutine->amcanhash = false;
	amroutine->amconsistentequality = false;
	amroutine->amconsistentordering = false;
	amroutine->amcanbackward = false;
	amroutine->amcanunique = false;
	amroutine->amcanmulticol = false;
	amroutine->amoptionalkey = true;
	amroutine->amsearcharray = false;
	amroutine->amsearchnulls = false;
	amroutine->amstorage = false;
	amroutine->amclusterable = false;
	amroutine->ampredlocks = false;
	amroutine->amcanparallel = false;
	amroutine->amcanbuildparallel = false;
	amroutine->amcaninclude = false;
	amroutine->amusemaintenanceworkmem = true;
	amroutine->amsummarizing = false;
	amroutine->amparallelvacuumoptions = VACUUM_OPTION_PARALLEL_BULKDEL;
	amroutine->amkeytype = InvalidOid;

	amroutine->ambuild = shnsw_build;
	amroutine->ambuildempty = shnsw_buildempty;
	amroutine->aminsert = shnsw_insert;
	amroutine->aminsertcleanup = NULL;
	amroutine->ambulkdelete = shnsw_bulkdelete;
	amroutine->amvacuumcleanup = shnsw_vacuumcleanup;
	amroutine->amcanreturn = NULL;
	amroutine->amcostestimate = shnsw_costestimate;
	amroutine->amgettreeheight = NULL;
	amroutine->amoptions = shnsw_options;
	amroutine->amproperty = NULL;
	amroutine->ambuildphasename = shnsw_buildphasename;
	amroutine->amvalidate = shnsw_validate;
	amroutine->amadjustmembers = NULL;
	amroutine->ambeginscan = shnsw_beginscan;
	amroutine->amrescan = shnsw_rescan;
	amroutine->amgettuple = shnsw_gettuple;
	amroutine->amgetbitmap = NULL;
	amroutine->amendscan = shnsw_endscan;
	amroutine->ammarkpos = NULL;
	amroutine->amrestrpos = NULL;
	amroutine->amestimateparallelscan = NULL;
	amroutine->aminitparallelscan = NULL;
	amroutine->amparallelrescan = NULL;
	amroutine->amtranslatestrategy = NULL;
	amroutine->amtranslatecmptype = NULL;

	PG_RETURN_POINTER(amroutine);
}
