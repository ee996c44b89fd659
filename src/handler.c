/*-------------------------------------------------------------------------
 *
 * handler.c
 *	  The access method handler (IndexAmRoutine), cost estimation and
 *	  CREATE INDEX phase names. The top of the server side: it points at
 *	  every AM phase and nothing calls into it (src/README, Layers).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "commands/progress.h"
#include "commands/vacuum.h"
#include "nodes/pathnodes.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "utils/float.h"
#include "utils/rel.h"
#include "utils/selfuncs.h"
#include "utils/spccache.h"

#include "bound.h"
#include "build.h"
#include "insert.h"
#include "options.h"
#include "scan.h"
#include "vacuum.h"
#include "validate.h"
#include "vector.h"

/* What a scan is expected to do, for shnsw_costestimate. */
typedef struct ShnswScanCost
{
	double		returned;		/* rows the scan returns */
	double		reranked;		/* rows it re-ranks */
	double		visited;		/* node records it reads (a distance each) */
	bool		sweep;			/* it reads the whole index once */
	double		walk_pages;		/* if so, the pages its walk reads first */
} ShnswScanCost;

/*
 * cost_rows_returned: how many rows the scan returns for the LIMIT to get
 * its rows past the query's other conditions; a bound on the ORDER BY
 * distance (bound.c) counts as a LIMIT when it keeps fewer rows.
 */
static double
cost_rows_returned(PlannerInfo *root, IndexPath *path, double tuples)
{
	IndexOptInfo *index = path->indexinfo;
	List	   *bounds = NIL,
			   *filters = NIL;
	ListCell   *lc;
	double		limit,
				selectivity,
				returned;

	/* rows the LIMIT takes, and the share of index rows that pass the filters */
	if (root->limit_tuples > 0)
		limit = root->limit_tuples;
	else if (root->tuple_fraction >= 1.0)
		limit = root->tuple_fraction;
	else
		limit = root->tuple_fraction * Max(path->path.rows, 1.0);
	foreach(lc, index->indrestrictinfo)
	{
		RestrictInfo *rinfo = lfirst_node(RestrictInfo, lc);
		ShnswBoundShape shape;

		if (shnsw_distance_bound(rinfo->clause, path->indexorderbys, &shape))
			bounds = lappend(bounds, rinfo);
		else
			filters = lappend(filters, rinfo);
	}
	selectivity = clauselist_selectivity(root, filters, index->rel->relid,
										 JOIN_INNER, NULL);
	selectivity = Max(Min(selectivity, 1.0), 1.0 / tuples);
	returned = Min(Max(limit, 1.0) / selectivity, tuples);
	if (bounds != NIL)
	{
		double		within = clauselist_selectivity(root, bounds, index->rel->relid,
													JOIN_INNER, NULL);

		if (within * selectivity * tuples < Max(limit, 1.0))
			returned = Max(within * tuples, 1.0);
	}
	return returned;
}

/*
 * cost_scan_shape: the rows re-ranked and node records read to return
 * c->returned rows (set by the caller) from an index of `tuples` rows, and
 * whether the scan sweeps the index.
 */
static void
cost_scan_shape(ShnswScanCost *c, double tuples, int m, int ef_search)
{
	bool		covers,
				strict,
				first_round;

	/* re-ranked rows; the search's distances (one per node record read) */
	c->reranked = Max((double) ef_search, c->returned > ef_search ? 2 * c->returned : c->returned);
	c->reranked = Min(c->reranked, tuples);
	c->visited = c->reranked * Max(m, (double) ef_search * 2 * m / Max(c->reranked, 1.0)) +
		log(tuples) / log(Max(m, 2)) * m;
	c->walk_pages = 0;

	/*
	 * A scan sweeps the whole index only when the user asked for it
	 * (scan_order.c, scan_next_round: strict order,
	 * streamhnsw.sweep_threshold below 1 and a budget covering the index): a
	 * distance for every node and every index page read once, in order.
	 * Otherwise the walk ends at streamhnsw.max_scan_tuples, every node it
	 * saw re-ranked.
	 */
	covers = (double) shnsw_max_scan_tuples >= tuples;
	strict = shnsw_iterative_scan == SHNSW_ITERATIVE_STRICT;
	first_round = c->returned <= ef_search / 2.0;
	c->sweep = strict && covers && shnsw_sweep_threshold < 1.0 &&
		(shnsw_sweep_threshold == 0 ||
		 (!first_round && c->visited >= shnsw_sweep_threshold * tuples));
	if (c->sweep)
	{
		c->walk_pages = Min(c->visited, (double) shnsw_max_scan_tuples) / m;
		c->visited = tuples + Min(c->visited, (double) shnsw_max_scan_tuples);
	}
	else if (c->reranked > ef_search + (double) shnsw_max_scan_tuples)
	{
		/* past the budget: the walk stops, every node it saw re-ranked */
		c->reranked = Min(tuples, ef_search + (double) shnsw_max_scan_tuples);
		c->visited = Min(c->visited, c->reranked * m);
	}
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
 * A bound on the ORDER BY distance itself (WHERE v <-> q < r ORDER BY v <->
 * q, pgvector's documented way to combine a distance filter with an index)
 * is no such filter: the rows it keeps are the first ones the scan returns,
 * not a sample of them. If the planner expects at least the LIMIT's rows
 * within the bound (after the other filters), the scan returns the LIMIT's
 * rows and no more; if it expects fewer, the scan ends at the bound
 * (bound.c, scan_order.c) after returning the rows within it, in either order.
 *
 * Without ORDER BY the index is useless; without a LIMIT (or a tuple
 * fraction the planner expects to stop early at) the executor would read
 * every row through the index, so a sequential scan and sort is chosen.
 */
static void
shnsw_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
				   Cost *indexStartupCost, Cost *indexTotalCost,
				   Selectivity *indexSelectivity, double *indexCorrelation,
				   double *indexPages)
{
	GenericCosts costs;
	IndexOptInfo *index = path->indexinfo;
	double		tuples = Max(index->tuples, 1.0);
	int			m;
	int			ef_search;
	bool		ef_from_index;
	ShnswScanCost c;
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
		ef_search = shnsw_scan_ef_search(rel, &ef_from_index);
		index_close(rel, NoLock);
	}
	c.returned = cost_rows_returned(root, path, tuples);
	cost_scan_shape(&c, tuples, m, ef_search);
	MemSet(&costs, 0, sizeof(costs));
	costs.numIndexTuples = Min(c.visited, tuples);
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
	if (c.sweep)
	{
		pages = Max(index->pages, 1);
		page_cost = pages * seq_page_cost + ceil(c.walk_pages) * random_page_cost;
	}
	costs.indexTotalCost += page_cost - costs.numIndexPages * random_page_cost;
	costs.numIndexPages = pages;

	/* re-ranking reads and compares exact vectors */
	costs.indexTotalCost += c.reranked * 4 * cpu_operator_cost;

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
	amroutine->amcanbuildparallel = true;
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
