/*-------------------------------------------------------------------------
 *
 * insert.c
 *	  aminsert: add one row to the graph.
 *
 * An insert finds the new node's neighbours with the same SQ8 search as a
 * scan (width ef_construction), chooses them with the neighbour heuristic
 * on codes, writes the node, its exact vector and its upper-layer record,
 * then adds a link back from each neighbour, re-selecting that neighbour's
 * list when it is full.
 *
 * Locking: inserters (and VACUUM) serialize on a heavyweight lock on the
 * metapage's page number (LockPage), which scans never take. Every page is
 * changed under an exclusive buffer lock held only while it is modified, so
 * a scan waits at most for one page modification. The node is written and
 * the metapage updated in one WAL record before any neighbour links to it;
 * each back-link is a record of its own. A crash in between leaves a node
 * that is reachable from fewer neighbours, belonging to a transaction that
 * never committed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/generic_xlog.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "streamhnsw.h"

typedef struct InsertState
{
	Relation	index;
	ShnswIndexInfo *info;
	ShnswPageCtx pctx;
	ShnswPageOps ops;
	int			dims;
	int			m;
	float	   *scratch;		/* 3 * dims floats */
} InsertState;

/* ---------- reading ---------- */

typedef struct ReadArg
{
	int			dims;
	int			m;
	uint8	   *codes;			/* out: codes, dims bytes each */
	ShnswRef   *list;			/* out: layer-0 list of the first node */
	int			count;
	ShnswUpperLoc upper;
} ReadArg;

static void
copy_code_cb(void *arg, int i, const ShnswNodeHeader *node)
{
	ReadArg    *a = (ReadArg *) arg;

	memcpy(a->codes + (Size) i * a->dims, shnsw_node_code(node, a->m), a->dims);
	if (a->list != NULL && i == 0)
	{
		a->count = Min(node->nneighbors, 2 * a->m);
		memcpy(a->list, shnsw_node_neighbors(node), sizeof(ShnswRef) * a->count);
		a->upper = shnsw_node_upper_loc(node);
	}
}

/* Copy the codes of refs[0..n-1] into codes. */
static void
read_codes(InsertState *is, const ShnswRef *refs, int n, uint8 *codes)
{
	ReadArg		a = {is->dims, is->m, codes, NULL, 0, {0, 0}};

	if (n > 0)
		is->ops.read_nodes(is->ops.ctx, refs, n, copy_code_cb, &a);
}

/* ---------- writing ---------- */

/*
 * Extend the index by one page, returned pinned and exclusively locked.
 * Refuses blocks that node references could not name.
 */
static Buffer
new_page(InsertState *is)
{
	Buffer		buf = ExtendBufferedRel(BMR_REL(is->index), MAIN_FORKNUM, NULL, EB_LOCK_FIRST);

	if ((uint64) BufferGetBlockNumber(buf) >= ((uint64) 1 << (32 - is->info->slot_bits)))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("streamhnsw index \"%s\" is too large for its node references",
						RelationGetRelationName(is->index))));
	return buf;
}

/* Replace the neighbour list of node e on a layer (exclusive lock on one page). */
static void
write_list(InsertState *is, ShnswRef e, ShnswUpperLoc upper, int layer,
		   const ShnswRef *list, int cnt)
{
	BlockNumber blk = layer == 0 ? shnsw_ref_block(e, is->info->slot_bits) : upper.block;
	Buffer		buf = ReadBuffer(is->index, blk);
	GenericXLogState *state;
	Page		page;

	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	state = GenericXLogStart(is->index);
	page = GenericXLogRegisterBuffer(state, buf, 0);
	if (layer == 0)
	{
		ShnswNodeHeader *h;

		shnsw_check_page(is->index, page, blk, SHNSW_PAGE_GRAPH);
		h = shnsw_page_node(page, shnsw_ref_slot(e, is->info->slot_bits), is->info->node_size);
		memcpy(shnsw_node_neighbors(h), list, sizeof(ShnswRef) * cnt);
		h->nneighbors = cnt;
	}
	else
	{
		ShnswUpperHeader *u;

		shnsw_check_page(is->index, page, blk, SHNSW_PAGE_UPPER);
		u = (ShnswUpperHeader *) PageGetItem(page, PageGetItemId(page, upper.offset));
		memcpy(shnsw_upper_neighbors(u, layer, is->m), list, sizeof(ShnswRef) * cnt);
		shnsw_upper_counts(u)[layer - 1] = cnt;
	}
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
}

/*
 * Sort candidates (refs, d, codes) by distance and keep those the heuristic
 * chooses, at most max; the result overwrites refs/d/codes' first entries.
 */
static int
select_neighbors(InsertState *is, ShnswRef *refs, float *d, uint8 *codes, int n, int max)
{
	int		   *order = palloc(sizeof(int) * n);
	ShnswRef   *srefs = palloc(sizeof(ShnswRef) * n);
	float	   *sd = palloc(sizeof(float) * n);
	uint8	   *scodes = palloc((Size) n * is->dims);
	int		   *sel = palloc(sizeof(int) * n);
	int			nsel;

	for (int k = 0; k < n; k++)
	{
		int			j = k;

		while (j > 0 && (d[order[j - 1]] > d[k] ||
						 (d[order[j - 1]] == d[k] && refs[order[j - 1]] > refs[k])))
		{
			order[j] = order[j - 1];
			j--;
		}
		order[j] = k;
	}
	for (int k = 0; k < n; k++)
	{
		srefs[k] = refs[order[k]];
		sd[k] = d[order[k]];
		memcpy(scodes + (Size) k * is->dims, codes + (Size) order[k] * is->dims, is->dims);
	}
	nsel = shnsw_select_by_codes(sd, scodes, n, max, is->dims, is->info->metric,
								 is->info->lo, is->info->scale, is->scratch, sel);
	for (int k = 0; k < nsel; k++)
	{
		refs[k] = srefs[sel[k]];
		d[k] = sd[sel[k]];
		memcpy(codes + (Size) k * is->dims, scodes + (Size) sel[k] * is->dims, is->dims);
	}
	pfree(order);
	pfree(srefs);
	pfree(sd);
	pfree(scodes);
	pfree(sel);
	return nsel;
}

/*
 * Add a link from e to the new node on a layer; if e's list is full, keep
 * the heuristic's choice among its neighbours and the new node.
 */
static void
add_backlink(InsertState *is, ShnswRef e, int layer, ShnswRef newref, const uint8 *newcode)
{
	int			max = layer == 0 ? 2 * is->m : is->m;
	ShnswRef	list[2 * SHNSW_MAX_M + 1];
	float		d[2 * SHNSW_MAX_M + 1];
	uint8	   *codes = palloc((Size) (max + 1) * is->dims);
	uint8	   *ecode = palloc(is->dims);
	ReadArg		a = {is->dims, is->m, ecode, list, 0, {0, 0}};
	int			cnt;
	Sq8Query	sq;

	is->ops.read_nodes(is->ops.ctx, &e, 1, copy_code_cb, &a);
	cnt = a.count;
	if (layer > 0)
		cnt = is->ops.read_upper(is->ops.ctx, a.upper, layer, list);
	for (int k = 0; k < cnt; k++)
		if (list[k] == newref)
			return;
	if (cnt < max)
	{
		list[cnt++] = newref;
		write_list(is, e, a.upper, layer, list, cnt);
		return;
	}

	read_codes(is, list, cnt, codes);
	list[cnt] = newref;
	memcpy(codes + (Size) cnt * is->dims, newcode, is->dims);
	cnt++;
	sq.dim = is->dims;
	sq.qs = is->scratch + is->dims;
	sq.w = is->scratch + 2 * is->dims;
	sq8_decode(is->info->lo, is->info->scale, ecode, is->scratch, is->dims);
	sq8_prepare_query(&sq, is->info->metric, is->scratch, is->info->lo, is->info->scale);
	for (int k = 0; k < cnt; k++)
		d[k] = sq8_distance(&sq, codes + (Size) k * is->dims);
	cnt = select_neighbors(is, list, d, codes, cnt, max);
	write_list(is, e, a.upper, layer, list, cnt);
	pfree(codes);
	pfree(ecode);
}

/*
 * The first vector into an index built empty trains the quantizer: for
 * cosine, the unit range [-1, 1]; otherwise a range around the vector.
 * Later values outside it are clamped until the index retrains as it grows
 * (quantizer.c).
 */
static void
train_from_first(InsertState *is, const float *nav)
{
	int			dims = is->dims;
	float	   *stream = palloc(sizeof(float) * 2 * dims);

	for (int i = 0; i < dims; i++)
	{
		float		r = is->info->metric == SHNSW_METRIC_COSINE ? 1.0f : 2.0f * Max(fabsf(nav[i]), 1.0f);
		float		c = is->info->metric == SHNSW_METRIC_COSINE ? 0.0f : nav[i];

		stream[i] = c - r;
		stream[dims + i] = (2.0f * r) / 255.0f;
	}
	shnsw_write_quant(is->index, is->info->quant_start, dims, stream, stream + dims);
	memcpy(is->info->lo, stream, sizeof(float) * dims);
	memcpy(is->info->scale, stream + dims, sizeof(float) * dims);
	pfree(stream);
}

/*
 * insert_node does the work of one insert, under the insert lock. Returns
 * true if the index has doubled since its quantizer was trained and should
 * retrain it.
 */
static bool
insert_node(InsertState *is, struct varlena *value, const float *nav, ItemPointer heap_tid)
{
	Relation	index = is->index;
	ShnswIndexInfo *info = is->info;
	int			dims = is->dims;
	int			m = is->m;
	int			efc;
	Buffer		metabuf;
	ShnswMetaPage meta;
	ShnswRef	entry;
	int			entry_level;
	int			level;
	uint8	   *code = palloc(dims);
	ShnswRef   *nbrs[SHNSW_MAX_LEVEL + 1];
	int			nnbrs[SHNSW_MAX_LEVEL + 1];
	ShnswRef	newref;
	int			stride = TYPEALIGN(4, info->vec_size);
	bool		retrain;

	/* read what we need from the metapage; train the quantizer if needed */
	metabuf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_SHARE);
	meta = ShnswPageGetMeta(BufferGetPage(metabuf));
	entry = meta->entry;
	entry_level = meta->entry_level;
	efc = meta->ef_construction;
	LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
	if (!meta->quant_trained)
	{
		GenericXLogState *state;

		train_from_first(is, nav);
		LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
		state = GenericXLogStart(index);
		meta = ShnswPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
		meta->quant_trained = true;
		meta->quant_rows = 1;
		GenericXLogFinish(state);
		LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
		info->quant_trained = true;
	}
	sq8_encode(info->lo, info->scale, nav, code, dims);

	/* find neighbours */
	MemSet(nnbrs, 0, sizeof(nnbrs));
	{
		uint64		rng;

		LockBuffer(metabuf, BUFFER_LOCK_SHARE);
		rng = ShnswPageGetMeta(BufferGetPage(metabuf))->rng_state ^ (uint64) heap_tid->ip_posid * 0x9E3779B97F4A7C15ULL ^
			((uint64) ItemPointerGetBlockNumberNoCheck(heap_tid) << 20);
		LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
		level = shnsw_random_level(&rng, 1.0 / log((double) Max(m, 2)), SHNSW_MAX_LEVEL);
	}
	if (entry != SHNSW_INVALID_REF)
	{
		Sq8Query	sq;
		ShnswSearch s;
		ShnswRef	ep;
		uint32	   *out = palloc(sizeof(uint32) * (efc + 1));

		sq.dim = dims;
		sq.qs = palloc(sizeof(float) * dims);
		sq.w = palloc(sizeof(float) * dims);
		sq8_prepare_query(&sq, info->metric, nav, info->lo, info->scale);
		shnsw_search_init(&s, &sq, &is->ops, m, 0);
		ep = shnsw_search_descend(&s, entry, entry_level, level);
		for (int l = Min(level, entry_level); l >= 0; l--)
		{
			int			n;
			int			max = l == 0 ? 2 * m : m;
			ShnswRef   *refs;
			float	   *d;
			uint8	   *codes;

			if (l > 0)
				n = shnsw_search_upper_layer(&s, ep, l, efc, out);
			else
				n = shnsw_search_next(&s, ep, efc, out);
			refs = palloc(sizeof(ShnswRef) * Max(n, 1));
			d = palloc(sizeof(float) * Max(n, 1));
			codes = palloc((Size) Max(n, 1) * dims);
			for (int k = 0; k < n; k++)
			{
				refs[k] = s.cands[out[k]].ref;
				d[k] = s.cands[out[k]].d;
			}
			read_codes(is, refs, n, codes);
			nnbrs[l] = select_neighbors(is, refs, d, codes, n, max);
			nbrs[l] = refs;
			if (nnbrs[l] > 0)
				ep = refs[0];
		}
	}

	/* place the node, its vector and its upper record; update the metapage */
	{
		GenericXLogState *state;
		Buffer		gbuf,
					vbuf,
					ubuf = InvalidBuffer;
		Page		gpage,
					vpage,
					upage = NULL;
		BlockNumber gblk,
					vblk,
					ublk = InvalidBlockNumber;
		int			slot;
		Size		voff;
		OffsetNumber uoff = InvalidOffsetNumber;
		bool		gnew = false,
					vnew = false,
					unew = false;
		ShnswNodeHeader *h;
		Size		usize = level > 0 ? shnsw_upper_size(level, m) : 0;

		LockBuffer(metabuf, BUFFER_LOCK_SHARE);
		meta = ShnswPageGetMeta(BufferGetPage(metabuf));
		gblk = meta->insert_graph_blk;
		vblk = meta->insert_vec_blk;
		ublk = meta->insert_upper_blk;
		LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);

		/* graph page with a free slot */
		if (gblk != InvalidBlockNumber)
		{
			gbuf = ReadBuffer(index, gblk);
			LockBuffer(gbuf, BUFFER_LOCK_EXCLUSIVE);
			if (ShnswPageGetOpaque(BufferGetPage(gbuf))->nslots >= shnsw_nodes_per_page(info->node_size))
			{
				UnlockReleaseBuffer(gbuf);
				gblk = InvalidBlockNumber;
			}
		}
		if (gblk == InvalidBlockNumber)
		{
			gbuf = new_page(is);
			gblk = BufferGetBlockNumber(gbuf);
			gnew = true;
		}
		/* vector page with room for a whole vector */
		if (vblk != InvalidBlockNumber)
		{
			vbuf = ReadBuffer(index, vblk);
			LockBuffer(vbuf, BUFFER_LOCK_EXCLUSIVE);
			if (((PageHeader) BufferGetPage(vbuf))->pd_lower - MAXALIGN(SizeOfPageHeaderData) + stride > SHNSW_PAGE_CAPACITY)
			{
				UnlockReleaseBuffer(vbuf);
				vblk = InvalidBlockNumber;
			}
		}
		if (vblk == InvalidBlockNumber)
		{
			vbuf = new_page(is);
			vblk = BufferGetBlockNumber(vbuf);
			vnew = true;
		}
		/* upper page with room for the record */
		if (level > 0)
		{
			if (ublk != InvalidBlockNumber)
			{
				ubuf = ReadBuffer(index, ublk);
				LockBuffer(ubuf, BUFFER_LOCK_EXCLUSIVE);
				if (PageGetFreeSpace(BufferGetPage(ubuf)) < MAXALIGN(usize))
				{
					UnlockReleaseBuffer(ubuf);
					ublk = InvalidBlockNumber;
				}
			}
			if (ublk == InvalidBlockNumber)
			{
				ubuf = new_page(is);
				ublk = BufferGetBlockNumber(ubuf);
				unew = true;
			}
		}

		LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
		state = GenericXLogStart(index);
		gpage = GenericXLogRegisterBuffer(state, gbuf, gnew ? GENERIC_XLOG_FULL_IMAGE : 0);
		vpage = GenericXLogRegisterBuffer(state, vbuf, vnew ? GENERIC_XLOG_FULL_IMAGE : 0);
		if (level > 0)
			upage = GenericXLogRegisterBuffer(state, ubuf, unew ? GENERIC_XLOG_FULL_IMAGE : 0);
		meta = ShnswPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
		if (gnew)
			shnsw_init_page(gpage, SHNSW_PAGE_GRAPH);
		if (vnew)
			shnsw_init_page(vpage, SHNSW_PAGE_VECTOR);
		if (unew)
			shnsw_init_page(upage, SHNSW_PAGE_UPPER);
		shnsw_check_page(index, gpage, gblk, SHNSW_PAGE_GRAPH);
		shnsw_check_page(index, vpage, vblk, SHNSW_PAGE_VECTOR);

		/* the exact vector */
		voff = ((PageHeader) vpage)->pd_lower - MAXALIGN(SizeOfPageHeaderData);
		MemSet(PageGetContents(vpage) + voff, 0, stride);
		memcpy(PageGetContents(vpage) + voff, value, info->vec_size);
		((PageHeader) vpage)->pd_lower += stride;

		/* the node */
		slot = ShnswPageGetOpaque(gpage)->nslots;
		newref = shnsw_make_ref(gblk, slot, info->slot_bits);

		/* the upper record */
		if (level > 0)
		{
			char	   *rec = palloc0(usize);
			ShnswUpperHeader *u = (ShnswUpperHeader *) rec;

			shnsw_check_page(index, upage, ublk, SHNSW_PAGE_UPPER);
			u->node = newref;
			u->level = level;
			for (int l = 1; l <= level; l++)
			{
				shnsw_upper_counts(u)[l - 1] = nnbrs[l];
				if (nnbrs[l] > 0)
					memcpy(shnsw_upper_neighbors(u, l, m), nbrs[l], sizeof(ShnswRef) * nnbrs[l]);
			}
			uoff = PageAddItem(upage, (Item) rec, usize, InvalidOffsetNumber, false, false);
			if (uoff == InvalidOffsetNumber)
				elog(ERROR, "streamhnsw: failed to add upper record");
			pfree(rec);
		}

		h = shnsw_page_node(gpage, slot, info->node_size);
		MemSet(h, 0, info->node_size);
		h->tid_blk_hi = heap_tid->ip_blkid.bi_hi;
		h->tid_blk_lo = heap_tid->ip_blkid.bi_lo;
		h->tid_off = heap_tid->ip_posid;
		h->level = level;
		h->flags = 0;
		h->upper_blk_hi = level > 0 ? (uint16) (ublk >> 16) : 0xFFFF;
		h->upper_blk_lo = level > 0 ? (uint16) (ublk & 0xFFFF) : 0xFFFF;
		h->upper_off = uoff;
		h->nneighbors = nnbrs[0];
		if (nnbrs[0] > 0)
			memcpy(shnsw_node_neighbors(h), nbrs[0], sizeof(ShnswRef) * nnbrs[0]);
		h->vec_block = vblk;
		h->vec_offset = (uint16) voff;
		memcpy(shnsw_node_code(h, m), code, dims);
		ShnswPageGetOpaque(gpage)->nslots = slot + 1;
		((PageHeader) gpage)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + (slot + 1) * info->node_size;

		meta->insert_graph_blk = gblk;
		meta->insert_vec_blk = vblk;
		if (level > 0)
			meta->insert_upper_blk = ublk;
		meta->node_count++;
		meta->rng_state = meta->rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
		if (meta->entry == SHNSW_INVALID_REF || level > meta->entry_level)
		{
			meta->entry = newref;
			meta->entry_level = level;
		}
		GenericXLogFinish(state);
		LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
		UnlockReleaseBuffer(gbuf);
		UnlockReleaseBuffer(vbuf);
		if (level > 0)
			UnlockReleaseBuffer(ubuf);
	}

	/* links back from the neighbours */
	for (int l = 0; l <= level; l++)
		for (int k = 0; k < nnbrs[l]; k++)
			add_backlink(is, nbrs[l][k], l, newref, code);

	/* publish: the graph changed */
	{
		GenericXLogState *state;

		LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
		state = GenericXLogStart(index);
		meta = ShnswPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
		meta->cache_generation++;
		retrain = meta->quant_rows < SHNSW_RETRAIN_MAX_ROWS &&
			meta->node_count >= 2 * Max(meta->quant_rows, 1);
		GenericXLogFinish(state);
		UnlockReleaseBuffer(metabuf);
	}
	return retrain;
}

/*
 * shnsw_insert is aminsert. NULLs and zero vectors under cosine are not
 * indexed; other bad values raise errors before anything is written.
 */
bool
shnsw_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
			 Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
			 IndexInfo *indexInfo)
{
	MemoryContext ctx,
				old;
	InsertState is;
	struct varlena *v;
	float	   *nav;

	if (isnull[0])
		return false;

	ctx = AllocSetContextCreate(CurrentMemoryContext, "streamhnsw insert",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(ctx);

	is.index = index;
	is.info = shnsw_get_index_info(index);
	is.dims = is.info->dims;
	is.m = is.info->m;
	is.scratch = palloc(sizeof(float) * 3 * is.dims);
	shnsw_page_ops_init(&is.ops, &is.pctx, index, is.info, NULL);

	v = shnsw_check_vector(values[0], is.info->elemtype, is.dims);
	nav = palloc(sizeof(float) * is.dims);
	if (shnsw_vector_to_nav(v, is.info->elemtype, is.info->metric, is.dims, nav))
	{
		ShnswMetaSnapshot snap;

		LockPage(index, SHNSW_METAPAGE_BLKNO, ExclusiveLock);
		/* the quantizer may have been trained or retrained since we looked */
		shnsw_read_meta(index, &snap);
		is.info = shnsw_get_index_info(index);
		if (insert_node(&is, v, nav, heap_tid))
			shnsw_retrain(index);
		UnlockPage(index, SHNSW_METAPAGE_BLKNO, ExclusiveLock);
	}

	MemoryContextSwitchTo(old);
	MemoryContextDelete(ctx);
	return false;
}
