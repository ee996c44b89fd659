/*-------------------------------------------------------------------------
 *
 * cache_order.c
 *	  The order of a copy's node records in memory: breadth-first over
 *	  layer 0 from the entry point, so that the nodes a search reads
 *	  together lie together whatever order the index's pages hold them in
 *	  (src/README, "Shared cache", Record order).
 *
 * An index built by CREATE INDEX has its pages in graph order already
 * (layout.c); one filled by inserts has each page's nodes in the order
 * they arrived, far apart in the graph. A regrowth (the copy rebuilt
 * while the old one serves) walks the graph in the old copy, in memory,
 * and gives each node its place before the pages are copied.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "cache_int.h"
#include "format.h"
#include "pages.h"
#include "storage/bufpage.h"

#define NO_PAGE		UINT32_MAX

/* what list_read is given */
typedef struct ListRead
{
	CachePageDesc *d;
	uint32		slot;
	const char *src;
	int			max;
	ShnswRef   *out;
} ListRead;

/* seq_read's read for read_list: the list, at most max entries */
static pg_attribute_always_inline int
list_read(void *arg)
{
	ListRead   *r = (ListRead *) arg;
	int			n;

	if (r->slot >= CACHE_LOAD(uint16, &r->d->nslots))
		return -1;
	n = CACHE_LOAD(uint16, &((const ShnswNodeHeader *) r->src)->nneighbors);
	n = Min(n, r->max);
	memcpy(r->out, shnsw_node_neighbors((const ShnswNodeHeader *) r->src),
		   sizeof(ShnswRef) * n);
	return n;
}

/*
 * read_list copies the layer-0 list of node ref in copy li into out (at
 * most max entries) and returns its length, or -1 if the copy lacks the
 * node or the read keeps colliding with writers. What it reads is only a
 * hint (order_place checks each reference).
 */
static int
read_list(const LocalCopy *li, ShnswRef ref, ShnswRef *out, int max)
{
	CacheCopy  *cp = li->cp;
	ListRead	r;

	r.src = copy_record_addr(li, ref, cp->slot_bits, cp->npp, cp->node_size, &r.d);
	if (r.src == NULL)
		return -1;
	r.slot = shnsw_ref_slot(ref, cp->slot_bits);
	r.max = max;
	r.out = out;
	return seq_read(r.d, list_read, &r);
}

/*
 * Give node ref the next place in `to` if it has none yet and is a node
 * slot of a graph page the copy holds (gidx: block -> page slot). False if
 * it had one or is no such node (what the walk read is only a hint: a
 * list read while a writer changed it may hold anything).
 */
static bool
order_place(LocalCopy *to, const uint32 *gidx, BlockNumber nblocks, ShnswRef ref)
{
	CacheCopy  *cp = to->cp;
	uint32		blk = shnsw_ref_block(ref, cp->slot_bits);
	uint32		slot = shnsw_ref_slot(ref, cp->slot_bits);
	uint32	   *pos;

	if (blk >= nblocks || gidx[blk] == NO_PAGE || slot >= (uint32) cp->npp)
		return false;
	pos = &to->recpos[(Size) gidx[blk] * cp->npp + slot];
	if (*pos != RECPOS_NONE)
		return false;
	*pos = pg_atomic_fetch_add_u32(&cp->pnext, 1);
	return true;
}

/*
 * cache_order_records places the records of copy `to`, a regrowth laid
 * out and published but with no page copied yet, breadth-first over layer
 * 0 from entry: a node's place is set when the walk first meets it, and
 * its list is read in `from`, the index's copy that serves meanwhile (if
 * there is none, nothing is placed). Only the graph pages of types (the
 * pages copy_pages will copy, into page slots in block order) are placed:
 * writers place the records of pages added since, in their own page
 * slots, from the same counter (pnext). A node `from` lacks (a page added
 * after it outgrew) is placed when met but not walked through; nodes the
 * walk does not reach are placed by the page copy, after. Every 4,096
 * nodes it asks yields(slot) whether the build gives way (to a truncation:
 * cache_build.c, build_yields), and stops if so. Returns how many it
 * placed.
 */
uint32
cache_order_records(Relation index, LocalCopy *to, const uint8 *types, BlockNumber nblocks,
					ShnswRef entry, bool (*yields) (int slot), int slot)
{
	CacheCopy  *cp = to->cp;
	LocalCopy  *from = cache_local_map(index, true);
	uint32	   *gidx;
	ShnswRef   *queue;
	ShnswRef	list[2 * SHNSW_MAX_M];
	uint32		ng = 0,
				head = 0,
				tail = 0;

	if (from == NULL || from == to)
		return 0;
	gidx = palloc_extended(sizeof(uint32) * (Size) Max(nblocks, 1),
						   MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
	if (gidx == NULL)
		return 0;
	for (BlockNumber b = 0; b < nblocks; b++)
		gidx[b] = types[b] == SHNSW_PAGE_GRAPH ? ng++ : NO_PAGE;
	queue = palloc_extended(sizeof(ShnswRef) * (Size) Max(ng, 1) * cp->npp,
							MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
	if (queue == NULL)
	{
		pfree(gidx);
		return 0;
	}
	if (order_place(to, gidx, nblocks, entry))
		queue[tail++] = entry;
	while (head < tail)
	{
		int			n = read_list(from, queue[head++], list, 2 * cp->m);

		for (int k = 0; k < n; k++)
			if (order_place(to, gidx, nblocks, list[k]))
				queue[tail++] = list[k];
		if ((head & 4095) == 0)
		{
			CHECK_FOR_INTERRUPTS();
			if (yields(slot))
				break;			/* the page copy gives the build up next */
		}
	}
	pfree(queue);
	pfree(gidx);
	return tail;
}

/*
 * cache_page_near_links: how many of the layer-0 links of graph page blk's
 * nodes (checked by copy_graph) name a node on the same page. An index
 * CREATE INDEX laid out has a good share of them (layout.c co-locates
 * neighbours); one filled by inserts almost none.
 */
uint64
cache_page_near_links(const CacheCopy *cp, BlockNumber blk, Page page, uint64 *links)
{
	int			nslots = ShnswPageGetOpaque(page)->nslots;
	uint64		near = 0;

	for (int s = 0; s < nslots; s++)
	{
		const ShnswNodeHeader *h = shnsw_page_node(page, s, cp->node_size);
		const ShnswRef *nbrs = shnsw_node_neighbors(h);

		for (int k = 0; k < h->nneighbors; k++)
			near += shnsw_ref_block(nbrs[k], cp->slot_bits) == blk;
		*links += h->nneighbors;
	}
	return near;
}

/*
 * cache_order_done: the places filled so far are the build's; those taken
 * after them are counted against them (cache_build.c, copy_graph). A first
 * build (not a regrowth: asked for one, whatever entry it got, it never
 * asks again) of an index whose pages do not keep neighbours together,
 * one filled by inserts, has the next scan rebuild it in graph order as a
 * regrowth: fewer than one link in 64 to the same page. Measured on 500k x
 * 64 (m 16): CREATE INDEX (layout.c) keeps one in 16, an index grown from
 * 10k rows one in 1,000. Not for records of over a kilobyte (fewer than 8
 * a page): a page holds too few of a node's neighbours to tell, and each
 * record spans many cache lines anyway.
 */
void
cache_order_done(LocalCopy *li, bool regrowth, uint32 ordered, uint64 nodes, const uint64 *near)
{
	CacheCopy  *cp = li->cp;

	pg_atomic_write_u32(&cp->ordered, pg_atomic_read_u32(&cp->pnext));
	elog(DEBUG1, "streamhnsw cache: %s build, " UINT64_FORMAT " nodes, %u placed in graph order, "
		 UINT64_FORMAT " of " UINT64_FORMAT " links to the same page",
		 regrowth ? "regrowth" : "first", nodes, ordered, near[0], near[1]);
	if (!regrowth && cp->npp >= 8 && nodes >= CACHE_REORDER_MIN && near[0] * 64 < near[1])
		pg_atomic_write_u32(&cp->reorder, 1);
}

/*
 * cache_reorder_refused: a rebuild in graph order of copy li cannot be had
 * now (no room for two copies, no worker): it is asked for again only
 * once inserts place as many records out of order again.
 */
void
cache_reorder_refused(LocalCopy *li)
{
	pg_atomic_write_u32(&li->cp->ordered, pg_atomic_read_u32(&li->cp->pnext));
	pg_atomic_write_u32(&li->cp->reorder, 0);
}
