/*-------------------------------------------------------------------------
 *
 * cache_read.c
 *	  The node source over a cached copy (nodesource.h): scans and the
 *	  searches of inserts read node records and upper lists from shared
 *	  memory with plain loads under each page's seqlock, with memory
 *	  prefetch; and the choice, at a scan's start, between a copy and
 *	  shared buffers (looking the copy up, refreshing or building it).
 *
 * A record the copy lacks, or whose reads keep colliding with writers, is
 * read through buffers (the inner node source), so a copy is never needed
 * for a correct answer, only for a fast one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "storage/bufpage.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "cache.h"
#include "cache_int.h"
#include "format.h"
#include "meta.h"
#include "nodesource.h"
#include "options.h"
#include "pages.h"
#include "stats.h"

#define CACHE_PREFETCH_AHEAD	2	/* records prefetched ahead of a read_nodes read */

/* ---------- the node source over a copy ---------- */

typedef struct CacheScan
{
	LocalCopy *li;
	ShnswNodeSource inner;			/* buffer-manager ops: nodes the copy lacks */
	ShnswScanStats *stats;
	int			slot_bits;
	int			npp;			/* node slots per graph page */
	int			node_size;
	int			code_off;		/* where a record's code starts */
	int			m;
	ShnswRef   *fb;				/* scratch for prefetch of absent nodes */
	int			fbcap;
	char	   *held_copy;		/* read_nodes_held: a record read through
								 * buffers, kept until flush */
	char	   *page_copy;		/* page_records: a page's records gathered */
} CacheScan;

static inline const char *
cached_record_addr(CacheScan *ss, ShnswRef ref, CachePageDesc **desc)
{
	return copy_record_addr(ss->li, ref, ss->slot_bits, ss->npp, ss->node_size, desc);
}

/* what cached_node_fn's read is given */
typedef struct NodeRead
{
	CachePageDesc *d;
	uint32		slot;
	const char *src;
	ShnswNodeFn fn;
	ShnswFlushFn flush;
	void	   *arg;
	int			i;
} NodeRead;

/* seq_read's read for cached_node_fn: -1 if the page lacks the slot */
static pg_attribute_always_inline int
node_read(void *arg)
{
	NodeRead   *r = (NodeRead *) arg;

	if (r->slot >= CACHE_LOAD(uint16, &r->d->nslots))
		return -1;
	r->fn(r->arg, r->i, (const ShnswNodeHeader *) r->src);
	if (r->flush != NULL)
		r->flush(r->arg);
	return 1;
}

/*
 * cached_node_fn calls fn(arg, i, record) on the copy's record of node ref
 * itself (no copy) inside its page's seqlock, and flush(arg) after it if
 * flush is not NULL (read_nodes_held: flush reads the record too): if a
 * writer changed the page meanwhile it calls again (the node source
 * contract lets the last call win). False if the copy lacks the node or
 * the read keeps colliding with writers: the caller reads it through
 * buffers.
 */
static inline bool
cached_node_fn(CacheScan *ss, ShnswRef ref, ShnswNodeFn fn, ShnswFlushFn flush, void *arg, int i)
{
	NodeRead	r;

	r.src = cached_record_addr(ss, ref, &r.d);
	if (r.src == NULL)
		return false;
	r.slot = shnsw_ref_slot(ref, ss->slot_bits);
	r.fn = fn;
	r.flush = flush;
	r.arg = arg;
	r.i = i;
	return seq_read(r.d, node_read, &r) > 0;
}

/*
 * Memory prefetch of the lines of the copy's record of ref that its
 * distance reads (the header and the code), if the copy has it. The
 * header's last byte too: records are node_size apart, so a 24-byte
 * header crosses into the next line for some slots (a quarter of them at
 * 384 dimensions, m 16), and that line is no code line. Not its
 * neighbour list: the search reads that only for the few nodes it expands.
 * to_l1: into the first-level cache, with its page's sequence counter, for
 * a read a record or two from now; else into the second level only, for a
 * read later in the hop (__builtin_prefetch's locality 2: prefetcht1 on
 * x86).
 */
#define CACHE_PREFETCH_LINES(ss, p, locality) \
	do { \
		__builtin_prefetch((p), 0, (locality)); \
		__builtin_prefetch((p) + sizeof(ShnswNodeHeader) - 1, 0, (locality)); \
		for (int off_ = (ss)->code_off; off_ < (ss)->node_size; off_ += 64) \
			__builtin_prefetch((p) + off_, 0, (locality)); \
		__builtin_prefetch((p) + (ss)->node_size - 1, 0, (locality)); \
	} while (0)

static inline void
cached_prefetch_record(CacheScan *ss, ShnswRef ref, bool to_l1)
{
	CachePageDesc *d;
	const char *p = cached_record_addr(ss, ref, &d);

	if (p == NULL)
		return;
	if (to_l1)
	{
		__builtin_prefetch(d);	/* its page's sequence counter */
		CACHE_PREFETCH_LINES(ss, p, 3);
	}
	else
		CACHE_PREFETCH_LINES(ss, p, 2);
}

/* Callback shim: the buffer path's one-reference call reports position 0. */
typedef struct ShimArg
{
	ShnswNodeFn fn;
	void	   *arg;
	int			pos;
} ShimArg;

static void
shim_cb(void *arg, int i, const ShnswNodeHeader *node)
{
	ShimArg    *a = (ShimArg *) arg;

	a->fn(a->arg, a->pos, node);
}

/*
 * The memory prefetch of a hop's records, read in the order given (the
 * search numbers its candidates before reading: search.c,
 * search_add_nodes). Two prefetches a record. First the whole hop into
 * the second-level cache, whose queue of misses is longer than the first
 * level's, so that all of the hop's misses to memory overlap (into the
 * first level instead, they stalled on its full miss queue). Then
 * software pipelining into the first level: the records
 * CACHE_PREFETCH_AHEAD places ahead are asked for while this one is read
 * (the caller's loop asks for each next one). Measured on 100k x 384 real
 * sentences, ef_search 40, AMD EPYC: the second-level pass took a hot
 * query's server time from 206 to 181 us.
 */
static void
cached_hop_begin(CacheScan *ss, const ShnswRef *refs, int n)
{
	for (int k = CACHE_PREFETCH_AHEAD; k < n; k++)
		cached_prefetch_record(ss, refs[k], false);
	for (int k = 0; k < Min(n, CACHE_PREFETCH_AHEAD); k++)
		cached_prefetch_record(ss, refs[k], true);
}

/*
 * read_nodes over the copy: fn reads each record in the copy itself
 * under its page's seqlock (plain loads, no pin, lock or copy); a node the
 * copy lacks is read through buffers.
 */
static void
cached_read_nodes(void *vctx, const ShnswRef *refs, int n, ShnswNodeFn fn, void *arg)
{
	CacheScan    *ss = (CacheScan *) vctx;

	cached_hop_begin(ss, refs, n);
	for (int i = 0; i < n; i++)
	{
		if (i + CACHE_PREFETCH_AHEAD < n)
			cached_prefetch_record(ss, refs[i + CACHE_PREFETCH_AHEAD], true);
		if (cached_node_fn(ss, refs[i], fn, NULL, arg, i))
			ss->stats->cache_nodes++;
		else
		{
			ShimArg		a = {fn, arg, i};

			ss->stats->cache_fallback_nodes++;
			ss->inner.read_nodes(ss->inner.ctx, &refs[i], 1, shim_cb, &a);
		}
	}
}

/*
 * The buffer path's read of node ref (one the copy lacks, or one whose
 * reads keep colliding with writers) for read_nodes_held: the record is
 * copied into ss->held_copy, which stays put until flush, and fn and
 * flush are called on the copy.
 */
static void
held_copy_cb(void *arg, int i, const ShnswNodeHeader *node)
{
	CacheScan    *ss = (CacheScan *) arg;

	(void) i;
	memcpy(ss->held_copy, node, ss->node_size);
}

static void
cached_held_fallback(CacheScan *ss, ShnswRef ref, int i, ShnswNodeFn fn, ShnswFlushFn flush,
				  void *arg)
{
	ss->stats->cache_fallback_nodes++;
	/* (the buffer path calls back at least once, or raises an error) */
	ss->inner.read_nodes(ss->inner.ctx, &ref, 1, held_copy_cb, ss);
	fn(arg, i, (const ShnswNodeHeader *) ss->held_copy);
	flush(arg);
}

/*
 * read_nodes_held over the copy (nodesource.h): fn is called on records
 * in the copy, up to SHNSW_HELD_BATCH of them, then flush (the search's
 * batch kernel reads their codes in place), and only then are their
 * pages' sequence counts checked again: a record a writer changed
 * meanwhile is read again on its own (fn and flush inside one seqlock
 * window), or through buffers. Same order and results as cached_read_nodes,
 * without the copy of each code into the search's batch (8% of a hot
 * query's server time in a perf profile on real sentences, 100k x 384).
 */
static void
cached_read_nodes_held(void *vctx, const ShnswRef *refs, int n, ShnswNodeFn fn,
					ShnswFlushFn flush, void *arg)
{
	CacheScan    *ss = (CacheScan *) vctx;
	int			held[SHNSW_HELD_BATCH];
	CachePageDesc *hdesc[SHNSW_HELD_BATCH];
	uint32		hseq[SHNSW_HELD_BATCH];
	int			nheld = 0;

	cached_hop_begin(ss, refs, n);
	for (int k = 0; k <= n; k++)
	{
		int			i = k < n ? k : -1;
		const char *src = NULL;
		CachePageDesc *d = NULL;
		uint32		s1 = 0;

		if (k + CACHE_PREFETCH_AHEAD < n)
			cached_prefetch_record(ss, refs[k + CACHE_PREFETCH_AHEAD], true);
		/* a writer in the page, or a slot it lacks: read alone, below */
		if (i >= 0 && (src = cached_record_addr(ss, refs[i], &d)) != NULL &&
			(!seq_peek(d, &s1) ||
			 shnsw_ref_slot(refs[i], ss->slot_bits) >= CACHE_LOAD(uint16, &d->nslots)))
			src = NULL;
		if (src != NULL)
		{
			fn(arg, i, (const ShnswNodeHeader *) src);
			held[nheld] = i;
			hdesc[nheld] = d;
			hseq[nheld] = s1;
			nheld++;
		}
		/* the batch is full, the hop done, or a record to read otherwise */
		if (nheld > 0 && (nheld == SHNSW_HELD_BATCH || i < 0 || src == NULL))
		{
			flush(arg);
			for (int h = 0; h < nheld; h++)
			{
				ShnswRef	ref = refs[held[h]];

				/* changed meanwhile: again, alone, inside one seqlock window */
				if (seq_unchanged(hdesc[h], hseq[h]) ||
					cached_node_fn(ss, ref, fn, flush, arg, held[h]))
					ss->stats->cache_nodes++;
				else
					cached_held_fallback(ss, ref, held[h], fn, flush, arg);
			}
			nheld = 0;
		}
		if (i >= 0 && src == NULL)
		{
			if (cached_node_fn(ss, refs[i], fn, flush, arg, i))
				ss->stats->cache_nodes++;
			else
				cached_held_fallback(ss, refs[i], i, fn, flush, arg);
		}
	}
}

/* what upper_read is given */
typedef struct UpperRead
{
	const char *page;			/* the cached upper page */
	ShnswUpperLoc loc;
	int			layer;
	int			m;
	ShnswRef   *out;
} UpperRead;

/*
 * seq_read's read for cached_read_upper: the record is checked as
 * pageaccess.c checks it and its list copied into out; -1 if it does not
 * check out. Every field of the page is loaded once into a local and the
 * copy's bounds come from those locals only (hole 6 of issue 49): a writer
 * changing the page meanwhile makes the seqlock check fail, never the copy
 * overflow out (at most m references) or read outside the page.
 */
static int
upper_read(void *arg)
{
	UpperRead  *r = (UpperRead *) arg;
	const char *page = r->page;
	uint16		lower = CACHE_LOAD(uint16, &((PageHeader) page)->pd_lower);
	uint32		raw;
	ItemIdData	iid;
	Size		off,
				len,
				lists;
	const char *u;
	int			level,
				cnt;

	if (r->loc.offset < FirstOffsetNumber || lower <= SizeOfPageHeaderData ||
		r->loc.offset > (lower - SizeOfPageHeaderData) / sizeof(ItemIdData))
		return -1;
	raw = CACHE_LOAD(uint32, page + SizeOfPageHeaderData +
					 (r->loc.offset - 1) * sizeof(ItemIdData));
	memcpy(&iid, &raw, sizeof(iid));
	off = ItemIdGetOffset(&iid);
	len = ItemIdGetLength(&iid);
	if (!ItemIdIsNormal(&iid) || len < sizeof(ShnswUpperHeader) ||
		off < SizeOfPageHeaderData ||
		off + len > BLCKSZ - MAXALIGN(sizeof(ShnswPageOpaqueData)))
		return -1;
	u = page + off;
	level = CACHE_LOAD(uint8, u + offsetof(ShnswUpperHeader, level));
	if (level < 1 || level > SHNSW_MAX_LEVEL || len < shnsw_upper_size(level, r->m) ||
		r->layer < 1 || r->layer > level)
		return -1;
	lists = sizeof(ShnswUpperHeader) + ((sizeof(uint16) * level + 3) & ~(Size) 3);
	cnt = CACHE_LOAD(uint16, u + sizeof(ShnswUpperHeader) + sizeof(uint16) * (r->layer - 1));
	cnt = Min(cnt, r->m);
	memcpy(r->out, u + lists + sizeof(ShnswRef) * (Size) (r->layer - 1) * r->m,
		   sizeof(ShnswRef) * cnt);
	return cnt;
}

/*
 * read_upper over the copy: the list copied under its page's seqlock
 * (upper_read); anything that does not check out is read through buffers
 * instead (which report corruption).
 */
static int
cached_read_upper(void *vctx, ShnswUpperLoc loc, int layer, ShnswRef *out)
{
	CacheScan  *ss = (CacheScan *) vctx;
	LocalCopy  *li = ss->li;
	uint32		v = copy_map_entry(li, loc.block);

	if (MAP_KIND(v) == MAP_UPPER && v != MAP_RESERVED)
	{
		UpperRead	r = {li->udata + (Size) MAP_INDEX(v) * BLCKSZ, loc, layer, ss->m, out};
		int			cnt = seq_read(&li->udesc[MAP_INDEX(v)], upper_read, &r);

		if (cnt >= 0)
			return cnt;
	}
	return ss->inner.read_upper(ss->inner.ctx, loc, layer, out);
}

/*
 * prefetch over the copy: the buffer path's read-ahead for the records the
 * copy lacks (cached_read_nodes prefetches the copy's own from memory).
 */
static void
cached_prefetch(void *vctx, const ShnswRef *refs, int n, bool speculative)
{
	CacheScan    *ss = (CacheScan *) vctx;
	int			nfb = 0;

	/*
	 * Speculative requests name the neighbourhoods of the best queued
	 * candidates, a whole expansion or more ahead: worth a storage read,
	 * not a memory prefetch (the lines would be evicted or already loaded
	 * by the time they are used; measured: 9% of a hot search's time spent
	 * here). Nodes outside the copy lose their speculative read-ahead.
	 */
	if (speculative || ss->inner.prefetch == NULL)
		return;
	for (int k = 0; k < n; k++)
	{
		/*
		 * The copy's records are read next, by cached_read_nodes, which
		 * prefetches them a few records ahead of its reads: prefetching a
		 * hop's records all at once here stalled on a full miss queue.
		 */
		if (cached_record_addr(ss, refs[k], NULL) == NULL)
		{
			if (nfb == ss->fbcap)
			{
				ss->fbcap = Max(64, 2 * ss->fbcap);
				ss->fb = ss->fb ? repalloc(ss->fb, sizeof(ShnswRef) * ss->fbcap)
					: palloc(sizeof(ShnswRef) * ss->fbcap);
			}
			ss->fb[nfb++] = refs[k];
		}
	}
	if (nfb > 0)
		ss->inner.prefetch(ss->inner.ctx, ss->fb, nfb, speculative);
}

/* what records_read is given */
typedef struct RecordsRead
{
	CacheScan  *ss;
	uint32		blk;
	uint32		v;				/* the block's map entry (a graph page's) */
	ShnswRecordsFn fn;
	void	   *arg;
} RecordsRead;

/*
 * seq_read's read for cached_page_records: fn on the page's records; -1 if
 * the block was unmapped meanwhile (under the slot's seqlock, so a read
 * that sees the old entry here sees the count change).
 */
static int
records_read(void *arg)
{
	RecordsRead *r = (RecordsRead *) arg;
	CacheScan  *ss = r->ss;
	LocalCopy  *li = ss->li;
	const uint32 *pos = li->recpos + (Size) MAP_INDEX(r->v) * ss->npp;
	int			nslots;

	if (pg_atomic_read_u32(&li->map[r->blk]) != r->v)
		return -1;
	nslots = CACHE_LOAD(uint16, &li->gdesc[MAP_INDEX(r->v)].nslots);	/* once */
	nslots = Min(nslots, ss->npp);
	/* the records are in graph order, not together: gathered, in slot order */
	for (int s = 0; s < nslots; s++)
	{
		uint32		place = CACHE_LOAD(uint32, &pos[s]);

		if (place == RECPOS_NONE)
			return -1;
		memcpy(ss->page_copy + (Size) s * ss->node_size,
			   li->gdata + (Size) place * ss->node_size, ss->node_size);
	}
	r->fn(r->arg, ss->page_copy, nslots);
	return nslots;
}

/*
 * page_records over the copy (nodesource.h), for the scan's sweep: fn on
 * the records of graph page blk in the copy itself, under its page's
 * seqlock; -1 for a block the copy lacks (vector pages, pages added
 * without a spare slot) or whose reads keep colliding with writers, 0 for
 * an upper page.
 */
static int
cached_page_records(void *vctx, uint32 blk, ShnswRecordsFn fn, void *arg)
{
	CacheScan  *ss = (CacheScan *) vctx;
	LocalCopy  *li = ss->li;
	uint32		v = copy_map_entry(li, blk);
	RecordsRead r = {ss, blk, v, fn, arg};

	if (v == MAP_RESERVED || MAP_KIND(v) == MAP_ABSENT)
		return -1;
	if (MAP_KIND(v) != MAP_GRAPH || fn == NULL)
		return 0;
	return seq_read(&li->gdesc[MAP_INDEX(v)], records_read, &r);
}

/* ---------- choosing the node source ---------- */

const char *
shnsw_cache_status_name(int status)
{
	switch (status)
	{
		case SHNSW_CACHE_OFF:
			return "off";
		case SHNSW_CACHE_USED:
			return "used";
		case SHNSW_CACHE_BUILT:
			return "built by this scan, used";
		case SHNSW_CACHE_BUILDING:
			return "not used (being built)";
		case SHNSW_CACHE_STALE:
			return "not used (behind the index)";
		case SHNSW_CACHE_TOO_BIG:
			return "not used (larger than streamhnsw.shared_cache_size)";
		case SHNSW_CACHE_UNAVAILABLE:
			return "not used (no dynamic shared memory for it)";
		case SHNSW_CACHE_MISSING:
			return "not used (no copy)";
		case SHNSW_CACHE_FULL:
			return "not used (the cache is full of copies in use)";
		case SHNSW_CACHE_LAUNCHED:
			return "not used (build started in the background)";
		case SHNSW_CACHE_REFRESH_LAUNCHED:
			return "not used (behind the index, refresh started in the background)";
	}
	return "?";
}

/*
 * cache_lookup: the index's copy if it reflects metapage state (lsn, gen);
 * else NULL with *status (MISSING, BUILDING, STALE, UNAVAILABLE). A scan's
 * lookup (scan) counts a hit or a miss; an insert's counts an insert search
 * when it finds the copy current. A copy this backend has not mapped yet
 * is mapped with the registry lock released (cache_map_segment, in a
 * subtransaction: no buffer lock may be held), then looked up again.
 */
LocalCopy *
cache_lookup(Relation index, const CacheToken *tok, int *status, bool scan)
{
	CacheEntry   *e;
	LocalCopy *li = NULL;
	bool		mapped_now = false;

	cache_local_sweep();
retry:
	LWLockAcquire(&cache_ctl->lock, LW_SHARED);
	e = cache_find_entry(index);
	if (e == NULL || e->state == ENTRY_EMPTY)
		*status = e != NULL && e->launched_at != 0 ? SHNSW_CACHE_BUILDING : SHNSW_CACHE_MISSING;
	else if (e->state != ENTRY_READY)
		*status = SHNSW_CACHE_BUILDING;
	else
	{
		li = cache_local_find(e->copy_id);
		if (li == NULL && !mapped_now)
		{
			/* map it with no lock held (in a subtransaction), then look again */
			dsm_handle	h = e->handle;
			uint64		id = e->copy_id;

			LWLockRelease(&cache_ctl->lock);
			(void) cache_map_segment(h, id, true);
			mapped_now = true;
			goto retry;
		}
		if (li == NULL)
			*status = SHNSW_CACHE_UNAVAILABLE;
		else if (e->behind || !copy_current(li->cp, tok))
		{
			*status = SHNSW_CACHE_STALE;
			li = NULL;
		}
		else
		{
			*status = SHNSW_CACHE_USED;
			pg_atomic_fetch_add_u64(scan ? &e->hits : &e->insert_searches, 1);
			pg_atomic_write_u64(&e->last_used, (uint64) GetCurrentTimestamp());
		}
	}
	if (li == NULL && e != NULL && scan)
		pg_atomic_fetch_add_u64(&e->misses, 1);
	LWLockRelease(&cache_ctl->lock);
	return li;
}

/*
 * cache_lookup_or_build: the usable copy of the index for a scan that read
 * metapage state (lsn, gen). With build set, a copy behind the index is
 * refreshed and a missing one built: by a background worker the call
 * starts when background is set (streamhnsw.shared_cache_background: the
 * scan reads through buffers meanwhile), else here. NULL with *status
 * otherwise.
 */
LocalCopy *
cache_lookup_or_build(Relation index, const ShnswIndexInfo *info, const CacheToken *tok,
				bool build, bool background, int *status)
{
	LocalCopy *li = cache_lookup(index, tok, status, true);
	bool		rebuild = false;

	if (li != NULL && pg_atomic_read_u32(&li->cp->outgrown) != 0 && build &&
		!IsInParallelMode())
	{
		int			rs;

		/*
		 * Inserts filled its room: a worker builds a larger copy while this
		 * one serves (the changes meanwhile are found by their page LSNs,
		 * so the index must be logged), else it is dropped and rebuilt.
		 */
		if (background && RelationNeedsWAL(index) &&
			cache_request_build(index, CACHE_REQ_REGROW, &rs))
			return li;
		cache_drop_outgrown(index, li->cp->copy_id);
		li = NULL;
		*status = SHNSW_CACHE_MISSING;
	}
	if (li != NULL && pg_atomic_read_u32(&li->cp->reorder) != 0 && build && background &&
		!IsInParallelMode() && RelationNeedsWAL(index))
	{
		int			rs;

		/*
		 * Inserts placed many records out of graph order (or the copy was
		 * never in it): a worker rebuilds it in graph order as a regrowth,
		 * while this one serves. Only then: it is never dropped for that.
		 */
		if (!cache_request_build(index, CACHE_REQ_REGROW, &rs))
			cache_reorder_refused(li);
	}
	if (li != NULL || !build || IsInParallelMode())
		return li;
	if (*status == SHNSW_CACHE_STALE && background &&
		cache_request_build(index, CACHE_REQ_REFRESH, status))
		return NULL;
	if (*status == SHNSW_CACHE_STALE)
	{
		li = cache_refresh_or_drop(index, info, tok, &rebuild);
		if (li != NULL)
			*status = SHNSW_CACHE_USED;
		if (!rebuild)
			return li;
	}
	else if (*status != SHNSW_CACHE_MISSING)
		return NULL;

	if (background && cache_request_build(index, CACHE_REQ_BUILD, status))
		return NULL;
	li = cache_build(index, info, false, status);
	if (li != NULL && !copy_current(li->cp, tok))
	{
		*status = SHNSW_CACHE_STALE;
		li = NULL;
	}
	return li;
}

/* Replace *ops by ops over copy li (scan_begin, insert_begin). */
static void
cached_ops(LocalCopy *li, const ShnswIndexInfo *info, ShnswNodeSource *ops,
		ShnswScanStats *stats, MemoryContext cxt)
{
	CacheScan    *ss;

	if (cache_active_scans < INT_MAX)
		cache_active_scans++;
	ss = MemoryContextAllocZero(cxt, sizeof(CacheScan));
	ss->li = li;
	ss->inner = *ops;
	ss->stats = stats;
	ss->slot_bits = info->slot_bits;
	ss->npp = li->cp->npp;
	ss->node_size = info->node_size;
	ss->code_off = (int) shnsw_node_code_offset(info->m);
	ss->m = info->m;
	ss->held_copy = MemoryContextAlloc(cxt, info->node_size);
	ss->page_copy = MemoryContextAlloc(cxt, (Size) ss->npp * info->node_size);
	ops->ctx = ss;
	ops->read_nodes = cached_read_nodes;
	ops->read_nodes_held = cached_read_nodes_held;
	ops->read_upper = cached_read_upper;
	ops->prefetch = cached_prefetch;
	ops->speculative = false;	/* cached_prefetch ignores them */
	ops->reread_cheap = !shnsw_debug_keep_lists;
	ops->page_records = cached_page_records;
}

/*
 * cached_begin: ops over the index's copy for a scan (which may build or
 * refresh one) or an insert's search (insert: only a current copy).
 */
static void
cached_begin(Relation index, const ShnswIndexInfo *info, const ShnswMetaSnapshot *snap,
		  ShnswNodeSource *ops, ShnswScanStats *stats, MemoryContext cxt, bool insert)
{
	LocalCopy *li;
	int			status;

	CacheToken	tok = cache_token_of(snap);

	stats->cache_status = SHNSW_CACHE_OFF;
	if (!shnsw_shared_cache || RelationUsesLocalBuffers(index) || (insert && IsInParallelMode()))
		return;
	/* no registry (none can be had, or an insert and none exists): buffers */
	if (insert ? !cache_registry_exists() || cache_try_get_ctl() == NULL : cache_try_get_ctl() == NULL)
	{
		stats->cache_status = insert ? SHNSW_CACHE_MISSING : SHNSW_CACHE_UNAVAILABLE;
		return;
	}
	li = insert ? cache_lookup(index, &tok, &status, false) :
		cache_lookup_or_build(index, info, &tok, true, shnsw_shared_cache_background, &status);
	stats->cache_status = status;
	if (li != NULL)
		cached_ops(li, info, ops, stats, cxt);
}

void
shnsw_cache_scan_begin(Relation index, const ShnswIndexInfo *info,
					 const ShnswMetaSnapshot *snap, ShnswNodeSource *ops,
					 ShnswScanStats *stats, MemoryContext cxt)
{
	cached_begin(index, info, snap, ops, stats, cxt, false);
}

void
shnsw_cache_insert_begin(Relation index, const ShnswIndexInfo *info,
					   const ShnswMetaSnapshot *snap, ShnswNodeSource *ops,
					   ShnswScanStats *stats, MemoryContext cxt)
{
	cached_begin(index, info, snap, ops, stats, cxt, true);
}
