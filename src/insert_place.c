/*-------------------------------------------------------------------------
 *
 * insert_place.c
 *	  Where an insert puts its node: pages pinned or added, the node
 *	  record filled, and the reuse of a deleted node's slot from the free
 *	  list VACUUM keeps (src/README, Inserts and VACUUM). insert.c calls
 *	  down into it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/bufmgr.h"
#include "utils/rel.h"
#include "varatt.h"

#include "format.h"
#include "insert_int.h"
#include "meta.h"
#include "pageaccess.h"
#include "pages.h"
#include "pagewrite.h"

/* Refuse a block (the last an extension added) that node references could not name. */
void
insert_check_nameable(InsertState *is, BlockNumber last)
{
	if ((uint64) last >= ((uint64) 1 << (32 - is->info->slot_bits)))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("streamhnsw index \"%s\" is too large for its node references",
						RelationGetRelationName(is->index))));
}

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

	insert_check_nameable(is, BufferGetBlockNumber(buf));
	return buf;
}

/*
 * Pin block blk, or a new page if blk is InvalidBlockNumber (*isnew says
 * which); takes no lock, so any read or extension happens with none held.
 */
Buffer
insert_pin_or_extend(InsertState *is, BlockNumber blk, bool *isnew)
{
	*isnew = blk == InvalidBlockNumber;
	return *isnew ? new_page(is) : ReadBuffer(is->index, blk);
}

/* Write the node record of nn into h (the vector's and upper record's places given). */
void
insert_fill_node(InsertState *is, ShnswNodeHeader *h, const NewNode *nn, BlockNumber ublk,
		  OffsetNumber uoff, BlockNumber vblk, Size voff)
{
	MemSet(h, 0, is->info->node_size);
	h->tid_blk_hi = nn->heap_tid->ip_blkid.bi_hi;
	h->tid_blk_lo = nn->heap_tid->ip_blkid.bi_lo;
	h->tid_off = nn->heap_tid->ip_posid;
	h->level = nn->level;
	h->flags = nn->clamp_flags;
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
 * insert_append_upper_record adds the new node's upper-layer record (its lists on
 * layers 1..level) to upage; returns its offset.
 */
OffsetNumber
insert_append_upper_record(InsertState *is, Page upage, BlockNumber ublk, ShnswRef newref,
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
 * A free slot an insert is taking: the list head, its graph page, the
 * slot's vector page(s), the upper record it kept and the upper page the
 * new node's record goes to.
 */
typedef struct FreeSlot
{
	ShnswRef	head;
	BlockNumber gblk;
	int			slot;
	Buffer		gbuf;
	Buffer		vbuf[2];
	int			nv;				/* vector pages: 2 if the vector spans pages */
	BlockNumber vblk;
	Size		voff;
	ShnswUpperLoc rloc;			/* the record the slot kept (block invalid:
								 * none usable) */
	bool		inplace;		/* the node's record is rloc, rewritten */
	BlockNumber ublk;			/* where the node's upper record goes */
	Buffer		ubuf;			/* InvalidBuffer for a level-0 node */
	ShnswRef	next;			/* the slot's free-list link */
} FreeSlot;

/*
 * free_slot_upper writes the upper record of the node nn taking slot fs
 * (its own lists, without the slot's old node, which a search that saw it
 * alive may have found) and returns the WAL state the rest of the node goes
 * into; *ublk and *uoff say where the node's record is (invalid if none).
 *
 * A WAL record holds at most four pages; with a vector on two pages the
 * upper page makes five, so then the upper record is written first, in a
 * record of its own. A crash in between leaves the slot free with its
 * record rewritten (its lists are still lists) or a new record that no node
 * names (space, nothing else).
 */
static ShnswWriteState *
free_slot_upper(InsertState *is, const FreeSlot *fs, const NewNode *nn, ShnswRef **nbrs,
				const int *nnbrs, BlockNumber *ublk, OffsetNumber *uoff)
{
	ShnswRef   *unbrs[SHNSW_MAX_LEVEL + 1];
	int			unn[SHNSW_MAX_LEVEL + 1];
	ShnswWriteState *state;
	Page		upage;

	*ublk = InvalidBlockNumber;
	*uoff = InvalidOffsetNumber;
	if (nn->level == 0)
	{
		/* a level-0 node keeps the slot's record for the next one */
		if (fs->rloc.block != InvalidBlockNumber)
		{
			*ublk = fs->rloc.block;
			*uoff = fs->rloc.offset;
		}
		return shnsw_write_start(is->index);
	}
	for (int l = 1; l <= nn->level; l++)
	{
		unbrs[l] = palloc(sizeof(ShnswRef) * Max(nnbrs[l], 1));
		unn[l] = 0;
		for (int k = 0; k < nnbrs[l]; k++)
			if (nbrs[l][k] != fs->head)
				unbrs[l][unn[l]++] = nbrs[l][k];
	}
	*ublk = BufferGetBlockNumber(fs->ubuf);
	state = shnsw_write_start(is->index);
	upage = shnsw_write_buffer(state, fs->ubuf, 0);
	if (fs->inplace)
	{
		ShnswUpperHeader *u = (ShnswUpperHeader *)
			PageGetItem(upage, PageGetItemId(upage, fs->rloc.offset));

		/* its own layers; those above stay, empty (u->level unchanged) */
		u->ntids = 0;
		for (int l = 1; l <= u->level; l++)
		{
			int			cnt = l <= nn->level ? unn[l] : 0;

			shnsw_upper_counts(u)[l - 1] = cnt;
			if (cnt > 0)
				memcpy(shnsw_upper_neighbors(u, l, is->m), unbrs[l], sizeof(ShnswRef) * cnt);
		}
		*uoff = fs->rloc.offset;
	}
	else
		*uoff = insert_append_upper_record(is, upage, *ublk, fs->head, nn->level,
									shnsw_upper_size(nn->level, is->m), unbrs, unn);
	if (fs->nv == 2)
	{
		shnsw_write_finish(state);
		state = shnsw_write_start(is->index);
	}
	return state;
}

/*
 * write_free_slot writes the new node into free slot fs (its graph page,
 * vector page(s), for a node of level > 0 its upper page, and the metapage,
 * all locked exclusively by the caller) and pops it off the free list, in
 * one WAL record (two when the vector spans pages and there is an upper
 * record: free_slot_upper).
 */
static void
write_free_slot(InsertState *is, Buffer metabuf, const FreeSlot *fs, const NewNode *nn,
				ShnswRef **nbrs, const int *nnbrs)
{
	ShnswIndexInfo *info = is->info;
	ShnswWriteState *state;
	ShnswMetaPage meta;
	Page		gpage;
	int			first;
	BlockNumber ublk;
	OffsetNumber uoff;
	ShnswRef	own[2 * SHNSW_MAX_M];
	NewNode		mine = *nn;

	/*
	 * If a VACUUM freed this slot after our search saw its old node alive,
	 * that node is among the neighbours found, on any layer: a node never
	 * names itself (shnsw_check_node treats that as corruption).
	 */
	mine.nnbrs0 = 0;
	for (int k = 0; k < nn->nnbrs0; k++)
		if (nn->nbrs0[k] != fs->head)
			own[mine.nnbrs0++] = nn->nbrs0[k];
	mine.nbrs0 = own;

	state = free_slot_upper(is, fs, nn, nbrs, nnbrs, &ublk, &uoff);
	gpage = shnsw_write_buffer(state, fs->gbuf, 0);
	first = Min((int) VARSIZE(nn->value), (int) (SHNSW_PAGE_CAPACITY - fs->voff));
	memcpy(PageGetContents(shnsw_write_buffer(state, fs->vbuf[0], 0)) + fs->voff,
		   nn->value, first);
	if (fs->nv == 2)
		memcpy(PageGetContents(shnsw_write_buffer(state, fs->vbuf[1], 0)),
			   (char *) nn->value + first, (int) VARSIZE(nn->value) - first);
	meta = ShnswPageGetMeta(shnsw_write_buffer(state, metabuf, 0));
	insert_fill_node(is, shnsw_page_node(gpage, fs->slot, info->node_size), &mine, ublk, uoff,
			  fs->vblk, fs->voff);
	meta->free_head = fs->next;
	meta->free_count--;
	shnsw_meta_residual(meta, nn->residual);
	meta->deleted_count--;
	if (meta->entry == SHNSW_INVALID_REF || nn->level > meta->entry_level)
	{
		meta->entry = fs->head;
		meta->entry_level = nn->level;
	}
	shnsw_write_finish(state);
}

/*
 * retained_upper_level returns the level of the upper record that free slot
 * head kept from its last node (loc, read from the slot's header), or -1 if
 * it has none usable (a record of level 0 holds only heap TIDs). Called with no lock held; takes and releases a share
 * lock on the record's page. The record's page must be none of the pages
 * the caller locks with it (graph page gblk, vector page(s) from vblk).
 */
static int
retained_upper_level(InsertState *is, ShnswRef head, BlockNumber gblk, BlockNumber vblk, int nv,
					 const ShnswUpperLoc *loc)
{
	Buffer		buf;
	ShnswUpperHeader *u;
	int			level = -1;

	if (loc->offset == InvalidOffsetNumber || loc->block == InvalidBlockNumber ||
		loc->block == SHNSW_METAPAGE_BLKNO || loc->block == gblk || loc->block == vblk ||
		(nv == 2 && loc->block == vblk + 1))
		return -1;
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
 * free_head_node reads the head of the free list into *head (and, if
 * upper_blk is not NULL, the metapage's insert upper block), pins the
 * head's graph page into *gbuf and share-locks it, and returns the slot's
 * header; NULL (nothing pinned) if the list is empty. metabuf is pinned by
 * the caller and locked here only while it is read. A head that names
 * the metapage, a block beyond the relation or a slot beyond its page's
 * slot count is a corrupt free list: an error naming the block.
 */
static ShnswNodeHeader *
free_head_node(InsertState *is, Buffer metabuf, ShnswRef *head, Buffer *gbuf,
			   BlockNumber *upper_blk)
{
	ShnswIndexInfo *info = is->info;
	ShnswMetaPage meta;
	BlockNumber gblk;
	int			slot;

	LockBuffer(metabuf, BUFFER_LOCK_SHARE);
	meta = ShnswPageGetMeta(BufferGetPage(metabuf));
	*head = meta->free_head;
	if (upper_blk)
		*upper_blk = meta->insert_upper_blk;
	LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
	if (*head == SHNSW_INVALID_REF)
		return NULL;
	gblk = shnsw_ref_block(*head, info->slot_bits);
	slot = shnsw_ref_slot(*head, info->slot_bits);
	/* never the metapage, which the caller holds pinned and may lock later */
	shnsw_check_block(is->index, gblk, &is->nblocks, SHNSW_METAPAGE_BLKNO, "free list head");
	*gbuf = ReadBuffer(is->index, gblk);
	LockBuffer(*gbuf, BUFFER_LOCK_SHARE);
	shnsw_check_page(is->index, BufferGetPage(*gbuf), gblk, SHNSW_PAGE_GRAPH);
	if (slot >= shnsw_graph_nslots(is->index, BufferGetPage(*gbuf), gblk, info->node_size))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" has free list entry %u beyond the slots of block %u",
						RelationGetRelationName(is->index), *head, gblk)));
	return shnsw_page_node(BufferGetPage(*gbuf), slot, info->node_size);
}

/*
 * free_space_fits says whether the value, is->vlen bytes, fits the space of
 * the sparsevec stored at voff of vector page `page` (block vblk, locked):
 * its size, 4-aligned (such values have a size of their own, on one page).
 */
static bool
free_space_fits(InsertState *is, Page page, BlockNumber vblk, int voff)
{
	int			old = shnsw_sparse_stored_size(is->index, page, vblk, voff, is->info->vec_size);

	return is->vlen <= (int) TYPEALIGN(4, old);
}

/*
 * insert_free_slot_level returns the level of the upper record kept by the
 * slot at the head of the free list (0 if it has none), or -1 if the list
 * is empty, its head was taken meanwhile, or its space cannot hold the
 * sparsevec (which is then appended, at a level of its own). Takes and
 * releases share locks on the metapage, the slot's graph page, its vector
 * page (sparsevec) and the record's upper page, one at a time; a corrupt
 * head is an error (free_head_node, shnsw_check_node).
 */
int
insert_free_slot_level(InsertState *is, Buffer metabuf)
{
	ShnswRef	head;
	Buffer		gbuf;
	ShnswNodeHeader *h = free_head_node(is, metabuf, &head, &gbuf, NULL);
	ShnswIndexInfo *info = is->info;
	ShnswUpperLoc loc;
	bool		isfree;
	BlockNumber vblk;
	uint16		voff;

	if (h == NULL)
		return -1;
	isfree = (h->flags & SHNSW_NODE_FREE) != 0;
	if (isfree)
		shnsw_check_node(is->index, shnsw_ref_block(head, info->slot_bits),
						 shnsw_ref_slot(head, info->slot_bits), h, info->m, info->slot_bits,
						 info->vec_span, &is->nblocks);
	loc = shnsw_node_upper_loc(h);
	vblk = h->vec_block;
	voff = h->vec_offset;
	UnlockReleaseBuffer(gbuf);
	if (!isfree)
		return -1;
	if (info->vec_span != info->vec_size)
	{
		/* a sparsevec the space cannot hold is appended: its own level */
		Buffer		vbuf = ReadBuffer(is->index, vblk);
		bool		fits;

		LockBuffer(vbuf, BUFFER_LOCK_SHARE);
		shnsw_check_page(is->index, BufferGetPage(vbuf), vblk, SHNSW_PAGE_VECTOR);
		fits = free_space_fits(is, BufferGetPage(vbuf), vblk, voff);
		UnlockReleaseBuffer(vbuf);
		if (!fits)
			return -1;
	}
	return Max(0, retained_upper_level(is, head, shnsw_ref_block(head, is->info->slot_bits),
									   InvalidBlockNumber, 1, &loc));
}

/* Release what free_slot_pin pinned (the graph page's pin included). */
static void
free_slot_release(FreeSlot *fs)
{
	for (int k = 0; k < fs->nv; k++)
		ReleaseBuffer(fs->vbuf[k]);
	if (BufferIsValid(fs->ubuf))
		ReleaseBuffer(fs->ubuf);
	ReleaseBuffer(fs->gbuf);
}

/*
 * free_slot_pin pins, with no lock held, the vector page(s) of slot fs
 * (whose vblk, voff and rloc the caller read) and the upper page a node of
 * the given level will use: the record the slot kept if it is high enough
 * (rewritten in place), else the insert upper page ublk. Returns false,
 * with everything released, if there is no insert upper page yet (the
 * caller appends instead).
 */
static bool
free_slot_pin(InsertState *is, FreeSlot *fs, int level, BlockNumber ublk)
{
	int			rlevel;

	fs->nv = fs->voff + is->info->vec_span > SHNSW_PAGE_CAPACITY ? 2 : 1;
	fs->ubuf = InvalidBuffer;
	fs->inplace = false;
	for (int k = 0; k < fs->nv; k++)
	{
		/* a vector "on" the graph page would be locked twice below */
		if (fs->vblk + k == fs->gblk)
			shnsw_corrupt(is->index, fs->gblk, "vector block", fs->vblk + k);
		fs->vbuf[k] = ReadBuffer(is->index, fs->vblk + k);
	}
	/* the upper record the slot kept, if any: its level (-1: none) */
	rlevel = retained_upper_level(is, fs->head, fs->gblk, fs->vblk, fs->nv, &fs->rloc);
	if (rlevel < 0)
		fs->rloc.block = InvalidBlockNumber;
	if (level > 0 && rlevel >= level)
	{
		fs->inplace = true;
		fs->ublk = fs->rloc.block;
		fs->ubuf = ReadBuffer(is->index, fs->ublk);
	}
	else if (level > 0)
	{
		if (ublk == InvalidBlockNumber)
		{
			free_slot_release(fs);
			return false;
		}
		/* locked with the others: another page, within the relation */
		shnsw_check_block(is->index, ublk, &is->nblocks, SHNSW_METAPAGE_BLKNO,
						  "insert upper block");
		if (ublk == fs->gblk || ublk == fs->vblk || (fs->nv == 2 && ublk == fs->vblk + 1))
			shnsw_corrupt(is->index, SHNSW_METAPAGE_BLKNO, "insert upper block", ublk);
		fs->ublk = ublk;
		fs->ubuf = ReadBuffer(is->index, ublk);
	}
	return true;
}

/* Unlock the pages free_slot_lock locked, the metapage excepted. */
static void
free_slot_unlock(FreeSlot *fs)
{
	if (BufferIsValid(fs->ubuf))
		LockBuffer(fs->ubuf, BUFFER_LOCK_UNLOCK);
	for (int k = 0; k < fs->nv; k++)
		LockBuffer(fs->vbuf[k], BUFFER_LOCK_UNLOCK);
	LockBuffer(fs->gbuf, BUFFER_LOCK_UNLOCK);
}

/* Outcomes of free_slot_lock. */
typedef enum FreeSlotLock
{
	FREE_SLOT_LOCKED,			/* every page locked, the slot is ours */
	FREE_SLOT_RETRY,			/* the head changed: look again */
	FREE_SLOT_APPEND			/* no room for the record: append instead */
} FreeSlotLock;

/*
 * free_slot_lock locks the pages free_slot_pin pinned, in the insert order
 * (graph, vector, upper, metapage), all exclusively, and checks the slot is
 * still free, unchanged and the list's head. On anything but
 * FREE_SLOT_LOCKED everything is unlocked and released.
 */
static FreeSlotLock
free_slot_lock(InsertState *is, Buffer metabuf, FreeSlot *fs, int level)
{
	ShnswIndexInfo *info = is->info;
	ShnswNodeHeader *h;

	LockBuffer(fs->gbuf, BUFFER_LOCK_EXCLUSIVE);
	h = shnsw_page_node(BufferGetPage(fs->gbuf), fs->slot, info->node_size);
	if (!(h->flags & SHNSW_NODE_FREE) || h->vec_block != fs->vblk || h->vec_offset != fs->voff)
	{
		LockBuffer(fs->gbuf, BUFFER_LOCK_UNLOCK);
		free_slot_release(fs);
		return FREE_SLOT_RETRY;
	}
	fs->next = shnsw_node_neighbors(h)[0];
	for (int k = 0; k < fs->nv; k++)
	{
		LockBuffer(fs->vbuf[k], BUFFER_LOCK_EXCLUSIVE);
		shnsw_check_page(is->index, BufferGetPage(fs->vbuf[k]), fs->vblk + k, SHNSW_PAGE_VECTOR);
	}
	if (BufferIsValid(fs->ubuf))
	{
		LockBuffer(fs->ubuf, BUFFER_LOCK_EXCLUSIVE);
		shnsw_check_page(is->index, BufferGetPage(fs->ubuf), fs->ublk, SHNSW_PAGE_UPPER);
		if (fs->inplace)
		{
			ShnswUpperHeader *u = shnsw_upper_record(is->index, BufferGetPage(fs->ubuf),
													 fs->ublk, fs->rloc.offset, is->m);

			/* only the insert that pops the slot changes its record */
			if (u == NULL || u->node != fs->head || u->level < level)
				shnsw_corrupt(is->index, fs->ublk, "upper record of a free slot", fs->rloc.offset);
		}
		else if (PageGetFreeSpace(BufferGetPage(fs->ubuf)) <
				 MAXALIGN(shnsw_upper_size(level, is->m)))
		{
			/* the upper page is full: append (it starts a new one) */
			free_slot_unlock(fs);
			free_slot_release(fs);
			return FREE_SLOT_APPEND;
		}
	}
	if (info->vec_span != info->vec_size &&
		!free_space_fits(is, BufferGetPage(fs->vbuf[0]), fs->vblk, fs->voff))
	{
		/* a sparsevec larger than the space: at the stream's end instead */
		free_slot_unlock(fs);
		free_slot_release(fs);
		return FREE_SLOT_APPEND;
	}
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	if (ShnswPageGetMeta(BufferGetPage(metabuf))->free_head != fs->head)
	{
		/* VACUUM pushed more slots meanwhile: pop the new head instead */
		LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
		free_slot_unlock(fs);
		free_slot_release(fs);
		return FREE_SLOT_RETRY;
	}
	return FREE_SLOT_LOCKED;
}

/*
 * insert_place_in_free_slot puts the node into the slot at the head of the free
 * list (VACUUM's), reusing that slot's exact-vector space, which may span
 * two vector pages, and its upper record if it is high enough. Returns the
 * node's reference, or SHNSW_INVALID_REF if there is no free slot (or it
 * kept losing races for one, or its record needs a new upper page).
 *
 * Locks, in the insert order: the slot's graph page, its vector page(s),
 * the upper page, the metapage, all exclusively, for the WAL record that
 * writes the node and vector and pops the free list (free_slot_lock). The
 * pages are read (pinned) before any of them is locked, with no lock held
 * (free_slot_pin). metabuf is pinned by the caller.
 */
ShnswRef
insert_place_in_free_slot(InsertState *is, Buffer metabuf, const NewNode *nn, ShnswRef **nbrs,
				   const int *nnbrs)
{
	ShnswIndexInfo *info = is->info;

	for (int attempt = 0; attempt < 4; attempt++)
	{
		FreeSlot	fs;
		BlockNumber ublk;
		ShnswNodeHeader *h = free_head_node(is, metabuf, &fs.head, &fs.gbuf, &ublk);
		FreeSlotLock r;

		if (h == NULL)
			return SHNSW_INVALID_REF;
		fs.gblk = shnsw_ref_block(fs.head, info->slot_bits);
		fs.slot = shnsw_ref_slot(fs.head, info->slot_bits);
		if (!(h->flags & SHNSW_NODE_FREE))
		{
			/* another insert took it after we read the head: look again */
			UnlockReleaseBuffer(fs.gbuf);
			continue;
		}
		shnsw_check_node(is->index, fs.gblk, fs.slot, h, info->m, info->slot_bits,
						 info->vec_span, &is->nblocks);
		fs.vblk = h->vec_block;
		fs.voff = h->vec_offset;
		fs.rloc = shnsw_node_upper_loc(h);
		LockBuffer(fs.gbuf, BUFFER_LOCK_UNLOCK);
		if (!free_slot_pin(is, &fs, nn->level, ublk))
			return SHNSW_INVALID_REF;

		/* now lock, in order, and check that the slot is still ours to take */
		r = free_slot_lock(is, metabuf, &fs, nn->level);
		if (r == FREE_SLOT_APPEND)
			return SHNSW_INVALID_REF;
		if (r == FREE_SLOT_RETRY)
			continue;
		write_free_slot(is, metabuf, &fs, nn, nbrs, nnbrs);
		LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
		free_slot_unlock(&fs);
		free_slot_release(&fs);
		return fs.head;
	}
	return SHNSW_INVALID_REF;
}
