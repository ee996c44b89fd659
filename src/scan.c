/*-------------------------------------------------------------------------
 *
 * scan.c
 *	  Ordered index scans: ORDER BY column <op> query LIMIT k.
 *
 * A scan descends greedily through the upper layers, then runs rounds of a
 * beam search on layer 0, all on SQ8 codes. Each round's candidates are
 * re-ranked with the operator class's exact distance function (the same
 * function as the ORDER BY operator, so values are identical) on the exact
 * vectors and join a min-heap of held rows. When the executor wants more
 * rows than the held ones that may be returned (a WHERE clause filtered
 * them out), the first round is first widened to twice its width
 * (scan_may_widen), then each next round continues the same search with a
 * doubled width, until streamhnsw.max_scan_tuples more nodes have been examined;
 * then the nodes already seen are re-ranked and returned, nearest first.
 *
 * Strict order without loss (streamhnsw.iterative_scan = strict_order, the
 * default). The nearest held row is returned only when its exact distance
 * is within the emit bound (scan_emit_bound): a lower bound on the exact
 * distance of every node the search has seen but not re-ranked or not
 * expanded (their navigation distances less the largest error SQ8 codes
 * can make, scan_lower_bound; a re-ranked node's own exact distance),
 * tightened after the first round to its median row and after a later one
 * to the frontier as it started, so that the search has explored past any
 * row it returns. A row found in a later round is returned in its place
 * instead of being skipped. A row the search only reaches after a farther
 * one was returned cannot be placed: strict order skips it and counts it,
 * relaxed_order returns it out of order (as pgvector's relaxed_order).
 * When the bound is held by the nearest parked node's codes, parked nodes
 * are re-ranked one at a time (scan_take) instead of running a round. The
 * design and its reasoning are in src/README (Scans).
 *
 * Locking: no heavyweight lock. Each page is pinned and share-locked only
 * while it is read (pageaccess.c); nothing is held between calls.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "access/genam.h"
#include "access/relscan.h"
#include "access/tableam.h"
#include "executor/nodeHash.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "streamhnsw.h"

/*
 * parked nodes whose vectors scan_take_ahead reads ahead, at most: those
 * that must be re-ranked before the nearest held row may be returned
 */
#define SHNSW_TAKE_AHEAD	64

/* A re-ranked row. */
typedef struct ShnswResult
{
	ItemPointerData tid;
	double		distance;
	uint32		ref;			/* tie-break: stable order for equal distances */
	uint32		cand;			/* its index in the search's candidates */
	int			round;			/* the search round that re-ranked it */
} ShnswResult;

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
	int			round_ef;
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
	ShnswBound	walk;			/* the first round's: the typical error
								 * (scan_lower_bound) */
	ShnswBound	bound;			/* later rounds, before the sweep */
	ShnswBound	proof;			/* after it: the largest residual's */

	/* the sweep: every node seen once the budget covers the index */
	bool		complete;		/* max_scan_tuples covers every node */
	uint64		node_count;		/* nodes ever placed, as the scan began */
	uint32		truncations;	/* the metapage's truncation count, then */
	bool		swept;
	bool		force_emit;		/* the proof has spent its allowance: return
								 * the nearest held row (scan_proof_may_search) */
	ShnswHeap	edge;			/* after the sweep: nodes whose codes reach an
								 * end of the range, by shnsw_bound_code */
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
 * scan_fold_reader adds the reader's figures so far to so->stats and starts
 * its counters again (heap read-ahead goes on after the search ends).
 */
static void
scan_fold_reader(ShnswScanOpaque so)
{
	shnsw_reader_stats_add(&so->stats.io, &so->reader.stats, NULL);
	MemSet(&so->reader.stats, 0, sizeof(so->reader.stats));
}

/*
 * scan_fold ends the active search: releases the reader's pins and adds the
 * search's figures to so->stats.
 */
static void
scan_fold(ShnswScanOpaque so)
{
	if (!so->live)
		return;
	so->stats.rounds += so->search.rounds + so->search.widened;
	so->stats.nodes_expanded += so->search.nexpanded;
	so->stats.distances += so->search.ndistances;
	/* the walk spent max_scan_tuples: it handed out what it had seen */
	if (so->search.budget_spent && !so->swept)
		so->stats.budget_spent++;
	shnsw_reader_end(&so->reader);
	scan_fold_reader(so);
	so->live = false;
}

/*
 * scan_search_free gives the search's arrays back (graph.c keeps them for
 * the next search of this backend: no allocation per scan); called before
 * so->ctx, which holds the rest of the search, is reset or deleted.
 */
static void
scan_search_free(ShnswScanOpaque so)
{
	if (so->search.cands != NULL)
		shnsw_search_free(&so->search);
	memset(&so->search, 0, sizeof(so->search));
}

/*
 * shnsw_scan_stats returns what a streamhnsw scan has done so far, the
 * active search included (for EXPLAIN ANALYZE, which prints before the scan
 * ends). The result is valid until the next call.
 */
const ShnswScanStats *
shnsw_scan_stats(IndexScanDesc scan)
{
	static ShnswScanStats snap;
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;

	snap = so->stats;
	shnsw_reader_stats_add(&snap.io, &so->reader.stats, so->live ? &so->reader.la : NULL);
	if (so->live)
	{
		snap.rounds += so->search.rounds + so->search.widened;
		snap.nodes_expanded += so->search.nexpanded;
		snap.distances += so->search.ndistances;
	}
	return &snap;
}

/*
 * shnsw_beginscan is ambeginscan: the scan state lives in the caller's
 * memory context, its per-scan work in so->ctx (deleted by endscan).
 */
IndexScanDesc
shnsw_beginscan(Relation index, int nkeys, int norderbys)
{
	IndexScanDesc scan = RelationGetIndexScan(index, nkeys, norderbys);
	ShnswScanOpaque so = palloc0(sizeof(ShnswScanOpaqueData));

	so->ctx = AllocSetContextCreate(CurrentMemoryContext, "streamhnsw scan",
									ALLOCSET_DEFAULT_SIZES);
	so->first = true;
	so->heap_prev = InvalidBlockNumber;
	scan->opaque = so;
	if (norderbys > 0)
	{
		scan->xs_orderbyvals = palloc0(sizeof(Datum) * norderbys);
		scan->xs_orderbynulls = palloc(sizeof(bool) * norderbys);
		memset(scan->xs_orderbynulls, true, sizeof(bool) * norderbys);
	}
	return scan;
}

/*
 * shnsw_rescan is amrescan: takes the query and ORDER BY keys; the search
 * itself starts at the next gettuple. Needs an MVCC snapshot.
 */
void
shnsw_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;

	/*
	 * A TID taken from a node that VACUUM then frees is dead to every MVCC
	 * snapshot, so the heap rejects it even if its slot was reused (src/README,
	 * the vacuum/scan interlock). Other snapshots could see the wrong row.
	 */
	if (scan->xs_snapshot != NULL && !IsMVCCSnapshot(scan->xs_snapshot))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("streamhnsw index scans need an MVCC snapshot")));

	if (keys && scan->numberOfKeys > 0)
		memmove(scan->keyData, keys, scan->numberOfKeys * sizeof(ScanKeyData));
	if (orderbys && scan->numberOfOrderBys > 0)
		memmove(scan->orderByData, orderbys, scan->numberOfOrderBys * sizeof(ScanKeyData));
	scan_fold(so);
	shnsw_reader_heap_end(&so->reader);
	scan_fold_reader(so);
	scan_search_free(so);
	MemoryContextReset(so->ctx);
	MemSet(&so->reader, 0, sizeof(so->reader));	/* its memory was in ctx */
	so->heap_ahead = 0;
	so->heap_prev = InvalidBlockNumber;
	/* everything below lived in so->ctx */
	so->outbuf = NULL;
	so->outcap = 0;
	so->results = NULL;
	so->rescap = 0;
	so->held = NULL;
	so->heldcap = 0;
	so->held_per_round = NULL;
	so->held_rounds_cap = 0;
	so->take_near = NULL;
	so->take_near_cap = 0;
	so->take_ahead_left = 0;
	so->first = true;
	so->done = false;
	so->nresults = so->next = 0;
	so->nheld = 0;
	so->ntaken = 0;
	so->oldest_held_round = 0;
	so->search_done = false;
	so->nreturned = 0;
	so->force_emit = false;
	so->ranged = shnsw_bound_for_scan(scan, &so->range_end, &so->range_inclusive);
}

/*
 * Whether a row at this distance fails the WHERE clause's distance bound
 * (NaN sorts after every number, as float8's comparisons have it).
 */
static inline bool
past_range(ShnswScanOpaque so, double distance)
{
	if (!so->ranged)
		return false;
	if (isnan(distance))
		return true;
	return so->range_inclusive ? distance > so->range_end : distance >= so->range_end;
}

/* Compare distances as ORDER BY on float8 does: NaN after every number. */
static inline int
distance_cmp(double a, double b)
{
	if (isnan(a))
		return isnan(b) ? 0 : 1;
	if (isnan(b))
		return -1;
	return (a > b) - (a < b);
}

/* Sort results by distance, then by node reference. */
static int
result_cmp(const void *a, const void *b)
{
	const ShnswResult *x = a,
			   *y = b;
	int			c = distance_cmp(x->distance, y->distance);

	if (c != 0)
		return c;
	return (x->ref > y->ref) - (x->ref < y->ref);
}

/* ---------- held rows ---------- */

/* held_push adds a re-ranked row to the heap of held rows. */
static void
held_push(ShnswScanOpaque so, const ShnswResult *r)
{
	int			i;

	if (so->nheld == so->heldcap)
	{
		so->heldcap = Max(64, so->heldcap * 2);
		so->held = so->held ? repalloc(so->held, sizeof(ShnswResult) * so->heldcap)
			: palloc(sizeof(ShnswResult) * so->heldcap);
	}
	if (r->round >= so->held_rounds_cap)
	{
		int			cap = Max(16, r->round * 2);

		so->held_per_round = so->held_per_round
			? repalloc0(so->held_per_round, sizeof(int) * so->held_rounds_cap, sizeof(int) * cap)
			: palloc0(sizeof(int) * cap);
		so->held_rounds_cap = cap;
	}
	so->held_per_round[r->round]++;
	i = so->nheld++;
	while (i > 0 && result_cmp(r, &so->held[(i - 1) / 2]) < 0)
	{
		so->held[i] = so->held[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	so->held[i] = *r;
}

/*
 * held_pop removes the nearest held row. Sets *late if a row re-ranked in an
 * earlier round is still held (this one was found late and is placed ahead
 * of it).
 */
static ShnswResult
held_pop(ShnswScanOpaque so, bool *late)
{
	ShnswResult top = so->held[0];
	ShnswResult last = so->held[--so->nheld];
	int			i = 0;

	for (;;)
	{
		int			c = 2 * i + 1;

		if (c >= so->nheld)
			break;
		if (c + 1 < so->nheld && result_cmp(&so->held[c + 1], &so->held[c]) < 0)
			c++;
		if (result_cmp(&last, &so->held[c]) <= 0)
			break;
		so->held[i] = so->held[c];
		i = c;
	}
	if (so->nheld > 0)
		so->held[i] = last;

	so->held_per_round[top.round]--;
	while (so->oldest_held_round < so->held_rounds_cap &&
		   so->held_per_round[so->oldest_held_round] == 0)
		so->oldest_held_round++;
	*late = so->nheld > 0 && so->oldest_held_round < top.round;
	return top;
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
 * (graph.c, shnsw_bound_lower; unit-tested on random data).
 */
static inline double
scan_lower_bound(ShnswScanOpaque so, double est)
{
	if (so->swept)
		return shnsw_bound_lower(&so->proof, est);
	return shnsw_bound_lower(scan_first_rows(so) ? &so->walk : &so->bound, est);
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
	return shnsw_bound_lower(scan_first_rows(so) && !so->swept ? &so->walk : &so->bound, est);
}

/*
 * scan_check_bound: node c, of navigation distance est, re-ranked to exact
 * distance d. A value inserted outside the trained range was clamped to
 * the range's edge, and its code can be off by more than half a step: if d
 * is below the bound, widen the error so that the bound holds for it (the
 * rest of the scan then waits long enough for nodes like it).
 */
static void
bound_widen(ShnswBound *b, float est, double d)
{
	for (int i = 0; i < 64 && shnsw_bound_lower(b, est) > d; i++)
		b->err_abs = b->err_abs * 2 + 1e-7;
}

static void
scan_check_bound(ShnswScanOpaque so, float est, double d)
{
	if (isnan(d))
		return;
	bound_widen(&so->walk, est, d);
	bound_widen(&so->bound, est, d);
	bound_widen(&so->proof, est, d);
}

/*
 * scan_emit_bound: held rows at most this far may be returned now. Sets
 * *parked if the bound is that of the nearest parked node (scan_take can
 * raise it). any_order: the bound strict order holds rows to, also when
 * the scan runs in relaxed order (scan_range_done).
 */
static double
scan_emit_bound_base(ShnswScanOpaque so, bool *parked, bool any_order)
{
	double		bound = get_float8_infinity();
	float		f;

	*parked = false;
	so->take_clamped = false;
	if (so->search_done || so->unbounded ||
		(!any_order && shnsw_iterative_scan == SHNSW_ITERATIVE_RELAXED))
		return bound;

	/*
	 * After the sweep every node has been seen: the nearest parked node's
	 * bound holds for every node not yet re-ranked, no premise needed.
	 */
	if (so->swept)
	{
		ShnswHeap  *e = &so->edge;

		f = shnsw_search_frontier(&so->search);
		*parked = true;
		so->take_edge = false;
		if (!(isinf(f) && f > 0))
			bound = scan_lower_bound(so, f);
		/* and the box bound of codes that may stand for clamped values */
		while (e->n > 0 && (so->search.cands[shnsw_heap_top(e).id].state & SHNSW_CAND_EMITTED))
			shnsw_heap_pop(e);
		if (e->n > 0 && shnsw_heap_top(e).d < bound)
		{
			bound = shnsw_heap_top(e).d;
			so->take_edge = true;
		}
		return bound;
	}

	/*
	 * After the first round, only its nearer half: a LIMIT within it needs
	 * no more, and rows in its outer half wait for the next round to
	 * explore past them (a node that round 1 missed may be nearer).
	 */
	if (so->search.rounds == 1 && so->first_floor < bound)
		bound = so->first_floor;
	f = shnsw_search_frontier(&so->search);
	if (!(isinf(f) && f > 0) && scan_lower_bound(so, f) < bound)
		bound = scan_lower_bound(so, f);
	*parked = bound == scan_lower_bound(so, shnsw_search_parked(&so->search));

	/*
	 * Nodes whose values were clamped into the trained range, seen and not
	 * yet re-ranked, by the bound their clamp class allows (scan_setup):
	 * while the first round's typical error bounds the rest.
	 */
	if (scan_first_rows(so))
	{
		f = shnsw_search_clamped(&so->search);
		if (!(isinf(f) && f > 0) && scan_lower_bound(so, f) < bound)
		{
			bound = scan_lower_bound(so, f);
			*parked = true;
			so->take_clamped = true;
		}
	}

	/*
	 * Re-ranked nodes not yet expanded: their neighbours, not yet seen, are
	 * taken to be no nearer than they are (the premise of every HNSW
	 * search). Past the budget nothing more is expanded.
	 */
	if (!so->search.budget_spent)
	{
		ShnswHeap  *u = &so->unexpanded;

		while (u->n > 0 && (so->search.cands[shnsw_heap_top(u).id].state & SHNSW_CAND_EXPANDED))
			shnsw_heap_pop(u);
		if (u->n > 0 && shnsw_heap_top(u).d < bound)
		{
			bound = shnsw_heap_top(u).d;
			*parked = false;
			so->take_clamped = false;
		}
	}
	return bound;
}

/*
 * scan_emit_bound: held rows at most this far may be returned now: the
 * least of scan_emit_bound_base and the bound of the nearest deferred node
 * (a later round's result not yet re-ranked, scan_defer), in every order
 * and also once the search is done, since those nodes are rows the scan
 * has found. Sets so->take_deferred if that node holds the bound.
 * any_order as for scan_emit_bound_base.
 */
static double
scan_emit_bound(ShnswScanOpaque so, bool *parked, bool any_order)
{
	double		bound = scan_emit_bound_base(so, parked, any_order);

	so->take_deferred = false;
	if (so->deferred.n > 0)
	{
		double		b = scan_deferred_bound(so, shnsw_heap_top(&so->deferred).d);

		/* -infinity: a box bound that no row can be returned before */
		if (b < bound || (isinf(bound) && bound > 0))
		{
			bound = b;
			*parked = false;
			so->take_edge = false;
			so->take_clamped = false;
			so->take_deferred = true;
		}
	}
	return bound;
}

/*
 * scan_range_done: may the scan end at the WHERE clause's distance bound
 * (bound.c) now, with no row to return? Yes when the bound strict order
 * holds rows to (in either order: scan_emit_bound_base, and the deferred
 * nodes') is past it: every row not yet re-ranked is at least that far,
 * on the same premise strict order returns rows on, and the held rows are
 * past it too (else one would be returned first). Relaxed order, which
 * returns rows before that bound allows, ends here as well; strict order
 * ends here when the nearest held row waits for the bound and is past the
 * range anyway. Never before the first round (nothing seen yet) nor for
 * a query the codes cannot bound.
 */
static bool
scan_range_done(ShnswScanOpaque so)
{
	bool		parked;
	bool		take_edge = so->take_edge;
	bool		take_deferred = so->take_deferred;
	bool		take_clamped = so->take_clamped;
	double		bound;

	so->range_clamped = false;
	if (!so->ranged || so->unbounded || so->search.rounds == 0)
		return false;

	/*
	 * Relaxed order has no first-round floor (scan_defer): it waits for a
	 * second, twice as wide round to explore past the first one's rows. On
	 * the sentences (radius 0.5, 20 queries) ending after the first round
	 * returned 189 of the 195 rows within; after the second, all 195.
	 */
	if (shnsw_iterative_scan != SHNSW_ITERATIVE_STRICT && so->search.rounds < 2 &&
		!so->search_done)
		return false;
	if (so->nheld > 0 && !past_range(so, so->held[0].distance))
		return false;
	bound = scan_emit_bound(so, &parked, true);
	/* only a probe: what to take next is the gettuple loop's call's */
	so->range_clamped = so->take_clamped;
	so->take_edge = take_edge;
	so->take_deferred = take_deferred;
	so->take_clamped = take_clamped;
	if (past_range(so, bound))
	{
		so->range_clamped = false;
		return true;
	}
	/* relaxed order takes no parked node but this kind (scan_take_clamped) */
	return false;
}

/* Sort candidate indexes by the location of their exact vectors. */
static ShnswCand *sort_cands;

static int
cand_vec_cmp(const void *a, const void *b)
{
	const ShnswCand *x = &sort_cands[*(const uint32 *) a],
			   *y = &sort_cands[*(const uint32 *) b];

	if (x->vec_block != y->vec_block)
		return x->vec_block < y->vec_block ? -1 : 1;
	return (x->vec_offset > y->vec_offset) - (x->vec_offset < y->vec_offset);
}

/*
 * scan_query_inside: may the first round of a query navigating on nav
 * bound clamped nodes by their class (scan_setup)? Not when the query
 * lies outside the trained range by more than the largest error of a
 * value inside it (L2 and cosine): the nodes around it were clamped
 * too, their codes squeezed onto the range's edge, and the walk on those
 * codes, not only their bound, misses nodes near the query (4-d L2 rows
 * inserted up to six times the range out: a full scan of a query among
 * them returned two rows after farther ones, and strict order drops
 * those). Such a query's first round waits as later rounds do. Inner
 * product, whose distance has no such neighbourhood, sweeps a complete
 * index before returning any row (scan_next_round).
 */
static bool
scan_query_inside(ShnswScanOpaque so, const ShnswIndexInfo *info, const float *nav)
{
	uint8	   *code;
	double		excess;

	if (info->metric == SHNSW_METRIC_IP)
		return true;
	code = palloc(info->dims);
	sq8_encode(info->lo, info->scale, nav, code, info->dims);
	excess = shnsw_code_excess(info->lo, info->scale, nav, code, info->dims);
	pfree(code);
	return excess <= so->bound.res_range;
}

/*
 * scan_setup prepares the query on the first gettuple call. Returns false if
 * the index is empty.
 */
static bool
scan_setup(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	Relation	index = scan->indexRelation;
	ShnswMetaSnapshot snap;
	ShnswIndexInfo *info;		/* our own copy (shnsw_get_index_info) */
	struct varlena *q;
	float	   *nav;
	int			dims;
	double		clamp_max;		/* the first round's slack for clamped nodes */
	double		clamp_factor;

	if (scan->numberOfOrderBys == 0 || scan->orderByData[0].sk_attno != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("streamhnsw index scans need an ORDER BY on the indexed column")));

	/* the metapage first: it tells whether cached SQ8 parameters are stale */
	shnsw_read_meta(index, &snap);
	info = so->info = shnsw_get_index_info(index);
	dims = info->dims;
	so->stats.scans++;
	/* an empty index's scan too: EXPLAIN names the ef_search in force */
	so->ef_search = shnsw_scan_ef_search(index, &so->stats.ef_from_index);
	so->stats.ef_search = so->ef_search;
	so->distproc = index_getprocinfo(index, 1, SHNSW_DISTANCE_PROC);
	so->collation = index->rd_indcollation[0];

	if (scan->orderByData[0].sk_flags & SK_ISNULL)
	{
		so->null_query = true;
		so->seq_blk = SHNSW_METAPAGE_BLKNO + 1;
		so->seq_nblocks = RelationGetNumberOfBlocks(index);
		return true;
	}
	so->null_query = false;

	q = shnsw_check_vector(scan->orderByData[0].sk_argument, info->elemtype, dims);
	so->query = PointerGetDatum(q);

	if (snap.entry == SHNSW_INVALID_REF || !info->quant_trained)
		return false;

	nav = palloc(sizeof(float) * dims);

	/*
	 * A zero query under cosine cannot be normalized: navigate on it as is;
	 * its distance to every row is NaN, so any order is right.
	 */
	so->unbounded = !shnsw_vector_to_nav(q, info->elemtype, info->metric, dims, nav);
	so->sq.dim = dims;
	so->sq.qs = palloc(sizeof(float) * dims);
	so->sq.w = palloc(sizeof(float) * dims);
	/*
	 * Cosine navigates on the squared L2 distance between the normalized
	 * query and the codes of normalized rows: for unit vectors it orders as
	 * the inner product does, and the triangle inequality gives a far
	 * tighter bound (scan_lower_bound) when distances are small.
	 */
	sq8_prepare_query(&so->sq, so->unbounded || info->metric == SHNSW_METRIC_IP ?
					  info->metric : SHNSW_METRIC_L2, nav, info->lo, info->scale);
	shnsw_bound_prepare(&so->bound, info->metric, so->unbounded, nav, info->lo, info->scale,
						dims, -1.0);
	so->proof = so->bound;
	if (snap.max_residual >= 0.0)
		shnsw_bound_set_residual(&so->proof, snap.max_residual);
	so->bound.err_abs = Max(so->bound.err_abs, so->proof.err_abs);

	/*
	 * The first round's rows are returned on the typical error of the codes
	 * (scan_lower_bound), when every node's value lies inside the trained
	 * range. A clamped one's code can be off by more, up to the largest
	 * residual (so->proof): where inserts flag such nodes, each flagged one
	 * is bounded as a point nearer by what its clamp class allows, at most
	 * that difference (clamp_max; shnsw_cand_bound_distance), and the
	 * typical error serves the rest. In an index made before the flags, or
	 * for a query far outside the range (scan_query_inside), one clamped
	 * node anywhere makes the first round wait as later rounds do
	 * (src/README, Scans).
	 */
	so->walk = so->bound;
	clamp_max = 0.0;
	clamp_factor = 1.0;
	so->stats.first_bound = so->unbounded ? SHNSW_FIRST_NONE : SHNSW_FIRST_WORST_OLD;
	if (snap.max_residual >= 0.0 && snap.max_residual <= so->bound.res_range * (1 + 1e-6))
	{
		so->walk.err_abs = so->bound.err_typ;
		if (!so->unbounded)
			so->stats.first_bound = SHNSW_FIRST_TYPICAL;
	}
	else if (snap.max_residual >= 0.0 && snap.clamps_marked && !so->unbounded)
	{
		if (!scan_query_inside(so, info, nav))
			so->stats.first_bound = SHNSW_FIRST_WORST_QUERY;
		else
		{
			so->stats.first_bound = SHNSW_FIRST_MARKED;
			so->walk.err_abs = so->bound.err_typ;
			/* (with room to spare for the bound's relative rounding terms) */
			clamp_max = (so->proof.err_abs - so->walk.err_abs) * (1 + 1e-4);
			if (info->metric == SHNSW_METRIC_IP)
				clamp_factor = so->bound.qnorm * (1 + 1e-6);
			clamp_factor *= 1 + 1e-4;
		}
	}

	shnsw_reader_init(&so->reader, index);
	so->stats.io_mode = so->reader.mode;
	shnsw_buffer_source_init(&so->ops, &so->pctx, index, info, &so->reader);
	shnsw_buffer_source_descent(&so->pctx, snap.node_count);
	shnsw_cache_scan_begin(index, info, &snap, &so->ops, &so->stats, so->ctx);
	shnsw_search_init(&so->search, &so->sq, &so->ops, info->m, 0);
	shnsw_search_set_clamp_slack(&so->search, so->bound.res_range, clamp_factor, clamp_max);
	shnsw_heap_init(&so->unexpanded, 64, false);
	shnsw_heap_init(&so->deferred, 64, false);
	so->first_floor = get_float8_infinity();
	so->live = true;
	shnsw_reader_phase(&so->reader, SHNSW_PHASE_DESCENT);
	so->start = shnsw_search_start(&so->search, snap.entry, snap.entry_level);
	so->round_ef = so->ef_search;
	so->vecbuf = palloc(info->vec_size);
	/* the budget covers every node ever placed: sweep (scan_sweep) */
	so->complete = (uint64) shnsw_max_scan_tuples >= snap.node_count;

	so->node_count = snap.node_count;
	so->truncations = snap.truncations;
	so->swept = false;
	return true;
}

static int	scan_rerank(IndexScanDesc scan, int n);

/* Sort candidate indexes by navigation distance, then by index. */
static int
cand_nav_cmp(const void *a, const void *b)
{
	const ShnswCand *x = &sort_cands[*(const uint32 *) a];
	const ShnswCand *y = &sort_cands[*(const uint32 *) b];

	if (x->d != y->d)
		return x->d < y->d ? -1 : 1;
	return *(const uint32 *) a < *(const uint32 *) b ? -1 :
		*(const uint32 *) a > *(const uint32 *) b ? 1 : 0;
}

/*
 * scan_cand_blocks stores the blocks holding the exact vectors of
 * candidates idx[0..n-1] (deleted ones have none to read) in blks (room
 * for 2 * n) and returns how many.
 */
static int
scan_cand_blocks(ShnswScanOpaque so, const uint32 *idx, int n, BlockNumber *blks)
{
	int			nb = 0;

	for (int i = 0; i < n; i++)
	{
		ShnswCand  *c = &so->search.cands[idx[i]];

		if (!(c->node_flags & SHNSW_NODE_DELETED))
			nb += shnsw_vector_blocks(c->vec_block, c->vec_offset, so->info->vec_size, blks + nb);
	}
	return nb;
}

/* deferred nodes re-ranked at a time, at most; the first round's re-ranked at once */
#define SHNSW_DEFERRED_BATCH	16

/*
 * scan_defer: of a round's n results (so->outbuf), keep the nearest by
 * navigation distance for re-ranking now and defer the rest: they wait in
 * so->deferred, and the emit bound covers them by the lower bound of their
 * navigation distances until they are re-ranked, nearest first, when that
 * bound is the least (scan_take_deferred). Rows come out exactly as if
 * every one had been re-ranked with its round, but only the few a LIMIT
 * needs are re-ranked. A later round keeps streamhnsw.ef_search: a round
 * of thousands then re-ranks no more than the first did (on clustered
 * 100k x 768, cosine, LIMIT 10, ef_search 40, the slowest queries ran 8
 * rounds and re-ranked 9,200 rows, each an exact vector read and a
 * distance). The first round keeps SHNSW_DEFERRED_BATCH and bounds the
 * rest by the typical error of their codes (so->walk): on the same set at
 * ef_search 150, a LIMIT 10 re-ranked all 150 rows of its round where
 * about a quarter sufficed (src/README, Scans). Its median navigation
 * distance, plus that error, is the first round's floor
 * (scan_emit_bound). The deferred rows' vector pages are asked for ahead,
 * nearest first (nothing happens while every page is cached). Strict
 * order only: relaxed order returns a round's rows as soon as they are
 * re-ranked. Returns how many to re-rank now.
 */
static int
scan_defer(ShnswScanOpaque so, int n)
{
	int			keep = so->search.rounds <= 1 ? SHNSW_DEFERRED_BATCH : Max(so->ef_search, 1);

	if (so->unbounded || shnsw_iterative_scan != SHNSW_ITERATIVE_STRICT || n == 0)
		return n;
	if (so->search.rounds > 1 && n <= keep)
		return n;
	sort_cands = so->search.cands;
	qsort(so->outbuf, n, sizeof(uint32), cand_nav_cmp);
	sort_cands = NULL;
	if (so->search.rounds <= 1)
	{
		/*
		 * Its nearer half by navigation distance: the farthest exact
		 * distance a row of that half can have, on the same error as the
		 * first round's bound.
		 */
		int			mid = (n - 1) / 2;
		const ShnswBound *b = so->swept ? &so->proof : &so->walk;
		float		d = so->search.widened > 0 ? so->widen_median :
			so->search.cands[so->outbuf[mid]].d;

		so->first_floor = shnsw_bound_upper(b, d);
	}
	if (n <= keep)
		return n;
	for (int i = keep; i < n; i++)
		shnsw_heap_push(&so->deferred,
						shnsw_cand_bound_distance(&so->search, &so->search.cands[so->outbuf[i]]),
						so->outbuf[i]);
	if (so->live && so->reader.mode != SHNSW_IO_SYNC)
	{
		BlockNumber *blks = palloc(sizeof(BlockNumber) * 2 * (n - keep));

		shnsw_reader_request(&so->reader, blks,
							 scan_cand_blocks(so, so->outbuf + keep, n - keep, blks), true);
		pfree(blks);
	}
	return keep;
}

/* qsort comparator of uint64 */
static int
uint64_cmp(const void *a, const void *b)
{
	uint64		x = *(const uint64 *) a,
				y = *(const uint64 *) b;

	return (x > y) - (x < y);
}

/*
 * Find the layer-0 candidate index of ref in seen (sorted ref << 32 |
 * index). The upper-layer descent records its nodes too, never to be
 * emitted, before layer 0 records the same node again: the last index of a
 * reference is its layer-0 candidate.
 */
static bool
scan_seen_index(const uint64 *seen, uint32 n, ShnswRef ref, uint32 *idx)
{
	uint32		lo = 0,
				hi = n;

	while (lo < hi)
	{
		uint32		mid = lo + (hi - lo) / 2;

		if ((ShnswRef) (seen[mid] >> 32) <= ref)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && (ShnswRef) (seen[lo - 1] >> 32) == ref)
	{
		*idx = (uint32) seen[lo - 1];
		return true;
	}
	return false;
}

/*
 * scan_edge_push: candidate j's code reaches an end of the trained range, so
 * its value may have been clamped and its navigation distance's bound may
 * not hold; it waits in the edge heap under its box bound b (rounded down
 * to a float), unless the usual bound is no higher.
 */
static void
scan_edge_push(ShnswScanOpaque so, uint32 j, double b)
{
	float		f = (float) b;

	if (so->search.cands[j].state & SHNSW_CAND_EMITTED)
		return;
	if (b >= scan_lower_bound(so, so->search.cands[j].d))
		return;					/* the usual bound is no looser */
	if ((double) f > b)
		f = nextafterf(f, -get_float4_infinity());
	shnsw_heap_push(&so->edge, f, j);
}

/*
 * Which blocks of an index are graph pages, learned by the sweeps of this
 * backend, so that later sweeps skip the exact-vector and upper pages
 * (most of an index) without reading them. A page's type is set when it is
 * first initialized and never changes until a VACUUM truncation cuts the
 * block (the metapage counts them: a map of another count starts again; a
 * new relfilenode starts a new entry), so the map of the blocks below
 * nknown stays right; blocks past it, and pages not yet initialized, are
 * read and learned.
 */
typedef struct SweepMap
{
	RelFileLocator locator;
	uint32		truncations;	/* the metapage's count when learned */
	BlockNumber nknown;			/* blocks 0 .. nknown - 1 are known */
	BlockNumber cap;			/* bits allocated */
	uint8	   *graph;			/* bit per block: a graph page */
} SweepMap;

#define SHNSW_SWEEP_MAPS	8
static SweepMap sweep_maps[SHNSW_SWEEP_MAPS];
static int	sweep_map_next;

/*
 * The sweep map of index (a new, empty one if it has none, or if the index
 * was truncated since: truncations is the metapage's count).
 */
static SweepMap *
sweep_map_get(Relation index, uint32 truncations)
{
	SweepMap   *m;

	for (int i = 0; i < SHNSW_SWEEP_MAPS; i++)
		if (sweep_maps[i].graph != NULL &&
			RelFileLocatorEquals(sweep_maps[i].locator, index->rd_locator))
		{
			m = &sweep_maps[i];
			if (m->truncations != truncations)
			{
				m->truncations = truncations;
				m->nknown = 0;
				memset(m->graph, 0, m->cap / 8);
			}
			return m;
		}
	m = &sweep_maps[sweep_map_next];
	sweep_map_next = (sweep_map_next + 1) % SHNSW_SWEEP_MAPS;
	if (m->graph != NULL)
		pfree(m->graph);
	m->locator = index->rd_locator;
	m->truncations = truncations;
	m->nknown = 0;
	m->cap = 1024;
	m->graph = MemoryContextAllocZero(TopMemoryContext, m->cap / 8);
	return m;
}

/* Learn that block blk is (or is not) a graph page; blocks below it are known. */
static void
sweep_map_learn(SweepMap *m, BlockNumber blk, bool graph)
{
	if (blk != m->nknown)
		return;					/* only the known prefix grows */
	if (blk >= m->cap)
	{
		BlockNumber cap = Max(m->cap * 2, blk + 1024);

		cap = (cap + 7) & ~(BlockNumber) 7;
		m->graph = repalloc0(m->graph, m->cap / 8, cap / 8);
		m->cap = cap;
	}
	if (graph)
		m->graph[blk / 8] |= (uint8) (1 << (blk % 8));
	m->nknown = blk + 1;
}

/* Whether the sweep must read block blk. */
static inline bool
sweep_map_wanted(const SweepMap *m, BlockNumber blk)
{
	return blk >= m->nknown || (m->graph[blk / 8] & (1 << (blk % 8))) != 0;
}

/* blocks the sweep asks the reader for ahead of the one it reads */
#define SHNSW_SWEEP_AHEAD	32

/* What the sweep keeps of one node record before the node joins the search. */
typedef struct SweepSlot
{
	ShnswNodeHeader h;
	float		d;				/* navigation distance */
	bool		edge;			/* its code reaches an end of the range */
	double		box;			/* if so, its box bound (shnsw_bound_code) */
} SweepSlot;

/*
 * sweep_stage copies what the sweep needs of n node records, node_size
 * apart (a locked page's, or the shared image's, which a writer may change
 * meanwhile: whatever they hold is read within bounds, and the caller
 * discards the result if they changed): headers, navigation distances (the
 * batch kernel) and, for codes at an end of the range, their box bound.
 */
static void
sweep_stage(ShnswScanOpaque so, const char *records, int n, SweepSlot *out)
{
	int			m = so->info->m;
	int			node_size = so->info->node_size;
	float		d[SHNSW_MAX_NODES_PER_PAGE];

	sq8_distances(&so->sq, shnsw_node_code((const ShnswNodeHeader *) records, m),
				  node_size, n, d);
	for (int slot = 0; slot < n; slot++)
	{
		const ShnswNodeHeader *h = (const ShnswNodeHeader *) (records + (Size) slot * node_size);
		const uint8 *code = shnsw_node_code(h, m);

		memcpy(&out[slot].h, h, sizeof(ShnswNodeHeader));
		out[slot].d = d[slot];
		out[slot].edge = shnsw_code_at_edge(code, so->info->dims);
		out[slot].box = out[slot].edge ? shnsw_bound_code(&so->bound, code) : 0.0;
	}
}

/*
 * sweep_commit offers the staged live nodes of graph page blk to the search:
 * the ones the walk has not seen are parked; a code at an end of the range
 * also waits in the edge heap under its box bound (scan_edge_push) and is
 * marked (SHNSW_CAND_EDGE: its navigation distance bounds it on neither
 * side).
 */
static void
sweep_commit(IndexScanDesc scan, BlockNumber blk, const SweepSlot *st, int n,
			 const uint64 *seen, uint32 nseen)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;

	for (int slot = 0; slot < n; slot++)
	{
		const ShnswNodeHeader *h = &st[slot].h;
		ShnswRef	ref = shnsw_make_ref(blk, slot, so->info->slot_bits);
		uint32		j;

		if (h->flags & SHNSW_NODE_DELETED)
			continue;
		if (h->extra_tids >= SHNSW_NODE_TIDS)
			shnsw_corrupt(scan->indexRelation, blk, "extra heap tuple count", h->extra_tids);
		if (shnsw_search_sweep_node(&so->search, ref, h, st[slot].d, &j))
			so->stats.swept++;
		else if (!scan_seen_index(seen, nseen, ref, &j))
			continue;			/* a node the walk saw in another place? */
		if (st[slot].edge)
		{
			so->search.cands[j].state |= SHNSW_CAND_EDGE;
			scan_edge_push(so, j, st[slot].box);
		}
	}
}

/* what sweep_stage_records is given */
typedef struct SweepStageArg
{
	ShnswScanOpaque so;
	SweepSlot  *st;
	bool		graph;			/* called: a graph page */
} SweepStageArg;

/* page_records' fn for sweep_image_page (the last call wins) */
static void
sweep_stage_records(void *arg, const char *records, int n)
{
	SweepStageArg *a = (SweepStageArg *) arg;

	a->graph = true;
	if (n > 0)
		sweep_stage(a->so, records, n, a->st);
}

/*
 * sweep_image_page stages graph page blk from the shared cache, if the
 * scan searches a cached copy and it holds the block (plain loads under
 * the page's seqlock: no pin, no lock, no read); returns the node slots
 * staged (0 for a page of another kind; *graph says which), or -1 if the
 * page must be read through buffers.
 */
static int
sweep_image_page(ShnswScanOpaque so, BlockNumber blk, SweepSlot *st, bool *graph)
{
	SweepStageArg a = {so, st, false};
	int			n;

	if (so->ops.page_records == NULL)
		return -1;
	n = so->ops.page_records(so->ops.ctx, blk, sweep_stage_records, &a);
	*graph = a.graph;
	return n;
}

/* Whether the sweep must read block blk through buffers. */
static bool
sweep_reads(ShnswScanOpaque so, const SweepMap *map, BlockNumber blk)
{
	return sweep_map_wanted(map, blk) &&
		(so->ops.page_records == NULL ||
		 so->ops.page_records(so->ops.ctx, blk, NULL, NULL) < 0);
}

/*
 * sweep_buffer_page stages block blk read through buffers (the scan's
 * reader; share lock while it is read); returns the node slots staged, 0
 * for a page of another kind or one never initialized.
 */
static int
sweep_buffer_page(IndexScanDesc scan, SweepMap *map, BlockNumber blk, SweepSlot *st)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	Relation	index = scan->indexRelation;
	Buffer		buf = shnsw_reader_get(&so->reader, blk);
	Page		page;
	int			n = 0;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (!PageIsNew(page))
	{
		bool		graph;

		shnsw_check_page(index, page, blk, 0);
		graph = ShnswPageGetOpaque(page)->page_type == SHNSW_PAGE_GRAPH;
		sweep_map_learn(map, blk, graph);
		if (graph)
		{
			n = shnsw_graph_nslots(index, page, blk, so->info->node_size);
			if (n > 0)
				sweep_stage(so, (const char *) shnsw_page_node(page, 0, so->info->node_size),
							n, st);
		}
	}
	UnlockReleaseBuffer(buf);
	return n;
}

/*
 * shnsw_sweep_fits: whether a sweep of an index of `nodes` nodes may run
 * when the budget does not cover the index. A sweep makes every node a
 * candidate of the search: its record (ShnswCand), its parked entry and
 * its visited slot, about 64 bytes a node. That must fit in
 * work_mem * hash_mem_multiplier, the memory a hash join may use (pgvector
 * bounds its iterative scans by work_mem too): 8 MB at the defaults, about
 * 130,000 nodes. A budget covering the index is the user's leave to sweep
 * it whatever its size. The planner (handler.c) asks the same question.
 */
bool
shnsw_sweep_fits(double nodes)
{
	double		per_node = sizeof(ShnswCand) + sizeof(ShnswPair) + 4 * sizeof(ShnswRef);

	return nodes <= (double) shnsw_max_scan_tuples ||
		nodes * per_node <= (double) get_hash_memory_limit();
}

static bool
scan_sweep_fits(ShnswScanOpaque so)
{
	return so->complete || shnsw_sweep_fits((double) so->node_count);
}

/*
 * scan_sweep offers every live node of the index to the search, in page
 * order (src/README, Scans: the sweep). The nodes the walk has not seen
 * are parked with their navigation distances, so that the emit bound
 * covers every node of the index: from then on a row is returned only when
 * no node not yet re-ranked can be nearer, and nodes no walk reaches are
 * returned in their place. Graph pages the scan's shared graph image holds
 * are read from it with plain loads; the others through the scan's reader
 * with read-ahead, share-locked one at a time. A node placed after the
 * relation's size was read belongs to a row our MVCC snapshot cannot see.
 */
static void
scan_sweep(IndexScanDesc scan, ShnswSweepReason why)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	Relation	index = scan->indexRelation;
	BlockNumber nblocks = RelationGetNumberOfBlocks(index);
	BlockNumber ahead = SHNSW_METAPAGE_BLKNO + 1;
	uint32		nseen = so->search.ncands;
	uint64	   *seen = palloc(sizeof(uint64) * Max(nseen, 1));
	SweepSlot  *st = palloc(sizeof(SweepSlot) * SHNSW_MAX_NODES_PER_PAGE);
	SweepMap   *map = sweep_map_get(index, so->truncations);

	/* the walk's nodes by reference (ref << 32 | index), to find their codes */
	for (uint32 i = 0; i < nseen; i++)
		seen[i] = (uint64) so->search.cands[i].ref << 32 | i;
	qsort(seen, nseen, sizeof(uint64), uint64_cmp);
	shnsw_heap_init(&so->edge, 64, false);
	sweep_map_learn(map, SHNSW_METAPAGE_BLKNO, false);
	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < nblocks; blk++)
	{
		bool		graph;
		int			n;

		if (!sweep_map_wanted(map, blk))
			continue;
		CHECK_FOR_INTERRUPTS();
		if ((n = sweep_image_page(so, blk, st, &graph)) >= 0)
		{
			sweep_map_learn(map, blk, graph);
			sweep_commit(scan, blk, st, n, seen, nseen);
			continue;
		}
		if (so->reader.mode != SHNSW_IO_SYNC && ahead <= blk)
		{
			BlockNumber blks[SHNSW_SWEEP_AHEAD];
			int			k = 0;

			for (ahead = blk; ahead < nblocks && k < SHNSW_SWEEP_AHEAD; ahead++)
				if (sweep_reads(so, map, ahead))
					blks[k++] = ahead;
			shnsw_reader_request(&so->reader, blks, k, false);
		}
		n = sweep_buffer_page(scan, map, blk, st);
		sweep_commit(scan, blk, st, n, seen, nseen);
	}
	shnsw_search_swept(&so->search);
	so->swept = true;
	so->stats.sweeps[why]++;
	pfree(st);
	pfree(seen);
}

/* Make so->outbuf hold at least n candidate indexes. */
static void
scan_outbuf_room(ShnswScanOpaque so, int n)
{
	if (so->outcap < n)
	{
		so->outcap = n;
		so->outbuf = so->outbuf ? repalloc(so->outbuf, sizeof(uint32) * n)
			: palloc(sizeof(uint32) * n);
	}
}

/*
 * scan_may_widen: is the next round the first one widened? A strict scan
 * returns only the nearer half of its first round on the walk's premise; a
 * later round returns rows only below the frontier as it started, so a
 * LIMIT past ef_search / 2 waited for a second round twice as wide and
 * often a third: at ef_search 20, LIMIT 20 expanded 80 to 96 nodes where
 * ef_search 40 expands 40, and LIMIT 10, 20 and 40 at ef_search 10, 20
 * and 40 (ef_search at least the LIMIT, as pgvector asks) ran at 1.25x to
 * 1.53x pgvector's speed against 3x at twice that ef_search (real
 * sentences 100k x 384, 300 queries; 1.65x to 1.99x widened: src/README,
 * Scans). So the first time the executor wants
 * more than the first round lets out, the first round is continued as if
 * it had been twice as wide (shnsw_search_widen): it returns the nearer
 * half of all its rows, as a first round of ef_search twice as large
 * would. Later rounds are as before. Not after a sweep.
 */
static inline bool
scan_may_widen(ShnswScanOpaque so)
{
	return shnsw_iterative_scan == SHNSW_ITERATIVE_STRICT && so->search.rounds == 1 &&
		so->search.widened == 0 && !so->swept && !so->unbounded &&
		!so->search.budget_spent;
}

/*
 * scan_proof_may_search: the nearest held row waits for the emit bound and
 * the parked nodes a round may take are spent; may the scan search on (a
 * round, or the first round's widening) to prove that row's place?
 * Strict order's proof rests on bounds whose strength depends on the data
 * (a code's error against the gaps between the nearest rows), and a proof
 * that searches until it succeeds turned a LIMIT 10 into a read of the
 * whole index where the bound was weak (src/README, Scans: what a scan
 * costs). So a row of the first round's nearer half (below its floor:
 * what a LIMIT of up to ef_search / 2, or ef_search once the round is
 * widened, is served from) never makes the scan search on: it is
 * returned as it is, in exact order among the rows found (so->force_emit),
 * as pgvector returns the rows of its one search, and EXPLAIN counts it
 * ("proof capped"). A row past the floor wants the rest of the round's
 * width anyway: the scan widens the first round, and past that runs
 * rounds as an iterative scan does, within streamhnsw.max_scan_tuples
 * (pgvector's continues the same way). So an unfiltered LIMIT of up to
 * ef_search costs at most the first round and its widening, on any data.
 */
static bool
scan_proof_may_search(ShnswScanOpaque so)
{
	if (so->swept || so->unbounded || shnsw_iterative_scan != SHNSW_ITERATIVE_STRICT ||
		so->search.rounds != 1)
		return true;
	return distance_cmp(so->held[0].distance, so->first_floor) > 0;
}

/*
 * scan_next_round runs one search round, re-ranks its candidates exactly and
 * adds them to the held rows. Returns false when the search is exhausted.
 */
static bool
scan_next_round(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	int			n;

	scan_outbuf_room(so, so->round_ef);

	/*
	 * A strict scan the user asked to sweep (streamhnsw.sweep_threshold
	 * below 1, with a budget covering every node) sweeps instead of the
	 * next round once its walk has seen that share of the nodes: from then
	 * on nothing is returned on the graph's premise (scan_emit_bound). The
	 * sweep reads every graph page of the index: never a default.
	 */
	if (so->complete && !so->swept && so->search.rounds >= 1 &&
		shnsw_iterative_scan == SHNSW_ITERATIVE_STRICT && shnsw_sweep_threshold < 1.0 &&
		(double) so->search.ncands >= shnsw_sweep_threshold * (double) so->node_count)
		scan_sweep(scan, SHNSW_SWEEP_THRESHOLD);
	shnsw_reader_phase(&so->reader, SHNSW_PHASE_SEARCH);
	if (scan_may_widen(so))
	{
		/* the first round again, twice as wide, its rows counted */
		n = shnsw_search_widen(&so->search, so->round_ef, so->outbuf, &so->widen_median);
	}
	else
	{
		n = shnsw_search_next(&so->search, so->start, so->round_ef, so->outbuf);
		if (so->search.rounds == 1)
			so->search.max_discovered = so->search.ncands + (uint32) shnsw_max_scan_tuples;
	}
	so->round_ef = Min(so->round_ef * 2, SHNSW_MAX_EF_SEARCH * 4);
	so->ntaken = 0;
	so->take_ahead_left = 0;

	/*
	 * The walk is exhausted: nodes it never reached are still rows. Sweep
	 * for them only where that costs at most what the walk already did (it
	 * has seen half of the index or more), or where the user asked for
	 * sweeps (sweep_threshold below 1, a budget covering the index): an
	 * inner-product graph that leaves most nodes unreachable from a query
	 * must not turn a scan into a read of the whole index by default.
	 */
	if (n == 0 && !so->swept && scan_sweep_fits(so) &&
		((!so->search.budget_spent && 2 * (uint64) so->search.ncands >= so->node_count) ||
		 (so->complete && shnsw_sweep_threshold < 1.0)))
	{
		/* the walk is exhausted: nodes it never reached are still rows */
		scan_sweep(scan, SHNSW_SWEEP_WALK_ENDED);
		shnsw_reader_phase(&so->reader, SHNSW_PHASE_SEARCH);
		/* round_ef has doubled since outbuf was sized for this round */
		scan_outbuf_room(so, so->round_ef);
		n = shnsw_search_next(&so->search, so->start, so->round_ef, so->outbuf);
	}
	if (n == 0)
	{
		scan_fold(so);			/* release read-ahead pins early */
		return false;
	}
	n = scan_defer(so, n);
	shnsw_reader_phase(&so->reader, SHNSW_PHASE_RERANK);
	scan_rerank(scan, n);
	shnsw_reader_phase(&so->reader, SHNSW_PHASE_OTHER);

	/*
	 * streamhnsw.sweep_threshold = 0: sweep before any row is returned, so
	 * that no row at all is returned on the graph's premise (the first
	 * round's rows included: a first round that settled in the wrong
	 * region would otherwise return rows that later finds are nearer than).
	 * Exact and complete, for the price of a read of the index per scan.
	 */
	if (so->complete && !so->swept && shnsw_sweep_threshold == 0 &&
		shnsw_iterative_scan == SHNSW_ITERATIVE_STRICT)
		scan_sweep(scan, SHNSW_SWEEP_FIRST_ROUND);
	return true;
}

/*
 * scan_node_tids reads the heap TIDs of node ref, for a node that held more
 * than one when the search read it; returns how many. The header is read
 * again from the graph page, then the list from the node's upper record
 * (shnsw_read_node_tids), one share lock at a time. A node deleted or freed
 * since keeps only the TID already in tids[0] (dead to every snapshot).
 */
static int
scan_node_tids(IndexScanDesc scan, ShnswRef ref, ItemPointerData *tids)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	Relation	index = scan->indexRelation;
	BlockNumber blk = shnsw_ref_block(ref, so->info->slot_bits);
	int			slot = shnsw_ref_slot(ref, so->info->slot_bits);
	Buffer		buf;
	Page		page;
	ShnswNodeHeader h;
	bool		live = false;
	BlockNumber nblocks = 0;

	/* through the read pipeline, as the vectors are (never a wait in batch mode) */
	buf = shnsw_reader_get(&so->reader, blk);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	shnsw_check_page(index, page, blk, SHNSW_PAGE_GRAPH);
	if (slot < shnsw_graph_nslots(index, page, blk, so->info->node_size))
	{
		ShnswNodeHeader *hp = shnsw_page_node(page, slot, so->info->node_size);

		live = !(hp->flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE));
		memcpy(&h, hp, sizeof(h));
	}
	UnlockReleaseBuffer(buf);
	if (!live)
		return 1;
	return shnsw_read_node_tids(index, &so->reader, ref, blk, &h, so->info->m, &nblocks, tids);
}

/*
 * scan_rerank re-ranks the candidates so->outbuf[0..n-1] on their exact
 * vectors and adds them to the held rows; they are also left in
 * so->results. Returns how many (deleted nodes are not rows).
 */
static int
scan_rerank(IndexScanDesc scan, int n)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	ShnswIndexInfo *info = so->info;
	int			kept = 0;
	BlockNumber *blks;
	int			nblks = 0,
				nblks_total;

	for (int i = 0; i < n; i++)
	{
		ShnswCand  *c = &so->search.cands[so->outbuf[i]];

		/* a deleted node is still a waypoint: its bound stands for it */
		if (c->node_flags & SHNSW_NODE_DELETED)
			shnsw_heap_push(&so->unexpanded,
							(float) scan_lower_bound(so, shnsw_cand_bound_distance(&so->search, c)),
							so->outbuf[i]);
	}
	if (so->rescap < n * SHNSW_NODE_TIDS)
	{
		so->rescap = n * SHNSW_NODE_TIDS;
		so->results = so->results ? repalloc(so->results, sizeof(ShnswResult) * so->rescap)
			: palloc(sizeof(ShnswResult) * so->rescap);
	}

	/* read exact vectors in storage order, then sort by exact distance */
	sort_cands = so->search.cands;
	qsort(so->outbuf, n, sizeof(uint32), cand_vec_cmp);
	sort_cands = NULL;

	/* request every exact vector's pages before reading the first */
	blks = palloc(sizeof(BlockNumber) * 2 * n);
	nblks_total = scan_cand_blocks(so, so->outbuf, n, blks);
	for (int i = 0; i < n; i++)
	{
		ShnswCand  *c = &so->search.cands[so->outbuf[i]];
		ShnswResult *r;
		double		d;
		ItemPointerData tids[SHNSW_NODE_TIDS];
		int			ntids;

		if (c->node_flags & SHNSW_NODE_DELETED)
			continue;
		/* keep the remaining vectors' pages in flight */
		shnsw_reader_request(&so->reader, blks + nblks, nblks_total - nblks, false);
		nblks += shnsw_vector_blocks(c->vec_block, c->vec_offset, info->vec_size,
									 blks + nblks);
		shnsw_read_vector(scan->indexRelation, &so->reader, c->vec_block, c->vec_offset,
						  info->vec_size, so->vecbuf);
		so->stats.reranked++;
		d = DatumGetFloat8(FunctionCall2Coll(so->distproc, so->collation, so->query,
											 PointerGetDatum(so->vecbuf)));
		ntids = 1;
		ItemPointerSet(&tids[0], c->tid_blk, c->tid_off);
		if (c->extra_tids > 0)
			ntids = scan_node_tids(scan, c->ref, tids);
		/* all rows of a node share its exact distance */
		for (int t = 0; t < ntids; t++)
		{
			r = &so->results[kept++];
			r->tid = tids[t];
			r->distance = d;
			r->ref = c->ref;
			r->cand = so->outbuf[i];
		}
		scan_check_bound(so, shnsw_cand_bound_distance(&so->search, c), d);
	}
	pfree(blks);
	for (int i = 0; i < kept; i++)
	{
		ShnswResult *r = &so->results[i];

		r->round = so->search.rounds;
		held_push(so, r);
		/* once per node (a node's rows are adjacent) */
		if (!(so->search.cands[r->cand].state & SHNSW_CAND_EXPANDED) &&
			(i == 0 || so->results[i - 1].cand != r->cand))
			shnsw_heap_push(&so->unexpanded, (float) r->distance, r->cand);
	}
	return kept;
}

/* qsort comparator of ShnswPair, nearest first */
static int
pair_cmp(const void *a, const void *b)
{
	float		x = ((const ShnswPair *) a)->d,
				y = ((const ShnswPair *) b)->d;

	return (x > y) - (x < y);
}

/*
 * scan_take_ahead asks the reader, speculatively, for the vector pages of
 * the parked nodes whose bound is below the nearest held row, nearest
 * first: scan_take re-ranks them one at a time, and every one must be
 * re-ranked before that row may be returned (unless one of them turns out
 * nearer still, which only lowers the limit). Taking the top of the
 * parked heap's array instead (its first entries are not the nearest in
 * order) cost a serial read about every 15 re-ranks: on 768-d clustered
 * data a cold LIMIT 10 re-ranked 60 to 160 parked rows in 7 to 11 serial
 * round trips. The reader bounds the pages asked for by its look-ahead
 * distance.
 */
static void
scan_take_ahead(ShnswScanOpaque so)
{
	BlockNumber blks[2 * SHNSW_TAKE_AHEAD];
	int			n = 0,
				nnear = 0;
	const ShnswHeap *d = &so->search.D;
	double		limit = scan_held_limit(so);

	so->take_ahead_left = 1;
	if (!so->live || d->n == 0)
		return;
	if (so->take_near_cap < d->n)
	{
		so->take_near_cap = Max(d->n, 2 * so->take_near_cap);
		so->take_near = so->take_near ?
			repalloc(so->take_near, sizeof(ShnswPair) * so->take_near_cap) :
			MemoryContextAlloc(so->ctx, sizeof(ShnswPair) * so->take_near_cap);
	}
	for (int i = 0; i < d->n; i++)
	{
		ShnswCand  *c = &so->search.cands[d->a[i].id];

		if (!(c->state & SHNSW_CAND_EMITTED || c->node_flags & SHNSW_NODE_DELETED) &&
			scan_lower_bound(so, d->a[i].d) < limit)
			so->take_near[nnear++] = d->a[i];
	}
	qsort(so->take_near, nnear, sizeof(ShnswPair), pair_cmp);
	nnear = Min(nnear, SHNSW_TAKE_AHEAD);
	for (int i = 0; i < nnear; i++)
	{
		ShnswCand  *c = &so->search.cands[so->take_near[i].id];

		n += shnsw_vector_blocks(c->vec_block, c->vec_offset, so->info->vec_size, blks + n);
	}
	shnsw_reader_request(&so->reader, blks, n, true);

	/* look again when half of them are taken: the limit may have fallen */
	so->take_ahead_left = Max(nnear / 2, 1);
}

/*
 * scan_take_clamped re-ranks the clamped node (shnsw_search_clamped) that
 * holds the emit bound, without expanding it (the next round will).
 * Returns false if there is none.
 */
static bool
scan_take_clamped(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	int64		idx;

	so->take_clamped = false;
	so->range_clamped = false;
	idx = shnsw_search_take_clamped(&so->search);
	if (idx < 0)
		return false;
	so->outbuf[0] = (uint32) idx;
	scan_rerank(scan, 1);
	if (!(so->search.cands[idx].node_flags & SHNSW_NODE_DELETED))
		so->stats.parked_reranked++;
	return true;
}

/*
 * scan_take re-ranks the nearest node parked by the search without
 * expanding it (the next round will): when the emit bound is the parked
 * nodes' navigation distance less the codes' error, their exact distances
 * usually clear it at the cost of a vector read each, where a round would
 * expand ef_search more nodes. Returns false if there is none.
 */
static bool
scan_take(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	int64		idx;

	if (so->take_edge && so->edge.n > 0)
	{
		/* a code at an end of the range holds the bound: re-rank it */
		idx = shnsw_heap_pop(&so->edge).id;
		so->take_edge = false;
		so->search.cands[idx].state |= SHNSW_CAND_EMITTED;
		so->outbuf[0] = (uint32) idx;
		scan_rerank(scan, 1);
		so->stats.parked_reranked++;
		return true;
	}
	if (so->take_clamped && scan_take_clamped(scan))
		return true;
	idx = shnsw_search_take(&so->search);
	if (idx < 0)
		return false;
	so->ntaken++;
	if (--so->take_ahead_left <= 0)
		scan_take_ahead(so);
	so->outbuf[0] = (uint32) idx;
	scan_rerank(scan, 1);
	if (!(so->search.cands[idx].node_flags & SHNSW_NODE_DELETED))
		so->stats.parked_reranked++;
	return true;
}

/* parked nodes a swept scan re-ranks at a time, at most */
#define SHNSW_SWEPT_BATCH	64

/*
 * scan_take_batch: after the sweep, re-rank together the parked nodes,
 * nearest first, whose bound is below the nearest held row (every one of
 * them must be re-ranked before that row may be returned), at least one
 * and at most SHNSW_SWEPT_BATCH, their vectors read in storage order.
 * Returns false if none is parked.
 */
static bool
scan_take_batch(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	double		limit = scan_held_limit(so);
	int			n = 0;

	scan_outbuf_room(so, SHNSW_SWEPT_BATCH);
	while (n < SHNSW_SWEPT_BATCH)
	{
		float		f = shnsw_search_parked(&so->search);
		int64		idx;

		if (isinf(f) || (n > 0 && !(scan_lower_bound(so, f) < limit)))
			break;
		idx = shnsw_search_take(&so->search);
		if (idx < 0)
			break;
		so->outbuf[n++] = (uint32) idx;
		if (!(so->search.cands[idx].node_flags & SHNSW_NODE_DELETED))
			so->stats.parked_reranked++;
	}
	if (n == 0)
		return false;
	scan_rerank(scan, n);
	return true;
}

/*
 * scan_take_deferred re-ranks the nearest deferred nodes (scan_defer):
 * every one whose bound is below the nearest held row (all: whatever their
 * bound, when the proof gave up and the rows the round found are placed in
 * exact order before any of them is returned, scan_proof_may_search), at
 * least one and at most SHNSW_DEFERRED_BATCH, their vectors read in storage
 * order. Returns false if none is deferred.
 */
static bool
scan_take_deferred(IndexScanDesc scan, bool all)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	double		limit = scan_held_limit(so);
	int			n = 0;

	scan_outbuf_room(so, SHNSW_DEFERRED_BATCH);
	while (n < SHNSW_DEFERRED_BATCH && so->deferred.n > 0)
	{
		if (n > 0 && !all &&
			!(scan_deferred_bound(so, shnsw_heap_top(&so->deferred).d) < limit))
			break;
		so->outbuf[n++] = (uint32) shnsw_heap_pop(&so->deferred).id;
	}
	so->take_deferred = false;
	if (n == 0)
		return false;
	scan_rerank(scan, n);
	return true;
}

/*
 * scan_heap_ahead runs before each row the scan returns: the executor is
 * done with the heap block of the row returned before (its read-ahead pin
 * is released), and when the rows whose heap blocks were read ahead run
 * out, the heap blocks of the next rows, nearest first, are asked for
 * together (streamhnsw.heap_prefetch rows first, then twice as many each
 * time), so that a LIMIT 10 does not pay ten serial heap reads.
 */
static void
scan_heap_ahead(IndexScanDesc scan, ShnswScanOpaque so)
{
	ItemPointerData *tids;
	int		   *front;
	int			nfront;
	int			n;

	if (so->heap_prev != InvalidBlockNumber)
	{
		shnsw_reader_heap_done(&so->reader, so->heap_prev);
		so->heap_prev = InvalidBlockNumber;
	}
	if (shnsw_heap_prefetch == 0 || scan->heapRelation == NULL || so->nheld == 0 ||
		so->reader.mode == SHNSW_IO_SYNC)
		return;
	if (so->heap_ahead > 0)
	{
		so->heap_ahead--;
		return;
	}
	so->heap_window = so->heap_window == 0 ? shnsw_heap_prefetch
		: Min(so->heap_window * 2, SHNSW_MAX_EF_SEARCH);
	n = Min(so->heap_window, so->nheld);

	/*
	 * The n nearest held rows, nearest first, without sorting them all (a
	 * scan can hold thousands): a best-first walk of the held min-heap,
	 * whose frontier (positions, ordered by their rows) is itself a small
	 * binary heap.
	 */
	front = palloc(sizeof(int) * (n + 1));
	tids = palloc(sizeof(ItemPointerData) * n);
	nfront = 0;
	front[nfront++] = 0;
	for (int k = 0; k < n && nfront > 0; k++)
	{
		int			top = front[0];
		int			last = front[--nfront];
		int			i = 0;

		/* pop the frontier's nearest position */
		for (;;)
		{
			int			c = 2 * i + 1;

			if (c >= nfront)
				break;
			if (c + 1 < nfront && result_cmp(&so->held[front[c + 1]], &so->held[front[c]]) < 0)
				c++;
			if (result_cmp(&so->held[last], &so->held[front[c]]) <= 0)
				break;
			front[i] = front[c];
			i = c;
		}
		if (nfront > 0)
			front[i] = last;
		tids[k] = so->held[top].tid;
		/* its children in the held heap join the frontier */
		for (int child = 2 * top + 1; child <= 2 * top + 2 && child < so->nheld; child++)
		{
			int			j = nfront++;

			if (nfront > n + 1)
			{
				nfront--;		/* more than n can never be needed */
				break;
			}
			while (j > 0 && result_cmp(&so->held[child], &so->held[front[(j - 1) / 2]]) < 0)
			{
				front[j] = front[(j - 1) / 2];
				j = (j - 1) / 2;
			}
			front[j] = child;
		}
	}
	shnsw_reader_heap_prefetch(&so->reader, scan->heapRelation, tids, n);
	pfree(tids);
	pfree(front);
	so->heap_ahead = n - 1;		/* this row is the first of them */
}

/*
 * scan_null_query returns every indexed row, in index order, for an ORDER BY
 * whose query is NULL (all distances are NULL, so any order is right).
 */
static bool
scan_null_query_fill(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	Relation	index = scan->indexRelation;

	while (so->seq_blk < so->seq_nblocks)
	{
		Buffer		buf = ReadBuffer(index, so->seq_blk);
		Page		page;
		ShnswPageOpaque opaque;
		struct
		{
			int			slot;
			ShnswNodeHeader h;
		}			multi[SHNSW_MAX_NODES_PER_PAGE];
		int			nmulti = 0;
		ItemPointerData tids[SHNSW_NODE_TIDS];
		int			nt;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		so->nresults = so->next = 0;
		if (PageIsNew(page))
			opaque = NULL;		/* extended, never initialized: empty */
		else
		{
			shnsw_check_page(index, page, so->seq_blk, 0);
			opaque = ShnswPageGetOpaque(page);
		}
		if (opaque != NULL && opaque->page_type == SHNSW_PAGE_GRAPH)
		{
			int			node_size = so->info->node_size;
			int			nslots = shnsw_graph_nslots(index, page, so->seq_blk, node_size);

			if (so->rescap < nslots * SHNSW_NODE_TIDS)
			{
				so->rescap = SHNSW_MAX_NODES_PER_PAGE * SHNSW_NODE_TIDS;
				so->results = so->results ? repalloc(so->results, sizeof(ShnswResult) * so->rescap)
					: palloc(sizeof(ShnswResult) * so->rescap);
			}
			for (int s = 0; s < nslots; s++)
			{
				ShnswNodeHeader *h = shnsw_page_node(page, s, node_size);

				if (h->flags & SHNSW_NODE_DELETED)
					continue;
				if (h->extra_tids >= SHNSW_NODE_TIDS)
					shnsw_corrupt(index, so->seq_blk, "extra heap tuple count", h->extra_tids);
				if (h->extra_tids > 0)
				{
					/* its list is in its upper record: read after the unlock */
					memcpy(&multi[nmulti].h, h, sizeof(ShnswNodeHeader));
					multi[nmulti++].slot = s;
					continue;
				}
				shnsw_node_first_tid(index, so->seq_blk, h, &so->results[so->nresults].tid);
				so->results[so->nresults].distance = 0;
				so->nresults++;
			}
		}
		UnlockReleaseBuffer(buf);
		for (int k = 0; k < nmulti; k++)
		{
			BlockNumber nblocks = so->seq_nblocks;

			nt = shnsw_read_node_tids(index, NULL,
									  shnsw_make_ref(so->seq_blk, multi[k].slot,
													 so->info->slot_bits),
									  so->seq_blk, &multi[k].h, so->info->m, &nblocks, tids);
			for (int t = 0; t < nt; t++)
			{
				so->results[so->nresults].tid = tids[t];
				so->results[so->nresults].distance = 0;
				so->nresults++;
			}
		}
		so->seq_blk++;
		if (so->nresults > 0)
			return true;
	}
	return false;
}

/*
 * shnsw_gettuple is amgettuple: returns the next row in exact distance
 * order (forward only), running search rounds as needed. Holds no buffer
 * lock between calls, only read-ahead pins.
 */
bool
shnsw_gettuple(IndexScanDesc scan, ScanDirection dir)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	MemoryContext old = MemoryContextSwitchTo(so->ctx);

	if (!ScanDirectionIsForward(dir))
		elog(ERROR, "streamhnsw does not support backward scans");
	shnsw_debug_discard(scan->indexRelation);

	if (so->first)
	{
		so->first = false;
		if (!scan_setup(scan))
			so->done = true;
		pgstat_count_index_scan(scan->indexRelation);
#if PG_VERSION_NUM >= 180000
		/* EXPLAIN ANALYZE's "Index Searches": one graph search a scan */
		if (scan->instrument)
			scan->instrument->nsearches++;
#endif
	}

	while (so->null_query && !so->done)
	{
		if (so->next < so->nresults)
		{
			scan->xs_heaptid = so->results[so->next++].tid;
			scan->xs_recheck = false;
			scan->xs_recheckorderby = false;
			scan->xs_orderbynulls[0] = true;
			MemoryContextSwitchTo(old);
			return true;
		}
		CHECK_FOR_INTERRUPTS();
		if (!scan_null_query_fill(scan))
			so->done = true;
	}

	while (!so->done)
	{
		bool		parked = false;
		double		bound;

		/* no row held: the nearest deferred ones are rows found already */
		if (so->nheld == 0 && so->deferred.n > 0)
		{
			CHECK_FOR_INTERRUPTS();
			scan_take_deferred(scan, false);
			continue;
		}
		bound = so->nheld > 0 ? scan_emit_bound(so, &parked, false) : 0;

		/* NaN distances sort last, even after an infinite bound */
		if (so->nheld > 0 && (so->force_emit ||
							  distance_cmp(so->held[0].distance, bound) <= 0 ||
							  (isinf(bound) && bound > 0)))
		{
			bool		late;
			bool		forced = so->force_emit &&
				!(distance_cmp(so->held[0].distance, bound) <= 0 || (isinf(bound) && bound > 0));
			ShnswResult r = held_pop(so, &late);

			so->force_emit = false;
			if (forced)
				so->stats.proof_capped++;

			/*
			 * Relaxed order: a row past the distance bound is one the filter
			 * rejects; a row within it may still come (out of order).
			 */
			if (shnsw_iterative_scan != SHNSW_ITERATIVE_STRICT && past_range(so, r.distance))
				continue;
			if (so->nreturned > 0 && distance_cmp(r.distance, so->last_distance) < 0)
			{
				/* found only after a farther row was returned */
				so->stats.late_unplaced++;
				if (shnsw_iterative_scan == SHNSW_ITERATIVE_STRICT)
					continue;
			}
			else
			{
				so->last_distance = r.distance;
				if (late)
					so->stats.late_placed++;
			}
			if (past_range(so, r.distance))
			{
				/*
				 * Strict order returns no nearer row after this one: the
				 * filter would reject every row still to come.
				 */
				so->stats.range_ends++;
				so->done = true;
				break;
			}
			if (r.round < so->search.rounds)
				so->stats.held_back++;

			/*
			 * Before the sweep (or with a budget that does not cover the
			 * index) a node the scan has not seen may still be nearer: the
			 * row is returned on the graph walk's premise (src/README,
			 * Scans). EXPLAIN counts these; a strict scan that returned
			 * none returned the exact nearest rows in exact order.
			 */
			if (shnsw_iterative_scan == SHNSW_ITERATIVE_STRICT && !so->swept &&
				!so->unbounded)
				so->stats.unproven++;
			so->nreturned++;
			scan_heap_ahead(scan, so);
			so->heap_prev = ItemPointerGetBlockNumber(&r.tid);
			scan->xs_heaptid = r.tid;
			scan->xs_recheck = false;
			scan->xs_recheckorderby = false;
			scan->xs_orderbyvals[0] = Float8GetDatum(r.distance);
			scan->xs_orderbynulls[0] = false;
			MemoryContextSwitchTo(old);
			return true;
		}
		if (scan_range_done(so))
		{
			/* no row still to come is within the WHERE clause's bound */
			so->stats.range_ends++;
			so->done = true;
			break;
		}
		CHECK_FOR_INTERRUPTS();
		if (so->take_deferred && scan_take_deferred(scan, false))
			continue;
		if (so->range_clamped && !parked && scan_take_clamped(scan))
			continue;
		if (so->search_done)
			so->done = true;
		else if (parked && so->swept && !so->take_edge && scan_take_batch(scan))
			continue;
		else if (parked && so->ntaken < so->round_ef && scan_take(scan))
			continue;
		else if (so->nheld > 0 && !scan_proof_may_search(so))
		{
			/*
			 * The proof has spent its allowance: the round's own results
			 * are re-ranked first (they are rows already found, and exact
			 * order among them costs no search), then the nearest held row
			 * is returned as it is.
			 */
			if (so->deferred.n > 0)
				scan_take_deferred(scan, true);
			else
				so->force_emit = true;
		}
		else if (!scan_next_round(scan))
			so->search_done = true;
	}
	MemoryContextSwitchTo(old);
	return false;
}

/*
 * shnsw_endscan is amendscan: releases the read-ahead pins, adds the scan's
 * figures to the cumulative statistics and frees the scan's memory.
 */
void
shnsw_endscan(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;

	scan_fold(so);
	shnsw_reader_heap_end(&so->reader);
	scan_fold_reader(so);
	if (so->stats.scans > 0)
		shnsw_stats_accumulate(&so->stats);
	scan_search_free(so);
	MemoryContextDelete(so->ctx);
	pfree(so);
	scan->opaque = NULL;
}
