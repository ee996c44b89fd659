/*-------------------------------------------------------------------------
 *
 * shmgraph.c
 *	  The shared graph image: each index's graph and upper pages copied into
 *	  one dynamic shared memory segment, laid out by dense node number, that
 *	  every backend's scans search with plain loads instead of a buffer pin
 *	  and lock per page.
 *
 * Registry. A small named DSM segment (the DSM registry: no
 * shared_preload_libraries) holds a fixed table of entries keyed by
 * (database, index OID, relfilelocator), each naming the DSM segment of its
 * image, its state (building, ready, refreshing) and its counters, under
 * one LWLock. An image is one segment, pinned (dsm_pin_segment) so that it
 * outlives the backend that built it; backends map it once and keep the
 * mapping (dsm_pin_mapping). Dropping or evicting an image unpins its
 * segment: the memory is returned when the last backend that mapped it
 * detaches, which each backend does at the first scan of a transaction
 * after the drop (no scan of its own can be using it then), so a scan never
 * reads unmapped memory and needs no reference count.
 * Writers attach the registry only if it exists (a marker file says so),
 * and never raise an error after their WAL record is out; scans attach it
 * and map images in subtransactions, falling back to buffers when dynamic
 * shared memory cannot be had.
 *
 * Layout of an image (ShmImage, then at the offsets it records):
 *
 *	 map[block]		  per block of the index: absent, reserved (the build
 *					  will copy it), or graph/upper + the page's image slot
 *	 gdesc[], udesc[]  per image page: seqlock, slot count, page LSN
 *	 gdata			  graph pages' node records, npp records per page slot:
 *					  node number d = slot_index * npp + slot is at
 *					  gdata + d * node_size
 *	 udata			  upper pages, whole (their records are line-pointer items)
 *
 * Vector pages are not copied: re-ranking reads exact vectors through
 * shared buffers (a few dozen pages per query).
 *
 * The protocol that keeps an image exact is in src/README ("Shared graph
 * image"); in short: writers copy every page they change into the image
 * under the page's exclusive lock (write-through, see shmgraph.h), each
 * image page has a seqlock that readers check around their copy of a
 * record, and the image carries the metapage's LSN and cache generation
 * that it reflects, which every scan compares with the metapage it read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "commands/defrem.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/dsm.h"
#include "storage/dsm_registry.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/read_stream.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#define SHNSW_SHMGRAPH_NO_WRAP
#include "streamhnsw.h"

bool		shnsw_shared_cache = true;
bool		shnsw_shared_cache_background = true;
int			shnsw_shared_cache_size = -1;	/* MB; -1 until resolved (below) */
int			shnsw_debug_image_build_delay = 0;	/* ms */
bool		shnsw_debug_dsm_fail = false;

/*
 * The registry's name carries its layout's version, and its size
 * (registry_name): a library with another layout (an upgrade installed
 * without a restart) gets its own registry instead of an error from
 * GetNamedDSMSegment for a size that differs. Bump the version when the
 * layout changes (5: ShmEntry's owner and behind); the size in the name
 * catches a change that forgot to.
 */
#define SHM_REGISTRY_NAME	"streamhnsw_shmgraph_5"
#define SHM_MAX_IMAGES		64
#define SHM_RETRY_SECS		10	/* after a failed build, retry lazily after */
#define SHM_IDLE_SECS		10	/* a lazy build evicts only images idle this long */
#define SHM_PREFETCH_AHEAD	2	/* records prefetched ahead of a read_nodes read */

/* capacities of an image built at nblocks, ng graph and nu upper pages: an
 * eighth more, for the pages inserts add */
#define IMAGE_MAPCAP(nblocks)	((nblocks) + (nblocks) / 8 + 64)
#define IMAGE_GCAP(ng)			((ng) + (ng) / 8 + 8)
#define IMAGE_UCAP(nu)			((nu) + (nu) / 8 + 2)

/* entry states */
#define ENTRY_FREE			0	/* unused table slot */
#define ENTRY_EMPTY			1	/* known index, no image (counters kept) */
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

typedef struct ShmEntry
{
	uint8		state;
	Oid			dbid;
	Oid			relid;
	Oid			owner;			/* the index's owner when last claimed: who
								 * may evict the image on request */
	RelFileLocator locator;
	dsm_handle	handle;			/* while BUILDING, READY, REFRESHING */
	uint64		image_id;
	int			builder_pid;
	bool		behind;			/* a write could not be copied into the image:
								 * refresh it (by page LSN) before use */
	Size		bytes;
	uint64		nodes;			/* node slots at the last build or refresh */
	uint32		gpages;
	uint32		upages;
	int			last_failure;	/* SHNSW_SHM_* of the last failed build */
	TimestampTz failed_at;
	BlockNumber failed_nblocks;
	TimestampTz launched_at;	/* a scan asked for a background build then */
	pg_atomic_uint64 last_used; /* TimestampTz of the last scan that used it:
								 * the clock's, not the transaction's start,
								 * so that an image a long transaction keeps
								 * using does not look idle to eviction */
	pg_atomic_uint64 hits;		/* scans that searched the image */
	pg_atomic_uint64 misses;	/* scans that could not */
	pg_atomic_uint64 insert_searches;	/* inserts whose neighbour search
										 * read the image */
	pg_atomic_uint64 cut_until; /* a VACUUM truncation waits for the index's
								 * lock until then: a background build gives
								 * up (TimestampTz; 0: none) */
	uint64		builds;
	uint64		invalidations;
	uint64		refreshes;
	uint64		evictions;
} ShmEntry;

typedef struct ShmCtl
{
	LWLock		lock;
	int			tranche;
	pg_atomic_uint32 nimages;	/* entries with a segment: writers' fast path */
	uint64		next_image_id;
	uint64		epoch;			/* bumped whenever a segment is released */
	Size		total_bytes;	/* of all segments held by entries */
	ShmEntry	entries[SHM_MAX_IMAGES];
} ShmCtl;

typedef struct ShmPageDesc
{
	pg_atomic_uint32 seq;		/* odd while a writer changes the page */
	uint16		nslots;			/* graph pages: slots in use */
	uint16		pad;
	uint64		lsn;			/* page LSN of the copy */
} ShmPageDesc;

typedef struct ShmImage
{
	uint64		image_id;
	pg_atomic_uint32 valid;		/* 0: a write-through found something wrong */
	pg_atomic_uint64 meta_lsn;	/* the metapage state this image reflects */
	pg_atomic_uint64 meta_gen;
	uint64		meta_nonce;		/* the build and truncation of the index it
								 * copies: fixed for the image's life */
	uint32		meta_trunc;
	int			m;
	int			node_size;
	int			npp;			/* node slots per page */
	int			slot_bits;
	uint32		mapcap;			/* blocks the map covers */
	uint32		gcap;			/* graph page slots */
	uint32		ucap;			/* upper page slots */
	uint32		build_nblocks;	/* relation length when built */
	Size		gstride;		/* bytes per graph page slot */
	pg_atomic_uint32 gnext;		/* next free graph page slot */
	pg_atomic_uint32 unext;
	Size		map_off;
	Size		gdesc_off;
	Size		udesc_off;
	Size		gdata_off;
	Size		udata_off;
	Size		total;
} ShmImage;

/* A backend's mapping of an image. */
typedef struct LocalImage
{
	uint64		image_id;
	dsm_segment *seg;
	ShmImage   *img;
	pg_atomic_uint32 *map;
	ShmPageDesc *gdesc;
	ShmPageDesc *udesc;
	char	   *gdata;
	char	   *udata;
} LocalImage;

static ShmCtl *ctl = NULL;
static LocalImage local_images[SHM_MAX_IMAGES * 2];
static int	nlocal = 0;
static uint64 local_epoch = 0;
static int	active_scans = 0;	/* image scans begun in this transaction */
static bool callbacks_registered = false;

/* GenericXLog records in progress in this backend (write-through) */
typedef struct TrackedXlog
{
	GenericXLogState *state;
	Relation	rel;
	int			nbuf;
	Buffer		bufs[MAX_GENERIC_XLOG_PAGES];
	bool		has_meta;
	uint64		meta_lsn;		/* the metapage's LSN and generation before */
	uint64		meta_gen;
	bool		direct;			/* pages changed in place, no WAL (below) */
	bool		prepared;		/* the registry existed at a registration:
								 * attached, the image mapped (write_prepare) */
} TrackedXlog;

/*
 * The index whose changes this backend writes in place, without WAL: a
 * build's insert phase (shnsw_xlog_direct), which logs every page at its
 * end; InvalidOid otherwise.
 */
static Oid	direct_relid = InvalidOid;

static TrackedXlog tracked[4];

/*
 * Whose images a request (streamhnsw_cache_load) may evict to make room,
 * when they are in use: NULL for any (a superuser's request; lazy builds
 * evict only idle images anyway), else the owners the current user has
 * the privileges of (evict_rights_collect). evict_refused is set when an
 * image was passed over for lack of them.
 */
typedef struct EvictRights
{
	int			n;
	Oid			owners[SHM_MAX_IMAGES];
} EvictRights;

static const EvictRights *evict_rights = NULL;
static bool evict_refused = false;

/* a build or refresh this backend has claimed and not finished */
static int	pending_slot = -1;
static uint64 pending_image_id = 0;
static bool pending_refresh = false;

/* ---------- registry ---------- */

static void
ctl_init(void *ptr)
{
	ShmCtl	   *c = (ShmCtl *) ptr;

	memset(c, 0, sizeof(ShmCtl));
	c->tranche = LWLockNewTrancheId();
	LWLockInitialize(&c->lock, c->tranche);
	pg_atomic_init_u32(&c->nimages, 0);
	c->next_image_id = 1;
	for (int i = 0; i < SHM_MAX_IMAGES; i++)
	{
		pg_atomic_init_u64(&c->entries[i].last_used, 0);
		pg_atomic_init_u64(&c->entries[i].hits, 0);
		pg_atomic_init_u64(&c->entries[i].misses, 0);
		pg_atomic_init_u64(&c->entries[i].insert_searches, 0);
		pg_atomic_init_u64(&c->entries[i].cut_until, 0);
	}
}

static void release_pending(void);

/* whether a request may evict the image of e (evict_rights) */
static bool
may_evict(const ShmEntry *e)
{
	if (evict_rights == NULL)
		return true;
	for (int i = 0; i < evict_rights->n; i++)
		if (evict_rights->owners[i] == e->owner)
			return true;
	evict_refused = true;
	return false;
}

static void
shm_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
	{
		/* no scan outlives its transaction, nor a GenericXLog record */
		active_scans = 0;
		memset(tracked, 0, sizeof(tracked));
		if (pending_slot >= 0)
			release_pending();
	}
}

static void
shm_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					 SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && pending_slot >= 0)
		release_pending();
}

static void
shm_exit_callback(int code, Datum arg)
{
	if (pending_slot >= 0 && ctl != NULL)
	{
		LWLockReleaseAll();
		release_pending();
	}
}

/*
 * The registry's marker: a file in the data directory's pg_stat_tmp (which
 * base backups skip) holding the postmaster's start time, written by every
 * backend that attaches the registry before it returns it, so before any
 * image can be published. A writer that has not attached the registry
 * looks for the marker instead (registry_exists): no marker of this
 * server's life, no registry, so no image, and the write needs neither
 * (src/README, "Shared graph image", Writers). A stale marker (a crash
 * restart keeps the postmaster's start time) only makes writers attach,
 * as every writer did before.
 */
#define SHM_MARKER_PATH		PG_STAT_TMP_DIR "/streamhnsw.registry"

static bool marker_written = false;

/* Whether the marker says this server has a registry. */
static bool
marker_present(void)
{
	TimestampTz t = 0;
	int			fd = OpenTransientFile(SHM_MARKER_PATH, O_RDONLY | PG_BINARY);
	bool		ok;

	if (fd < 0)
		return false;
	ok = read(fd, &t, sizeof(t)) == sizeof(t) && t == PgStartTime;
	CloseTransientFile(fd);
	return ok;
}

/* Write the marker (once per backend), replacing a stale one atomically. */
static void
marker_write(void)
{
	char		tmp[MAXPGPATH];
	int			fd;
	bool		ok;

	if (marker_written)
		return;
	if (marker_present())
	{
		marker_written = true;
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.%d", SHM_MARKER_PATH, MyProcPid);
	fd = OpenTransientFile(tmp, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", tmp)));
	ok = write(fd, &PgStartTime, sizeof(PgStartTime)) == sizeof(PgStartTime);
	CloseTransientFile(fd);
	if (!ok || rename(tmp, SHM_MARKER_PATH) != 0)
	{
		(void) unlink(tmp);
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", SHM_MARKER_PATH)));
	}
	marker_written = true;
}

/* Whether the registry exists: attached here, or named by the marker. */
static bool
registry_exists(void)
{
	return ctl != NULL || marker_present();
}

/*
 * get_ctl attaches to (creating if needed) the registry segment, and makes
 * sure the marker names it. Like the statistics segment, it is a few
 * kilobytes created once per server. Raises an error if dynamic shared
 * memory cannot provide it: callers at a point where that must be a
 * fallback use try_get_ctl.
 */
static ShmCtl *
get_ctl(void)
{
	if (ctl == NULL)
	{
		bool		found;
		ShmCtl	   *c;
		char		name[NAMEDATALEN];

		snprintf(name, sizeof(name), "%s_%zu", SHM_REGISTRY_NAME, sizeof(ShmCtl));
		c = GetNamedDSMSegment(name, sizeof(ShmCtl), ctl_init, &found);
		marker_write();
		LWLockRegisterTranche(c->tranche, "streamhnsw_shmgraph");
		local_epoch = c->epoch;
		ctl = c;
	}
	if (!callbacks_registered)
	{
		RegisterXactCallback(shm_xact_callback, NULL);
		RegisterSubXactCallback(shm_subxact_callback, NULL);
		before_shmem_exit(shm_exit_callback, 0);
		callbacks_registered = true;
	}
	return ctl;
}

/* when this backend last failed to attach the registry (try_get_ctl) */
static TimestampTz registry_failed_at = 0;

/*
 * shnsw_dsm_try runs fn(arg), which gets dynamic shared memory (creates,
 * attaches or maps a segment), in a subtransaction, so that a failure (no
 * space in /dev/shm, no DSM slot) is a fallback, not an error: returns
 * whether fn returned. The error is discarded. The caller is in a
 * transaction, not in parallel mode (no subtransaction can start there),
 * and holds no buffer and no LWLock (a subtransaction's abort releases
 * every LWLock). streamhnsw.debug_dsm_fail makes every attempt fail.
 */
bool
shnsw_dsm_try(void (*fn) (void *arg), void *arg)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool ok = false;

	Assert(!IsInParallelMode());
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		if (shnsw_debug_dsm_fail)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("could not get dynamic shared memory (streamhnsw.debug_dsm_fail)")));
		fn(arg);
		ok = true;
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcxt);
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_END_TRY();
	return ok;
}

/* shnsw_dsm_try's work for try_get_ctl: attach or create the registry */
static void
dsm_get_ctl(void *arg)
{
	(void) get_ctl();
}

/*
 * try_get_ctl is get_ctl for scans: an error attaching or creating the
 * registry (no space in /dev/shm, no DSM slot) is caught in a
 * subtransaction and returns NULL, and the attempt is not repeated for
 * SHM_RETRY_SECS. No buffer or LWLock may be held (a subtransaction's
 * abort releases every LWLock). In parallel mode, where no subtransaction
 * can start, only an existing registry is attached.
 */
static ShmCtl *
try_get_ctl(void)
{
	if (ctl != NULL)
		return ctl;
	if (registry_failed_at != 0 &&
		!TimestampDifferenceExceeds(registry_failed_at, GetCurrentTimestamp(),
									SHM_RETRY_SECS * 1000))
		return NULL;
	if (IsInParallelMode() || !IsTransactionState())
		return marker_present() ? get_ctl() : NULL;
	if (!shnsw_dsm_try(dsm_get_ctl, NULL))
	{
		registry_failed_at = GetCurrentTimestamp();
		return NULL;
	}
	return ctl;
}

/* Find the entry of an index; the caller holds ctl->lock. */
static ShmEntry *
find_entry(Relation index)
{
	for (int i = 0; i < SHM_MAX_IMAGES; i++)
	{
		ShmEntry   *e = &ctl->entries[i];

		if (e->state != ENTRY_FREE && e->relid == RelationGetRelid(index) &&
			e->dbid == MyDatabaseId &&
			RelFileLocatorEquals(e->locator, index->rd_locator))
			return e;
	}
	return NULL;
}

/*
 * drop_segment takes an entry's segment away (caller holds ctl->lock
 * exclusively); the caller unpins the returned handle after releasing it.
 */
static dsm_handle
drop_segment(ShmEntry *e)
{
	dsm_handle	h = e->handle;

	Assert(e->state == ENTRY_READY || e->state == ENTRY_BUILDING ||
		   e->state == ENTRY_REFRESHING);
	ctl->total_bytes -= e->bytes;
	e->bytes = 0;
	e->handle = DSM_HANDLE_INVALID;
	e->image_id = 0;
	e->behind = false;
	e->state = ENTRY_EMPTY;
	pg_atomic_fetch_sub_u32(&ctl->nimages, 1);
	ctl->epoch++;
	return h;
}

static void
unpin_handles(dsm_handle *h, int n)
{
	for (int i = 0; i < n; i++)
		if (h[i] != DSM_HANDLE_INVALID)
			dsm_unpin_segment(h[i]);
}

/* Pointers into a mapped image. */
static void
local_fill(LocalImage *li, dsm_segment *seg)
{
	char	   *base = dsm_segment_address(seg);
	ShmImage   *img = (ShmImage *) base;

	li->seg = seg;
	li->img = img;
	li->image_id = img->image_id;
	li->map = (pg_atomic_uint32 *) (base + img->map_off);
	li->gdesc = (ShmPageDesc *) (base + img->gdesc_off);
	li->udesc = (ShmPageDesc *) (base + img->udesc_off);
	li->gdata = base + img->gdata_off;
	li->udata = base + img->udata_off;
}

/* This backend's mapping of image image_id, or NULL. */
static LocalImage *
local_find(uint64 image_id)
{
	for (int i = 0; i < nlocal; i++)
		if (local_images[i].image_id == image_id)
			return &local_images[i];
	return NULL;
}

/* what shnsw_dsm_try's segment work is given and gives back */
typedef struct DsmAttempt
{
	dsm_handle	handle;			/* to attach */
	Size		size;			/* to create */
	dsm_segment *seg;			/* the segment, NULL if there is none */
} DsmAttempt;

/*
 * shnsw_dsm_try's work for map_segment: attach the segment and pin its
 * mapping before the subtransaction's end, which would detach it
 */
static void
dsm_attach_pinned(void *arg)
{
	DsmAttempt *at = arg;

	at->seg = dsm_attach(at->handle);
	if (at->seg != NULL)
		dsm_pin_mapping(at->seg);
}

/* shnsw_dsm_try's work for create_segment: create it, pinned */
static void
dsm_create_pinned(void *arg)
{
	DsmAttempt *at = arg;

	at->seg = dsm_create(at->size, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	if (at->seg != NULL)
	{
		dsm_pin_mapping(at->seg);
		dsm_pin_segment(at->seg);
	}
}

/*
 * map_segment maps segment h, expected to hold image image_id, and keeps
 * the mapping; NULL if it is gone, is another segment now, or (safe)
 * cannot be mapped: safe catches the error in a subtransaction (no buffer
 * or LWLock may be held then); otherwise it is raised, and the caller must
 * be at a point where an error changes nothing. No registry lock is held:
 * the segment may be dropped meanwhile, which the image_id check sees
 * (a handle may be reused once its segment is gone).
 */
static LocalImage *
map_segment(dsm_handle h, uint64 image_id, bool safe)
{
	DsmAttempt	at = {0};
	dsm_segment *seg = NULL;
	LocalImage *li;

	if (nlocal == lengthof(local_images))
		return NULL;			/* the caller treats the image as unusable */
	if (!safe)
		seg = dsm_attach(h);
	else if (IsInParallelMode() || !IsTransactionState())
		return NULL;
	else
	{
		at.handle = h;
		if (shnsw_dsm_try(dsm_attach_pinned, &at))
			seg = at.seg;
	}
	if (seg == NULL)
		return NULL;
	dsm_pin_mapping(seg);		/* (again, if safe: a no-op) */
	if (dsm_segment_map_length(seg) < sizeof(ShmImage) ||
		((ShmImage *) dsm_segment_address(seg))->image_id != image_id ||
		local_find(image_id) != NULL)
	{
		dsm_detach(seg);
		return NULL;
	}
	li = &local_images[nlocal++];
	local_fill(li, seg);
	return li;
}

/*
 * local_map returns this backend's mapping of the index's image if the
 * registry names one (ready, or being built or refreshed), mapping it if
 * needed (map_segment: safe or raising); NULL if there is none or it cannot
 * be mapped. Takes and releases the registry lock; holds it while mapping
 * never.
 */
static LocalImage *
local_map(Relation index, bool safe)
{
	ShmEntry   *e;
	dsm_handle	h = DSM_HANDLE_INVALID;
	uint64		id = 0;
	LocalImage *li = NULL;

	if (pg_atomic_read_u32(&ctl->nimages) == 0)
		return NULL;
	LWLockAcquire(&ctl->lock, LW_SHARED);
	e = find_entry(index);
	if (e != NULL && e->state >= ENTRY_BUILDING && e->image_id != 0)
	{
		id = e->image_id;
		h = e->handle;
		li = local_find(id);
	}
	LWLockRelease(&ctl->lock);
	if (li != NULL || id == 0)
		return li;
	return map_segment(h, id, safe);
}

/*
 * local_sweep detaches the images that were dropped since this backend
 * last looked, when no scan of this backend can be using them.
 */
static void
local_sweep(void)
{
	uint64		epoch;
	int			keep = 0;
	dsm_segment *gone[lengthof(local_images)];
	int			ngone = 0;

	if (active_scans > 0 || ctl->epoch == local_epoch)
		return;
	LWLockAcquire(&ctl->lock, LW_SHARED);
	epoch = ctl->epoch;
	for (int i = 0; i < nlocal; i++)
	{
		bool		live = false;

		for (int j = 0; j < SHM_MAX_IMAGES && !live; j++)
			live = ctl->entries[j].state >= ENTRY_BUILDING &&
				ctl->entries[j].image_id == local_images[i].image_id;
		if (live)
			local_images[keep++] = local_images[i];
		else
			gone[ngone++] = local_images[i].seg;
	}
	nlocal = keep;
	LWLockRelease(&ctl->lock);
	for (int i = 0; i < ngone; i++)
		dsm_detach(gone[i]);
	local_epoch = epoch;
}

/* ---------- copying pages into an image ---------- */

static inline void
seq_begin(ShmPageDesc *d)
{
	pg_atomic_fetch_add_u32(&d->seq, 1);	/* odd: readers retry */
	pg_write_barrier();
}

static inline void
seq_end(ShmPageDesc *d)
{
	pg_write_barrier();
	pg_atomic_fetch_add_u32(&d->seq, 1);
}

/*
 * node_ok: the checks of shnsw_check_node that do not need the relation's
 * length, without raising an error (a page that fails is left out of the
 * image; scans then read it through buffers, which report it).
 */
static bool
node_ok(const ShnswNodeHeader *h, ShnswRef self, int m, int vec_size)
{
	const ShnswRef *nb = shnsw_node_neighbors(h);

	if (h->level > SHNSW_MAX_LEVEL || h->nneighbors > 2 * m ||
		h->vec_offset >= SHNSW_PAGE_CAPACITY || h->vec_offset % 4 != 0 ||
		h->vec_block == SHNSW_METAPAGE_BLKNO || h->vec_block == InvalidBlockNumber)
		return false;
	(void) vec_size;
	if (h->flags & SHNSW_NODE_FREE)
		return true;
	if (h->tid_off == InvalidOffsetNumber || h->tid_off > MaxOffsetNumber)
		return false;
	for (int k = 0; k < h->nneighbors; k++)
		if (nb[k] == self)
			return false;
	return true;
}

/*
 * copy_graph copies graph page blk (locked by the caller, share or
 * exclusive) into image page slot idx. Returns false if the page cannot be
 * used (not ours, a slot count or a record out of range).
 */
static bool
copy_graph(LocalImage *li, uint32 idx, BlockNumber blk, Page page, int vec_size)
{
	ShmImage   *img = li->img;
	ShmPageDesc *d = &li->gdesc[idx];
	int			nslots;

	if (PageIsNew(page) || ShnswPageGetOpaque(page)->magic != SHNSW_MAGIC ||
		ShnswPageGetOpaque(page)->page_type != SHNSW_PAGE_GRAPH)
		return false;
	nslots = ShnswPageGetOpaque(page)->nslots;
	if (nslots > img->npp)
		return false;
	for (int s = 0; s < nslots; s++)
		if (!node_ok(shnsw_page_node(page, s, img->node_size),
					 shnsw_make_ref(blk, s, img->slot_bits), img->m, vec_size))
			return false;
	seq_begin(d);
	memcpy(li->gdata + (Size) idx * img->gstride, PageGetContents(page),
		   (Size) nslots * img->node_size);
	d->nslots = nslots;
	d->lsn = PageGetLSN(page);
	seq_end(d);
	return true;
}

static bool
copy_upper(LocalImage *li, uint32 idx, Page page)
{
	ShmPageDesc *d = &li->udesc[idx];

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
 * copy_page brings block blk (locked by the caller) into the image: into
 * its slot if the map has one, else into a new slot from the spare ones if
 * allowed. A page the image cannot hold stays absent (scans read it through
 * buffers), and a mapped block that is no longer a graph or upper page is
 * unmapped; a page that contradicts the image invalidates the image.
 */
static void
copy_page(LocalImage *li, BlockNumber blk, Page page, int vec_size, bool may_add)
{
	ShmImage   *img = li->img;
	uint32		v;
	uint16		type;

	if (blk >= img->mapcap)
		return;
	type = PageIsNew(page) || ShnswPageGetOpaque(page)->magic != SHNSW_MAGIC ? 0 :
		ShnswPageGetOpaque(page)->page_type;
	v = pg_atomic_read_u32(&li->map[blk]);
	if (v == MAP_RESERVED)
		return;					/* the build copies it later, under its lock */
	if (type != SHNSW_PAGE_GRAPH && type != SHNSW_PAGE_UPPER)
	{
		/*
		 * Not (or no longer) a page the image holds: a mapped block that
		 * changed type (cut by a truncation, back as a vector page) must not
		 * keep serving its old records. Unmapped inside its slot's seqlock,
		 * so a reader of the old records retries and finds it absent.
		 */
		if (v != MAP_ABSENT)
		{
			ShmPageDesc *d = MAP_KIND(v) == MAP_GRAPH ? &li->gdesc[MAP_INDEX(v)] :
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
		pg_atomic_uint32 *next = type == SHNSW_PAGE_GRAPH ? &img->gnext : &img->unext;
		uint32		cap = type == SHNSW_PAGE_GRAPH ? img->gcap : img->ucap;
		uint32		idx;
		bool		ok;

		if (!may_add || pg_atomic_read_u32(next) >= cap)
			return;
		idx = pg_atomic_fetch_add_u32(next, 1);
		if (idx >= cap)
			return;
		ok = type == SHNSW_PAGE_GRAPH ? copy_graph(li, idx, blk, page, vec_size)
			: copy_upper(li, idx, page);
		if (!ok)
			return;
		pg_write_barrier();
		pg_atomic_write_u32(&li->map[blk], (type == SHNSW_PAGE_GRAPH ? MAP_GRAPH : MAP_UPPER) | idx);
		return;
	}
	if ((type == SHNSW_PAGE_GRAPH && MAP_KIND(v) != MAP_GRAPH) ||
		(type == SHNSW_PAGE_UPPER && MAP_KIND(v) != MAP_UPPER) ||
		!(type == SHNSW_PAGE_GRAPH ? copy_graph(li, MAP_INDEX(v), blk, page, vec_size)
		  : copy_upper(li, MAP_INDEX(v), page)))
		pg_atomic_write_u32(&img->valid, 0);
}

/* ---------- building ---------- */

/* Bytes of an image with these capacities. */
static Size
image_size(uint32 mapcap, uint32 gcap, uint32 ucap, Size gstride, Size *offs)
{
	Size		sz = MAXALIGN(sizeof(ShmImage));

	offs[0] = sz;
	sz = TYPEALIGN(64, sz + sizeof(pg_atomic_uint32) * (Size) mapcap);
	offs[1] = sz;
	sz += sizeof(ShmPageDesc) * (Size) gcap;
	offs[2] = sz;
	sz = TYPEALIGN(64, sz + sizeof(ShmPageDesc) * (Size) ucap);
	offs[3] = sz;
	sz += gstride * gcap;
	offs[4] = sz;
	sz += (Size) BLCKSZ * ucap;
	return sz;
}

/*
 * Evict until `need` more bytes fit: least recently used first, images
 * idle for SHM_IDLE_SECS only if idle_only, else also images in use that
 * the request may evict (evict_rights). Caller holds ctl->lock exclusively.
 */
static bool
make_room(Size need, ShmEntry *self, bool idle_only, dsm_handle *unpin, int *nunpin)
{
	Size		budget = (Size) shnsw_shared_cache_size * 1024 * 1024;
	TimestampTz now = GetCurrentTimestamp();

	while (ctl->total_bytes + need > budget)
	{
		ShmEntry   *victim = NULL;

		for (int i = 0; i < SHM_MAX_IMAGES; i++)
		{
			ShmEntry   *e = &ctl->entries[i];

			bool		idle;

			if (e == self || e->state != ENTRY_READY)
				continue;
			idle = TimestampDifferenceExceeds((TimestampTz) pg_atomic_read_u64(&e->last_used),
											  now, SHM_IDLE_SECS * 1000);
			if (idle_only && !idle)
				continue;
			/* an image in use goes on request only if the caller may evict it */
			if (!idle && !may_evict(e))
				continue;
			if (victim == NULL ||
				pg_atomic_read_u64(&e->last_used) < pg_atomic_read_u64(&victim->last_used))
				victim = e;
		}
		if (victim == NULL)
			return false;
		victim->evictions++;
		unpin[(*nunpin)++] = drop_segment(victim);
	}
	return true;
}

/* Give up a claim (build or refresh) this backend holds. */
static void
release_pending(void)
{
	ShmEntry   *e;
	dsm_handle	h = DSM_HANDLE_INVALID;

	if (pending_slot < 0 || ctl == NULL)
		return;
	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = &ctl->entries[pending_slot];
	if (e->builder_pid == MyProcPid)
	{
		if (pending_refresh && e->state == ENTRY_REFRESHING)
			e->state = ENTRY_READY; /* still behind: the next scan refreshes */
		else if (e->state == ENTRY_BUILDING && e->image_id != 0)
			h = drop_segment(e);
		else if (e->state == ENTRY_BUILDING)
		{
			/* claimed, no segment yet (perhaps its bytes reserved) */
			ctl->total_bytes -= e->bytes;
			e->bytes = 0;
			e->state = ENTRY_EMPTY;
		}
		e->builder_pid = 0;
	}
	LWLockRelease(&ctl->lock);
	pending_slot = -1;
	pending_image_id = 0;
	pending_refresh = false;
	unpin_handles(&h, 1);
}

/*
 * create_segment creates and pins a segment of size bytes, or returns NULL
 * if dynamic shared memory cannot provide it (no slot, no space in
 * /dev/shm, ...). The attempt runs in a subtransaction so that a failure is
 * a fallback, not an error.
 */
static dsm_segment *
create_segment(Size size)
{
	DsmAttempt	at = {0};

	if (IsInParallelMode())
		return NULL;
	at.size = size;
	return shnsw_dsm_try(dsm_create_pinned, &at) ? at.seg : NULL;
}

static void
note_failure(ShmEntry *e, int status, BlockNumber nblocks)
{
	e->last_failure = status;
	e->failed_at = GetCurrentTimestamp();
	e->failed_nblocks = nblocks;
}

/*
 * The metapage state an image reflects: its LSN and cache generation,
 * which only grow, and its build nonce and truncation count, which must be
 * equal (src/README, "Shared graph image", The validity token).
 */
typedef struct ShmToken
{
	uint64		lsn;
	uint64		gen;
	uint64		nonce;
	uint32		trunc;
} ShmToken;

/* Read the metapage's token (share lock, released). */
static void
read_meta_token(Relation index, ShmToken *tok)
{
	Buffer		buf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	Page		page;
	ShnswMetaPage meta;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	shnsw_check_page(index, page, SHNSW_METAPAGE_BLKNO, SHNSW_PAGE_META);
	meta = ShnswPageGetMeta(page);
	tok->lsn = PageGetLSN(page);
	tok->gen = meta->cache_generation;
	tok->nonce = meta->build_nonce;
	tok->trunc = meta->truncations;
	UnlockReleaseBuffer(buf);
}

/* The token of a metapage snapshot. */
static ShmToken
snap_token(const ShnswMetaSnapshot *snap)
{
	ShmToken	tok = {snap->lsn, snap->cache_generation, snap->build_nonce, snap->truncations};

	return tok;
}

/*
 * The blocks an image build reads, in order: every block after the
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

/*
 * entry_new finds a table slot for an index the registry does not know:
 * entries of the index's older relfilenodes are dropped (unreachable), then
 * a free slot, then the least recently used one without an image, then
 * (the table full of images) the least recently used image idle long
 * enough, or any if explicit. Caller holds ctl->lock exclusively; segments
 * to unpin after releasing it are added to unpin. NULL if none.
 */
static ShmEntry *
entry_new(Relation index, bool explicit, dsm_handle *unpin, int *nunpin)
{
	ShmEntry   *e = NULL;
	ShmEntry   *lru = NULL;

	for (int i = 0; i < SHM_MAX_IMAGES; i++)
	{
		ShmEntry   *o = &ctl->entries[i];

		if (o->state != ENTRY_FREE && o->dbid == MyDatabaseId &&
			o->relid == RelationGetRelid(index))
		{
			if (o->state >= ENTRY_BUILDING)
			{
				if (o->state != ENTRY_READY)
					continue;
				unpin[(*nunpin)++] = drop_segment(o);
			}
			o->state = ENTRY_FREE;
		}
	}
	for (int i = 0; i < SHM_MAX_IMAGES && e == NULL; i++)
		if (ctl->entries[i].state == ENTRY_FREE)
			e = &ctl->entries[i];
	for (int i = 0; i < SHM_MAX_IMAGES && e == NULL; i++)
	{
		ShmEntry   *o = &ctl->entries[i];

		if (o->state == ENTRY_EMPTY &&
			(lru == NULL || pg_atomic_read_u64(&o->last_used) < pg_atomic_read_u64(&lru->last_used)))
			lru = o;
	}
	if (e == NULL)
		e = lru;
	if (e == NULL)
	{
		for (int i = 0; i < SHM_MAX_IMAGES; i++)
		{
			ShmEntry   *o = &ctl->entries[i];

			bool		idle;

			if (o->state != ENTRY_READY)
				continue;
			idle = TimestampDifferenceExceeds((TimestampTz) pg_atomic_read_u64(&o->last_used),
											  GetCurrentTimestamp(), SHM_IDLE_SECS * 1000);
			if (!idle && (!explicit || !may_evict(o)))
				continue;
			if (lru == NULL ||
				pg_atomic_read_u64(&o->last_used) < pg_atomic_read_u64(&lru->last_used))
				lru = o;
		}
		if (lru == NULL)
			return NULL;
		unpin[(*nunpin)++] = drop_segment(lru);
		e = lru;
	}
	memset(e, 0, offsetof(ShmEntry, last_used));
	pg_atomic_write_u64(&e->last_used, (uint64) GetCurrentTimestamp());
	pg_atomic_write_u64(&e->hits, 0);
	pg_atomic_write_u64(&e->misses, 0);
	pg_atomic_write_u64(&e->insert_searches, 0);
	pg_atomic_write_u64(&e->cut_until, 0);
	e->builds = e->invalidations = e->refreshes = e->evictions = 0;
	e->dbid = MyDatabaseId;
	e->relid = RelationGetRelid(index);
	e->owner = index->rd_rel->relowner;
	e->locator = index->rd_locator;
	e->state = ENTRY_EMPTY;
	return e;
}

/* true if a lazy build of e should not be tried now (it failed recently) */
static bool
entry_failed_recently(ShmEntry *e, BlockNumber nblocks)
{
	return e->state == ENTRY_EMPTY && e->last_failure != 0 &&
		(e->failed_nblocks == nblocks ||
		 !TimestampDifferenceExceeds(e->failed_at, GetCurrentTimestamp(),
									 SHM_RETRY_SECS * 1000));
}

/*
 * entry_claim claims the index's entry for a build by this backend
 * (BUILDING, pending_slot set): the slot, or -1 with *status saying why.
 * explicit: drops a ready image and ignores recent failures.
 */
static int
entry_claim(Relation index, bool explicit, BlockNumber nblocks, int *status)
{
	ShmEntry   *e;
	dsm_handle	unpin[SHM_MAX_IMAGES + 1];
	int			nunpin = 0;
	int			slot = -1;

	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = find_entry(index);
	if (e != NULL && e->state >= ENTRY_BUILDING)
	{
		if (e->state == ENTRY_READY && explicit)
			unpin[nunpin++] = drop_segment(e);
		else
			e = NULL, *status = SHNSW_SHM_BUILDING;
	}
	else if (e == NULL)
	{
		e = entry_new(index, explicit, unpin, &nunpin);
		if (e == NULL)
			*status = SHNSW_SHM_UNAVAILABLE;
	}
	else if (!explicit && entry_failed_recently(e, nblocks))
	{
		/* it failed recently, or for this very size: do not retry every scan */
		*status = e->last_failure;
		e = NULL;
	}
	if (e != NULL)
	{
		e->state = ENTRY_BUILDING;
		e->builder_pid = MyProcPid;
		e->owner = index->rd_rel->relowner;
		e->image_id = 0;
		slot = e - ctl->entries;
		pending_slot = slot;
		pending_image_id = 0;
		pending_refresh = false;
	}
	LWLockRelease(&ctl->lock);
	unpin_handles(unpin, nunpin);
	return slot;
}

/*
 * entry_fail gives up this backend's claim of the entry in slot (no
 * segment published yet), returning its reserved bytes and noting why.
 */
static void
entry_fail(int slot, int status, BlockNumber nblocks)
{
	ShmEntry   *e;

	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = &ctl->entries[slot];
	ctl->total_bytes -= e->bytes;
	e->bytes = 0;
	e->state = ENTRY_EMPTY;
	e->builder_pid = 0;
	note_failure(e, status, nblocks);
	pending_slot = -1;
	LWLockRelease(&ctl->lock);
}

/*
 * build_yields says whether the build that claimed slot should give up
 * now: only a background worker's build does, when a VACUUM truncation is
 * waiting for the index's lock (cut_until; see shnsw_shm_cut_waiting). A
 * build in a scan or in streamhnsw_cache_load runs in a transaction that
 * holds its lock to the end anyway, so stopping it would free nothing.
 */
static bool
build_yields(int slot)
{
	uint64		until;

	if (!AmBackgroundWorkerProcess())
		return false;
	until = pg_atomic_read_u64(&ctl->entries[slot].cut_until);
	return until != 0 && (uint64) GetCurrentTimestamp() < until;
}

/*
 * build_delay is streamhnsw.debug_image_build_delay for tests: a worker's
 * build waits that long after its claim, holding what a build holds (the
 * index's AccessShareLock, the claim), unless a truncation waits (then it
 * gives up: false).
 */
static bool
build_delay(int slot)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  shnsw_debug_image_build_delay);

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
 * (idle images only unless explicit) to make room. False with *status if
 * it does not fit; the claim is then given up.
 */
static bool
entry_reserve(int slot, Size size, bool explicit, BlockNumber nblocks, int *status)
{
	Size		budget = (Size) shnsw_shared_cache_size * 1024 * 1024;
	dsm_handle	unpin[SHM_MAX_IMAGES + 1];
	int			nunpin = 0;
	ShmEntry   *e;
	bool		ok;

	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = &ctl->entries[slot];
	ok = size <= budget && make_room(size, e, !explicit, unpin, &nunpin);
	if (ok)
	{
		ctl->total_bytes += size;
		e->bytes = size;
	}
	LWLockRelease(&ctl->lock);
	unpin_handles(unpin, nunpin);
	if (!ok)
	{
		*status = size > budget ? SHNSW_SHM_TOO_BIG : SHNSW_SHM_FULL;
		entry_fail(slot, *status, nblocks);
	}
	return ok;
}

/*
 * image_layout writes a new image's header into seg and maps the pass-1
 * pages (types) as reserved: writers skip them, the build copies them. tok
 * is the metapage state read before any page is copied: every change
 * before it is in the pages the build copies after, every change after it
 * is written through or copied too (or, on a standby, found by the next
 * refresh: the token is behind then, not ahead).
 */
static void
image_layout(dsm_segment *seg, const ShnswIndexInfo *info, const uint8 *types,
			 BlockNumber nblocks, uint32 ng, uint32 nu, const Size *offs, Size size,
			 const ShmToken *tok)
{
	ShmImage   *img = (ShmImage *) dsm_segment_address(seg);
	pg_atomic_uint32 *map = (pg_atomic_uint32 *) ((char *) img + offs[0]);
	ShmPageDesc *gd = (ShmPageDesc *) ((char *) img + offs[1]);
	ShmPageDesc *ud = (ShmPageDesc *) ((char *) img + offs[2]);
	int			npp = shnsw_nodes_per_page(info->node_size);

	memset(img, 0, offs[0]);
	pg_atomic_init_u32(&img->valid, 1);
	pg_atomic_init_u64(&img->meta_lsn, tok->lsn);
	pg_atomic_init_u64(&img->meta_gen, tok->gen);
	img->meta_nonce = tok->nonce;
	img->meta_trunc = tok->trunc;
	pg_atomic_init_u32(&img->gnext, ng);
	pg_atomic_init_u32(&img->unext, nu);
	img->m = info->m;
	img->node_size = info->node_size;
	img->npp = npp;
	img->slot_bits = info->slot_bits;
	img->mapcap = IMAGE_MAPCAP(nblocks);
	img->gcap = IMAGE_GCAP(ng);
	img->ucap = IMAGE_UCAP(nu);
	img->build_nblocks = nblocks;
	img->gstride = TYPEALIGN(64, (Size) npp * info->node_size);
	img->map_off = offs[0];
	img->gdesc_off = offs[1];
	img->udesc_off = offs[2];
	img->gdata_off = offs[3];
	img->udata_off = offs[4];
	img->total = size;
	for (uint32 b = 0; b < img->mapcap; b++)
		pg_atomic_init_u32(&map[b], b < nblocks &&
						   (types[b] == SHNSW_PAGE_GRAPH || types[b] == SHNSW_PAGE_UPPER)
						   ? MAP_RESERVED : MAP_ABSENT);
	for (uint32 i = 0; i < img->gcap; i++)
	{
		pg_atomic_init_u32(&gd[i].seq, 0);
		gd[i].nslots = 0;
		gd[i].lsn = 0;
	}
	for (uint32 i = 0; i < img->ucap; i++)
	{
		pg_atomic_init_u32(&ud[i].seq, 0);
		ud[i].nslots = 0;
		ud[i].lsn = 0;
	}
}

/*
 * image_publish gives the laid-out segment its id and names it in the
 * claimed entry: from now on writers copy the pages they change into it.
 */
static LocalImage *
image_publish(int slot, dsm_segment *seg)
{
	ShmImage   *img = (ShmImage *) dsm_segment_address(seg);
	ShmEntry   *e;
	LocalImage *li;

	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = &ctl->entries[slot];
	img->image_id = ctl->next_image_id++;
	e->image_id = img->image_id;
	e->handle = dsm_segment_handle(seg);
	pending_image_id = img->image_id;
	pg_atomic_fetch_add_u32(&ctl->nimages, 1);
	Assert(nlocal < lengthof(local_images));
	li = &local_images[nlocal++];
	local_fill(li, seg);
	LWLockRelease(&ctl->lock);
	return li;
}

/*
 * image_copy_pages (pass 2) copies each graph and upper page of types
 * into the image under the page's share lock, publishing its map entry
 * before releasing the lock. Returns the node slots copied; sets *yielded
 * and stops if the build yields to a truncation (build_yields).
 */
static uint64
image_copy_pages(Relation index, int slot, LocalImage *li, const uint8 *types,
				 BlockNumber nblocks, BufferAccessStrategy strategy, int vec_size,
				 bool *yielded)
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
			ok = copy_graph(li, idx, blk, page, vec_size);
			if (ok)
				nodes += li->gdesc[idx].nslots;
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
 * image_finish marks the entry ready (the image's token was read before
 * the copy: image_layout). False if a writer dropped the image meanwhile.
 */
static bool
image_finish(Relation index, int slot, LocalImage *li, uint64 nodes, uint32 ng, uint32 nu)
{
	ShmImage   *img = li->img;
	ShmEntry   *e;
	bool		ok;

	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = &ctl->entries[slot];
	ok = e->image_id == img->image_id && e->state == ENTRY_BUILDING;
	if (ok)
	{
		e->state = ENTRY_READY;
		e->builder_pid = 0;
		e->builds++;
		e->nodes = nodes;
		e->gpages = ng;
		e->upages = nu;
		e->last_failure = 0;
		if (!AmBackgroundWorkerProcess())
			e->launched_at = 0; /* a worker clears it once its lock is gone */
		pg_atomic_write_u64(&e->last_used, (uint64) GetCurrentTimestamp());
	}
	pending_slot = -1;
	LWLockRelease(&ctl->lock);
	return ok;
}

/*
 * image_build builds the index's image in this backend (the caller has no
 * usable image). explicit: on request (evicts any image, ignores recent
 * failures). Returns the mapping, or NULL with *status saying why.
 */
static LocalImage *
image_build(Relation index, const ShnswIndexInfo *info, bool explicit, int *status)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(index);
	int			npp = shnsw_nodes_per_page(info->node_size);
	Size		gstride = TYPEALIGN(64, (Size) npp * info->node_size);
	Size		budget = (Size) shnsw_shared_cache_size * 1024 * 1024;
	ShnswMetaSnapshot snap;
	int			slot;
	uint8	   *types;
	uint32		ng,
				nu;
	Size		offs[5],
				size;
	dsm_segment *seg;
	LocalImage *li;
	BufferAccessStrategy strategy = NULL;
	uint64		nodes;
	bool		yielded = false;
	ShmToken	tok;

	slot = entry_claim(index, explicit, nblocks, status);
	if (slot < 0)
		return NULL;

	/* a lower bound from what the metapage counts: skip hopeless attempts */
	shnsw_read_meta(index, &snap);
	if ((Size) (snap.node_count / Max(npp, 1)) * gstride > budget)
	{
		*status = SHNSW_SHM_TOO_BIG;
		entry_fail(slot, *status, nblocks);
		return NULL;
	}

	if (shnsw_debug_image_build_delay > 0 && !build_delay(slot))
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
		/* a truncation waits for the lock: give the claim back, no failure noted */
		release_pending();
		*status = SHNSW_SHM_MISSING;
		return NULL;
	}
	size = image_size(IMAGE_MAPCAP(nblocks), IMAGE_GCAP(ng), IMAGE_UCAP(nu), gstride, offs);
	if (!entry_reserve(slot, size, explicit, nblocks, status))
		seg = NULL;
	else if ((seg = create_segment(size)) == NULL)
	{
		*status = SHNSW_SHM_UNAVAILABLE;
		entry_fail(slot, *status, nblocks);
	}
	if (seg == NULL)
	{
		FreeAccessStrategy(strategy);
		pfree(types);
		return NULL;
	}

	/* the token first, then the pages (hole 1 of issue 49: a standby) */
	read_meta_token(index, &tok);
	image_layout(seg, info, types, nblocks, ng, nu, offs, size, &tok);
	li = image_publish(slot, seg);
	nodes = image_copy_pages(index, slot, li, types, nblocks, strategy, info->vec_size,
							 &yielded);
	FreeAccessStrategy(strategy);
	pfree(types);
	if (yielded)
	{
		release_pending();		/* drops the half-copied image */
		*status = SHNSW_SHM_MISSING;
		return NULL;
	}
	if (!image_finish(index, slot, li, nodes, ng, nu))
	{
		/* a writer could not copy a change into it and dropped it */
		*status = SHNSW_SHM_STALE;
		return NULL;
	}
	*status = SHNSW_SHM_BUILT;
	return li;
}

/*
 * image_refresh brings an image that is behind the metapage up to date:
 * recopies every page whose LSN differs from its copy's (a hot standby,
 * where WAL replay runs no extension code, gets here after each replayed
 * change of the metapage), and adds pages appended since the build. The
 * caller has claimed the entry (REFRESHING).
 */
static void
image_refresh(Relation index, LocalImage *li, int vec_size)
{
	ShmImage   *img = li->img;
	ShmToken	tok;
	BlockNumber nblocks;

	read_meta_token(index, &tok);
	if (tok.nonce != img->meta_nonce || tok.trunc != img->meta_trunc)
	{
		/* rebuilt or truncated since: blocks may have changed type; rebuild */
		pg_atomic_write_u32(&img->valid, 0);
		return;
	}
	nblocks = Min(RelationGetNumberOfBlocks(index), img->mapcap);
	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < nblocks; blk++)
	{
		uint32		v = pg_atomic_read_u32(&li->map[blk]);
		Buffer		buf;
		Page		page;
		ShmPageDesc *d;

		if (v == MAP_ABSENT && blk < img->build_nblocks)
			continue;			/* not graph or upper when built: pages keep their type */
		if (v == MAP_RESERVED)
			continue;
		buf = ReadBuffer(index, blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		d = v == MAP_ABSENT ? NULL : MAP_KIND(v) == MAP_GRAPH ? &li->gdesc[MAP_INDEX(v)]
			: &li->udesc[MAP_INDEX(v)];
		if (d == NULL || d->lsn != PageGetLSN(page))
			copy_page(li, blk, page, vec_size, true);
		UnlockReleaseBuffer(buf);
		if ((blk & 255) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	pg_atomic_write_u64(&img->meta_lsn, tok.lsn);
	pg_atomic_write_u64(&img->meta_gen, tok.gen);
}

/* ---------- building in the background ---------- */

/* what a scan hands its background builder (bgw_extra) */
typedef struct ShmBuildRequest
{
	Oid			dbid;
	Oid			relid;
	int			cache_size_mb;	/* the requesting session's shared_cache_size */
	int			delay_ms;		/* its debug_image_build_delay */
} ShmBuildRequest;

PGDLLEXPORT void streamhnsw_image_worker(Datum arg);

/*
 * sweep_dropped drops the images of this database's indexes that are gone
 * (DROP INDEX, DROP TABLE) or now live in another relfilenode (REINDEX,
 * TRUNCATE, VACUUM FULL) and frees their entries. Scans never reach such an
 * image (entries are keyed by relfilenode), but it would keep its dynamic
 * shared memory until the least recently used eviction got to it, memory
 * that parallel queries and live images need (/dev/shm is often small in
 * containers). Other databases' entries cannot be checked from here; their
 * own backends sweep them. Called where a backend asks for a build, loads
 * or lists images, in a transaction (it reads pg_class), never from the
 * build worker (which holds no snapshot). A relation this backend cannot
 * see yet (created by a transaction still open) may lose its image: the
 * next scan builds it again. Entries being built or refreshed are left
 * alone.
 */
static void
sweep_dropped(void)
{
	struct
	{
		int			slot;
		Oid			relid;
		RelFileNumber file;
		uint64		image_id;
	}			seen[SHM_MAX_IMAGES];
	int			n = 0,
				ndead = 0;
	dsm_handle	unpin[SHM_MAX_IMAGES];
	int			nunpin = 0;

	if (ctl == NULL || !IsTransactionState() || IsInParallelMode())
		return;
	LWLockAcquire(&ctl->lock, LW_SHARED);
	for (int i = 0; i < SHM_MAX_IMAGES; i++)
	{
		ShmEntry   *e = &ctl->entries[i];

		if ((e->state == ENTRY_READY || e->state == ENTRY_EMPTY) && e->dbid == MyDatabaseId)
		{
			seen[n].slot = i;
			seen[n].relid = e->relid;
			seen[n].file = e->locator.relNumber;
			seen[n].image_id = e->image_id;
			n++;
		}
	}
	LWLockRelease(&ctl->lock);

	/* no lock held while the catalog is read; the dead ones move to the front */
	for (int k = 0; k < n; k++)
	{
		HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(seen[k].relid));
		bool		gone = !HeapTupleIsValid(tup);

		if (!gone)
		{
			Form_pg_class form = (Form_pg_class) GETSTRUCT(tup);

			gone = form->relfilenode != InvalidRelFileNumber && form->relfilenode != seen[k].file;
			ReleaseSysCache(tup);
		}
		if (gone)
			seen[ndead++] = seen[k];
	}
	if (ndead == 0)
		return;

	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	for (int k = 0; k < ndead; k++)
	{
		ShmEntry   *e = &ctl->entries[seen[k].slot];

		/* still the entry (and image) that was found gone */
		if (e->dbid != MyDatabaseId || e->relid != seen[k].relid ||
			e->locator.relNumber != seen[k].file || e->image_id != seen[k].image_id ||
			(e->state != ENTRY_READY && e->state != ENTRY_EMPTY))
			continue;
		if (e->state == ENTRY_READY)
			unpin[nunpin++] = drop_segment(e);
		e->state = ENTRY_FREE;
	}
	LWLockRelease(&ctl->lock);
	unpin_handles(unpin, nunpin);
}

/*
 * request_build asks a dynamic background worker to build the index's
 * image, so that the scan that found none searches through buffers at
 * once instead of paying for the build. At most one request per index is
 * outstanding (the entry's launched_at, for SHM_RETRY_SECS: a worker that
 * never starts is asked for again after that). Returns true if the build
 * is on its way, or should not be tried now (*status says why); false if
 * no worker could be registered (max_worker_processes reached): the
 * caller builds the image itself, as before.
 */
static bool
request_build(Relation index, int *status)
{
	BackgroundWorker bgw;
	ShmBuildRequest req;
	ShmEntry   *e;
	dsm_handle	unpin[SHM_MAX_IMAGES + 1];
	int			nunpin = 0;
	TimestampTz now = GetCurrentTimestamp();
	bool		launch = false;
	int			slot = -1;

	sweep_dropped();
	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = find_entry(index);
	if (e == NULL)
		e = entry_new(index, false, unpin, &nunpin);
	if (e == NULL)
		*status = SHNSW_SHM_UNAVAILABLE;
	else if (e->state >= ENTRY_BUILDING)
		*status = SHNSW_SHM_BUILDING;
	else if (entry_failed_recently(e, RelationGetNumberOfBlocks(index)))
		*status = e->last_failure;
	else if (e->launched_at != 0 &&
			 !TimestampDifferenceExceeds(e->launched_at, now, SHM_RETRY_SECS * 1000))
		*status = SHNSW_SHM_BUILDING;
	else
	{
		e->launched_at = now;
		launch = true;
		slot = e - ctl->entries;
	}
	LWLockRelease(&ctl->lock);
	unpin_handles(unpin, nunpin);
	if (!launch)
		return true;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_ConsistentState;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(bgw.bgw_library_name, "streamhnsw", BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, "streamhnsw_image_worker", BGW_MAXLEN);
	snprintf(bgw.bgw_name, BGW_MAXLEN, "streamhnsw image build for index %u", RelationGetRelid(index));
	strlcpy(bgw.bgw_type, "streamhnsw image build", BGW_MAXLEN);
	req.dbid = MyDatabaseId;
	req.relid = RelationGetRelid(index);
	req.cache_size_mb = shnsw_shared_cache_size;
	req.delay_ms = shnsw_debug_image_build_delay;
	memcpy(bgw.bgw_extra, &req, sizeof(req));
	bgw.bgw_notify_pid = 0;
	if (RegisterDynamicBackgroundWorker(&bgw, NULL))
	{
		*status = SHNSW_SHM_LAUNCHED;
		return true;
	}

	/* no background worker slot: withdraw the request */
	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = &ctl->entries[slot];
	if (e->relid == RelationGetRelid(index) && e->launched_at == now)
		e->launched_at = 0;
	LWLockRelease(&ctl->lock);
	return false;
}

/*
 * worker_done clears the launch note of the index relid once the worker's
 * transaction is over (its lock released): until then a VACUUM truncation
 * may wait for it (shnsw_shm_cut_waiting), and no scan asks for another.
 */
static void
worker_done(Oid relid)
{
	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	for (int i = 0; i < SHM_MAX_IMAGES; i++)
	{
		ShmEntry   *e = &ctl->entries[i];

		if (e->state != ENTRY_FREE && e->relid == relid && e->dbid == MyDatabaseId)
			e->launched_at = 0;
	}
	LWLockRelease(&ctl->lock);
}

/*
 * streamhnsw_image_worker is the background worker request_build starts:
 * it connects to the index's database, builds the image as a scan would
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
streamhnsw_image_worker(Datum arg)
{
	ShmBuildRequest req;
	Relation	index;
	int			status;

	memcpy(&req, MyBgworkerEntry->bgw_extra, sizeof(req));
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(req.dbid, InvalidOid, 0);
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING, "streamhnsw: building a shared graph image");
	if (req.cache_size_mb >= 0)
	{
		char		val[32];

		snprintf(val, sizeof(val), "%d", req.cache_size_mb);
		SetConfigOption("streamhnsw.shared_cache_size", val, PGC_SUSET, PGC_S_SESSION);
	}
	shnsw_debug_image_build_delay = req.delay_ms;
	get_ctl();
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
			if (info->quant_trained)
				(void) image_build(index, info, false, &status);
		}
		relation_close(index, AccessShareLock);
	}
	CommitTransactionCommand();
	worker_done(req.relid);
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}

/*
 * shnsw_shm_cut_waiting is called by a VACUUM truncation whose conditional
 * AccessExclusiveLock on the index failed: it asks a background build of
 * the index's image, if one is running, to give up its lock (for the next
 * second: a truncation that stops asking, cancelled or done, stops
 * holding builds back by itself), and returns true if one is running or
 * launched (then waiting a moment for the lock is worthwhile); false if
 * someone else holds the lock (a scan or insert, for its transaction).
 */
bool
shnsw_shm_cut_waiting(Relation index)
{
	ShmEntry   *e;
	bool		bg = false;
	TimestampTz now = GetCurrentTimestamp();

	if (!registry_exists() || try_get_ctl() == NULL)
		return false;			/* no registry, no background build */
	LWLockAcquire(&ctl->lock, LW_SHARED);
	e = find_entry(index);
	if (e != NULL && e->launched_at != 0 &&
		!TimestampDifferenceExceeds(e->launched_at, now, SHM_RETRY_SECS * 1000))
	{
		pg_atomic_write_u64(&e->cut_until, (uint64) TimestampTzPlusMilliseconds(now, 1000));
		bg = true;
	}
	LWLockRelease(&ctl->lock);
	return bg;
}

/* ---------- the node source over an image ---------- */

typedef struct ShmScan
{
	LocalImage *li;
	ShnswNodeSource inner;			/* buffer-manager ops: nodes the image lacks */
	ShnswScanStats *stats;
	int			slot_bits;
	int			node_size;
	int			code_off;		/* where a record's code starts */
	int			m;
	ShnswRef   *fb;				/* scratch for prefetch of absent nodes */
	int			fbcap;
	char	   *held_copy;		/* read_nodes_held: a record read through
								 * buffers, kept until flush */
} ShmScan;

/*
 * The image's record of node ref and (if desc) its page's descriptor, or
 * NULL if the image lacks the node. No seqlock: the caller reads the record
 * under its page's sequence counter, or only prefetches it (a prefetch may
 * name a stale line).
 */
static inline const char *
shm_record_addr(ShmScan *ss, ShnswRef ref, ShmPageDesc **desc)
{
	LocalImage *li = ss->li;
	uint32		blk = shnsw_ref_block(ref, ss->slot_bits);
	uint32		v = blk < li->img->mapcap ? pg_atomic_read_u32(&li->map[blk]) : MAP_ABSENT;

	if (MAP_KIND(v) != MAP_GRAPH || v == MAP_RESERVED)
		return NULL;
	if (desc != NULL)
		*desc = &li->gdesc[MAP_INDEX(v)];
	return li->gdata + (Size) MAP_INDEX(v) * li->img->gstride +
		(Size) shnsw_ref_slot(ref, ss->slot_bits) * ss->node_size;
}

/*
 * Wait until the page of descriptor d is between writes: true with its
 * sequence count in *seq if slot is one of its slots; false if it is not,
 * or after 64 looks in all (*tries counts each look at an odd count and
 * each read that collided with a writer, across calls).
 */
static inline bool
shm_seq_wait(ShmPageDesc *d, uint32 slot, uint32 *seq, int *tries)
{
	for (; *tries < 64; (*tries)++)
	{
		uint32		s1 = pg_atomic_read_u32(&d->seq);

		if (s1 & 1)
		{
			pg_spin_delay();
			continue;
		}
		pg_read_barrier();
		if (slot >= d->nslots)
			return false;
		*seq = s1;
		return true;
	}
	return false;
}

/*
 * shm_node_fn calls fn(arg, i, record) on the image's record of node ref
 * itself (no copy) inside its page's seqlock, and flush(arg) after it if
 * flush is not NULL (read_nodes_held: flush reads the record too): if a
 * writer changed the page meanwhile it calls again (the node source
 * contract lets the last call win). False if the image lacks the node or
 * the read keeps colliding with writers: the caller reads it through
 * buffers.
 */
static inline bool
shm_node_fn(ShmScan *ss, ShnswRef ref, ShnswNodeFn fn, ShnswFlushFn flush, void *arg, int i)
{
	uint32		slot = shnsw_ref_slot(ref, ss->slot_bits);
	ShmPageDesc *d;
	const char *src = shm_record_addr(ss, ref, &d);
	uint32		s1;

	if (src == NULL)
		return false;
	for (int tries = 0; shm_seq_wait(d, slot, &s1, &tries); tries++)
	{
		fn(arg, i, (const ShnswNodeHeader *) src);
		if (flush != NULL)
			flush(arg);
		pg_read_barrier();
		if (pg_atomic_read_u32(&d->seq) == s1)
			return true;
	}
	return false;
}

/*
 * Memory prefetch of the lines of the image's record of ref that its
 * distance reads (the header and the code), if the image has it. The
 * header's last byte too: records are node_size apart, so a 24-byte
 * header crosses into the next line for some slots (a quarter of them at
 * 384 dimensions, m 16), and that line is no code line. Not its
 * neighbour list: the search reads that only for the few nodes it expands.
 * to_l1: into the first-level cache, with its page's sequence counter, for
 * a read a record or two from now; else into the second level only, for a
 * read later in the hop (__builtin_prefetch's locality 2: prefetcht1 on
 * x86).
 */
#define SHM_PREFETCH_LINES(ss, p, locality) \
	do { \
		__builtin_prefetch((p), 0, (locality)); \
		__builtin_prefetch((p) + sizeof(ShnswNodeHeader) - 1, 0, (locality)); \
		for (int off_ = (ss)->code_off; off_ < (ss)->node_size; off_ += 64) \
			__builtin_prefetch((p) + off_, 0, (locality)); \
		__builtin_prefetch((p) + (ss)->node_size - 1, 0, (locality)); \
	} while (0)

static inline void
shm_prefetch_record(ShmScan *ss, ShnswRef ref, bool to_l1)
{
	ShmPageDesc *d;
	const char *p = shm_record_addr(ss, ref, &d);

	if (p == NULL)
		return;
	if (to_l1)
	{
		__builtin_prefetch(d);	/* its page's sequence counter */
		SHM_PREFETCH_LINES(ss, p, 3);
	}
	else
		SHM_PREFETCH_LINES(ss, p, 2);
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
 * The order a hop's records are read in (by reference: the buffer path's
 * order, so results are the same with and without the image), and their
 * memory prefetch. Two prefetches a record. First the whole hop into the
 * second-level cache, whose queue of misses is longer than the first
 * level's, so that all of the hop's misses to memory overlap (into the
 * first level instead, they stalled on its full miss queue). Then
 * software pipelining into the first level: the records
 * SHM_PREFETCH_AHEAD places ahead are asked for while this one is read
 * (the caller's loop asks for each next one). Measured on 100k x 384 real
 * sentences, ef_search 40, AMD EPYC: the second-level pass took a hot
 * query's server time from 206 to 181 us.
 */
static int *
shm_hop_begin(ShmScan *ss, const ShnswRef *refs, int n, int *order_buf, int bufsize)
{
	int		   *order = n <= bufsize ? order_buf : palloc(sizeof(int) * n);

	for (int k = 0; k < n; k++)
	{
		int			j = k;

		while (j > 0 && refs[order[j - 1]] > refs[k])
		{
			order[j] = order[j - 1];
			j--;
		}
		order[j] = k;
	}
	for (int k = SHM_PREFETCH_AHEAD; k < n; k++)
		shm_prefetch_record(ss, refs[order[k]], false);
	for (int k = 0; k < Min(n, SHM_PREFETCH_AHEAD); k++)
		shm_prefetch_record(ss, refs[order[k]], true);
	return order;
}

/*
 * read_nodes over the image: fn reads each record in the image itself
 * under its page's seqlock (plain loads, no pin, lock or copy); a node the
 * image lacks is read through buffers.
 */
static void
shm_read_nodes(void *vctx, const ShnswRef *refs, int n, ShnswNodeFn fn, void *arg)
{
	ShmScan    *ss = (ShmScan *) vctx;
	int			order_buf[2 * SHNSW_MAX_M + 2];
	int		   *order = shm_hop_begin(ss, refs, n, order_buf, lengthof(order_buf));

	for (int k = 0; k < n; k++)
	{
		int			i = order[k];

		if (k + SHM_PREFETCH_AHEAD < n)
			shm_prefetch_record(ss, refs[order[k + SHM_PREFETCH_AHEAD]], true);
		if (shm_node_fn(ss, refs[i], fn, NULL, arg, i))
			ss->stats->image_nodes++;
		else
		{
			ShimArg		a = {fn, arg, i};

			ss->stats->image_fallback_nodes++;
			ss->inner.read_nodes(ss->inner.ctx, &refs[i], 1, shim_cb, &a);
		}
	}
	if (order != order_buf)
		pfree(order);
}

/*
 * The buffer path's read of node ref (one the image lacks, or one whose
 * reads keep colliding with writers) for read_nodes_held: the record is
 * copied into ss->held_copy, which stays put until flush, and fn and
 * flush are called on the copy.
 */
static void
held_copy_cb(void *arg, int i, const ShnswNodeHeader *node)
{
	ShmScan    *ss = (ShmScan *) arg;

	(void) i;
	memcpy(ss->held_copy, node, ss->node_size);
}

static void
shm_held_fallback(ShmScan *ss, ShnswRef ref, int i, ShnswNodeFn fn, ShnswFlushFn flush,
				  void *arg)
{
	ss->stats->image_fallback_nodes++;
	/* (the buffer path calls back at least once, or raises an error) */
	ss->inner.read_nodes(ss->inner.ctx, &ref, 1, held_copy_cb, ss);
	fn(arg, i, (const ShnswNodeHeader *) ss->held_copy);
	flush(arg);
}

/*
 * read_nodes_held over the image (nodesource.h): fn is called on records
 * in the image, up to SHNSW_HELD_BATCH of them, then flush (the search's
 * batch kernel reads their codes in place), and only then are their
 * pages' sequence counts checked again: a record a writer changed
 * meanwhile is read again on its own (fn and flush inside one seqlock
 * window), or through buffers. Same order and results as shm_read_nodes,
 * without the copy of each code into the search's batch (8% of a hot
 * query's server time in a perf profile on real sentences, 100k x 384).
 */
static void
shm_read_nodes_held(void *vctx, const ShnswRef *refs, int n, ShnswNodeFn fn,
					ShnswFlushFn flush, void *arg)
{
	ShmScan    *ss = (ShmScan *) vctx;
	int			order_buf[2 * SHNSW_MAX_M + 2];
	int		   *order = shm_hop_begin(ss, refs, n, order_buf, lengthof(order_buf));
	int			held[SHNSW_HELD_BATCH];
	ShmPageDesc *hdesc[SHNSW_HELD_BATCH];
	uint32		hseq[SHNSW_HELD_BATCH];
	int			nheld = 0;

	for (int k = 0; k <= n; k++)
	{
		int			i = k < n ? order[k] : -1;
		const char *src = NULL;
		ShmPageDesc *d = NULL;
		uint32		s1 = 0;
		int			tries = 0;

		if (k + SHM_PREFETCH_AHEAD < n)
			shm_prefetch_record(ss, refs[order[k + SHM_PREFETCH_AHEAD]], true);
		if (i >= 0 && (src = shm_record_addr(ss, refs[i], &d)) != NULL &&
			!shm_seq_wait(d, shnsw_ref_slot(refs[i], ss->slot_bits), &s1, &tries))
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
			pg_read_barrier();
			for (int h = 0; h < nheld; h++)
			{
				ShnswRef	ref = refs[held[h]];

				/* changed meanwhile: again, alone, inside one seqlock window */
				if (pg_atomic_read_u32(&hdesc[h]->seq) == hseq[h] ||
					shm_node_fn(ss, ref, fn, flush, arg, held[h]))
					ss->stats->image_nodes++;
				else
					shm_held_fallback(ss, ref, held[h], fn, flush, arg);
			}
			nheld = 0;
		}
		if (i >= 0 && src == NULL)
			shm_held_fallback(ss, refs[i], i, fn, flush, arg);
	}
	if (order != order_buf)
		pfree(order);
}

/*
 * A single load of a value in an image page that a writer may be changing:
 * the compiler may neither load it again nor tear it, so a check made on
 * the value holds for every use of it.
 */
#define SHM_LOAD(type, ptr)	(*(volatile const type *) (ptr))

/*
 * read_upper over the image: the record is checked as pageaccess.c checks
 * it and its list copied under its page's seqlock; anything that does not
 * check out is read through buffers instead (which report corruption).
 * Every field of the page is loaded once into a local and the copy's
 * bounds come from those locals only (hole 6 of issue 49): a writer
 * changing the page meanwhile makes the seqlock check fail, never the copy
 * overflow out (at most m references) or read outside the page.
 */
static int
shm_read_upper(void *vctx, ShnswUpperLoc loc, int layer, ShnswRef *out)
{
	ShmScan    *ss = (ShmScan *) vctx;
	LocalImage *li = ss->li;
	uint32		v;

	if (loc.block < li->img->mapcap &&
		MAP_KIND(v = pg_atomic_read_u32(&li->map[loc.block])) == MAP_UPPER && v != MAP_RESERVED)
	{
		ShmPageDesc *d = &li->udesc[MAP_INDEX(v)];
		const char *page = li->udata + (Size) MAP_INDEX(v) * BLCKSZ;

		for (int tries = 0; tries < 64; tries++)
		{
			uint32		s1 = pg_atomic_read_u32(&d->seq);
			int			cnt = -1;
			uint16		lower;

			if (s1 & 1)
			{
				pg_spin_delay();
				continue;
			}
			pg_read_barrier();
			lower = SHM_LOAD(uint16, &((PageHeader) page)->pd_lower);
			if (loc.offset >= FirstOffsetNumber && lower > SizeOfPageHeaderData &&
				loc.offset <= (lower - SizeOfPageHeaderData) / sizeof(ItemIdData))
			{
				uint32		raw = SHM_LOAD(uint32, page + SizeOfPageHeaderData +
										   (loc.offset - 1) * sizeof(ItemIdData));
				ItemIdData	iid;
				Size		off,
							len;

				memcpy(&iid, &raw, sizeof(iid));
				off = ItemIdGetOffset(&iid);
				len = ItemIdGetLength(&iid);
				if (ItemIdIsNormal(&iid) && len >= sizeof(ShnswUpperHeader) &&
					off >= SizeOfPageHeaderData &&
					off + len <= BLCKSZ - MAXALIGN(sizeof(ShnswPageOpaqueData)))
				{
					const char *u = page + off;
					int			level = SHM_LOAD(uint8, u + offsetof(ShnswUpperHeader, level));

					if (level >= 1 && level <= SHNSW_MAX_LEVEL &&
						len >= shnsw_upper_size(level, ss->m) &&
						layer >= 1 && layer <= level)
					{
						Size		lists = sizeof(ShnswUpperHeader) +
							((sizeof(uint16) * level + 3) & ~(Size) 3);

						cnt = SHM_LOAD(uint16, u + sizeof(ShnswUpperHeader) +
									   sizeof(uint16) * (layer - 1));
						cnt = Min(cnt, ss->m);
						memcpy(out, u + lists + sizeof(ShnswRef) * (Size) (layer - 1) * ss->m,
							   sizeof(ShnswRef) * cnt);
					}
				}
			}
			pg_read_barrier();
			if (pg_atomic_read_u32(&d->seq) == s1)
			{
				if (cnt < 0)
					break;
				return cnt;
			}
		}
	}
	return ss->inner.read_upper(ss->inner.ctx, loc, layer, out);
}

/*
 * prefetch over the image: the buffer path's read-ahead for the records the
 * image lacks (shm_read_nodes prefetches the image's own from memory).
 */
static void
shm_prefetch(void *vctx, const ShnswRef *refs, int n, bool speculative)
{
	ShmScan    *ss = (ShmScan *) vctx;
	int			nfb = 0;

	/*
	 * Speculative requests name the neighbourhoods of the best queued
	 * candidates, a whole expansion or more ahead: worth a storage read,
	 * not a memory prefetch (the lines would be evicted or already loaded
	 * by the time they are used; measured: 9% of a hot search's time spent
	 * here). Nodes outside the image lose their speculative read-ahead.
	 */
	if (speculative || ss->inner.prefetch == NULL)
		return;
	for (int k = 0; k < n; k++)
	{
		/*
		 * The image's records are read next, by shm_read_nodes, which
		 * prefetches them a few records ahead of its reads: prefetching a
		 * hop's records all at once here stalled on a full miss queue.
		 */
		if (shm_record_addr(ss, refs[k], NULL) == NULL)
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

/*
 * page_records over the image (nodesource.h): the records of graph page blk
 * in the image itself, read under its sequence counter (token: the map
 * entry and the counter), for the scan's sweep; -1 for a block the image
 * lacks (vector pages, pages added without a spare slot), 0 for an upper
 * page.
 */
static int
shm_page_records(void *vctx, uint32 blk, const char **records, uint64 *token)
{
	ShmScan    *ss = (ShmScan *) vctx;
	LocalImage *li = ss->li;
	uint32		v;

	*records = NULL;
	if (blk >= li->img->mapcap)
		return -1;
	v = pg_atomic_read_u32(&li->map[blk]);
	if (v == MAP_RESERVED || MAP_KIND(v) == MAP_ABSENT)
		return -1;
	if (MAP_KIND(v) != MAP_GRAPH)
		return 0;
	for (int tries = 0; tries < 64; tries++)
	{
		ShmPageDesc *d = &li->gdesc[MAP_INDEX(v)];
		int			nslots;
		uint32		s1 = pg_atomic_read_u32(&d->seq);

		if (s1 & 1)
		{
			pg_spin_delay();
			continue;
		}
		pg_read_barrier();
		*token = (uint64) v << 32 | s1;
		*records = li->gdata + (Size) MAP_INDEX(v) * li->img->gstride;
		nslots = SHM_LOAD(uint16, &d->nslots);	/* once: checked, then returned */
		return Min(nslots, li->img->npp);
	}
	return -1;
}

/* Whether graph page blk's records did not change since page_records. */
static bool
shm_page_records_valid(void *vctx, uint32 blk, uint64 token)
{
	ShmScan    *ss = (ShmScan *) vctx;
	LocalImage *li = ss->li;
	uint32		v = (uint32) (token >> 32);

	pg_read_barrier();
	return pg_atomic_read_u32(&li->map[blk]) == v &&
		pg_atomic_read_u32(&li->gdesc[MAP_INDEX(v)].seq) == (uint32) token;
}

/* ---------- choosing the node source ---------- */

const char *
shnsw_shm_status_name(int status)
{
	switch (status)
	{
		case SHNSW_SHM_OFF:
			return "off";
		case SHNSW_SHM_USED:
			return "used";
		case SHNSW_SHM_BUILT:
			return "built by this scan, used";
		case SHNSW_SHM_BUILDING:
			return "not used (being built)";
		case SHNSW_SHM_STALE:
			return "not used (behind the index)";
		case SHNSW_SHM_TOO_BIG:
			return "not used (larger than streamhnsw.shared_cache_size)";
		case SHNSW_SHM_UNAVAILABLE:
			return "not used (no dynamic shared memory for it)";
		case SHNSW_SHM_MISSING:
			return "not used (no image)";
		case SHNSW_SHM_FULL:
			return "not used (the cache is full of images in use)";
		case SHNSW_SHM_LAUNCHED:
			return "not used (build started in the background)";
	}
	return "?";
}

/* whether img copies the build and truncation of the index tok was read from */
static inline bool
image_same_index(const ShmImage *img, const ShmToken *tok)
{
	return img->meta_nonce == tok->nonce && img->meta_trunc == tok->trunc;
}

/* token check: the image reflects at least the metapage state the scan read */
static inline bool
image_current(ShmImage *img, const ShmToken *tok)
{
	return pg_atomic_read_u32(&img->valid) != 0 && image_same_index(img, tok) &&
		pg_atomic_read_u64(&img->meta_lsn) >= tok->lsn &&
		pg_atomic_read_u64(&img->meta_gen) >= tok->gen;
}

/*
 * lookup_image: the index's image if it reflects metapage state (lsn, gen);
 * else NULL with *status (MISSING, BUILDING, STALE, UNAVAILABLE). A scan's
 * lookup (scan) counts a hit or a miss; an insert's counts an insert search
 * when it finds the image current. An image this backend has not mapped yet
 * is mapped with the registry lock released (map_segment, in a
 * subtransaction: no buffer lock may be held), then looked up again.
 */
static LocalImage *
lookup_image(Relation index, const ShmToken *tok, int *status, bool scan)
{
	ShmEntry   *e;
	LocalImage *li = NULL;
	bool		mapped_now = false;

	local_sweep();
retry:
	LWLockAcquire(&ctl->lock, LW_SHARED);
	e = find_entry(index);
	if (e == NULL || e->state == ENTRY_EMPTY)
		*status = e != NULL && e->launched_at != 0 ? SHNSW_SHM_BUILDING : SHNSW_SHM_MISSING;
	else if (e->state != ENTRY_READY)
		*status = SHNSW_SHM_BUILDING;
	else
	{
		li = local_find(e->image_id);
		if (li == NULL && !mapped_now)
		{
			/* map it with no lock held (in a subtransaction), then look again */
			dsm_handle	h = e->handle;
			uint64		id = e->image_id;

			LWLockRelease(&ctl->lock);
			(void) map_segment(h, id, true);
			mapped_now = true;
			goto retry;
		}
		if (li == NULL)
			*status = SHNSW_SHM_UNAVAILABLE;
		else if (e->behind || !image_current(li->img, tok))
		{
			*status = SHNSW_SHM_STALE;
			li = NULL;
		}
		else
		{
			*status = SHNSW_SHM_USED;
			pg_atomic_fetch_add_u64(scan ? &e->hits : &e->insert_searches, 1);
			pg_atomic_write_u64(&e->last_used, (uint64) GetCurrentTimestamp());
		}
	}
	if (li == NULL && e != NULL && scan)
		pg_atomic_fetch_add_u64(&e->misses, 1);
	LWLockRelease(&ctl->lock);
	return li;
}

/*
 * refresh_or_drop handles an image behind the metapage. A logged index's
 * pages say, by their LSN, which changed: this backend claims the image
 * and recopies those (returned if it then reflects (lsn, gen)). Otherwise
 * (unlogged, or invalid) the image is dropped and *rebuild set.
 */
static LocalImage *
refresh_or_drop(Relation index, const ShnswIndexInfo *info, const ShmToken *tok,
				bool *rebuild)
{
	ShmEntry   *e;
	LocalImage *li = NULL;
	bool		refresh = false;
	bool		kept;
	dsm_handle	h = DSM_HANDLE_INVALID;

	*rebuild = false;
	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = find_entry(index);
	if (e != NULL && e->state == ENTRY_READY)
	{
		li = local_find(e->image_id);
		if (li != NULL && RelationNeedsWAL(index) && pg_atomic_read_u32(&li->img->valid) &&
			image_same_index(li->img, tok))
		{
			e->state = ENTRY_REFRESHING;
			e->behind = false;	/* a write skipped from now on sets it again */
			e->builder_pid = MyProcPid;
			pending_slot = e - ctl->entries;
			pending_image_id = e->image_id;
			pending_refresh = true;
			refresh = true;
		}
		else
		{
			e->invalidations++;
			h = drop_segment(e);
			*rebuild = true;
		}
	}
	LWLockRelease(&ctl->lock);
	unpin_handles(&h, 1);
	if (!refresh)
		return NULL;

	image_refresh(index, li, info->vec_size);
	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = &ctl->entries[pending_slot];
	kept = e->image_id == pending_image_id && e->state == ENTRY_REFRESHING;
	if (kept)
	{
		e->state = ENTRY_READY;
		e->builder_pid = 0;
		e->refreshes++;
		kept = !e->behind;		/* a write skipped meanwhile: not yet */
	}
	pending_slot = -1;
	pending_refresh = false;
	LWLockRelease(&ctl->lock);
	return kept && image_current(li->img, tok) ? li : NULL;
}

/*
 * lookup_or_build: the usable image of the index for a scan that read
 * metapage state (lsn, gen), refreshing it if this backend can, and, when
 * there is none and build is set, starting a background build
 * (streamhnsw.shared_cache_background) or building it here. NULL with
 * *status otherwise.
 */
static LocalImage *
lookup_or_build(Relation index, const ShnswIndexInfo *info, const ShmToken *tok,
				bool build, int *status)
{
	LocalImage *li = lookup_image(index, tok, status, true);
	bool		rebuild = false;

	if (li != NULL || !build || IsInParallelMode())
		return li;
	if (*status == SHNSW_SHM_STALE)
	{
		li = refresh_or_drop(index, info, tok, &rebuild);
		if (li != NULL)
			*status = SHNSW_SHM_USED;
		if (!rebuild)
			return li;
	}
	else if (*status != SHNSW_SHM_MISSING)
		return NULL;

	if (shnsw_shared_cache_background &&
		request_build(index, status))
		return NULL;
	li = image_build(index, info, false, status);
	if (li != NULL && !image_current(li->img, tok))
	{
		*status = SHNSW_SHM_STALE;
		li = NULL;
	}
	return li;
}

/* Replace *ops by ops over image li (scan_begin, insert_begin). */
static void
shm_ops(LocalImage *li, const ShnswIndexInfo *info, ShnswNodeSource *ops,
		ShnswScanStats *stats, MemoryContext cxt)
{
	ShmScan    *ss;

	if (active_scans < INT_MAX)
		active_scans++;
	ss = MemoryContextAllocZero(cxt, sizeof(ShmScan));
	ss->li = li;
	ss->inner = *ops;
	ss->stats = stats;
	ss->slot_bits = info->slot_bits;
	ss->node_size = info->node_size;
	ss->code_off = (int) shnsw_node_code_offset(info->m);
	ss->m = info->m;
	ss->held_copy = MemoryContextAlloc(cxt, info->node_size);
	ops->ctx = ss;
	ops->read_nodes = shm_read_nodes;
	ops->read_nodes_held = shm_read_nodes_held;
	ops->read_upper = shm_read_upper;
	ops->prefetch = shm_prefetch;
	ops->speculative = false;	/* shm_prefetch ignores them */
	ops->reread_cheap = !shnsw_debug_keep_lists;
	ops->page_records = shm_page_records;
	ops->page_records_valid = shm_page_records_valid;
}

/*
 * shm_begin: ops over the index's image for a scan (which may build or
 * refresh one) or an insert's search (insert: only a current image).
 */
static void
shm_begin(Relation index, const ShnswIndexInfo *info, const ShnswMetaSnapshot *snap,
		  ShnswNodeSource *ops, ShnswScanStats *stats, MemoryContext cxt, bool insert)
{
	LocalImage *li;
	int			status;

	ShmToken	tok = snap_token(snap);

	stats->shared_graph = SHNSW_SHM_OFF;
	if (!shnsw_shared_cache || RelationUsesLocalBuffers(index) || (insert && IsInParallelMode()))
		return;
	/* no registry (none can be had, or an insert and none exists): buffers */
	if (insert ? !registry_exists() || try_get_ctl() == NULL : try_get_ctl() == NULL)
	{
		stats->shared_graph = insert ? SHNSW_SHM_MISSING : SHNSW_SHM_UNAVAILABLE;
		return;
	}
	li = insert ? lookup_image(index, &tok, &status, false) :
		lookup_or_build(index, info, &tok, true, &status);
	stats->shared_graph = status;
	if (li != NULL)
		shm_ops(li, info, ops, stats, cxt);
}

void
shnsw_shm_scan_begin(Relation index, const ShnswIndexInfo *info,
					 const ShnswMetaSnapshot *snap, ShnswNodeSource *ops,
					 ShnswScanStats *stats, MemoryContext cxt)
{
	shm_begin(index, info, snap, ops, stats, cxt, false);
}

void
shnsw_shm_insert_begin(Relation index, const ShnswIndexInfo *info,
					   const ShnswMetaSnapshot *snap, ShnswNodeSource *ops,
					   ShnswScanStats *stats, MemoryContext cxt)
{
	shm_begin(index, info, snap, ops, stats, cxt, true);
}

/* ---------- write-through ---------- */


static TrackedXlog *
tracked_find(GenericXLogState *state)
{
	for (int i = 0; i < lengthof(tracked); i++)
		if (tracked[i].state == state)
			return &tracked[i];
	return NULL;
}

/*
 * shnsw_xlog_direct makes this backend's changes of index relid (a build's
 * insert phase; InvalidOid ends it) go straight into the buffers under the
 * caller's exclusive locks, marked dirty at "finish", with no WAL record
 * and no page copy: the index is not visible to any other backend before
 * the build's transaction commits, the build WAL-logs every page once when
 * it is done (log_newpage_range), and an error aborts the build, dropping
 * the index, so a change left half made by an error is never seen. Such a
 * change cannot be abandoned (shnsw_xlog_abort raises an error): no caller
 * an insert runs does that. Nor is it written through: an image of the
 * same relfilenode (a TRUNCATE rebuilding in place) is of another build,
 * which the metapage's build nonce tells scans.
 */
void
shnsw_xlog_direct(Oid relid)
{
	direct_relid = relid;
}

/*
 * drop_image_of drops the index's image (or a build or refresh of it in
 * progress, which then does not finish): a change of it cannot be written
 * through. Takes and releases the registry lock; raises no error.
 */
static void
drop_image_of(Relation index)
{
	ShmEntry   *e;
	dsm_handle	h = DSM_HANDLE_INVALID;

	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = find_entry(index);
	if (e != NULL && e->state >= ENTRY_BUILDING && e->image_id != 0)
	{
		e->invalidations++;
		e->state = ENTRY_READY; /* a build or refresh must not finish */
		h = drop_segment(e);
	}
	LWLockRelease(&ctl->lock);
	unpin_handles(&h, 1);
}

/*
 * image_behind notes that a change of the index could not be copied into
 * its image (published since the change's pages were registered, so not
 * mapped here): a logged index's image is refreshed before its next use,
 * which recopies every page whose LSN differs from its copy's, this
 * change's included; an unlogged index's (no LSNs) is dropped. A build in
 * progress keeps the note and is refreshed once ready. Takes and releases
 * the registry lock; raises no error.
 */
static void
image_behind(Relation index)
{
	ShmEntry   *e;

	if (!RelationNeedsWAL(index))
	{
		drop_image_of(index);
		return;
	}
	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = find_entry(index);
	if (e != NULL && e->state >= ENTRY_BUILDING && e->image_id != 0)
		e->behind = true;
	LWLockRelease(&ctl->lock);
}

GenericXLogState *
shnsw_xlog_start(Relation relation)
{
	GenericXLogState *state;
	TrackedXlog *t;
	bool		direct = OidIsValid(direct_relid) &&
		RelationGetRelid(relation) == direct_relid;

	/* a direct change's state is only a distinct address to track it by */
	state = direct ? (GenericXLogState *) palloc(1) : GenericXLogStart(relation);

	/*
	 * A state an error abandoned (no finish or abort) may have had this
	 * address: forget it, so its buffers are never taken for this one's.
	 */
	while ((t = tracked_find(state)) != NULL)
		t->state = NULL;
	t = tracked_find(NULL);

	if (t == NULL)
	{
		/*
		 * More records open at once than tracked[] holds: this one cannot
		 * be written through, so the index's image goes now (before any of
		 * its pages changes; a build that starts later copies them after
		 * this record's locks are released). Never the case in this
		 * extension's code (one record at a time per index), but a state
		 * is never silently left untracked.
		 */
		if (!direct && !RelationUsesLocalBuffers(relation) && registry_exists())
		{
			get_ctl();
			drop_image_of(relation);
		}
		return state;
	}
	memset(t, 0, sizeof(*t));
	t->state = state;
	t->rel = relation;
	t->direct = direct;
	return state;
}

/*
 * write_prepare readies the write-through of the record t for the page the
 * caller just registered (exclusively locked): if the registry exists,
 * this backend attaches it and maps the index's image. Both may raise an
 * error (no memory to map it), which is harmless here: no page of the
 * record has changed yet. If the registry does not exist now, no image can
 * be published and copy this page before the caller's lock is released.
 */
static void
write_prepare(TrackedXlog *t)
{
	if (t->prepared || t->direct || RelationUsesLocalBuffers(t->rel))
		return;					/* once per record (write_through sees later images) */
	if (ctl == NULL && !marker_present())
		return;
	get_ctl();
	(void) local_map(t->rel, false);
	t->prepared = true;
}

Page
shnsw_xlog_register_buffer(GenericXLogState *state, Buffer buffer, int flags)
{
	TrackedXlog *t = tracked_find(state);

	if (t != NULL && t->direct)
	{
		/* as GenericXLogRegisterBuffer would, refuse a fifth page */
		for (int i = 0; i < t->nbuf; i++)
			if (t->bufs[i] == buffer)
				return BufferGetPage(buffer);
		if (t->nbuf >= MAX_GENERIC_XLOG_PAGES)
			elog(ERROR, "maximum number %d of generic xlog buffers is exceeded",
				 MAX_GENERIC_XLOG_PAGES);
	}
	if (t != NULL && t->nbuf < MAX_GENERIC_XLOG_PAGES)
	{
		write_prepare(t);
		t->bufs[t->nbuf++] = buffer;
		if (BufferGetBlockNumber(buffer) == SHNSW_METAPAGE_BLKNO)
		{
			Page		page = BufferGetPage(buffer);

			t->has_meta = true;
			t->meta_lsn = PageGetLSN(page);
			t->meta_gen = PageIsNew(page) ? 0 : ShnswPageGetMeta(page)->cache_generation;
		}
	}
	if (t != NULL && t->direct)
		return BufferGetPage(buffer);
	return GenericXLogRegisterBuffer(state, buffer, flags);
}

void
shnsw_xlog_abort(GenericXLogState *state)
{
	TrackedXlog *t = tracked_find(state);

	if (t != NULL && t->direct)
		elog(ERROR, "streamhnsw: a change written in place cannot be abandoned");
	GenericXLogAbort(state);
	if (t != NULL)
		t->state = NULL;
}

/*
 * write_through copies the pages of one finished record into the index's
 * image, if it has one. The caller still holds the exclusive lock of every
 * page, so a build copying the same page (under a share lock) comes wholly
 * before or after, and two writers of one page are serialized.
 *
 * The record's WAL is out: nothing here raises an error. The registry
 * and the image were attached and mapped when the pages were registered
 * (write_prepare); an image this backend has not mapped (published since)
 * is noted behind instead of mapped (image_behind), and a record prepared
 * with no registry has no image to write to.
 */
static void
write_through(TrackedXlog *t)
{
	ShmEntry   *e;
	LocalImage *li = NULL;
	bool		unmapped = false;
	int			vec_size;

	if (!t->prepared || ctl == NULL || pg_atomic_read_u32(&ctl->nimages) == 0)
		return;
	LWLockAcquire(&ctl->lock, LW_SHARED);
	e = find_entry(t->rel);
	if (e != NULL && e->state >= ENTRY_BUILDING && e->image_id != 0)
	{
		li = local_find(e->image_id);
		unmapped = li == NULL;
	}
	LWLockRelease(&ctl->lock);
	if (unmapped)
	{
		/* not mapped here, and mapping may fail: never mapped now */
		image_behind(t->rel);
		return;
	}
	if (li == NULL)
		return;

	vec_size = 0;				/* not checked on this path */
	for (int i = 0; i < t->nbuf; i++)
	{
		BlockNumber blk = BufferGetBlockNumber(t->bufs[i]);

		if (blk != SHNSW_METAPAGE_BLKNO)
			copy_page(li, blk, BufferGetPage(t->bufs[i]), vec_size, true);
	}
	if (t->has_meta)
	{
		ShmImage   *img = li->img;
		Page		page = NULL;

		for (int i = 0; i < t->nbuf; i++)
			if (BufferGetBlockNumber(t->bufs[i]) == SHNSW_METAPAGE_BLKNO)
				page = BufferGetPage(t->bufs[i]);

		/*
		 * Carry the metapage's new state over only if the image had the one
		 * before this change: the metapage is exclusively locked, so these
		 * updates are serialized; an image behind stays behind (and is
		 * refreshed by the next scan). A change of the build nonce or the
		 * truncation count makes the image another index's: it goes.
		 */
		if (page != NULL &&
			(ShnswPageGetMeta(page)->build_nonce != img->meta_nonce ||
			 ShnswPageGetMeta(page)->truncations != img->meta_trunc))
			pg_atomic_write_u32(&img->valid, 0);
		else if (page != NULL &&
				 pg_atomic_read_u64(&img->meta_lsn) == t->meta_lsn &&
				 pg_atomic_read_u64(&img->meta_gen) == t->meta_gen)
		{
			pg_atomic_write_u64(&img->meta_lsn, PageGetLSN(page));
			pg_atomic_write_u64(&img->meta_gen, ShnswPageGetMeta(page)->cache_generation);
		}
	}
}

XLogRecPtr
shnsw_xlog_finish(GenericXLogState *state)
{
	TrackedXlog *t = tracked_find(state);
	XLogRecPtr	lsn;

	if (t != NULL && t->direct)
	{
		/* the pages were changed in place (shnsw_xlog_direct) */
		for (int i = 0; i < t->nbuf; i++)
			MarkBufferDirty(t->bufs[i]);
		t->state = NULL;
		pfree(state);
		return InvalidXLogRecPtr;
	}
	lsn = GenericXLogFinish(state);
	if (t != NULL)
	{
		t->state = NULL;
		write_through(t);
	}
	return lsn;
}

/* ---------- GUCs ---------- */

/*
 * streamhnsw.shared_cache_size's -1 (the default) stands for half of
 * shared_buffers, and never less than SHNSW_CACHE_AUTO_MIN_MB: an image takes
 * about a third of its index's size (the exact vectors stay out of it), so
 * indexes that fit in shared_buffers get their images. Resolved when set, as
 * wal_buffers' -1 is, so that SHOW and a background build see the size in
 * force.
 */
#define SHNSW_CACHE_AUTO_MIN_MB 256

static bool
check_shared_cache_size(int *newval, void **extra, GucSource source)
{
	if (*newval == -1)
	{
		uint64		half_mb = (uint64) NBuffers * BLCKSZ / 2 / (1024 * 1024);

		*newval = (int) Min(Max(half_mb, SHNSW_CACHE_AUTO_MIN_MB), INT_MAX / 2);
	}
	return true;
}

void
shnsw_shm_init(void)
{
	DefineCustomBoolVariable("streamhnsw.shared_cache",
							 "Searches a shared in-memory image of each index's graph, built by the first scan that finds none.",
							 "Off: scans read every page through shared buffers (the image, if any, is still kept up to date).",
							 &shnsw_shared_cache, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamhnsw.shared_cache_size",
							"Total dynamic shared memory the shared graph images may use.",
							"-1 (the default): half of shared_buffers, at least 256MB. An image takes about (24 + 8 m + dims) bytes per node plus 1/8 for growth; least recently used images are evicted to make room.",
							&shnsw_shared_cache_size, -1, -1, INT_MAX / 2,
							PGC_SUSET, GUC_UNIT_MB, check_shared_cache_size, NULL, NULL);
	DefineCustomBoolVariable("streamhnsw.shared_cache_background",
							 "Builds a missing shared graph image in a background worker instead of in the scan that finds none.",
							 "On: that scan, and every other until the image is ready, searches through shared buffers; if no worker can be started, the scan builds the image itself.",
							 &shnsw_shared_cache_background, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamhnsw.debug_image_build_delay",
							"Developer setting for tests: a background image build waits this long before reading the index.",
							"It holds the index's lock meanwhile, as a long build would, and gives up when a VACUUM truncation waits for the lock.",
							&shnsw_debug_image_build_delay, 0, 0, 60000,
							PGC_SUSET, GUC_UNIT_MS | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("streamhnsw.debug_dsm_fail",
							 "Developer setting for tests: the shared graph cache's and the statistics' dynamic shared memory cannot be had, as with a full /dev/shm.",
							 "Attaching or creating the registry and mapping an image fail where a scan would try them, so that the fallbacks can be tested where no small /dev/shm can be mounted.",
							 &shnsw_debug_dsm_fail, false,
							 PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);
}

/* ---------- SQL ---------- */

/*
 * open_cache_index opens (AccessShareLock) a streamhnsw index the caller
 * may load or drop the image of: SELECT on the index, as pg_prewarm asks
 * (its owner, or a superuser: an index has no grants of its own). The kind
 * and the privilege are checked in the catalog first, so no lock is ever
 * queued on a relation the caller has no rights on (as verify.c does).
 */
static Relation
open_cache_index(Oid indexoid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(indexoid));
	Form_pg_class cls;
	Relation	index;

	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", indexoid)));
	cls = (Form_pg_class) GETSTRUCT(tup);
	if (cls->relkind != RELKIND_INDEX ||
		cls->relam != get_index_am_oid("streamhnsw", false))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a streamhnsw index", NameStr(cls->relname))));
	if (pg_class_aclcheck(indexoid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_INDEX, NameStr(cls->relname));
	ReleaseSysCache(tup);

	index = relation_open(indexoid, AccessShareLock);
	/* the OID named another relation by the time the lock was granted */
	if (index->rd_rel->relkind != RELKIND_INDEX ||
		index->rd_rel->relam != get_index_am_oid("streamhnsw", false))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a streamhnsw index", RelationGetRelationName(index))));
	return index;
}

/*
 * evict_rights_collect fills r with the owners of ready images whose
 * privileges the current user has (a superuser: NULL, any). Reads the
 * registry under its lock, then the catalog with no lock held.
 */
static const EvictRights *
evict_rights_collect(EvictRights *r)
{
	Oid			seen[SHM_MAX_IMAGES];
	int			nseen = 0;

	if (superuser())
		return NULL;
	LWLockAcquire(&ctl->lock, LW_SHARED);
	for (int i = 0; i < SHM_MAX_IMAGES; i++)
	{
		ShmEntry   *e = &ctl->entries[i];
		bool		dup = false;

		if (e->state != ENTRY_READY)
			continue;
		for (int k = 0; k < nseen && !dup; k++)
			dup = seen[k] == e->owner;
		if (!dup)
			seen[nseen++] = e->owner;
	}
	LWLockRelease(&ctl->lock);
	r->n = 0;
	for (int k = 0; k < nseen; k++)
		if (has_privs_of_role(GetUserId(), seen[k]))
			r->owners[r->n++] = seen[k];
	return r;
}

PG_FUNCTION_INFO_V1(streamhnsw_cache_load);

/*
 * streamhnsw_cache_load(index) builds (or brings up to date) the index's
 * image now and returns its size in bytes; NULL, with a NOTICE saying why,
 * if it cannot have one.
 */
Datum
streamhnsw_cache_load(PG_FUNCTION_ARGS)
{
	Relation	index = open_cache_index(PG_GETARG_OID(0));
	ShnswIndexInfo *info;
	ShnswMetaSnapshot snap;
	LocalImage *li = NULL;
	int			status = SHNSW_SHM_UNAVAILABLE;
	Datum		result = (Datum) 0;

	EvictRights rights;

	registry_failed_at = 0;		/* on request: try again now */
	shnsw_read_meta(index, &snap);
	info = shnsw_get_index_info(index);
	evict_refused = false;
	if (RelationUsesLocalBuffers(index) || try_get_ctl() == NULL)
		status = SHNSW_SHM_UNAVAILABLE;
	else if (!info->quant_trained)
		status = SHNSW_SHM_MISSING;
	else
	{
		ShmToken	tok = snap_token(&snap);

		sweep_dropped();
		li = lookup_or_build(index, info, &tok, false, &status);
		if (li == NULL && status == SHNSW_SHM_STALE)
			li = lookup_or_build(index, info, &tok, true, &status);
		if (li == NULL && status != SHNSW_SHM_BUILDING)
		{
			/* only images of indexes the caller could drop may make room */
			evict_rights = evict_rights_collect(&rights);
			PG_TRY();
			{
				li = image_build(index, info, true, &status);
			}
			PG_FINALLY();
			{
				evict_rights = NULL;
			}
			PG_END_TRY();
		}
	}
	if (li != NULL)
		result = Int64GetDatum((int64) li->img->total);
	else if (evict_refused && (status == SHNSW_SHM_FULL || status == SHNSW_SHM_UNAVAILABLE))
		ereport(NOTICE,
				(errmsg("index \"%s\" has no shared graph image: %s",
						RelationGetRelationName(index), shnsw_shm_status_name(status)),
				 errdetail("Making room would evict images of other roles' indexes that are in use."),
				 errhint("Only their owners or a superuser may evict them; or raise streamhnsw.shared_cache_size.")));
	else
		ereport(NOTICE,
				(errmsg("index \"%s\" has no shared graph image: %s",
						RelationGetRelationName(index), shnsw_shm_status_name(status))));
	relation_close(index, AccessShareLock);
	if (li == NULL)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

PG_FUNCTION_INFO_V1(streamhnsw_cache_drop);

/*
 * streamhnsw_cache_drop(index) drops the index's image; true if it had one.
 */
Datum
streamhnsw_cache_drop(PG_FUNCTION_ARGS)
{
	Relation	index = open_cache_index(PG_GETARG_OID(0));
	ShmEntry   *e;
	dsm_handle	h = DSM_HANDLE_INVALID;
	bool		dropped = false;

	if (!registry_exists())
	{
		/* no registry, no image: none is created to say so */
		relation_close(index, AccessShareLock);
		PG_RETURN_BOOL(false);
	}
	get_ctl();
	LWLockAcquire(&ctl->lock, LW_EXCLUSIVE);
	e = find_entry(index);
	if (e != NULL && e->state == ENTRY_READY)
	{
		h = drop_segment(e);
		e->invalidations++;
		dropped = true;
	}
	LWLockRelease(&ctl->lock);
	unpin_handles(&h, 1);
	relation_close(index, AccessShareLock);
	PG_RETURN_BOOL(dropped);
}

PG_FUNCTION_INFO_V1(streamhnsw_cache_list);

/*
 * cache_list_visible: whether the current user may see the entry of index
 * relid of this database (SELECT on its table, or owning the index).
 * Reads the catalog; no registry lock may be held.
 */
static bool
cache_list_visible(Oid relid)
{
	Oid			heapoid = IndexGetRelation(relid, true);

	if (!OidIsValid(heapoid))
		return false;			/* dropped meanwhile */
	return pg_class_aclcheck(heapoid, GetUserId(), ACL_SELECT) == ACLCHECK_OK ||
		object_ownercheck(RelationRelationId, relid, GetUserId());
}

/*
 * streamhnsw_cache_list() returns one row per index the cache knows: its
 * state, the size of its image and the counters. Superusers and members
 * of pg_monitor or pg_read_all_stats see every database's; other roles
 * only this database's indexes on tables they may SELECT from (or indexes
 * they own). The registry is copied under its lock and filtered after,
 * since the privilege checks read the catalog.
 */
Datum
streamhnsw_cache_list(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	static const char *const states[] = {"", "none", "building", "ready", "refreshing"};
	bool		all = has_privs_of_role(GetUserId(), ROLE_PG_MONITOR) ||
		has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	Datum	   (*rows)[15] = palloc(sizeof(Datum[15]) * SHM_MAX_IMAGES);
	Oid			relids[SHM_MAX_IMAGES];
	uint8		state[SHM_MAX_IMAGES];
	int			nrows = 0;

	InitMaterializedSRF(fcinfo, 0);
	if (!registry_exists())
		return (Datum) 0;		/* no registry, no images */
	get_ctl();
	sweep_dropped();
	LWLockAcquire(&ctl->lock, LW_SHARED);
	for (int i = 0; i < SHM_MAX_IMAGES; i++)
	{
		ShmEntry   *e = &ctl->entries[i];
		Datum	   *values = rows[nrows];
		int			n = 0;

		if (e->state == ENTRY_FREE || (!all && e->dbid != MyDatabaseId))
			continue;
		relids[nrows] = e->relid;
		state[nrows++] = e->state;
		values[n++] = ObjectIdGetDatum(e->relid);
		values[n++] = ObjectIdGetDatum(e->dbid);
		values[n++] = (Datum) 0;	/* state: text made with no lock held */
		values[n++] = Int64GetDatum((int64) e->bytes);
		values[n++] = Int64GetDatum((int64) e->nodes);
		values[n++] = Int64GetDatum((int64) e->gpages);
		values[n++] = Int64GetDatum((int64) e->upages);
		values[n++] = Int64GetDatum((int64) pg_atomic_read_u64(&e->hits));
		values[n++] = Int64GetDatum((int64) pg_atomic_read_u64(&e->misses));
		values[n++] = Int64GetDatum((int64) e->builds);
		values[n++] = Int64GetDatum((int64) e->invalidations);
		values[n++] = Int64GetDatum((int64) e->refreshes);
		values[n++] = Int64GetDatum((int64) e->evictions);
		values[n++] = Int64GetDatum((int64) pg_atomic_read_u64(&e->insert_searches));
		values[n++] = TimestampTzGetDatum((TimestampTz) pg_atomic_read_u64(&e->last_used));
	}
	LWLockRelease(&ctl->lock);

	for (int r = 0; r < nrows; r++)
	{
		bool		nulls[15] = {0};

		if (!all && !cache_list_visible(relids[r]))
			continue;
		rows[r][2] = CStringGetTextDatum(states[state[r]]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, rows[r], nulls);
	}
	pfree(rows);
	return (Datum) 0;
}
