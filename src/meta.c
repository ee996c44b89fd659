/*-------------------------------------------------------------------------
 *
 * meta.c
 *	  The metapage, page initialization and checks, and the per-backend
 *	  description of an index cached in rd_amcache.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/pg_prng.h"

#include "storage/bufmgr.h"
#include "utils/memutils.h"
#include "utils/relcache.h"
#include "utils/rel.h"

#include "format.h"
#include "meta.h"
#include "options.h"
#include "pages.h"
#include "vector.h"

/*
 * shnsw_init_page formats an empty page of a type. Contents start right
 * after the header; pd_lower marks their end so that full-page images skip
 * the unused middle.
 */
void
shnsw_init_page(Page page, uint16 page_type)
{
	ShnswPageOpaque opaque;

	PageInit(page, BLCKSZ, sizeof(ShnswPageOpaqueData));
	opaque = ShnswPageGetOpaque(page);
	opaque->page_type = page_type;
	opaque->nslots = 0;
	opaque->magic = SHNSW_MAGIC;
}

/*
 * shnsw_check_page raises an error if a page is not a streamhnsw page of
 * the expected type (0 accepts any type): a corrupt or foreign page must
 * never be read as a node.
 */
void
shnsw_check_page(Relation index, Page page, BlockNumber blkno, uint16 page_type)
{
	ShnswPageOpaque opaque;

	if (PageIsNew(page) ||
		PageGetSpecialSize(page) != MAXALIGN(sizeof(ShnswPageOpaqueData)))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" contains unexpected page at block %u",
						RelationGetRelationName(index), blkno)));
	opaque = ShnswPageGetOpaque(page);
	if (opaque->magic != SHNSW_MAGIC || (page_type != 0 && opaque->page_type != page_type))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" has a page of type %u at block %u where type %u was expected",
						RelationGetRelationName(index), opaque->page_type, blkno, page_type)));
}

/* shnsw_nodes_per_page: how many node records of node_size fit on a graph page. */
int
shnsw_nodes_per_page(int node_size)
{
	int			n = SHNSW_PAGE_CAPACITY / node_size;

	return Min(n, SHNSW_MAX_NODES_PER_PAGE);
}

/* shnsw_slot_bits: bits of a reference that name the slot (at least 1). */
int
shnsw_slot_bits(int nodes_per_page)
{
	int			bits = 0;

	while ((1 << bits) < nodes_per_page)
		bits++;
	return Max(bits, 1);
}

/* shnsw_quant_nblocks: quantizer pages that lo[dims] and scale[dims] take. */
int
shnsw_quant_nblocks(int dims)
{
	int			bytes = 2 * dims * (int) sizeof(float);

	return (bytes + SHNSW_PAGE_CAPACITY - 1) / SHNSW_PAGE_CAPACITY;
}

/*
 * shnsw_fill_meta fills the metapage fields fixed at build time for a
 * column of dims dimensions (bits for bit); the caller sets the placement
 * fields.
 */
void
shnsw_fill_meta(ShnswMetaPage meta, int dims, int m, int efc, ShnswMetric metric,
				ShnswElemType elemtype)
{
	int			navdims = shnsw_nav_dims(elemtype, dims);
	int			node_size = (int) shnsw_node_size(m, navdims);

	MemSet(meta, 0, sizeof(ShnswMetaPageData));
	meta->magic = SHNSW_MAGIC;
	meta->version = SHNSW_FORMAT_VERSION;
	meta->dims = dims;
	meta->m = m;
	meta->ef_construction = efc;
	meta->metric = metric;
	meta->elemtype = elemtype;
	meta->quantizer = SHNSW_QUANT_SQ8;
	meta->quant_trained = false;
	meta->node_size = node_size;
	meta->nodes_per_page = shnsw_nodes_per_page(node_size);
	meta->slot_bits = shnsw_slot_bits(meta->nodes_per_page);
	meta->vec_size = shnsw_vec_size(elemtype, dims);
	meta->entry = SHNSW_INVALID_REF;
	meta->entry_level = -1;
	meta->quant_start = SHNSW_METAPAGE_BLKNO + 1;
	meta->quant_nblocks = shnsw_quant_nblocks(navdims);
	meta->insert_graph_blk = InvalidBlockNumber;
	meta->insert_vec_blk = InvalidBlockNumber;
	meta->insert_upper_blk = InvalidBlockNumber;
	meta->rng_state = 0x5DEECE66DULL;
	/* a build of the same relfilenode (TRUNCATE in its creating transaction) differs */
	do
		meta->build_nonce = pg_prng_uint64(&pg_global_prng_state);
	while (meta->build_nonce == 0);
	meta->free_head = SHNSW_INVALID_REF;
	meta->insert_vec_end = InvalidBlockNumber;
	/* max_residual 0: no node yet */
	meta->flags = SHNSW_META_RESIDUAL | SHNSW_META_CLAMPS | SHNSW_META_VECRUN;
}

/* Raise an error unless the metapage is ours and of a version we read. */
static void
shnsw_check_meta(Relation index, ShnswMetaPage meta)
{
	if (meta->magic != SHNSW_MAGIC)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" is not a streamhnsw index", RelationGetRelationName(index))));
	if (meta->version != SHNSW_FORMAT_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" has format version %u, this library reads version %d",
						RelationGetRelationName(index), meta->version, SHNSW_FORMAT_VERSION),
				 errhint("REINDEX the index.")));
}

/*
 * shnsw_validate_meta raises an error unless the metapage's fixed fields
 * agree with each other and with the relation: they size every record the
 * other files read, so a corrupt one must stop here rather than reach a
 * search, an insert or VACUUM. Called when the description is loaded.
 */
static void
shnsw_validate_meta(Relation index, ShnswMetaPage meta)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(index);
	ShnswElemType elemtype = (ShnswElemType) meta->elemtype;
	int			navdims = shnsw_nav_dims(elemtype, meta->dims);
	const char *field = NULL;
	uint64		value = 0;

	if (elemtype < SHNSW_ELEM_FLOAT4 || elemtype > SHNSW_ELEM_SPARSE)
		field = "element type", value = meta->elemtype;
	else if (meta->metric < SHNSW_METRIC_L2 || meta->metric > SHNSW_METRIC_LAST ||
			 !shnsw_metric_is_bit((ShnswMetric) meta->metric) != (elemtype != SHNSW_ELEM_BIT))
		field = "metric", value = meta->metric;
	else if (meta->quantizer != SHNSW_QUANT_SQ8)
		field = "quantizer", value = meta->quantizer;
	else if (meta->dims < 1 || meta->dims > shnsw_max_dims(elemtype))
		field = "dimensions", value = meta->dims;
	else if (meta->m < SHNSW_MIN_M || meta->m > SHNSW_MAX_M_OPTION)
		field = "m", value = meta->m;
	else if (meta->node_size != shnsw_node_size(meta->m, navdims) ||
			 meta->node_size > SHNSW_PAGE_CAPACITY)
		field = "node size", value = meta->node_size;
	else if (meta->nodes_per_page != shnsw_nodes_per_page(meta->node_size))
		field = "nodes per page", value = meta->nodes_per_page;
	else if (meta->slot_bits != shnsw_slot_bits(meta->nodes_per_page))
		field = "slot bits", value = meta->slot_bits;
	else if (meta->vec_size != (uint32) shnsw_vec_size((ShnswElemType) meta->elemtype, meta->dims))
		field = "vector size", value = meta->vec_size;
	else if (meta->quant_start != SHNSW_METAPAGE_BLKNO + 1)
		field = "first quantizer block", value = meta->quant_start;
	else if (meta->quant_nblocks != (uint32) shnsw_quant_nblocks(navdims) ||
			 (uint64) meta->quant_start + meta->quant_nblocks > nblocks)
		field = "quantizer block count", value = meta->quant_nblocks;
	else if (meta->ef_construction < SHNSW_MIN_EF_CONSTRUCTION ||
			 meta->ef_construction > SHNSW_MAX_EF_CONSTRUCTION)
		field = "ef_construction", value = meta->ef_construction;
	else if (meta->entry_level < -1 || meta->entry_level > SHNSW_MAX_LEVEL)
		field = "entry level", value = (uint32) meta->entry_level;
	if (field != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" has an invalid %s in block %u: %llu",
						RelationGetRelationName(index), field, SHNSW_METAPAGE_BLKNO,
						(unsigned long long) value),
				 errhint("REINDEX the index.")));
}

/*
 * lock_meta pins and share-locks the metapage and checks it; the caller
 * releases *buf.
 */
static ShnswMetaPage
lock_meta(Relation index, Buffer *buf)
{
	Page		page;
	ShnswMetaPage meta;

	*buf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	LockBuffer(*buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(*buf);
	shnsw_check_page(index, page, SHNSW_METAPAGE_BLKNO, SHNSW_PAGE_META);
	meta = ShnswPageGetMeta(page);
	shnsw_check_meta(index, meta);
	return meta;
}

/*
 * shnsw_read_meta copies the metapage's changing fields. Takes and releases
 * a share lock on the metapage; holds nothing on return.
 */
void
shnsw_read_meta(Relation index, ShnswMetaSnapshot *snap)
{
	Buffer		buf;
	ShnswMetaPage meta = lock_meta(index, &buf);

	*snap = (ShnswMetaSnapshot) {
		.entry = meta->entry,
		.entry_level = meta->entry_level,
		.node_count = meta->node_count,
		.cache_generation = meta->cache_generation,
		.quant_version = meta->quant_version,
		.truncations = meta->truncations,
		.build_nonce = meta->build_nonce,
		.max_residual = (meta->flags & SHNSW_META_RESIDUAL) ? meta->max_residual : -1.0,
		.clamps_marked = (meta->flags & SHNSW_META_CLAMPS) != 0,
		.lsn = PageGetLSN(BufferGetPage(buf)),
	};
	UnlockReleaseBuffer(buf);

	/* the quantizer was retrained: drop our cached description */
	if (index->rd_amcache != NULL &&
		((ShnswIndexInfo *) index->rd_amcache)->quant_version != snap->quant_version)
		shnsw_forget_index_info(index);
}

/* Bytes of a description of dims dimensions, SQ8 parameters included. */
static Size
info_size(int dims)
{
	return offsetof(ShnswIndexInfo, quant) + sizeof(float) * 2 * (Size) dims;
}

/* A copy of a description in cxt, its lo and scale pointing into the copy. */
static ShnswIndexInfo *
info_copy(const ShnswIndexInfo *src, MemoryContext cxt)
{
	Size		size = info_size(src->dims);
	ShnswIndexInfo *dst = MemoryContextAlloc(cxt, size);

	memcpy(dst, src, size);
	dst->lo = dst->quant;
	dst->scale = dst->quant + dst->dims;
	return dst;
}

/*
 * load_index_info reads the description from the metapage and the
 * quantizer pages into a new chunk in CurrentMemoryContext. Takes and
 * releases share locks one page at a time.
 */
static ShnswIndexInfo *
load_index_info(Relation index)
{
	ShnswIndexInfo *info;
	Buffer		buf;
	Page		page;
	ShnswMetaPage meta;

	meta = lock_meta(index, &buf);
	shnsw_validate_meta(index, meta);
	info = palloc0(info_size(shnsw_nav_dims((ShnswElemType) meta->elemtype, meta->dims)));
	info->dims = shnsw_nav_dims((ShnswElemType) meta->elemtype, meta->dims);
	info->coldims = meta->dims;
	info->m = meta->m;
	info->ef_construction = meta->ef_construction;
	info->metric = (ShnswMetric) meta->metric;
	info->elemtype = (ShnswElemType) meta->elemtype;
	info->slot_bits = meta->slot_bits;
	info->node_size = meta->node_size;
	info->vec_size = meta->vec_size;
	info->vec_span = shnsw_vec_span(info->elemtype, info->vec_size);
	info->quant_start = meta->quant_start;
	info->quant_trained = meta->quant_trained;
	info->quant_version = meta->quant_version;
	UnlockReleaseBuffer(buf);

	info->lo = info->quant;
	info->scale = info->quant + info->dims;
	if (info->quant_trained)
	{
		/* lo[] then scale[], a float stream over consecutive pages */
		int			total = 2 * info->dims * sizeof(float);
		int			done = 0;
		BlockNumber blk = info->quant_start;

		while (done < total)
		{
			int			chunk = Min(total - done, SHNSW_PAGE_CAPACITY);

			buf = ReadBuffer(index, blk);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			page = BufferGetPage(buf);
			shnsw_check_page(index, page, blk, SHNSW_PAGE_QUANT);
			memcpy((char *) info->quant + done, PageGetContents(page), chunk);
			UnlockReleaseBuffer(buf);
			done += chunk;
			blk++;
		}
	}
	return info;
}

/*
 * shnsw_get_index_info returns a copy of the index's fixed description and
 * SQ8 parameters, palloc'd in CurrentMemoryContext and owned by the caller:
 * scans, inserts and VACUUM keep their own copy in their own state, because
 * relcache invalidation (which any lock acquisition or catalog access can
 * process, between two amgettuple calls for instance) frees rd_amcache.
 *
 * rd_amcache caches one chunk (info_size), in rd_indexcxt, once the
 * quantizer is trained; it is never changed in place, only dropped
 * (shnsw_forget_index_info) when shnsw_read_meta sees a newer quantizer
 * version or this backend retrains. An untrained quantizer is re-read on
 * every call until the first vector has trained it.
 */
ShnswIndexInfo *
shnsw_get_index_info(Relation index)
{
	ShnswIndexInfo *info;

	if (index->rd_amcache != NULL)
		return info_copy((ShnswIndexInfo *) index->rd_amcache, CurrentMemoryContext);

	info = load_index_info(index);
	/* publish only a complete chunk: loading may have taken a while */
	if (info->quant_trained && index->rd_amcache == NULL)
		index->rd_amcache = info_copy(info, index->rd_indexcxt);
	return info;
}

/*
 * shnsw_forget_index_info drops the cached description (after this backend
 * changed the quantizer, or saw that another one did). Copies handed out
 * stay valid.
 */
void
shnsw_forget_index_info(Relation index)
{
	if (index->rd_amcache != NULL)
	{
		pfree(index->rd_amcache);
		index->rd_amcache = NULL;
	}
}

/*
 * shnsw_debug_discard, with streamhnsw.debug_discard_caches on, processes a
 * relcache invalidation of the index at once, at a point where PostgreSQL
 * could process one (an access-method call, a VACUUM delay point). The
 * cached description is wiped first, so that code still holding a pointer
 * into it reads garbage in tests instead of stale values by luck. The
 * server's own debug_discard_caches does this at every invalidation point
 * but only in servers built with assertions (--enable-cassert).
 */
void
shnsw_debug_discard(Relation index)
{
	if (!shnsw_debug_discard_caches)
		return;
	if (index->rd_amcache != NULL)
		memset(index->rd_amcache, 0x7F, info_size(((ShnswIndexInfo *) index->rd_amcache)->dims));
	RelationCacheInvalidateEntry(RelationGetRelid(index));
	/* the relcache frees rd_amcache of an index; make sure it is gone */
	shnsw_forget_index_info(index);
}
