/*-------------------------------------------------------------------------
 *
 * vacuum.c
 *	  VACUUM: remove the nodes of dead heap tuples, repair the neighbour
 *	  lists that pointed at them, and make their space reusable.
 *
 * The passes (mark, repair, entry point, reach, find, free), what
 * amvacuumcleanup runs when there were no dead tuples, the memory bounds
 * and the interlock with scans are described in src/README, "VACUUM" and
 * "Locking": no heavyweight lock; each page is locked only while it is
 * read or changed, a graph page before the metapage when both change.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/vacuum.h"
#include "miscadmin.h"
#include "postmaster/autovacuum.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "format.h"
#include "kernels.h"
#include "meta.h"
#include "neighbors_find.h"
#include "neighbors_update.h"
#include "pageaccess.h"
#include "pages.h"
#include "pagewrite.h"
#include "reachability.h"
#include "truncate.h"
#include "vacuum.h"

typedef struct VacState
{
	Relation	index;
	ShnswIndexInfo *info;		/* our own copy (shnsw_get_index_info) */
	BufferAccessStrategy bas;
	ShnswRefSet dead;			/* every deleted node, free or not (sorted) */
	int64		capdead;
	ShnswRef   *tofree;			/* deleted, not yet free (sorted) */
	int64		ntofree;
	int64		captofree;
	ShnswRefSet live;			/* live nodes (sorted) */
	int64		caplive;
	ShnswRef	best;			/* live node of highest level */
	int			bestlevel;
	int64		unreached;		/* nodes pass 4 linked to make them reachable */
	int64		unfound;		/* ... and so that a search finds them */
	BlockNumber nblocks;		/* relation length last seen (bounds checks) */
	int64		given_up;		/* list changes that ran out of retries */
	MemoryContext tmpcxt;		/* one page's or one node's work; reset after it */
} VacState;

/* Walks of pass 4 after pass 4b (link_unreached_again). */
#define SHNSW_REACH_ROUNDS 3

/* Rounds of pass 4b over the nodes its own links pushed out of lists. */
#define SHNSW_FIND_ROUNDS	3

/*
 * A VACUUM without dead rows runs pass 4b only for nodes with fewer
 * incoming links than this (the ones concurrent inserts' pruning leaves
 * hard to find).
 */
#define SHNSW_FEW_INLINKS	3

/* Append r to a growing array of references. */
static void
push_ref(ShnswRef **arr, int64 *n, int64 *cap, ShnswRef r)
{
	if (*n == *cap)
	{
		*cap = Max(1024, 2 * *cap);
		*arr = *arr ? repalloc_huge(*arr, sizeof(ShnswRef) * *cap)
			: palloc_extended(sizeof(ShnswRef) * *cap, MCXT_ALLOC_HUGE);
	}
	(*arr)[(*n)++] = r;
}

/*
 * vacuum_delay_point, which is also where the tests' discard mode
 * (streamhnsw.debug_discard_caches) drops the cached index description.
 */
static inline void
vac_delay(VacState *vs)
{
	vacuum_delay_point(false);
	shnsw_debug_discard(vs->index);
}

/*
 * Pin and share-lock block blk if it is a graph page (VACUUM's strategy);
 * otherwise release it and return false. A graph page's slot count is
 * checked to fit the page, so callers can loop to it.
 */
static bool
read_graph_page(VacState *vs, BlockNumber blk, Buffer *buf)
{
	Page		page;

	*buf = ReadBufferExtended(vs->index, MAIN_FORKNUM, blk, RBM_NORMAL, vs->bas);
	LockBuffer(*buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(*buf);
	if (PageIsNew(page))
	{
		/* extended by an insert that crashed before initializing it */
		UnlockReleaseBuffer(*buf);
		return false;
	}
	shnsw_check_page(vs->index, page, blk, 0);
	if (ShnswPageGetOpaque(page)->page_type != SHNSW_PAGE_GRAPH)
	{
		UnlockReleaseBuffer(*buf);
		return false;
	}
	(void) shnsw_graph_nslots(vs->index, page, blk, vs->info->node_size);
	return true;
}

/*
 * begin_page_and_meta starts one WAL record that changes a graph page (buf,
 * pinned, unlocked) and the metapage: locks both exclusively, graph page
 * first as inserts do, and returns the writable copies. The caller finishes
 * the record and releases the locks.
 */
static ShnswMetaPage
begin_page_and_meta(VacState *vs, Buffer buf, Buffer *metabuf, ShnswWriteState **state,
					Page *page)
{
	*metabuf = ReadBuffer(vs->index, SHNSW_METAPAGE_BLKNO);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	LockBuffer(*metabuf, BUFFER_LOCK_EXCLUSIVE);
	*state = shnsw_write_start(vs->index);
	*page = shnsw_write_buffer(*state, buf, 0);
	return ShnswPageGetMeta(shnsw_write_buffer(*state, *metabuf, 0));
}

/*
 * Pass 1 for node (blk, slot) of several rows (their list is in its upper
 * record): drop its dead rows, or mark it deleted if none is live. Returns
 * its live rows (0: deleted). buf is the graph page, pinned, unlocked. The
 * list is read under share locks; if a row is dead, the graph page, the
 * upper page and the metapage are locked exclusively (the insert order) and
 * the node decided again (an insert may have added a row since), in one
 * WAL record.
 */
static int
mark_multi_node(VacState *vs, BlockNumber blk, Buffer buf, int slot,
				IndexBulkDeleteResult *stats, IndexBulkDeleteCallback callback,
				void *callback_state)
{
	ShnswRef	ref = shnsw_make_ref(blk, slot, vs->info->slot_bits);
	int			m = vs->info->m;
	ShnswNodeHeader h;
	ShnswNodeHeader *hp;
	ShnswUpperHeader *u = NULL;
	ShnswUpperLoc loc;
	ItemPointerData tids[SHNSW_NODE_TIDS];
	int			n,
				nlive = 0;
	bool		anydead = false;
	Buffer		ubuf,
				metabuf;
	ShnswWriteState *xstate;
	ShnswMetaPage meta;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(&h, shnsw_page_node(BufferGetPage(buf), slot, vs->info->node_size), sizeof(h));
	LockBuffer(buf, BUFFER_LOCK_UNLOCK);
	if (h.flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE))
		return 0;
	n = shnsw_read_node_tids(vs->index, NULL, ref, blk, &h, m, &vs->nblocks, tids);
	for (int t = 0; t < n && !anydead; t++)
		anydead = callback(&tids[t], callback_state);
	if (!anydead)
		return n;

	/* only nodes with a list have a record (checked by shnsw_read_node_tids) */
	loc = shnsw_node_upper_loc(&h);
	if (loc.block == blk)		/* would be locked twice */
		shnsw_corrupt(vs->index, blk, "upper record block", loc.block);
	ubuf = ReadBuffer(vs->index, loc.block);
	metabuf = ReadBuffer(vs->index, SHNSW_METAPAGE_BLKNO);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	LockBuffer(ubuf, BUFFER_LOCK_EXCLUSIVE);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	xstate = shnsw_write_start(vs->index);
	hp = shnsw_page_node(shnsw_write_buffer(xstate, buf, 0), slot, vs->info->node_size);
	if (!(hp->flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)))
	{
		Page		upage = shnsw_write_buffer(xstate, ubuf, 0);

		shnsw_check_page(vs->index, upage, loc.block, SHNSW_PAGE_UPPER);
		u = shnsw_upper_record(vs->index, upage, loc.block, loc.offset, m);
		n = 0;
		if (u != NULL && u->node == ref && hp->extra_tids > 0)
			n = shnsw_upper_node_tids(vs->index, loc.block, u, m, ref, tids);
		else
			u = NULL;
		if (n == 0)
		{
			shnsw_node_first_tid(vs->index, blk, hp, &tids[0]);
			n = 1;
		}
		for (int t = 0; t < n; t++)
			if (!callback(&tids[t], callback_state))
				tids[nlive++] = tids[t];
		stats->tuples_removed += n - nlive;
		meta = ShnswPageGetMeta(shnsw_write_buffer(xstate, metabuf, 0));
		if (nlive == 0)
		{
			hp->flags |= SHNSW_NODE_DELETED;
			hp->extra_tids = 0;
			if (u != NULL)
				u->ntids = 0;
			meta->deleted_count++;
		}
		else
			shnsw_node_set_tids(hp, u, m, tids, nlive);
		meta->cache_generation++;
		shnsw_write_finish(xstate);
	}
	else
		shnsw_write_abort(xstate);
	UnlockReleaseBuffer(metabuf);
	UnlockReleaseBuffer(ubuf);
	LockBuffer(buf, BUFFER_LOCK_UNLOCK);
	return nlive;
}

/*
 * Pass 1 for the nodes of one row of graph page blk (buf, pinned, unlocked)
 * whose row the share-locked look found dead (touched[0..ntouched-1]): they
 * are decided again under the page's exclusive lock (an insert may have
 * added a row since: then the node goes to multi[], decided as a node of
 * several rows) and flagged DELETED, with the metapage's count, in one WAL
 * record, so an interrupted VACUUM leaves them consistent. Only VACUUM
 * marks nodes deleted, and one VACUUM runs at a time. state[] says which.
 */
static void
mark_single_nodes(VacState *vs, BlockNumber blk, Buffer buf, const int *touched, int ntouched,
				  uint8 *state, int *multi, int *nmulti, IndexBulkDeleteResult *stats,
				  IndexBulkDeleteCallback callback, void *callback_state)
{
	ShnswWriteState *xstate;
	Buffer		metabuf;
	ShnswMetaPage meta;
	Page		page;
	int			ndead = 0;

	meta = begin_page_and_meta(vs, buf, &metabuf, &xstate, &page);
	for (int k = 0; k < ntouched; k++)
	{
		ShnswNodeHeader *h = shnsw_page_node(page, touched[k], vs->info->node_size);
		ItemPointerData tid;

		if (h->extra_tids > 0)
		{
			multi[(*nmulti)++] = touched[k];
			continue;
		}
		shnsw_node_first_tid(vs->index, blk, h, &tid);
		if (!callback(&tid, callback_state))
			continue;
		stats->tuples_removed++;
		h->flags |= SHNSW_NODE_DELETED;
		state[touched[k]] = 1;
		ndead++;
	}
	meta->deleted_count += ndead;
	meta->cache_generation++;
	shnsw_write_finish(xstate);
	UnlockReleaseBuffer(metabuf);
	LockBuffer(buf, BUFFER_LOCK_UNLOCK);
}

/*
 * Pass 1 on one graph page: mark its dead nodes deleted, drop the dead heap
 * TIDs of nodes that keep live ones, and collect the page's deleted and
 * live nodes. Enters with the page share-locked and pinned; releases both.
 * Nodes of one row are decided on the page, in one WAL record for the page;
 * nodes of several, whose rows are in their upper records, one at a time
 * (mark_multi_node).
 */
static void
mark_page(VacState *vs, BlockNumber blk, Buffer buf, IndexBulkDeleteResult *stats,
		  IndexBulkDeleteCallback callback, void *callback_state)
{
	Page		page = BufferGetPage(buf);
	int			nslots = ShnswPageGetOpaque(page)->nslots;
	int			node_size = vs->info->node_size;
	int			touched[SHNSW_MAX_NODES_PER_PAGE];
	int			ntouched = 0;
	int			multi[SHNSW_MAX_NODES_PER_PAGE];
	int			nmulti = 0;
	uint8		state[SHNSW_MAX_NODES_PER_PAGE];	/* 0 live, 1 deleted, 2 free */
	int			level[SHNSW_MAX_NODES_PER_PAGE];
	int			nrows[SHNSW_MAX_NODES_PER_PAGE];	/* a live node's rows */

	for (int s = 0; s < nslots; s++)
	{
		ShnswNodeHeader *h = shnsw_page_node(page, s, node_size);
		ItemPointerData tid;

		shnsw_check_node(vs->index, blk, s, h, vs->info->m, vs->info->slot_bits,
						 vs->info->vec_span, &vs->nblocks);
		level[s] = h->level;
		if (h->flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE))
		{
			state[s] = (h->flags & SHNSW_NODE_FREE) ? 2 : 1;
			continue;
		}
		state[s] = 0;
		nrows[s] = 1;
		if (h->extra_tids > 0)
		{
			multi[nmulti++] = s;
			continue;
		}
		shnsw_node_first_tid(vs->index, blk, h, &tid);
		if (callback(&tid, callback_state))
			touched[ntouched++] = s;
	}
	LockBuffer(buf, BUFFER_LOCK_UNLOCK);

	if (ntouched > 0)
		mark_single_nodes(vs, blk, buf, touched, ntouched, state, multi, &nmulti, stats,
						  callback, callback_state);
	for (int k = 0; k < nmulti; k++)
	{
		nrows[multi[k]] = mark_multi_node(vs, blk, buf, multi[k], stats, callback,
										  callback_state);
		if (nrows[multi[k]] == 0)
			state[multi[k]] = 1;
	}

	/* the page's nodes in slot order, so that the sets come out sorted */
	for (int s = 0; s < nslots; s++)
	{
		ShnswRef	ref = shnsw_make_ref(blk, s, vs->info->slot_bits);

		if (state[s] != 0)
		{
			push_ref(&vs->dead.refs, &vs->dead.n, &vs->capdead, ref);
			if (state[s] == 1)
				push_ref(&vs->tofree, &vs->ntofree, &vs->captofree, ref);
			continue;
		}
		stats->num_index_tuples += nrows[s];
		push_ref(&vs->live.refs, &vs->live.n, &vs->caplive, ref);
		if (level[s] > vs->bestlevel)
		{
			vs->best = ref;
			vs->bestlevel = level[s];
		}
	}
	ReleaseBuffer(buf);
}

/*
 * Pass 1 over blocks 1 .. nblocks - 1, in order, so that the sets of
 * deleted and live nodes come out sorted.
 */
static void
mark_all(VacState *vs, BlockNumber nblocks, IndexBulkDeleteResult *stats,
		 IndexBulkDeleteCallback callback, void *callback_state)
{
	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < nblocks; blk++)
	{
		Buffer		buf;

		vac_delay(vs);
		if (read_graph_page(vs, blk, &buf))
			mark_page(vs, blk, buf, stats, callback, callback_state);
	}
}

/*
 * Pass 2 on one graph page: repair the lists of its live nodes that name
 * deleted nodes. Works from a copy of the page, so holds no lock while
 * repairing (repairs read and lock other pages).
 */
static void
repair_page(VacState *vs, ShnswLinker *lk, BlockNumber blk, Buffer buf, char *copy)
{
	ShnswRef	ubuf[SHNSW_MAX_M];
	int			nslots = ShnswPageGetOpaque(BufferGetPage(buf))->nslots;

	memcpy(copy, BufferGetPage(buf), BLCKSZ);
	UnlockReleaseBuffer(buf);

	for (int s = 0; s < nslots; s++)
	{
		ShnswNodeHeader *h = shnsw_page_node((Page) copy, s, vs->info->node_size);
		ShnswRef	ref = shnsw_make_ref(blk, s, vs->info->slot_bits);
		ShnswRef   *nb = shnsw_node_neighbors(h);

		/* each repair can search: let a cancel in between them */
		vacuum_delay_point(false);
		shnsw_check_node(vs->index, blk, s, h, vs->info->m, vs->info->slot_bits,
						 vs->info->vec_span, &vs->nblocks);
		if (h->flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE))
			continue;
		for (int k = 0; k < Min(h->nneighbors, 2 * vs->info->m); k++)
		{
			if (shnsw_refset_has(&vs->dead, nb[k]))
			{
				shnsw_repair_list(lk, ref, 0, &vs->dead);
				break;
			}
		}
		for (int l = 1; l <= h->level; l++)
		{
			int			n = lk->ops.read_upper(lk->ops.ctx, shnsw_node_upper_loc(h), l, ubuf);

			for (int k = 0; k < n; k++)
			{
				if (shnsw_refset_has(&vs->dead, ubuf[k]))
				{
					shnsw_repair_list(lk, ref, l, &vs->dead);
					break;
				}
			}
		}
	}
}

/* Pass 3: if the entry point is deleted, the best live node replaces it. */
static void
move_entry_point(VacState *vs)
{
	Buffer		metabuf = ReadBuffer(vs->index, SHNSW_METAPAGE_BLKNO);
	ShnswMetaPage meta;

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	meta = ShnswPageGetMeta(BufferGetPage(metabuf));
	if (meta->entry != SHNSW_INVALID_REF && shnsw_refset_has(&vs->dead, meta->entry))
	{
		ShnswWriteState *state = shnsw_write_start(vs->index);

		meta = ShnswPageGetMeta(shnsw_write_buffer(state, metabuf, 0));
		meta->entry = vs->best;
		meta->entry_level = vs->best == SHNSW_INVALID_REF ? -1 : vs->bestlevel;
		meta->cache_generation++;
		shnsw_write_finish(state);
	}
	UnlockReleaseBuffer(metabuf);
}

/* Index of r in the sorted live set, or -1. */
static int64
live_index(const VacState *vs, ShnswRef r)
{
	ShnswRef   *at = vs->live.n > 0 ?
		bsearch(&r, vs->live.refs, vs->live.n, sizeof(ShnswRef), shnsw_ref_cmp) : NULL;

	return at ? at - vs->live.refs : -1;
}

/* Mark node i and everything reachable from it over adj; stack has room for n. */
static void
reach_from(int64 i, const int64 *start, const int32 *adj, bool *reached, int32 *stack)
{
	int64		top = 0;

	if (reached[i])
		return;
	reached[i] = true;
	stack[top++] = (int32) i;
	while (top > 0)
	{
		int32		u = stack[--top];

		CHECK_FOR_INTERRUPTS();
		for (int64 k = start[u]; k < start[u + 1]; k++)
		{
			if (!reached[adj[k]])
			{
				reached[adj[k]] = true;
				stack[top++] = adj[k];
			}
		}
	}
}

/*
 * Entries of walk_lists' stack: a bound, so its memory does not grow with
 * the graph (small in assertion builds, so that tests overflow it).
 */
#ifdef USE_ASSERT_CHECKING
#define SHNSW_WALK_STACK	64
#else
#define SHNSW_WALK_STACK	65536
#endif

/*
 * walk_lists marks node i and every live node reachable from it, reading
 * each node's layer-0 list from its page: the walk of a graph whose lists
 * do not fit in maintenance_work_mem. Its stack holds SHNSW_WALK_STACK
 * entries; reached nodes it had no room for are found again by sweeps over
 * the nodes reached but not expanded, until there are none.
 */
static void
walk_lists(VacState *vs, ShnswLinker *lk, int64 i, bool *reached, bool *expanded,
		   int32 *stack)
{
	ShnswNodeCopy node;
	int64		top = 0,
				steps = 0,
				cursor = 0;
	bool		overflow = false;

	if (reached[i])
		return;
	reached[i] = true;
	stack[top++] = (int32) i;
	for (;;)
	{
		while (top > 0)
		{
			int32		u = stack[--top];

			if (expanded[u])
				continue;
			expanded[u] = true;
			if (++steps % 1024 == 0)
				vacuum_delay_point(false);
			shnsw_read_node(lk, vs->live.refs[u], 0, &node, NULL);
			if (node.flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE))
				continue;
			for (int k = 0; k < node.count; k++)
			{
				int64		j = live_index(vs, node.list[k]);

				if (j < 0 || reached[j])
					continue;
				reached[j] = true;
				if (top < SHNSW_WALK_STACK)
					stack[top++] = (int32) j;
				else
					overflow = true;
			}
		}
		if (!overflow)
			break;

		/*
		 * the nodes reached that found no room on the stack: a sweep that
		 * resumes where the last one stopped, until the stack is full or it
		 * has gone round once
		 */
		overflow = false;
		for (int64 scanned = 0; scanned < vs->live.n && top < SHNSW_WALK_STACK; scanned++)
		{
			if (reached[cursor] && !expanded[cursor])
				stack[top++] = (int32) cursor;
			cursor = (cursor + 1) % vs->live.n;
		}
		if (top == SHNSW_WALK_STACK)
			overflow = true;	/* there may be more */
	}
}

/* The memory VACUUM may use: autovacuum_work_mem in autovacuum, as the heap's. */
static Size
vac_mem_limit(void)
{
	int			kb = AmAutoVacuumWorkerProcess() && autovacuum_work_mem != -1 ?
		autovacuum_work_mem : maintenance_work_mem;

	return (Size) kb * 1024;
}

/* Pass 4's walk: what it knows about the live nodes (indexes into vs->live). */
typedef struct ReachWalk
{
	int64		n;
	bool		copy_lists;		/* lists copied into start/adj, or read from pages */
	int64	   *start;			/* node i's list is adj[start[i] .. start[i + 1] - 1] */
	int32	   *adj;
	uint8	   *inlinks;		/* incoming links per node, when copied */
	bool	   *reached;
	bool	   *expanded;		/* when reading from pages */
	int32	   *stack;
} ReachWalk;

/*
 * reach_copy_lists reads the live nodes' layer-0 lists, as indexes into the
 * live set, into rw (when they are copied), and counts their incoming links
 * into indeg (if not NULL, for pass 4b). One page at a time.
 */
static void
reach_copy_lists(VacState *vs, ReachWalk *rw, uint8 *indeg)
{
	int64		n = rw->n;
	int			maxdeg = 2 * vs->info->m;
	BlockNumber nblocks = RelationGetNumberOfBlocks(vs->index);
	int64		nadj = 0,
				next = 0;

	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1;
		 (rw->copy_lists || indeg != NULL) && blk < nblocks && next < n; blk++)
	{
		Buffer		buf;
		Page		page;

		vac_delay(vs);
		if (!read_graph_page(vs, blk, &buf))
			continue;
		page = BufferGetPage(buf);
		for (int s = 0; s < ShnswPageGetOpaque(page)->nslots && next < n; s++)
		{
			ShnswNodeHeader *h = shnsw_page_node(page, s, vs->info->node_size);
			ShnswRef   *nb = shnsw_node_neighbors(h);

			/* nodes placed since pass 1 are not in the set: skip them */
			if (vs->live.refs[next] != shnsw_make_ref(blk, s, vs->info->slot_bits))
				continue;
			if (rw->start != NULL)
				rw->start[next] = nadj;
			if (!(h->flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)))
			{
				for (int k = 0; k < Min(h->nneighbors, maxdeg); k++)
				{
					int64		j = live_index(vs, nb[k]);

					if (j < 0)
						continue;
					if (rw->adj != NULL)
						rw->adj[nadj++] = (int32) j;
					if (rw->inlinks != NULL && rw->inlinks[j] < UINT8_MAX)
						rw->inlinks[j]++;
					if (indeg != NULL && indeg[j] < SHNSW_FEW_INLINKS)
						indeg[j]++;
				}
			}
			next++;
		}
		UnlockReleaseBuffer(buf);
	}
	if (rw->start != NULL)
	{
		while (next < n)
			rw->start[next++] = nadj;	/* not found on its page any more */
		rw->start[n] = nadj;
	}
}

/* reach_walk marks what the walk reaches from live node i. */
static void
reach_walk(VacState *vs, ShnswLinker *lk, ReachWalk *rw, int64 i)
{
	if (rw->copy_lists)
		reach_from(i, rw->start, rw->adj, rw->reached, rw->stack);
	else
		walk_lists(vs, lk, i, rw->reached, rw->expanded, rw->stack);
}

/*
 * link_over_shared links unreached live node i (its list in *node) from a
 * reached neighbour of its own whose list is full, over the entry of that
 * list with the most incoming links (at least two, so the node it names
 * keeps another), keeping the copied lists and counts up to date. Under
 * inner product, a link forced over a list's farthest entry instead cuts
 * off the node that entry named (the farthest is a short vector, linked
 * from that list only), and the next walk links that one over another,
 * walk after walk (20 of 1,000 rows of a vacuumed index stayed
 * unreachable). Not under L2 and cosine: there the entry that goes is
 * chosen by distance, and the one with most in-links can be the one a
 * search for it needs (2 rows of 17,000 not found after concurrent
 * inserts and a VACUUM). Returns whether it linked i.
 */
static bool
link_over_shared(VacState *vs, ShnswLinker *lk, ReachWalk *rw, int64 i,
				 const ShnswNodeCopy *node)
{
	for (int k = 0; k < node->count; k++)
	{
		int64		j = live_index(vs, node->list[k]);
		int64		best = -1;

		if (j < 0 || !rw->reached[j])
			continue;
		for (int64 a = rw->start[j]; a < rw->start[j + 1]; a++)
		{
			if (rw->adj[a] == i)
				break;			/* already linked: the copy is stale */
			if (rw->inlinks[rw->adj[a]] >= 2 &&
				(best < 0 || rw->inlinks[rw->adj[a]] > rw->inlinks[rw->adj[best]]))
				best = a;
		}
		if (best < 0 || !shnsw_replace_link(lk, vs->live.refs[j], vs->live.refs[rw->adj[best]],
											vs->live.refs[i]))
			continue;
		rw->inlinks[rw->adj[best]]--;
		if (rw->inlinks[i] < UINT8_MAX)
			rw->inlinks[i]++;
		rw->adj[best] = (int32) i;
		return true;
	}
	return false;
}

/*
 * reach_attach links unreached live node i from a reached node: the first
 * of its own neighbours that is reached (over a shared entry of its list,
 * link_over_shared, when the lists are copied), else the nearest reached
 * node a search from the entry point finds (forced). Returns true if it
 * linked it.
 */
static bool
reach_attach(VacState *vs, ShnswLinker *lk, ReachWalk *rw, int64 i,
			 const ShnswMetaSnapshot *snap, uint8 *code, float *q)
{
	ShnswNodeCopy node;
	bool		linked = false;

	shnsw_read_node(lk, vs->live.refs[i], 0, &node, code);
	if (node.flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE))
		return false;
	if (rw->copy_lists && vs->info->metric == SHNSW_METRIC_IP)
		linked = link_over_shared(vs, lk, rw, i, &node);
	for (int k = 0; k < node.count && !linked; k++)
	{
		int64		j = live_index(vs, node.list[k]);

		if (j >= 0 && rw->reached[j])
			linked = shnsw_add_backlink(lk, node.list[k], 0, vs->live.refs[i], code,
										true, NULL, NULL);
	}
	if (!linked)
	{
		ShnswRef   *nbrs[1];
		int			nnbrs[1];

		sq8_decode(vs->info->lo, vs->info->scale, code, q, vs->info->dims);
		shnsw_find_neighbors(lk, q, snap->entry, snap->entry_level, 0,
							 vs->info->ef_construction,
							 vs->live.refs[i], nbrs, nnbrs);
		for (int k = 0; k < nnbrs[0] && !linked; k++)
		{
			int64		j = live_index(vs, nbrs[0][k]);

			if (j >= 0 && rw->reached[j])
				linked = shnsw_add_backlink(lk, nbrs[0][k], 0, vs->live.refs[i], code,
											true, NULL, NULL);
		}
	}
	return linked;
}

/* Pass 4's side of the walk-and-attach (reachability.h). */
typedef struct VacReach
{
	VacState   *vs;
	ShnswLinker *lk;
	ReachWalk  *rw;
	const ShnswMetaSnapshot *snap;
	uint8	   *code;			/* dims bytes of scratch */
	float	   *q;				/* dims floats of scratch */
} VacReach;

static void
vac_reach_walk(void *arg, int64_t i)
{
	VacReach   *r = (VacReach *) arg;

	reach_walk(r->vs, r->lk, r->rw, i);
}

static bool
vac_reach_reached(void *arg, int64_t i)
{
	return ((VacReach *) arg)->rw->reached[i];
}

static bool
vac_reach_attach(void *arg, int64_t i)
{
	VacReach   *r = (VacReach *) arg;

	return reach_attach(r->vs, r->lk, r->rw, i, r->snap, r->code, r->q);
}

/* The work of each unreached node runs in tmpcxt, reset before it. */
static void
vac_reach_step(void *arg, int64_t i)
{
	VacReach   *r = (VacReach *) arg;

	vac_delay(r->vs);
	MemoryContextReset(r->vs->tmpcxt);
}

static const ShnswReachOps vac_reach_ops = {
	vac_reach_walk, vac_reach_reached, vac_reach_attach, NULL, vac_reach_step
};

/*
 * Pass 4: every live node must be reachable on layer 0 from the entry point,
 * or no search finds it. The heuristic (at any insert), a repair, or links
 * lost to concurrent inserts can cut a node, or a group of nodes that link
 * to each other, off. This pass walks the live nodes' layer-0 lists from the
 * entry point, and links every node the walk missed from a reached node:
 * the nearest of its own neighbours that is reached, or else the nearest
 * reached node a search finds (forced, replacing that node's farthest
 * neighbour if its list is full); what it reaches through the new link
 * counts as reached from then on. Holds no lock between pages.
 *
 * Memory: it copies the lists first (8 bytes per node and 4 per link, up
 * to 2m per node, and 5 bytes per node for the walk) when that fits in
 * maintenance_work_mem with VACUUM's node sets; otherwise it reads each
 * node's list from its page as it walks (one buffer access per node, 2
 * bytes per node and a stack of fixed size).
 */
static void
link_unreached(VacState *vs, ShnswLinker *lk, ShnswRef **few, int64 *nfew)
{
	int64		n = vs->live.n;
	int			maxdeg = 2 * vs->info->m;
	Size		sets = sizeof(ShnswRef) * (Size) (vs->capdead + vs->captofree + vs->caplive);
	Size		walk = (Size) Max(n, 1) * (1 + sizeof(int32)) + (few != NULL ? (Size) Max(n, 1) : 0);
	Size		lists = sizeof(int64) * (Size) (n + 1) + sizeof(int32) * (Size) Max(n * maxdeg, 1);
	ReachWalk	rw = {0};
	uint8	   *indeg = NULL;
	ShnswMetaSnapshot snap;
	uint8	   *code = palloc(vs->info->dims);
	float	   *q = palloc(sizeof(float) * vs->info->dims);
	int64		entry;

	rw.n = n;
	rw.copy_lists = sets + walk + lists <= vac_mem_limit();
	rw.reached = palloc_extended(Max(n, 1), MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	if (rw.copy_lists)
	{
		rw.start = palloc_extended(sizeof(int64) * (n + 1), MCXT_ALLOC_HUGE);
		rw.adj = palloc_extended(sizeof(int32) * Max(n * maxdeg, 1), MCXT_ALLOC_HUGE);
		rw.stack = palloc_extended(sizeof(int32) * Max(n, 1), MCXT_ALLOC_HUGE);
		rw.inlinks = palloc_extended(Max(n, 1), MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	}
	else
	{
		rw.expanded = palloc_extended(Max(n, 1), MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
		rw.stack = palloc(sizeof(int32) * Min(Max(n, 1), SHNSW_WALK_STACK));
	}
	if (!rw.copy_lists)
		ereport(DEBUG2,
				(errmsg("index \"%s\": pass 4 reads neighbour lists from pages (copying them would take %zu kB)",
						RelationGetRelationName(vs->index), lists / 1024)));
	if (few != NULL)
		indeg = palloc_extended(Max(n, 1), MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	reach_copy_lists(vs, &rw, indeg);

	/* the live nodes with few incoming links, for pass 4b */
	if (few != NULL)
	{
		int64		capfew = 0;

		for (int64 i = 0; i < n; i++)
			if (indeg[i] < SHNSW_FEW_INLINKS)
				push_ref(few, nfew, &capfew, vs->live.refs[i]);
		pfree(indeg);
	}

	shnsw_read_meta(vs->index, &snap);
	entry = live_index(vs, snap.entry);
	if (entry >= 0)
	{
		MemoryContext old = MemoryContextSwitchTo(vs->tmpcxt);
		VacReach	r = {vs, lk, &rw, &snap, code, q};

		vs->unreached += shnsw_reach_all(n, entry, &vac_reach_ops, &r);
		MemoryContextSwitchTo(old);
		MemoryContextReset(vs->tmpcxt);
	}
	if (rw.start != NULL)
	{
		pfree(rw.start);
		pfree(rw.adj);
		pfree(rw.inlinks);
	}
	pfree(rw.reached);
	if (rw.expanded != NULL)
		pfree(rw.expanded);
	pfree(rw.stack);
	pfree(code);
	pfree(q);
}

/*
 * Pass 4 again, after 4b, under inner product, until a walk from the entry
 * point reaches every live node (at most SHNSW_REACH_ROUNDS walks): a
 * search for a node's own vector misses most nodes there, pass 4b forces
 * hundreds of links into full lists, and they push other nodes out (9 of
 * 1,500 rows of an insert-built index were left unreachable so). Elsewhere
 * 4b's links rarely cut a node off, and a walk after it could push out the
 * very link 4b gave a node so that a search finds it.
 */
static void
link_unreached_again(VacState *vs, ShnswLinker *lk)
{
	if (vs->info->metric != SHNSW_METRIC_IP)
		return;
	for (int round = 0; round < SHNSW_REACH_ROUNDS; round++)
	{
		int64		before = vs->unreached;

		link_unreached(vs, lk, NULL, NULL);
		if (vs->unreached == before)
			break;
	}
}

/*
 * Pass 4b for node e: link it if a search for it misses it; the nodes that
 * link pushes out of a list are appended to *redo.
 */
static void
find_or_link(VacState *vs, ShnswLinker *lk, ShnswRef e, int ef, ShnswRef **redo,
			 int64 *nredo, int64 *capredo)
{
	ShnswRef	dropped[2 * SHNSW_MAX_M];
	int			ndropped = 0;
	MemoryContext old = MemoryContextSwitchTo(vs->tmpcxt);
	bool		linked = shnsw_make_findable(lk, e, ef, false, dropped, &ndropped);

	MemoryContextSwitchTo(old);
	MemoryContextReset(vs->tmpcxt);
	if (linked)
	{
		vs->unfound++;
		for (int k = 0; k < ndropped; k++)
			push_ref(redo, nredo, capredo, dropped[k]);
	}
}

/*
 * Pass 4b (after a VACUUM that removed nodes): reachable is not enough, a
 * search follows distances. A node whose near in-links went with deleted
 * nodes or repairs, or a small cluster whose links from the rest of the
 * graph did, stays reachable only through distant nodes, and a search for
 * it settles elsewhere however wide it is. This pass searches for each live
 * node's own vector as a scan does, at width ef_construction, and links
 * every node the search misses from the nearest node it reached: that node
 * is among the ones the search expands, so the search now finds the node.
 * Nodes pushed out of a list by such a link are checked again, for a few
 * rounds. Holds no lock between pages.
 */
static void
link_unfound(VacState *vs, ShnswLinker *lk, const ShnswRef *refs, int64 n)
{
	int			ef = vs->info->ef_construction;
	const ShnswRef *cur = refs;
	ShnswRef   *redo[2] = {NULL, NULL};
	int64		cap[2] = {0, 0};

	/* the nodes given, then the ones each round pushed out of lists */
	for (int round = 0; round <= SHNSW_FIND_ROUNDS && n > 0; round++)
	{
		int			b = round % 2;
		int64		nnext = 0;

		for (int64 i = 0; i < n; i++)
		{
			vac_delay(vs);
			find_or_link(vs, lk, cur[i], ef, &redo[b], &nnext, &cap[b]);
		}
		cur = redo[b];
		n = nnext;
	}
	for (int b = 0; b < 2; b++)
		if (redo[b])
			pfree(redo[b]);
}

/*
 * Pass 5 on one graph page: put refs[0..n-1] (deleted nodes of block blk)
 * on the free list. Locks the graph page, then the metapage.
 */
static void
free_nodes(VacState *vs, BlockNumber blk, const ShnswRef *refs, int n)
{
	Buffer		buf = ReadBufferExtended(vs->index, MAIN_FORKNUM, blk, RBM_NORMAL, vs->bas);
	Buffer		metabuf;
	ShnswWriteState *state;
	Page		page;
	ShnswMetaPage meta = begin_page_and_meta(vs, buf, &metabuf, &state, &page);
	shnsw_check_page(vs->index, page, blk, SHNSW_PAGE_GRAPH);
	for (int k = 0; k < n; k++)
	{
		ShnswNodeHeader *h = shnsw_page_node(page, shnsw_ref_slot(refs[k], vs->info->slot_bits),
											 vs->info->node_size);

		Assert(h->flags & SHNSW_NODE_DELETED);
		if (h->flags & SHNSW_NODE_FREE)
			continue;
		/*
		 * The slot keeps its upper record (if it has one), as it keeps its
		 * vector space: the node that reuses the slot rewrites it in place
		 * if it is large enough (insert.c). Its lists stay readable for a
		 * scan that still holds the old node.
		 */
		h->flags |= SHNSW_NODE_FREE;
		h->level = 0;
		h->nneighbors = 0;
		shnsw_node_neighbors(h)[0] = meta->free_head;
		meta->free_head = refs[k];
		meta->free_count++;
	}
	meta->cache_generation++;
	shnsw_write_finish(state);
	UnlockReleaseBuffer(metabuf);
	UnlockReleaseBuffer(buf);
}

/* Set up the state of one VACUUM pass over an index. */
static void
vac_init(VacState *vs, Relation index, BufferAccessStrategy bas)
{
	memset(vs, 0, sizeof(*vs));
	vs->index = index;
	vs->info = shnsw_get_index_info(index);
	vs->bas = bas;
	vs->best = SHNSW_INVALID_REF;
	vs->bestlevel = -1;
	vs->tmpcxt = AllocSetContextCreate(CurrentMemoryContext, "streamhnsw vacuum page",
									   ALLOCSET_DEFAULT_SIZES);
}

/* Free what vac_init and the passes allocated. */
static void
vac_free(VacState *vs)
{
	if (vs->dead.refs)
		pfree(vs->dead.refs);
	if (vs->tofree)
		pfree(vs->tofree);
	if (vs->live.refs)
		pfree(vs->live.refs);
	MemoryContextDelete(vs->tmpcxt);
}

/* Say what pass 4 linked (VACUUM VERBOSE shows it). */
static void
report_links(VacState *vs, int elevel)
{
	if (vs->given_up > 0)
		ereport(elevel,
				(errmsg("index \"%s\": %lld neighbour-list changes ran out of retries; the next VACUUM searches for every node",
						RelationGetRelationName(vs->index), (long long) vs->given_up)));
	if (vs->unreached > 0 || vs->unfound > 0)
		ereport(elevel,
				(errmsg("index \"%s\": linked %lld unreachable nodes and %lld nodes a search for their own vector missed",
						RelationGetRelationName(vs->index),
						(long long) vs->unreached, (long long) vs->unfound)));
}

/* bulkdelete callback of a VACUUM without dead heap tuples. */
static bool
none_dead(ItemPointer tid, void *state)
{
	return false;
}

/*
 * shnsw_bulkdelete is ambulkdelete: marks the nodes of dead heap tuples,
 * repairs the lists that name them, relinks what became unreachable and
 * frees the slots (src/README, VACUUM). No heavyweight lock; one page
 * locked at a time, besides the metapage.
 */
IndexBulkDeleteResult *
shnsw_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
				 IndexBulkDeleteCallback callback, void *callback_state)
{
	Relation	index = info->index;
	BlockNumber nblocks = RelationGetNumberOfBlocks(index);
	VacState	vs;

	if (stats == NULL)
		stats = palloc0(sizeof(IndexBulkDeleteResult));
	vac_init(&vs, index, info->strategy);
	/* every pass runs for every node: what a given-up change left is done */
	(void) shnsw_take_recheck(index);

	/* pass 1: mark */
	mark_all(&vs, nblocks, stats, callback, callback_state);

	/*
	 * Passes 2 to 5 run even when this VACUUM found nothing new to free:
	 * nodes inserted while an earlier VACUUM ran were not in its in-link
	 * count, and links written by inserts racing it can name freed slots.
	 */
	{
		ShnswLinker lk;
		char	   *copy = palloc(BLCKSZ);

		/* pass 2: repair the lists that name deleted nodes */
		shnsw_linker_init(&lk, index, vs.info);
		for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < nblocks; blk++)
		{
			Buffer		buf;

			vac_delay(&vs);
			if (read_graph_page(&vs, blk, &buf))
			{
				MemoryContext old = MemoryContextSwitchTo(vs.tmpcxt);

				repair_page(&vs, &lk, blk, buf, copy);
				MemoryContextSwitchTo(old);
				MemoryContextReset(vs.tmpcxt);
			}
		}
		pfree(copy);

		/* pass 3: a live entry point */
		move_entry_point(&vs);

		/* pass 4: every live node reachable, and found by a search */
		link_unreached(&vs, &lk, NULL, NULL);
		link_unfound(&vs, &lk, vs.live.refs, vs.live.n);
		link_unreached_again(&vs, &lk);
		vs.given_up = lk.given_up;

		/* pass 5: free the deleted nodes, a page at a time */
		for (int64 i = 0; i < vs.ntofree;)
		{
			BlockNumber blk = shnsw_ref_block(vs.tofree[i], vs.info->slot_bits);
			int64		j = i;

			while (j < vs.ntofree && shnsw_ref_block(vs.tofree[j], vs.info->slot_bits) == blk)
				j++;
			vac_delay(&vs);
			free_nodes(&vs, blk, vs.tofree + i, (int) (j - i));
			i = j;
		}
	}

	report_links(&vs, info->message_level);
	vac_free(&vs);
	stats->num_pages = nblocks;
	return stats;
}

/*
 * shnsw_vacuumcleanup is amvacuumcleanup: after a VACUUM without dead
 * tuples, links nodes that concurrent inserts cut off; after any VACUUM,
 * truncates free pages at the end (truncate.c) where it can; reports the
 * counts.
 */
IndexBulkDeleteResult *
shnsw_vacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats)
{
	Relation	index = info->index;

	if (info->analyze_only)
		return stats;
	if (stats == NULL)
	{
		/*
		 * No bulkdelete pass (no dead heap tuples: a VACUUM after inserts).
		 * Links that concurrent inserts pruned can have cut nodes off; link
		 * every node the walk from the entry point misses, and every node
		 * left with few incoming links that a search misses (passes 1, 4
		 * and 4b, the last for those nodes only).
		 */
		VacState	vs;
		bool		recheck;

		stats = palloc0(sizeof(IndexBulkDeleteResult));
		vac_init(&vs, index, info->strategy);
		recheck = shnsw_take_recheck(index);
		if (recheck)
			ereport(info->message_level,
					(errmsg("index \"%s\": neighbour-list changes ran out of retries since the last VACUUM: searching for every node",
							RelationGetRelationName(index))));
		mark_all(&vs, RelationGetNumberOfBlocks(index), stats, none_dead, NULL);
		if (vs.live.n > 0)
		{
			ShnswLinker lk;
			ShnswRef   *few = NULL;
			int64		nfew = 0;

			shnsw_linker_init(&lk, index, vs.info);
			link_unreached(&vs, &lk, recheck ? NULL : &few, &nfew);
			if (recheck)
				link_unfound(&vs, &lk, vs.live.refs, vs.live.n);
			else
				link_unfound(&vs, &lk, few, nfew);
			link_unreached_again(&vs, &lk);
			if (few)
				pfree(few);
			vs.given_up = lk.given_up;
		}
		report_links(&vs, info->message_level);
		vac_free(&vs);
	}

	/* last: whole free pages at the end go back to the operating system */
	{
		ShnswIndexInfo *ii = shnsw_get_index_info(index);

		(void) shnsw_truncate_tail(index, ii, info->strategy, info->message_level);
		pfree(ii);
	}
	stats->num_pages = RelationGetNumberOfBlocks(index);
	return stats;
}
