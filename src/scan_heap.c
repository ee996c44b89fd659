/*-------------------------------------------------------------------------
 *
 * scan_heap.c
 *	  Re-ranking an ordered scan's candidates on their exact vectors, taking
 *	  parked and deferred nodes one batch at a time, and reading ahead the
 *	  heap blocks of the rows returned next.
 *
 * Every exact vector and heap block goes through the scan's reader
 * (reader.c): the pages of a batch are asked for before the first is read.
 * Locking: a page is pinned and share-locked only while it is read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "storage/bufmgr.h"
#include "utils/float.h"

#include "format.h"
#include "meta.h"
#include "options.h"
#include "pageaccess.h"
#include "pages.h"
#include "pqueue.h"
#include "reader.h"
#include "scan_int.h"
#include "search.h"

/*
 * parked nodes whose vectors scan_take_ahead reads ahead, at most: those
 * that must be re-ranked before the nearest held row may be returned
 */
#define SHNSW_TAKE_AHEAD	64

/* Sort candidate indexes (into arg's candidates) by where their exact vectors are. */
static int
cand_vec_cmp(const void *a, const void *b, void *arg)
{
	const ShnswCand *cands = arg;
	const ShnswCand *x = &cands[*(const uint32 *) a],
			   *y = &cands[*(const uint32 *) b];

	if (x->vec_block != y->vec_block)
		return x->vec_block < y->vec_block ? -1 : 1;
	return (x->vec_offset > y->vec_offset) - (x->vec_offset < y->vec_offset);
}

/*
 * scan_cand_blocks stores the blocks holding the exact vectors of
 * candidates idx[0..n-1] (deleted ones have none to read) in blks (room
 * for 2 * n) and returns how many.
 */
int
scan_cand_blocks(ShnswScanOpaque so, const uint32 *idx, int n, BlockNumber *blks)
{
	int			nb = 0;

	for (int i = 0; i < n; i++)
	{
		ShnswCand  *c = &so->search.cands[idx[i]];

		if (!(c->node_flags & SHNSW_NODE_DELETED))
			nb += shnsw_vector_blocks(c->vec_block, c->vec_offset, so->info->vec_span, blks + nb);
	}
	return nb;
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
int
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
	qsort_arg(so->outbuf, n, sizeof(uint32), cand_vec_cmp, so->search.cands);

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
		nblks += shnsw_vector_blocks(c->vec_block, c->vec_offset, info->vec_span,
									 blks + nblks);
		shnsw_read_vector(scan->indexRelation, &so->reader, c->vec_block, c->vec_offset,
						  info->elemtype, info->vec_size, so->vecbuf);
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
		scan_held_push(so, r);
		/* once per node (a node's rows are adjacent) */
		if (!(so->search.cands[r->cand].state & SHNSW_CAND_EXPANDED) &&
			(i == 0 || so->results[i - 1].cand != r->cand))
			shnsw_heap_push(&so->unexpanded, (float) r->distance, r->cand);
	}
	return kept;
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
	/* the nearest only: a sketched scan parks hundreds, every one below */
	nnear = shnsw_pairs_nearest(so->take_near, nnear, SHNSW_TAKE_AHEAD);
	for (int i = 0; i < nnear; i++)
	{
		ShnswCand  *c = &so->search.cands[so->take_near[i].id];

		n += shnsw_vector_blocks(c->vec_block, c->vec_offset, so->info->vec_span, blks + n);
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
bool
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
bool
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

/* Re-rank the n nodes taken into so->outbuf; false if none was taken. */
static bool
rerank_taken(IndexScanDesc scan, int n)
{
	if (n == 0)
		return false;
	scan_rerank(scan, n);
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
bool
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
	return rerank_taken(scan, n);
}

/*
 * scan_take_deferred re-ranks the nearest deferred nodes (scan_defer):
 * every one whose bound is below the nearest held row (all: whatever their
 * bound, when the proof gave up and the rows the round found are placed in
 * exact order before any of them is returned, scan_proof_may_search), at
 * least one and at most SHNSW_DEFERRED_BATCH, their vectors read in storage
 * order. Returns false if none is deferred.
 */
bool
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
	return rerank_taken(scan, n);
}

/*
 * scan_heap_ahead runs before each row the scan returns: the executor is
 * done with the heap block of the row returned before (its read-ahead pin
 * is released), and when the rows whose heap blocks were read ahead run
 * out, the heap blocks of the next rows, nearest first, are asked for
 * together (streamhnsw.heap_prefetch rows first, then twice as many each
 * time), so that a LIMIT 10 does not pay ten serial heap reads.
 */
void
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
			if (c + 1 < nfront && scan_result_cmp(&so->held[front[c + 1]], &so->held[front[c]]) < 0)
				c++;
			if (scan_result_cmp(&so->held[last], &so->held[front[c]]) <= 0)
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
			while (j > 0 && scan_result_cmp(&so->held[child], &so->held[front[(j - 1) / 2]]) < 0)
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
