/*-------------------------------------------------------------------------
 *
 * cache_build.c
 *	  Building a cached copy of an index (in the scan that needs it, on
 *	  request, or in a background worker), copying its graph and upper
 *	  pages into it, and refreshing a copy that is behind the metapage.
 *
 * A build claims the index's registry entry (BUILDING), reads the type of
 * every block (pass 1), reserves the copy's bytes in the budget, creates
 * and lays out the segment with every graph and upper page of pass 1
 * reserved, reads the metapage's token, publishes the segment (from then
 * on writers copy the pages they change into it, except reserved ones),
 * and copies each reserved page under its share lock (pass 2). A page a
 * writer adds meanwhile goes into a spare slot. src/README, "Shared cache",
 * has the argument that the result is exact.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/read_stream.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "cache.h"
#include "cache_int.h"
#include "format.h"
#include "meta.h"
#include "nodecheck.h"
#include "pageaccess.h"
#include "pages.h"

/* ---------- copying pages into a copy ---------- */

static inline void
seq_begin(CachePageDesc *d)
{
	pg_atomic_fetch_add_u32(&d->seq, 1);	/* odd: readers retry */
	pg_write_barrier();
}

static inline void
seq_end(CachePageDesc *d)
{
	pg_write_barrier();
	pg_atomic_fetch_add_u32(&d->seq, 1);
}

/*
 * copy_graph copies graph page blk (locked by the caller, share or
 * exclusive) into copy page slot idx: each record to its place (recpos),
 * a slot without one to the next free place, which is then its place for
 * the copy's life. Returns false if the page cannot be used (not ours, a
 * slot count or a record out of range).
 */
static bool
copy_graph(LocalCopy *li, uint32 idx, BlockNumber blk, Page page)
{
	CacheCopy  *cp = li->cp;
	CachePageDesc *d = &li->gdesc[idx];
	uint32	   *pos = li->recpos + (Size) idx * cp->npp;
	uint32		place[SHNSW_MAX_NODES_PER_PAGE];
	uint32		ordered = pg_atomic_read_u32(&cp->ordered);
	uint64		order_limit = (uint64) ordered + Max(ordered / 4, CACHE_REORDER_MIN);
	int			nslots;
	ShnswNodeLimits lim;
	ShnswNodeFault fault;

	if (PageIsNew(page) || ShnswPageGetOpaque(page)->magic != SHNSW_MAGIC ||
		ShnswPageGetOpaque(page)->page_type != SHNSW_PAGE_GRAPH)
		return false;
	nslots = ShnswPageGetOpaque(page)->nslots;
	if (nslots > cp->npp)
		return false;
	/* the index's length is not known here: block numbers are checked less */
	shnsw_node_limits(&lim, cp->m, cp->slot_bits, cp->vec_span, 0);
	for (int s = 0; s < nslots; s++)
		if (shnsw_node_problem(shnsw_page_node(page, s, cp->node_size),
							   shnsw_make_ref(blk, s, cp->slot_bits), &lim, &fault) != NULL)
			return false;

	/*
	 * Places first, outside the seqlock (only this page's lock holder sets
	 * its slots' places). A page slot has npp places' worth of room, and a
	 * node slot takes one place once, so places cannot run out.
	 */
	for (int s = 0; s < nslots; s++)
	{
		place[s] = pos[s];
		if (place[s] == RECPOS_NONE)
		{
			place[s] = pg_atomic_fetch_add_u32(&cp->pnext, 1);
			if (place[s] >= cp->pcap)
				return false;
			/* a quarter placed out of graph order: the next scan has it redone */
			if ((uint64) place[s] >= order_limit)
				pg_atomic_write_u32(&cp->reorder, 1);
		}
	}
	seq_begin(d);
	for (int s = 0; s < nslots; s++)
	{
		pos[s] = place[s];
		memcpy(li->gdata + (Size) place[s] * cp->node_size,
			   shnsw_page_node(page, s, cp->node_size), cp->node_size);
	}
	d->nslots = nslots;
	d->lsn = PageGetLSN(page);
	seq_end(d);
	return true;
}

static bool
copy_upper(LocalCopy *li, uint32 idx, Page page)
{
	CachePageDesc *d = &li->udesc[idx];

	if (PageIsNew(page) || ShnswPageGetOpaque(page)->magic != SHNSW_MAGIC ||
		ShnswPageGetOpaque(page)->page_type != SHNSW_PAGE_UPPER)
		return false;
	seq_begin(d);
	memcpy(li->udata + (Size) idx * BLCKSZ, page, BLCKSZ);
	d->lsn = PageGetLSN(page);
	seq_end(d);
	return true;
}

/*
 * cache_copy_page brings block blk (locked by the caller) into the copy: into
 * its slot if the map has one, else into a new slot from the spare ones if
 * allowed. A page the copy cannot hold stays absent (scans read it through
 * buffers), and a mapped block that is no longer a graph or upper page is
 * unmapped; a page that contradicts the copy invalidates the copy.
 */
void
cache_copy_page(LocalCopy *li, BlockNumber blk, Page page, bool may_add)
{
	CacheCopy   *cp = li->cp;
	uint32		v;
	uint16		type;

	type = PageIsNew(page) || ShnswPageGetOpaque(page)->magic != SHNSW_MAGIC ? 0 :
		ShnswPageGetOpaque(page)->page_type;
	if (blk >= cp->mapcap)
	{
		if (type == SHNSW_PAGE_GRAPH || type == SHNSW_PAGE_UPPER)
			pg_atomic_write_u32(&cp->outgrown, 1);
		return;
	}
	v = pg_atomic_read_u32(&li->map[blk]);
	if (v == MAP_RESERVED)
		return;					/* the build copies it later, under its lock */
	if (type != SHNSW_PAGE_GRAPH && type != SHNSW_PAGE_UPPER)
	{
		/*
		 * Not (or no longer) a page the copy holds: a mapped block that
		 * changed type (cut by a truncation, back as a vector page) must not
		 * keep serving its old records. Unmapped inside its slot's seqlock,
		 * so a reader of the old records retries and finds it absent.
		 */
		if (v != MAP_ABSENT)
		{
			CachePageDesc *d = MAP_KIND(v) == MAP_GRAPH ? &li->gdesc[MAP_INDEX(v)] :
				&li->udesc[MAP_INDEX(v)];

			seq_begin(d);
			pg_atomic_write_u32(&li->map[blk], MAP_ABSENT);
			d->nslots = 0;
			seq_end(d);
		}
		return;
	}
	if (v == MAP_ABSENT)
	{
		pg_atomic_uint32 *next = type == SHNSW_PAGE_GRAPH ? &cp->gnext : &cp->unext;
		uint32		cap = type == SHNSW_PAGE_GRAPH ? cp->gcap : cp->ucap;
		uint32		idx;
		bool		ok;

		if (!may_add)
			return;
		if (pg_atomic_read_u32(next) >= cap ||
			(idx = pg_atomic_fetch_add_u32(next, 1)) >= cap)
		{
			pg_atomic_write_u32(&cp->outgrown, 1);
			return;
		}
		ok = type == SHNSW_PAGE_GRAPH ? copy_graph(li, idx, blk, page)
			: copy_upper(li, idx, page);
		if (!ok)
			return;
		pg_write_barrier();
		pg_atomic_write_u32(&li->map[blk], (type == SHNSW_PAGE_GRAPH ? MAP_GRAPH : MAP_UPPER) | idx);
		return;
	}
	if ((type == SHNSW_PAGE_GRAPH && MAP_KIND(v) != MAP_GRAPH) ||
		(type == SHNSW_PAGE_UPPER && MAP_KIND(v) != MAP_UPPER) ||
		!(type == SHNSW_PAGE_GRAPH ? copy_graph(li, MAP_INDEX(v), blk, page)
		  : copy_upper(li, MAP_INDEX(v), page)))
		pg_atomic_write_u32(&cp->valid, 0);
}

/* ---------- building ---------- */

/* Bytes of a copy with these capacities. */
static Size
copy_size(uint32 mapcap, uint32 gcap, uint32 ucap, int npp, int node_size, Size *offs)
{
	Size		sz = MAXALIGN(sizeof(CacheCopy));

	offs[0] = sz;
	sz = TYPEALIGN(64, sz + sizeof(pg_atomic_uint32) * (Size) mapcap);
	offs[1] = sz;
	sz += sizeof(CachePageDesc) * (Size) gcap;
	offs[2] = sz;
	sz = TYPEALIGN(64, sz + sizeof(CachePageDesc) * (Size) ucap);
	offs[5] = sz;
	sz = TYPEALIGN(64, sz + sizeof(uint32) * (Size) gcap * npp);
	offs[3] = sz;
	sz = TYPEALIGN(64, sz + (Size) node_size * gcap * npp);
	offs[4] = sz;
	sz += (Size) BLCKSZ * ucap;
	return sz;
}


static void
note_failure(CacheEntry *e, int status, BlockNumber nblocks)
{
	e->last_failure = status;
	e->failed_at = GetCurrentTimestamp();
	e->failed_nblocks = nblocks;
}

/*
 * The blocks a copy build reads, in order: every block after the
 * metapage (types NULL), or only graph and upper pages. A read stream
 * over them keeps effective_io_concurrency reads in flight (and combines
 * neighbouring blocks), so the first scan of a cold index does not read
 * the whole index one synchronous read at a time.
 */
typedef struct BuildBlocks
{
	BlockNumber next;
	BlockNumber end;
	const uint8 *types;
} BuildBlocks;

static BlockNumber
build_blocks_next(ReadStream *stream, void *arg, void *per_buffer_data)
{
	BuildBlocks *p = (BuildBlocks *) arg;

	while (p->next < p->end)
	{
		BlockNumber blk = p->next++;

		if (p->types == NULL || p->types[blk] == SHNSW_PAGE_GRAPH ||
			p->types[blk] == SHNSW_PAGE_UPPER)
			return blk;
	}
	return InvalidBlockNumber;
}

static ReadStream *
build_stream(Relation index, BuildBlocks *bb, BufferAccessStrategy strategy)
{
	return read_stream_begin_relation(READ_STREAM_SEQUENTIAL | READ_STREAM_FULL, strategy,
									  index, MAIN_FORKNUM, build_blocks_next, bb, 0);
}


/* Claim entry e for a build by this backend; its slot. Lock held. */
static int
claim_locked(CacheEntry *e, Relation index)
{
	e->state = ENTRY_BUILDING;
	e->builder_pid = MyProcPid;
	e->owner = index->rd_rel->relowner;
	e->copy_id = 0;
	cache_pending_slot = e - cache_ctl->entries;
	cache_pending_copy_id = 0;
	cache_pending_refresh = false;
	return cache_pending_slot;
}

/*
 * entry_claim claims the index's entry for a build by this backend
 * (BUILDING, cache_pending_slot set): the slot, or -1 with *status saying why.
 * explicit: drops a ready copy and ignores recent failures.
 */
static int
entry_claim(Relation index, bool explicit, BlockNumber nblocks, int *status)
{
	CacheEntry   *e;
	dsm_handle	unpin[CACHE_MAX_ENTRIES + 1];
	int			nunpin = 0;
	int			slot = -1;

	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = cache_find_entry(index);
	if (e != NULL && e->state >= ENTRY_BUILDING)
	{
		if (e->state == ENTRY_READY && explicit)
			unpin[nunpin++] = cache_drop_segment(e);
		else
			e = NULL, *status = SHNSW_CACHE_BUILDING;
	}
	else if (e == NULL)
	{
		e = cache_entry_new(index, explicit, unpin, &nunpin);
		if (e == NULL)
			*status = SHNSW_CACHE_UNAVAILABLE;
	}
	else if (!explicit && cache_entry_failed_recently(e, nblocks))
	{
		/* it failed recently, or for this very size: do not retry every scan */
		*status = e->last_failure;
		e = NULL;
	}
	if (e != NULL)
		slot = claim_locked(e, index);
	LWLockRelease(&cache_ctl->lock);
	cache_unpin(unpin, nunpin);
	return slot;
}

/*
 * successor_claim claims a second entry for the index, a successor (no
 * scan or writer finds it: cache_find_entry), for the build of a larger
 * copy while the outgrown one keeps serving: the slot, or -1 with *status
 * saying why (the copy is not ready, or a successor is being built).
 */
static int
successor_claim(Relation index, int *status)
{
	CacheEntry   *o;
	CacheEntry   *e = NULL;
	dsm_handle	unpin[CACHE_MAX_ENTRIES + 1];
	int			nunpin = 0;
	int			slot = -1;
	bool		busy = false;

	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
		busy |= cache_ctl->entries[i].successor &&
			cache_ctl->entries[i].state >= ENTRY_BUILDING &&
			cache_ctl->entries[i].relid == RelationGetRelid(index) &&
			cache_ctl->entries[i].dbid == MyDatabaseId;
	o = cache_find_entry(index);
	if (busy || o == NULL || o->state != ENTRY_READY)
		*status = SHNSW_CACHE_BUILDING;
	else if ((e = cache_entry_new(index, false, unpin, &nunpin)) == NULL)
		*status = SHNSW_CACHE_UNAVAILABLE;
	else
	{
		/* (the table full, the outgrown copy's own entry may come back) */
		e->successor = e != o;
		e->outgrown = o->outgrown + 1;	/* sized as the regrowth it is */
		slot = claim_locked(e, index);
	}
	LWLockRelease(&cache_ctl->lock);
	cache_unpin(unpin, nunpin);
	return slot;
}

/*
 * entry_fail gives up this backend's claim of the entry in slot (no
 * segment published yet), returning its reserved bytes and noting why.
 * A copy too big for the budget or for dynamic shared memory is said in
 * the server log, with why, once until the index's status changes: the
 * user who wonders why scans do not use the cache finds it there.
 */
static void
entry_fail(Relation index, int slot, int status, BlockNumber nblocks, const char *why)
{
	CacheEntry   *e;
	bool		say;

	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = &cache_ctl->entries[slot];
	cache_ctl->total_bytes -= e->bytes;
	e->bytes = 0;
	e->state = e->successor ? ENTRY_FREE : ENTRY_EMPTY;
	e->builder_pid = 0;
	note_failure(e, status, nblocks);
	say = (status == SHNSW_CACHE_TOO_BIG || status == SHNSW_CACHE_UNAVAILABLE) &&
		e->logged_failure != status;
	if (say)
		e->logged_failure = status;
	cache_pending_slot = -1;
	LWLockRelease(&cache_ctl->lock);
	if (say)
		cache_log_failure(index, status, why);
}

/* entry_fail for a copy of size bytes over the budget */
static void
entry_fail_too_big(Relation index, int slot, Size size, BlockNumber nblocks)
{
	char		why[320];
	char		budget[256];

	cache_size_detail(budget, sizeof(budget));
	snprintf(why, sizeof(why), "The copy needs %zu kB; %s", size / 1024, budget);
	entry_fail(index, slot, SHNSW_CACHE_TOO_BIG, nblocks, why);
}

/*
 * database_wanted says whether a DROP DATABASE, an ALTER DATABASE ...
 * RENAME or a CREATE DATABASE using this database as its template waits
 * for this worker to leave. Each holds (or queues for) a lock on the
 * database object that conflicts with RowExclusiveLock, the lock a backend
 * takes to connect, and then waits only 5 s for other sessions to go
 * (CountOtherDBBackends), signalling autovacuum workers alone.
 */
static bool
database_wanted(void)
{
	if (!ConditionalLockSharedObject(DatabaseRelationId, MyDatabaseId, 0, RowExclusiveLock))
		return true;
	UnlockSharedObject(DatabaseRelationId, MyDatabaseId, 0, RowExclusiveLock);
	return false;
}

/*
 * build_yields says whether the build that claimed slot should give up
 * now: only a background worker's build does, when a VACUUM truncation is
 * waiting for the index's lock (cut_until; see shnsw_cache_cut_waiting) or
 * a command waits for the database to be free of sessions
 * (database_wanted). A build in a scan or in streamhnsw_cache_load runs in
 * a transaction that holds its lock to the end anyway, so stopping it
 * would free nothing.
 */
static bool
build_yields(int slot)
{
	uint64		until;

	if (!AmBackgroundWorkerProcess())
		return false;
	until = pg_atomic_read_u64(&cache_ctl->entries[slot].cut_until);
	if (until != 0 && (uint64) GetCurrentTimestamp() < until)
		return true;
	return database_wanted();
}

/*
 * build_delay is streamhnsw.debug_cache_build_delay for tests: a worker's
 * build waits that long after its claim, holding what a build holds (the
 * index's AccessShareLock, the claim), unless a truncation waits (then it
 * gives up: false); a worker's refresh as long after reading its token.
 */
static bool
build_delay(int slot)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  shnsw_debug_cache_build_delay);

	while (AmBackgroundWorkerProcess() && GetCurrentTimestamp() < end)
	{
		if (build_yields(slot))
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	return true;
}

/*
 * scan_page_types reads the type of every block after the metapage (pass
 * 1 of a build) into a palloc'd array, counting graph and upper pages.
 * NULL if the build yields to a truncation (build_yields) meanwhile.
 */
static uint8 *
scan_page_types(Relation index, int slot, BlockNumber nblocks, BufferAccessStrategy strategy,
				uint32 *ng, uint32 *nu)
{
	uint8	   *types = palloc0(nblocks);
	BuildBlocks bb = {SHNSW_METAPAGE_BLKNO + 1, nblocks, NULL};
	ReadStream *stream = build_stream(index, &bb, strategy);

	*ng = *nu = 0;
	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < nblocks; blk++)
	{
		Buffer		buf = read_stream_next_buffer(stream, NULL);
		Page		page;

		Assert(BufferGetBlockNumber(buf) == blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (!PageIsNew(page) && ShnswPageGetOpaque(page)->magic == SHNSW_MAGIC)
		{
			types[blk] = (uint8) ShnswPageGetOpaque(page)->page_type;
			if (types[blk] == SHNSW_PAGE_GRAPH)
				(*ng)++;
			else if (types[blk] == SHNSW_PAGE_UPPER)
				(*nu)++;
		}
		UnlockReleaseBuffer(buf);
		if ((blk & 63) == 0)
		{
			CHECK_FOR_INTERRUPTS();
			if (build_yields(slot))
			{
				read_stream_end(stream);
				pfree(types);
				return NULL;
			}
		}
	}
	read_stream_end(stream);
	return types;
}

/*
 * entry_reserve accounts size bytes to the claimed entry in slot, evicting
 * (idle copies only unless explicit) to make room. False with *status if
 * it does not fit; the claim is then given up.
 */
static bool
entry_reserve(Relation index, int slot, Size size, bool explicit, BlockNumber nblocks,
			  int *status)
{
	Size		budget = cache_budget();
	dsm_handle	unpin[CACHE_MAX_ENTRIES + 1];
	int			nunpin = 0;
	CacheEntry   *e;
	bool		ok = false;

	for (int attempt = 0; attempt < 2 && !ok; attempt++)
	{
		LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
		e = &cache_ctl->entries[slot];
		ok = size <= budget && cache_make_room(size, e, !explicit, unpin, &nunpin);
		if (ok)
		{
			cache_ctl->total_bytes += size;
			e->bytes = size;
		}
		LWLockRelease(&cache_ctl->lock);
		cache_unpin(unpin, nunpin);
		nunpin = 0;
		if (ok || size > budget)
			break;

		/*
		 * Copies evicted (or dropped earlier) that this backend still maps
		 * count until it lets them go: if no scan of its transaction uses
		 * one, it can now, and try again.
		 */
		cache_local_sweep();
	}
	if (!ok)
	{
		*status = size > budget ? SHNSW_CACHE_TOO_BIG : SHNSW_CACHE_FULL;
		if (*status == SHNSW_CACHE_TOO_BIG)
			entry_fail_too_big(index, slot, size, nblocks);
		else
			entry_fail(index, slot, *status, nblocks, NULL);
	}
	return ok;
}

/*
 * copy_layout writes a new copy's header into seg and maps the pass-1
 * pages (types) as reserved: writers skip them, the build copies them. tok
 * is the metapage state read before any page is copied: every change
 * before it is in the pages the build copies after, every change after it
 * is written through or copied too (or, on a standby, found by the next
 * refresh: the token is behind then, not ahead).
 */
static void
copy_layout(dsm_segment *seg, const ShnswIndexInfo *info, const uint8 *types,
			 BlockNumber nblocks, uint32 ng, uint32 nu, bool grown, const Size *offs,
			 Size size, const CacheToken *tok)
{
	CacheCopy   *cp = (CacheCopy *) dsm_segment_address(seg);
	pg_atomic_uint32 *map = (pg_atomic_uint32 *) ((char *) cp + offs[0]);
	CachePageDesc *gd = (CachePageDesc *) ((char *) cp + offs[1]);
	CachePageDesc *ud = (CachePageDesc *) ((char *) cp + offs[2]);
	int			npp = shnsw_nodes_per_page(info->node_size);

	memset(cp, 0, offs[0]);
	pg_atomic_init_u32(&cp->valid, 1);
	pg_atomic_init_u32(&cp->outgrown, 0);
	pg_atomic_init_u64(&cp->meta_lsn, tok->lsn);
	pg_atomic_init_u64(&cp->meta_gen, tok->gen);
	cp->meta_nonce = tok->nonce;
	cp->meta_trunc = tok->trunc;
	pg_atomic_init_u32(&cp->gnext, ng);
	pg_atomic_init_u32(&cp->unext, nu);
	pg_atomic_init_u32(&cp->pnext, 0);
	pg_atomic_init_u32(&cp->reorder, 0);
	cp->m = info->m;
	cp->vec_span = info->vec_span;
	cp->node_size = info->node_size;
	cp->npp = npp;
	cp->slot_bits = info->slot_bits;
	cp->mapcap = COPY_MAPCAP(nblocks, grown);
	cp->gcap = COPY_GCAP(ng, grown);
	cp->ucap = COPY_UCAP(nu, grown);
	cp->build_nblocks = nblocks;
	cp->pcap = cp->gcap * npp;
	pg_atomic_init_u32(&cp->ordered, cp->pcap);	/* until the build ends */
	cp->map_off = offs[0];
	cp->gdesc_off = offs[1];
	cp->udesc_off = offs[2];
	cp->recpos_off = offs[5];
	cp->gdata_off = offs[3];
	cp->udata_off = offs[4];
	cp->total = size;
	for (uint32 b = 0; b < cp->mapcap; b++)
		pg_atomic_init_u32(&map[b], b < nblocks &&
						   (types[b] == SHNSW_PAGE_GRAPH || types[b] == SHNSW_PAGE_UPPER)
						   ? MAP_RESERVED : MAP_ABSENT);
	for (uint32 i = 0; i < cp->gcap; i++)
	{
		pg_atomic_init_u32(&gd[i].seq, 0);
		gd[i].nslots = 0;
		gd[i].lsn = 0;
	}
	for (uint32 i = 0; i < cp->ucap; i++)
	{
		pg_atomic_init_u32(&ud[i].seq, 0);
		ud[i].nslots = 0;
		ud[i].lsn = 0;
	}
	memset((char *) cp + offs[5], 0xFF, sizeof(uint32) * (Size) cp->pcap);	/* RECPOS_NONE */
}

/*
 * copy_publish gives the laid-out segment its id and names it in the
 * claimed entry: from now on writers copy the pages they change into it.
 */
static LocalCopy *
copy_publish(int slot, dsm_segment *seg)
{
	CacheCopy   *cp = (CacheCopy *) dsm_segment_address(seg);
	CacheEntry   *e;
	LocalCopy *li;

	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = &cache_ctl->entries[slot];
	cp->copy_id = cache_ctl->next_copy_id++;
	e->copy_id = cp->copy_id;
	e->handle = dsm_segment_handle(seg);
	e->mappers = 1;				/* this backend */
	cache_pending_copy_id = cp->copy_id;
	pg_atomic_fetch_add_u32(&cache_ctl->ncopies, 1);
	li = cache_local_add(seg);
	LWLockRelease(&cache_ctl->lock);
	return li;
}

/*
 * copy_pages (pass 2) copies each graph and upper page of types
 * into the copy under the page's share lock, publishing its map entry
 * before releasing the lock. Returns the node slots copied; sets *yielded
 * and stops if the build yields to a truncation (build_yields).
 */
static uint64
copy_pages(Relation index, int slot, LocalCopy *li, const uint8 *types,
		   BlockNumber nblocks, BufferAccessStrategy strategy, uint64 *near, bool *yielded)
{
	BuildBlocks bb = {SHNSW_METAPAGE_BLKNO + 1, nblocks, types};
	ReadStream *stream = build_stream(index, &bb, strategy);
	uint32		gi = 0,
				ui = 0;
	uint64		nodes = 0;

	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < nblocks; blk++)
	{
		Buffer		buf;
		Page		page;
		bool		ok;
		uint32		idx;

		if (types[blk] != SHNSW_PAGE_GRAPH && types[blk] != SHNSW_PAGE_UPPER)
			continue;
		buf = read_stream_next_buffer(stream, NULL);
		Assert(BufferGetBlockNumber(buf) == blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (types[blk] == SHNSW_PAGE_GRAPH)
		{
			idx = gi++;
			ok = copy_graph(li, idx, blk, page);
			if (ok)
			{
				nodes += li->gdesc[idx].nslots;
				near[0] += cache_page_near_links(li->cp, blk, page, &near[1]);
			}
		}
		else
		{
			idx = ui++;
			ok = copy_upper(li, idx, page);
		}
		pg_write_barrier();
		pg_atomic_write_u32(&li->map[blk], !ok ? MAP_ABSENT :
							(types[blk] == SHNSW_PAGE_GRAPH ? MAP_GRAPH : MAP_UPPER) | idx);
		UnlockReleaseBuffer(buf);
		if ((blk & 63) == 0)
		{
			CHECK_FOR_INTERRUPTS();
			if ((*yielded = build_yields(slot)))
				break;
		}
	}
	read_stream_end(stream);
	return nodes;
}

/*
 * copy_finish marks the entry ready (the copy's token was read before
 * the copy: copy_layout). False if a writer dropped the copy meanwhile.
 */
static bool
copy_finish(Relation index, int slot, LocalCopy *li, uint64 nodes, uint32 ng, uint32 nu)
{
	CacheCopy   *cp = li->cp;
	CacheEntry   *e;
	bool		ok;

	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = &cache_ctl->entries[slot];
	ok = e->copy_id == cp->copy_id && e->state == ENTRY_BUILDING;
	if (ok)
	{
		e->state = ENTRY_READY;
		e->builder_pid = 0;
		e->builds++;
		e->nodes = nodes;
		e->gpages = ng;
		e->upages = nu;
		e->last_failure = 0;
		e->logged_failure = 0;
		if (!AmBackgroundWorkerProcess())
			e->launched_at = 0; /* a worker clears it once its lock is gone */
		pg_atomic_write_u64(&e->last_used, (uint64) GetCurrentTimestamp());
	}
	cache_pending_slot = -1;
	LWLockRelease(&cache_ctl->lock);
	return ok;
}

/*
 * copy_catch_up ends a build or refresh of a published copy, on a server
 * that was a primary when it began, at the metapage's state now rather
 * than at the one read before the pages were copied. Every change since
 * that read is in a page copied after it or was written through into the
 * copy, except blocks appended before the copy was published, which are
 * copied here (from: the relation's size when its pages were listed).
 * Writers advance a copy's token only from the state before their own
 * change (write_meta_through), so a copy left at the first token while
 * writes go on would stay behind until they stop. The token is set under
 * the metapage's share lock: no writer changes it meanwhile.
 */
static void
copy_catch_up(Relation index, LocalCopy *li, BlockNumber from)
{
	CacheCopy  *cp = li->cp;
	BlockNumber nblocks = RelationGetNumberOfBlocks(index);
	Buffer		buf;
	Page		page;
	ShnswMetaPage meta;

	for (BlockNumber blk = Max(from, SHNSW_METAPAGE_BLKNO + 1); blk < nblocks; blk++)
	{
		buf = ReadBuffer(index, blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		cache_copy_page(li, blk, BufferGetPage(buf), true);
		UnlockReleaseBuffer(buf);
		if ((blk & 255) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	buf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	meta = ShnswPageGetMeta(page);
	if (meta->build_nonce == cp->meta_nonce && meta->truncations == cp->meta_trunc)
	{
		if (PageGetLSN(page) > pg_atomic_read_u64(&cp->meta_lsn))
			pg_atomic_write_u64(&cp->meta_lsn, PageGetLSN(page));
		if (meta->cache_generation > pg_atomic_read_u64(&cp->meta_gen))
			pg_atomic_write_u64(&cp->meta_gen, meta->cache_generation);
	}
	UnlockReleaseBuffer(buf);
}

/*
 * successor_swap puts the successor built in slot in the place of the
 * index's outgrown copy, which is dropped (backends that map it keep it
 * until their transaction ends), and claims it for the refresh that
 * recopies the pages written since they were copied: no writer wrote
 * into it while it was a successor. False (the successor dropped) if the
 * index's copy is being built or refreshed by another backend meanwhile.
 */
static bool
successor_swap(Relation index, int slot, LocalCopy *li)
{
	CacheEntry   *n;
	CacheEntry   *o;
	dsm_handle	h = DSM_HANDLE_INVALID;
	bool		ok;

	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	n = &cache_ctl->entries[slot];
	o = cache_find_entry(index);
	ok = n->copy_id == li->cp->copy_id && n->state == ENTRY_BUILDING &&
		(o == NULL || o->state == ENTRY_READY || o->state == ENTRY_EMPTY);
	if (!ok)
	{
		if (n->copy_id == li->cp->copy_id && n->state == ENTRY_BUILDING)
			h = cache_drop_segment(n);
		cache_pending_slot = -1;
	}
	else
	{
		if (o == NULL)
			o = n;				/* the outgrown copy's entry is gone */
		else
		{
			if (o->state == ENTRY_READY)
			{
				o->outgrown++;
				h = cache_drop_segment(o);
			}
			o->copy_id = n->copy_id;
			o->handle = n->handle;
			o->bytes = n->bytes;
			o->mappers = n->mappers;
			n->copy_id = 0;
			n->bytes = 0;
			n->mappers = 0;
			n->state = ENTRY_FREE;
		}
		o->successor = false;
		o->state = ENTRY_REFRESHING;
		o->builder_pid = MyProcPid;
		o->behind = false;
		cache_pending_slot = o - cache_ctl->entries;
		cache_pending_copy_id = li->cp->copy_id;
		cache_pending_refresh = true;
	}
	LWLockRelease(&cache_ctl->lock);
	cache_unpin(&h, 1);
	return ok;
}

/*
 * refresh_claimed refreshes the copy li, claimed for that (cache_pending_*),
 * and marks it ready: as a build (built: a successor just swapped in, of
 * nodes and pages) or a refresh. False if it was dropped meanwhile or a
 * write was skipped (behind: the next scan has it refreshed again).
 */
static bool
refresh_claimed(Relation index, LocalCopy *li, bool built, uint64 nodes, uint32 ng, uint32 nu)
{
	CacheEntry   *e;
	bool		kept;

	cache_refresh(index, li);
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = &cache_ctl->entries[cache_pending_slot];
	kept = e->copy_id == cache_pending_copy_id && e->state == ENTRY_REFRESHING;
	if (kept)
	{
		e->state = ENTRY_READY;
		e->builder_pid = 0;
		if (built)
		{
			e->builds++;
			e->nodes = nodes;
			e->gpages = ng;
			e->upages = nu;
			e->last_failure = 0;
		}
		else
			e->refreshes++;
		kept = !e->behind;		/* a write skipped meanwhile: not yet */
	}
	cache_pending_slot = -1;
	cache_pending_refresh = false;
	LWLockRelease(&cache_ctl->lock);
	return kept;
}

/*
 * build_copy builds a copy of the index in this backend: the index's copy
 * (the caller has none usable; explicit: on request, evicting any copy and
 * ignoring recent failures), or with successor a larger one to replace
 * the outgrown copy that serves meanwhile (successor_swap). Returns the
 * mapping, or NULL with *status saying why.
 */
static LocalCopy *
build_copy(Relation index, const ShnswIndexInfo *info, bool explicit, bool successor,
		   int *status)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(index);
	int			npp = shnsw_nodes_per_page(info->node_size);
	Size		node_bytes = info->node_size + sizeof(uint32);	/* record, place */
	bool		primary = !RecoveryInProgress();	/* before the token */
	ShnswMetaSnapshot snap;
	char		why[320];
	int			slot;
	uint8	   *types;
	uint32		ng,
				nu;
	Size		offs[6],
				size;
	dsm_segment *seg;
	LocalCopy *li;
	BufferAccessStrategy strategy = NULL;
	uint64		nodes;
	bool		yielded = false;
	bool		grown;
	bool		beside;			/* a successor: the old copy serves meanwhile */
	uint32		ordered;
	uint64		near[2] = {0, 0};	/* links to the same page, all links */
	CacheToken	tok;

	slot = successor ? successor_claim(index, status) :
		entry_claim(index, explicit, nblocks, status);
	if (slot < 0)
		return NULL;

	/* a lower bound from what the metapage counts: skip hopeless attempts */
	shnsw_read_meta(index, &snap);
	if ((Size) snap.node_count * node_bytes > cache_budget())
	{
		*status = SHNSW_CACHE_TOO_BIG;
		entry_fail_too_big(index, slot, (Size) snap.node_count * node_bytes, nblocks);
		return NULL;
	}

	if (shnsw_debug_cache_build_delay > 0 && !build_delay(slot))
		types = NULL;
	else
	{
		strategy = GetAccessStrategy(BAS_BULKREAD);
		types = scan_page_types(index, slot, nblocks, strategy, &ng, &nu);
		if (types == NULL)
			FreeAccessStrategy(strategy);
	}
	if (types == NULL)
	{
		/* a truncation or a DROP DATABASE waits: give the claim back, no failure noted */
		cache_release_pending();
		*status = SHNSW_CACHE_MISSING;
		return NULL;
	}
	LWLockAcquire(&cache_ctl->lock, LW_SHARED);
	grown = cache_ctl->entries[slot].outgrown > 0;
	LWLockRelease(&cache_ctl->lock);
	size = copy_size(COPY_MAPCAP(nblocks, grown), COPY_GCAP(ng, grown), COPY_UCAP(nu, grown),
					 npp, info->node_size, offs);
	if (!entry_reserve(index, slot, size, explicit, nblocks, status))
		seg = NULL;
	else if (!cache_shm_room(size, why, sizeof(why)))
	{
		/* it would fit, or nearly, and leave parallel queries none */
		seg = NULL;
		*status = SHNSW_CACHE_UNAVAILABLE;
		entry_fail(index, slot, *status, nblocks, why);
	}
	else if ((seg = cache_create_segment(size)) == NULL)
	{
		*status = SHNSW_CACHE_UNAVAILABLE;
		snprintf(why, sizeof(why), "A segment of %zu kB could not be created: %s",
				 size / 1024, cache_dsm_error);
		entry_fail(index, slot, *status, nblocks, why);
	}
	if (seg == NULL)
	{
		FreeAccessStrategy(strategy);
		pfree(types);
		return NULL;
	}

	/* the token first, then the pages (hole 1 of issue 49: a standby) */
	shnsw_read_meta(index, &snap);
	tok = cache_token_of(&snap);
	copy_layout(seg, info, types, nblocks, ng, nu, grown, offs, size, &tok);
	li = copy_publish(slot, seg);
	beside = cache_ctl->entries[slot].successor;
	ordered = beside ? cache_order_records(index, li, types, nblocks, snap.entry,
										   build_yields, slot) : 0;
	nodes = copy_pages(index, slot, li, types, nblocks, strategy, near, &yielded);
	FreeAccessStrategy(strategy);
	pfree(types);
	if (yielded)
	{
		cache_release_pending(); /* drops the half-made copy */
		*status = SHNSW_CACHE_MISSING;
		return NULL;
	}
	if (primary && !beside)
		copy_catch_up(index, li, nblocks);	/* a successor: its refresh does */
	cache_order_done(li, successor, ordered, nodes, near);
	if (beside)
	{
		/* the writes it missed are found by their page LSNs */
		if (!successor_swap(index, slot, li) ||
			!refresh_claimed(index, li, true, nodes, ng, nu))
		{
			*status = SHNSW_CACHE_STALE;
			return NULL;
		}
	}
	else if (!copy_finish(index, slot, li, nodes, ng, nu))
	{
		/* a writer could not copy a change into it and dropped it */
		*status = SHNSW_CACHE_STALE;
		return NULL;
	}
	*status = SHNSW_CACHE_BUILT;
	cache_warm_note();
	return li;
}

/* build_copy of the index's copy (see there) */
LocalCopy *
cache_build(Relation index, const ShnswIndexInfo *info, bool explicit, int *status)
{
	return build_copy(index, info, explicit, false, status);
}

/*
 * cache_refresh brings a copy that is behind the metapage up to date:
 * recopies every page whose LSN differs from its copy's (a hot standby,
 * where WAL replay runs no extension code, gets here after each replayed
 * change of the metapage), and adds pages appended since the build. The
 * caller has claimed the entry (REFRESHING).
 */
void
cache_refresh(Relation index, LocalCopy *li)
{
	CacheCopy   *cp = li->cp;
	bool		primary = !RecoveryInProgress();	/* before the token */
	ShnswMetaSnapshot snap;
	CacheToken	tok;
	BlockNumber nblocks;

	shnsw_read_meta(index, &snap);
	tok = cache_token_of(&snap);
	if (shnsw_debug_cache_build_delay > 0 && cache_pending_slot >= 0)
		(void) build_delay(cache_pending_slot);
	if (tok.nonce != cp->meta_nonce || tok.trunc != cp->meta_trunc)
	{
		/* rebuilt or truncated since: blocks may have changed type; rebuild */
		pg_atomic_write_u32(&cp->valid, 0);
		return;
	}
	nblocks = RelationGetNumberOfBlocks(index);
	if (nblocks > cp->mapcap)
	{
		pg_atomic_write_u32(&cp->outgrown, 1);
		nblocks = cp->mapcap;
	}
	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < nblocks; blk++)
	{
		uint32		v = pg_atomic_read_u32(&li->map[blk]);
		Buffer		buf;
		Page		page;
		CachePageDesc *d;

		if (v == MAP_ABSENT && blk < cp->build_nblocks)
			continue;			/* not graph or upper when built: pages keep their type */
		if (v == MAP_RESERVED)
			continue;
		buf = ReadBuffer(index, blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		d = v == MAP_ABSENT ? NULL : MAP_KIND(v) == MAP_GRAPH ? &li->gdesc[MAP_INDEX(v)]
			: &li->udesc[MAP_INDEX(v)];
		if (d == NULL || d->lsn != PageGetLSN(page))
			cache_copy_page(li, blk, page, true);
		UnlockReleaseBuffer(buf);
		if ((blk & 255) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	pg_atomic_write_u64(&cp->meta_lsn, tok.lsn);
	pg_atomic_write_u64(&cp->meta_gen, tok.gen);
	if (primary)
		copy_catch_up(index, li, nblocks);
}

/*
 * cache_refresh_or_drop handles a copy behind the metapage. A logged index's
 * pages say, by their LSN, which changed: this backend claims the copy
 * and recopies those (returned if it then reflects (lsn, gen)). Otherwise
 * (unlogged, or invalid) the copy is dropped and *rebuild set.
 */
LocalCopy *
cache_refresh_or_drop(Relation index, const ShnswIndexInfo *info, const CacheToken *tok,
					  bool *rebuild)
{
	CacheEntry   *e;
	LocalCopy *li = NULL;
	bool		refresh = false;
	bool		kept;
	dsm_handle	h = DSM_HANDLE_INVALID;

	*rebuild = false;
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = cache_find_entry(index);
	if (e != NULL && e->state == ENTRY_READY)
	{
		li = cache_local_find(e->copy_id);
		if (li != NULL && RelationNeedsWAL(index) && pg_atomic_read_u32(&li->cp->valid) &&
			copy_same_index(li->cp, tok))
		{
			e->state = ENTRY_REFRESHING;
			e->behind = false;	/* a write skipped from now on sets it again */
			e->builder_pid = MyProcPid;
			cache_pending_slot = e - cache_ctl->entries;
			cache_pending_copy_id = e->copy_id;
			cache_pending_refresh = true;
			refresh = true;
		}
		else
		{
			e->invalidations++;
			h = cache_drop_segment(e);
			*rebuild = true;
		}
	}
	LWLockRelease(&cache_ctl->lock);
	cache_unpin(&h, 1);
	if (!refresh)
		return NULL;

	kept = refresh_claimed(index, li, false, 0, 0, 0);
	return kept && copy_current(li->cp, tok) ? li : NULL;
}

/*
 * worker_refresh brings the index's copy up to its metapage (refreshed,
 * or rebuilt when it cannot be), for the background worker a scan that
 * found it behind started (cache_request_build with refresh).
 */
static void
worker_refresh(Relation index, const ShnswIndexInfo *info)
{
	ShnswMetaSnapshot snap;
	CacheToken	tok;
	bool		rebuild = false;
	int			status;

	shnsw_read_meta(index, &snap);
	tok = cache_token_of(&snap);
	if (cache_local_map(index, true) != NULL)
		(void) cache_refresh_or_drop(index, info, &tok, &rebuild);
	if (rebuild)
		(void) cache_build(index, info, false, &status);
}

/*
 * cache_drop_outgrown drops the index's copy copy_id, which inserts have
 * outgrown (pages it had no room for are read through buffers), and notes
 * that the index grows: the build that follows gives the new copy half
 * again its size as room instead of an eighth. Until the new copy is
 * ready, scans read through buffers.
 */
void
cache_drop_outgrown(Relation index, uint64 copy_id)
{
	CacheEntry *e;
	dsm_handle	h = DSM_HANDLE_INVALID;

	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = cache_find_entry(index);
	if (e != NULL && e->state == ENTRY_READY && e->copy_id == copy_id)
	{
		e->outgrown++;
		h = cache_drop_segment(e);
	}
	LWLockRelease(&cache_ctl->lock);
	cache_unpin(&h, 1);
}

/*
 * worker_regrow builds a larger copy of the index while its outgrown copy
 * serves, for the background worker a scan started (CACHE_REQ_REGROW).
 * When the budget has no room for both, the outgrown copy goes first, as
 * without a worker.
 */
static void
worker_regrow(Relation index, const ShnswIndexInfo *info)
{
	LocalCopy  *li = cache_local_map(index, true);
	int			status;

	if (li == NULL || (pg_atomic_read_u32(&li->cp->outgrown) == 0 &&
					   pg_atomic_read_u32(&li->cp->reorder) == 0))
		return;					/* dropped, or regrown, meanwhile */
	if (build_copy(index, info, false, true, &status) != NULL ||
		(status != SHNSW_CACHE_FULL && status != SHNSW_CACHE_TOO_BIG &&
		 status != SHNSW_CACHE_UNAVAILABLE))
		return;
	if (pg_atomic_read_u32(&li->cp->outgrown) == 0)
	{
		/* only out of graph order, and no room for both: it keeps serving */
		cache_reorder_refused(li);
		return;
	}
	cache_drop_outgrown(index, li->cp->copy_id);
	(void) cache_build(index, info, false, &status);
}

/* ---------- building in the background ---------- */


PGDLLEXPORT void streamhnsw_cache_worker(Datum arg);



/*
 * cache_request_build asks a dynamic background worker to build the index's
 * copy, so that the scan that found none searches through buffers at
 * once instead of paying for the build (CACHE_REQ_BUILD); to bring the
 * ready copy the scan found behind the index up to date (a hot standby
 * after replayed changes: CACHE_REQ_REFRESH), so that no user's scan pays
 * for a pass over the index; or to build a larger copy in the place of
 * one that inserts outgrew, which serves meanwhile (CACHE_REQ_REGROW).
 * At most one request per index is outstanding (the entry's
 * launched_at, for CACHE_RETRY_SECS: a worker that never starts is asked
 * for again after that). Returns true if the work is on its way, or
 * should not be tried now (*status says why); false if no worker could be
 * registered (max_worker_processes reached): the caller does it itself.
 */
bool
cache_request_build(Relation index, int kind, int *status)
{
	bool		refresh = kind != CACHE_REQ_BUILD;	/* of a ready copy */
	BackgroundWorker bgw;
	CacheBuildRequest req = {0};	/* last_used 0: not the warmer's */
	CacheEntry   *e;
	dsm_handle	unpin[CACHE_MAX_ENTRIES + 1];
	int			nunpin = 0;
	TimestampTz now = GetCurrentTimestamp();
	bool		launch = false;
	bool		warm;
	int			slot = -1;

	/* the common case while a worker runs: asked already, nothing to do */
	LWLockAcquire(&cache_ctl->lock, LW_SHARED);
	e = cache_find_entry(index);
	launch = e == NULL || e->launched_at == 0 ||
		TimestampDifferenceExceeds(e->launched_at, now, CACHE_RETRY_SECS * 1000);
	LWLockRelease(&cache_ctl->lock);
	if (!launch)
	{
		if (kind != CACHE_REQ_REGROW)
			*status = refresh ? SHNSW_CACHE_STALE : SHNSW_CACHE_BUILDING;
		return true;
	}
	launch = false;

	cache_sweep_dropped();
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	warm = cache_ctl->warm_pending;
	cache_ctl->warm_pending = false;
	e = cache_find_entry(index);
	if (e == NULL)
		e = cache_entry_new(index, false, unpin, &nunpin);
	if (e == NULL)
		*status = SHNSW_CACHE_UNAVAILABLE;
	else if (refresh && e->state != ENTRY_READY)
		*status = e->state == ENTRY_REFRESHING ? SHNSW_CACHE_STALE : SHNSW_CACHE_BUILDING;
	else if (!refresh && e->state >= ENTRY_BUILDING)
		*status = SHNSW_CACHE_BUILDING;
	else if (!refresh && cache_entry_failed_recently(e, RelationGetNumberOfBlocks(index)))
		*status = e->last_failure;
	else if (e->launched_at != 0 &&
			 !TimestampDifferenceExceeds(e->launched_at, now, CACHE_RETRY_SECS * 1000))
		*status = refresh ? SHNSW_CACHE_STALE : SHNSW_CACHE_BUILDING;
	else
	{
		e->launched_at = now;
		launch = true;
		slot = e - cache_ctl->entries;
	}
	LWLockRelease(&cache_ctl->lock);
	cache_unpin(unpin, nunpin);
	if (warm)
		cache_warm_start();		/* the server's first request: the last list */
	if (!launch)
		return true;

	cache_build_worker_init(&bgw, RelationGetRelid(index));
	req.dbid = MyDatabaseId;
	req.relid = RelationGetRelid(index);
	req.cache_size_mb = shnsw_shared_cache_size;
	cache_size_capped(&req.capped_from, &req.shm_mb);
	req.delay_ms = shnsw_debug_cache_build_delay;
	req.kind = kind;
	memcpy(bgw.bgw_extra, &req, sizeof(req));
	bgw.bgw_notify_pid = 0;
	if (RegisterDynamicBackgroundWorker(&bgw, NULL))
	{
		*status = kind == CACHE_REQ_BUILD ? SHNSW_CACHE_LAUNCHED :
			kind == CACHE_REQ_REFRESH ? SHNSW_CACHE_REFRESH_LAUNCHED : *status;
		return true;
	}

	/* no background worker slot: withdraw the request */
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = &cache_ctl->entries[slot];
	if (e->relid == RelationGetRelid(index) && e->launched_at == now)
		e->launched_at = 0;
	LWLockRelease(&cache_ctl->lock);
	return false;
}

/*
 * worker_done clears the launch note of the index relid once the worker's
 * transaction is over (its lock released): until then a VACUUM truncation
 * may wait for it (shnsw_cache_cut_waiting), and no scan asks for another.
 */
static void
worker_done(Oid relid)
{
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
	{
		CacheEntry   *e = &cache_ctl->entries[i];

		if (e->state != ENTRY_FREE && e->relid == relid && e->dbid == MyDatabaseId)
			e->launched_at = 0;
	}
	LWLockRelease(&cache_ctl->lock);
}

/*
 * streamhnsw_cache_worker is the background worker cache_request_build starts:
 * it connects to the index's database, builds the copy as a scan would
 * (claiming the entry, so a scan or another worker never builds it twice)
 * and exits. An error ends the worker only; its claim is given up by the
 * abort and exit callbacks, the failure noted, and a later scan asks again.
 *
 * It holds no snapshot while it builds: it reads index pages only, and the
 * catalog snapshot that opening the index took (relcache, syscache) is
 * dropped before the build, so its transaction has no xmin and never holds
 * back a VACUUM's horizon. Its AccessShareLock on the index it gives up
 * early when a VACUUM truncation waits for the index (build_yields).
 */
void
streamhnsw_cache_worker(Datum arg)
{
	CacheBuildRequest req;
	Relation	index;
	int			status;

	memcpy(&req, MyBgworkerEntry->bgw_extra, sizeof(req));
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(req.dbid, InvalidOid, 0);
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING, "streamhnsw: building a shared cache copy");
	if (req.cache_size_mb >= 0)
	{
		char		val[32];

		snprintf(val, sizeof(val), "%d", req.cache_size_mb);
		SetConfigOption("streamhnsw.shared_cache_size", val, PGC_SUSET, PGC_S_SESSION);
		cache_size_set_capped(req.capped_from, req.shm_mb);
	}
	shnsw_debug_cache_build_delay = req.delay_ms;
	/* a copy rebuilt after a restart fits, or waits for a scan to ask */
	cache_evict_none = req.last_used != 0;
	cache_get_ctl();
	index = try_relation_open(req.relid, AccessShareLock);
	if (index != NULL)
	{
		if (index->rd_rel->relkind == RELKIND_INDEX &&
			index->rd_rel->relam == get_index_am_oid("streamhnsw", true))
		{
			ShnswIndexInfo *info = shnsw_get_index_info(index);

			/* no catalog access from here on: no snapshot, no xmin */
			InvalidateCatalogSnapshot();
			Assert(MyProc->xmin == InvalidTransactionId);
			if (req.kind == CACHE_REQ_REFRESH)
				worker_refresh(index, info);
			else if (req.kind == CACHE_REQ_REGROW)
				worker_regrow(index, info);
			else if (info->quant_trained &&
				cache_build(index, info, false, &status) != NULL && req.last_used != 0)
			{
				CacheEntry *e;

				/* rebuilt after a restart: its last use is the one before */
				LWLockAcquire(&cache_ctl->lock, LW_SHARED);
				e = cache_find_entry(index);
				if (e != NULL)
					pg_atomic_write_u64(&e->last_used, (uint64) req.last_used);
				LWLockRelease(&cache_ctl->lock);
			}
		}
		relation_close(index, AccessShareLock);
	}
	CommitTransactionCommand();
	worker_done(req.relid);
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}

/*
 * shnsw_cache_cut_waiting is called by a VACUUM truncation whose conditional
 * AccessExclusiveLock on the index failed: it asks a background build of
 * the index's copy, if one is running, to give up its lock (for the next
 * second: a truncation that stops asking, cancelled or done, stops
 * holding builds back by itself), and returns true if one is running or
 * launched (then waiting a moment for the lock is worthwhile); false if
 * someone else holds the lock (a scan or insert, for its transaction).
 */
bool
shnsw_cache_cut_waiting(Relation index)
{
	CacheEntry   *e;
	bool		bg = false;
	TimestampTz now = GetCurrentTimestamp();

	if (!cache_registry_exists() || cache_try_get_ctl() == NULL)
		return false;			/* no registry, no background build */
	LWLockAcquire(&cache_ctl->lock, LW_SHARED);
	e = cache_find_entry(index);
	if (e != NULL && e->launched_at != 0 &&
		!TimestampDifferenceExceeds(e->launched_at, now, CACHE_RETRY_SECS * 1000))
	{
		uint64		until = (uint64) TimestampTzPlusMilliseconds(now, 1000);

		pg_atomic_write_u64(&e->cut_until, until);
		/* the request may be building a successor: it yields too */
		for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
		{
			CacheEntry *s = &cache_ctl->entries[i];

			if (s->successor && s->state == ENTRY_BUILDING && s->dbid == MyDatabaseId &&
				s->relid == RelationGetRelid(index))
				pg_atomic_write_u64(&s->cut_until, until);
		}
		bg = true;
	}
	LWLockRelease(&cache_ctl->lock);
	return bg;
}
