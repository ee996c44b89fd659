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
 * ORDER BY expression with an expression of no column (shnsw_distance_bound),
 * and keeps an expression state for each such value, keyed by the node's
 * instrumentation struct: PostgreSQL 18's executor passes that struct's
 * address to index_beginscan, so the scan finds its own entry
 * (shnsw_bound_for_scan) and evaluates the values at each rescan, as the
 * executor evaluates an index's run-time keys (a nested loop's parameters
 * may have changed). The scan ends when the next row it would return in
 * strict order is past the nearest bound, or when no row it has not yet
 * returned can be within it (scan_order.c, scan_range_done: also in relaxed
 * order, which skips the rows it finds past the bound); the filter still
 * runs on every row returned, so a bound this file misses costs time,
 * never rows.
 * Entries live in the query's memory context and unlink themselves when
 * that context goes, at the query's end or on error.
 *
 * The compared side may also be a monotone function of the distance made
 * of float8 steps with a constant or parameter c: c - d, d + c, d - c, -d,
 * d * c and d / c (c a constant, so its sign is known), as in a cosine
 * similarity threshold, 1 - (v <=> q) > s, or pgvector's inner product,
 * (v <#> q) * -1 > s. The scan inverts the steps at rescan; a bound so
 * computed is widened by a few units in the last place of the values
 * involved (floating-point inversion is not exact), so the scan may offer
 * the filter one row it rejects, never end before a row it would keep.
 *
 * The planner's cost estimate (handler.c) uses shnsw_distance_bound on the
 * same clauses: the rows within the bound are the first ones the scan
 * returns, not a sample of them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "access/relscan.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/clauses.h"
#include "optimizer/optimizer.h"
#include "utils/float.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "bound.h"

/* One bound of a scan node: the value and the steps to invert. */
typedef struct ShnswBoundValue
{
	ExprState  *value;
	bool		inclusive;		/* <= rather than < */
	bool		is_float4;		/* the value's type; else float8 */
	int			nsteps;
	ShnswBoundStep steps[SHNSW_BOUND_MAX_STEPS];	/* outermost first */
	ExprState  *step_values[SHNSW_BOUND_MAX_STEPS];
} ShnswBoundValue;

/* The bounds of one index scan node. */
typedef struct ShnswBoundEntry
{
	struct ShnswBoundEntry *next;
	const void *key;			/* &IndexScanState.iss_Instrument */
	PlanState  *ps;				/* the node, whose ExprContext evaluates */
	int			nvalues;
	ShnswBoundValue *values;
	MemoryContextCallback unlink;
} ShnswBoundEntry;

static ShnswBoundEntry *bound_entries = NULL;
static ExecutorStart_hook_type prev_executor_start = NULL;

/* A constant or a parameter of type float8: no column, nothing to raise. */
static bool
bound_operand(Node *node)
{
	return (IsA(node, Const) || IsA(node, Param)) && exprType(node) == FLOAT8OID;
}

/*
 * Peels one monotone step off expr (see the file header) into *step:
 * returns the expression the step applies to, or NULL when expr is no
 * such step. A multiplier or divisor must be a non-zero constant.
 */
static Expr *
bound_peel(Expr *expr, ShnswBoundStep *step)
{
	OpExpr	   *op;
	Node	   *a,
			   *b;

	if (!IsA(expr, OpExpr))
		return NULL;
	op = (OpExpr *) expr;
	if (list_length(op->args) == 1 && op->opfuncid == F_FLOAT8UM)
	{
		step->kind = SHNSW_STEP_NEG;
		step->c = NULL;
		step->decreasing = true;
		return linitial(op->args);
	}
	if (list_length(op->args) != 2)
		return NULL;
	a = linitial(op->args);
	b = lsecond(op->args);
	switch (op->opfuncid)
	{
		case F_FLOAT8MI:		/* c - x decreases, x - c increases */
		case F_FLOAT8PL:
			if (bound_operand(a) && !bound_operand(b))
			{
				step->kind = op->opfuncid == F_FLOAT8MI ? SHNSW_STEP_C_MINUS : SHNSW_STEP_PLUS;
				step->c = (Expr *) a;
				step->decreasing = op->opfuncid == F_FLOAT8MI;
				return (Expr *) b;
			}
			if (bound_operand(b))
			{
				step->kind = op->opfuncid == F_FLOAT8MI ? SHNSW_STEP_MINUS : SHNSW_STEP_PLUS;
				step->c = (Expr *) b;
				step->decreasing = false;
				return (Expr *) a;
			}
			return NULL;
		case F_FLOAT8MUL:
		case F_FLOAT8DIV:
			{
				Node	   *c = IsA(b, Const) ? b : (op->opfuncid == F_FLOAT8MUL ? a : NULL);
				Expr	   *x = (Expr *) (c == b ? a : b);
				double		v;

				if (c == NULL || !IsA(c, Const) || exprType(c) != FLOAT8OID ||
					((Const *) c)->constisnull)
					return NULL;
				v = DatumGetFloat8(((Const *) c)->constvalue);
				if (v == 0 || isnan(v) || isinf(v))
					return NULL;
				step->kind = op->opfuncid == F_FLOAT8MUL ? SHNSW_STEP_TIMES : SHNSW_STEP_DIVIDED;
				step->c = (Expr *) c;
				step->decreasing = v < 0;
				return x;
			}
		default:
			return NULL;
	}
}

/*
 * shnsw_distance_bound: whether clause bounds one of the ORDER BY
 * expressions orderbys from above: f(distance) < value or <= value, value
 * > f(distance) or >= value, where f is the identity or a chain of
 * monotone steps (bound_peel) that, inverted, bounds the distance from
 * above, and value a float8 or float4 expression of no column and nothing
 * volatile. The comparison's meaning is taken from the btree operator
 * families it belongs to. Fills *shape.
 */
bool
shnsw_distance_bound(Expr *clause, List *orderbys, ShnswBoundShape *shape)
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
		Expr	   *small,
				   *large;

		if (oi->cmptype == COMPARE_LT || oi->cmptype == COMPARE_LE)
		{
			small = left;
			large = right;
		}
		else if (oi->cmptype == COMPARE_GT || oi->cmptype == COMPARE_GE)
		{
			small = right;
			large = left;
		}
		else
			continue;

		/*
		 * The distance's side: the smaller one (f increasing), or the
		 * larger one (f decreasing: a lower bound on f(d) bounds d above).
		 */
		for (int side = 0; side < 2; side++)
		{
			Expr	   *distance = side == 0 ? small : large;
			Expr	   *other = side == 0 ? large : small;
			bool		upper = side == 0;

			if (exprType((Node *) distance) != FLOAT8OID ||
				(exprType((Node *) other) != FLOAT8OID && exprType((Node *) other) != FLOAT4OID) ||
				contain_var_clause((Node *) other) || contain_volatile_functions((Node *) other))
				continue;

			/* peel monotone steps until the ORDER BY expression is reached */
			shape->nsteps = 0;
			while (distance != NULL && !list_member(orderbys, distance))
			{
				ShnswBoundStep *step = &shape->steps[shape->nsteps];

				if (shape->nsteps == SHNSW_BOUND_MAX_STEPS)
					distance = NULL;
				else if ((distance = bound_peel(distance, step)) != NULL)
				{
					shape->nsteps++;
					if (step->decreasing)
						upper = !upper;
				}
			}
			if (distance == NULL || !upper)
				continue;
			shape->value = other;
			shape->inclusive = oi->cmptype == COMPARE_LE || oi->cmptype == COMPARE_GE;
			return true;
		}
	}
	return false;
}

/*
 * bound_invert: the bound on the distance that value t of f(distance)
 * gives, through the steps outermost first; widened when there are steps.
 */
static double
bound_invert(const ShnswBoundValue *bv, double t, const double *c)
{
	double		x = t;
	double		scale = fabs(t);

	for (int i = 0; i < bv->nsteps; i++)
	{
		switch (bv->steps[i].kind)
		{
			case SHNSW_STEP_C_MINUS:
				x = c[i] - x;
				break;
			case SHNSW_STEP_PLUS:
				x = x - c[i];
				break;
			case SHNSW_STEP_MINUS:
				x = x + c[i];
				break;
			case SHNSW_STEP_NEG:
				x = -x;
				break;
			case SHNSW_STEP_TIMES:
				x = x / c[i];
				break;
			case SHNSW_STEP_DIVIDED:
				x = x * c[i];
				break;
		}
		scale = Max(scale, Max(fabs(x), bv->steps[i].c ? fabs(c[i]) : 0));
	}
	/* each step rounds once: 4 units in the last place of the largest */
	if (bv->nsteps > 0)
		x += 4 * (bv->nsteps + 1) * DBL_EPSILON * scale;
	return x;
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
 * Registers the bounds of one ordered index scan node of a streamhnsw
 * index (bound_walker has checked it has ORDER BY and a filter). A
 * value is evaluated at rescan, before the filter first would, exactly as
 * the executor evaluates an index's run-time keys (col < 1 / $1 raises its
 * error there too, rows or none); one with a subquery is not taken.
 */
static void
bound_register(IndexScanState *node, MemoryContext cxt)
{
	IndexScan  *plan = (IndexScan *) node->ss.ps.plan;
	List	   *orderbys;
	ListCell   *lc;
	ShnswBoundEntry *entry = NULL;
	int			cap = list_length(plan->scan.plan.qual);

	orderbys = list_make1(linitial(plan->indexorderbyorig));
	foreach(lc, plan->scan.plan.qual)
	{
		ShnswBoundShape shape;
		ShnswBoundValue *bv;

		if (!shnsw_distance_bound((Expr *) lfirst(lc), orderbys, &shape))
			continue;
		if (contain_subplans((Node *) shape.value))
			continue;
		if (entry == NULL)
		{
			entry = MemoryContextAllocZero(cxt, sizeof(ShnswBoundEntry));
			entry->values = MemoryContextAllocZero(cxt, sizeof(ShnswBoundValue) * cap);
		}
		bv = &entry->values[entry->nvalues++];
		bv->value = ExecInitExpr(shape.value, &node->ss.ps);
		bv->inclusive = shape.inclusive;
		bv->is_float4 = exprType((Node *) shape.value) == FLOAT4OID;
		bv->nsteps = shape.nsteps;
		for (int i = 0; i < shape.nsteps; i++)
		{
			bv->steps[i] = shape.steps[i];
			bv->step_values[i] = shape.steps[i].c ? ExecInitExpr(shape.steps[i].c, &node->ss.ps) : NULL;
		}
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
		IndexScan  *plan = (IndexScan *) ps->plan;

		/*
		 * Only an ordered scan with a filter can have a bound: other index
		 * scans (every btree lookup) cost no catalog lookup. The access
		 * method by name: this file calls nothing of the scan_*.c files.
		 */
		if (plan->indexorderbyorig != NIL && plan->scan.plan.qual != NIL &&
			node->iss_RelationDesc != NULL &&
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
			const ShnswBoundValue *bv = &e->values[i];
			bool		isnull;
			Datum		d = ExecEvalExprSwitchContext(bv->value, e->ps->ps_ExprContext,
													  &isnull);
			double		c[SHNSW_BOUND_MAX_STEPS];
			double		v;

			v = isnull ? 0 : bv->is_float4 ? (double) DatumGetFloat4(d) : DatumGetFloat8(d);
			for (int k = 0; k < bv->nsteps && !isnull; k++)
			{
				if (bv->step_values[k] == NULL)
					continue;
				d = ExecEvalExprSwitchContext(bv->step_values[k], e->ps->ps_ExprContext,
											  &isnull);
				c[k] = isnull ? 0 : DatumGetFloat8(d);
			}
			/* a NULL anywhere makes the clause NULL: it passes no row */
			if (isnull)
				v = -get_float8_infinity();
			else
				v = bound_invert(bv, v, c);
			if (isnan(v))
				continue;
			if (!found || v < *bound || (v == *bound && !bv->inclusive))
			{
				*bound = v;
				*inclusive = bv->inclusive;
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
