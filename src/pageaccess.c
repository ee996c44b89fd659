/*-------------------------------------------------------------------------
 *
 * pageaccess.c
 *	  ShnswPageOps over shared buffers: how the pure search reads node
 *	  records, upper-layer records and exact vectors.
 *
 * Each call pins and share-locks one page at a time and releases it before
 * moving on, so a scan never holds more than one buffer lock here (the
 * reader may hold pins of pages it reads ahead). References are grouped by
 * page so that nodes sharing a page cost a single buffer access, and all
 * the pages of one call are requested from the reader together before the
 * first is read: that is the known-order part of the I/O pipeline.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/bufmgr.h"
#include "utils/rel.h"

#include "streamhnsw.h"

/* Pin a page: through the scan's reader when there is one. */
static inline Buffer
page_get(Relation index, ShnswReader *reader, BlockNumber blk)
{
	return reader ? shnsw_reader_get(reader, blk) : ReadBuffer(index, blk);
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

	/* sort positions by block (n is small: insertion sort) */
	for (int k = 0; k < n; k++)
	{
		int			j = k;

		while (j > 0 && refs[order[j - 1]] > refs[k])
		{
			order[j] = order[j - 1];
			j--;
		}
		order[j] = k;
	}

	/* request every page of this call before reading the first */
	if (ctx->reader != NULL && n > 1)
	{
		BlockNumber *blks = ctx_blocks(ctx, n);

		for (int k = 0; k < n; k++)
			blks[k] = shnsw_ref_block(refs[order[k]], ctx->slot_bits);
	}

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

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		shnsw_check_page(ctx->index, page, blk, SHNSW_PAGE_GRAPH);
		nslots = ShnswPageGetOpaque(page)->nslots;
		for (; i < n && shnsw_ref_block(refs[order[i]], ctx->slot_bits) == blk; i++)
		{
			int			slot = shnsw_ref_slot(refs[order[i]], ctx->slot_bits);

			if (slot >= nslots)
				ereport(ERROR,
						(errcode(ERRCODE_INDEX_CORRUPTED),
						 errmsg("index \"%s\" references unused node slot %d of block %u",
								RelationGetRelationName(ctx->index), slot, blk)));
			fn(arg, order[i], shnsw_page_node(page, slot, ctx->node_size));
		}
		UnlockReleaseBuffer(buf);
	}
	if (order != order_buf)
		pfree(order);
}

/*
 * read_upper: copy one layer's neighbour list out of an upper-layer record.
 */
static int
shnsw_read_upper(void *vctx, ShnswUpperLoc loc, int layer, ShnswRef *out)
{
	ShnswPageCtx *ctx = (ShnswPageCtx *) vctx;
	Buffer		buf = page_get(ctx->index, ctx->reader, loc.block);
	Page		page;
	ItemId		iid;
	ShnswUpperHeader *u;
	int			cnt;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	shnsw_check_page(ctx->index, page, loc.block, SHNSW_PAGE_UPPER);
	if (loc.offset < FirstOffsetNumber || loc.offset > PageGetMaxOffsetNumber(page))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" references missing upper record (%u,%u)",
						RelationGetRelationName(ctx->index), loc.block, loc.offset)));
	iid = PageGetItemId(page, loc.offset);
	u = (ShnswUpperHeader *) PageGetItem(page, iid);
	if (layer < 1 || layer > u->level)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\": upper record (%u,%u) has no layer %d",
						RelationGetRelationName(ctx->index), loc.block, loc.offset, layer)));
	cnt = Min(shnsw_upper_counts(u)[layer - 1], ctx->m);
	memcpy(out, shnsw_upper_neighbors(u, layer, ctx->m), sizeof(ShnswRef) * cnt);
	UnlockReleaseBuffer(buf);
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
		blks[k] = shnsw_ref_block(refs[k], ctx->slot_bits);
	shnsw_reader_request(ctx->reader, blks, n, speculative);
}

void
shnsw_page_ops_init(ShnswPageOps *ops, ShnswPageCtx *ctx, Relation index,
					const ShnswIndexInfo *info, ShnswReader *reader)
{
	ctx->index = index;
	ctx->slot_bits = info->slot_bits;
	ctx->node_size = info->node_size;
	ctx->m = info->m;
	ctx->reader = reader;
	ctx->blkbuf = NULL;
	ctx->blkcap = 0;
	ops->ctx = ctx;
	ops->read_nodes = shnsw_read_nodes;
	ops->read_upper = shnsw_read_upper;
	ops->prefetch = reader != NULL && reader->mode != SHNSW_IO_SYNC ? shnsw_prefetch : NULL;
}

/*
 * shnsw_vector_blocks lists the blocks an exact vector occupies (at most
 * two for any supported size); returns how many.
 */
int
shnsw_vector_blocks(BlockNumber blk, uint16 offset, int size, BlockNumber *out)
{
	int			n = 0;
	int			end = offset + size;

	out[n++] = blk;
	while (end > (int) SHNSW_PAGE_CAPACITY)
	{
		out[n++] = ++blk;
		end -= SHNSW_PAGE_CAPACITY;
	}
	return n;
}

/*
 * shnsw_read_vector copies an exact vector of `size` bytes starting at
 * (blk, offset) into out. A vector written by a build may continue on the
 * following block(s); each page is pinned and share-locked only while
 * copying from it.
 */
void
shnsw_read_vector(Relation index, ShnswReader *reader, BlockNumber blk, uint16 offset,
				  int size, char *out)
{
	int			done = 0;

	while (done < size)
	{
		Buffer		buf = page_get(index, reader, blk);
		Page		page;
		int			chunk = Min(size - done, (int) SHNSW_PAGE_CAPACITY - offset);

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		shnsw_check_page(index, page, blk, SHNSW_PAGE_VECTOR);
		if (chunk <= 0 || offset + chunk > ((PageHeader) page)->pd_lower - MAXALIGN(SizeOfPageHeaderData))
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
}
