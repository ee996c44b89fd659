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
 * This file holds the access method's entry points, the scan's setup, the
 * gettuple state machine and the NULL-query path; scan_order.c the rounds
 * and the emit bound, scan_sweep.c the sweep, scan_heap.c re-ranking and
 * heap read-ahead (scan_int.h: the state they share).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/genam.h"
#include "access/relscan.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "bound.h"
#include "cache.h"
#include "codebound.h"
#include "format.h"
#include "kernels.h"
#include "meta.h"
#include "options.h"
#include "pageaccess.h"
#include "pages.h"
#include "pqueue.h"
#include "reader.h"
#include "scan.h"
#include "scan_int.h"
#include "search.h"
#include "stats.h"
#include "vector.h"

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
	excess = shnsw_code_excess(info->metric, info->lo, info->scale, nav, code, info->dims);
	pfree(code);
	return excess <= so->bound.res_range;
}

/*
 * scan_prepare_bounds encodes the query (nav, its navigation vector) for
 * the search on SQ8 codes and sets the bounds that hold rows back: so->bound
 * and so->proof (scan_lower_bound), and so->walk, the first round's. Sets
 * *clamp_factor and *clamp_max, the first round's slack for nodes whose
 * values were clamped into the trained range (shnsw_search_set_clamp_slack).
 */
static void
scan_prepare_bounds(ShnswScanOpaque so, const ShnswIndexInfo *info,
					const ShnswMetaSnapshot *snap, const float *nav,
					double *clamp_factor, double *clamp_max)
{
	int			dims = info->dims;

	so->sq.dim = dims;
	so->sq.qs = palloc(sizeof(float) * dims);
	so->sq.w = palloc(sizeof(float) * dims);

	/*
	 * Cosine navigates on the squared L2 distance between the normalized
	 * query and the codes of normalized rows: for unit vectors it orders as
	 * the inner product does, and the triangle inequality gives a far
	 * tighter bound (scan_lower_bound) when distances are small. The other
	 * metrics navigate on their own distance.
	 */
	sq8_prepare_query(&so->sq, info->metric == SHNSW_METRIC_COSINE && !so->unbounded ?
					  SHNSW_METRIC_L2 : info->metric, nav, info->lo, info->scale);
	shnsw_codebound_prepare(&so->bound, info->metric, so->unbounded, nav, info->lo, info->scale,
						dims, -1.0);
	so->bound.sketched = shnsw_nav_sketched(info->elemtype, info->coldims);
	so->proof = so->bound;
	if (snap->max_residual >= 0.0)
		shnsw_codebound_set_residual(&so->proof, snap->max_residual);
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
	*clamp_max = 0.0;
	*clamp_factor = 1.0;
	so->stats.first_bound = so->unbounded ? SHNSW_FIRST_NONE : SHNSW_FIRST_WORST_OLD;
	if (snap->max_residual >= 0.0 && snap->max_residual <= so->bound.res_range * (1 + 1e-6))
	{
		so->walk.err_abs = so->bound.err_typ;
		if (!so->unbounded)
			so->stats.first_bound = SHNSW_FIRST_TYPICAL;
	}
	else if (snap->max_residual >= 0.0 && snap->clamps_marked && !so->unbounded)
	{
		if (!scan_query_inside(so, info, nav))
			so->stats.first_bound = SHNSW_FIRST_WORST_QUERY;
		else
		{
			so->stats.first_bound = SHNSW_FIRST_MARKED;
			so->walk.err_abs = so->bound.err_typ;
			/* (with room to spare for the bound's relative rounding terms) */
			*clamp_max = (so->proof.err_abs - so->walk.err_abs) * (1 + 1e-4);
			if (info->metric == SHNSW_METRIC_IP)
				*clamp_factor = so->bound.qnorm * (1 + 1e-6);
			*clamp_factor *= 1 + 1e-4;
		}
	}
	if (so->bound.sketched)
		so->stats.first_bound = SHNSW_FIRST_NONE;	/* a sketch bounds nothing */
}

/*
 * scan_start_search sets up the scan's reader and node source (the shared
 * cache's, or buffers) and descends from the entry point to layer 0; the
 * first round runs at the first scan_next_round.
 */
static void
scan_start_search(IndexScanDesc scan, const ShnswMetaSnapshot *snap,
				  double clamp_factor, double clamp_max)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	Relation	index = scan->indexRelation;
	ShnswIndexInfo *info = so->info;

	shnsw_reader_init(&so->reader, index);
	so->stats.io_mode = so->reader.mode;
	shnsw_buffer_source_init(&so->ops, &so->pctx, index, info, &so->reader);
	shnsw_buffer_source_descent(&so->pctx, snap->node_count);
	shnsw_cache_scan_begin(index, info, snap, &so->ops, &so->stats, so->ctx);
	shnsw_search_init(&so->search, &so->sq, &so->ops, info->m, 0);
	shnsw_search_set_clamp_slack(&so->search, so->bound.res_range, clamp_factor, clamp_max);
	shnsw_heap_init(&so->unexpanded, 64, false);
	shnsw_heap_init(&so->deferred, 64, false);
	so->first_floor = get_float8_infinity();
	so->live = true;
	shnsw_reader_phase(&so->reader, SHNSW_PHASE_DESCENT);
	so->start = shnsw_search_start(&so->search, snap->entry, snap->entry_level);

	/*
	 * A sketch's distances estimate the exact ones with noise that no
	 * bound covers, so the rows a search of width ef_search finds are
	 * re-ranked with more of the nodes it parked (scan_take_cap). Where
	 * those rows come from matters more than how many are re-ranked: on
	 * 3,000 topic-shaped sparse rows (30,000 dimensions, cosine, ef_search
	 * 40, 200 queries), recall@10 was 0.971 with a walk of 40 and 80
	 * parked rows re-ranked, 0.976 with 200 parked, but 0.985 with a walk
	 * of 80 and 40 parked: 120 re-ranked rows either way. A wider walk
	 * sees more of the sketch's nearest nodes; the noisy distances leave a
	 * walk of width ef_search short of them (docs/design-decisions.md).
	 */
	so->round_ef = so->ef_search * (so->bound.sketched ? SHNSW_SKETCH_WALK : 1);
	so->stats.sketch_walk = so->bound.sketched ? so->round_ef : 0;
	so->vecbuf = palloc(info->vec_size);
	/* the budget covers every node ever placed: sweep (scan_sweep) */
	so->complete = (uint64) shnsw_max_scan_tuples >= snap->node_count;

	so->node_count = snap->node_count;
	so->truncations = snap->truncations;
	so->swept = false;
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
	double		clamp_max;
	double		clamp_factor;

	if (scan->numberOfOrderBys == 0 || scan->orderByData[0].sk_attno != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("streamhnsw index scans need an ORDER BY on the indexed column")));

	/* the metapage first: it tells whether cached SQ8 parameters are stale */
	shnsw_read_meta(index, &snap);
	info = so->info = shnsw_get_index_info(index);
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

	q = shnsw_check_vector(scan->orderByData[0].sk_argument, info->elemtype, info->coldims);
	so->query = PointerGetDatum(q);

	if (snap.entry == SHNSW_INVALID_REF || !info->quant_trained)
		return false;

	/*
	 * A zero query under cosine cannot be normalized: navigate on it as is;
	 * its distance to every row is NaN, so any order is right.
	 */
	nav = palloc(sizeof(float) * info->dims);
	so->unbounded = !shnsw_vector_to_nav(q, info->elemtype, info->metric, info->dims, nav);
	scan_prepare_bounds(so, info, &snap, nav, &clamp_factor, &clamp_max);
	scan_start_search(scan, &snap, clamp_factor, clamp_max);
	return true;
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
 * scan_first_call sets the scan up at its first gettuple (an empty index's
 * scan is done at once) and counts it: one graph search a scan.
 */
static void
scan_first_call(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;

	so->first = false;
	if (!scan_setup(scan))
		so->done = true;
	pgstat_count_index_scan(scan->indexRelation);
	/* EXPLAIN ANALYZE's "Index Searches" */
	if (scan->instrument)
		scan->instrument->nsearches++;
}

/* scan_null_query_next returns the next row of a NULL query's scan. */
static bool
scan_null_query_next(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;

	while (!so->done)
	{
		if (so->next < so->nresults)
		{
			scan->xs_heaptid = so->results[so->next++].tid;
			scan->xs_recheck = false;
			scan->xs_recheckorderby = false;
			scan->xs_orderbynulls[0] = true;
			return true;
		}
		CHECK_FOR_INTERRUPTS();
		if (!scan_null_query_fill(scan))
			so->done = true;
	}
	return false;
}

/* What scan_pop_row did with the nearest held row. */
typedef enum ScanRowFate
{
	SCAN_ROW_RETURN,			/* return it */
	SCAN_ROW_SKIP,				/* not a row to return: look again */
	SCAN_ROW_END,				/* past the distance bound: the scan is done */
} ScanRowFate;

/*
 * scan_pop_row takes the nearest held row into *r, which the emit bound
 * (bound) lets out or the proof's cap forces out, and decides its fate: a
 * row found only after a farther one was returned is skipped in strict
 * order, and one past the WHERE clause's distance bound ends the scan.
 */
static ScanRowFate
scan_pop_row(ShnswScanOpaque so, double bound, ShnswResult *r)
{
	bool		late;
	bool		forced = so->force_emit &&
		!(scan_distance_cmp(so->held[0].distance, bound) <= 0 || (isinf(bound) && bound > 0));

	*r = scan_held_pop(so, &late);
	so->force_emit = false;
	if (forced)
		so->stats.proof_capped++;

	/*
	 * Relaxed order: a row past the distance bound is one the filter
	 * rejects; a row within it may still come (out of order).
	 */
	if (shnsw_iterative_scan != SHNSW_ITERATIVE_STRICT && scan_past_range(so, r->distance))
		return SCAN_ROW_SKIP;
	if (so->nreturned > 0 && scan_distance_cmp(r->distance, so->last_distance) < 0)
	{
		/* found only after a farther row was returned */
		so->stats.late_unplaced++;
		if (shnsw_iterative_scan == SHNSW_ITERATIVE_STRICT)
			return SCAN_ROW_SKIP;
	}
	else
	{
		so->last_distance = r->distance;
		if (late)
			so->stats.late_placed++;
	}
	if (scan_past_range(so, r->distance))
	{
		/*
		 * Strict order returns no nearer row after this one: the filter
		 * would reject every row still to come.
		 */
		so->stats.range_ends++;
		return SCAN_ROW_END;
	}
	if (r->round < so->search.rounds)
		so->stats.held_back++;

	/*
	 * Before the sweep (or with a budget that does not cover the index) a
	 * node the scan has not seen may still be nearer: the row is returned
	 * on the graph walk's premise (src/README, Scans). EXPLAIN counts
	 * these; a strict scan that returned none returned the exact nearest
	 * rows in exact order.
	 */
	if (shnsw_iterative_scan == SHNSW_ITERATIVE_STRICT && !so->swept && !so->unbounded)
		so->stats.unproven++;
	return SCAN_ROW_RETURN;
}

/* scan_return_row hands row r to the executor, its heap block read ahead. */
static void
scan_return_row(IndexScanDesc scan, const ShnswResult *r)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;

	so->nreturned++;
	scan_heap_ahead(scan, so);
	so->heap_prev = ItemPointerGetBlockNumber(&r->tid);
	scan->xs_heaptid = r->tid;
	scan->xs_recheck = false;
	scan->xs_recheckorderby = false;
	scan->xs_orderbyvals[0] = Float8GetDatum(r->distance);
	scan->xs_orderbynulls[0] = false;
}

/*
 * scan_take_cap: parked nodes a round may re-rank (scan_take) before the
 * scan runs the next round or returns its rows as they are: the next
 * round's width, or under a sketch, whose bound every parked node holds
 * (scan_lower_bound is -infinity), ef_search (SHNSW_SKETCH_WALK).
 */
static inline int
scan_take_cap(ShnswScanOpaque so)
{
	return so->bound.sketched ? so->ef_search : so->round_ef;
}

/*
 * scan_advance does the one step that may let the nearest held row out
 * when the emit bound holds it back (parked: the bound is the nearest
 * parked node's): re-rank the deferred or parked nodes that hold the bound,
 * return the row as it is once the proof has spent its allowance, or run
 * the next round. Marks the scan done when nothing is left to search.
 */
static void
scan_advance(IndexScanDesc scan, bool parked)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;

	if (so->take_deferred && scan_take_deferred(scan, false))
		return;
	if (so->range_clamped && !parked && scan_take_clamped(scan))
		return;
	if (so->search_done)
		so->done = true;
	else if (parked && so->swept && !so->take_edge && scan_take_batch(scan))
		return;
	else if (parked && so->ntaken < scan_take_cap(so) && scan_take(scan))
		return;
	else if (so->nheld > 0 && !scan_proof_may_search(so))
	{
		/*
		 * The proof has spent its allowance: the round's own results are
		 * re-ranked first (they are rows already found, and exact order
		 * among them costs no search), then the nearest held row is
		 * returned as it is.
		 */
		if (so->deferred.n > 0)
			scan_take_deferred(scan, true);
		else
			so->force_emit = true;
	}
	else if (!scan_next_round(scan))
		so->search_done = true;
}

/*
 * scan_next_row returns the next row in exact distance order, running
 * search rounds as needed; false when the scan is done.
 */
static bool
scan_next_row(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;

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
							  scan_distance_cmp(so->held[0].distance, bound) <= 0 ||
							  (isinf(bound) && bound > 0)))
		{
			ShnswResult r;

			switch (scan_pop_row(so, bound, &r))
			{
				case SCAN_ROW_RETURN:
					scan_return_row(scan, &r);
					return true;
				case SCAN_ROW_SKIP:
					continue;
				case SCAN_ROW_END:
					so->done = true;
					return false;
			}
		}
		if (scan_range_done(so))
		{
			/* no row still to come is within the WHERE clause's bound */
			so->stats.range_ends++;
			so->done = true;
			break;
		}
		CHECK_FOR_INTERRUPTS();
		scan_advance(scan, parked);
	}
	return false;
}

/*
 * shnsw_gettuple is amgettuple: returns the next row in exact distance
 * order (forward only). Holds no buffer lock between calls, only
 * read-ahead pins.
 */
bool
shnsw_gettuple(IndexScanDesc scan, ScanDirection dir)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	MemoryContext old = MemoryContextSwitchTo(so->ctx);
	bool		found;

	if (!ScanDirectionIsForward(dir))
		elog(ERROR, "streamhnsw does not support backward scans");
	shnsw_debug_discard(scan->indexRelation);

	if (so->first)
		scan_first_call(scan);
	if (so->null_query)
		found = scan_null_query_next(scan);
	else
		found = scan_next_row(scan);
	MemoryContextSwitchTo(old);
	return found;
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
