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
 * shnsw_find_neighbors (neighbors_find.c), insert_place_in_free_slot
 * (insert_place.c) or append_node, link_back, insert_publish.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "buildgraph.h"
#include "cache.h"
#include "codebound.h"
#include "format.h"
#include "insert.h"
#include "insert_int.h"
#include "kernels.h"
#include "meta.h"
#include "neighbors_find.h"
#include "neighbors_update.h"
#include "options.h"
#include "pageaccess.h"
#include "pages.h"
#include "pagewrite.h"
#include "quantizer.h"
#include "stats.h"
#include "vector.h"

/*
 * Should the quantizer be retrained (up to SHNSW_RETRAIN_MAX_ROWS rows)?
 * When the index has doubled since it was trained; and, when the insert
 * at hand lay far outside the trained range (far_out: its code is off by
 * more than the largest clamp class holds, about 6.7 times the codes'
 * worst case inside the range), once an eighth more
 * nodes than it trained on were placed since. Values far outside the range
 * are squeezed onto its edge, where navigation cannot tell them apart:
 * 300 such rows among 2,000 (4-d, six ranges wide) left searches for them
 * returning a tenth of their full scans and half of their 10 nearest rows
 * until the next doubling (src/README, Quantizer maintenance). Retraining
 * every eighth is a bounded share of the insert work. A bit index's
 * identity quantizer is never retrained: its codes are exact.
 */
static bool
meta_retrain_due(ShnswMetaPage meta, bool far_out)
{
	uint64		trained = Max(meta->quant_rows, 1);

	if (meta->quant_rows >= SHNSW_RETRAIN_MAX_ROWS || meta->elemtype == SHNSW_ELEM_BIT)
		return false;
	if (meta->node_count >= 2 * trained)
		return true;
	return far_out && meta->node_count >= trained + Max(trained / 8, SHNSW_RETRAIN_MIN_STEP);
}

/* meta_retrain_due, read under a share lock on the metapage. */
static bool
retrain_due(Relation index, bool far_out)
{
	Buffer		buf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	bool		due;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	due = meta_retrain_due(ShnswPageGetMeta(BufferGetPage(buf)), far_out);
	UnlockReleaseBuffer(buf);
	return due;
}

/*
 * findable_ef: the width of the search that must find an inserted node (and
 * a node an insert's back-link pushed out of a list), shnsw_make_findable:
 * a scan at the default streamhnsw.ef_search, or ef_construction if that
 * is narrower. Checking at ef_construction (64) left rows that the next
 * scan at the default 40 missed: one of 150 rows inserted into another
 * cluster's region (test_shared_cache, the next search finds every inserted
 * row), found at ef_search 64 and not at 40.
 */
static inline int
findable_ef(int efc)
{
	return Min(efc, SHNSW_DEFAULT_EF_SEARCH);
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
		shnsw_make_findable(&is->lk, dropped[k], findable_ef(efc), true, again, &nagain);
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
		ShnswWriteState *state;

		shnsw_train_from_first(index, is->info, nav);
		meta = shnsw_write_meta(index, &metabuf, &state);
		meta->quant_trained = true;
		meta->quant_rows = 1;
		shnsw_write_finish(state);
		UnlockReleaseBuffer(metabuf);
		is->info->quant_trained = true;
	}
}

/*
 * The pages an appended node goes to: graph, vector and (level > 0) upper,
 * and vbuf2, the next page of the vector run when the vector continues
 * there (span).
 */
typedef struct AppendPages
{
	Buffer		gbuf,
				vbuf,
				vbuf2,
				ubuf;
	bool		gnew,
				vnew,
				unew;
	bool		span;			/* the vector continues on vbuf2 */
} AppendPages;

/* Largest run of vector pages an insert reserves at once. */
#define SHNSW_VEC_RUN_MAX	32

/*
 * The heavyweight lock that makes one insert at a time reserve a run: a
 * page lock on this block number (no page is locked by it: block 1 is the
 * first quantizer page, which no insert locks this way).
 */
#define SHNSW_VEC_RUN_LOCK	1

/* Bytes of vector data on vector page vp (block blk), checked. */
static int
vec_page_used(InsertState *is, Page vp, BlockNumber blk)
{
	int			used;

	shnsw_check_page(is->index, vp, blk, SHNSW_PAGE_VECTOR);
	used = (int) ((PageHeader) vp)->pd_lower - (int) MAXALIGN(SizeOfPageHeaderData);
	if (used < 0 || used > (int) SHNSW_PAGE_CAPACITY || used % 4 != 0)
		shnsw_corrupt(is->index, blk, "end of vector data", ((PageHeader) vp)->pd_lower);
	return used;
}

/*
 * vec_next_usable says whether block blk, locked exclusively by the caller,
 * is an empty vector page: the next page of the run. Anything else (the
 * metapage's run outlived a crash or a promotion that lost its pages and
 * the block was used since) ends the run.
 */
static bool
vec_next_usable(Page page)
{
	return !PageIsNew(page) &&
		PageGetSpecialSize(page) == MAXALIGN(sizeof(ShnswPageOpaqueData)) &&
		ShnswPageGetOpaque(page)->magic == SHNSW_MAGIC &&
		ShnswPageGetOpaque(page)->page_type == SHNSW_PAGE_VECTOR &&
		((PageHeader) page)->pd_lower == MAXALIGN(SizeOfPageHeaderData);
}

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

/* The metapage's insert places, read under a share lock. */
typedef struct InsertPlaces
{
	BlockNumber gblk,
				vblk,
				vend,			/* last block of the vector run, or invalid */
				ublk;
	bool		runs;			/* SHNSW_META_VECRUN */
} InsertPlaces;

static void
read_places(InsertState *is, Buffer metabuf, InsertPlaces *pl)
{
	ShnswMetaPage meta;

	LockBuffer(metabuf, BUFFER_LOCK_SHARE);
	meta = ShnswPageGetMeta(BufferGetPage(metabuf));
	pl->gblk = meta->insert_graph_blk;
	pl->vblk = meta->insert_vec_blk;
	pl->ublk = meta->insert_upper_blk;
	pl->runs = (meta->flags & SHNSW_META_VECRUN) != 0;
	pl->vend = pl->runs ? meta->insert_vec_end : InvalidBlockNumber;
	LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
	append_check_places(is, pl->gblk, pl->vblk, pl->ublk);
}

/*
 * vec_reserve makes the metapage name a vector page other than full (the
 * page an insert found with no room and no next page in its run): the one
 * another insert reserved meanwhile, or a new run of consecutive pages it
 * extends the index by, makes empty vector pages (WAL-logged, so that a
 * standby and crash recovery have them too) and names in the metapage (a
 * record of its own). One insert at a time does this (SHNSW_VEC_RUN_LOCK),
 * so that two finding the same page full do not both reserve a run (two
 * sessions inserting 4,000 rows of 768 dimensions left 85 empty pages of
 * runs no metapage named). Called with no buffer lock held; *pl is read
 * again.
 *
 * A run's waste is the pages it has not filled yet when inserts stop (at
 * most all but one of r pages) and, at the end of each run, half a vector
 * on average where the next one did not fit whole (the next run is not the
 * next block): r / P + (stride / 2) / (r * capacity) of an index of P
 * pages, least at r = sqrt(P * stride / (2 * capacity)), which this takes
 * (1 to SHNSW_VEC_RUN_MAX pages): 1 for pgvector's 3-dimensional
 * delete-all, VACUUM, insert-again scenario (231 pages, 1.02x allowed;
 * runs of 7 grew it 9 pages), 10 for 1,200 rows of 768 dimensions (600
 * pages), 32 for 100,000 of 384. A whole vector on each page lost 25 % at
 * 768 dimensions. A crash before the metapage names the run leaves empty
 * vector pages no node uses (space, nothing else).
 */
static void
vec_reserve(InsertState *is, Buffer metabuf, BlockNumber full, InsertPlaces *pl)
{
	Relation	index = is->index;
	Buffer		bufs[SHNSW_VEC_RUN_MAX];
	double		stride = is->vlen;
	uint32		want,
				got = 0;
	BlockNumber first;
	ShnswWriteState *state;
	ShnswMetaPage meta;

	LockPage(index, SHNSW_VEC_RUN_LOCK, ExclusiveLock);
	read_places(is, metabuf, pl);
	if (pl->vblk != full)
	{
		UnlockPage(index, SHNSW_VEC_RUN_LOCK, ExclusiveLock);
		return;
	}
	want = (uint32) Min(SHNSW_VEC_RUN_MAX,
						Max(1.0, rint(sqrt(RelationGetNumberOfBlocks(index) * stride /
										   (2.0 * SHNSW_PAGE_CAPACITY)))));
	first = ExtendBufferedRelBy(BMR_REL(index), MAIN_FORKNUM, NULL, 0, want, bufs, &got);
	insert_check_nameable(is, first + got - 1);
	for (uint32 k = 0; k < got; k += MAX_GENERIC_XLOG_PAGES)
	{
		uint32		n = Min(got - k, MAX_GENERIC_XLOG_PAGES);

		state = shnsw_write_start(index);
		for (uint32 j = k; j < k + n; j++)
		{
			LockBuffer(bufs[j], BUFFER_LOCK_EXCLUSIVE);
			shnsw_init_page(shnsw_write_buffer(state, bufs[j], GENERIC_XLOG_FULL_IMAGE),
							SHNSW_PAGE_VECTOR);
		}
		shnsw_write_finish(state);
		for (uint32 j = k; j < k + n; j++)
			UnlockReleaseBuffer(bufs[j]);
	}
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	state = shnsw_write_start(index);
	meta = ShnswPageGetMeta(shnsw_write_buffer(state, metabuf, 0));
	meta->insert_vec_blk = first;
	meta->insert_vec_end = first + got - 1;
	shnsw_write_finish(state);
	LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
	UnlockPage(index, SHNSW_VEC_RUN_LOCK, ExclusiveLock);
	pl->vblk = first;
	pl->vend = first + got - 1;
}

/*
 * vec_pin pins, with no lock held, the vector page the metapage names (a
 * new run, or without runs a new page, if it names none) and the run's
 * next page, which the vector continues on when it does not fit whole: a
 * block after the page, in the run, in the relation, and none of the other
 * pages the insert locks (else the run is not used).
 */
static void
vec_pin(InsertState *is, Buffer metabuf, InsertPlaces *pl, AppendPages *p)
{
	BlockNumber next;

	if (pl->vblk == InvalidBlockNumber && pl->runs)
		vec_reserve(is, metabuf, InvalidBlockNumber, pl);
	next = pl->vblk + 1;
	p->vbuf2 = InvalidBuffer;
	p->vbuf = insert_pin_or_extend(is, pl->vblk, &p->vnew);
	if (!p->vnew && pl->vend != InvalidBlockNumber && next <= pl->vend &&
		next != SHNSW_METAPAGE_BLKNO && next != pl->gblk && next != pl->ublk &&
		shnsw_block_exists(is->index, next, &is->nblocks))
		p->vbuf2 = ReadBuffer(is->index, next);
}

/*
 * vec_room locks the vector page (the graph page is locked) and says
 * whether the vector can go there: whole, or begun there and continued on
 * the run's next page (p->span; both locked), or whole on that next page
 * when this one is full, or for a sparsevec (which never crosses a page's
 * end: shnsw_vec_span) when it does not fit whole (it becomes p->vbuf). If
 * not, no vector page is locked or pinned any more.
 */
static bool
vec_room(InsertState *is, AppendPages *p)
{
	int			stride = is->vlen;
	bool		may_span = is->info->vec_span == is->info->vec_size;
	int			used;

	LockBuffer(p->vbuf, BUFFER_LOCK_EXCLUSIVE);
	if (p->vnew)
		return true;
	used = vec_page_used(is, BufferGetPage(p->vbuf), BufferGetBlockNumber(p->vbuf));
	if (used + stride <= (int) SHNSW_PAGE_CAPACITY)
		return true;
	if (BufferIsValid(p->vbuf2))
	{
		LockBuffer(p->vbuf2, BUFFER_LOCK_EXCLUSIVE);
		if (vec_next_usable(BufferGetPage(p->vbuf2)))
		{
			if (used < (int) SHNSW_PAGE_CAPACITY && may_span)
				p->span = true;
			else
			{
				UnlockReleaseBuffer(p->vbuf);
				p->vbuf = p->vbuf2;
				p->vbuf2 = InvalidBuffer;
			}
			return true;
		}
		UnlockReleaseBuffer(p->vbuf2);
		p->vbuf2 = InvalidBuffer;
	}
	UnlockReleaseBuffer(p->vbuf);
	p->vbuf = InvalidBuffer;
	return false;
}

/*
 * append_lock_pages pins and exclusive-locks a graph page with a free slot,
 * vector room for a whole vector (one page, or the end of one and the next
 * page of its run) and (level > 0) an upper page with room for usize bytes,
 * starting from the metapage's insert blocks. They are pinned first (read,
 * or extended) with no lock held, then locked in the insert order; a page
 * found full is let go, with the locks taken so far, and replaced by a new
 * page (which has room: this ends). A full vector page is replaced by the
 * page the metapage names once vec_reserve has made it name another.
 */
static void
append_lock_pages(InsertState *is, Buffer metabuf, int level, Size usize, AppendPages *p)
{
	Relation	index = is->index;
	ShnswIndexInfo *info = is->info;
	InsertPlaces pl;

	read_places(is, metabuf, &pl);
	p->ubuf = InvalidBuffer;
	p->unew = false;
	p->span = false;
	p->gbuf = insert_pin_or_extend(is, pl.gblk, &p->gnew);
	vec_pin(is, metabuf, &pl, p);
	if (level > 0)
		p->ubuf = insert_pin_or_extend(is, pl.ublk, &p->unew);
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
				p->gbuf = insert_pin_or_extend(is, InvalidBlockNumber, &p->gnew);
				continue;
			}
		}
		if (!vec_room(is, p))
		{
			BlockNumber full = pl.vblk;

			LockBuffer(p->gbuf, BUFFER_LOCK_UNLOCK);
			if (pl.runs)
			{
				vec_reserve(is, metabuf, full, &pl);
				vec_pin(is, metabuf, &pl, p);
			}
			else
				p->vbuf = insert_pin_or_extend(is, InvalidBlockNumber, &p->vnew);
			continue;
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
					if (p->span)
						LockBuffer(p->vbuf2, BUFFER_LOCK_UNLOCK);
					p->span = false;
					LockBuffer(p->vbuf, BUFFER_LOCK_UNLOCK);
					LockBuffer(p->gbuf, BUFFER_LOCK_UNLOCK);
					p->ubuf = insert_pin_or_extend(is, InvalidBlockNumber, &p->unew);
					continue;
				}
			}
		}
		break;
	}
	if (BufferIsValid(p->vbuf2) && !p->span)
	{
		ReleaseBuffer(p->vbuf2);
		p->vbuf2 = InvalidBuffer;
	}
}

/*
 * append_node puts the node at the end: a new slot on the insert graph
 * page, its vector on the insert vector page (continued on the next page of
 * the run when it does not fit whole), its upper record on the insert upper
 * page (new pages where those are full), and updates the metapage, in one
 * WAL record. A WAL record holds at most four pages: a node of level > 0
 * whose vector spans two has its upper record written first, in a record
 * of its own (a crash in between leaves a record no node names: space,
 * nothing else). metabuf is pinned by the caller, not locked; holds no
 * lock on return. Returns the node's reference.
 */
static ShnswRef
append_node(InsertState *is, Buffer metabuf, const NewNode *nn, ShnswRef **nbrs,
			const int *nnbrs)
{
	Relation	index = is->index;
	ShnswIndexInfo *info = is->info;
	int			level = nn->level;
	int			stride = is->vlen;
	int			size = VARSIZE(nn->value);
	Size		usize = level > 0 ? shnsw_upper_size(level, is->m) : 0;
	ShnswWriteState *state;
	AppendPages p;
	Page		gpage,
				vpage,
				vpage2 = NULL,
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
	slot = p.gnew ? 0 : ShnswPageGetOpaque(BufferGetPage(p.gbuf))->nslots;
	newref = shnsw_make_ref(gblk, slot, info->slot_bits);

	if (level > 0 && p.span)
	{
		state = shnsw_write_start(index);
		upage = shnsw_write_buffer(state, p.ubuf, p.unew ? GENERIC_XLOG_FULL_IMAGE : 0);
		if (p.unew)
			shnsw_init_page(upage, SHNSW_PAGE_UPPER);
		uoff = insert_append_upper_record(is, upage, ublk, newref, level, usize, nbrs, nnbrs);
		shnsw_write_finish(state);
	}

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	state = shnsw_write_start(index);
	gpage = shnsw_write_buffer(state, p.gbuf, p.gnew ? GENERIC_XLOG_FULL_IMAGE : 0);
	vpage = shnsw_write_buffer(state, p.vbuf, p.vnew ? GENERIC_XLOG_FULL_IMAGE : 0);
	if (p.span)
		vpage2 = shnsw_write_buffer(state, p.vbuf2, 0);
	else if (level > 0)
		upage = shnsw_write_buffer(state, p.ubuf, p.unew ? GENERIC_XLOG_FULL_IMAGE : 0);
	meta = ShnswPageGetMeta(shnsw_write_buffer(state, metabuf, 0));
	if (p.gnew)
		shnsw_init_page(gpage, SHNSW_PAGE_GRAPH);
	if (p.vnew)
		shnsw_init_page(vpage, SHNSW_PAGE_VECTOR);
	if (p.unew && !p.span)
		shnsw_init_page(upage, SHNSW_PAGE_UPPER);
	shnsw_check_page(index, gpage, gblk, SHNSW_PAGE_GRAPH);
	shnsw_check_page(index, vpage, vblk, SHNSW_PAGE_VECTOR);
	if (ShnswPageGetOpaque(gpage)->nslots != slot)
		shnsw_corrupt(index, gblk, "slot count", ShnswPageGetOpaque(gpage)->nslots);

	/* the exact vector, on one page or begun on this one and ended on the next */
	voff = ((PageHeader) vpage)->pd_lower - MAXALIGN(SizeOfPageHeaderData);
	if (p.span)
	{
		int			first = (int) (SHNSW_PAGE_CAPACITY - voff);

		memcpy(PageGetContents(vpage) + voff, nn->value, first);
		((PageHeader) vpage)->pd_lower += first;
		MemSet(PageGetContents(vpage2), 0, stride - first);
		memcpy(PageGetContents(vpage2), (char *) nn->value + first, size - first);
		((PageHeader) vpage2)->pd_lower += stride - first;
	}
	else
	{
		MemSet(PageGetContents(vpage) + voff, 0, stride);
		memcpy(PageGetContents(vpage) + voff, nn->value, size);
		((PageHeader) vpage)->pd_lower += stride;
	}

	/* the node, and its upper record */
	if (level > 0 && !p.span)
		uoff = insert_append_upper_record(is, upage, ublk, newref, level, usize, nbrs, nnbrs);
	insert_fill_node(is, shnsw_page_node(gpage, slot, info->node_size), nn, ublk, uoff, vblk, voff);
	ShnswPageGetOpaque(gpage)->nslots = slot + 1;
	((PageHeader) gpage)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + (slot + 1) * info->node_size;

	meta->insert_graph_blk = gblk;
	meta->insert_vec_blk = p.span ? BufferGetBlockNumber(p.vbuf2) : vblk;
	if (level > 0)
		meta->insert_upper_blk = ublk;
	meta->node_count++;
	shnsw_meta_residual(meta, nn->residual);
	meta->rng_state = meta->rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	if (meta->entry == SHNSW_INVALID_REF || level > meta->entry_level)
	{
		meta->entry = newref;
		meta->entry_level = level;
	}
	shnsw_write_finish(state);
	LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
	UnlockReleaseBuffer(p.gbuf);
	UnlockReleaseBuffer(p.vbuf);
	if (p.span)
		UnlockReleaseBuffer(p.vbuf2);
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
			continue;			/* the slot's old node (see insert_place_in_free_slot) */
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
	if (shnsw_make_findable(&is->lk, newref, findable_ef(efc), true, dropped, &ndropped) &&
		ndropped > 0)
		rehome(is, newref, dropped, ndropped, efc);
}

/*
 * insert_publish says the graph changed (cache generation); returns true if
 * the quantizer should be retrained (meta_retrain_due; far_out: the value
 * inserted lay far outside the trained range).
 */
static bool
insert_publish(Relation index, bool far_out)
{
	ShnswWriteState *state;
	Buffer		metabuf;
	ShnswMetaPage meta = shnsw_write_meta(index, &metabuf, &state);
	bool		retrain;

	meta->cache_generation++;
	retrain = meta_retrain_due(meta, far_out);
	shnsw_write_finish(state);
	UnlockReleaseBuffer(metabuf);
	return retrain;
}

/* A node an insert adds a row to, and the pages that takes. */
typedef struct DupNode
{
	ShnswRef	ref;
	BlockNumber blk;
	int			slot;
	Buffer		gbuf;
	Buffer		vbuf[2];
	int			nv;
	BlockNumber vblk;
	uint16		voff;
	ShnswUpperLoc uloc;			/* the node's upper record (block invalid:
								 * none yet, one is added on ubuf) */
	Buffer		ubuf;
	bool		unew;			/* ubuf is a new page */
} DupNode;

/*
 * dup_same_value compares value (its VARSIZE bytes, header included) with
 * the exact vector of node d under share locks on its vector page(s), one
 * at a time; the caller holds the graph page's exclusive lock, which keeps
 * the vector where it is.
 */
static bool
dup_same_value(InsertState *is, const DupNode *d, const struct varlena *value)
{
	const char *v = (const char *) value;
	int			vec_size = VARSIZE(value);
	int			at = 0;
	int			off = d->voff;
	bool		same = true;

	for (int k = 0; k < d->nv && same; k++)
	{
		Page		vpage;
		int			chunk = Min(vec_size - at, (int) SHNSW_PAGE_CAPACITY - off);

		LockBuffer(d->vbuf[k], BUFFER_LOCK_SHARE);
		vpage = BufferGetPage(d->vbuf[k]);
		shnsw_check_page(is->index, vpage, d->vblk + k, SHNSW_PAGE_VECTOR);
		if (chunk <= 0 ||
			off + chunk > ((PageHeader) vpage)->pd_lower - MAXALIGN(SizeOfPageHeaderData))
			same = false;
		else
			same = memcmp(PageGetContents(vpage) + off, v + at, chunk) == 0;
		LockBuffer(d->vbuf[k], BUFFER_LOCK_UNLOCK);
		at += chunk;
		off = 0;
	}
	return same && at == vec_size;
}

/*
 * dup_pin_upper pins, with no lock held, the page of node d's upper record,
 * or for a node without one the insert upper page (a new page if there is
 * none or if new_page is set).
 */
static void
dup_pin_upper(InsertState *is, DupNode *d, bool new_page)
{
	BlockNumber ublk = d->uloc.block;

	if (ublk == InvalidBlockNumber && !new_page)
	{
		Buffer		metabuf = ReadBuffer(is->index, SHNSW_METAPAGE_BLKNO);

		LockBuffer(metabuf, BUFFER_LOCK_SHARE);
		ublk = ShnswPageGetMeta(BufferGetPage(metabuf))->insert_upper_blk;
		UnlockReleaseBuffer(metabuf);
	}
	if (ublk != InvalidBlockNumber)
	{
		/* locked with the graph page: another page, within the relation */
		shnsw_check_block(is->index, ublk, &is->nblocks, d->blk, "upper record block");
		if (ublk == d->blk)
			shnsw_corrupt(is->index, d->blk, "upper record block", ublk);
	}
	d->ubuf = insert_pin_or_extend(is, ublk, &d->unew);
}

/*
 * dup_write adds heap_tid to node d (its graph page and upper page locked
 * exclusively by the caller, and the metapage, metabuf, if the upper page
 * is new), in one WAL record: the node's rows, all listed in its upper
 * record (a level-0 record added for a node that had none).
 */
static void
dup_write(InsertState *is, DupNode *d, Buffer metabuf, ItemPointer heap_tid)
{
	ShnswWriteState *state = shnsw_write_start(is->index);
	ShnswNodeHeader *h;
	ShnswUpperHeader *u;
	Page		upage;
	BlockNumber ublk = BufferGetBlockNumber(d->ubuf);
	ItemPointerData tids[SHNSW_NODE_TIDS];
	int			n = 0;

	h = shnsw_page_node(shnsw_write_buffer(state, d->gbuf, 0), d->slot,
						is->info->node_size);
	upage = shnsw_write_buffer(state, d->ubuf, d->unew ? GENERIC_XLOG_FULL_IMAGE : 0);
	if (d->unew)
	{
		shnsw_init_page(upage, SHNSW_PAGE_UPPER);
		ShnswPageGetMeta(shnsw_write_buffer(state, metabuf, 0))->insert_upper_blk = ublk;
	}
	if (d->uloc.block == InvalidBlockNumber)
	{
		d->uloc.block = ublk;
		d->uloc.offset = insert_append_upper_record(is, upage, ublk, d->ref, 0,
											 shnsw_upper_size(0, is->m), NULL, NULL);
		h->upper_blk_hi = (uint16) (ublk >> 16);
		h->upper_blk_lo = (uint16) (ublk & 0xFFFF);
		h->upper_off = d->uloc.offset;
	}
	u = shnsw_upper_record(is->index, upage, ublk, d->uloc.offset, is->m);
	if (u == NULL || u->node != d->ref)
		shnsw_corrupt(is->index, ublk, "upper record of a node", d->uloc.offset);
	if (h->extra_tids > 0)
	{
		n = shnsw_upper_node_tids(is->index, ublk, u, is->m, d->ref, tids);
		if (n != h->extra_tids + 1)
			shnsw_corrupt(is->index, ublk, "heap tuple count of an upper record", n);
	}
	else
		shnsw_node_first_tid(is->index, d->blk, h, &tids[n++]);
	tids[n++] = *heap_tid;
	shnsw_node_set_tids(h, u, is->m, tids, n);
	shnsw_write_finish(state);
}

/*
 * dup_read reads node d's header under a share lock and pins its vector
 * page(s) with no lock held; returns false (nothing pinned but the graph
 * page, released) unless the node is live with room for another row.
 */
static bool
dup_read(InsertState *is, DupNode *d, const struct varlena *value)
{
	int			vec_span = is->info->vec_span;
	Page		page;
	ShnswNodeHeader *h;

	if (VARSIZE_ANY(value) > (Size) is->info->vec_size)
		return false;
	d->gbuf = ReadBuffer(is->index, d->blk);
	LockBuffer(d->gbuf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(d->gbuf);
	shnsw_check_page(is->index, page, d->blk, SHNSW_PAGE_GRAPH);
	if (d->slot >= shnsw_graph_nslots(is->index, page, d->blk, is->info->node_size))
	{
		UnlockReleaseBuffer(d->gbuf);
		return false;
	}
	h = shnsw_page_node(page, d->slot, is->info->node_size);
	shnsw_check_node(is->index, d->blk, d->slot, h, is->m, is->info->slot_bits, vec_span,
					 &is->nblocks);
	if ((h->flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)) ||
		h->extra_tids >= SHNSW_NODE_TIDS - 1)
	{
		UnlockReleaseBuffer(d->gbuf);
		return false;
	}
	d->vblk = h->vec_block;
	d->voff = h->vec_offset;
	d->uloc = shnsw_node_upper_loc(h);
	if (d->uloc.offset == InvalidOffsetNumber)
		d->uloc.block = InvalidBlockNumber;
	LockBuffer(d->gbuf, BUFFER_LOCK_UNLOCK);

	d->nv = d->voff + vec_span > (int) SHNSW_PAGE_CAPACITY ? 2 : 1;
	for (int k = 0; k < d->nv; k++)
	{
		if (d->vblk + k == d->blk || d->vblk + k == SHNSW_METAPAGE_BLKNO)
			shnsw_corrupt(is->index, d->blk, "vector block", d->vblk + k);
		d->vbuf[k] = ReadBuffer(is->index, d->vblk + k);
	}
	return true;
}

/*
 * add_duplicate adds heap_tid to node ref if that node is live, has room
 * for another row and holds exactly value (its VARSIZE bytes); returns true
 * if it did. The node's header is read under a share lock, its vector
 * page(s) and upper page pinned with no lock held (dup_read,
 * dup_pin_upper), then the graph page is locked exclusively, the header
 * checked again, the vector compared under a share lock on its page(s),
 * the upper page locked exclusively, and the metapage too if the upper
 * page is new (the order of src/README, Locking): so the row goes only to
 * a node that holds its value at the moment it is added. One WAL record
 * (dup_write). A node without an upper record gets one (level 0) on the
 * insert upper page, or on a new page if that one is full.
 */
static bool
add_duplicate(InsertState *is, ShnswRef ref, const struct varlena *value, ItemPointer heap_tid)
{
	DupNode		d;
	bool		done = false;
	bool		retry = true;

	d.ref = ref;
	d.blk = shnsw_ref_block(ref, is->info->slot_bits);
	d.slot = shnsw_ref_slot(ref, is->info->slot_bits);
	if (!dup_read(is, &d, value))
		return false;
	dup_pin_upper(is, &d, false);
	for (int attempt = 0; retry && attempt < 2; attempt++)
	{
		ShnswNodeHeader *h;
		ShnswUpperLoc now;
		Buffer		metabuf = InvalidBuffer;

		retry = false;
		LockBuffer(d.gbuf, BUFFER_LOCK_EXCLUSIVE);
		h = shnsw_page_node(BufferGetPage(d.gbuf), d.slot, is->info->node_size);
		now = shnsw_node_upper_loc(h);
		if (now.offset == InvalidOffsetNumber)
			now.block = InvalidBlockNumber;
		if ((h->flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)) ||
			h->extra_tids >= SHNSW_NODE_TIDS - 1 ||
			h->vec_block != d.vblk || h->vec_offset != d.voff ||
			now.block != d.uloc.block || now.offset != d.uloc.offset ||
			!dup_same_value(is, &d, value))
		{
			LockBuffer(d.gbuf, BUFFER_LOCK_UNLOCK);
			break;
		}
		LockBuffer(d.ubuf, BUFFER_LOCK_EXCLUSIVE);
		if (!d.unew)
			shnsw_check_page(is->index, BufferGetPage(d.ubuf), BufferGetBlockNumber(d.ubuf),
							 SHNSW_PAGE_UPPER);
		if (d.uloc.block == InvalidBlockNumber && !d.unew &&
			PageGetFreeSpace(BufferGetPage(d.ubuf)) < MAXALIGN(shnsw_upper_size(0, is->m)))
		{
			/* the insert upper page is full: a new one, with no lock held */
			UnlockReleaseBuffer(d.ubuf);
			LockBuffer(d.gbuf, BUFFER_LOCK_UNLOCK);
			dup_pin_upper(is, &d, true);
			retry = true;
			continue;
		}
		if (d.unew)
		{
			metabuf = ReadBuffer(is->index, SHNSW_METAPAGE_BLKNO);
			LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
		}
		dup_write(is, &d, metabuf, heap_tid);
		if (BufferIsValid(metabuf))
			UnlockReleaseBuffer(metabuf);
		LockBuffer(d.ubuf, BUFFER_LOCK_UNLOCK);
		LockBuffer(d.gbuf, BUFFER_LOCK_UNLOCK);
		done = true;
	}
	ReleaseBuffer(d.ubuf);
	ReleaseBuffer(d.gbuf);
	for (int k = 0; k < d.nv; k++)
		ReleaseBuffer(d.vbuf[k]);
	return done;
}

/*
 * insert_node does the work of one insert, under the insert lock (either
 * mode): find neighbours, place the node (a slot VACUUM freed, for a level-0
 * node, if there is one; else at the end), link it back, publish. Returns
 * true if the quantizer should be retrained (meta_retrain_due); sets
 * *far_out if the value lay far outside the trained range.
 */
static bool
insert_node(InsertState *is, struct varlena *value, const float *nav, ItemPointer heap_tid,
			bool *far_out)
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
	double		excess,
				unit;

	*far_out = false;
	insert_start(is, nav, heap_tid, &st);
	sq8_encode(info->lo, info->scale, nav, code, is->dims);

	/* find neighbours */
	MemSet(nnbrs, 0, sizeof(nnbrs));
	level = shnsw_random_level(&st.rng, 1.0 / log((double) Max(is->m, 2)), SHNSW_MAX_LEVEL);

	/*
	 * A node that will take a free slot takes the level of the slot's last
	 * node, whose upper record the slot kept: the freed levels are a sample
	 * of the same distribution, and the records are rewritten in place
	 * instead of new ones being added (insert_place_in_free_slot).
	 */
	{
		Buffer		mb = ReadBuffer(is->index, SHNSW_METAPAGE_BLKNO);
		int			fl = insert_free_slot_level(is, mb);

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
			return insert_publish(is->index, false);
	}

	/* place the node, its vector and its upper record; update the metapage */
	nn.heap_tid = heap_tid;
	nn.level = level;
	nn.nbrs0 = nbrs[0];
	nn.nnbrs0 = nnbrs[0];
	nn.code = code;
	nn.residual = shnsw_code_residual(info->metric, info->lo, info->scale, nav, code, is->dims);
	excess = shnsw_code_excess(info->metric, info->lo, info->scale, nav, code, is->dims);
	unit = shnsw_clamp_unit(info->metric, info->scale, is->dims);
	nn.clamp_flags = shnsw_clamp_flags(excess, unit);
	/* farther out than any clamp class holds (about 6.7 times unit) */
	*far_out = excess > shnsw_clamp_class_limit(SHNSW_NODE_CLAMP_CLASSES - 1, unit);
	nn.value = value;
	metabuf = ReadBuffer(is->index, SHNSW_METAPAGE_BLKNO);
	newref = insert_place_in_free_slot(is, metabuf, &nn, nbrs, nnbrs);
	if (newref == SHNSW_INVALID_REF)
		newref = append_node(is, metabuf, &nn, nbrs, nnbrs);
	ReleaseBuffer(metabuf);

	link_back(is, newref, code, level, nbrs, nnbrs, st.efc);
	return insert_publish(is->index, *far_out);
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

	v = shnsw_check_vector(values[0], is.info->elemtype, is.info->coldims);
	v = shnsw_stored_image(v, is.info->elemtype, is.info->vec_size);
	is.vlen = TYPEALIGN(4, VARSIZE(v));
	nav = palloc(sizeof(float) * is.dims);
	if (shnsw_vector_to_nav(v, is.info->elemtype, is.info->metric, is.dims, nav))
	{
		LOCKMODE	mode = ShareLock;
		bool		retrain;
		bool		far_out;

		/*
		 * Inserts share the insert lock. The first node of an empty index
		 * (no entry point to link to) and training the quantizer happen
		 * alone, as does retraining (which re-encodes every node).
		 */
		ShnswMetaSnapshot snap;

		for (;;)
		{
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
		/* the search for neighbours reads the shared cache, if its copy is current */
		shnsw_cache_insert_begin(index, is.info, &snap, &is.lk.search_ops,
							   palloc0(sizeof(ShnswScanStats)), CurrentMemoryContext);
		retrain = insert_node(&is, v, nav, heap_tid, &far_out);
		UnlockPage(index, SHNSW_METAPAGE_BLKNO, mode);
		if (retrain)
		{
			LockPage(index, SHNSW_METAPAGE_BLKNO, ExclusiveLock);
			if (retrain_due(index, far_out))
				shnsw_retrain(index);
			UnlockPage(index, SHNSW_METAPAGE_BLKNO, ExclusiveLock);
		}
	}

	MemoryContextSwitchTo(old);
	MemoryContextDelete(ctx);
	return false;
}
