/*-------------------------------------------------------------------------
 *
 * verify.c
 *	  streamhnsw_verify(): structural checks of an index, and
 *	  streamhnsw_metapage(): the metapage as a row.
 *
 * Verification reads every page once under a share lock (one at a time)
 * and reports each problem it finds as a row of text; no rows means the
 * structure is sound. It checks page magic and types, the metapage's fixed
 * fields and the blocks it names, that every neighbour reference names a
 * used node slot, that every node's exact vector (its header: the index's
 * dimensions and type; its values finite) and upper record exist and agree
 * with it, that row pointers name blocks of the table, that the entry
 * point is a node of the recorded level, that the node counts match, that
 * a graph of several live nodes has none without a layer-0 neighbour, that
 * an index with nodes has a trained quantizer, and that the free list
 * links every free node exactly once. Every field is
 * checked before it is used to find another, so a corrupt index gives rows,
 * not a crash.
 *
 * Locking: verify takes AccessShareLock on the table (its length bounds
 * row pointers), then holds a ShareLock on the index for the whole check, as
 * amcheck's parent check does: it waits for transactions that have inserted
 * into the index (or are vacuuming it) to end, and blocks new inserts and
 * VACUUM until it is done (scans go on), so the counts it compares are the
 * counts of the pages it read. On a standby (which allows no such lock) it
 * takes AccessShareLock. streamhnsw_metapage takes AccessShareLock.
 * Both are revoked from PUBLIC and, when granted, still require the caller
 * to own the index or be a member of pg_monitor; the relation's kind and
 * access method are checked before any lock is taken on it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_am.h"
#include "commands/defrem.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/acl.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

#include "format.h"
#include "indexopen.h"
#include "meta.h"
#include "neighbors_find.h"
#include "nodecheck.h"
#include "options.h"
#include "pageaccess.h"
#include "pages.h"
#include "vector.h"

typedef struct VerifyState
{
	Tuplestorestate *ts;
	TupleDesc	desc;
	int			nproblems;

	/* what the passes learn */
	Relation	index;
	BlockNumber nblocks;
	uint8	   *types;			/* page type of each block (0: unusable) */
	uint16	   *nslots;			/* node slots of each graph page */
	ShnswMetaPageData meta;
	uint64		nodes,
				deleted,
				nfree;
	uint64		free_cap;		/* no more free nodes than slots */
	uint64		live;			/* nodes neither deleted nor free */
	uint64		isolated;		/* live nodes with no layer-0 neighbour */
	ShnswRef	first_isolated;
	bool		have_heap_blk;
	BlockNumber max_heap_blk;	/* the largest heap block a node names */
	BlockNumber heap_nblocks;	/* the table's length (before pass 2: the
								 * index lock keeps VACUUM from cutting it) */
	ShnswRef   *free_refs;		/* free slots in order, and ... */
	ShnswRef   *free_next;		/* ... the next slot each links to */
} VerifyState;

static void
problem(VerifyState *vs, const char *fmt,...) pg_attribute_printf(2, 3);

static void
problem(VerifyState *vs, const char *fmt,...)
{
	va_list		ap;
	StringInfoData buf;
	Datum		value;
	bool		isnull = false;

	if (vs->nproblems++ >= 1000)
		return;					/* enough to diagnose */
	initStringInfo(&buf);
	for (;;)
	{
		int			needed;

		va_start(ap, fmt);
		needed = appendStringInfoVA(&buf, fmt, ap);
		va_end(ap);
		if (needed == 0)
			break;
		enlargeStringInfo(&buf, needed);
	}
	value = CStringGetTextDatum(buf.data);
	tuplestore_putvalues(vs->ts, vs->desc, &value, &isnull);
}

/* Is blk a block of the index, of page type `type` (pass 1)? */
static inline bool
block_is(const VerifyState *vs, BlockNumber blk, uint8 type)
{
	return blk < vs->nblocks && vs->types[blk] == type;
}

/* Is ref a used node slot? */
static bool
ref_ok(const VerifyState *vs, ShnswRef ref)
{
	BlockNumber blk = shnsw_ref_block(ref, vs->meta.slot_bits);

	return ref != SHNSW_INVALID_REF && block_is(vs, blk, SHNSW_PAGE_GRAPH) &&
		shnsw_ref_slot(ref, vs->meta.slot_bits) < vs->nslots[blk];
}

/*
 * Whether the item at off of an upper page is a record its own level's
 * lists fit in (offset checked by the caller).
 */
static bool
upper_item_ok(Page page, OffsetNumber off, int m)
{
	ItemId		iid = PageGetItemId(page, off);
	ShnswUpperHeader *u;

	if (!ItemIdIsNormal(iid) || ItemIdGetLength(iid) < sizeof(ShnswUpperHeader) ||
		ItemIdGetOffset(iid) < SizeOfPageHeaderData ||
		ItemIdGetOffset(iid) + ItemIdGetLength(iid) > ((PageHeader) page)->pd_special)
		return false;
	u = (ShnswUpperHeader *) PageGetItem(page, iid);
	return u->level <= SHNSW_MAX_LEVEL && ItemIdGetLength(iid) >= shnsw_upper_size(u->level, m);
}

/*
 * check_bits reports a stored bit(n) value whose header is not the index's
 * bit length, or whose last byte has a bit set past it (bit input never
 * makes one, and Hamming on the bytes would count it).
 */
static void
check_bits(VerifyState *vs, const ShnswMetaPageData *meta, BlockNumber blk, int slot,
		   BlockNumber vblk, const char *vec)
{
	uint32		varsize;
	int32		bits;
	int			nbytes = shnsw_nav_dims(SHNSW_ELEM_BIT, meta->dims);
	uint8		last = (uint8) vec[8 + nbytes - 1];

	memcpy(&varsize, vec, 4);
	memcpy(&bits, vec + 4, 4);
	if (!VARATT_IS_4B_U(vec) || VARSIZE(vec) != (Size) meta->vec_size || bits != meta->dims)
		problem(vs, "node (%u,%d) has a vector at block %u whose header (%08x, %d bits) does not match the index's bit(%u)",
				blk, slot, vblk, varsize, bits, meta->dims);
	else if (meta->dims % 8 != 0 && (last & (0xFF >> (meta->dims % 8))) != 0)
		problem(vs, "node (%u,%d) has a vector at block %u with bits set past its length",
				blk, slot, vblk);
}

/*
 * check_sparse reports a stored sparsevec whose header is not the index's
 * (dimensions, a size of its non-zero count, at most vec_size: check_vector
 * read that many bytes), whose indices do not ascend within the dimensions,
 * or whose values are not finite (src/README, Sparse vectors).
 */
static void
check_sparse(VerifyState *vs, const ShnswMetaPageData *meta, BlockNumber blk, int slot,
			 BlockNumber vblk, const char *vec)
{
	int32		hdr[4];
	int			maxnnz = ((int) meta->vec_size - SHNSW_SPARSE_HEAD) / 8;

	memcpy(hdr, vec, sizeof(hdr));
	if (!VARATT_IS_4B_U(vec) || hdr[1] != (int32) meta->dims || hdr[2] < 0 ||
		hdr[2] > maxnnz || VARSIZE(vec) != (Size) (SHNSW_SPARSE_HEAD + 8 * hdr[2]) || hdr[3] != 0)
	{
		problem(vs, "node (%u,%d) has a vector at block %u whose header (%08x, %d dimensions, %d non-zero) does not match the index's sparsevec(%u)",
				blk, slot, vblk, (uint32) hdr[0], hdr[1], hdr[2], meta->dims);
		return;
	}
	for (int i = 0; i < hdr[2]; i++)
	{
		int32		at,
					prev = -1;
		float		f;

		memcpy(&at, vec + 16 + 4 * i, 4);
		memcpy(&f, vec + 16 + 4 * hdr[2] + 4 * i, 4);
		if (i > 0)
			memcpy(&prev, vec + 16 + 4 * (i - 1), 4);
		if (at <= prev || at >= (int32) meta->dims || !isfinite(f))
		{
			problem(vs, "node (%u,%d) has a vector at block %u whose element %d is invalid",
					blk, slot, vblk, i);
			return;
		}
	}
}

/*
 * check_vector reports a problem unless the exact vector of node (blk,
 * slot) at (vblk, voff), on vector pages, lies within their data and has a
 * header of the index's dimensions and element type (a plain varlena of
 * vec_size bytes; a sparsevec's of its own size, at most that, on one
 * page). The vector is read one page at a time, under a share lock held
 * only while copying.
 */
static void
check_vector(VerifyState *vs, Relation index, const ShnswMetaPageData *meta, BlockNumber blk,
			 int slot, BlockNumber vblk, uint16 voff, char *vec)
{
	char	   *hdr = vec;
	int			need = meta->vec_size;
	int			done = 0;
	uint32		varsize;
	int16		dim,
				unused;

	for (BlockNumber b = vblk; done < need; b++)
	{
		Buffer		buf = ReadBuffer(index, b);
		Page		page;
		int			have,
					chunk = Min(need - done, (int) SHNSW_PAGE_CAPACITY - voff);

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		have = (int) ((PageHeader) page)->pd_lower - (int) MAXALIGN(SizeOfPageHeaderData);
		if (meta->elemtype == SHNSW_ELEM_SPARSE && voff + SHNSW_SPARSE_HEAD <= have)
		{
			/* its own size, within the bound (else check_sparse reports it) */
			memcpy(vec, PageGetContents(page) + voff, SHNSW_SPARSE_HEAD);
			if (VARATT_IS_4B_U(vec) && VARSIZE(vec) >= SHNSW_SPARSE_HEAD &&
				VARSIZE(vec) <= (Size) need)
				need = chunk = VARSIZE(vec);
			else
				need = chunk = SHNSW_SPARSE_HEAD;
		}
		if (voff + chunk > have ||
			(meta->elemtype == SHNSW_ELEM_SPARSE && chunk < need))
		{
			UnlockReleaseBuffer(buf);
			problem(vs, "node (%u,%d) has its vector at offset %u of block %u, beyond its data (%d bytes)",
					blk, slot, voff, b, have);
			return;
		}
		/* this page's part of the vector */
		memcpy(vec + done, PageGetContents(page) + voff, chunk);
		UnlockReleaseBuffer(buf);
		done += chunk;
		voff = 0;
	}
	memcpy(&varsize, hdr, 4);
	if (meta->elemtype == SHNSW_ELEM_BIT)
	{
		check_bits(vs, meta, blk, slot, vblk, vec);
		return;
	}
	if (meta->elemtype == SHNSW_ELEM_SPARSE)
	{
		check_sparse(vs, meta, blk, slot, vblk, vec);
		return;
	}
	memcpy(&dim, hdr + 4, 2);
	memcpy(&unused, hdr + 6, 2);
	if (!VARATT_IS_4B_U(hdr) || VARSIZE(hdr) != (Size) meta->vec_size || dim != meta->dims || unused != 0)
	{
		problem(vs, "node (%u,%d) has a vector at block %u whose header (%08x, %d dimensions) does not match the index's %u-dimensional %s",
				blk, slot, vblk, varsize, dim, meta->dims,
				shnsw_elemtype_name((ShnswElemType) meta->elemtype));
		return;
	}
	/* its values: neither vector nor halfvec input accepts NaN or infinity */
	for (int d = 0; d < meta->dims; d++)
	{
		bool		finite;

		if (meta->elemtype == SHNSW_ELEM_FLOAT2)
		{
			uint16		h;

			memcpy(&h, vec + 8 + 2 * d, sizeof(h));
			finite = (h & 0x7C00) != 0x7C00;	/* exponent all ones: inf or NaN */
		}
		else
		{
			float		f;

			memcpy(&f, vec + 8 + 4 * d, sizeof(f));
			finite = isfinite(f);
		}
		if (!finite)
		{
			problem(vs, "node (%u,%d) has a vector at block %u whose dimension %d is not finite",
					blk, slot, vblk, d);
			return;
		}
	}
}

/*
 * check_quant reports the SQ8 parameters on the q-th quantizer page (lo[]
 * then scale[], one float stream) that are not finite, or steps that are
 * not positive: training never writes them.
 */
static void
check_quant(VerifyState *vs, Relation index, const ShnswMetaPageData *meta, uint32 q)
{
	BlockNumber blk = meta->quant_start + q;
	int			dims = shnsw_nav_dims((ShnswElemType) meta->elemtype, meta->dims);
	int			total = 2 * dims;
	int			per_page = SHNSW_PAGE_CAPACITY / sizeof(float);
	int			first = (int) q * per_page;
	int			n = Min(total - first, per_page);
	Buffer		buf = ReadBuffer(index, blk);
	const float *x;
	int			bad = -1;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	x = (const float *) PageGetContents(BufferGetPage(buf));
	for (int i = 0; i < n && bad < 0; i++)
		if (!isfinite(x[i]) || (first + i >= dims && !(x[i] > 0.0f)))
			bad = i;
	UnlockReleaseBuffer(buf);
	if (bad >= 0)
		problem(vs, "quantizer block %u has an invalid %s for dimension %d",
				blk, first + bad < dims ? "lower bound" : "step",
				(first + bad) % dims);
}

/*
 * verify_pages is pass 1: every block's page type and slot count, and a
 * copy of the metapage. Returns false if there is no readable metapage.
 */
static bool
verify_pages(VerifyState *vs)
{
	for (BlockNumber blk = 0; blk < vs->nblocks; blk++)
	{
		Buffer		buf = ReadBuffer(vs->index, blk);
		Page		page;
		ShnswPageOpaque op;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (PageIsNew(page) && blk != SHNSW_METAPAGE_BLKNO)
			;					/* extended by an interrupted insert: empty */
		else if (PageIsNew(page) || PageGetSpecialSize(page) != MAXALIGN(sizeof(ShnswPageOpaqueData)))
			problem(vs, "block %u is not a streamhnsw page", blk);
		else
		{
			op = ShnswPageGetOpaque(page);
			if (op->magic != SHNSW_MAGIC)
				problem(vs, "block %u has magic %08x, not %08x", blk, op->magic, SHNSW_MAGIC);
			else if (op->page_type < SHNSW_PAGE_META || op->page_type > SHNSW_PAGE_UPPER)
				problem(vs, "block %u has unknown page type %u", blk, op->page_type);
			else if ((blk == SHNSW_METAPAGE_BLKNO) != (op->page_type == SHNSW_PAGE_META))
				problem(vs, "block %u has page type %u", blk, op->page_type);
			else
			{
				vs->types[blk] = op->page_type;
				vs->nslots[blk] = op->nslots;
			}
			if (blk == SHNSW_METAPAGE_BLKNO)
				memcpy(&vs->meta, ShnswPageGetMeta(page), sizeof(vs->meta));
		}
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
	return vs->types[0] == SHNSW_PAGE_META;
}

/*
 * verify_meta_sizes checks the metapage's fixed fields, which size every
 * record: if they are wrong, the other pages cannot be read, so the check
 * stops after saying so (returns false).
 */
static bool
verify_meta_sizes(VerifyState *vs)
{
	const ShnswMetaPageData *meta = &vs->meta;
	int			navdims = shnsw_nav_dims((ShnswElemType) meta->elemtype, meta->dims);
	int			expect_node_size,
				expect_per_page;

	if (meta->magic != SHNSW_MAGIC || meta->version != SHNSW_FORMAT_VERSION)
	{
		problem(vs, "metapage has magic %08x version %u", meta->magic, meta->version);
		return false;
	}
	if (meta->m < SHNSW_MIN_M || meta->m > SHNSW_MAX_M_OPTION)
		problem(vs, "metapage (block 0) has m = %u", meta->m);
	if (meta->elemtype < SHNSW_ELEM_FLOAT4 || meta->elemtype > SHNSW_ELEM_SPARSE ||
		meta->dims < 1 || meta->dims > shnsw_max_dims((ShnswElemType) meta->elemtype))
		problem(vs, "metapage (block 0) has element type %u with %u dimensions",
				meta->elemtype, meta->dims);
	if (meta->metric < SHNSW_METRIC_L2 || meta->metric > SHNSW_METRIC_LAST ||
		!shnsw_metric_is_bit((ShnswMetric) meta->metric) != (meta->elemtype != SHNSW_ELEM_BIT))
		problem(vs, "metapage (block 0) has metric %u for element type %u",
				meta->metric, meta->elemtype);
	expect_node_size = (int) shnsw_node_size(meta->m, navdims);
	expect_per_page = shnsw_nodes_per_page(expect_node_size);
	if (meta->node_size != expect_node_size || expect_node_size > (int) SHNSW_PAGE_CAPACITY ||
		meta->nodes_per_page != expect_per_page ||
		meta->slot_bits != shnsw_slot_bits(expect_per_page) ||
		meta->vec_size != (uint32) shnsw_vec_size((ShnswElemType) meta->elemtype, meta->dims))
		problem(vs, "metapage (block 0) sizes are inconsistent: node_size %u, nodes_per_page %u, slot_bits %u, vec_size %u",
				meta->node_size, meta->nodes_per_page, meta->slot_bits, meta->vec_size);
	if (meta->quant_start != SHNSW_METAPAGE_BLKNO + 1 ||
		meta->quant_nblocks != (uint32) shnsw_quant_nblocks(navdims))
		problem(vs, "metapage (block 0) places the quantizer at block %u, %u blocks",
				meta->quant_start, meta->quant_nblocks);
	return vs->nproblems == 0;
}

/*
 * verify_meta_places checks what the metapage names: quantizer pages and
 * their values, ef_construction and the entry level, the blocks for new
 * records, the free list head; and clamps slot counts beyond the page.
 */
static void
verify_meta_places(VerifyState *vs)
{
	const ShnswMetaPageData *meta = &vs->meta;

	for (uint32 q = 0; q < meta->quant_nblocks; q++)
		if (!block_is(vs, meta->quant_start + q, SHNSW_PAGE_QUANT))
			problem(vs, "quantizer block %u is missing or of the wrong type", meta->quant_start + q);
		else if (meta->quant_trained)
			check_quant(vs, vs->index, meta, q);
	if (meta->ef_construction < SHNSW_MIN_EF_CONSTRUCTION || meta->ef_construction > SHNSW_MAX_EF_CONSTRUCTION)
		problem(vs, "metapage (block 0) has ef_construction %u", meta->ef_construction);
	if (meta->entry_level < -1 || meta->entry_level > SHNSW_MAX_LEVEL)
		problem(vs, "metapage (block 0) has entry level %d", meta->entry_level);
	{
		static const char *const names[] = {"graph", "vector", "upper"};
		BlockNumber blks[] = {meta->insert_graph_blk, meta->insert_vec_blk, meta->insert_upper_blk};
		uint8		want[] = {SHNSW_PAGE_GRAPH, SHNSW_PAGE_VECTOR, SHNSW_PAGE_UPPER};

		for (int k = 0; k < 3; k++)
			if (blks[k] != InvalidBlockNumber &&
				!block_is(vs, blks[k], want[k]))
				problem(vs, "metapage (block 0) names block %u for new %s records, not a %s page",
						blks[k], names[k], names[k]);
	}
	if (meta->free_head != SHNSW_INVALID_REF &&
		!block_is(vs, shnsw_ref_block(meta->free_head, meta->slot_bits), SHNSW_PAGE_GRAPH))
		problem(vs, "metapage (block 0) free list head %u is not on a graph page", meta->free_head);

	/* slot counts beyond the page: the slots that fit are checked */
	for (BlockNumber blk = 0; blk < vs->nblocks; blk++)
	{
		if (vs->types[blk] == SHNSW_PAGE_GRAPH && vs->nslots[blk] > meta->nodes_per_page)
		{
			problem(vs, "block %u has %u node slots, more than %u", blk, vs->nslots[blk], meta->nodes_per_page);
			vs->nslots[blk] = meta->nodes_per_page;
		}
	}
}

/*
 * verify_upper_tids checks the heap TIDs listed in upper record u of node
 * (blk, s), header h, when they are the node's (h->extra_tids > 0): valid
 * offsets, the first one the header's.
 */
static void
verify_upper_tids(VerifyState *vs, BlockNumber blk, int s, const ShnswNodeHeader *h,
				  const ShnswUpperHeader *u)
{
	const ShnswTid *x = shnsw_upper_tids(u, vs->meta.m);

	if (h->extra_tids == 0)
		return;
	for (int k = 0; k < u->ntids; k++)
	{
		ShnswTid	t;

		memcpy(&t, &x[k], sizeof(t));
		if (t.off == InvalidOffsetNumber || t.off > MaxOffsetNumber)
			problem(vs, "node (%u,%d) has heap tuple offset %u in its row %d",
					blk, s, t.off, k);
		else if (((BlockNumber) t.blk_hi << 16 | t.blk_lo) >= vs->heap_nblocks)
			problem(vs, "node (%u,%d) names heap block %u in its row %d, past the table's %u blocks",
					blk, s, (BlockNumber) t.blk_hi << 16 | t.blk_lo, k, vs->heap_nblocks);
		else if (k == 0 && (t.blk_hi != h->tid_blk_hi || t.blk_lo != h->tid_blk_lo ||
							t.off != h->tid_off))
			problem(vs, "node (%u,%d) lists a first heap tuple other than its header's",
					blk, s);
	}
}

/*
 * verify_upper checks the upper-layer record of node (blk, s), whose header
 * is h: it exists, belongs to the node, its lists name nodes and, for a
 * node of several rows, it lists them.
 */
static void
verify_upper(VerifyState *vs, BlockNumber blk, int s, ShnswNodeHeader *h)
{
	const ShnswMetaPageData *meta = &vs->meta;
	ShnswRef	self = shnsw_make_ref(blk, s, meta->slot_bits);
	ShnswUpperLoc uloc = shnsw_node_upper_loc(h);

	if (!block_is(vs, uloc.block, SHNSW_PAGE_UPPER))
		problem(vs, "node (%u,%d) of level %u has no upper record", blk, s, h->level);
	else
	{
		Buffer		ubuf = ReadBuffer(vs->index, uloc.block);
		Page		upage;

		LockBuffer(ubuf, BUFFER_LOCK_SHARE);
		upage = BufferGetPage(ubuf);
		if (uloc.offset < FirstOffsetNumber || uloc.offset > PageGetMaxOffsetNumber(upage))
			problem(vs, "node (%u,%d) references missing upper record (%u,%u)",
					blk, s, uloc.block, uloc.offset);
		else if (!upper_item_ok(upage, uloc.offset, meta->m))
			problem(vs, "node (%u,%d) references upper record (%u,%u), whose item cannot hold it",
					blk, s, uloc.block, uloc.offset);
		else
		{
			ShnswUpperHeader *u = (ShnswUpperHeader *) PageGetItem(upage, PageGetItemId(upage, uloc.offset));

			/* a reused slot's record may be larger than its node needs */
			if (u->node != self || u->level < h->level)
				problem(vs, "upper record (%u,%u) belongs to node %u level %u, not node (%u,%d) level %u",
						uloc.block, uloc.offset, u->node, u->level, blk, s, h->level);
			else if (h->extra_tids > 0 && u->ntids != h->extra_tids + 1)
				problem(vs, "upper record of node (%u,%d) lists %u heap tuples, not %u",
						blk, s, u->ntids, h->extra_tids + 1);
			else
				verify_upper_tids(vs, blk, s, h, u);
			if (u->node == self && u->level >= h->level)
				for (int l = 1; l <= u->level; l++)
				{
					ShnswRef   *un = shnsw_upper_neighbors(u, l, meta->m);

					if (shnsw_upper_counts(u)[l - 1] > meta->m)
						problem(vs, "upper record of node (%u,%d) has %u neighbours on layer %d",
								blk, s, shnsw_upper_counts(u)[l - 1], l);
					for (int k = 0; k < Min(shnsw_upper_counts(u)[l - 1], meta->m); k++)
						if (!ref_ok(vs, un[k]))
							problem(vs, "node (%u,%d) layer %d neighbour %d references %u, not a node",
									blk, s, l, k, un[k]);
				}
		}
		UnlockReleaseBuffer(ubuf);
	}
}

/*
 * verify_node checks node slot s of graph page blk (a copy): flags,
 * neighbours, heap TID, vector place, upper record, and counts it. A vector
 * whose header is to be read once the page is released is added to
 * vec_slot/vec_blk/vec_off.
 */
static void
verify_node(VerifyState *vs, Page page, BlockNumber blk, int s, int *nvec, int *vec_slot,
			BlockNumber *vec_blk, uint16 *vec_off)
{
	const ShnswMetaPageData *meta = &vs->meta;
	ShnswNodeHeader *h = shnsw_page_node(page, s, meta->node_size);
	ShnswRef	self = shnsw_make_ref(blk, s, meta->slot_bits);
	ShnswRef   *nb = shnsw_node_neighbors(h);
	uint64		vend = (uint64) h->vec_offset +
		shnsw_vec_span((ShnswElemType) meta->elemtype, meta->vec_size);
	ShnswNodeLimits lim;
	ShnswNodeFault fault;
	const char *field;

	/* the fields every reader checks (nodecheck.h), then what verify adds */
	shnsw_node_limits(&lim, meta->m, meta->slot_bits,
					  shnsw_vec_span((ShnswElemType) meta->elemtype, meta->vec_size), vs->nblocks);
	field = shnsw_node_problem(h, self, &lim, &fault);
	if (field != NULL)
		problem(vs, "node (%u,%d) has an invalid %s: %llu", blk, s, field,
				(unsigned long long) fault.value);

	vs->nodes++;
	if (h->flags & SHNSW_NODE_DELETED)
		vs->deleted++;
	else if (!(h->flags & SHNSW_NODE_FREE))
	{
		BlockNumber hb = shnsw_node_tid_block(h);

		vs->live++;
		if (h->nneighbors == 0 && vs->isolated++ == 0)
			vs->first_isolated = self;
		/* its row: InvalidBlockNumber is past any table's end */
		if (!vs->have_heap_blk || hb > vs->max_heap_blk)
		{
			vs->max_heap_blk = hb;
			vs->have_heap_blk = true;
		}
	}
	if (h->flags & SHNSW_NODE_FREE)
	{
		if (!(h->flags & SHNSW_NODE_DELETED) || h->level != 0 || h->nneighbors != 0)
			problem(vs, "free node (%u,%d) has flags %u, level %u, %u neighbours",
					blk, s, h->flags, h->level, h->nneighbors);
		if (vs->nfree < vs->free_cap)
		{
			if (vs->free_refs == NULL)
			{
				vs->free_refs = palloc_extended(sizeof(ShnswRef) * vs->free_cap, MCXT_ALLOC_HUGE);
				vs->free_next = palloc_extended(sizeof(ShnswRef) * vs->free_cap, MCXT_ALLOC_HUGE);
			}
			vs->free_refs[vs->nfree] = self;
			vs->free_next[vs->nfree] = nb[0];
		}
		vs->nfree++;
	}
	/* where the neighbours point: at node slots (beyond the validator) */
	for (int k = 0; k < Min(h->nneighbors, 2 * meta->m); k++)
		if (!ref_ok(vs, nb[k]))
			problem(vs, "node (%u,%d) neighbour %d references %u, not a node", blk, s, k, nb[k]);
	/* exact vector: on vector pages, possibly continuing on the next */
	for (BlockNumber vb = h->vec_block; vend > 0; vb++)
	{
		if (!block_is(vs, vb, SHNSW_PAGE_VECTOR))
		{
			problem(vs, "node (%u,%d) has its vector at block %u, not a vector page", blk, s, vb);
			break;
		}
		if (vend <= SHNSW_PAGE_CAPACITY)
		{
			/* its header is checked once the page is released */
			if (h->vec_offset < SHNSW_PAGE_CAPACITY && h->vec_offset % 4 == 0)
			{
				vec_slot[*nvec] = s;
				vec_blk[*nvec] = h->vec_block;
				vec_off[(*nvec)++] = h->vec_offset;
			}
			break;
		}
		vend -= SHNSW_PAGE_CAPACITY;
	}
	if ((h->level > 0 || (h->extra_tids > 0 && h->extra_tids < SHNSW_NODE_TIDS)) &&
		!(h->flags & SHNSW_NODE_FREE))
		verify_upper(vs, blk, s, h);
}

/*
 * verify_nodes is pass 2: the nodes of every graph page, from a copy of the
 * page, so that no lock is held while the upper pages its nodes name are
 * read.
 */
static void
verify_nodes(VerifyState *vs)
{
	char	   *copy = palloc(BLCKSZ);
	char	   *vec = palloc(vs->meta.vec_size);

	for (BlockNumber blk = 0; blk < vs->nblocks; blk++)
	{
		Buffer		buf;
		int			nvec = 0;
		int			vec_slot[SHNSW_MAX_NODES_PER_PAGE];
		BlockNumber vec_blk[SHNSW_MAX_NODES_PER_PAGE];
		uint16		vec_off[SHNSW_MAX_NODES_PER_PAGE];

		if (vs->types[blk] != SHNSW_PAGE_GRAPH)
			continue;
		buf = ReadBuffer(vs->index, blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		memcpy(copy, BufferGetPage(buf), BLCKSZ);
		UnlockReleaseBuffer(buf);
		for (int s = 0; s < vs->nslots[blk]; s++)
			verify_node(vs, (Page) copy, blk, s, &nvec, vec_slot, vec_blk, vec_off);
		for (int k = 0; k < nvec; k++)
			check_vector(vs, vs->index, &vs->meta, blk, vec_slot[k], vec_blk[k], vec_off[k], vec);
		CHECK_FOR_INTERRUPTS();
	}
	pfree(copy);
	pfree(vec);
}

/* verify_counts checks the entry point and the metapage's node counts. */
static void
verify_counts(VerifyState *vs)
{
	const ShnswMetaPageData *meta = &vs->meta;

	/* entry point and counts */
	if (meta->entry == SHNSW_INVALID_REF)
	{
		if (vs->nodes > vs->deleted)
			problem(vs, "index has %llu live nodes but no entry point",
					(unsigned long long) (vs->nodes - vs->deleted));
	}
	else if (!ref_ok(vs, meta->entry))
		problem(vs, "entry point %u is not a node", meta->entry);
	else
	{
		Buffer		buf = ReadBuffer(vs->index, shnsw_ref_block(meta->entry, meta->slot_bits));
		ShnswNodeHeader *h;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		h = shnsw_page_node(BufferGetPage(buf), shnsw_ref_slot(meta->entry, meta->slot_bits),
							meta->node_size);
		if (h->flags & SHNSW_NODE_FREE)
			problem(vs, "entry point %u is a free node", meta->entry);
		else if (h->level != meta->entry_level)
			problem(vs, "entry point has level %u, metapage says %d", h->level, meta->entry_level);
		UnlockReleaseBuffer(buf);
	}
	if (vs->nodes != meta->node_count)
		problem(vs, "index holds %llu nodes, metapage counts %llu",
				(unsigned long long) vs->nodes, (unsigned long long) meta->node_count);
	if (vs->deleted != meta->deleted_count)
		problem(vs, "index holds %llu deleted nodes, metapage counts %llu",
				(unsigned long long) vs->deleted, (unsigned long long) meta->deleted_count);

	if (vs->nfree != meta->free_count)
		problem(vs, "index holds %llu free nodes, metapage counts %llu",
				(unsigned long long) vs->nfree, (unsigned long long) meta->free_count);

	/* a search finds nothing without a trained quantizer (no codes to read) */
	if (!meta->quant_trained && vs->nodes > 0)
		problem(vs, "metapage (block 0) says the quantizer is untrained, but the index holds %llu nodes",
				(unsigned long long) vs->nodes);

	/*
	 * Every live node of a graph of several has a neighbour on layer 0: an
	 * insert links the new node to at least one, VACUUM repairs the lists of
	 * nodes whose neighbours it frees. One without is unreachable.
	 */
	if (vs->live > 1 && vs->isolated > 0)
		problem(vs, "%llu of %llu live nodes have no neighbour on layer 0 (the first: (%u,%u))",
				(unsigned long long) vs->isolated, (unsigned long long) vs->live,
				shnsw_ref_block(vs->first_isolated, meta->slot_bits),
				shnsw_ref_slot(vs->first_isolated, meta->slot_bits));

	/* row pointers name blocks of the table */
	if (vs->have_heap_blk && vs->max_heap_blk >= vs->heap_nblocks)
		problem(vs, "a node names heap block %u, past the table's %u blocks",
				vs->max_heap_blk, vs->heap_nblocks);
}

/* verify_free_list checks that the free list links every free node once. */
static void
verify_free_list(VerifyState *vs)
{
	const ShnswMetaPageData *meta = &vs->meta;

	/* the free list links every free node once (vs->free_refs is sorted) */
	{
		uint64		walked = 0;
		uint64		have = Min(vs->nfree, vs->free_cap);

		for (ShnswRef r = meta->free_head; r != SHNSW_INVALID_REF; walked++)
		{
			ShnswRef   *at = have > 0 ? bsearch(&r, vs->free_refs, have, sizeof(ShnswRef), shnsw_ref_cmp) : NULL;

			if (at == NULL)
			{
				problem(vs, "free list links %u, which is not a free node", r);
				break;
			}
			if (walked >= have)
			{
				problem(vs, "free list is longer than the %llu free nodes (a cycle)",
						(unsigned long long) have);
				break;
			}
			r = vs->free_next[at - vs->free_refs];
		}
		if (walked < have)
			problem(vs, "free list links %llu of %llu free nodes",
					(unsigned long long) walked, (unsigned long long) have);
	}
}

PG_FUNCTION_INFO_V1(streamhnsw_verify);

/*
 * streamhnsw_verify(regclass) returns setof text: one row per problem.
 * Holds a ShareLock on the index throughout (AccessShareLock on a standby).
 */
Datum
streamhnsw_verify(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	VerifyState vs;
	LOCKMODE	lockmode;
	Oid			heapoid;
	Relation	heap;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	memset(&vs, 0, sizeof(vs));
	vs.ts = rsinfo->setResult;
	vs.desc = rsinfo->setDesc;

	/* a standby allows no lock above RowExclusiveLock, nor takes inserts */
	lockmode = RecoveryInProgress() ? AccessShareLock : ShareLock;
	shnsw_index_check(relid, SHNSW_RIGHT_INSPECT);
	/* the table first (as amcheck): its length bounds the row pointers */
	heapoid = IndexGetRelation(relid, false);
	heap = relation_open(heapoid, AccessShareLock);
	vs.index = shnsw_index_open(relid, lockmode, SHNSW_RIGHT_INSPECT);
	vs.heap_nblocks = InvalidBlockNumber;	/* read before pass 2 (below) */
	vs.nblocks = RelationGetNumberOfBlocks(vs.index);
	if (vs.nblocks == 0)
		problem(&vs, "index has no metapage");
	else
	{
		vs.types = palloc0(vs.nblocks);
		vs.nslots = palloc0(sizeof(uint16) * vs.nblocks);
		if (verify_pages(&vs) && verify_meta_sizes(&vs))
		{
			verify_meta_places(&vs);
			/* no more free nodes than slots, whatever the metapage counts */
			vs.free_cap = Min(vs.meta.node_count, (uint64) vs.nblocks * vs.meta.nodes_per_page);
			vs.heap_nblocks = RelationGetNumberOfBlocks(heap);
			verify_nodes(&vs);
			verify_counts(&vs);
			verify_free_list(&vs);
		}
	}
	relation_close(vs.index, lockmode);
	relation_close(heap, AccessShareLock);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(streamhnsw_metapage);

/*
 * streamhnsw_metapage(regclass) returns the metapage's fields as one row.
 */
Datum
streamhnsw_metapage(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Relation	index = shnsw_index_open(relid, AccessShareLock, SHNSW_RIGHT_INSPECT);
	TupleDesc	desc;
	Buffer		buf;
	ShnswMetaPageData meta;
	Datum		values[14];
	bool		nulls[14] = {0};
	static const char *const metrics[] = {"?", "l2", "ip", "cosine", "l1", "hamming", "jaccard"};
	int			i = 0;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	buf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	shnsw_check_page(index, BufferGetPage(buf), SHNSW_METAPAGE_BLKNO, SHNSW_PAGE_META);
	memcpy(&meta, ShnswPageGetMeta(BufferGetPage(buf)), sizeof(meta));
	UnlockReleaseBuffer(buf);

	values[i++] = Int32GetDatum(meta.version);
	values[i++] = Int32GetDatum(meta.dims);
	values[i++] = Int32GetDatum(meta.m);
	values[i++] = Int32GetDatum(meta.ef_construction);
	values[i++] = CStringGetTextDatum(metrics[meta.metric <= SHNSW_METRIC_LAST ? meta.metric : 0]);
	values[i++] = CStringGetTextDatum(meta.elemtype >= SHNSW_ELEM_FLOAT4 &&
									  meta.elemtype <= SHNSW_ELEM_SPARSE ?
									  shnsw_elemtype_name((ShnswElemType) meta.elemtype) : "?");
	values[i++] = BoolGetDatum(meta.quant_trained);
	values[i++] = Int64GetDatum((int64) meta.node_count);
	values[i++] = Int64GetDatum((int64) meta.deleted_count);
	values[i++] = Int32GetDatum(meta.entry_level);
	values[i++] = Int64GetDatum((int64) meta.cache_generation);
	values[i++] = Int32GetDatum(meta.nodes_per_page);
	values[i++] = Int64GetDatum((int64) RelationGetNumberOfBlocks(index));
	values[i++] = Int64GetDatum((int64) meta.free_count);
	relation_close(index, AccessShareLock);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
