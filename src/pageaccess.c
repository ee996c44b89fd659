/*-------------------------------------------------------------------------
 *
 * pageaccess.c
 *	  ShnswPageOps over shared buffers: how the pure search reads node
 *	  records, upper-layer records and exact vectors.
 *
 * Each call pins and share-locks one page at a time and releases it before
 * moving on, so a scan never holds more than one buffer lock and one pin
 * here. References are grouped by page so that nodes sharing a page cost a
 * single buffer access.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/bufmgr.h"
#include "utils/rel.h"

#include "streamhnsw.h"

static inline ShnswNodeHeader *
page_node(Page page, int slot, int node_size)
{
	return (ShnswNodeHeader *) (PageGetContents(page) + (Size) slot * node_size);
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

	while (i < n)
	{
		BlockNumber blk = shnsw_ref_block(refs[order[i]], ctx->slot_bits);
		Buffer		buf = ReadBuffer(ctx->index, blk);
		Page		page;
		int			nslots;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		shnsw_check_page(ctx->index, page, blk, SHNSW_PAGE_GRAPH);
		nslots = ShnswPageGetOpaque(page)->nslots;
		ctx->pages_accessed++;
		for (; i < n && shnsw_ref_block(refs[order[i]], ctx->slot_bits) == blk; i++)
		{
			int			slot = shnsw_ref_slot(refs[order[i]], ctx->slot_bits);

			if (slot >= nslots)
				ereport(ERROR,
						(errcode(ERRCODE_INDEX_CORRUPTED),
						 errmsg("index \"%s\" references unused node slot %d of block %u",
								RelationGetRelationName(ctx->index), slot, blk)));
			fn(arg, order[i], page_node(page, slot, ctx->node_size));
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
	Buffer		buf = ReadBuffer(ctx->index, loc.block);
	Page		page;
	ItemId		iid;
	ShnswUpperHeader *u;
	int			cnt;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	shnsw_check_page(ctx->index, page, loc.block, SHNSW_PAGE_UPPER);
	ctx->pages_accessed++;
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

void
shnsw_page_ops_init(ShnswPageOps *ops, ShnswPageCtx *ctx, Relation index,
					const ShnswIndexInfo *info)
{
	ctx->index = index;
	ctx->slot_bits = info->slot_bits;
	ctx->node_size = info->node_size;
	ctx->m = info->m;
	ctx->pages_accessed = 0;
	ops->ctx = ctx;
	ops->read_nodes = shnsw_read_nodes;
	ops->read_upper = shnsw_read_upper;
	ops->prefetch = NULL;
}

/*
 * shnsw_read_vector copies an exact vector of `size` bytes starting at
 * (blk, offset) into out. A vector written by a build may continue on the
 * following block(s); each page is pinned and share-locked only while
 * copying from it.
 */
void
shnsw_read_vector(Relation index, BlockNumber blk, uint16 offset, int size, char *out)
{
	int			done = 0;

	while (done < size)
	{
		Buffer		buf = ReadBuffer(index, blk);
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
