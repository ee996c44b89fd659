/*-------------------------------------------------------------------------
 *
 * codebound.h
 *	  SQ8 code distance bounds: what a node's navigation distance says
 *	  about its exact distance, and the clamp classes of values that lay
 *	  outside the trained range. Pure code.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_CODEBOUND_H
#define STREAMHNSW_CODEBOUND_H

#include <stdbool.h>
#include <stdint.h>

#include "format.h"

/*
 * What an SQ8 navigation distance says about the exact distance (in the
 * ORDER BY operator's units: l2_distance, negative inner product, cosine
 * distance, l1_distance) of the node it was computed for: scan_order.c returns a row only
 * when no node not yet re-ranked can be nearer (src/README, Scans).
 */
typedef struct ShnswCodeBound
{
	ShnswMetric metric;			/* the index's metric */
	bool		unbounded;		/* cosine, zero query: every distance is NaN */
	bool		sketched;		/* navigation on a sketch (a sparsevec of many
								 * dimensions): no code distance bounds an
								 * exact one (src/README, Sparse vectors) */
	double		err_abs;		/* SQ8 error, in exact-distance units */
	double		err_typ;		/* the error a row inside the trained range
								 * exceeds with odds below 1e-8
								 * (SHNSW_CODEBOUND_SIGMAS standard
								 * deviations of its rounding: a premise,
								 * not a proof) */
	double		err_rel;		/* float rounding, relative */
	double		qnorm;			/* |nav|: inner product's factor for a
								 * distance in the space of the values */
	double		res_range;		/* the largest |x - x'| of a value inside the
								 * trained range: sqrt(sum step_i^2) / 2, the
								 * unit of clamp classes (shnsw_clamp_unit) */
	int			dims;			/* for shnsw_codebound_code: */
	const float *nav;			/* the query's navigation form (caller's memory) */
	const float *lo;			/* SQ8 parameters (caller's memory) */
	const float *scale;
	double		rnd_l2;			/* float rounding's share, for */
	double		rnd_l1;
	double		rnd_ip;			/* shnsw_codebound_set_residual */
	double		mag;
} ShnswCodeBound;

/* standard deviations of the codes' rounding in ShnswCodeBound.err_typ */
#define SHNSW_CODEBOUND_SIGMAS	6.0

/*
 * Prepare the bound for query nav (the navigation form: normalized for
 * cosine) and SQ8 parameters lo/scale of dims dimensions. residual, if not
 * negative, is at least |x - x'| (shnsw_code_residual) for every node the
 * bound must hold for: the metapage's largest residual of any node placed
 * (clamped values included), so the bound holds for every node. Negative:
 * unknown (an index made before it was kept); the bound then takes the
 * largest error of a value inside the trained range (a clamped value can
 * be off by more: the caller widens err_abs when re-ranking shows it,
 * scan_order.c, scan_check_bound).
 */
extern void shnsw_codebound_prepare(ShnswCodeBound *b, ShnswMetric metric, bool unbounded,
									const float *nav, const float *lo, const float *scale,
									int dims, double residual);

/*
 * The same bound for another residual (not negative): what
 * shnsw_codebound_prepare with that residual gives, without its pass over
 * the dimensions (a scan prepares both, with and without the metapage's).
 */
extern void shnsw_codebound_set_residual(ShnswCodeBound *b, double residual);

/*
 * |v - x'| for the code of v (x' = lo + code * scale, decoded exactly), in
 * double, rounded up: what inserts and builds keep the largest of on the
 * metapage (max_residual). A value clamped into the trained range has its
 * true, larger residual. The norm is the metric's: the L1 norm under L1,
 * the Euclidean one under the others (residuals, excesses and clamp units
 * are all in the units of the bounds they widen).
 */
extern double shnsw_code_residual(ShnswMetric metric, const float *lo, const float *scale,
								  const float *v, const uint8_t *code, int dims);

/*
 * How far v lies outside the cells its code stands for: |v - y| for the
 * nearest y whose every value is within half a step (and float rounding)
 * of the value its code decodes to, rounded up; 0 but for a value outside
 * the trained range, clamped into it. Such a value's exact distance is at
 * most that much nearer than that of a value inside its cells (y), which
 * the typical error of the codes covers: inserts flag such nodes with a
 * class of the excess (shnsw_clamp_flags), and the first round of a scan
 * bounds them with it.
 */
extern double shnsw_code_excess(ShnswMetric metric, const float *lo, const float *scale,
								const float *v, const uint8_t *code, int dims);

/*
 * The unit of clamp classes for SQ8 steps scale: sqrt(sum scale_i^2) / 2
 * (under L1, sum scale_i / 2).
 */
extern double shnsw_clamp_unit(ShnswMetric metric, const float *scale, int dims);

/*
 * The largest excess clamp class k (1 .. SHNSW_NODE_CLAMP_CLASSES - 1)
 * stands for: unit * 2^((k - 20) / 4), from 0.037 to 6.7 units, each a
 * fifth above the last.
 */
extern double shnsw_clamp_class_limit(int k, double unit);

/*
 * A node's flags for an excess of its value (shnsw_code_excess): 0 when it
 * is 0; otherwise SHNSW_NODE_CLAMPED and the least class whose limit is at
 * least excess (class 0, unknown, when none is).
 */
extern uint8_t shnsw_clamp_flags(double excess, double unit);

/*
 * An upper bound on the exact distance of any node whose navigation
 * distance is est (the mirror of shnsw_codebound_lower; +infinity for a
 * zero cosine query).
 */
extern double shnsw_codebound_upper(const ShnswCodeBound *b, double est);

/*
 * A lower bound on the exact distance of any node whose navigation
 * distance is est (L2 and cosine navigate on |q - x'|^2, inner product on
 * -q.x', L1 on |q - x'|_1, x' the decoded code).
 */
extern double shnsw_codebound_lower(const ShnswCodeBound *b, double est);

/*
 * Whether a code has a value at either end of the range (0 or 255), where a
 * clamped value may lie beyond; never under the bit metrics, whose codes
 * are exact.
 */
extern bool shnsw_code_at_edge(ShnswMetric metric, const uint8_t *code, int dims);

/*
 * A lower bound on the exact distance of a node from its code alone that
 * holds even if its values were clamped into the trained range (inserted
 * after training): a dimension whose code is 0 or 255 may lie anywhere
 * beyond that end. The distance from the query to the box of values the
 * code allows (-infinity for inner product when the box is unbounded in
 * the query's direction). One pass over the code: the sweep uses it for
 * the codes shnsw_code_at_edge picks.
 */
extern double shnsw_codebound_code(const ShnswCodeBound *b, const uint8_t *code);

/*
 * The navigation distance d (of a query prepared for nav_metric: L2, L1
 * or inner product) taken slack nearer: L2 (and cosine, which navigates on
 * the squared L2 distance) (sqrt(d) - slack)^2, floored at 0; inner
 * product d - slack; L1 d - slack, floored at 0. Rounded down.
 */
extern float shnsw_clamp_distance(ShnswMetric nav_metric, float d, double slack);

#endif							/* STREAMHNSW_CODEBOUND_H */
