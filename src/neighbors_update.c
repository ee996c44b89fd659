/*-------------------------------------------------------------------------
 *
 * neighbors_update.c
 *	  Changing neighbour lists on disk safely while other backends insert,
 *	  vacuum and search: back-links, adoption, repair around deleted nodes,
 *	  and the findability check. Used by inserts (back-links to a new node)
 *	  and by VACUUM (repairing lists that point at deleted nodes). Reading
 *	  and choosing is neighbors_find.c's.
 *
 * Concurrency. Several backends may change the same list at once (two
 * inserts linking back from one neighbour; an insert and VACUUM). A change
 * is computed from a copy read under a share lock (choosing neighbours needs
 * the codes of other nodes, on other pages, and a backend must never hold
 * one page's exclusive lock while waiting for another's: two backends doing
 * so in opposite order would deadlock on LWLocks). The new list is then
 * written under an exclusive lock only if the list on the page still equals
 * the copy it was computed from; otherwise the change is recomputed. A
 * write never goes to a free slot (whose first neighbour entry links the
 * free list), and an upper-layer list is written only if its record still
 * belongs to the node.
 *
 * A change recomputed SHNSW_LIST_RETRIES times without getting written
 * gives up, but never silently: it flags the metapage (SHNSW_META_RECHECK),
 * and the next VACUUM searches for every node and links those a search
 * misses (vacuum.c, pass 4b), which is what the lost link was for.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"

#include "buildgraph.h"
#include "format.h"
#include "kernels.h"
#include "meta.h"
#include "neighbors_find.h"
#include "neighbors_select.h"
#include "neighbors_update.h"
#include "options.h"
#include "pageaccess.h"
#include "pages.h"
#include "pagewrite.h"
#include "search.h"

/* How much wider a repair's search may run again when deleted nodes crowd it. */
#define SHNSW_REPAIR_WIDEN 8

/* How often a list change is recomputed when others keep changing it. */
#define SHNSW_LIST_RETRIES 8

/*
 * gave_up records that a list change ran out of retries: it sets
 * SHNSW_META_RECHECK on the metapage (if not set yet), so that the next
 * VACUUM finishes what the change was for. Locks only the metapage.
 */
static void
gave_up(ShnswLinker *lk)
{
	Buffer		buf = ReadBuffer(lk->index, SHNSW_METAPAGE_BLKNO);

	lk->given_up++;
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	if (!(ShnswPageGetMeta(BufferGetPage(buf))->flags & SHNSW_META_RECHECK))
	{
		ShnswWriteState *state = shnsw_write_start(lk->index);

		ShnswPageGetMeta(shnsw_write_buffer(state, buf, 0))->flags |= SHNSW_META_RECHECK;
		shnsw_write_finish(state);
	}
	UnlockReleaseBuffer(buf);
}

/*
 * shnsw_take_recheck clears SHNSW_META_RECHECK and returns whether it was
 * set (VACUUM, before its passes: changes that give up after this set it
 * again). Locks only the metapage.
 */
bool
shnsw_take_recheck(Relation index)
{
	Buffer		buf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	bool		set;

	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	set = (ShnswPageGetMeta(BufferGetPage(buf))->flags & SHNSW_META_RECHECK) != 0;
	if (set)
	{
		ShnswWriteState *state = shnsw_write_start(index);

		ShnswPageGetMeta(shnsw_write_buffer(state, buf, 0))->flags &= ~SHNSW_META_RECHECK;
		shnsw_write_finish(state);
	}
	UnlockReleaseBuffer(buf);
	return set;
}

/*
 * search_for_code prepares search s for the vector a node's code stands
 * for (decoded into q, dims floats); the caller frees sq's arrays and s.
 */
static void
search_for_code(ShnswLinker *lk, const uint8 *ecode, float *q, Sq8Query *sq, ShnswSearch *s)
{
	sq->dim = lk->dims;
	sq->qs = palloc(sizeof(float) * lk->dims);
	sq->w = palloc(sizeof(float) * lk->dims);
	sq8_decode(lk->info->lo, lk->info->scale, ecode, q, lk->dims);
	sq8_prepare_query(sq, shnsw_code_metric(lk->info->metric), q, lk->info->lo,
					  lk->info->scale);
	shnsw_search_init(s, sq, &lk->ops, lk->m, 0);
}

/*
 * search_finds searches for node e's own vector (its code, decoded) as a
 * scan does: from where a scan's layer-0 search starts
 * (shnsw_search_start), layer 0 at width ef. Returns true if the search reaches e; if not,
 * *nearest is the nearest live node it reached (SHNSW_INVALID_REF if none),
 * the node from which a link to e makes this search find it. Holds no lock
 * on return.
 */
static bool
search_finds(ShnswLinker *lk, ShnswRef e, const uint8 *ecode, ShnswRef entry,
			 int entry_level, int ef, ShnswRef *nearest)
{
	Sq8Query	sq;
	ShnswSearch s;
	uint32	   *out = palloc(sizeof(uint32) * (ef + 1));
	float	   *q = palloc(sizeof(float) * lk->dims);
	float		best = 0;
	bool		found = false;
	int			n;

	*nearest = SHNSW_INVALID_REF;
	search_for_code(lk, ecode, q, &sq, &s);
	shnsw_search_set_target(&s, e);
	n = shnsw_search_next(&s, shnsw_search_start(&s, entry, entry_level), ef, out);
	found = s.target_seen;
	for (int k = 0; k < n && !found; k++)
	{
		const ShnswCand *c = &s.cands[out[k]];

		if (!(c->node_flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)) &&
			(*nearest == SHNSW_INVALID_REF || c->d < best))
		{
			*nearest = c->ref;
			best = c->d;
		}
	}
	shnsw_search_free(&s);
	pfree(out);
	pfree(q);
	pfree(sq.qs);
	pfree(sq.w);
	return found;
}

/*
 * shnsw_make_findable checks that a search for live node e's own vector, as
 * a scan makes it at width ef, finds e; if it does not, it links e from the
 * nearest node that search reached (forced): that node is one the search
 * expands, so the same search now finds e (but see copies, below). Returns
 * true if it added a link; the nodes the link pushed out of that node's
 * list are appended to dropped (room for 2m; *ndropped counts them).
 */
bool
shnsw_make_findable(ShnswLinker *lk, ShnswRef e, int ef, bool copies,
					ShnswRef *dropped, int *ndropped)
{
	ShnswMetaSnapshot snap;
	ShnswNodeCopy node;
	ShnswRef	nearest;
	uint8	   *ecode = palloc(lk->dims);
	bool		linked = false;

	shnsw_read_node(lk, e, 0, &node, ecode);
	shnsw_read_meta(lk->index, &snap);
	if ((node.flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)) ||
		snap.entry == SHNSW_INVALID_REF || snap.entry == e ||
		search_finds(lk, e, ecode, snap.entry, snap.entry_level, ef, &nearest) ||
		nearest == SHNSW_INVALID_REF)
		goto done;

	/*
	 * Unless copies is set, a search that reached a copy of e's vector
	 * did its job: VACUUM linking every copy of a vector to another by
	 * force would evict the links that lead out of the group of copies.
	 * An insert links its one new copy (so the copies stay reachable).
	 */
	if (!copies)
	{
		uint8	   *ncode = palloc(lk->dims);
		bool		copy;

		shnsw_read_codes(lk, &nearest, 1, ncode);
		copy = memcmp(ncode, ecode, lk->dims) == 0;
		pfree(ncode);
		if (copy)
			goto done;
	}
	linked = shnsw_add_backlink(lk, nearest, 0, e, ecode, true, dropped, ndropped);
done:
	pfree(ecode);
	return linked;
}

/* ---------- writing ---------- */

/*
 * write_list_if replaces node e's list on a layer with list[0..cnt-1] if
 * the list on the page still equals expect[0..nexpect-1]. Returns false if
 * it did not (someone changed it since it was read: recompute). A free
 * slot, or an upper record that no longer belongs to e, is left alone and
 * counts as done. Exclusively locks one page, released on return.
 */
static bool
write_list_if(ShnswLinker *lk, ShnswRef e, ShnswUpperLoc upper, int layer,
			  const ShnswRef *expect, int nexpect, const ShnswRef *list, int cnt)
{
	int			slot_bits = lk->info->slot_bits;
	BlockNumber blk = layer == 0 ? shnsw_ref_block(e, slot_bits) : upper.block;
	Buffer		buf = ReadBuffer(lk->index, blk);
	Page		page = BufferGetPage(buf);
	ShnswRef   *cur;
	uint16	   *curcnt;
	bool		done = true;

	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	if (layer == 0)
	{
		ShnswNodeHeader *h;

		shnsw_check_page(lk->index, page, blk, SHNSW_PAGE_GRAPH);
		if (shnsw_ref_slot(e, slot_bits) >= shnsw_graph_nslots(lk->index, page, blk, lk->info->node_size))
			shnsw_corrupt(lk->index, blk, "node slot", shnsw_ref_slot(e, slot_bits));
		h = shnsw_page_node(page, shnsw_ref_slot(e, slot_bits), lk->info->node_size);
		if (h->flags & SHNSW_NODE_FREE)
			goto out;
		cur = shnsw_node_neighbors(h);
		curcnt = &h->nneighbors;
	}
	else
	{
		ShnswUpperHeader *u;

		shnsw_check_page(lk->index, page, blk, SHNSW_PAGE_UPPER);
		u = shnsw_upper_record(lk->index, page, blk, upper.offset, lk->m);
		if (u == NULL || u->node != e || u->level < layer)
			goto out;
		cur = shnsw_upper_neighbors(u, layer, lk->m);
		curcnt = &shnsw_upper_counts(u)[layer - 1];
	}
	if (*curcnt != nexpect || memcmp(cur, expect, sizeof(ShnswRef) * nexpect) != 0 ||
		shnsw_debug_list_conflicts)
		done = false;
	else
	{
		ShnswWriteState *state = shnsw_write_start(lk->index);
		Page		wpage = shnsw_write_buffer(state, buf, 0);

		/* the same offsets in the WAL copy of the page */
		memcpy((char *) wpage + ((char *) cur - (char *) page), list, sizeof(ShnswRef) * cnt);
		*(uint16 *) ((char *) wpage + ((char *) curcnt - (char *) page)) = cnt;
		shnsw_write_finish(state);
	}
out:
	UnlockReleaseBuffer(buf);
	return done;
}

static bool
list_has(const ShnswRef *list, int n, ShnswRef r)
{
	for (int k = 0; k < n; k++)
		if (list[k] == r)
			return true;
	return false;
}

/*
 * ShnswListOps over a copy of a list on a page: the codes of its entries
 * are read (the last, the new node's, is given), distances are from the
 * owner's code.
 */
typedef struct DiskListArg
{
	ShnswLinker *lk;
	uint8	   *codes;			/* room for max + 1 codes */
	const uint8 *newcode;
	const uint8 *ecode;			/* the list's owner */
} DiskListArg;

static void
disk_list_distances(void *arg, const uint32_t *list, int n, float *d)
{
	DiskListArg *a = (DiskListArg *) arg;
	ShnswLinker *lk = a->lk;

	shnsw_read_codes(lk, list, n - 1, a->codes);
	memcpy(a->codes + (Size) (n - 1) * lk->dims, a->newcode, lk->dims);
	shnsw_code_distances(lk, a->ecode, a->codes, n, d);
}

static int
disk_list_choose(void *arg, uint32_t *list, float *d, int n, int max, int *nchosen)
{
	DiskListArg *a = (DiskListArg *) arg;

	/*
	 * Pruned connections are kept, as the build keeps them (src/README,
	 * Departures): the list is filled up to max with the candidates the
	 * heuristic passed over, nearest first, so a full list gives up exactly
	 * one entry (the farthest passed-over one, or the new node) instead of
	 * every passed-over one. The callers re-home what goes: inserts give
	 * it a link from the new node or the search check (insert.c, rehome),
	 * VACUUM walks for reachability again.
	 */
	return shnsw_select_neighbors(a->lk, list, d, a->codes, n, max, max, nchosen);
}

static const ShnswListOps disk_list_ops = {disk_list_distances, disk_list_choose, NULL, NULL};

/*
 * shnsw_add_backlink adds a link from e to a new node on a layer. If e's
 * list is full, the heuristic chooses among its neighbours and the new
 * node; with force, the new node replaces e's farthest neighbour if the
 * heuristic would drop it (used so that a new node gets at least one
 * incoming link). Deleted and free nodes get no new links. Returns whether
 * e's list holds the new node afterwards. The nodes the change took out of
 * e's list are appended to dropped (room for 2m; *ndropped counts them),
 * so that the caller can give them a link elsewhere. Running out of
 * retries is recorded for VACUUM (gave_up).
 */
bool
shnsw_add_backlink(ShnswLinker *lk, ShnswRef e, int layer, ShnswRef newref,
				   const uint8 *newcode, bool force, ShnswRef *dropped, int *ndropped)
{
	int			max = layer == 0 ? 2 * lk->m : lk->m;
	ShnswNodeCopy node;
	ShnswRef	list[2 * SHNSW_MAX_M + 1];
	uint8	   *codes = palloc((Size) (max + 1) * lk->dims);
	uint8	   *ecode = palloc(lk->dims);
	DiskListArg arg = {lk, codes, newcode, ecode};
	bool		kept = false;
	int			attempt;

	if (e == newref)
		goto done;				/* a node never names itself */
	for (attempt = 0; attempt < SHNSW_LIST_RETRIES; attempt++)
	{
		int			cnt;

		shnsw_read_node(lk, e, layer, &node, ecode);
		if (node.flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE))
			break;
		if (layer > node.level)
			break;
		memcpy(list, node.list, sizeof(ShnswRef) * node.count);
		cnt = shnsw_backlink(list, node.count, max, newref, force, &disk_list_ops, &arg, &kept,
							 NULL);
		if (cnt < 0 || !kept)
			break;				/* holds it already, or nothing to write */
		if (write_list_if(lk, e, node.upper, layer, node.list, node.count, list, cnt))
		{
			for (int k = 0; k < node.count && dropped != NULL; k++)
				if (!list_has(list, cnt, node.list[k]))
					dropped[(*ndropped)++] = node.list[k];
			goto done;
		}
		kept = false;
	}
	if (attempt == SHNSW_LIST_RETRIES)
		gave_up(lk);
done:
	pfree(codes);
	pfree(ecode);
	return kept;
}

/*
 * shnsw_replace_link replaces old by newref in live node e's layer-0 list
 * (VACUUM's pass 4, which chose old as a node other links also reach).
 * Returns false, changing nothing, if e's list does not hold old (any
 * more), or already holds newref. Running out of retries is recorded
 * (gave_up). Holds no lock on return.
 */
bool
shnsw_replace_link(ShnswLinker *lk, ShnswRef e, ShnswRef old, ShnswRef newref)
{
	ShnswNodeCopy node;
	ShnswRef	list[2 * SHNSW_MAX_M];

	for (int attempt = 0; attempt < SHNSW_LIST_RETRIES; attempt++)
	{
		int			at = -1;

		shnsw_read_node(lk, e, 0, &node, NULL);
		if ((node.flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)) || e == newref ||
			list_has(node.list, node.count, newref))
			return false;
		for (int k = 0; k < node.count && at < 0; k++)
			if (node.list[k] == old)
				at = k;
		if (at < 0)
			return false;
		memcpy(list, node.list, sizeof(ShnswRef) * node.count);
		list[at] = newref;
		if (write_list_if(lk, e, node.upper, 0, node.list, node.count, list, node.count))
			return true;
	}
	gave_up(lk);
	return false;
}

/*
 * shnsw_adopt appends to node e's layer-0 list those of refs[0..n-1] it
 * does not hold yet, while it has room: an insert gives a link to the
 * nodes its back-links took out of its neighbours' lists, which might
 * have been their only incoming link. Never prunes anything. Returns how
 * many of refs it had no room for; they are moved to the front of refs. If
 * it runs out of retries it adopted none: it returns n, so that the caller
 * checks them all, and records it (gave_up).
 */
int
shnsw_adopt(ShnswLinker *lk, ShnswRef e, ShnswRef *refs, int n)
{
	ShnswNodeCopy node;
	ShnswRef	list[2 * SHNSW_MAX_M];

	for (int attempt = 0; attempt < SHNSW_LIST_RETRIES; attempt++)
	{
		int			cnt,
					left = 0;

		shnsw_read_node(lk, e, 0, &node, NULL);
		if (node.flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE))
			return 0;
		memcpy(list, node.list, sizeof(ShnswRef) * node.count);
		cnt = node.count;
		for (int k = 0; k < n && cnt < 2 * lk->m; k++)
			if (refs[k] != e && !list_has(list, cnt, refs[k]))
				list[cnt++] = refs[k];
		if (cnt == node.count ||
			write_list_if(lk, e, node.upper, 0, node.list, node.count, list, cnt))
		{
			/* move the ones left out to the front */
			for (int k = 0; k < n; k++)
				if (refs[k] != e && !list_has(list, cnt, refs[k]))
					refs[left++] = refs[k];
			return left;
		}
	}
	gave_up(lk);
	return n;
}

/* ---------- repair (VACUUM) ---------- */

/*
 * repair_search_width searches for the vector q stands for (prepared in s)
 * from the entry point, as an insert would, at width ef on a layer, and
 * puts the live nodes it finds, other than e and members of dead, into
 * cands (room for cap); returns how many and sets *nfound to how many
 * nodes it found in all.
 */
static int
repair_search_width(ShnswLinker *lk, ShnswSearch *s, const ShnswMetaSnapshot *snap, ShnswRef e,
					int layer, int ef, const ShnswRefSet *dead, ShnswRef *cands, int cap,
					int *nfound)
{
	uint32	   *out = palloc(sizeof(uint32) * (ef + 1));
	ShnswRef	ep = shnsw_search_descend(s, snap->entry, snap->entry_level, layer);
	int			n = 0;

	*nfound = layer > 0 ? shnsw_search_upper_layer(s, ep, layer, ef, out) :
		shnsw_search_next(s, ep, ef, out);
	for (int k = 0; k < *nfound && n < cap; k++)
	{
		const ShnswCand *c = &s->cands[out[k]];

		if (!(c->node_flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)) && c->ref != e &&
			!shnsw_refset_has(dead, c->ref))
			cands[n++] = c->ref;
	}
	pfree(out);
	return n;
}

/*
 * repair_width is the width of a repair's search on a layer:
 * ef_construction, but at least twice the list's length (small
 * ef_construction builds: the repair chooses among more than it keeps).
 */
static int
repair_width(const ShnswLinker *lk, int layer)
{
	return Max(lk->info->ef_construction, 2 * (layer == 0 ? 2 * lk->m : lk->m));
}

/*
 * repair_search finds candidates for node e's list on a layer by a search
 * for its vector (its code) from the entry point at width repair_width, as
 * an insert of e would, and puts the live ones into cands (room for
 * repair_width); returns how many. All of them, not only the heuristic's
 * choice: the repair fills the list from them. The deleted nodes are still
 * in the graph (waypoints) and take places in the search's results: when
 * they took more than a quarter, the search runs again, wider by the share
 * they took (at most SHNSW_REPAIR_WIDEN times), so that mass deletes still
 * leave about repair_width live candidates. Holds no lock on return.
 */
static int
repair_search(ShnswLinker *lk, ShnswRef e, int layer, const uint8 *ecode,
			  const ShnswRefSet *dead, ShnswRef *cands)
{
	ShnswMetaSnapshot snap;
	Sq8Query	sq;
	ShnswSearch s;
	int			ef = repair_width(lk, layer);
	float	   *q;
	int			nfound,
				n;

	shnsw_read_meta(lk->index, &snap);
	if (snap.entry == SHNSW_INVALID_REF || snap.entry_level < layer)
		return 0;
	q = palloc(sizeof(float) * lk->dims);
	search_for_code(lk, ecode, q, &sq, &s);
	n = repair_search_width(lk, &s, &snap, e, layer, ef, dead, cands, ef, &nfound);
	if (nfound >= ef && n < ef - ef / 4)
	{
		int			wider = Min((int64) ef * nfound / Max(n, 1), (int64) ef * SHNSW_REPAIR_WIDEN);

		shnsw_search_free(&s);
		shnsw_search_init(&s, &sq, &lk->ops, lk->m, 0);
		n = repair_search_width(lk, &s, &snap, e, layer, wider, dead, cands, ef, &nfound);
	}
	shnsw_search_free(&s);
	pfree(q);
	pfree(sq.qs);
	pfree(sq.w);
	return n;
}

/*
 * repair_fill makes the repaired list into out and returns its length. It
 * keeps every live neighbour of node and fills the deleted ones' (gone[])
 * places and any room left, up to max: first with the heuristic's choices
 * chosen[0..nchosen-1], nearest first, then with the nearest candidates of
 * pool it passed over (lists grow by back-links, unpruned until full, so
 * the heuristic alone keeps far fewer; recall falls without them). Dropping
 * no live link means a VACUUM interrupted after this leaves no node harder
 * to find than before it.
 */
static int
repair_fill(const ShnswNodeCopy *node, const bool *gone, const ShnswRef *chosen, int nchosen,
			const ShnswRef *pool, const float *pool_d, int npool, int max, ShnswRef *out)
{
	int			nout = 0;

	for (int k = 0; k < node->count; k++)
		if (!gone[k])
			out[nout++] = node->list[k];
	for (int k = 0; k < nchosen && nout < max; k++)
		if (!list_has(out, nout, chosen[k]))
			out[nout++] = chosen[k];
	while (nout < max)
	{
		int			best = -1;

		for (int k = 0; k < npool; k++)
			if (!list_has(out, nout, pool[k]) && (best < 0 || pool_d[k] < pool_d[best]))
				best = k;
		if (best < 0)
			break;
		out[nout++] = pool[best];
	}
	return nout;
}

/*
 * refs_add_distinct appends more[0..nmore-1] to refs[0..n-1] (room for cap)
 * and leaves them sorted and distinct; returns the count.
 */
static int
refs_add_distinct(ShnswRef *refs, int n, int cap, const ShnswRef *more, int nmore)
{
	int			u = 0;

	for (int k = 0; k < nmore && n < cap; k++)
		refs[n++] = more[k];
	if (n <= 1)
		return n;
	qsort(refs, n, sizeof(ShnswRef), shnsw_ref_cmp);
	for (int k = 0; k < n; k++)
		if (u == 0 || refs[k] != refs[u - 1])
			refs[u++] = refs[k];
	return u;
}

/*
 * repair_candidates collects into cands (room for cap, cap > count) the
 * candidates for node's list on a layer: its live neighbours, the live
 * neighbours of its deleted ones (the two-hop neighbourhood through each
 * hole) and searched[0..nsearched-1], distinct; gone[k] says whether
 * node->list[k] is deleted. A slot that was free when VACUUM collected dead
 * may hold a new (level-0) node by now, as inserts reuse free slots: it is
 * deleted only if it still says so, or, on an upper layer, if it no longer
 * reaches this layer. Returns the count; *ndead the holes.
 */
static int
repair_candidates(ShnswLinker *lk, ShnswRef e, int layer, const ShnswNodeCopy *node,
				  const ShnswRefSet *dead, const ShnswRef *searched, int nsearched,
				  ShnswRef *cands, int cap, bool *gone, int *ndead)
{
	ShnswNodeCopy via;
	int			n = 0;

	*ndead = 0;
	for (int k = 0; k < node->count; k++)
	{
		gone[k] = false;
		if (shnsw_refset_has(dead, node->list[k]))
		{
			shnsw_read_node(lk, node->list[k], layer, &via, NULL);
			gone[k] = (via.flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE)) != 0 ||
				via.level < layer;
		}
		if (!gone[k])
		{
			cands[n++] = node->list[k];
			continue;
		}
		(*ndead)++;
		/* room is kept for the rest of the list's live neighbours */
		for (int j = 0; j < via.count && n < cap - node->count; j++)
			if (via.list[j] != e && !shnsw_refset_has(dead, via.list[j]))
				cands[n++] = via.list[j];
	}
	return refs_add_distinct(cands, n, cap, searched, nsearched);
}

/*
 * repair_backlinks links the nodes a repair added to e's list (out but not
 * old) back to e, as an insert links its neighbours back to it: the
 * repaired node gets incoming links from its new neighbourhood, not only
 * outgoing ones (its old in-links may have come from the deleted nodes).
 * Nodes a full list drops are left to passes 4 and 4b.
 */
static void
repair_backlinks(ShnswLinker *lk, ShnswRef e, int layer, const uint8 *ecode,
				 const ShnswNodeCopy *old, const ShnswRef *out, int nout)
{
	for (int k = 0; k < nout; k++)
		if (!list_has(old->list, old->count, out[k]))
			shnsw_add_backlink(lk, out[k], layer, e, ecode, false, NULL, NULL);
}

/*
 * shnsw_repair_list rewrites node e's list on a layer if it names deleted
 * nodes (members of dead, a sorted set): the live neighbours stay, and the
 * deleted ones are replaced by the heuristic's choice among e's live
 * neighbours and the deleted ones' live neighbours, then the nearest of
 * them, up to the list's capacity. When those are fewer than the capacity
 * (mass deletes), a search for e from the entry point adds candidates, as
 * pgvector re-inserts every such node. The nodes the repair adds get a
 * link back to e. Returns true if it changed the list. Running out of
 * retries is recorded (gave_up). Holds no lock on return.
 */
bool
shnsw_repair_list(ShnswLinker *lk, ShnswRef e, int layer, const ShnswRefSet *dead)
{
	int			max = layer == 0 ? 2 * lk->m : lk->m;
	/* the list, a few deleted neighbours' lists, a search */
	int			cap = 5 * max + repair_width(lk, layer);
	ShnswNodeCopy node;
	ShnswRef   *cands = palloc(sizeof(ShnswRef) * cap);
	float	   *d = palloc(sizeof(float) * cap);
	uint8	   *codes = palloc((Size) cap * lk->dims);
	uint8	   *ecode = palloc(lk->dims);
	ShnswRef   *pool = palloc(sizeof(ShnswRef) * cap);
	float	   *pool_d = palloc(sizeof(float) * cap);
	ShnswRef   *searched = palloc(sizeof(ShnswRef) * repair_width(lk, layer));
	int			nsearched = -1;
	bool		gone[2 * SHNSW_MAX_M];
	ShnswRef	out[2 * SHNSW_MAX_M];
	int			nout;
	bool		changed = false;
	int			attempt;

	for (attempt = 0; attempt < SHNSW_LIST_RETRIES; attempt++)
	{
		int			n,
					ndead,
					npool;

		CHECK_FOR_INTERRUPTS();
		shnsw_read_node(lk, e, layer, &node, ecode);
		if (node.flags & (SHNSW_NODE_DELETED | SHNSW_NODE_FREE))
			break;
		n = repair_candidates(lk, e, layer, &node, dead, searched, Max(nsearched, 0), cands,
							  cap, gone, &ndead);
		Assert(n <= cap);
		if (ndead == 0)
			break;
		/* the search does not depend on the list: once per node and layer */
		if (nsearched < 0 && n < max)
		{
			nsearched = repair_search(lk, e, layer, ecode, dead, searched);
			n = refs_add_distinct(cands, n, cap, searched, nsearched);
		}
		shnsw_read_codes(lk, cands, n, codes);
		shnsw_code_distances(lk, ecode, codes, n, d);
		memcpy(pool, cands, sizeof(ShnswRef) * n);
		memcpy(pool_d, d, sizeof(float) * n);
		npool = n;
		n = shnsw_select_neighbors(lk, cands, d, codes, n, max, 0, NULL);

		nout = repair_fill(&node, gone, cands, n, pool, pool_d, npool, max, out);
		if (write_list_if(lk, e, node.upper, layer, node.list, node.count, out, nout))
		{
			changed = true;
			repair_backlinks(lk, e, layer, ecode, &node, out, nout);
			break;
		}
	}
	if (attempt == SHNSW_LIST_RETRIES)
		gave_up(lk);
	pfree(cands);
	pfree(d);
	pfree(codes);
	pfree(ecode);
	pfree(pool);
	pfree(pool_d);
	pfree(searched);
	return changed;
}
