/*-------------------------------------------------------------------------
 *
 * verify.c
 *	  streamhnsw_verify(): structural checks of an index, and
 *	  streamhnsw_metapage(): the metapage as a row.
 *
 * Verification reads every page once under a share lock (one at a time)
 * and reports each problem it finds as a row of text; no rows means the
 * structure is sound. It checks page magic and types, the metapage's fixed
 * fields, that every neighbour reference names a used node slot, that every
 * node's exact vector and upper record exist and agree with it, that the
 * entry point is a node of the recorded level, that the node counts match,
 * and that the free list links every free node exactly once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/pg_am.h"
#include "commands/defrem.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/tuplestore.h"

#include "streamhnsw.h"

/* Open an index with AccessShareLock, insisting that it is ours. */
static Relation
open_streamhnsw_index(Oid relid)
{
	Relation	index = relation_open(relid, AccessShareLock);

	if (index->rd_rel->relkind == RELKIND_PARTITIONED_INDEX &&
		index->rd_rel->relam == get_index_am_oid("streamhnsw", false))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is a partitioned streamhnsw index, which has no pages of its own",
						RelationGetRelationName(index)),
				 errhint("Name the index of one of its partitions.")));
	if (index->rd_rel->relkind != RELKIND_INDEX ||
		index->rd_rel->relam != get_index_am_oid("streamhnsw", false))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a streamhnsw index", RelationGetRelationName(index))));
	if (index->rd_rel->relpersistence == RELPERSISTENCE_TEMP && !RELATION_IS_LOCAL(index))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot access temporary indexes of other sessions")));
	return index;
}

typedef struct VerifyState
{
	Tuplestorestate *ts;
	TupleDesc	desc;
	int			nproblems;
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

/* Is ref a used node slot? */
static bool
ref_ok(ShnswRef ref, int slot_bits, BlockNumber nblocks, const uint8 *types, const uint16 *nslots)
{
	BlockNumber blk = shnsw_ref_block(ref, slot_bits);

	return ref != SHNSW_INVALID_REF && blk < nblocks && types[blk] == SHNSW_PAGE_GRAPH &&
		shnsw_ref_slot(ref, slot_bits) < nslots[blk];
}

PG_FUNCTION_INFO_V1(streamhnsw_verify);

/*
 * streamhnsw_verify(regclass) returns setof text: one row per problem.
 */
Datum
streamhnsw_verify(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	VerifyState vs;
	Relation	index;
	BlockNumber nblocks;
	uint8	   *types;
	uint16	   *nslots;
	ShnswMetaPageData meta;
	uint64		nodes = 0,
				deleted = 0,
				nfree = 0;
	ShnswRef   *free_refs = NULL;	/* free slots in order, and ... */
	ShnswRef   *free_next = NULL;	/* ... the next slot each links to */
	int			expect_node_size,
				expect_per_page;
	char	   *copy;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	vs.ts = rsinfo->setResult;
	vs.desc = rsinfo->setDesc;
	vs.nproblems = 0;

	index = open_streamhnsw_index(relid);
	nblocks = RelationGetNumberOfBlocks(index);
	if (nblocks == 0)
	{
		problem(&vs, "index has no metapage");
		relation_close(index, AccessShareLock);
		return (Datum) 0;
	}

	/* pass 1: page types and slot counts; the metapage */
	types = palloc0(nblocks);
	nslots = palloc0(sizeof(uint16) * nblocks);
	for (BlockNumber blk = 0; blk < nblocks; blk++)
	{
		Buffer		buf = ReadBuffer(index, blk);
		Page		page;
		ShnswPageOpaque op;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (PageIsNew(page) && blk != SHNSW_METAPAGE_BLKNO)
			;					/* extended by an interrupted insert: empty */
		else if (PageIsNew(page) || PageGetSpecialSize(page) != MAXALIGN(sizeof(ShnswPageOpaqueData)))
			problem(&vs, "block %u is not a streamhnsw page", blk);
		else
		{
			op = ShnswPageGetOpaque(page);
			if (op->magic != SHNSW_MAGIC)
				problem(&vs, "block %u has magic %08x, not %08x", blk, op->magic, SHNSW_MAGIC);
			else if (op->page_type < SHNSW_PAGE_META || op->page_type > SHNSW_PAGE_UPPER)
				problem(&vs, "block %u has unknown page type %u", blk, op->page_type);
			else if ((blk == SHNSW_METAPAGE_BLKNO) != (op->page_type == SHNSW_PAGE_META))
				problem(&vs, "block %u has page type %u", blk, op->page_type);
			else
			{
				types[blk] = op->page_type;
				nslots[blk] = op->nslots;
			}
			if (blk == SHNSW_METAPAGE_BLKNO)
				memcpy(&meta, ShnswPageGetMeta(page), sizeof(meta));
		}
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
	if (types[0] != SHNSW_PAGE_META)
	{
		relation_close(index, AccessShareLock);
		return (Datum) 0;
	}
	if (meta.magic != SHNSW_MAGIC || meta.version != SHNSW_FORMAT_VERSION)
	{
		problem(&vs, "metapage has magic %08x version %u", meta.magic, meta.version);
		relation_close(index, AccessShareLock);
		return (Datum) 0;
	}
	expect_node_size = (int) shnsw_node_size(meta.m, meta.dims);
	expect_per_page = shnsw_nodes_per_page(expect_node_size);
	if (meta.node_size != expect_node_size || meta.nodes_per_page != expect_per_page ||
		meta.slot_bits != shnsw_slot_bits(expect_per_page) ||
		meta.vec_size != (uint32) shnsw_vec_size((ShnswElemType) meta.elemtype, meta.dims))
		problem(&vs, "metapage sizes are inconsistent: node_size %u, nodes_per_page %u, slot_bits %u, vec_size %u",
				meta.node_size, meta.nodes_per_page, meta.slot_bits, meta.vec_size);
	if (meta.m < SHNSW_MIN_M || meta.m > SHNSW_MAX_M_OPTION)
		problem(&vs, "metapage has m = %u", meta.m);
	for (uint32 q = 0; q < meta.quant_nblocks; q++)
		if (meta.quant_start + q >= nblocks || types[meta.quant_start + q] != SHNSW_PAGE_QUANT)
			problem(&vs, "quantizer block %u is missing or of the wrong type", meta.quant_start + q);

	/*
	 * pass 2: nodes, from a copy of each graph page, so that no lock is held
	 * while the upper pages its nodes name are read
	 */
	copy = palloc(BLCKSZ);
	for (BlockNumber blk = 0; blk < nblocks; blk++)
	{
		Buffer		buf;
		Page		page;

		if (types[blk] != SHNSW_PAGE_GRAPH)
			continue;
		buf = ReadBuffer(index, blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		memcpy(copy, BufferGetPage(buf), BLCKSZ);
		UnlockReleaseBuffer(buf);
		page = (Page) copy;
		if (nslots[blk] > meta.nodes_per_page)
			problem(&vs, "block %u has %u node slots, more than %u", blk, nslots[blk], meta.nodes_per_page);
		for (int s = 0; s < Min(nslots[blk], meta.nodes_per_page); s++)
		{
			ShnswNodeHeader *h = shnsw_page_node(page, s, meta.node_size);
			ShnswRef	self = shnsw_make_ref(blk, s, meta.slot_bits);
			ShnswRef   *nb = shnsw_node_neighbors(h);
			ShnswUpperLoc uloc = shnsw_node_upper_loc(h);
			uint64		vend = (uint64) h->vec_offset + meta.vec_size;

			nodes++;
			if (h->flags & SHNSW_NODE_DELETED)
				deleted++;
			if (h->flags & SHNSW_NODE_FREE)
			{
				if (!(h->flags & SHNSW_NODE_DELETED) || h->level != 0 || h->nneighbors != 0)
					problem(&vs, "free node (%u,%d) has flags %u, level %u, %u neighbours",
							blk, s, h->flags, h->level, h->nneighbors);
				if (nfree < meta.node_count)
				{
					if (free_refs == NULL)
					{
						free_refs = palloc_extended(sizeof(ShnswRef) * meta.node_count, MCXT_ALLOC_HUGE);
						free_next = palloc_extended(sizeof(ShnswRef) * meta.node_count, MCXT_ALLOC_HUGE);
					}
					free_refs[nfree] = self;
					free_next[nfree] = nb[0];
				}
				nfree++;
			}
			if (h->level > SHNSW_MAX_LEVEL)
				problem(&vs, "node (%u,%d) has level %u", blk, s, h->level);
			if (h->nneighbors > 2 * meta.m)
				problem(&vs, "node (%u,%d) has %u neighbours, more than %d", blk, s, h->nneighbors, 2 * meta.m);
			for (int k = 0; k < Min(h->nneighbors, 2 * meta.m); k++)
			{
				if (!ref_ok(nb[k], meta.slot_bits, nblocks, types, nslots))
					problem(&vs, "node (%u,%d) neighbour %d references %u, not a node", blk, s, k, nb[k]);
				else if (nb[k] == self)
					problem(&vs, "node (%u,%d) is its own neighbour", blk, s);
			}
			/* exact vector: on vector pages, possibly continuing on the next */
			for (BlockNumber vb = h->vec_block; vend > 0; vb++)
			{
				if (vb >= nblocks || types[vb] != SHNSW_PAGE_VECTOR)
				{
					problem(&vs, "node (%u,%d) has its vector at block %u, not a vector page", blk, s, vb);
					break;
				}
				if (vend <= SHNSW_PAGE_CAPACITY)
					break;
				vend -= SHNSW_PAGE_CAPACITY;
			}
			if (h->vec_offset >= SHNSW_PAGE_CAPACITY)
				problem(&vs, "node (%u,%d) has vector offset %u", blk, s, h->vec_offset);
			/* upper record */
			if (h->level > 0 && !(h->flags & SHNSW_NODE_FREE))
			{
				if (uloc.block >= nblocks || types[uloc.block] != SHNSW_PAGE_UPPER)
					problem(&vs, "node (%u,%d) of level %u has no upper record", blk, s, h->level);
				else
				{
					Buffer		ubuf = ReadBuffer(index, uloc.block);
					Page		upage;

					LockBuffer(ubuf, BUFFER_LOCK_SHARE);
					upage = BufferGetPage(ubuf);
					if (uloc.offset < FirstOffsetNumber || uloc.offset > PageGetMaxOffsetNumber(upage))
						problem(&vs, "node (%u,%d) references missing upper record (%u,%u)",
								blk, s, uloc.block, uloc.offset);
					else
					{
						ShnswUpperHeader *u = (ShnswUpperHeader *) PageGetItem(upage, PageGetItemId(upage, uloc.offset));

						if (u->node != self || u->level != h->level)
							problem(&vs, "upper record (%u,%u) belongs to node %u level %u, not node (%u,%d) level %u",
									uloc.block, uloc.offset, u->node, u->level, blk, s, h->level);
						else
							for (int l = 1; l <= u->level; l++)
							{
								ShnswRef   *un = shnsw_upper_neighbors(u, l, meta.m);

								if (shnsw_upper_counts(u)[l - 1] > meta.m)
									problem(&vs, "upper record of node (%u,%d) has %u neighbours on layer %d",
											blk, s, shnsw_upper_counts(u)[l - 1], l);
								for (int k = 0; k < Min(shnsw_upper_counts(u)[l - 1], meta.m); k++)
									if (!ref_ok(un[k], meta.slot_bits, nblocks, types, nslots))
										problem(&vs, "node (%u,%d) layer %d neighbour %d references %u, not a node",
												blk, s, l, k, un[k]);
							}
					}
					UnlockReleaseBuffer(ubuf);
				}
			}
		}
		CHECK_FOR_INTERRUPTS();
	}
	pfree(copy);

	/* entry point and counts */
	if (meta.entry == SHNSW_INVALID_REF)
	{
		if (nodes > deleted)
			problem(&vs, "index has %llu live nodes but no entry point",
					(unsigned long long) (nodes - deleted));
	}
	else if (!ref_ok(meta.entry, meta.slot_bits, nblocks, types, nslots))
		problem(&vs, "entry point %u is not a node", meta.entry);
	else
	{
		Buffer		buf = ReadBuffer(index, shnsw_ref_block(meta.entry, meta.slot_bits));
		ShnswNodeHeader *h;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		h = shnsw_page_node(BufferGetPage(buf), shnsw_ref_slot(meta.entry, meta.slot_bits),
							meta.node_size);
		if (h->flags & SHNSW_NODE_FREE)
			problem(&vs, "entry point %u is a free node", meta.entry);
		else if (h->level != meta.entry_level)
			problem(&vs, "entry point has level %u, metapage says %d", h->level, meta.entry_level);
		UnlockReleaseBuffer(buf);
	}
	if (nodes != meta.node_count)
		problem(&vs, "index holds %llu nodes, metapage counts %llu",
				(unsigned long long) nodes, (unsigned long long) meta.node_count);
	if (deleted != meta.deleted_count)
		problem(&vs, "index holds %llu deleted nodes, metapage counts %llu",
				(unsigned long long) deleted, (unsigned long long) meta.deleted_count);

	if (nfree != meta.free_count)
		problem(&vs, "index holds %llu free nodes, metapage counts %llu",
				(unsigned long long) nfree, (unsigned long long) meta.free_count);

	/* the free list links every free node once (free_refs is sorted) */
	{
		uint64		walked = 0;
		uint64		have = Min(nfree, meta.node_count);

		for (ShnswRef r = meta.free_head; r != SHNSW_INVALID_REF; walked++)
		{
			ShnswRef   *at = have > 0 ? bsearch(&r, free_refs, have, sizeof(ShnswRef), shnsw_ref_cmp) : NULL;

			if (at == NULL)
			{
				problem(&vs, "free list links %u, which is not a free node", r);
				break;
			}
			if (walked >= have)
			{
				problem(&vs, "free list is longer than the %llu free nodes (a cycle)",
						(unsigned long long) have);
				break;
			}
			r = free_next[at - free_refs];
		}
		if (walked < have)
			problem(&vs, "free list links %llu of %llu free nodes",
					(unsigned long long) walked, (unsigned long long) have);
	}
	relation_close(index, AccessShareLock);
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
	Relation	index = open_streamhnsw_index(relid);
	TupleDesc	desc;
	Buffer		buf;
	ShnswMetaPageData meta;
	Datum		values[14];
	bool		nulls[14] = {0};
	static const char *const metrics[] = {"?", "l2", "ip", "cosine"};
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
	values[i++] = CStringGetTextDatum(metrics[meta.metric <= 3 ? meta.metric : 0]);
	values[i++] = CStringGetTextDatum(meta.elemtype == SHNSW_ELEM_FLOAT2 ? "halfvec" : "vector");
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
