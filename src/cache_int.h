/*-------------------------------------------------------------------------
 *
 * cache_int.h
 *	  The shared cache's internals, shared by the cache_*.c files only: the
 *	  registry's table, the layout of a cached copy in its segment, a
 *	  backend's mappings, and the functions the files call of each other.
 *
 * Registry. A small named DSM segment (the DSM registry: no
 * shared_preload_libraries) holds a fixed table of entries keyed by
 * (database, index OID, relfilelocator), each naming the DSM segment of its
 * copy, its state (building, ready, refreshing) and its counters, under
 * one LWLock. A copy is one segment, pinned (dsm_pin_segment) so that it
 * outlives the backend that built it; backends map it once and keep the
 * mapping (dsm_pin_mapping). Dropping or evicting a copy unpins its
 * segment: the memory is returned when the last backend that mapped it
 * detaches, which each backend does at the first scan of a transaction
 * after the drop (no scan of its own can be using it then), so a scan never
 * reads unmapped memory and needs no reference count.
 *
 * Layout of a copy (CacheCopy, then at the offsets it records):
 *
 *	 map[block]		  per block of the index: absent, reserved (the build
 *					  will copy it), or graph/upper + the page's slot
 *	 gdesc[], udesc[]  per page slot: seqlock, slot count, page LSN
 *	 recpos[]		  per node slot (page slot * npp + slot): where its
 *					  record is in gdata, or RECPOS_NONE (not placed yet)
 *	 gdata			  graph pages' node records, node_size apart, in the
 *					  copy's own order: breadth-first over layer 0 at the
 *					  build (cache_order.c), then as inserts add them
 *	 udata			  upper pages, whole (their records are line-pointer items)
 *
 * The records are placed in graph order, not in the index's page order: in
 * an index filled by inserts a page holds nodes in the order they arrived,
 * far apart in the graph, and a search's reads of a node's neighbours
 * would touch as many memory pages as it has neighbours. A node slot's
 * position is set once, under its page's buffer lock (the build's copy or
 * a writer's write-through), inside its page slot's seqlock, and never
 * changes for the copy's life.
 *
 * Vector pages are not copied: re-ranking reads exact vectors through
 * shared buffers (a few dozen pages per query).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_CACHE_INT_H
#define STREAMHNSW_CACHE_INT_H

#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/block.h"
#include "storage/dsm.h"
#include "storage/lwlock.h"
#include "storage/relfilelocator.h"

#include "format.h"
#include "meta.h"

#define CACHE_MAX_ENTRIES	64	/* registry entries (indexes) */
#define CACHE_RETRY_SECS		10	/* after a failed build, retry lazily after */
#define CACHE_IDLE_SECS		10	/* a lazy build evicts only copies idle this long */
#define CACHE_MAX_DROPPED	128	/* dropped copies still mapped, counted */
#define CACHE_REORDER_MIN	10000	/* records out of graph order before a copy
									 * is rebuilt in graph order (fewer fit a
									 * core's second-level cache anyway) */

/*
 * Capacities of a copy built at nblocks, ng graph and nu upper pages: an
 * eighth more, for the pages inserts add; half more once an earlier copy of
 * the index was outgrown (grown), so that an index that keeps growing is
 * recopied a number of times logarithmic in its growth, its total copying
 * a few times its final size.
 */
#define COPY_SPARE(n, grown)	((grown) ? (n) / 2 : (n) / 8)
#define COPY_MAPCAP(nblocks, grown)	((nblocks) + COPY_SPARE(nblocks, grown) + 64)
#define COPY_GCAP(ng, grown)		((ng) + COPY_SPARE(ng, grown) + 8)
#define COPY_UCAP(nu, grown)		((nu) + COPY_SPARE(nu, grown) + 2)

/* entry states */
#define ENTRY_FREE			0	/* unused table slot */
#define ENTRY_EMPTY			1	/* known index, no copy (counters kept) */
#define ENTRY_BUILDING		2
#define ENTRY_READY			3
#define ENTRY_REFRESHING	4

/* map entries */
#define MAP_ABSENT			0u
#define MAP_RESERVED		0xFFFFFFFFu
#define MAP_GRAPH			0x40000000u
#define MAP_UPPER			0x80000000u
#define MAP_KIND(v)			((v) & 0xC0000000u)
#define MAP_INDEX(v)		((v) & 0x3FFFFFFFu)

/* recpos entries: a node slot whose record is not placed yet */
#define RECPOS_NONE			0xFFFFFFFFu

typedef struct CacheEntry
{
	uint8		state;
	Oid			dbid;
	Oid			relid;
	Oid			owner;			/* the index's owner when last claimed: who
								 * may evict the copy on request */
	RelFileLocator locator;
	dsm_handle	handle;			/* while BUILDING, READY, REFRESHING */
	uint64		copy_id;
	int			builder_pid;
	bool		behind;			/* a write could not be copied into the
								 * copy: refresh it (by page LSN) before use */
	bool		successor;		/* a larger copy being built while the
								 * outgrown one serves: found by no scan or
								 * writer (cache_find_entry) until swapped in */
	Size		bytes;
	uint64		nodes;			/* node slots at the last build or refresh */
	uint32		gpages;
	uint32		upages;
	int			last_failure;	/* SHNSW_CACHE_* of the last failed build */
	TimestampTz failed_at;
	BlockNumber failed_nblocks;
	TimestampTz launched_at;	/* a scan asked for a background build then */
	pg_atomic_uint64 last_used; /* TimestampTz of the last scan that used it:
								 * the clock's, not the transaction's start,
								 * so that a copy a long transaction keeps
								 * using does not look idle to eviction */
	pg_atomic_uint64 hits;		/* scans that searched the copy */
	pg_atomic_uint64 misses;	/* scans that could not */
	pg_atomic_uint64 insert_searches;	/* inserts whose neighbour search
										 * read the copy */
	pg_atomic_uint64 cut_until; /* a VACUUM truncation waits for the index's
								 * lock until then: a background build gives
								 * up (TimestampTz; 0: none) */
	uint64		builds;
	uint64		invalidations;
	uint64		refreshes;
	uint64		evictions;
	uint32		outgrown;		/* copies of this index dropped because
								 * inserts had filled their spare room */
	int			mappers;		/* backends that map the copy (builder
								 * included): carried to dropped[] */
	int			logged_failure; /* SHNSW_CACHE_* last said in the log */
} CacheEntry;

/*
 * A dropped copy that some backend still maps: its segment stays in
 * dynamic shared memory (/dev/shm) until the last of them detaches, so
 * its bytes count against the budget until then.
 */
typedef struct CacheDropped
{
	uint64		copy_id;		/* 0: free slot */
	Oid			dbid;
	Oid			relid;
	Size		bytes;
	int			mappers;
} CacheDropped;

typedef struct CacheCtl
{
	LWLock		lock;
	int			tranche;
	pg_atomic_uint32 ncopies;	/* entries with a segment: writers' fast path */
	uint64		next_copy_id;
	uint64		epoch;			/* bumped whenever a segment is released */
	Size		total_bytes;	/* of all segments held by entries */
	Size		dropped_bytes;	/* of dropped[] and the overflow: still
								 * mapped somewhere */
	Size		overflow_bytes; /* dropped copies dropped[] had no room for,
								 * counted (in dropped_bytes) together until
								 * the last of their mappers detaches */
	int			overflow_mappers;
	bool		warm_pending;	/* not preloaded: the first build request
								 * starts the warmer (cache_warm.c) */
	bool		warm_taken;		/* not preloaded: the last life's list was
								 * moved aside for it (cache_warm.c) */
	pg_atomic_uint32 size_logged;	/* the capped default was logged */
	CacheEntry	entries[CACHE_MAX_ENTRIES];
	CacheDropped dropped[CACHE_MAX_DROPPED];
} CacheCtl;

typedef struct CachePageDesc
{
	pg_atomic_uint32 seq;		/* odd while a writer changes the page */
	uint16		nslots;			/* graph pages: slots in use */
	uint16		pad;
	uint64		lsn;			/* page LSN of the copy */
} CachePageDesc;

typedef struct CacheCopy
{
	uint64		copy_id;
	pg_atomic_uint32 valid;		/* 0: a write-through found something wrong */
	pg_atomic_uint32 outgrown;	/* 1: a graph or upper page found no room in
								 * it (scans read it through buffers); the
								 * next scan has the copy rebuilt larger */
	pg_atomic_uint64 meta_lsn;	/* the metapage state this copy reflects */
	pg_atomic_uint64 meta_gen;
	uint64		meta_nonce;		/* the build and truncation of the index it
								 * copies: fixed for the copy's life */
	uint32		meta_trunc;
	int			m;
	int			vec_span;		/* shnsw_vec_span of its vectors */
	int			node_size;
	int			npp;			/* node slots per page */
	int			slot_bits;
	uint32		mapcap;			/* blocks the map covers */
	uint32		gcap;			/* graph page slots */
	uint32		ucap;			/* upper page slots */
	uint32		build_nblocks;	/* relation length when built */
	uint32		pcap;			/* node record places: gcap * npp */
	pg_atomic_uint32 ordered;	/* places the build filled (pcap while it
								 * runs): the places after them are taken in
								 * the order inserts come */
	pg_atomic_uint32 reorder;	/* 1: the next scan has the copy rebuilt in
								 * graph order (as a regrowth) */
	pg_atomic_uint32 gnext;		/* next free graph page slot */
	pg_atomic_uint32 unext;
	pg_atomic_uint32 pnext;		/* next free record place */
	Size		map_off;
	Size		gdesc_off;
	Size		udesc_off;
	Size		recpos_off;
	Size		gdata_off;
	Size		udata_off;
	Size		total;
} CacheCopy;

/* A backend's mapping of a copy. */
typedef struct LocalCopy
{
	uint64		copy_id;
	dsm_segment *seg;
	CacheCopy   *cp;
	pg_atomic_uint32 *map;
	CachePageDesc *gdesc;
	CachePageDesc *udesc;
	uint32	   *recpos;
	char	   *gdata;
	char	   *udata;
} LocalCopy;

/*
 * The metapage state a copy reflects: its LSN and cache generation,
 * which only grow, and its build nonce and truncation count, which must be
 * equal (src/README, "Shared cache", The validity token).
 */
typedef struct CacheToken
{
	uint64		lsn;
	uint64		gen;
	uint64		nonce;
	uint32		trunc;
} CacheToken;

/* ---------- reading a copy (cache_read.c, cache_order.c) ---------- */

/* Block blk's entry in the copy's map; MAP_ABSENT beyond the map. */
static inline uint32
copy_map_entry(const LocalCopy *li, uint32 blk)
{
	return blk < li->cp->mapcap ? pg_atomic_read_u32(&li->map[blk]) : MAP_ABSENT;
}

/*
 * A single load of a value in a copy page that a writer may be changing:
 * the compiler may neither load it again nor tear it, so a check made on
 * the value holds for every use of it.
 */
#define CACHE_LOAD(type, ptr)	(*(volatile const type *) (ptr))

/*
 * The copy's record of node ref and (if desc) its page's descriptor, or
 * NULL if the copy lacks the node (its page, or a place for its slot).
 * No seqlock: the caller reads the record under its page's sequence
 * counter, or only prefetches it (a prefetch may name a stale line). A
 * slot's place is set once, inside that seqlock (cache_int.h), so a read
 * that saw it being set fails the counter's check.
 */
static inline const char *
copy_record_addr(const LocalCopy *li, ShnswRef ref, int slot_bits, int npp, int node_size,
				 CachePageDesc **desc)
{
	uint32		v = copy_map_entry(li, shnsw_ref_block(ref, slot_bits));
	uint32		slot = shnsw_ref_slot(ref, slot_bits);
	uint32		place;

	if (MAP_KIND(v) != MAP_GRAPH || v == MAP_RESERVED || slot >= (uint32) npp)
		return NULL;
	place = CACHE_LOAD(uint32, &li->recpos[(Size) MAP_INDEX(v) * npp + slot]);
	if (place == RECPOS_NONE)
		return NULL;
	if (desc != NULL)
		*desc = &li->gdesc[MAP_INDEX(v)];
	return li->gdata + (Size) place * node_size;
}

/*
 * The seqlock read. Every read of a cached page goes through these: a
 * writer makes the page's count odd, changes the page and makes it even
 * again (cache_build.c, seq_begin/seq_end); a reader takes the count
 * (seq_peek), reads what it needs within bounds whatever it finds (it may
 * be torn), and keeps the result only if the count is still the same
 * afterwards (seq_unchanged). seq_read is the one retry loop around them;
 * only the held batch of read_nodes_held, which checks a batch of reads at
 * once, calls seq_peek and seq_unchanged itself (and seq_read for a read
 * that failed).
 */
#define SEQ_TRIES	64			/* looks at an odd count and collided reads */

/* One look at d's count: false if a writer is in the page. */
static inline bool
seq_peek(CachePageDesc *d, uint32 *seq)
{
	uint32		s1 = pg_atomic_read_u32(&d->seq);

	if (s1 & 1)
		return false;
	pg_read_barrier();
	*seq = s1;
	return true;
}

/* Whether no writer changed d's page since seq_peek gave seq. */
static inline bool
seq_unchanged(CachePageDesc *d, uint32 seq)
{
	pg_read_barrier();
	return pg_atomic_read_u32(&d->seq) == seq;
}

/*
 * seq_read calls read(arg) on the page of descriptor d between writes,
 * again while a writer changed the page meanwhile, and returns the result
 * of the first call no writer overlapped; -1 after SEQ_TRIES looks and
 * reads in all (the caller reads through buffers). read returns -1 for a
 * page that does not hold what it wants (the caller falls back then too),
 * else a count of what it read. Always inlined, so that read (a constant
 * at every call) is a direct call the compiler can inline as well.
 */
static pg_attribute_always_inline int
seq_read(CachePageDesc *d, int (*read) (void *arg), void *arg)
{
	for (int tries = 0; tries < SEQ_TRIES; tries++)
	{
		uint32		s1;
		int			r;

		if (!seq_peek(d, &s1))
		{
			pg_spin_delay();
			continue;
		}
		r = read(arg);
		if (seq_unchanged(d, s1))
			return r;
	}
	return -1;
}

/* The token of a metapage snapshot. */
static inline CacheToken
cache_token_of(const ShnswMetaSnapshot *snap)
{
	CacheToken	tok = {snap->lsn, snap->cache_generation, snap->build_nonce, snap->truncations};

	return tok;
}

/* whether cp copies the build and truncation of the index tok was read from */
static inline bool
copy_same_index(const CacheCopy *cp, const CacheToken *tok)
{
	return cp->meta_nonce == tok->nonce && cp->meta_trunc == tok->trunc;
}

/* token check: the copy reflects at least the metapage state the scan read */
static inline bool
copy_current(CacheCopy *cp, const CacheToken *tok)
{
	return pg_atomic_read_u32(&cp->valid) != 0 && copy_same_index(cp, tok) &&
		pg_atomic_read_u64(&cp->meta_lsn) >= tok->lsn &&
		pg_atomic_read_u64(&cp->meta_gen) >= tok->gen;
}

/*
 * Whose copies a request (streamhnsw_cache_load) may evict to make room,
 * when they are in use: NULL for any (a superuser's request; lazy builds
 * evict only idle copies anyway), else the owners the current user has
 * the privileges of (cache_sql.c). cache_evict_refused is set when a copy
 * was passed over for lack of them.
 */
typedef struct EvictRights
{
	int			n;
	Oid			owners[CACHE_MAX_ENTRIES];
} EvictRights;

/* what a scan (or the warmer) hands a background builder (bgw_extra) */
typedef struct CacheBuildRequest
{
	Oid			dbid;
	Oid			relid;
	int			cache_size_mb;	/* the requesting session's shared_cache_size
								 * (-1: the server's) */
	int			capped_from;	/* what its default was capped from (log) */
	int			shm_mb;
	int			delay_ms;		/* its debug_cache_build_delay */
	TimestampTz last_used;		/* the warmer's: when the copy was last used
								 * before the restart (0: now) */
	int			kind;			/* CACHE_REQ_* */
} CacheBuildRequest;

/* what a background worker is asked to do with the index's copy */
#define CACHE_REQ_BUILD		0	/* build it: there is none */
#define CACHE_REQ_REFRESH	1	/* bring it up to date: it is behind */
#define CACHE_REQ_REGROW	2	/* replace it by a larger one: it is outgrown */

/* cache_registry.c */
extern CacheCtl *cache_ctl;
extern int	cache_active_scans;	/* cached scans begun in this transaction */
extern const EvictRights *cache_evict_rights;
extern bool cache_evict_none;	/* the warmer's builds: never evict */
extern bool cache_preloaded;	/* the library is in shared_preload_libraries */
extern bool cache_evict_refused;
extern TimestampTz cache_registry_failed_at;

/* cache_warm.c */
struct BackgroundWorker;
extern void cache_build_worker_init(struct BackgroundWorker *bgw, Oid relid);
extern void cache_warm_start(void);
extern void cache_warm_note(void);

/* a build or refresh this backend has claimed and not finished */
extern int	cache_pending_slot;
extern uint64 cache_pending_copy_id;
extern bool cache_pending_refresh;

extern CacheCtl *cache_get_ctl(void);
extern CacheCtl *cache_try_get_ctl(void);
extern bool cache_marker_present(void);
extern bool cache_registry_exists(void);
extern CacheEntry *cache_find_entry(Relation index);
extern void cache_mapper_done(uint64 copy_id);
extern Size cache_budget(void);
extern bool cache_shm_room(Size size, char *why, Size whylen);
extern void cache_size_detail(char *buf, Size len);
extern void cache_size_capped(int *from, int *shm_mb);
extern void cache_size_set_capped(int from, int shm_mb);
extern void cache_log_failure(Relation index, int status, const char *why);
extern char cache_dsm_error[256];
extern dsm_handle cache_drop_segment(CacheEntry *e);
extern void cache_unpin(dsm_handle *h, int n);
extern LocalCopy *cache_local_find(uint64 copy_id);
extern LocalCopy *cache_local_add(dsm_segment *seg);
extern dsm_segment *cache_create_segment(Size size);
extern LocalCopy *cache_map_segment(dsm_handle h, uint64 copy_id, bool safe);
extern LocalCopy *cache_local_map(Relation index, bool safe);
extern void cache_local_sweep(void);
extern bool cache_make_room(Size need, CacheEntry *self, bool idle_only,
							dsm_handle *unpin, int *nunpin);
extern void cache_release_pending(void);
extern CacheEntry *cache_entry_new(Relation index, bool explicit, dsm_handle *unpin,
								   int *nunpin);
extern bool cache_entry_failed_recently(CacheEntry *e, BlockNumber nblocks);
extern void cache_sweep_dropped(void);

/* cache_build.c */
extern void cache_copy_page(LocalCopy *li, BlockNumber blk, Page page, bool may_add);
extern LocalCopy *cache_build(Relation index, const ShnswIndexInfo *info, bool explicit,
							  int *status);
extern void cache_refresh(Relation index, LocalCopy *li);
extern bool cache_request_build(Relation index, int kind, int *status);
extern void cache_drop_outgrown(Relation index, uint64 copy_id);
extern LocalCopy *cache_refresh_or_drop(Relation index, const ShnswIndexInfo *info,
										const CacheToken *tok, bool *rebuild);

/* cache_order.c */
extern uint32 cache_order_records(Relation index, LocalCopy *to, const uint8 *types,
								  BlockNumber nblocks, ShnswRef entry,
								  bool (*yields) (int slot), int slot);
extern uint64 cache_page_near_links(const CacheCopy *cp, BlockNumber blk, Page page,
									uint64 *links);
extern void cache_order_done(LocalCopy *li, bool regrowth, uint32 ordered, uint64 nodes,
							 const uint64 *near);
extern void cache_reorder_refused(LocalCopy *li);

/* cache_read.c */
extern LocalCopy *cache_lookup(Relation index, const CacheToken *tok, int *status, bool scan);
extern LocalCopy *cache_lookup_or_build(Relation index, const ShnswIndexInfo *info,
										const CacheToken *tok, bool build,
										bool background, int *status);

#endif							/* STREAMHNSW_CACHE_INT_H */
