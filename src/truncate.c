/*-------------------------------------------------------------------------
 *
 * truncate.c
 *	  VACUUM's last step: return whole free pages at the end of the index
 *	  to the operating system.
 *
 * The design and its interlock (a conditional AccessExclusiveLock on the
 * index, as heap truncation takes on the table) are src/README's "VACUUM",
 * "Truncation".
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/storage.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "utils/rel.h"
#include "utils/wait_event.h"

#include "cache.h"
#include "format.h"
#include "meta.h"
#include "pageaccess.h"
#include "pages.h"
#include "pagewrite.h"
#include "truncate.h"

/* What the look before the lock found. */
typedef struct TailPlan
{
	BlockNumber nblocks;		/* the relation's length */
	BlockNumber cut;			/* first block of the tail to cut */
	uint64		generation;		/* the metapage's cache generation */
	uint64		slots_below;	/* node slots on graph pages before cut */
	uint64		deleted_below;	/* of which deleted (free ones included) */
} TailPlan;

/*
 * tail_start returns the first block of the tail of pages that hold no
 * live node: going back from the end, vector, upper and never-initialized
 * pages, and graph pages whose slots are all free; nblocks if that tail
 * has no graph page (nothing freed at the end: its vector and upper pages
 * are most likely a build's, used by live nodes). The walk also stops
 * after TAIL_RUN pages in a row that are not graph pages, so a VACUUM does
 * not read a build's vector pages back to front each time. Share-locks one
 * page at a time.
 */
#define TAIL_RUN 64

static BlockNumber
tail_start(Relation index, BlockNumber nblocks, int node_size, BufferAccessStrategy bas)
{
	BlockNumber t = nblocks;
	bool		freed = false;
	int			run = 0;

	while (t > SHNSW_METAPAGE_BLKNO + 1 && run < TAIL_RUN)
	{
		Buffer		buf = ReadBufferExtended(index, MAIN_FORKNUM, t - 1, RBM_NORMAL, bas);
		Page		page;
		bool		cut = true;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		run++;
		if (!PageIsNew(page))
		{
			int			type;

			shnsw_check_page(index, page, t - 1, 0);
			type = ShnswPageGetOpaque(page)->page_type;
			if (type == SHNSW_PAGE_GRAPH)
			{
				int			nslots = shnsw_graph_nslots(index, page, t - 1, node_size);

				for (int s = 0; s < nslots && cut; s++)
					cut = (shnsw_page_node(page, s, node_size)->flags & SHNSW_NODE_FREE) != 0;
				freed |= cut;
				run = 0;
			}
			else if (type != SHNSW_PAGE_VECTOR && type != SHNSW_PAGE_UPPER)
				cut = false;
		}
		UnlockReleaseBuffer(buf);
		if (!cut)
			break;
		t--;
		CHECK_FOR_INTERRUPTS();
	}
	return freed ? t : nblocks;
}

/* Raise *top to blk if it is higher. */
static inline void
raise_to(BlockNumber *top, BlockNumber blk)
{
	if (blk != InvalidBlockNumber && blk > *top)
		*top = blk;
}

/*
 * upper_lists_top raises *top to the highest block named by the lists of
 * the upper record at loc (node ref, of the given level). Share-locks the
 * record's page.
 */
static void
upper_lists_top(Relation index, const ShnswIndexInfo *info, ShnswRef ref, int level,
				ShnswUpperLoc loc, BlockNumber *top)
{
	Buffer		buf = ReadBuffer(index, loc.block);
	ShnswUpperHeader *u;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	shnsw_check_page(index, BufferGetPage(buf), loc.block, SHNSW_PAGE_UPPER);
	u = shnsw_upper_record(index, BufferGetPage(buf), loc.block, loc.offset, info->m);
	if (u == NULL || u->node != ref || u->level < level)
		shnsw_corrupt(index, loc.block, "upper record of a node", loc.offset);
	for (int l = 1; l <= level; l++)
	{
		const ShnswRef *nb = shnsw_upper_neighbors(u, l, info->m);

		for (int k = 0; k < Min(shnsw_upper_counts(u)[l - 1], info->m); k++)
			raise_to(top, shnsw_ref_block(nb[k], info->slot_bits));
	}
	UnlockReleaseBuffer(buf);
}

/*
 * node_top raises *top to the highest block node h (slot ref) uses: its
 * vector, its upper record, and for a live node its neighbours on every
 * layer. A free slot's free-list link does not count (it is relinked).
 */
static void
node_top(Relation index, const ShnswIndexInfo *info, ShnswRef ref, const ShnswNodeHeader *h,
		 BlockNumber *top)
{
	ShnswUpperLoc uloc = shnsw_node_upper_loc(h);
	bool		has_upper = uloc.offset != InvalidOffsetNumber && uloc.block != InvalidBlockNumber;
	const ShnswRef *nb = shnsw_node_neighbors(h);

	raise_to(top, h->vec_block +
			 (h->vec_offset + info->vec_span > (int) SHNSW_PAGE_CAPACITY ? 1 : 0));
	if (has_upper)
		raise_to(top, uloc.block);
	if (h->flags & SHNSW_NODE_FREE)
		return;
	for (int k = 0; k < Min(h->nneighbors, 2 * info->m); k++)
		raise_to(top, shnsw_ref_block(nb[k], info->slot_bits));
	if (h->level > 0)
		upper_lists_top(index, info, ref, h->level, uloc, top);
}

/*
 * tail_bound moves plan->cut (the start of the tail of pages with no live
 * node, tail_start) up past every block a node before it uses (node_top),
 * and counts those nodes into plan. One forward pass: a block the pass has
 * not reached yet raises the bound ahead of it. Each graph page is read
 * from a copy, so no lock is held while upper records are read. A node
 * that fails the validator (nodecheck.h) raises an error, as in VACUUM's
 * other passes.
 */
static void
tail_bound(Relation index, const ShnswIndexInfo *info, TailPlan *plan,
		   BufferAccessStrategy bas)
{
	char	   *copy = palloc(BLCKSZ);
	BlockNumber top = 0;
	BlockNumber nb = plan->nblocks;

	plan->slots_below = plan->deleted_below = 0;
	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < plan->cut; blk++)
	{
		Buffer		buf = ReadBufferExtended(index, MAIN_FORKNUM, blk, RBM_NORMAL, bas);
		Page		page = BufferGetPage(buf);
		int			nslots = 0;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		if (!PageIsNew(page))
		{
			shnsw_check_page(index, page, blk, 0);
			if (ShnswPageGetOpaque(page)->page_type == SHNSW_PAGE_GRAPH)
			{
				nslots = shnsw_graph_nslots(index, page, blk, info->node_size);
				memcpy(copy, page, BLCKSZ);
			}
		}
		UnlockReleaseBuffer(buf);
		for (int s = 0; s < nslots; s++)
		{
			ShnswNodeHeader *h = shnsw_page_node((Page) copy, s, info->node_size);

			/* node_top follows its fields: the checks every reader makes */
			shnsw_check_node(index, blk, s, h, info->m, info->slot_bits, info->vec_span, &nb);
			node_top(index, info, shnsw_make_ref(blk, s, info->slot_bits), h, &top);
			plan->slots_below++;
			if (h->flags & SHNSW_NODE_DELETED)
				plan->deleted_below++;
		}
		if (top >= plan->cut)
			plan->cut = Min(top + 1, plan->nblocks);
		CHECK_FOR_INTERRUPTS();
	}
	pfree(copy);
}

/*
 * set_free_link writes next as the free-list link of free slot ref, in a
 * WAL record of its own. Called under the AccessExclusiveLock.
 */
static void
set_free_link(Relation index, const ShnswIndexInfo *info, ShnswRef ref, ShnswRef next)
{
	BlockNumber blk = shnsw_ref_block(ref, info->slot_bits);
	Buffer		buf = ReadBuffer(index, blk);
	ShnswWriteState *state;
	ShnswNodeHeader *h;

	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	state = shnsw_write_start(index);
	h = shnsw_page_node(shnsw_write_buffer(state, buf, 0),
						shnsw_ref_slot(ref, info->slot_bits), info->node_size);
	Assert(h->flags & SHNSW_NODE_FREE);
	shnsw_node_neighbors(h)[0] = next;
	shnsw_write_finish(state);
	UnlockReleaseBuffer(buf);
}

/*
 * relink_free_list walks the free list from head (under the
 * AccessExclusiveLock: nothing else changes it) and takes out the slots on
 * blocks at or beyond cut, rewriting the link of each kept slot whose
 * successor changes. Returns the new head; *kept counts the slots left on
 * the list. A list longer than limit (a cycle) or an entry that is not a
 * free slot is a corrupt index.
 */
static ShnswRef
relink_free_list(Relation index, const ShnswIndexInfo *info, ShnswRef head, uint64 limit,
				 BlockNumber cut, BlockNumber nblocks, uint64 *kept)
{
	ShnswRef	newhead = SHNSW_INVALID_REF;
	ShnswRef	prev = SHNSW_INVALID_REF;
	ShnswRef	prev_next = SHNSW_INVALID_REF;	/* the link prev holds now */
	uint64		steps = 0;
	BlockNumber nb = nblocks;

	*kept = 0;
	for (ShnswRef cur = head; cur != SHNSW_INVALID_REF;)
	{
		BlockNumber blk = shnsw_ref_block(cur, info->slot_bits);
		int			slot = shnsw_ref_slot(cur, info->slot_bits);
		Buffer		buf;
		Page		page;
		ShnswNodeHeader *h;
		ShnswRef	next;

		if (++steps > limit)
			shnsw_corrupt(index, SHNSW_METAPAGE_BLKNO, "free list length", steps);
		shnsw_check_block(index, blk, &nb, SHNSW_METAPAGE_BLKNO, "free list entry");
		buf = ReadBuffer(index, blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		shnsw_check_page(index, page, blk, SHNSW_PAGE_GRAPH);
		if (slot >= shnsw_graph_nslots(index, page, blk, info->node_size))
			shnsw_corrupt(index, blk, "free list entry", cur);
		h = shnsw_page_node(page, slot, info->node_size);
		if (!(h->flags & SHNSW_NODE_FREE))
			shnsw_corrupt(index, blk, "free list entry (not a free slot)", cur);
		next = shnsw_node_neighbors(h)[0];
		UnlockReleaseBuffer(buf);
		if (blk < cut)
		{
			if (prev == SHNSW_INVALID_REF)
				newhead = cur;
			else if (prev_next != cur)
				set_free_link(index, info, prev, cur);
			prev = cur;
			prev_next = next;
			(*kept)++;
		}
		cur = next;
		CHECK_FOR_INTERRUPTS();
	}
	if (prev != SHNSW_INVALID_REF && prev_next != SHNSW_INVALID_REF)
		set_free_link(index, info, prev, SHNSW_INVALID_REF);
	return newhead;
}

/*
 * cut_meta writes the metapage after the cut, in one WAL record: the free
 * list's new head and length, the node and deleted counts of the slots
 * before the cut, no insert block at or beyond it, a new cache generation.
 */
static void
cut_meta(Relation index, const TailPlan *plan, ShnswRef newhead, uint64 kept)
{
	Buffer		metabuf;
	ShnswWriteState *state;
	ShnswMetaPage meta = shnsw_write_meta(index, &metabuf, &state);

	meta->free_head = newhead;
	meta->free_count = kept;
	meta->node_count = plan->slots_below;
	meta->deleted_count = plan->deleted_below;
	if (meta->insert_graph_blk != InvalidBlockNumber && meta->insert_graph_blk >= plan->cut)
		meta->insert_graph_blk = InvalidBlockNumber;
	if (meta->insert_vec_blk != InvalidBlockNumber && meta->insert_vec_blk >= plan->cut)
		meta->insert_vec_blk = InvalidBlockNumber;
	/* the vector run ends before the cut; with no insert page, there is none */
	if (meta->flags & SHNSW_META_VECRUN)
	{
		if (meta->insert_vec_blk == InvalidBlockNumber)
			meta->insert_vec_end = InvalidBlockNumber;
		else if (meta->insert_vec_end != InvalidBlockNumber && meta->insert_vec_end >= plan->cut)
			meta->insert_vec_end = plan->cut - 1;
	}
	if (meta->insert_upper_blk != InvalidBlockNumber && meta->insert_upper_blk >= plan->cut)
		meta->insert_upper_blk = InvalidBlockNumber;
	meta->cache_generation++;
	meta->truncations++;		/* scans' maps of page types start again */
	shnsw_write_finish(state);
	UnlockReleaseBuffer(metabuf);
}

/*
 * lock_for_cut takes the index's AccessExclusiveLock without waiting for
 * a scan or an insert (they hold their lock for their whole transaction):
 * true if it has it. A background build of its copy in the shared cache holds
 * the lock too, for a moment; it is asked to give it up
 * (shnsw_cache_cut_waiting), and the lock is tried again every
 * CUT_LOCK_WAIT_MS for at most CUT_LOCK_TIMEOUT_MS, as heap truncation
 * retries its table lock. No buffer lock may be held.
 */
#define CUT_LOCK_WAIT_MS	20
#define CUT_LOCK_TIMEOUT_MS 5000

static bool
lock_for_cut(Relation index)
{
	for (int waited = 0;; waited += CUT_LOCK_WAIT_MS)
	{
		if (ConditionalLockRelation(index, AccessExclusiveLock))
			return true;
		if (waited >= CUT_LOCK_TIMEOUT_MS || !shnsw_cache_cut_waiting(index))
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 CUT_LOCK_WAIT_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * shnsw_truncate_tail is VACUUM's last step (shnsw_bulkdelete, after its
 * passes): if the pages at the end of the index hold no live node, nothing
 * before them uses them, and no other backend holds a lock on the index,
 * it takes them off the free list and cuts them off. Returns the number of
 * blocks cut. Called with no buffer lock held.
 *
 * The look (tail_start, tail_bound) runs before the lock is taken; the
 * lock is kept only if the metapage's cache generation, which every write
 * bumps, and the relation's length are unchanged since, so the index is
 * locked only for the relinking and the cut.
 */
BlockNumber
shnsw_truncate_tail(Relation index, const ShnswIndexInfo *info, BufferAccessStrategy bas,
					int elevel)
{
	TailPlan	plan;
	Buffer		metabuf;
	ShnswMetaPage meta;
	ShnswRef	head,
				entry;
	uint64		generation,
				node_count,
				kept;
	ShnswRef	newhead;

	if (IsInParallelMode() || RecoveryInProgress())
		return 0;
	plan.nblocks = RelationGetNumberOfBlocks(index);
	metabuf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_SHARE);
	plan.generation = ShnswPageGetMeta(BufferGetPage(metabuf))->cache_generation;
	LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);
	plan.cut = tail_start(index, plan.nblocks, info->node_size, bas);
	if (plan.cut >= plan.nblocks)
	{
		ReleaseBuffer(metabuf);
		return 0;
	}
	tail_bound(index, info, &plan, bas);
	if (plan.cut >= plan.nblocks)
	{
		ReleaseBuffer(metabuf);
		return 0;
	}
	if (!lock_for_cut(index))
	{
		ReleaseBuffer(metabuf);
		ereport(elevel,
				(errmsg("index \"%s\": %u free pages at its end not truncated: the index is in use",
						RelationGetRelationName(index), plan.nblocks - plan.cut)));
		return 0;
	}
	LockBuffer(metabuf, BUFFER_LOCK_SHARE);
	meta = ShnswPageGetMeta(BufferGetPage(metabuf));
	generation = meta->cache_generation;
	head = meta->free_head;
	entry = meta->entry;
	node_count = meta->node_count;
	UnlockReleaseBuffer(metabuf);
	if (generation != plan.generation || RelationGetNumberOfBlocks(index) != plan.nblocks ||
		(entry != SHNSW_INVALID_REF && shnsw_ref_block(entry, info->slot_bits) >= plan.cut))
	{
		/* written meanwhile (a finished insert): look again next time */
		UnlockRelation(index, AccessExclusiveLock);
		return 0;
	}
	newhead = relink_free_list(index, info, head, Max(node_count, 1), plan.cut, plan.nblocks,
							   &kept);
	cut_meta(index, &plan, newhead, kept);
	/* the index's cached copy maps the blocks cut: drop it, no one can rebuild it meanwhile */
	(void) shnsw_cache_drop_index(index);
	RelationTruncate(index, plan.cut);
	UnlockRelation(index, AccessExclusiveLock);
	ereport(elevel,
			(errmsg("index \"%s\": truncated %u free pages at its end",
					RelationGetRelationName(index), plan.nblocks - plan.cut)));
	return plan.nblocks - plan.cut;
}
