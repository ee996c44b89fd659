/*-------------------------------------------------------------------------
 *
 * scan_sweep.c
 *	  The sweep: every live node of the index offered to a scan's search,
 *	  in page order, so that the emit bound covers every node (src/README,
 *	  Scans: the sweep), and the per-backend maps of which blocks are graph
 *	  pages.
 *
 * Graph pages the scan's shared cache holds are read from it with plain
 * loads (retried while a writer changes them); the others through the
 * scan's reader, share-locked one at a time.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "executor/nodeHash.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "codebound.h"
#include "format.h"
#include "kernels.h"
#include "meta.h"
#include "options.h"
#include "pageaccess.h"
#include "pages.h"
#include "pqueue.h"
#include "reader.h"
#include "scan_int.h"
#include "search.h"
#include "stats.h"

/* qsort comparator of uint64 */
static int
uint64_cmp(const void *a, const void *b)
{
	uint64		x = *(const uint64 *) a,
				y = *(const uint64 *) b;

	return (x > y) - (x < y);
}

/*
 * Find the layer-0 candidate index of ref in seen (sorted ref << 32 |
 * index). The upper-layer descent records its nodes too, never to be
 * emitted, before layer 0 records the same node again: the last index of a
 * reference is its layer-0 candidate.
 */
static bool
scan_seen_index(const uint64 *seen, uint32 n, ShnswRef ref, uint32 *idx)
{
	uint32		lo = 0,
				hi = n;

	while (lo < hi)
	{
		uint32		mid = lo + (hi - lo) / 2;

		if ((ShnswRef) (seen[mid] >> 32) <= ref)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && (ShnswRef) (seen[lo - 1] >> 32) == ref)
	{
		*idx = (uint32) seen[lo - 1];
		return true;
	}
	return false;
}

/*
 * scan_edge_push: candidate j's code reaches an end of the trained range, so
 * its value may have been clamped and its navigation distance's bound may
 * not hold; it waits in the edge heap under its box bound b (rounded down
 * to a float), unless the usual bound is no higher.
 */
static void
scan_edge_push(ShnswScanOpaque so, uint32 j, double b)
{
	float		f = (float) b;

	if (so->search.cands[j].state & SHNSW_CAND_EMITTED)
		return;
	if (b >= scan_lower_bound(so, so->search.cands[j].d))
		return;					/* the usual bound is no looser */
	if ((double) f > b)
		f = nextafterf(f, -get_float4_infinity());
	shnsw_heap_push(&so->edge, f, j);
}

/*
 * Which blocks of an index are graph pages, learned by the sweeps of this
 * backend, so that later sweeps skip the exact-vector and upper pages
 * (most of an index) without reading them. A page's type is set when it is
 * first initialized and never changes until a VACUUM truncation cuts the
 * block (the metapage counts them: a map of another count starts again; a
 * new relfilenode starts a new entry), so the map of the blocks below
 * nknown stays right; blocks past it, and pages not yet initialized, are
 * read and learned.
 */
typedef struct SweepMap
{
	RelFileLocator locator;
	uint32		truncations;	/* the metapage's count when learned */
	BlockNumber nknown;			/* blocks 0 .. nknown - 1 are known */
	BlockNumber cap;			/* bits allocated */
	uint8	   *graph;			/* bit per block: a graph page */
} SweepMap;

#define SHNSW_SWEEP_MAPS	8
static SweepMap sweep_maps[SHNSW_SWEEP_MAPS];
static int	sweep_map_next;

/*
 * The sweep map of index (a new, empty one if it has none, or if the index
 * was truncated since: truncations is the metapage's count).
 */
static SweepMap *
sweep_map_get(Relation index, uint32 truncations)
{
	SweepMap   *m;

	for (int i = 0; i < SHNSW_SWEEP_MAPS; i++)
		if (sweep_maps[i].graph != NULL &&
			RelFileLocatorEquals(sweep_maps[i].locator, index->rd_locator))
		{
			m = &sweep_maps[i];
			if (m->truncations != truncations)
			{
				m->truncations = truncations;
				m->nknown = 0;
				memset(m->graph, 0, m->cap / 8);
			}
			return m;
		}
	m = &sweep_maps[sweep_map_next];
	sweep_map_next = (sweep_map_next + 1) % SHNSW_SWEEP_MAPS;
	if (m->graph != NULL)
		pfree(m->graph);
	m->locator = index->rd_locator;
	m->truncations = truncations;
	m->nknown = 0;
	m->cap = 1024;
	m->graph = MemoryContextAllocZero(TopMemoryContext, m->cap / 8);
	return m;
}

/* Learn that block blk is (or is not) a graph page; blocks below it are known. */
static void
sweep_map_learn(SweepMap *m, BlockNumber blk, bool graph)
{
	if (blk != m->nknown)
		return;					/* only the known prefix grows */
	if (blk >= m->cap)
	{
		BlockNumber cap = Max(m->cap * 2, blk + 1024);

		cap = (cap + 7) & ~(BlockNumber) 7;
		m->graph = repalloc0(m->graph, m->cap / 8, cap / 8);
		m->cap = cap;
	}
	if (graph)
		m->graph[blk / 8] |= (uint8) (1 << (blk % 8));
	m->nknown = blk + 1;
}

/* Whether the sweep must read block blk. */
static inline bool
sweep_map_wanted(const SweepMap *m, BlockNumber blk)
{
	return blk >= m->nknown || (m->graph[blk / 8] & (1 << (blk % 8))) != 0;
}

/* blocks the sweep asks the reader for ahead of the one it reads */
#define SHNSW_SWEEP_AHEAD	32

/* What the sweep keeps of one node record before the node joins the search. */
typedef struct SweepSlot
{
	ShnswNodeHeader h;
	float		d;				/* navigation distance */
	bool		edge;			/* its code reaches an end of the range */
	double		box;			/* if so, its box bound (shnsw_codebound_code) */
} SweepSlot;

/*
 * sweep_stage copies what the sweep needs of n node records, node_size
 * apart (a locked page's, or the shared cache's, which a writer may change
 * meanwhile: whatever they hold is read within bounds, and the caller
 * discards the result if they changed): headers, navigation distances (the
 * batch kernel) and, for codes at an end of the range, their box bound.
 */
static void
sweep_stage(ShnswScanOpaque so, const char *records, int n, SweepSlot *out)
{
	int			m = so->info->m;
	int			node_size = so->info->node_size;
	float		d[SHNSW_MAX_NODES_PER_PAGE];

	sq8_distances(&so->sq, shnsw_node_code((const ShnswNodeHeader *) records, m),
				  node_size, n, d);
	for (int slot = 0; slot < n; slot++)
	{
		const ShnswNodeHeader *h = (const ShnswNodeHeader *) (records + (Size) slot * node_size);
		const uint8 *code = shnsw_node_code(h, m);

		memcpy(&out[slot].h, h, sizeof(ShnswNodeHeader));
		out[slot].d = d[slot];
		out[slot].edge = shnsw_code_at_edge(so->info->metric, code, so->info->dims);
		out[slot].box = out[slot].edge ? shnsw_codebound_code(&so->bound, code) : 0.0;
	}
}

/*
 * sweep_commit offers the staged live nodes of graph page blk to the search:
 * the ones the walk has not seen are parked; a code at an end of the range
 * also waits in the edge heap under its box bound (scan_edge_push) and is
 * marked (SHNSW_CAND_EDGE: its navigation distance bounds it on neither
 * side).
 */
static void
sweep_commit(IndexScanDesc scan, BlockNumber blk, const SweepSlot *st, int n,
			 const uint64 *seen, uint32 nseen)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;

	for (int slot = 0; slot < n; slot++)
	{
		const ShnswNodeHeader *h = &st[slot].h;
		ShnswRef	ref = shnsw_make_ref(blk, slot, so->info->slot_bits);
		uint32		j;

		if (h->flags & SHNSW_NODE_DELETED)
			continue;
		if (h->extra_tids >= SHNSW_NODE_TIDS)
			shnsw_corrupt(scan->indexRelation, blk, "extra heap tuple count", h->extra_tids);
		if (shnsw_search_sweep_node(&so->search, ref, h, st[slot].d, &j))
			so->stats.swept++;
		else if (!scan_seen_index(seen, nseen, ref, &j))
			continue;			/* a node the walk saw in another place? */
		if (st[slot].edge)
		{
			so->search.cands[j].state |= SHNSW_CAND_EDGE;
			scan_edge_push(so, j, st[slot].box);
		}
	}
}

/* what sweep_stage_records is given */
typedef struct SweepStageArg
{
	ShnswScanOpaque so;
	SweepSlot  *st;
	bool		graph;			/* called: a graph page */
} SweepStageArg;

/* page_records' fn for sweep_cache_page (the last call wins) */
static void
sweep_stage_records(void *arg, const char *records, int n)
{
	SweepStageArg *a = (SweepStageArg *) arg;

	a->graph = true;
	if (n > 0)
		sweep_stage(a->so, records, n, a->st);
}

/*
 * sweep_cache_page stages graph page blk from the shared cache, if the
 * scan searches a cached copy and it holds the block (plain loads under
 * the page's seqlock: no pin, no lock, no read); returns the node slots
 * staged (0 for a page of another kind; *graph says which), or -1 if the
 * page must be read through buffers.
 */
static int
sweep_cache_page(ShnswScanOpaque so, BlockNumber blk, SweepSlot *st, bool *graph)
{
	SweepStageArg a = {so, st, false};
	int			n;

	if (so->ops.page_records == NULL)
		return -1;
	n = so->ops.page_records(so->ops.ctx, blk, sweep_stage_records, &a);
	*graph = a.graph;
	return n;
}

/* Whether the sweep must read block blk through buffers. */
static bool
sweep_reads(ShnswScanOpaque so, const SweepMap *map, BlockNumber blk)
{
	return sweep_map_wanted(map, blk) &&
		(so->ops.page_records == NULL ||
		 so->ops.page_records(so->ops.ctx, blk, NULL, NULL) < 0);
}

/*
 * sweep_buffer_page stages block blk read through buffers (the scan's
 * reader; share lock while it is read); returns the node slots staged, 0
 * for a page of another kind or one never initialized.
 */
static int
sweep_buffer_page(IndexScanDesc scan, SweepMap *map, BlockNumber blk, SweepSlot *st)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	Relation	index = scan->indexRelation;
	Buffer		buf = shnsw_reader_get(&so->reader, blk);
	Page		page;
	int			n = 0;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (!PageIsNew(page))
	{
		bool		graph;

		shnsw_check_page(index, page, blk, 0);
		graph = ShnswPageGetOpaque(page)->page_type == SHNSW_PAGE_GRAPH;
		sweep_map_learn(map, blk, graph);
		if (graph)
		{
			n = shnsw_graph_nslots(index, page, blk, so->info->node_size);
			if (n > 0)
				sweep_stage(so, (const char *) shnsw_page_node(page, 0, so->info->node_size),
							n, st);
		}
	}
	UnlockReleaseBuffer(buf);
	return n;
}

/*
 * sweep_fits: whether a sweep of an index of `nodes` nodes may run
 * when the budget does not cover the index. A sweep makes every node a
 * candidate of the search: its record (ShnswCand), its parked entry and
 * its visited slot, about 64 bytes a node. That must fit in
 * work_mem * hash_mem_multiplier, the memory a hash join may use (pgvector
 * bounds its iterative scans by work_mem too): 8 MB at the defaults, about
 * 130,000 nodes. A budget covering the index is the user's leave to sweep
 * it whatever its size.
 */
static bool
sweep_fits(double nodes)
{
	double		per_node = sizeof(ShnswCand) + sizeof(ShnswPair) + 4 * sizeof(ShnswRef);

	return nodes <= (double) shnsw_max_scan_tuples ||
		nodes * per_node <= (double) get_hash_memory_limit();
}

bool
scan_sweep_fits(ShnswScanOpaque so)
{
	return so->complete || sweep_fits((double) so->node_count);
}

/*
 * scan_sweep offers every live node of the index to the search, in page
 * order (src/README, Scans: the sweep). The nodes the walk has not seen
 * are parked with their navigation distances, so that the emit bound
 * covers every node of the index: from then on a row is returned only when
 * no node not yet re-ranked can be nearer, and nodes no walk reaches are
 * returned in their place. Graph pages the scan's shared cache holds
 * are read from it with plain loads; the others through the scan's reader
 * with read-ahead, share-locked one at a time. A node placed after the
 * relation's size was read belongs to a row our MVCC snapshot cannot see.
 */
void
scan_sweep(IndexScanDesc scan, ShnswSweepReason why)
{
	ShnswScanOpaque so = (ShnswScanOpaque) scan->opaque;
	Relation	index = scan->indexRelation;
	BlockNumber nblocks = RelationGetNumberOfBlocks(index);
	BlockNumber ahead = SHNSW_METAPAGE_BLKNO + 1;
	uint32		nseen = so->search.ncands;
	uint64	   *seen = palloc(sizeof(uint64) * Max(nseen, 1));
	SweepSlot  *st = palloc(sizeof(SweepSlot) * SHNSW_MAX_NODES_PER_PAGE);
	SweepMap   *map = sweep_map_get(index, so->truncations);

	/* the walk's nodes by reference (ref << 32 | index), to find their codes */
	for (uint32 i = 0; i < nseen; i++)
		seen[i] = (uint64) so->search.cands[i].ref << 32 | i;
	qsort(seen, nseen, sizeof(uint64), uint64_cmp);
	shnsw_heap_init(&so->edge, 64, false);
	sweep_map_learn(map, SHNSW_METAPAGE_BLKNO, false);
	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < nblocks; blk++)
	{
		bool		graph;
		int			n;

		if (!sweep_map_wanted(map, blk))
			continue;
		CHECK_FOR_INTERRUPTS();
		if ((n = sweep_cache_page(so, blk, st, &graph)) >= 0)
		{
			sweep_map_learn(map, blk, graph);
			sweep_commit(scan, blk, st, n, seen, nseen);
			continue;
		}
		if (so->reader.mode != SHNSW_IO_SYNC && ahead <= blk)
		{
			BlockNumber blks[SHNSW_SWEEP_AHEAD];
			int			k = 0;

			for (ahead = blk; ahead < nblocks && k < SHNSW_SWEEP_AHEAD; ahead++)
				if (sweep_reads(so, map, ahead))
					blks[k++] = ahead;
			shnsw_reader_request(&so->reader, blks, k, false);
		}
		n = sweep_buffer_page(scan, map, blk, st);
		sweep_commit(scan, blk, st, n, seen, nseen);
	}
	shnsw_search_swept(&so->search);
	so->swept = true;
	so->stats.sweeps[why]++;
	pfree(st);
	pfree(seen);
}
