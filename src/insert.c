/*-------------------------------------------------------------------------
 *
 * insert.c
 *	  aminsert: add one row to the graph.
 *
 * The algorithm is src/README's "Inserts", its locks "Locking" (a
 * heavyweight lock on the metapage's page number, ShareLock for inserts,
 * ExclusiveLock to insert into an empty index or train the quantizer;
 * buffer locks in the order graph -> vector -> upper -> metapage), its WAL
 * "WAL and crash safety". insert_node is the outline: insert_start,
 * shnsw_find_neighbors (links.c), place_in_free_slot or append_node,
 * link_back, insert_publish.
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
	ShnswIndexInfo *info;		/* our own copy (shnsw_get_index_info) */
	ShnswLinker lk;				/* page access and list changes */
	int			dims;
	int			m;
	BlockNumber nblocks;		/* relation length last seen (bounds checks) */
} InsertState;

/*
 * Extend the index by one page, returned pinned and unlocked (all zeros:
 * no other backend uses it until the metapage names it, and readers skip
 * new pages). Refuses blocks that node references could not name. Called
 * with no buffer lock held.
 */
static Buffer
new_page(InsertState *is)
{
	Buffer		buf = ExtendBufferedRel(BMR_REL(is->index), MAIN_FORKNUM, NULL, 0);

	if ((uint64) BufferGetBlockNumber(buf) >= ((uint64) 1 << (32 - is->info->slot_bits)))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("streamhnsw index \"%s\" is too large for its node references",
						RelationGetRelationName(is->index))));
	return buf;
}

/*
 * Pin block blk, or a new page if blk is InvalidBlockNumber (*isnew says
 * which); takes no lock, so any read or extension happens with none held.
 */
static Buffer
pin_or_extend(InsertState *is, BlockNumber blk, bool *isnew)
{
	*isnew = blk == InvalidBlockNumber;
	return *isnew ? new_page(is) : ReadBuffer(is->index, blk);
}

/* What a new node record holds, whichever slot it goes to. */
typedef struct NewNode
{
	ItemPointer heap_tid;
	int			level;
	const ShnswRef *nbrs0;		/* layer-0 neighbours */
	int			nnbrs0;
	const uint8 *code;
	struct varlena *value;		/* exact vector, vec_size bytes */
} NewNode;

static OffsetNumber append_upper_record(InsertState *is, Page upage, BlockNumber ublk,
										ShnswRef newref, int level, Size usize,
										ShnswRef **nbrs, const int *nnbrs);

/* Write the node record of nn into h (the vector's and upper record's places given). */
static void
fill_node(InsertState *is, ShnswNodeHeader *h, const NewNode *nn, BlockNumber ublk,
		  OffsetNumber uoff, BlockNumber vblk, Size voff)
{
	MemSet(h, 0, is->info->node_size);
	h->tid_blk_hi = nn->heap_tid->ip_blkid.bi_hi;
	h->tid_blk_lo = nn->heap_tid->ip_blkid.bi_lo;
	h->tid_off = nn->heap_tid->ip_posid;
	h->level = nn->level;
	h->flags = 0;
	/* a level-0 node may keep its slot's upper record (write_free_slot) */
	h->upper_blk_hi = ublk != InvalidBlockNumber ? (uint16) (ublk >> 16) : 0xFFFF;
	h->upper_blk_lo = ublk != InvalidBlockNumber ? (uint16) (ublk & 0xFFFF) : 0xFFFF;
	h->upper_off = ublk != InvalidBlockNumber ? uoff : InvalidOffsetNumber;
	h->nneighbors = nn->nnbrs0;
	if (nn->nnbrs0 > 0)
		memcpy(shnsw_node_neighbors(h), nn->nbrs0, sizeof(ShnswRef) * nn->nnbrs0);
	h->vec_block = vblk;
	h->vec_offset = (uint16) voff;
	memcpy(shnsw_node_code(h, is->m), nn->code, is->dims);
}

/*
 * write_free_slot writes the new node into the free slot head (its graph
 * page gbuf, its vector page(s) vbuf[0..nv-1], for a node of level > 0 the
 * upper page ubuf (the slot's own record if inplace, at rloc, else the
 * insert upper page) and the metapage, all locked exclusively by the
 * caller) and pops it off the free list, in one WAL record (two when the
 * vector spans pages and there is an upper record: see below). next is the
 * slot's free-list link.
 */
static void
write_free_slot(InsertState *is, Buffer metabuf, Buffer gbuf, const Buffer *vbuf, int nv,
				Buffer ubuf, bool inplace, ShnswUpperLoc rloc, ShnswRef head, BlockNumber vblk,
				Size voff, ShnswRef next, const NewNode *nn, ShnswRef **nbrs, const int *nnbrs)
{
	ShnswIndexInfo *info = is->info;
	int			slot = shnsw_ref_slot(head, info->slot_bits);
	GenericXLogState *state;
	GenericXLogState *ustate = NULL;
	ShnswMetaPage meta;
	Page		gpage;
	int			first;
	BlockNumber ublk = InvalidBlockNumber;
	OffsetNumber uoff = InvalidOffsetNumber;
	ShnswRef	own[2 * SHNSW_MAX_M];
	NewNode		mine = *nn;

	/*
	 * If a VACUUM freed this slot after our search saw its old node alive,
	 * that node is among the neighbours found, on any layer: a node never
	 * names itself (shnsw_check_node treats that as corruption).
	 */
	mine.nnbrs0 = 0;
	for (int k = 0; k < nn->nnbrs0; k++)
		if (nn->nbrs0[k] != head)
			own[mine.nnbrs0++] = nn->nbrs0[k];
	mine.nbrs0 = own;

	/*
	 * The upper record. A record holds at most four pages; with a vector
	 * on two pages the upper page makes five, so then the upper record is
	 * written first, in a record of its own. A crash in between leaves the
	 * slot free with its record rewritten (its lists are still lists) or a
	 * new record that no node names (space, nothing else).
	 */
	if (nn->level > 0)
	{
		ShnswRef   *unbrs[SHNSW_MAX_LEVEL + 1];
		int			unn[SHNSW_MAX_LEVEL + 1];
		Page		upage;

		for (int l = 1; l <= nn->level; l++)
		{
			unbrs[l] = palloc(sizeof(ShnswRef) * Max(nnbrs[l], 1));
			unn[l] = 0;
			for (int k = 0; k < nnbrs[l]; k++)
				if (nbrs[l][k] != head)
					unbrs[l][unn[l]++] = nbrs[l][k];
		}
		ublk = BufferGetBlockNumber(ubuf);
		if (nv == 2)
			ustate = GenericXLogStart(is->index);
		state = nv == 2 ? NULL : GenericXLogStart(is->index);
		upage = GenericXLogRegisterBuffer(ustate ? ustate : state, ubuf, 0);
		if (inplace)
		{
			ShnswUpperHeader *u = (ShnswUpperHeader *)
				PageGetItem(upage, PageGetItemId(upage, rloc.offset));

			/* its own layers; those above stay, empty (u->level unchanged) */
			for (int l = 1; l <= u->level; l++)
			{
				int			cnt = l <= nn->level ? unn[l] : 0;

				shnsw_upper_counts(u)[l - 1] = cnt;
				if (cnt > 0)
					memcpy(shnsw_upper_neighbors(u, l, is->m), unbrs[l], sizeof(ShnswRef) * cnt);
			}
			uoff = rloc.offset;
		}
		else
			uoff = append_upper_record(is, upage, ublk, head, nn->level,
									   shnsw_upper_size(nn->level, is->m), unbrs, unn);
		if (ustate)
		{
			GenericXLogFinish(ustate);
			state = GenericXLogStart(is->index);
		}
	}
	else
	{
		state = GenericXLogStart(is->index);
		if (rloc.block != InvalidBlockNumber)
		{
			/* a level-0 node keeps the slot's record for the next one */
			ublk = rloc.block;
			uoff = rloc.offset;
		}
	}

	gpage = GenericXLogRegisterBuffer(state, gbuf, 0);
	first = Min(info->vec_size, (int) (SHNSW_PAGE_CAPACITY - voff));
	memcpy(PageGetContents(GenericXLogRegisterBuffer(state, vbuf[0], 0)) + voff,
		   nn->value, first);
	if (nv == 2)
		memcpy(PageGetContents(GenericXLogRegisterBuffer(state, vbuf[1], 0)),
			   (char *) nn->value + first, info->vec_size - first);
	meta = ShnswPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
	fill_node(is, shnsw_page_node(gpage, slot, info->node_size), &mine, ublk, uoff, vblk, voff);
	meta->free_head = next;
	meta->free_count--;
	meta->deleted_count--;
	if (meta->entry == SHNSW_INVALID_REF || nn->level > meta->entry_level)
	{
		meta->entry = head;
		meta->entry_level = nn->level;
	}
	GenericXLogFinish(state);
}

/*
 * retained_upper_level returns the level of the upper record that free slot
 * head kept from its last node (loc, read from the slot's header), or 0 if
 * it has none usable. Called with no lock held; takes and releases a share
 * lock on the record's page. The record's page must be none of the pages
 * the caller locks with it (graph page gblk, vector page(s) from vblk).
 */
static int
retained_upper_level(InsertState *is, ShnswRef head, BlockNumber gblk, BlockNumber vblk, int nv,
					 const ShnswUpperLoc *loc)
{
	Buffer		buf;
	ShnswUpperHeader *u;
	int			level = 0;

	if (loc->offset == InvalidOffsetNumber || loc->block == InvalidBlockNumber ||
		loc->block == SHNSW_METAPAGE_BLKNO || loc->block == gblk || loc->block == vblk ||
		(nv == 2 && loc->block == vblk + 1))
		return 0;
	shnsw_check_block(is->index, loc->block, &is->nblocks, gblk, "upper record block");
	buf = ReadBuffer(is->index, loc->block);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	shnsw_check_page(is->index, BufferGetPage(buf), loc->block, SHNSW_PAGE_UPPER);
	u = shnsw_upper_record(is->index, BufferGetPage(buf), loc->block, loc->offset, is->m);
	if (u != NULL && u->node == head)
		level = u->level;
	UnlockReleaseBuffer(buf);
	return level;
}

/*
 * free_slot_level returns the level of the upper record kept by the slot at
 * the head of the free list (0 if it has none), or -1 if the list is empty.
 * Takes and releases share locks on the metapage, the slot's graph page and
 * the record's upper page, one at a time.
 */
static int
free_slot_level(InsertState *is, Buffer metabuf)
{
	ShnswIndexInfo *info = is->info;
	ShnswRef	head;
	BlockNumber gblk;
	int			slot;
	Buffer		gbuf;
	ShnswUpperLoc loc;
	bool		isfree = false;

	LockBuffer(metabuf, BUFFER_LOCK_SHARE);
	head = ShnswPageGetMeta(BufferGetPage(metabuf))->free_head;
	LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
	if (head == SHNSW_INVALID_REF)
		return -1;
	gblk = shnsw_ref_block(head, info->slot_bits);
	slot = shnsw_ref_slot(head, info->slot_bits);
	shnsw_check_block(is->index, gblk, &is->nblocks, SHNSW_METAPAGE_BLKNO, "free list head");
	gbuf = ReadBuffer(is->index, gblk);
	LockBuffer(gbuf, BUFFER_LOCK_SHARE);
	shnsw_check_page(is->index, BufferGetPage(gbuf), gblk, SHNSW_PAGE_GRAPH);
	if (slot < shnsw_graph_nslots(is->index, BufferGetPage(gbuf), gblk, info->node_size))
	{
		ShnswNodeHeader *h = shnsw_page_node(BufferGetPage(gbuf), slot, info->node_size);

		isfree = (h->flags & SHNSW_NODE_FREE) != 0;
		loc = shnsw_node_upper_loc(h);
	}
	UnlockReleaseBuffer(gbuf);
	if (!isfree)
		return -1;
	return retained_upper_level(is, head, gblk, InvalidBlockNumber, 1, &loc);
}

/*
 * place_in_free_slot puts a level-0 node into the first slot of the free
 * list (VACUUM's), reusing that slot's exact-vector space, which may span
 * two vector pages. Returns the node's reference, or SHNSW_INVALID_REF if
 * there is no free slot (or it kept losing races for one).
 *
 * Locks, in the insert order: the slot's graph page, its vector page(s),
 * the metapage, all exclusively, for the one WAL record that writes the
 * node and vector and pops the free list. The vector pages are read (pinned)
 * before any of them is locked, with no lock held. metabuf is pinned by the
 * caller.
 */
static ShnswRef
place_in_free_slot(InsertState *is, Buffer metabuf, const NewNode *nn, ShnswRef **nbrs,
				   const int *nnbrs)
{
	ShnswIndexInfo *info = is->info;
	Size		usize = nn->level > 0 ? shnsw_upper_size(nn->level, is->m) : 0;

	for (int attempt = 0; attempt < 4; attempt++)
	{
		ShnswMetaPage meta;
		ShnswRef	head;
		BlockNumber gblk;
		int			slot;
		Buffer		gbuf,
					vbuf[2];
		int			nv;
		ShnswNodeHeader *h;
		BlockNumber vblk;
		Size		voff;
		ShnswRef	next;
		BlockNumber ublk;
		Buffer		ubuf = InvalidBuffer;
		ShnswUpperLoc rloc;
		int			rlevel;
		bool		inplace = false;

		LockBuffer(metabuf, BUFFER_LOCK_SHARE);
		head = ShnswPageGetMeta(BufferGetPage(metabuf))->free_head;
		ublk = ShnswPageGetMeta(BufferGetPage(metabuf))->insert_upper_blk;
		LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
		if (head == SHNSW_INVALID_REF)
			return SHNSW_INVALID_REF;

		gblk = shnsw_ref_block(head, info->slot_bits);
		slot = shnsw_ref_slot(head, info->slot_bits);
		/* never the metapage, which we hold pinned and lock below */
		shnsw_check_block(is->index, gblk, &is->nblocks, SHNSW_METAPAGE_BLKNO, "free list head");
		gbuf = ReadBuffer(is->index, gblk);
		LockBuffer(gbuf, BUFFER_LOCK_SHARE);
		shnsw_check_page(is->index, BufferGetPage(gbuf), gblk, SHNSW_PAGE_GRAPH);
		if (slot >= shnsw_graph_nslots(is->index, BufferGetPage(gbuf), gblk, info->node_size))
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("index \"%s\" has free list entry %u beyond the slots of block %u",
							RelationGetRelationName(is->index), head, gblk)));
		h = shnsw_page_node(BufferGetPage(gbuf), slot, info->node_size);
		if (!(h->flags & SHNSW_NODE_FREE))
		{
			/* another insert took it after we read the head: look again */
			UnlockReleaseBuffer(gbuf);
			continue;
		}
		shnsw_check_node(is->index, gblk, slot, h, info->m, info->slot_bits, info->vec_size,
						 &is->nblocks);
		vblk = h->vec_block;
		voff = h->vec_offset;
		rloc = shnsw_node_upper_loc(h);
		LockBuffer(gbuf, BUFFER_LOCK_UNLOCK);
		nv = voff + info->vec_size > SHNSW_PAGE_CAPACITY ? 2 : 1;
		for (int k = 0; k < nv; k++)
		{
			/* a vector "on" the graph page would be locked twice below */
			if (vblk + k == gblk)
				shnsw_corrupt(is->index, gblk, "vector block", vblk + k);
			vbuf[k] = ReadBuffer(is->index, vblk + k);
		}
		/* the upper record the slot kept, if any: its level (0: none) */
		rlevel = retained_upper_level(is, head, gblk, vblk, nv, &rloc);
		if (rlevel == 0)
			rloc.block = InvalidBlockNumber;
		if (nn->level > 0 && rlevel >= nn->level)
		{
			/* rewrite the slot's own record */
			inplace = true;
			ublk = rloc.block;
			ubuf = ReadBuffer(is->index, ublk);
		}
		else if (nn->level > 0)
		{
			if (ublk == InvalidBlockNumber)
			{
				for (int k = 0; k < nv; k++)
					ReleaseBuffer(vbuf[k]);
				ReleaseBuffer(gbuf);
				return SHNSW_INVALID_REF;
			}
			/* locked with the others: another page, within the relation */
			shnsw_check_block(is->index, ublk, &is->nblocks, SHNSW_METAPAGE_BLKNO,
							  "insert upper block");
			if (ublk == gblk || ublk == vblk || (nv == 2 && ublk == vblk + 1))
				shnsw_corrupt(is->index, SHNSW_METAPAGE_BLKNO, "insert upper block", ublk);
			ubuf = ReadBuffer(is->index, ublk);
		}

		/* now lock, in order, and check that the slot is still ours to take */
		LockBuffer(gbuf, BUFFER_LOCK_EXCLUSIVE);
		h = shnsw_page_node(BufferGetPage(gbuf), slot, info->node_size);
		if (!(h->flags & SHNSW_NODE_FREE) || h->vec_block != vblk || h->vec_offset != voff)
		{
			for (int k = 0; k < nv; k++)
				ReleaseBuffer(vbuf[k]);
			if (BufferIsValid(ubuf))
				ReleaseBuffer(ubuf);
			UnlockReleaseBuffer(gbuf);
			continue;
		}
		next = shnsw_node_neighbors(h)[0];
		for (int k = 0; k < nv; k++)
		{
			LockBuffer(vbuf[k], BUFFER_LOCK_EXCLUSIVE);
			shnsw_check_page(is->index, BufferGetPage(vbuf[k]), vblk + k, SHNSW_PAGE_VECTOR);
		}
		if (BufferIsValid(ubuf))
		{
			LockBuffer(ubuf, BUFFER_LOCK_EXCLUSIVE);
			shnsw_check_page(is->index, BufferGetPage(ubuf), ublk, SHNSW_PAGE_UPPER);
			if (inplace)
			{
				ShnswUpperHeader *u = shnsw_upper_record(is->index, BufferGetPage(ubuf), ublk,
														 rloc.offset, is->m);

				/* only the insert that pops the slot changes its record */
				if (u == NULL || u->node != head || u->level < nn->level)
					shnsw_corrupt(is->index, ublk, "upper record of a free slot", rloc.offset);
			}
			else if (PageGetFreeSpace(BufferGetPage(ubuf)) < MAXALIGN(usize))
			{
				/* the upper page is full: append (it starts a new one) */
				UnlockReleaseBuffer(ubuf);
				for (int k = 0; k < nv; k++)
					UnlockReleaseBuffer(vbuf[k]);
				UnlockReleaseBuffer(gbuf);
				return SHNSW_INVALID_REF;
			}
		}
		LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
		meta = ShnswPageGetMeta(BufferGetPage(metabuf));
		if (meta->free_head != head)
		{
			/* VACUUM pushed more slots meanwhile: pop the new head instead */
			LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
			if (BufferIsValid(ubuf))
				UnlockReleaseBuffer(ubuf);
			for (int k = 0; k < nv; k++)
				UnlockReleaseBuffer(vbuf[k]);
			UnlockReleaseBuffer(gbuf);
			continue;
		}

		write_free_slot(is, metabuf, gbuf, vbuf, nv, ubuf, inplace, rloc, head, vblk, voff,
						next, nn, nbrs, nnbrs);
		LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
		if (BufferIsValid(ubuf))
			UnlockReleaseBuffer(ubuf);
		for (int k = 0; k < nv; k++)
			UnlockReleaseBuffer(vbuf[k]);
		UnlockReleaseBuffer(gbuf);
		return head;
	}
	return SHNSW_INVALID_REF;
}

/* Has the index doubled since its quantizer was trained (up to a limit)? */
static bool
meta_retrain_due(ShnswMetaPage meta)
{
	return meta->quant_rows < SHNSW_RETRAIN_MAX_ROWS &&
		meta->node_count >= 2 * Max(meta->quant_rows, 1);
}

/* meta_retrain_due, read under a share lock on the metapage. */
static bool
retrain_due(Relation index)
{
	Buffer		buf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	bool		due;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	due = meta_retrain_due(ShnswPageGetMeta(BufferGetPage(buf)));
	UnlockReleaseBuffer(buf);
	return due;
}

/*
 * Nodes that the new node's back-links took out of lists may have lost
 * their last near in-link: the new node links to them while its list has
 * room (shnsw_adopt), and each one it has no room for gets the search
 * check of shnsw_make_findable. The nodes that check's own link drops are
 * left alone (one level, to bound the work).
 */
static void
rehome(InsertState *is, ShnswRef newref, ShnswRef *dropped, int ndropped, int efc)
{
	int			left = shnsw_adopt(&is->lk, newref, dropped, ndropped);

	for (int k = 0; k < left; k++)
	{
		ShnswRef	again[2 * SHNSW_MAX_M];
		int			nagain = 0;

		CHECK_FOR_INTERRUPTS();
		shnsw_make_findable(&is->lk, dropped[k], efc, true, again, &nagain);
	}
}

/* What an insert reads from the metapage before its searches. */
typedef struct InsertStart
{
	ShnswRef	entry;
	int			entry_level;
	int			efc;
	uint64		rng;			/* this insert's level draw */
} InsertStart;

/*
 * insert_start reads the entry point, ef_construction and the random state
 * from the metapage, and trains the quantizer on the first value if it is
 * not trained yet. The metapage is pinned only while it is read or
 * written, never through the searches.
 */
static void
insert_start(InsertState *is, const float *nav, ItemPointer heap_tid, InsertStart *st)
{
	Relation	index = is->index;
	Buffer		metabuf;
	ShnswMetaPage meta;
	bool		trained;

	metabuf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_SHARE);
	meta = ShnswPageGetMeta(BufferGetPage(metabuf));
	st->entry = meta->entry;
	st->entry_level = meta->entry_level;
	st->efc = meta->ef_construction;
	trained = meta->quant_trained;
	st->rng = meta->rng_state ^ (uint64) heap_tid->ip_posid * 0x9E3779B97F4A7C15ULL ^
		((uint64) ItemPointerGetBlockNumberNoCheck(heap_tid) << 20);
	UnlockReleaseBuffer(metabuf);
	if (st->efc < SHNSW_MIN_EF_CONSTRUCTION || st->efc > SHNSW_MAX_EF_CONSTRUCTION)
		shnsw_corrupt(index, SHNSW_METAPAGE_BLKNO, "ef_construction", st->efc);
	if (!trained)
	{
		GenericXLogState *state;

		shnsw_train_from_first(index, is->info, nav);
		metabuf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
		LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
		state = GenericXLogStart(index);
		meta = ShnswPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
		meta->quant_trained = true;
		meta->quant_rows = 1;
		GenericXLogFinish(state);
		UnlockReleaseBuffer(metabuf);
		is->info->quant_trained = true;
	}
}

/* The pages an appended node goes to: graph, vector and (level > 0) upper. */
typedef struct AppendPages
{
	Buffer		gbuf,
				vbuf,
				ubuf;
	bool		gnew,
				vnew,
				unew;
} AppendPages;

/*
 * append_check_places checks the metapage's insert blocks: they are locked
 * together with the metapage (which the caller keeps pinned), so each must
 * be another page, or we would wait for our own lock. Their types are
 * checked as soon as they are locked (append_lock_pages).
 */
static void
append_check_places(InsertState *is, BlockNumber gblk, BlockNumber vblk, BlockNumber ublk)
{
	Relation	index = is->index;

	if (gblk != InvalidBlockNumber)
		shnsw_check_block(index, gblk, &is->nblocks, SHNSW_METAPAGE_BLKNO, "insert graph block");
	if (vblk != InvalidBlockNumber)
		shnsw_check_block(index, vblk, &is->nblocks, SHNSW_METAPAGE_BLKNO, "insert vector block");
	if (ublk != InvalidBlockNumber)
		shnsw_check_block(index, ublk, &is->nblocks, SHNSW_METAPAGE_BLKNO, "insert upper block");
	if (vblk != InvalidBlockNumber && (vblk == gblk || vblk == ublk))
		shnsw_corrupt(index, SHNSW_METAPAGE_BLKNO, "insert vector block", vblk);
	if (ublk != InvalidBlockNumber && ublk == gblk)
		shnsw_corrupt(index, SHNSW_METAPAGE_BLKNO, "insert upper block", ublk);
}

/*
 * append_lock_pages pins and exclusive-locks a graph page with a free slot,
 * a vector page with room for a whole vector and (level > 0) an upper page
 * with room for usize bytes, starting from the metapage's insert blocks.
 * They are pinned first (read, or extended) with no lock held, then locked
 * in the insert order; a page found full is let go, with the locks taken so
 * far, and replaced by a new page (which has room: this ends).
 */
static void
append_lock_pages(InsertState *is, Buffer metabuf, int level, Size usize, AppendPages *p)
{
	Relation	index = is->index;
	ShnswIndexInfo *info = is->info;
	int			stride = TYPEALIGN(4, info->vec_size);
	ShnswMetaPage meta;
	BlockNumber gblk,
				vblk,
				ublk;

	LockBuffer(metabuf, BUFFER_LOCK_SHARE);
	meta = ShnswPageGetMeta(BufferGetPage(metabuf));
	gblk = meta->insert_graph_blk;
	vblk = meta->insert_vec_blk;
	ublk = meta->insert_upper_blk;
	LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
	append_check_places(is, gblk, vblk, ublk);

	p->ubuf = InvalidBuffer;
	p->unew = false;
	p->gbuf = pin_or_extend(is, gblk, &p->gnew);
	p->vbuf = pin_or_extend(is, vblk, &p->vnew);
	if (level > 0)
		p->ubuf = pin_or_extend(is, ublk, &p->unew);
	for (;;)
	{
		LockBuffer(p->gbuf, BUFFER_LOCK_EXCLUSIVE);
		if (!p->gnew)
		{
			BlockNumber blk = BufferGetBlockNumber(p->gbuf);

			shnsw_check_page(index, BufferGetPage(p->gbuf), blk, SHNSW_PAGE_GRAPH);
			if (shnsw_graph_nslots(index, BufferGetPage(p->gbuf), blk, info->node_size) >=
				shnsw_nodes_per_page(info->node_size))
			{
				UnlockReleaseBuffer(p->gbuf);
				p->gbuf = pin_or_extend(is, InvalidBlockNumber, &p->gnew);
				continue;
			}
		}
		LockBuffer(p->vbuf, BUFFER_LOCK_EXCLUSIVE);
		if (!p->vnew)
		{
			BlockNumber blk = BufferGetBlockNumber(p->vbuf);
			Page		vp = BufferGetPage(p->vbuf);
			int			used;

			shnsw_check_page(index, vp, blk, SHNSW_PAGE_VECTOR);
			used = (int) ((PageHeader) vp)->pd_lower - (int) MAXALIGN(SizeOfPageHeaderData);
			if (used < 0 || used > (int) SHNSW_PAGE_CAPACITY || used % 4 != 0)
				shnsw_corrupt(index, blk, "end of vector data", ((PageHeader) vp)->pd_lower);
			if (used + stride > SHNSW_PAGE_CAPACITY)
			{
				UnlockReleaseBuffer(p->vbuf);
				LockBuffer(p->gbuf, BUFFER_LOCK_UNLOCK);
				p->vbuf = pin_or_extend(is, InvalidBlockNumber, &p->vnew);
				continue;
			}
		}
		if (level > 0)
		{
			LockBuffer(p->ubuf, BUFFER_LOCK_EXCLUSIVE);
			if (!p->unew)
			{
				shnsw_check_page(index, BufferGetPage(p->ubuf), BufferGetBlockNumber(p->ubuf),
								 SHNSW_PAGE_UPPER);
				if (PageGetFreeSpace(BufferGetPage(p->ubuf)) < MAXALIGN(usize))
				{
					UnlockReleaseBuffer(p->ubuf);
					LockBuffer(p->vbuf, BUFFER_LOCK_UNLOCK);
					LockBuffer(p->gbuf, BUFFER_LOCK_UNLOCK);
					p->ubuf = pin_or_extend(is, InvalidBlockNumber, &p->unew);
					continue;
				}
			}
		}
		break;
	}
}

/*
 * append_upper_record adds the new node's upper-layer record (its lists on
 * layers 1..level) to upage; returns its offset.
 */
static OffsetNumber
append_upper_record(InsertState *is, Page upage, BlockNumber ublk, ShnswRef newref,
					int level, Size usize, ShnswRef **nbrs, const int *nnbrs)
{
	char	   *rec = palloc0(usize);
	ShnswUpperHeader *u = (ShnswUpperHeader *) rec;
	OffsetNumber uoff;

	shnsw_check_page(is->index, upage, ublk, SHNSW_PAGE_UPPER);
	u->node = newref;
	u->level = level;
	for (int l = 1; l <= level; l++)
	{
		shnsw_upper_counts(u)[l - 1] = nnbrs[l];
		if (nnbrs[l] > 0)
			memcpy(shnsw_upper_neighbors(u, l, is->m), nbrs[l], sizeof(ShnswRef) * nnbrs[l]);
	}
	uoff = PageAddItem(upage, (Item) rec, usize, InvalidOffsetNumber, false, false);
	if (uoff == InvalidOffsetNumber)
		elog(ERROR, "streamhnsw: failed to add upper record");
	pfree(rec);
	return uoff;
}

/*
 * append_node puts the node at the end: a new slot on the insert graph
 * page, its vector on the insert vector page, its upper record on the
 * insert upper page (new pages where those are full), and updates the
 * metapage, in one WAL record. metabuf is pinned by the caller, not locked;
 * holds no lock on return. Returns the node's reference.
 */
static ShnswRef
append_node(InsertState *is, Buffer metabuf, const NewNode *nn, ShnswRef **nbrs,
			const int *nnbrs)
{
	Relation	index = is->index;
	ShnswIndexInfo *info = is->info;
	int			level = nn->level;
	int			stride = TYPEALIGN(4, info->vec_size);
	Size		usize = level > 0 ? shnsw_upper_size(level, is->m) : 0;
	GenericXLogState *state;
	AppendPages p;
	Page		gpage,
				vpage,
				upage = NULL;
	BlockNumber gblk,
				vblk,
				ublk = InvalidBlockNumber;
	OffsetNumber uoff = InvalidOffsetNumber;
	ShnswMetaPage meta;
	ShnswRef	newref;
	int			slot;
	Size		voff;

	append_lock_pages(is, metabuf, level, usize, &p);
	gblk = BufferGetBlockNumber(p.gbuf);
	vblk = BufferGetBlockNumber(p.vbuf);
	if (level > 0)
		ublk = BufferGetBlockNumber(p.ubuf);

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	state = GenericXLogStart(index);
	gpage = GenericXLogRegisterBuffer(state, p.gbuf, p.gnew ? GENERIC_XLOG_FULL_IMAGE : 0);
	vpage = GenericXLogRegisterBuffer(state, p.vbuf, p.vnew ? GENERIC_XLOG_FULL_IMAGE : 0);
	if (level > 0)
		upage = GenericXLogRegisterBuffer(state, p.ubuf, p.unew ? GENERIC_XLOG_FULL_IMAGE : 0);
	meta = ShnswPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
	if (p.gnew)
		shnsw_init_page(gpage, SHNSW_PAGE_GRAPH);
	if (p.vnew)
		shnsw_init_page(vpage, SHNSW_PAGE_VECTOR);
	if (p.unew)
		shnsw_init_page(upage, SHNSW_PAGE_UPPER);
	shnsw_check_page(index, gpage, gblk, SHNSW_PAGE_GRAPH);
	shnsw_check_page(index, vpage, vblk, SHNSW_PAGE_VECTOR);

	/* the exact vector */
	voff = ((PageHeader) vpage)->pd_lower - MAXALIGN(SizeOfPageHeaderData);
	MemSet(PageGetContents(vpage) + voff, 0, stride);
	memcpy(PageGetContents(vpage) + voff, nn->value, info->vec_size);
	((PageHeader) vpage)->pd_lower += stride;

	/* the node, and its upper record */
	slot = ShnswPageGetOpaque(gpage)->nslots;
	newref = shnsw_make_ref(gblk, slot, info->slot_bits);
	if (level > 0)
		uoff = append_upper_record(is, upage, ublk, newref, level, usize, nbrs, nnbrs);
	fill_node(is, shnsw_page_node(gpage, slot, info->node_size), nn, ublk, uoff, vblk, voff);
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
	UnlockReleaseBuffer(p.gbuf);
	UnlockReleaseBuffer(p.vbuf);
	if (level > 0)
		UnlockReleaseBuffer(p.ubuf);
	return newref;
}

/*
 * link_back links the new node from its neighbours. A layer-0 node that a
 * back-link takes out of a full list gets a link from the new node instead
 * (while its list has room). If the heuristic kept the new node in none of
 * its layer-0 neighbours' lists, no search could reach it: the nearest
 * neighbour that will take it links to it anyway.
 *
 * A scan descends greedily where the insert searched at width
 * ef_construction, and concurrent inserts can prune the new node out of
 * lists before it is linked everywhere: in clustered data a search for the
 * new vector can settle elsewhere. If it does, link the node from the
 * nearest node that search reached (vacuum.c, pass 4b).
 */
static void
link_back(InsertState *is, ShnswRef newref, const uint8 *code, int level, ShnswRef **nbrs,
		  const int *nnbrs, int efc)
{
	bool		linked = false;
	ShnswRef	dropped[2 * SHNSW_MAX_M];
	int			ndropped;

	for (int l = 1; l <= level; l++)
		for (int k = 0; k < nnbrs[l]; k++)
			if (nbrs[l][k] != newref)
				shnsw_add_backlink(&is->lk, nbrs[l][k], l, newref, code, false, NULL, NULL);
	for (int k = 0; k < nnbrs[0]; k++)
	{
		ndropped = 0;
		CHECK_FOR_INTERRUPTS();
		if (nbrs[0][k] == newref)
			continue;			/* the slot's old node (see place_in_free_slot) */
		if (shnsw_add_backlink(&is->lk, nbrs[0][k], 0, newref, code, false, dropped, &ndropped))
			linked = true;
		/* a node a back-link took out may have lost its only in-link */
		if (ndropped > 0)
			rehome(is, newref, dropped, ndropped, efc);
	}
	for (int k = 0; k < nnbrs[0] && !linked; k++)
	{
		ndropped = 0;
		if (nbrs[0][k] == newref)
			continue;
		linked = shnsw_add_backlink(&is->lk, nbrs[0][k], 0, newref, code, true, dropped, &ndropped);
		if (ndropped > 0)
			rehome(is, newref, dropped, ndropped, efc);
	}
	ndropped = 0;
	if (shnsw_make_findable(&is->lk, newref, efc, true, dropped, &ndropped) && ndropped > 0)
		rehome(is, newref, dropped, ndropped, efc);
}

/*
 * insert_publish says the graph changed (cache generation); returns true if
 * the index has doubled since its quantizer was trained.
 */
static bool
insert_publish(Relation index)
{
	GenericXLogState *state;
	Buffer		metabuf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	ShnswMetaPage meta;
	bool		retrain;

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	state = GenericXLogStart(index);
	meta = ShnswPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
	meta->cache_generation++;
	retrain = meta_retrain_due(meta);
	GenericXLogFinish(state);
	UnlockReleaseBuffer(metabuf);
	return retrain;
}

/*
 * add_duplicate adds heap_tid to node ref if that node is live, has room
 * for another row and holds exactly value (vec_size bytes); returns true
 * if it did. The node's header is read under a share lock, its vector
 * page(s) pinned with no lock held, then the graph page is locked
 * exclusively, the header checked again and the vector compared under a
 * share lock on its page(s) (graph page before vector pages, the order of
 * src/README, Locking): so the row goes only to a node that holds its
 * value at the moment it is added. One WAL record.
 */
static bool
add_duplicate(InsertState *is, ShnswRef ref, const struct varlena *value, ItemPointer heap_tid)
{
	Relation	index = is->index;
	int			node_size = is->info->node_size;
	int			vec_size = is->info->vec_size;
	BlockNumber blk = shnsw_ref_block(ref, is->info->slot_bits);
	int			slot = shnsw_ref_slot(ref, is->info->slot_bits);
	Buffer		gbuf,
				vbuf[2];
	BlockNumber vblk;
	uint16		voff;
	int			nv;
	bool		done = false;
	Page		page;
	ShnswNodeHeader *h;

	if (VARSIZE_ANY(value) != (Size) vec_size)
		return false;
	gbuf = ReadBuffer(index, blk);
	LockBuffer(gbuf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(gbuf);
	shnsw_check_page(index, page, blk, SHNSW_PAGE_GRAPH);
	if (slot >= shnsw_graph_nslots(index, page, blk, node_size))
	{
		UnlockReleaseBuffer(gbuf);
		return false;
	}
	h = shnsw_page_node(page, slot, node_size);
	shnsw_check_node(index, blk, slot, h, is->m, is->info->slot_bits, vec_size, &is->nblocks);
	if ((h->flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)) ||
		h->extra_tids >= SHNSW_NODE_TIDS - 1)
	{
		UnlockReleaseBuffer(gbuf);
		return false;
	}
	vblk = h->vec_block;
	voff = h->vec_offset;
	LockBuffer(gbuf, BUFFER_LOCK_UNLOCK);

	nv = voff + vec_size > (int) SHNSW_PAGE_CAPACITY ? 2 : 1;
	for (int k = 0; k < nv; k++)
	{
		if (vblk + k == blk || vblk + k == SHNSW_METAPAGE_BLKNO)
			shnsw_corrupt(index, blk, "vector block", vblk + k);
		vbuf[k] = ReadBuffer(index, vblk + k);
	}

	LockBuffer(gbuf, BUFFER_LOCK_EXCLUSIVE);
	page = BufferGetPage(gbuf);
	h = shnsw_page_node(page, slot, node_size);
	if (!(h->flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)) &&
		h->extra_tids < SHNSW_NODE_TIDS - 1 &&
		h->vec_block == vblk && h->vec_offset == voff)
	{
		const char *v = (const char *) value;
		int			at = 0;
		int			off = voff;
		bool		same = true;

		for (int k = 0; k < nv && same; k++)
		{
			Page		vpage;
			int			chunk = Min(vec_size - at, (int) SHNSW_PAGE_CAPACITY - off);

			LockBuffer(vbuf[k], BUFFER_LOCK_SHARE);
			vpage = BufferGetPage(vbuf[k]);
			shnsw_check_page(index, vpage, vblk + k, SHNSW_PAGE_VECTOR);
			if (chunk <= 0 ||
				off + chunk > ((PageHeader) vpage)->pd_lower - MAXALIGN(SizeOfPageHeaderData))
				same = false;
			else
				same = memcmp(PageGetContents(vpage) + off, v + at, chunk) == 0;
			LockBuffer(vbuf[k], BUFFER_LOCK_UNLOCK);
			at += chunk;
			off = 0;
		}
		if (same)
		{
			GenericXLogState *state = GenericXLogStart(index);
			ItemPointerData tids[SHNSW_NODE_TIDS];
			int			n;

			page = GenericXLogRegisterBuffer(state, gbuf, 0);
			h = shnsw_page_node(page, slot, node_size);
			n = shnsw_node_tids(index, blk, h, node_size, tids);
			tids[n++] = *heap_tid;
			shnsw_node_set_tids(h, node_size, tids, n);
			GenericXLogFinish(state);
			done = true;
		}
	}
	UnlockReleaseBuffer(gbuf);
	for (int k = 0; k < nv; k++)
		ReleaseBuffer(vbuf[k]);
	return done;
}

/*
 * insert_node does the work of one insert, under the insert lock (either
 * mode): find neighbours, place the node (a slot VACUUM freed, for a level-0
 * node, if there is one; else at the end), link it back, publish. Returns
 * true if the index has doubled since its quantizer was trained and should
 * retrain it.
 */
static bool
insert_node(InsertState *is, struct varlena *value, const float *nav, ItemPointer heap_tid)
{
	ShnswIndexInfo *info = is->info;
	uint8	   *code = palloc(is->dims);
	ShnswRef   *nbrs[SHNSW_MAX_LEVEL + 1];
	int			nnbrs[SHNSW_MAX_LEVEL + 1];
	InsertStart st;
	NewNode		nn;
	Buffer		metabuf;
	ShnswRef	newref;
	int			level;

	insert_start(is, nav, heap_tid, &st);
	sq8_encode(info->lo, info->scale, nav, code, is->dims);

	/* find neighbours */
	MemSet(nnbrs, 0, sizeof(nnbrs));
	level = shnsw_random_level(&st.rng, 1.0 / log((double) Max(is->m, 2)), SHNSW_MAX_LEVEL);

	/*
	 * A node that will take a free slot takes the level of the slot's last
	 * node, whose upper record the slot kept: the freed levels are a sample
	 * of the same distribution, and the records are rewritten in place
	 * instead of new ones being added (place_in_free_slot).
	 */
	{
		Buffer		mb = ReadBuffer(is->index, SHNSW_METAPAGE_BLKNO);
		int			fl = free_slot_level(is, mb);

		ReleaseBuffer(mb);
		if (fl >= 0)
			level = Min(fl, SHNSW_MAX_LEVEL);
	}
	is->lk.dup_code = code;
	is->lk.ndups = 0;
	if (st.entry != SHNSW_INVALID_REF)
		shnsw_find_neighbors(&is->lk, nav, st.entry, st.entry_level, level, st.efc,
							 SHNSW_INVALID_REF, nbrs, nnbrs);
	is->lk.dup_code = NULL;

	/* a node that holds the same vector takes the row, if it has room */
	for (int k = 0; k < is->lk.ndups; k++)
	{
		CHECK_FOR_INTERRUPTS();
		if (add_duplicate(is, is->lk.dups[k], value, heap_tid))
			return insert_publish(is->index);
	}

	/* place the node, its vector and its upper record; update the metapage */
	nn.heap_tid = heap_tid;
	nn.level = level;
	nn.nbrs0 = nbrs[0];
	nn.nnbrs0 = nnbrs[0];
	nn.code = code;
	nn.value = value;
	metabuf = ReadBuffer(is->index, SHNSW_METAPAGE_BLKNO);
	newref = place_in_free_slot(is, metabuf, &nn, nbrs, nnbrs);
	if (newref == SHNSW_INVALID_REF)
		newref = append_node(is, metabuf, &nn, nbrs, nnbrs);
	ReleaseBuffer(metabuf);

	link_back(is, newref, code, level, nbrs, nnbrs, st.efc);
	return insert_publish(is->index);
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
	shnsw_debug_discard(index);

	ctx = AllocSetContextCreate(CurrentMemoryContext, "streamhnsw insert",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(ctx);

	is.index = index;
	is.nblocks = 0;
	is.info = shnsw_get_index_info(index);
	is.dims = is.info->dims;
	is.m = is.info->m;

	v = shnsw_check_vector(values[0], is.info->elemtype, is.dims);
	nav = palloc(sizeof(float) * is.dims);
	if (shnsw_vector_to_nav(v, is.info->elemtype, is.info->metric, is.dims, nav))
	{
		LOCKMODE	mode = ShareLock;
		bool		retrain;

		/*
		 * Inserts share the insert lock. The first node of an empty index
		 * (no entry point to link to) and training the quantizer happen
		 * alone, as does retraining (which re-encodes every node).
		 */
		for (;;)
		{
			ShnswMetaSnapshot snap;

			LockPage(index, SHNSW_METAPAGE_BLKNO, mode);
			shnsw_debug_discard(index);
			/* the quantizer may have been trained or retrained since we looked */
			shnsw_read_meta(index, &snap);
			pfree(is.info);
			is.info = shnsw_get_index_info(index);
			if (mode == ExclusiveLock ||
				(is.info->quant_trained && snap.entry != SHNSW_INVALID_REF))
				break;
			UnlockPage(index, SHNSW_METAPAGE_BLKNO, mode);
			mode = ExclusiveLock;
		}
		shnsw_linker_init(&is.lk, index, is.info);
		retrain = insert_node(&is, v, nav, heap_tid);
		UnlockPage(index, SHNSW_METAPAGE_BLKNO, mode);
		if (retrain)
		{
			LockPage(index, SHNSW_METAPAGE_BLKNO, ExclusiveLock);
			if (retrain_due(index))
				shnsw_retrain(index);
			UnlockPage(index, SHNSW_METAPAGE_BLKNO, ExclusiveLock);
		}
	}

	MemoryContextSwitchTo(old);
	MemoryContextDelete(ctx);
	return false;
}
