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

#include "streamhnsw.h"

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
 * (bound.c, scan.c) after returning the rows within it, in either order.
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
	bool		sweep,
				covers,
				strict,
				first_round;
	double		walk_pages = 0;
	int			ef_search = SHNSW_DEFAULT_EF_SEARCH;
	bool		ef_from_index;

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

	/* rows the LIMIT takes, and the share of index rows that pass the filters */
	if (root->limit_tuples > 0)
		limit = root->limit_tuples;
	else if (root->tuple_fraction >= 1.0)
		limit = root->tuple_fraction;
	else
		limit = root->tuple_fraction * Max(path->path.rows, 1.0);
	{
		List	   *bounds = NIL,
				   *filters = NIL;
		ListCell   *lc;
		double		within;

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
			within = clauselist_selectivity(root, bounds, index->rel->relid,
											JOIN_INNER, NULL);
			if (within * selectivity * tuples < Max(limit, 1.0))
				returned = Max(within * tuples, 1.0);
		}
	}

	/* re-ranked rows; the search's distances (one per node record read) */
	reranked = Max((double) ef_search, returned > ef_search ? 2 * returned : returned);
	reranked = Min(reranked, tuples);
	visited = reranked * Max(m, (double) ef_search * 2 * m / Max(reranked, 1.0)) +
		log(tuples) / log(Max(m, 2)) * m;

	/*
	 * A scan sweeps the whole index only when the user asked for it
	 * (scan.c, scan_next_round: strict order, streamhnsw.sweep_threshold
	 * below 1 and a budget covering the index): a distance for every node
	 * and every index page read once, in order. Otherwise the walk ends at
	 * streamhnsw.max_scan_tuples, every node it saw re-ranked.
	 */
	covers = (double) shnsw_max_scan_tuples >= tuples;
	strict = shnsw_iterative_scan == SHNSW_ITERATIVE_STRICT;
	first_round = returned <= ef_search / 2.0;
	sweep = strict && covers && shnsw_sweep_threshold < 1.0 &&
		(shnsw_sweep_threshold == 0 ||
		 (!first_round && visited >= shnsw_sweep_threshold * tuples));
	if (sweep)
	{
		walk_pages = Min(visited, (double) shnsw_max_scan_tuples) / m;
		visited = tuples + Min(visited, (double) shnsw_max_scan_tuples);
	}
	else if (reranked > ef_search + (double) shnsw_max_scan_tuples)
	{
		/* past the budget: the walk stops, every node it saw re-ranked */
		reranked = Min(tuples, ef_search + (double) shnsw_max_scan_tuples);
		visited = Min(visited, reranked * m);
	}
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
	if (sweep)
	{
		pages = Max(index->pages, 1);
		page_cost = pages * seq_page_cost + ceil(walk_pages) * random_page_cost;
	}
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
