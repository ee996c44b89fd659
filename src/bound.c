/*-------------------------------------------------------------------------
 *
 * bound.c
 *	  Distance bounds: a WHERE clause that bounds the ORDER BY distance
 *	  (WHERE v <-> q < r ORDER BY v <-> q LIMIT k) ends the scan at r.
 *
 * The executor applies such a clause as a filter on the rows an index scan
 * returns; the access method never sees it. A strict-order scan that has
 * returned its last row within r would go on offering rows the filter
 * rejects, through the whole index when fewer than k rows lie within r:
 * 400 ms on 100,000 rows where pgvector's scan (which ends after ef_search
 * candidates) takes 1 ms. pgvector documents the pattern as the way to
 * combine a distance filter with its index.
 *
 * An ExecutorStart hook looks at each index scan node of a streamhnsw index
 * in the plan, finds the clauses of its filter that compare the node's
 * ORDER BY expression with a constant or a parameter (shnsw_distance_bound),
 * and keeps an expression state for each such value, keyed by the node's
 * instrumentation struct: PostgreSQL 18's executor passes that struct's
 * address to index_beginscan, so the scan finds its own entry
 * (shnsw_bound_for_scan) and evaluates the values at each rescan, as the
 * executor evaluates an index's run-time keys (a nested loop's parameters
 * may have changed). The scan ends when the next row it would return in
 * strict order is past the nearest bound (scan.c); the filter still runs on
 * every row returned, so a bound this file misses costs time, never rows.
 * Entries live in the query's memory context and unlink themselves when
 * that context goes, at the query's end or on error.
 *
 * The planner's cost estimate (handler.c) uses shnsw_distance_bound on the
 * same clauses: the rows within the bound are the first ones the scan
 * returns, not a sample of them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/relscan.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "utils/float.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "streamhnsw.h"

/* The bounds of one index scan node. */
typedef struct ShnswBoundEntry
{
	struct ShnswBoundEntry *next;
	const void *key;			/* &IndexScanState.iss_Instrument */
	PlanState  *ps;				/* the node, whose ExprContext evaluates */
	int			nvalues;
	ExprState **values;
	bool	   *inclusive;		/* <= rather than < */
	bool	   *is_float4;		/* the value's type; else float8 */
	MemoryContextCallback unlink;
} ShnswBoundEntry;

static ShnswBoundEntry *bound_entries = NULL;
static ExecutorStart_hook_type prev_executor_start = NULL;

/*
 * shnsw_distance_bound: whether clause bounds one of the ORDER BY
 * expressions orderbys from above: distance < value or <= value, value >
 * distance or >= value, with value a float8 or float4 expression of no
 * column and nothing volatile. The comparison's meaning is taken from the
 * btree operator families it belongs to. Sets *value and *inclusive.
 */
bool
shnsw_distance_bound(Expr *clause, List *orderbys, Expr **value, bool *inclusive)
{
	OpExpr	   *op;
	Expr	   *left,
			   *right;
	ListCell   *lc;

	if (!IsA(clause, OpExpr))
		return false;
	op = (OpExpr *) clause;
	if (list_length(op->args) != 2 || exprType((Node *) op) != BOOLOID)
		return false;
	left = linitial(op->args);
	right = lsecond(op->args);

	/* get_op_index_interpretation is PostgreSQL 18's name */
	foreach(lc, get_op_index_interpretation(op->opno))
	{
		OpIndexInterpretation *oi = (OpIndexInterpretation *) lfirst(lc);
		Expr	   *distance,
				   *other;

		if (oi->cmptype == COMPARE_LT || oi->cmptype == COMPARE_LE)
		{
			distance = left;
			other = right;
		}
		else if (oi->cmptype == COMPARE_GT || oi->cmptype == COMPARE_GE)
		{
			distance = right;
			other = left;
		}
		else
			continue;
		if (exprType((Node *) distance) != FLOAT8OID ||
			(exprType((Node *) other) != FLOAT8OID && exprType((Node *) other) != FLOAT4OID))
			continue;
		if (!list_member(orderbys, distance) || contain_var_clause((Node *) other) ||
			contain_volatile_functions((Node *) other))
			continue;
		*value = other;
		*inclusive = oi->cmptype == COMPARE_LE || oi->cmptype == COMPARE_GE;
		return true;
	}
	return false;
}

/* Unlinks an entry when its query's memory context goes. */
static void
bound_unlink(void *arg)
{
	ShnswBoundEntry *entry = (ShnswBoundEntry *) arg;

	for (ShnswBoundEntry **p = &bound_entries; *p != NULL; p = &(*p)->next)
	{
		if (*p == entry)
		{
			*p = entry->next;
			break;
		}
	}
}

/*
 * Registers the bounds of one index scan node of a streamhnsw index.
 * Only a constant or a parameter is taken as a value: evaluating it before
 * the filter would (at rescan, as the executor evaluates an index's
 * run-time keys) can then raise no error the query would not.
 */
static void
bound_register(IndexScanState *node, MemoryContext cxt)
{
	IndexScan  *plan = (IndexScan *) node->ss.ps.plan;
	List	   *orderbys;
	ListCell   *lc;
	ShnswBoundEntry *entry = NULL;
	int			cap = list_length(plan->scan.plan.qual);

	if (plan->indexorderbyorig == NIL)
		return;
	orderbys = list_make1(linitial(plan->indexorderbyorig));
	foreach(lc, plan->scan.plan.qual)
	{
		Expr	   *value;
		bool		inclusive;

		if (!shnsw_distance_bound((Expr *) lfirst(lc), orderbys, &value, &inclusive))
			continue;
		if (!IsA(value, Const) && !IsA(value, Param))
			continue;
		if (entry == NULL)
		{
			entry = MemoryContextAllocZero(cxt, sizeof(ShnswBoundEntry));
			entry->values = MemoryContextAlloc(cxt, sizeof(ExprState *) * cap);
			entry->inclusive = MemoryContextAlloc(cxt, sizeof(bool) * cap);
			entry->is_float4 = MemoryContextAlloc(cxt, sizeof(bool) * cap);
		}
		entry->values[entry->nvalues] = ExecInitExpr(value, &node->ss.ps);
		entry->inclusive[entry->nvalues] = inclusive;
		entry->is_float4[entry->nvalues] = exprType((Node *) value) == FLOAT4OID;
		entry->nvalues++;
	}
	if (entry == NULL)
		return;
	entry->key = &node->iss_Instrument;
	entry->ps = &node->ss.ps;
	entry->unlink.func = bound_unlink;
	entry->unlink.arg = entry;
	MemoryContextRegisterResetCallback(cxt, &entry->unlink);
	entry->next = bound_entries;
	bound_entries = entry;
}

static bool
bound_walker(PlanState *ps, void *context)
{
	if (ps == NULL)
		return false;
	if (IsA(ps, IndexScanState))
	{
		IndexScanState *node = (IndexScanState *) ps;

		/* the access method by name: this file calls nothing of scan.c */
		if (node->iss_RelationDesc != NULL &&
			node->iss_RelationDesc->rd_rel->relam == get_am_oid("streamhnsw", true))
			bound_register(node, (MemoryContext) context);
	}
	return planstate_tree_walker(ps, bound_walker, context);
}

static void
bound_executor_start(QueryDesc *queryDesc, int eflags)
{
	MemoryContext old;

	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);

	if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) || queryDesc->planstate == NULL)
		return;
	/* expression states belong to the query, as the node's own do */
	old = MemoryContextSwitchTo(queryDesc->estate->es_query_cxt);
	bound_walker(queryDesc->planstate, queryDesc->estate->es_query_cxt);
	MemoryContextSwitchTo(old);
}

/*
 * shnsw_bound_for_scan: the nearest distance bound of the WHERE clause
 * over this scan's node, evaluated now. False when there is none. A NULL
 * value passes no row: the bound is then minus infinity. A NaN value is
 * ignored (every number is below NaN).
 */
bool
shnsw_bound_for_scan(IndexScanDesc scan, double *bound, bool *inclusive)
{
	bool		found = false;

	if (scan->instrument == NULL)
		return false;
	for (ShnswBoundEntry *e = bound_entries; e != NULL; e = e->next)
	{
		if (e->key != (const void *) scan->instrument)
			continue;
		for (int i = 0; i < e->nvalues; i++)
		{
			bool		isnull;
			Datum		d = ExecEvalExprSwitchContext(e->values[i], e->ps->ps_ExprContext,
													  &isnull);
			double		v;

			if (isnull)
				v = -get_float8_infinity();
			else
				v = e->is_float4[i] ? (double) DatumGetFloat4(d) : DatumGetFloat8(d);
			if (isnan(v))
				continue;
			if (!found || v < *bound || (v == *bound && !e->inclusive[i]))
			{
				*bound = v;
				*inclusive = e->inclusive[i];
			}
			found = true;
		}
		break;
	}
	return found;
}

/*
 * shnsw_bound_init installs the ExecutorStart hook (from _PG_init: the
 * library is loaded by the planner's first look at a streamhnsw index,
 * before any plan using one starts).
 */
void
shnsw_bound_init(void)
{
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = bound_executor_start;
}
