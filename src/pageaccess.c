/*-------------------------------------------------------------------------
 *
 * pageaccess.c
 *	  The node source over shared buffers (nodesource.h): how the pure
 *	  search reads node records and upper-layer records; exact vectors.
 *
 * Each call pins and share-locks one page at a time and releases it before
 * moving on, so a scan never holds more than one buffer lock here (the
 * reader may hold pins of pages it reads ahead). References are grouped by
 * page so that nodes sharing a page cost a single buffer access, and all
 * the pages of one call are requested from the reader together before the
 * first is read: that is the known-order part of the I/O pipeline.
 *
 * Every field of a record is checked before it is used as a count, an
 * offset or a block number (shnsw_check_node and friends below, also used
 * by the other files): a corrupt page ends in an ERROR that names the index,
 * the block and the field, never in a read past a page or a lock on a page
 * this backend already holds.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "storage/bufmgr.h"
#include "varatt.h"
#include "utils/rel.h"

#include "format.h"
#include "meta.h"
#include "nodecheck.h"
#include "nodesource.h"
#include "options.h"
#include "pageaccess.h"
#include "pages.h"
#include "reader.h"

/*
 * shnsw_corrupt raises the error for a field read from block blk that is out
 * of range.
 */
void
shnsw_corrupt(Relation index, BlockNumber blk, const char *field, uint64 value)
{
	ereport(ERROR,
			(errcode(ERRCODE_INDEX_CORRUPTED),
			 errmsg("index \"%s\" has an invalid %s in block %u: %llu",
					RelationGetRelationName(index), field, blk, (unsigned long long) value),
			 errhint("REINDEX the index.")));
}

/*
 * shnsw_block_exists says whether blk is a block of the index. *nblocks is
 * the caller's cache of the relation's length (0 if unknown), refreshed
 * only when blk lies beyond it (an index shrinks only under an
 * AccessExclusiveLock, which no caller holding a cache overlaps).
 */
bool
shnsw_block_exists(Relation index, BlockNumber blk, BlockNumber *nblocks)
{
	if (blk < *nblocks)
		return true;
	if (blk == InvalidBlockNumber)
		return false;
	*nblocks = RelationGetNumberOfBlocks(index);
	return blk < *nblocks;
}

/*
 * shnsw_check_block raises an error unless blk, read from block `from` as
 * `field`, names a page of the index other than the metapage (nblocks as
 * for shnsw_block_exists).
 */
void
shnsw_check_block(Relation index, BlockNumber blk, BlockNumber *nblocks, BlockNumber from,
				  const char *field)
{
	if (blk == SHNSW_METAPAGE_BLKNO || !shnsw_block_exists(index, blk, nblocks))
		shnsw_corrupt(index, from, field, blk);
}

/*
 * shnsw_graph_nslots returns the slot count of graph page blk (whose type
 * the caller has checked), after checking that the slots fit the page.
 */
int
shnsw_graph_nslots(Relation index, Page page, BlockNumber blk, int node_size)
{
	int			n = ShnswPageGetOpaque(page)->nslots;

	if (n > shnsw_nodes_per_page(node_size))
		shnsw_corrupt(index, blk, "node slot count", n);
	return n;
}

/*
 * shnsw_node_limits fills lim with the limits of an index of m, slot_bits
 * and vec_span (shnsw_vec_span) that node records are checked against
 * (nodecheck.h); nblocks 0 if the caller does not know the index's length.
 */
void
shnsw_node_limits(ShnswNodeLimits *lim, int m, int slot_bits, int vec_span, BlockNumber nblocks)
{
	lim->m = m;
	lim->slot_bits = slot_bits;
	lim->vec_span = vec_span;
	lim->page_capacity = SHNSW_PAGE_CAPACITY;
	lim->max_offset = MaxOffsetNumber;
	lim->nblocks = nblocks;
}

/*
 * shnsw_check_node raises an error unless the node record in slot `slot` of
 * graph block blk passes the validator (nodecheck.h). *nblocks is the
 * caller's cache of the relation's length, as for shnsw_block_exists: a
 * block past it is looked for again in the relation before it counts as
 * corruption.
 */
void
shnsw_check_node(Relation index, BlockNumber blk, int slot, const ShnswNodeHeader *h, int m,
				 int slot_bits, int vec_span, BlockNumber *nblocks)
{
	ShnswRef	self = shnsw_make_ref(blk, slot, slot_bits);
	ShnswNodeLimits lim;
	ShnswNodeFault fault;
	const char *field;

	if (*nblocks == 0)
		*nblocks = RelationGetNumberOfBlocks(index);
	shnsw_node_limits(&lim, m, slot_bits, vec_span, *nblocks);
	field = shnsw_node_problem(h, self, &lim, &fault);
	if (field != NULL && fault.past_end)
	{
		/* the index may have grown since the caller last looked */
		*nblocks = RelationGetNumberOfBlocks(index);
		lim.nblocks = *nblocks;
		field = shnsw_node_problem(h, self, &lim, &fault);
	}
	if (field != NULL)
		shnsw_corrupt(index, blk, field, fault.value);
}

/* Read a TID laid out as ItemPointerData, checking its offset. */
static void
tid_get(Relation index, BlockNumber blk, const ShnswTid *x, ItemPointer tid)
{
	ShnswTid	t;

	memcpy(&t, x, sizeof(t));
	if (t.off == InvalidOffsetNumber || t.off > MaxOffsetNumber)
		shnsw_corrupt(index, blk, "heap tuple offset", t.off);
	ItemPointerSet(tid, ((BlockNumber) t.blk_hi << 16) | t.blk_lo, t.off);
}

/*
 * shnsw_node_first_tid copies the heap TID in the header of node record h
 * (graph block blk; under a share lock at least, or a copy), checked.
 */
void
shnsw_node_first_tid(Relation index, BlockNumber blk, const ShnswNodeHeader *h, ItemPointer tid)
{
	if (h->tid_off == InvalidOffsetNumber || h->tid_off > MaxOffsetNumber)
		shnsw_corrupt(index, blk, "heap tuple offset", h->tid_off);
	ItemPointerSet(tid, shnsw_node_tid_block(h), h->tid_off);
}

/*
 * shnsw_upper_node_tids copies the heap TIDs listed in upper record u (on
 * upper block ublk, under a share lock at least) into tids (room for
 * SHNSW_NODE_TIDS) and returns how many, if the record is node ref's and
 * lists any; else returns 0. Whether the list is the node's own is the
 * header's to say (extra_tids > 0: format.h).
 */
int
shnsw_upper_node_tids(Relation index, BlockNumber ublk, const ShnswUpperHeader *u, int m,
					  ShnswRef ref, ItemPointerData *tids)
{
	const ShnswTid *x = shnsw_upper_tids(u, m);

	if (u->node != ref)
		return 0;
	if (u->ntids > SHNSW_NODE_TIDS)
		shnsw_corrupt(index, ublk, "heap tuple count of an upper record", u->ntids);
	for (int k = 0; k < u->ntids; k++)
		tid_get(index, ublk, &x[k], &tids[k]);
	return u->ntids;
}

/*
 * shnsw_node_set_tids writes tids[0 .. n-1] (1 <= n <= SHNSW_NODE_TIDS) as
 * the heap TIDs of node record h: the first in the header, and, if u (the
 * node's upper record) is not NULL, all of them in u, whose unused entries
 * are cleared. n > 1 needs u. The caller holds the exclusive locks of both
 * pages in one WAL record.
 */
void
shnsw_node_set_tids(ShnswNodeHeader *h, ShnswUpperHeader *u, int m, const ItemPointerData *tids,
					int n)
{
	Assert(n >= 1 && n <= SHNSW_NODE_TIDS);
	Assert(n == 1 || u != NULL);
	h->tid_blk_hi = tids[0].ip_blkid.bi_hi;
	h->tid_blk_lo = tids[0].ip_blkid.bi_lo;
	h->tid_off = tids[0].ip_posid;
	h->extra_tids = (uint16) (n - 1);
	if (u == NULL)
		return;
	memset(shnsw_upper_tids(u, m), 0, SHNSW_UPPER_TIDS_SIZE);
	for (int k = 0; k < n; k++)
	{
		ShnswTid	t;

		t.blk_hi = tids[k].ip_blkid.bi_hi;
		t.blk_lo = tids[k].ip_blkid.bi_lo;
		t.off = tids[k].ip_posid;
		memcpy(&shnsw_upper_tids(u, m)[k], &t, sizeof(t));
	}
	u->ntids = (uint8) n;
}

/*
 * shnsw_upper_record returns the upper-layer record at offset off of upper
 * page blk (whose type the caller has checked), or NULL if there is no item
 * there; raises an error if the item cannot hold the record it claims to be
 * (its level's lists for m).
 */
ShnswUpperHeader *
shnsw_upper_record(Relation index, Page page, BlockNumber blk, OffsetNumber off, int m)
{
	ItemId		iid;
	ShnswUpperHeader *u;

	if (off < FirstOffsetNumber || off > PageGetMaxOffsetNumber(page))
		return NULL;
	iid = PageGetItemId(page, off);
	if (!ItemIdIsNormal(iid) || ItemIdGetLength(iid) < sizeof(ShnswUpperHeader) ||
		ItemIdGetOffset(iid) < SizeOfPageHeaderData ||
		ItemIdGetOffset(iid) + ItemIdGetLength(iid) > ((PageHeader) page)->pd_special)
		shnsw_corrupt(index, blk, "upper record item", off);
	u = (ShnswUpperHeader *) PageGetItem(page, iid);
	if (u->level > SHNSW_MAX_LEVEL || ItemIdGetLength(iid) < shnsw_upper_size(u->level, m))
		shnsw_corrupt(index, blk, "upper record level", u->level);
	return u;
}

/* at most this many graph pages read ahead for a descent */
#define SHNSW_DESCENT_AHEAD_MAX	32
/* at most this many upper pages read ahead in runs (levels 1 and up) */
#define SHNSW_DESCENT_UPPER_MAX	96

static void descent_read_ahead(ShnswPageCtx *ctx, BlockNumber ublk);

/* Pin a page: through the scan's reader when there is one. */
static inline Buffer
page_get(Relation index, ShnswReader *reader, BlockNumber blk)
{
	return reader ? shnsw_reader_get(reader, blk) : ReadBuffer(index, blk);
}

/*
 * shnsw_read_node_tids copies the heap TIDs of node ref (graph block blk)
 * into tids (room for SHNSW_NODE_TIDS) and returns how many, given h, its
 * header as read (a copy: the caller holds no buffer lock). A node with one
 * row has it in h; a node with more lists them all in its upper record,
 * read here under a share lock (through reader if not NULL). If the record
 * lists none for ref (VACUUM or a reuse of the slot changed the node since
 * h was read), h's TID is the answer: a row VACUUM removed since is dead to
 * every MVCC snapshot (src/README, the vacuum/scan interlock).
 */
int
shnsw_read_node_tids(Relation index, ShnswReader *reader, ShnswRef ref, BlockNumber blk,
					 const ShnswNodeHeader *h, int m, BlockNumber *nblocks,
					 ItemPointerData *tids)
{
	ShnswUpperLoc loc = shnsw_node_upper_loc(h);
	Buffer		buf;
	Page		page;
	ShnswUpperHeader *u;
	int			n = 0;

	shnsw_node_first_tid(index, blk, h, &tids[0]);
	if (h->extra_tids == 0)
		return 1;
	shnsw_check_block(index, loc.block, nblocks, blk, "upper record block");
	buf = page_get(index, reader, loc.block);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	shnsw_check_page(index, page, loc.block, SHNSW_PAGE_UPPER);
	u = shnsw_upper_record(index, page, loc.block, loc.offset, m);
	if (u != NULL)
		n = shnsw_upper_node_tids(index, loc.block, u, m, ref, tids);
	UnlockReleaseBuffer(buf);
	if (n == 0)
	{
		shnsw_node_first_tid(index, blk, h, &tids[0]);
		n = 1;
	}
	return n;
}

/* Room for n blocks in the context's scratch list. */
static BlockNumber *
ctx_blocks(ShnswPageCtx *ctx, int n)
{
	if (ctx->blkcap < n)
	{
		ctx->blkcap = Max(n, 2 * ctx->blkcap);
		ctx->blkbuf = ctx->blkbuf ? repalloc(ctx->blkbuf, sizeof(BlockNumber) * ctx->blkcap)
			: palloc(sizeof(BlockNumber) * ctx->blkcap);
	}
	return ctx->blkbuf;
}

/*
 * sort_by_ref(order, n, refs) sorts positions into refs by reference: a
 * sort template instance, so the comparison is inlined (this runs for
 * every node a search expands).
 */
#define ST_SORT sort_by_ref
#define ST_ELEMENT_TYPE int
#define ST_COMPARE(a, b, refs) \
	((refs)[*(a)] < (refs)[*(b)] ? -1 : (refs)[*(a)] > (refs)[*(b)] ? 1 : *(a) - *(b))
#define ST_COMPARE_ARG_TYPE const ShnswRef
#define ST_SCOPE static
#define ST_DEFINE
#include "lib/sort_template.h"

/*
 * read_nodes: call fn for every reference, visiting each distinct page once
 * (pinned and share-locked during the calls, released afterwards).
 */
static void
shnsw_read_nodes(void *vctx, const ShnswRef *refs, int n, ShnswNodeFn fn, void *arg)
{
	ShnswPageCtx *ctx = (ShnswPageCtx *) vctx;
	int			order_buf[2 * SHNSW_MAX_M + 2];
	int		   *order = n <= lengthof(order_buf) ? order_buf : palloc(sizeof(int) * n);
	int			i = 0;

	/* positions in reference order, so by block */
	for (int k = 0; k < n; k++)
		order[k] = k;
	sort_by_ref(order, n, refs);

	/* request every page of this call before reading the first */
	if (ctx->reader != NULL && n > 1)
	{
		BlockNumber *blks = ctx_blocks(ctx, n);

		for (int k = 0; k < n; k++)
			blks[k] = shnsw_ref_block(refs[order[k]], ctx->slot_bits);
	}
	for (int k = 0; k < n; k++)
		shnsw_check_block(ctx->index, shnsw_ref_block(refs[k], ctx->slot_bits), &ctx->nblocks,
						  SHNSW_METAPAGE_BLKNO, "node reference");

	while (i < n)
	{
		BlockNumber blk = shnsw_ref_block(refs[order[i]], ctx->slot_bits);
		Buffer		buf;
		Page		page;
		int			nslots;

		/* keep the rest of the batch in flight as reads are consumed */
		if (ctx->reader != NULL && n > 1)
			shnsw_reader_request(ctx->reader, ctx->blkbuf + i, n - i, false);
		buf = page_get(ctx->index, ctx->reader, blk);
		if (ctx->entry_blk == InvalidBlockNumber)
			ctx->entry_blk = blk;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		shnsw_check_page(ctx->index, page, blk, SHNSW_PAGE_GRAPH);
		nslots = shnsw_graph_nslots(ctx->index, page, blk, ctx->node_size);
		for (; i < n && shnsw_ref_block(refs[order[i]], ctx->slot_bits) == blk; i++)
		{
			int			slot = shnsw_ref_slot(refs[order[i]], ctx->slot_bits);
			ShnswNodeHeader *h;

			if (slot >= nslots)
				ereport(ERROR,
						(errcode(ERRCODE_INDEX_CORRUPTED),
						 errmsg("index \"%s\" references unused node slot %d of block %u",
								RelationGetRelationName(ctx->index), slot, blk)));
			h = shnsw_page_node(page, slot, ctx->node_size);
			shnsw_check_node(ctx->index, blk, slot, h, ctx->m, ctx->slot_bits, ctx->vec_span,
							 &ctx->nblocks);
			fn(arg, order[i], h);
		}
		UnlockReleaseBuffer(buf);
	}
	if (order != order_buf)
		pfree(order);
}

/*
 * shnsw_buffer_source_descent asks for read-ahead of the pages a greedy
 * descent through the upper layers reads, for an index of node_count
 * nodes. A build places nodes level by level, highest first, from the
 * entry point on (layout.c, shnsw_build_layout_pages), and their upper
 * records in the same order: the nodes of level 2 and up (about
 * node_count / m^2) fill the graph pages from the entry's on, and their
 * records the upper pages from the entry's record's on. Those pages are
 * requested as guesses when the descent reads its first upper record (the
 * entry point's page read has shown by then whether the index is cached:
 * the reader asks for nothing ahead while every access hits), so the top
 * layers' pages are read together instead of one hop after another. An
 * index whose top nodes moved (inserts, VACUUM) makes wrong guesses: reads
 * wasted, never a wrong answer. Needs a reader; call before the descent.
 */
void
shnsw_buffer_source_descent(ShnswPageCtx *ctx, uint64 node_count)
{
	double		top = (double) node_count / ((double) ctx->m * ctx->m);
	int			per_page = shnsw_nodes_per_page(ctx->node_size);
	Size		rec = MAXALIGN(shnsw_upper_size(2, ctx->m)) + sizeof(ItemIdData);
	double		upper = (double) node_count / ctx->m;
	Size		rec1 = MAXALIGN(shnsw_upper_size(1, ctx->m)) + sizeof(ItemIdData);

	if (ctx->reader == NULL || ctx->reader->mode == SHNSW_IO_SYNC)
		return;
	ctx->ahead_graph = (int) Min(ceil(top / per_page), SHNSW_DESCENT_AHEAD_MAX);

	/*
	 * Read in runs, the upper records of level 1 too (about node_count / m,
	 * packed after the higher levels' in the same order): a layer-1 hop then
	 * reads only its neighbours' graph records, one round trip instead of
	 * two, for a few more I/Os of adjacent pages.
	 */
	ctx->ahead_upper = (int) Min(ceil(top * rec / SHNSW_PAGE_CAPACITY +
									  (upper - top) * rec1 / SHNSW_PAGE_CAPACITY),
								 SHNSW_DESCENT_UPPER_MAX);
}

/*
 * descent_read_ahead requests, once, the pages shnsw_buffer_source_descent
 * sized: upper pages from ublk (the entry's record) on, then graph pages
 * after the entry's, as runs of adjacent blocks read by one I/O each
 * (shnsw_reader_request_range): 60 single-page guesses filled the I/O
 * workers' queue for four round trips ahead of the pages the descent and
 * the first hops needed. Blocks past the relation's end are left out.
 */
static void
descent_read_ahead(ShnswPageCtx *ctx, BlockNumber ublk)
{
	int			nupper = ctx->ahead_upper,
				ngraph = ctx->ahead_graph;

	ctx->ahead_graph = ctx->ahead_upper = 0;
	if (ctx->nblocks == 0)
		ctx->nblocks = RelationGetNumberOfBlocks(ctx->index);
	nupper = (int) Min((BlockNumber) nupper, ctx->nblocks - Min(ublk, ctx->nblocks));
	if (ctx->entry_blk != InvalidBlockNumber && ctx->entry_blk + 1 < ctx->nblocks)
		ngraph = (int) Min((BlockNumber) ngraph, ctx->nblocks - (ctx->entry_blk + 1));
	else
		ngraph = 0;

	/* adjacent pages: a few I/Os of up to io_combine_limit pages each */
	shnsw_reader_request_range(ctx->reader, ublk, nupper);
	if (ngraph > 0)
		shnsw_reader_request_range(ctx->reader, ctx->entry_blk + 1, ngraph);
}

/*
 * read_upper: copy one layer's neighbour list out of an upper-layer record.
 */
static int
shnsw_read_upper(void *vctx, ShnswUpperLoc loc, int layer, ShnswRef *out)
{
	ShnswPageCtx *ctx = (ShnswPageCtx *) vctx;
	Buffer		buf;
	Page		page;
	ShnswUpperHeader *u;
	int			cnt;

	shnsw_check_block(ctx->index, loc.block, &ctx->nblocks, SHNSW_METAPAGE_BLKNO,
					  "upper record block");
	if (ctx->ahead_graph + ctx->ahead_upper > 0)
		descent_read_ahead(ctx, loc.block);
	buf = page_get(ctx->index, ctx->reader, loc.block);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	shnsw_check_page(ctx->index, page, loc.block, SHNSW_PAGE_UPPER);
	u = shnsw_upper_record(ctx->index, page, loc.block, loc.offset, ctx->m);
	if (u == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" references missing upper record (%u,%u)",
						RelationGetRelationName(ctx->index), loc.block, loc.offset)));
	if (layer < 1 || layer > u->level)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\": upper record (%u,%u) has no layer %d",
						RelationGetRelationName(ctx->index), loc.block, loc.offset, layer)));
	cnt = Min(shnsw_upper_counts(u)[layer - 1], ctx->m);
	memcpy(out, shnsw_upper_neighbors(u, layer, ctx->m), sizeof(ShnswRef) * cnt);
	UnlockReleaseBuffer(buf);
	for (int k = 0; k < cnt; k++)
		shnsw_check_block(ctx->index, shnsw_ref_block(out[k], ctx->slot_bits), &ctx->nblocks,
						  loc.block, "upper neighbour reference");
	return cnt;
}

/*
 * prefetch: hand the pages of these nodes to the reader, in the order given
 * (best first for speculative requests).
 */
static void
shnsw_prefetch(void *vctx, const ShnswRef *refs, int n, bool speculative)
{
	ShnswPageCtx *ctx = (ShnswPageCtx *) vctx;
	BlockNumber *blks = ctx_blocks(ctx, n);

	for (int k = 0; k < n; k++)
	{
		blks[k] = shnsw_ref_block(refs[k], ctx->slot_bits);
		shnsw_check_block(ctx->index, blks[k], &ctx->nblocks, SHNSW_METAPAGE_BLKNO,
						  "node reference");
	}
	shnsw_reader_request(ctx->reader, blks, n, speculative);
}

/*
 * shnsw_buffer_source_init fills ops with the node source over shared
 * buffers; ctx (the caller's, living as long as ops) holds its state.
 * reader, if not NULL, is the scan's read pipeline (reads ahead);
 * otherwise every page is read when it is needed.
 */
void
shnsw_buffer_source_init(ShnswNodeSource *ops, ShnswPageCtx *ctx, Relation index,
					const ShnswIndexInfo *info, ShnswReader *reader)
{
	ctx->index = index;
	ctx->slot_bits = info->slot_bits;
	ctx->node_size = info->node_size;
	ctx->m = info->m;
	ctx->reader = reader;
	ctx->blkbuf = NULL;
	ctx->blkcap = 0;
	ctx->vec_span = info->vec_span;
	ctx->nblocks = 0;
	ctx->ahead_graph = ctx->ahead_upper = 0;
	ctx->entry_blk = InvalidBlockNumber;
	ops->ctx = ctx;
	ops->read_nodes = shnsw_read_nodes;
	ops->read_nodes_held = NULL;	/* a record is valid only under its pin */
	ops->read_upper = shnsw_read_upper;
	ops->prefetch = reader != NULL && reader->mode != SHNSW_IO_SYNC ? shnsw_prefetch : NULL;
	ops->speculative = true;
	ops->reread_cheap = false;	/* a second read is a pin and a lock */
	ops->page_records = NULL;	/* pages are read through buffers */
}

/*
 * shnsw_vector_blocks lists the blocks an exact vector occupies: at most
 * two for any supported size (a vector is smaller than a page), whatever
 * the offset (shnsw_check_node has checked it; a larger one would fail in
 * shnsw_read_vector). Returns how many.
 */
int
shnsw_vector_blocks(BlockNumber blk, uint16 offset, int size, BlockNumber *out)
{
	int			n = 0;

	out[n++] = blk;
	if (offset + size > (int) SHNSW_PAGE_CAPACITY)
		out[n++] = blk + 1;
	return n;
}

/*
 * shnsw_sparse_stored_size returns the size of the sparsevec stored at
 * offset of vector page `page` (block blk, locked by the caller), as its
 * varlena header says, once checked against bound (the metapage's
 * vec_size) and the page's data: the whole value lies on the page. Raises
 * the corruption error otherwise.
 */
int
shnsw_sparse_stored_size(Relation index, Page page, BlockNumber blk, int offset, int bound)
{
	int			data = ((PageHeader) page)->pd_lower - MAXALIGN(SizeOfPageHeaderData);
	union
	{
		uint32		word;
		char		bytes[SHNSW_SPARSE_HEAD];
	}			head;

	MemSet(&head, 0, sizeof(head));
	if (offset >= 0 && offset + SHNSW_SPARSE_HEAD <= data)
		memcpy(&head, PageGetContents(page) + offset, sizeof(head));
	if (!VARATT_IS_4B_U(head.bytes) || VARSIZE(head.bytes) < SHNSW_SPARSE_HEAD ||
		VARSIZE(head.bytes) > (Size) bound || offset + (int) VARSIZE(head.bytes) > data)
		shnsw_corrupt(index, blk, "stored vector header", head.word);
	return (int) VARSIZE(head.bytes);
}

/*
 * shnsw_read_vector copies the exact vector of elemtype at (blk, offset)
 * into out, `size` bytes (the metapage's vec_size): a vector's, halfvec's
 * or bit's whole image, which a build may have continued on the next block;
 * a sparsevec's image is at most that, as its varlena header says, and lies
 * on one page (shnsw_vec_span): the header is checked against size and the
 * page's data before its value is copied. Each page is pinned and
 * share-locked only while copying from it.
 */
void
shnsw_read_vector(Relation index, ShnswReader *reader, BlockNumber blk, uint16 offset,
				  ShnswElemType elemtype, int size, char *out)
{
	int			done = 0;
	bool		own_size = elemtype == SHNSW_ELEM_SPARSE;

	while (done < size)
	{
		Buffer		buf = page_get(index, reader, blk);
		Page		page;
		int			data;
		int			chunk = Min(size - done, (int) SHNSW_PAGE_CAPACITY - offset);

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		shnsw_check_page(index, page, blk, SHNSW_PAGE_VECTOR);
		data = ((PageHeader) page)->pd_lower - MAXALIGN(SizeOfPageHeaderData);
		if (own_size)
			size = chunk = shnsw_sparse_stored_size(index, page, blk, offset, size);
		if (chunk <= 0 || offset + chunk > data)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("index \"%s\" references a vector beyond the data of block %u",
							RelationGetRelationName(index), blk)));
		memcpy(out + done, PageGetContents(page) + offset, chunk);
		UnlockReleaseBuffer(buf);
		done += chunk;
		offset = 0;
		blk++;
	}

	/*
	 * The value goes to the operator's own function: it must be a plain
	 * varlena of this size (never compressed or external, which would be
	 * followed) whose dimension count fits it (the caller's function then
	 * checks it against the query's): int16 dimensions and int16 zero for
	 * vector and halfvec, int32 bits for bit, a sparsevec's int32
	 * dimensions and the non-zero count its size is of.
	 */
	{
		int32		h[4] = {0};
		bool		ok;

		memcpy(h, out, Min(size, (int) sizeof(h)));
		if (elemtype == SHNSW_ELEM_SPARSE)
			ok = h[1] >= 1 && h[2] >= 0 && size == SHNSW_SPARSE_HEAD + 8 * h[2] && h[3] == 0;
		else if (elemtype == SHNSW_ELEM_BIT)
			ok = h[1] >= 1 && h[1] <= SHNSW_MAX_BIT_DIM && 8 + (h[1] + 7) / 8 == size;
		else
			ok = ((const int16 *) out)[3] == 0 &&
				8 + (elemtype == SHNSW_ELEM_FLOAT4 ? 4 : 2) * ((const int16 *) out)[2] == size;
		if (!VARATT_IS_4B_U(out) || VARSIZE(out) != (Size) size || !ok)
			shnsw_corrupt(index, blk - 1, "stored vector header", *(const uint32 *) out);
	}
}
