/*-------------------------------------------------------------------------
 *
 * quantizer.c
 *	  SQ8 parameters on disk: writing them, and retraining an index that
 *	  was built small or empty.
 *
 * A build trains SQ8 on every row it indexes. An index created on an
 * empty (or tiny) table has to start from the first rows inserted, whose
 * ranges say little about the data to come, and values outside the range
 * are clamped, which blurs navigation (re-ranking keeps answers exact).
 * So each time such an index doubles, the insert that crosses the mark
 * retrains SQ8 on all the exact vectors stored in the index and re-encodes
 * every node's code, until training has seen SHNSW_RETRAIN_MAX_ROWS rows.
 *
 * Locking: the caller holds the insert lock in ExclusiveLock mode, so no
 * other insert runs; scans and VACUUM never take that lock (src/README,
 * Locking). Each graph page is exclusively locked only while its codes are
 * rewritten. A scan that straddles a retrain may navigate on a mix of old
 * and new codes for that one scan; its results stay exactly ordered.
 * quant_version tells backends to reload the parameters (src/README,
 * Quantizer maintenance). The SQ8 arithmetic itself is pure code
 * (kernels.c); meta.c reads these pages into the cached description.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"

#include "codebound.h"
#include "format.h"
#include "kernels.h"
#include "meta.h"
#include "pageaccess.h"
#include "pages.h"
#include "pagewrite.h"
#include "quantizer.h"
#include "vector.h"

/*
 * shnsw_train_from_first trains the quantizer of an index built empty on
 * its first vector nav: for cosine, the unit range [-1, 1]; otherwise a
 * range around the vector. Later values outside it are clamped until the
 * index retrains as it grows. A bit index takes the identity (codes are
 * its bytes), for good. Writes the quantizer pages and updates info's
 * lo and scale; the caller holds the insert lock in ExclusiveLock mode.
 */
void
shnsw_train_from_first(Relation index, ShnswIndexInfo *info, const float *nav)
{
	int			dims = info->dims;
	float	   *stream = palloc(sizeof(float) * 2 * dims);

	for (int i = 0; i < dims && info->elemtype == SHNSW_ELEM_BIT; i++)
		stream[i] = 0.0f, stream[dims + i] = 1.0f;
	for (int i = 0; i < dims && info->elemtype != SHNSW_ELEM_BIT; i++)
	{
		float		r = info->metric == SHNSW_METRIC_COSINE ? 1.0f : 2.0f * Max(fabsf(nav[i]), 1.0f);
		float		c = info->metric == SHNSW_METRIC_COSINE ? 0.0f : nav[i];

		stream[i] = c - r;
		stream[dims + i] = (2.0f * r) / 255.0f;
	}
	shnsw_write_quant(index, info->quant_start, dims, stream, stream + dims);
	memcpy(info->lo, stream, sizeof(float) * dims);
	memcpy(info->scale, stream + dims, sizeof(float) * dims);
	pfree(stream);
}

/*
 * shnsw_write_quant writes lo[] and scale[] as one float stream over the
 * quantizer pages, each page in a WAL record of its own (exclusive lock
 * held only while writing it).
 */
void
shnsw_write_quant(Relation index, BlockNumber quant_start, int dims,
				  const float *lo, const float *scale)
{
	Size		total = sizeof(float) * 2 * dims;
	char	   *stream = palloc(total);
	Size		done = 0;
	BlockNumber blk = quant_start;

	memcpy(stream, lo, sizeof(float) * dims);
	memcpy(stream + sizeof(float) * dims, scale, sizeof(float) * dims);
	while (done < total)
	{
		Size		chunk = Min(total - done, SHNSW_PAGE_CAPACITY);
		Buffer		buf = ReadBuffer(index, blk);
		ShnswWriteState *state;
		Page		page;

		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		state = shnsw_write_start(index);
		page = shnsw_write_buffer(state, buf, 0);
		shnsw_check_page(index, page, blk, SHNSW_PAGE_QUANT);
		memcpy(PageGetContents(page), stream + done, chunk);
		((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + chunk;
		shnsw_write_finish(state);
		UnlockReleaseBuffer(buf);
		done += chunk;
		blk++;
	}
	pfree(stream);
}

/* Vector locations of the nodes of one graph page. */
typedef struct PageVecs
{
	int			n;
	BlockNumber blk[SHNSW_MAX_NODES_PER_PAGE];
	uint16		off[SHNSW_MAX_NODES_PER_PAGE];
} PageVecs;

/*
 * Read a graph page's vector locations (each node checked: shnsw_check_node);
 * false if blk is not a graph page.
 */
static bool
read_page_vecs(Relation index, BlockNumber blkno, const ShnswIndexInfo *info, PageVecs *pv)
{
	int			node_size = info->node_size;
	BlockNumber nblocks = 0;
	Buffer		buf = ReadBuffer(index, blkno);
	Page		page;
	bool		graph;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (PageIsNew(page))
	{
		UnlockReleaseBuffer(buf);
		pv->n = 0;
		return false;
	}
	shnsw_check_page(index, page, blkno, 0);
	graph = ShnswPageGetOpaque(page)->page_type == SHNSW_PAGE_GRAPH;
	pv->n = 0;
	if (graph)
	{
		pv->n = shnsw_graph_nslots(index, page, blkno, node_size);
		for (int s = 0; s < pv->n; s++)
		{
			ShnswNodeHeader *h = shnsw_page_node(page, s, node_size);

			shnsw_check_node(index, blkno, s, h, info->m, info->slot_bits, info->vec_span,
							 &nblocks);
			pv->blk[s] = h->vec_block;
			pv->off[s] = h->vec_offset;
		}
	}
	UnlockReleaseBuffer(buf);
	return graph;
}

/*
 * shnsw_retrain retrains SQ8 on every exact vector in the index and
 * re-encodes all codes. Caller holds the insert lock.
 */
void
shnsw_retrain(Relation index)
{
	ShnswIndexInfo *info = shnsw_get_index_info(index);
	int			dims = info->dims;
	BlockNumber nblocks = RelationGetNumberOfBlocks(index);
	float	   *mins = palloc(sizeof(float) * dims);
	float	   *maxs = palloc(sizeof(float) * dims);
	float	   *lo = palloc(sizeof(float) * dims);
	float	   *scale = palloc(sizeof(float) * dims);
	float	   *nav = palloc(sizeof(float) * dims);
	char	   *img = palloc(info->vec_size);
	uint8	   *codes = palloc((Size) SHNSW_MAX_NODES_PER_PAGE * dims);
	uint8		clamp_flags[SHNSW_MAX_NODES_PER_PAGE];
	PageVecs	pv;
	uint64		rows = 0;
	double		max_residual = 0.0; /* of the new codes (metapage) */
	double		unit;

	/* pass 1: ranges of all stored vectors */
	sq8_train_init(mins, maxs, dims);
	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < nblocks; blk++)
	{
		if (!read_page_vecs(index, blk, info, &pv))
			continue;
		for (int s = 0; s < pv.n; s++)
		{
			shnsw_read_vector(index, NULL, pv.blk[s], pv.off[s], info->elemtype, info->vec_size, img);
			if (shnsw_vector_to_nav((struct varlena *) img, info->elemtype, info->metric, dims, nav))
				sq8_train_add(mins, maxs, nav, dims);
			rows++;
		}
		CHECK_FOR_INTERRUPTS();
	}
	sq8_train_finish(mins, maxs, lo, scale, dims);
	shnsw_write_quant(index, info->quant_start, dims, lo, scale);
	unit = shnsw_clamp_unit(info->metric, scale, dims);

	/* pass 2: re-encode every node */
	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < nblocks; blk++)
	{
		Buffer		buf;
		ShnswWriteState *state;
		Page		page;
		int			n;

		if (!read_page_vecs(index, blk, info, &pv) || pv.n == 0)
			continue;
		for (int s = 0; s < pv.n; s++)
		{
			shnsw_read_vector(index, NULL, pv.blk[s], pv.off[s], info->elemtype, info->vec_size, img);
			shnsw_vector_to_nav((struct varlena *) img, info->elemtype, info->metric, dims, nav);
			sq8_encode(lo, scale, nav, codes + (Size) s * dims, dims);
			max_residual = Max(max_residual,
							   shnsw_code_residual(info->metric, lo, scale, nav,
												   codes + (Size) s * dims, dims));
			/* trained on every stored vector: none is, but say what is so */
			clamp_flags[s] = shnsw_clamp_flags(shnsw_code_excess(info->metric, lo, scale, nav,
																 codes + (Size) s * dims, dims),
											   unit);
		}
		buf = ReadBuffer(index, blk);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		state = shnsw_write_start(index);
		page = shnsw_write_buffer(state, buf, 0);
		n = Min(pv.n, ShnswPageGetOpaque(page)->nslots);
		for (int s = 0; s < n; s++)
		{
			ShnswNodeHeader *h = shnsw_page_node(page, s, info->node_size);

			memcpy(shnsw_node_code(h, info->m), codes + (Size) s * dims, dims);
			h->flags = (h->flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)) | clamp_flags[s];
		}
		shnsw_write_finish(state);
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}

	/* publish */
	{
		Buffer		metabuf;
		ShnswWriteState *state;
		ShnswMetaPage meta = shnsw_write_meta(index, &metabuf, &state);

		meta->quant_rows = rows;
		if (meta->flags & SHNSW_META_RESIDUAL)
			meta->max_residual = max_residual;	/* every code is new */
		meta->quant_version++;
		meta->cache_generation++;
		shnsw_write_finish(state);
		UnlockReleaseBuffer(metabuf);
	}
	/* our cached description is stale; callers hold copies of their own */
	shnsw_forget_index_info(index);
}
