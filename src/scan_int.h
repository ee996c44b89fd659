/*-------------------------------------------------------------------------
 *
 * scan_int.h
 *	  The state of an ordered scan and what the scan_*.c files share.
 *
 * scan.c runs the scan (begin, rescan, gettuple, end); scan_order.c decides
 * when a held row may be returned (rounds, held rows, the emit bound);
 * scan_sweep.c offers every node of the index to the search; scan_heap.c
 * re-ranks candidates on their exact vectors and reads heap blocks ahead.
 * Nothing outside these files includes this header.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_SCAN_INT_H
#define STREAMHNSW_SCAN_INT_H

#include <math.h>

#include "access/genam.h"
#include "access/relscan.h"
#include "fmgr.h"
#include "utils/float.h"

#include "codebound.h"
#include "format.h"
#include "kernels.h"
#include "meta.h"
#include "nodesource.h"
#include "pageaccess.h"
#include "pqueue.h"
#include "reader.h"
#include "search.h"
#include "stats.h"

/*
 * deferred nodes re-ranked at a time, at most (scan_take_deferred); the
 * first round's re-ranked at once (scan_defer)
 */
#define SHNSW_DEFERRED_BATCH	16

/*
 * A scan of an index that navigates on a sketch (a sparsevec of more than
 * SHNSW_SPARSE_SKETCH_DIMS dimensions: src/README, Sparse vectors) walks
 * this many times ef_search wide, and re-ranks after each round's own rows
 * at most ef_search parked nodes (scan_take_cap): with the default it
 * re-ranks 3 * ef_search rows, as many as before, for twice the walk.
 */
#define SHNSW_SKETCH_WALK	2

/* A re-ranked row. */
typedef struct ShnswResult
{
	ItemPointerData tid;
	double		distance;
	uint32		ref;			/* tie-break: stable order for equal distances */
	uint32		cand;			/* its index in the search's candidates */
	int			round;			/* the search round that re-ranked it */
} ShnswResult;

/* The state of one ordered scan (IndexScanDesc->opaque). */
typedef struct ShnswScanOpaqueData
{
	MemoryContext ctx;			/* everything of one scan; reset by rescan */
	bool		first;
	bool		done;
	bool		null_query;

	ShnswIndexInfo *info;		/* our own copy (shnsw_get_index_info) */
	FmgrInfo   *distproc;
	Oid			collation;
	Datum		query;			/* detoasted copy in ctx */

	Sq8Query	sq;
	bool		live;			/* search and reader below are active */
	ShnswReader reader;
	ShnswScanStats stats;		/* folded figures of finished searches */
	ShnswPageCtx pctx;
	ShnswNodeSource ops;
	ShnswSearch search;
	ShnswRef	start;
	int			ef_search;		/* shnsw_scan_ef_search at the scan's start */
	int			round_ef;		/* the next round's width */
	uint32	   *outbuf;
	int			outcap;
	char	   *vecbuf;

	ShnswResult *results;		/* one round's re-ranked rows (NULL query: a page's) */
	int			nresults;
	int			next;
	int			rescap;
	uint64		nreturned;		/* rows returned so far */
	double		last_distance;

	/* the WHERE clause's bound on the distance (bound.c) */
	bool		ranged;
	bool		range_inclusive;
	double		range_end;

	/* rows re-ranked, not yet returned: a min-heap on (distance, ref) */
	ShnswResult *held;
	int			nheld;
	int			heldcap;
	int		   *held_per_round; /* how many held rows each round re-ranked */
	int			held_rounds_cap;
	int			oldest_held_round;
	bool		search_done;	/* no round will re-rank more rows */
	ShnswHeap	deferred;		/* a later round's results not yet re-ranked,
								 * by navigation distance (scan_defer) */
	bool		take_deferred;	/* the deferred nodes hold the emit bound */
	ShnswHeap	unexpanded;		/* re-ranked nodes by exact distance, until
								 * expanded (deleted ones: by their bound) */
	int			ntaken;			/* nodes taken from the parked ones this round */
	int			take_ahead_left;	/* takes before scan_take_ahead looks again */
	ShnswPair  *take_near;		/* scan_take_ahead's work array */
	int			take_near_cap;
	double		first_floor;	/* until a second round: the first round's
								 * median exact distance */
	float		widen_median;	/* after scan_widen: the navigation distance
								 * of the widened round's middle row */

	/* the exact-distance lower bound of a navigation distance */
	bool		unbounded;		/* every distance is NaN: any order is right */
	ShnswCodeBound	walk;			/* the first round's: the typical error
								 * (scan_lower_bound) */
	ShnswCodeBound	bound;			/* later rounds, before the sweep */
	ShnswCodeBound	proof;			/* after it: the largest residual's */

	/* the sweep: every node seen once the budget covers the index */
	bool		complete;		/* max_scan_tuples covers every node */
	uint64		node_count;		/* nodes ever placed, as the scan began */
	uint32		truncations;	/* the metapage's truncation count, then */
	bool		swept;
	bool		force_emit;		/* the proof has spent its allowance: return
								 * the nearest held row (scan_proof_may_search) */
	ShnswHeap	edge;			/* after the sweep: nodes whose codes reach an
								 * end of the range, by shnsw_codebound_code */
	bool		take_edge;		/* the edge heap holds the emit bound */
	bool		take_clamped;	/* a clamped node's bound holds it (before
								 * the sweep: shnsw_search_clamped) */
	bool		range_clamped;	/* and keeps a distance bound from ending the
								 * scan (scan_range_done) */

	/* heap read-ahead of the rows returned next (scan_heap_ahead) */
	int			heap_ahead;		/* returned rows to go before asking again */
	int			heap_window;	/* rows asked for at a time (ramps up) */
	BlockNumber heap_prev;		/* heap block of the row returned last */

	/* NULL query: walk every graph page */
	BlockNumber seq_blk;
	BlockNumber seq_nblocks;
} ShnswScanOpaqueData;

typedef ShnswScanOpaqueData *ShnswScanOpaque;

/*
 * Whether a row at this distance fails the WHERE clause's distance bound
 * (NaN sorts after every number, as float8's comparisons have it).
 */
static inline bool
scan_past_range(ShnswScanOpaque so, double distance)
{
	if (!so->ranged)
		return false;
	if (isnan(distance))
		return true;
	return so->range_inclusive ? distance > so->range_end : distance >= so->range_end;
}

/* Compare distances as ORDER BY on float8 does: NaN after every number. */
static inline int
scan_distance_cmp(double a, double b)
{
	if (isnan(a))
		return isnan(b) ? 0 : 1;
	if (isnan(b))
		return -1;
	return (a > b) - (a < b);
}

/* Sort results by distance, then by node reference. */
static inline int
scan_result_cmp(const ShnswResult *x, const ShnswResult *y)
{
	int			c = scan_distance_cmp(x->distance, y->distance);

	if (c != 0)
		return c;
	return (x->ref > y->ref) - (x->ref < y->ref);
}

/*
 * scan_held_limit: the exact distance of the nearest held row (infinity if
 * none): every parked or deferred node whose bound is below it must be
 * re-ranked before that row may be returned.
 */
static inline double
scan_held_limit(ShnswScanOpaque so)
{
	return so->nheld > 0 ? so->held[0].distance : get_float8_infinity();
}

/*
 * scan_first_rows: are the rows being returned among the scan's first
 * ef_search? Those are what one HNSW search of width ef_search stands for
 * (pgvector returns all of them from its one search), so they are bounded
 * by the typical error of the codes (so->walk) in whatever round lets them
 * out; the first round's floor lets out only its nearer half, and a LIMIT
 * 10 at ef_search 10 needed later rounds. Those rounds used to bound by
 * the worst case: on clustered 100k x 768 (cosine) half the queries at
 * ef_search 10 then ran 5 to 10 rounds (up to 9,000 nodes expanded, 2.5
 * ms mean against 0.69 ms at ef_search 40). Rows past ef_search are the
 * continuation a WHERE clause asks for: there the worst case's margin
 * keeps the walk exploring before it lets rows out (filtered 128-d L2
 * recall, test_scan_order, fell from 0.99 to 0.98 with the typical error
 * in every round).
 */
static inline bool
scan_first_rows(ShnswScanOpaque so)
{
	return so->search.rounds <= 1 || so->nreturned < (uint64) so->ef_search;
}

/*
 * scan_lower_bound: a lower bound on the exact distance (in the ORDER BY
 * operator's units) of any node whose navigation distance is est
 * (graph.c, shnsw_codebound_lower; unit-tested on random data).
 */
static inline double
scan_lower_bound(ShnswScanOpaque so, double est)
{
	if (so->swept)
		return shnsw_codebound_lower(&so->proof, est);
	return shnsw_codebound_lower(scan_first_rows(so) ? &so->walk : &so->bound, est);
}

/*
 * scan_deferred_bound: the bound of a deferred node (scan_defer) of
 * navigation distance est: the first round's while it lasts, then the
 * walk's bound of later rounds (also after the sweep: deferred nodes are
 * rows the walk found, held to the bound they were deferred under or a
 * looser one).
 */
static inline double
scan_deferred_bound(ShnswScanOpaque so, double est)
{
	return shnsw_codebound_lower(scan_first_rows(so) && !so->swept ? &so->walk : &so->bound, est);
}

/*
 * The scan's files call down only: scan.c -> scan_order.c -> scan_sweep.c,
 * scan_heap.c -> scan_rows.c.
 */

/* scan_rows.c */
extern void scan_held_push(ShnswScanOpaque so, const ShnswResult *r);
extern ShnswResult scan_held_pop(ShnswScanOpaque so, bool *late);
extern void scan_check_bound(ShnswScanOpaque so, float est, double d);
extern void scan_outbuf_room(ShnswScanOpaque so, int n);
extern void scan_fold_reader(ShnswScanOpaque so);
extern void scan_fold(ShnswScanOpaque so);

/* scan_order.c */
extern double scan_emit_bound(ShnswScanOpaque so, bool *parked, bool any_order);
extern bool scan_range_done(ShnswScanOpaque so);
extern bool scan_proof_may_search(ShnswScanOpaque so);
extern bool scan_next_round(IndexScanDesc scan);

/* scan_sweep.c */
extern bool scan_sweep_fits(ShnswScanOpaque so);
extern void scan_sweep(IndexScanDesc scan, ShnswSweepReason why);

/* scan_heap.c */
extern int	scan_cand_blocks(ShnswScanOpaque so, const uint32 *idx, int n, BlockNumber *blks);
extern int	scan_rerank(IndexScanDesc scan, int n);
extern bool scan_take(IndexScanDesc scan);
extern bool scan_take_clamped(IndexScanDesc scan);
extern bool scan_take_batch(IndexScanDesc scan);
extern bool scan_take_deferred(IndexScanDesc scan, bool all);
extern void scan_heap_ahead(IndexScanDesc scan, ShnswScanOpaque so);

#endif							/* STREAMHNSW_SCAN_INT_H */
