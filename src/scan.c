/*-------------------------------------------------------------------------
 *
 * scan.c
 *	  Ordered index scans: ORDER BY column <op> query LIMIT k.
 *
 * A scan descends greedily through the upper layers, then runs rounds of a
 * beam search on layer 0, all on SQ8 codes. Each round's candidates are
 * re-ranked with the operator class's exact distance function (the same
 * function as the ORDER BY operator, so values are identical) on the exact
 * vectors, sorted, and handed out in that order. When the executor wants
 * more rows than a round gave (a WHERE clause filtered them out), the next
 * round continues the same search with a doubled width, until
 * streamhnsw.max_scan_tuples more nodes have been examined.
 *
 * Results are strictly ordered: a later round never returns a row closer
 * than one already returned (such a row, found late, is skipped).
 *
 * Locking: no heavyweight lock. Each page is pinned and share-locked only
 * while it is read (pageaccess.c); nothing is held between calls.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "access/relscan.h"
#include "access/tableam.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "streamhnsw.h"

/* A row ready to be returned. */
typedef struct ShnswResult
{
	ItemPointerData tid;
	double		distance;
	uint32		ref;			/* tie-break: stable order for equal distances */
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
	ShnswPageOps ops;
	ShnswSearch search;
	ShnswRef	start;
	int			round_ef;
	uint32	   *outbuf;
	int			outcap;
	char	   *vecbuf;

	ShnswResult *results;
	int			nresults;
	int			next;
	int			rescap;
	bool		returned_any;
	double		last_distance;

	/* NULL query: walk every graph page */
	BlockNumber seq_blk;
	BlockNumber seq_nblocks;
} ShnswScanOpaqueData;

typedef ShnswScanOpaqueData *ShnswScanOpaque;

/*
 * scan_fold ends the active search: releases the reader's pins and adds the
 * search's figures to so->stats.
 */
static void
scan_fold(ShnswScanOpaque so)
{
	if (!so->live)
		return;
	so->stats.rounds += so->search.rounds;
	so->stats.nodes_expanded += so->search.nexpanded;
	so->stats.distances += so->search.ndistances;
	shnsw_reader_end(&so->reader);
	so->live = false;
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
	if (so->live)
	{
		snap.rounds += so->search.rounds;
		snap.nodes_expanded += so->search.nexpanded;
		snap.distances += so->search.ndistances;
		snap.la_samples += so->reader.la.samples;
		snap.la_distance_sum += so->reader.la.distance_sum;
		for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
			snap.la_hist[b] += so->reader.la.hist[b];
	}
	return &snap;
}

IndexScanDesc
shnsw_beginscan(Relation index, int nkeys, int norderbys)
{
	IndexScanDesc scan = RelationGetIndexScan(index, nkeys, norderbys);
	ShnswScanOpaque so = palloc0(sizeof(ShnswScanOpaqueData));

	so->ctx = AllocSetContextCreate(CurrentMemoryContext, "streamhnsw scan",
									ALLOCSET_DEFAULT_SIZES);
	so->first = true;
	scan->opaque = so;
	if (norderbys > 0)
	{
		scan->xs_orderbyvals = palloc0(sizeof(Datum) * norderbys);
		scan->xs_orderbynulls = palloc(sizeof(bool) * norderbys);
		memset(scan->xs_orderbynulls, true, sizeof(bool) * norderbys);
	}
	return scan;
}

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
	MemoryContextReset(so->ctx);
	/* everything below lived in so->ctx */
	so->outbuf = NULL;
	so->outcap = 0;
	so->results = NULL;
	so->rescap = 0;
	so->first = true;
	so->done = false;
	so->nresults = so->next = 0;
	so->returned_any = false;
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

	if (scan->numberOfOrderBys == 0 || scan->orderByData[0].sk_attno != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("streamhnsw index scans need an ORDER BY on the indexed column")));

	/* the metapage first: it tells whether cached SQ8 parameters are stale */
	shnsw_read_meta(index, &snap);
	info = so->info = shnsw_get_index_info(index);
	dims = info->dims;
	so->stats.scans++;
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
	/* a zero query under cosine cannot be normalized: navigate on it as is */
	(void) shnsw_vector_to_nav(q, info->elemtype, info->metric, dims, nav);
	so->sq.dim = dims;
	so->sq.qs = palloc(sizeof(float) * dims);
	so->sq.w = palloc(sizeof(float) * dims);
	sq8_prepare_query(&so->sq, info->metric, nav, info->lo, info->scale);

	shnsw_reader_init(&so->reader, index, &so->stats);
	shnsw_page_ops_init(&so->ops, &so->pctx, index, info, &so->reader);
	shnsw_search_init(&so->search, &so->sq, &so->ops, info->m, 0);
	so->live = true;
	so->start = shnsw_search_descend(&so->search, snap.entry, snap.entry_level, 0);
	so->round_ef = shnsw_ef_search;
	so->vecbuf = palloc(info->vec_size);
	return true;
}

/*
 * rerank_from_heap re-ranks the round's candidates on the table's own rows
 * instead of the index's copies (streamhnsw.rerank_source = heap): a
 * measurement mode, for plain-column indexes. Rows invisible to the scan's
 * snapshot are skipped, as the executor would skip them.
 */
static int
rerank_from_heap(IndexScanDesc scan, int n)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	AttrNumber	attnum = scan->indexRelation->rd_index->indkey.values[0];
	IndexFetchTableData *fetch;
	TupleTableSlot *slot;
	int			kept = 0;

	if (attnum == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("streamhnsw.rerank_source = heap needs an index on a plain column")));
	fetch = table_index_fetch_begin(scan->heapRelation);
	slot = table_slot_create(scan->heapRelation, NULL);
	for (int i = 0; i < n; i++)
	{
		ShnswCand  *c = &so->search.cands[so->outbuf[i]];
		ItemPointerData tid;
		bool		call_again = false,
					all_dead = false,
					isnull;
		Datum		value;

		if (c->node_flags & SHNSW_NODE_DELETED)
			continue;
		ItemPointerSet(&tid, c->tid_blk, c->tid_off);
		if (!table_index_fetch_tuple(fetch, &tid, scan->xs_snapshot, slot, &call_again, &all_dead))
			continue;
		value = slot_getattr(slot, attnum, &isnull);
		if (isnull)
			continue;
		so->results[kept].tid = tid;
		so->results[kept].distance = DatumGetFloat8(FunctionCall2Coll(so->distproc, so->collation,
																	  so->query, value));
		so->results[kept].ref = c->ref;
		kept++;
		so->stats.reranked++;
		ExecClearTuple(slot);
	}
	ExecDropSingleTupleTableSlot(slot);
	table_index_fetch_end(fetch);
	return kept;
}

/*
 * scan_next_round runs one search round, re-ranks its candidates exactly and
 * queues them. Returns false when the search is exhausted.
 */
static bool
scan_next_round(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	ShnswIndexInfo *info = so->info;
	int			n;
	int			kept = 0;

	if (so->outcap < so->round_ef)
	{
		so->outcap = so->round_ef;
		so->outbuf = so->outbuf ? repalloc(so->outbuf, sizeof(uint32) * so->outcap)
			: palloc(sizeof(uint32) * so->outcap);
	}
	n = shnsw_search_next(&so->search, so->start, so->round_ef, so->outbuf);
	if (so->search.rounds == 1)
		so->search.max_discovered = so->search.ncands + (uint32) shnsw_max_scan_tuples;
	so->round_ef = Min(so->round_ef * 2, SHNSW_MAX_EF_SEARCH * 4);
	if (n == 0)
	{
		scan_fold(so);			/* release read-ahead pins early */
		return false;
	}

	if (so->rescap < n)
	{
		so->rescap = n;
		so->results = so->results ? repalloc(so->results, sizeof(ShnswResult) * n)
			: palloc(sizeof(ShnswResult) * n);
	}

	/* read exact vectors in storage order, then sort by exact distance */
	sort_cands = so->search.cands;
	qsort(so->outbuf, n, sizeof(uint32), cand_vec_cmp);
	sort_cands = NULL;
	if (shnsw_rerank_source == SHNSW_RERANK_HEAP)
		kept = rerank_from_heap(scan, n);
	else
	{
		/* request every exact vector's pages before reading the first */
		BlockNumber *blks = palloc(sizeof(BlockNumber) * 2 * n);
		int			nblks = 0,
					nblks_total;

		for (int i = 0; i < n; i++)
		{
			ShnswCand  *c = &so->search.cands[so->outbuf[i]];

			if (!(c->node_flags & SHNSW_NODE_DELETED))
				nblks += shnsw_vector_blocks(c->vec_block, c->vec_offset, info->vec_size,
											 blks + nblks);
		}
		nblks_total = nblks;
		nblks = 0;
		for (int i = 0; i < n; i++)
		{
			ShnswCand  *c = &so->search.cands[so->outbuf[i]];
			ShnswResult *r;
			double		d;

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
			r = &so->results[kept++];
			ItemPointerSet(&r->tid, c->tid_blk, c->tid_off);
			r->distance = d;
			r->ref = c->ref;
		}
		pfree(blks);
	}
	qsort(so->results, kept, sizeof(ShnswResult), result_cmp);

	/* strict order: drop rows closer than one already returned */
	n = 0;
	for (int i = 0; i < kept; i++)
	{
		if (so->returned_any && distance_cmp(so->results[i].distance, so->last_distance) < 0)
			continue;
		so->results[n++] = so->results[i];
	}
	so->nresults = n;
	so->next = 0;
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

			if (so->rescap < nslots)
			{
				so->rescap = SHNSW_MAX_NODES_PER_PAGE;
				so->results = so->results ? repalloc(so->results, sizeof(ShnswResult) * so->rescap)
					: palloc(sizeof(ShnswResult) * so->rescap);
			}
			for (int s = 0; s < nslots; s++)
			{
				ShnswNodeHeader *h = shnsw_page_node(page, s, node_size);

				if (h->flags & SHNSW_NODE_DELETED)
					continue;
				if (h->tid_off == InvalidOffsetNumber || h->tid_off > MaxOffsetNumber)
					shnsw_corrupt(index, so->seq_blk, "heap tuple offset", h->tid_off);
				ItemPointerSet(&so->results[so->nresults].tid,
							   shnsw_node_tid_block(h), h->tid_off);
				so->results[so->nresults].distance = 0;
				so->nresults++;
			}
		}
		UnlockReleaseBuffer(buf);
		so->seq_blk++;
		if (so->nresults > 0)
			return true;
	}
	return false;
}

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
	}

	while (!so->done)
	{
		if (so->next < so->nresults)
		{
			ShnswResult *r = &so->results[so->next++];

			scan->xs_heaptid = r->tid;
			scan->xs_recheck = false;
			scan->xs_recheckorderby = false;
			if (so->null_query)
			{
				scan->xs_orderbynulls[0] = true;
			}
			else
			{
				scan->xs_orderbyvals[0] = Float8GetDatum(r->distance);
				scan->xs_orderbynulls[0] = false;
				so->returned_any = true;
				so->last_distance = r->distance;
			}
			MemoryContextSwitchTo(old);
			return true;
		}
		CHECK_FOR_INTERRUPTS();
		if (so->null_query ? !scan_null_query_fill(scan) : !scan_next_round(scan))
			so->done = true;
	}
	MemoryContextSwitchTo(old);
	return false;
}

void
shnsw_endscan(IndexScanDesc scan)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;

	scan_fold(so);
	if (so->stats.scans > 0)
		shnsw_stats_accumulate(&so->stats);
	MemoryContextDelete(so->ctx);
	pfree(so);
	scan->opaque = NULL;
}
