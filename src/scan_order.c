/*-------------------------------------------------------------------------
 *
 * scan_order.c
 *	  When an ordered scan may return its nearest held row: the search
 *	  rounds, the heap of held rows, the emit bound (the order proof) and
 *	  the end of a scan at the WHERE clause's distance bound.
 *
 * A row is returned only when its exact distance is within the emit bound:
 * a lower bound on the exact distance of every node the search has seen but
 * not re-ranked or not expanded (scan.c's header has the whole argument,
 * src/README, Scans, the reasoning). A round re-ranks only the nearest of
 * its results and defers the rest (scan_defer); the emit bound covers them
 * until scan_heap.c re-ranks them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"
#include "utils/float.h"

#include "codebound.h"
#include "options.h"
#include "pqueue.h"
#include "reader.h"
#include "scan_int.h"
#include "search.h"
#include "stats.h"

/*
 * least_not_done: the least key in h of a candidate whose state lacks done
 * (those that have it are popped on the way), or +inf if h has none.
 */
static float
least_not_done(ShnswScanOpaque so, ShnswHeap *h, uint8 done)
{
	while (h->n > 0 && (so->search.cands[shnsw_heap_top(h).id].state & done))
		shnsw_heap_pop(h);
	return h->n > 0 ? shnsw_heap_top(h).d : INFINITY;
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
		f = shnsw_search_frontier(&so->search);
		*parked = true;
		so->take_edge = false;
		if (!(isinf(f) && f > 0))
			bound = scan_lower_bound(so, f);
		/* and the box bound of codes that may stand for clamped values */
		f = least_not_done(so, &so->edge, SHNSW_CAND_EMITTED);
		if (f < bound)
		{
			bound = f;
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
		f = least_not_done(so, &so->unexpanded, SHNSW_CAND_EXPANDED);
		if (f < bound)
		{
			bound = f;
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
double
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
bool
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
	if (so->nheld > 0 && !scan_past_range(so, so->held[0].distance))
		return false;
	bound = scan_emit_bound(so, &parked, true);
	/* only a probe: what to take next is the gettuple loop's call's */
	so->range_clamped = so->take_clamped;
	so->take_edge = take_edge;
	so->take_deferred = take_deferred;
	so->take_clamped = take_clamped;
	if (scan_past_range(so, bound))
	{
		so->range_clamped = false;
		return true;
	}
	/* relaxed order takes no parked node but this kind (scan_take_clamped) */
	return false;
}

/* Sort candidate indexes by navigation distance, then by index. */
static int
cand_nav_cmp(const void *a, const void *b, void *arg)
{
	const ShnswCand *cands = arg;
	const ShnswCand *x = &cands[*(const uint32 *) a];
	const ShnswCand *y = &cands[*(const uint32 *) b];

	if (x->d != y->d)
		return x->d < y->d ? -1 : 1;
	return *(const uint32 *) a < *(const uint32 *) b ? -1 :
		*(const uint32 *) a > *(const uint32 *) b ? 1 : 0;
}

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
	qsort_arg(so->outbuf, n, sizeof(uint32), cand_nav_cmp, so->search.cands);
	if (so->search.rounds <= 1)
	{
		/*
		 * Its nearer half by navigation distance: the farthest exact
		 * distance a row of that half can have, on the same error as the
		 * first round's bound.
		 */
		int			mid = (n - 1) / 2;
		const ShnswCodeBound *b = so->swept ? &so->proof : &so->walk;
		float		d = so->search.widened > 0 ? so->widen_median :
			so->search.cands[so->outbuf[mid]].d;

		so->first_floor = shnsw_codebound_upper(b, d);
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
bool
scan_proof_may_search(ShnswScanOpaque so)
{
	if (so->swept || so->unbounded || shnsw_iterative_scan != SHNSW_ITERATIVE_STRICT)
		return true;

	/*
	 * A sketch's code distances bound nothing (src/README, Sparse
	 * vectors): no later round could prove a row either, so every round's
	 * rows are returned as the first round's are.
	 */
	if (so->bound.sketched)
		return false;
	if (so->search.rounds != 1)
		return true;
	return scan_distance_cmp(so->held[0].distance, so->first_floor) > 0;
}

/*
 * scan_next_round runs one search round, re-ranks its candidates exactly and
 * adds them to the held rows. Returns false when the search is exhausted.
 */
bool
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
