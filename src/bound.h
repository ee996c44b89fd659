/*-------------------------------------------------------------------------
 *
 * bound.h
 *	  A WHERE clause that bounds the ORDER BY distance ends the scan there
 *	  (bound.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_BOUND_H
#define STREAMHNSW_BOUND_H

#include "access/genam.h"
#include "access/relscan.h"
#include "nodes/primnodes.h"
#include "nodes/pg_list.h"

/* bound.c: a monotone step between the distance and the compared value */
typedef enum ShnswStepKind
{
	SHNSW_STEP_C_MINUS,			/* c - x */
	SHNSW_STEP_PLUS,			/* x + c, c + x */
	SHNSW_STEP_MINUS,			/* x - c */
	SHNSW_STEP_NEG,				/* -x */
	SHNSW_STEP_TIMES,			/* x * c, c * x (c a non-zero constant) */
	SHNSW_STEP_DIVIDED			/* x / c (c a non-zero constant) */
} ShnswStepKind;

#define SHNSW_BOUND_MAX_STEPS 4

typedef struct ShnswBoundStep
{
	ShnswStepKind kind;
	Expr	   *c;				/* NULL for SHNSW_STEP_NEG */
	bool		decreasing;
} ShnswBoundStep;

/* What shnsw_distance_bound found: f(distance) < value, f the steps. */
typedef struct ShnswBoundShape
{
	Expr	   *value;
	bool		inclusive;		/* <= rather than < */
	int			nsteps;
	ShnswBoundStep steps[SHNSW_BOUND_MAX_STEPS];	/* outermost first */
} ShnswBoundShape;

extern bool shnsw_distance_bound(Expr *clause, List *orderbys, ShnswBoundShape *shape);
extern bool shnsw_bound_for_scan(IndexScanDesc scan, double *bound, bool *inclusive);
extern void shnsw_bound_init(void);

#endif							/* STREAMHNSW_BOUND_H */
