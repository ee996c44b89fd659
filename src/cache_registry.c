/*-------------------------------------------------------------------------
 *
 * cache_registry.c
 *	  The shared cache's registry: its table in a named DSM segment, the
 *	  memory budget and least-recently-used eviction, each backend's
 *	  mappings of cached copies, the transaction and exit callbacks that
 *	  give up unfinished claims, the marker file that tells writers whether
 *	  a registry exists, and the settings.
 *
 * Writers attach the registry only if it exists (the marker says so), and
 * never raise an error after their WAL record is out; scans attach it and
 * map copies in subtransactions (shnsw_dsm_try), falling back to buffers
 * when dynamic shared memory cannot be had. The layout of the table and of
 * a copy is in cache_int.h; the protocol in src/README, "Shared cache".
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/dsm_impl.h"
#include "storage/dsm_registry.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "cache.h"
#include "cache_int.h"

bool		shnsw_shared_cache = true;
bool		shnsw_shared_cache_background = true;
int			shnsw_shared_cache_size = -1;	/* MB; -1 until resolved (below) */
int			shnsw_debug_cache_build_delay = 0;	/* ms */
bool		shnsw_debug_dsm_fail = false;

/*
 * The registry's name carries its layout's version, and its size
 * (registry_name): a library with another layout (an upgrade installed
 * without a restart) gets its own registry instead of an error from
 * GetNamedDSMSegment for a size that differs. Bump the version when the
 * layout changes (8: dropped copies past the table pooled, the warmer
 * started by a build request); the size in the name catches a change that
 * forgot to.
 */
#define CACHE_REGISTRY_NAME	"streamhnsw_cache_8"

CacheCtl   *cache_ctl = NULL;
bool		cache_preloaded = false;
int			cache_active_scans = 0;
const EvictRights *cache_evict_rights = NULL;
bool		cache_evict_none = false;
bool		cache_evict_refused = false;
int			cache_pending_slot = -1;
uint64		cache_pending_copy_id = 0;
bool		cache_pending_refresh = false;

/* when this backend last failed to attach the registry (cache_try_get_ctl) */
TimestampTz cache_registry_failed_at = 0;
static bool registry_failure_logged = false;

/* the message of the last error shnsw_dsm_try caught, for the log */
char		cache_dsm_error[256] = "";

/*
 * The default size before /dev/shm capped it (MB; 0: not capped), and
 * /dev/shm's size then (MB): set by the size's assign hook, for the log.
 */
static int	size_capped_from = 0;
static int	size_shm_mb = 0;

/* this backend's mappings of copies */
static LocalCopy local_copies[CACHE_MAX_ENTRIES * 2];
static int	nlocal = 0;
static uint64 local_epoch = 0;		/* cache_ctl->epoch when last swept */
static bool callbacks_registered = false;

/* ---------- registry ---------- */

static void
ctl_init(void *ptr)
{
	CacheCtl	   *c = (CacheCtl *) ptr;

	memset(c, 0, sizeof(CacheCtl));
	c->tranche = LWLockNewTrancheId();
	LWLockInitialize(&c->lock, c->tranche);
	pg_atomic_init_u32(&c->ncopies, 0);
	pg_atomic_init_u32(&c->size_logged, 0);
	c->next_copy_id = 1;
	c->warm_pending = !cache_preloaded;
	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
	{
		pg_atomic_init_u64(&c->entries[i].last_used, 0);
		pg_atomic_init_u64(&c->entries[i].hits, 0);
		pg_atomic_init_u64(&c->entries[i].misses, 0);
		pg_atomic_init_u64(&c->entries[i].insert_searches, 0);
		pg_atomic_init_u64(&c->entries[i].cut_until, 0);
	}
}

/* whether a request may evict the copy of e (cache_evict_rights) */
static bool
may_evict(const CacheEntry *e)
{
	if (cache_evict_rights == NULL)
		return true;
	for (int i = 0; i < cache_evict_rights->n; i++)
		if (cache_evict_rights->owners[i] == e->owner)
			return true;
	cache_evict_refused = true;
	return false;
}

static void
cache_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
	{
		/* no scan outlives its transaction */
		cache_active_scans = 0;
		if (cache_pending_slot >= 0)
			cache_release_pending();
		/* nor can one use a dropped copy now: give its memory back */
		if (cache_ctl != NULL && event != XACT_EVENT_PREPARE &&
			event != XACT_EVENT_PARALLEL_COMMIT && event != XACT_EVENT_PARALLEL_ABORT)
			cache_local_sweep();
	}
}

static void
cache_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					 SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && cache_pending_slot >= 0)
		cache_release_pending();
}

static void
cache_exit_callback(int code, Datum arg)
{
	if (cache_ctl == NULL)
		return;
	LWLockReleaseAll();
	if (cache_pending_slot >= 0)
		cache_release_pending();
	/* the mappings go with the process: no longer count them */
	for (int i = 0; i < nlocal; i++)
		cache_mapper_done(local_copies[i].copy_id);
	nlocal = 0;
}

/*
 * The registry's marker: a file in the data directory's pg_stat_tmp (which
 * base backups skip) holding the postmaster's start time, written by every
 * backend that attaches the registry before it returns it, so before any
 * copy can be published. A writer that has not attached the registry
 * looks for the marker instead (cache_registry_exists): no marker of this
 * server's life, no registry, so no copy, and the write needs neither
 * (src/README, "Shared cache", Writers). A stale marker (a crash
 * restart keeps the postmaster's start time) only makes writers attach,
 * as every writer did before.
 */
#define CACHE_MARKER_PATH		PG_STAT_TMP_DIR "/streamhnsw.registry"

static bool marker_written = false;

/* Whether the marker says this server has a registry. */
bool
cache_marker_present(void)
{
	TimestampTz t = 0;
	int			fd = OpenTransientFile(CACHE_MARKER_PATH, O_RDONLY | PG_BINARY);
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
	if (cache_marker_present())
	{
		marker_written = true;
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.%d", CACHE_MARKER_PATH, MyProcPid);
	fd = OpenTransientFile(tmp, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", tmp)));
	ok = write(fd, &PgStartTime, sizeof(PgStartTime)) == sizeof(PgStartTime);
	CloseTransientFile(fd);
	if (!ok || rename(tmp, CACHE_MARKER_PATH) != 0)
	{
		(void) unlink(tmp);
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", CACHE_MARKER_PATH)));
	}
	marker_written = true;
}

/* Whether the registry exists: attached here, or named by the marker. */
bool
cache_registry_exists(void)
{
	return cache_ctl != NULL || cache_marker_present();
}

/*
 * cache_get_ctl attaches to (creating if needed) the registry segment, and makes
 * sure the marker names it. Like the statistics segment, it is a few
 * kilobytes created once per server. Raises an error if dynamic shared
 * memory cannot provide it: callers at a point where that must be a
 * fallback use cache_try_get_ctl.
 */
CacheCtl *
cache_get_ctl(void)
{
	if (cache_ctl == NULL)
	{
		bool		found;
		CacheCtl	   *c;
		char		name[NAMEDATALEN];

		snprintf(name, sizeof(name), "%s_%zu", CACHE_REGISTRY_NAME, sizeof(CacheCtl));
		c = GetNamedDSMSegment(name, sizeof(CacheCtl), ctl_init, &found);
		marker_write();
		LWLockRegisterTranche(c->tranche, "streamhnsw_cache");
		local_epoch = c->epoch;
		cache_ctl = c;
		/* once per server: the default size is less than it would be */
		if (size_capped_from > 0 && pg_atomic_exchange_u32(&c->size_logged, 1) == 0)
			ereport(LOG,
					(errmsg("streamhnsw: the shared cache's default size is %d MB, capped from %d MB by the size of /dev/shm (%d MB)",
							shnsw_shared_cache_size, size_capped_from, size_shm_mb),
					 errdetail("With dynamic_shared_memory_type = posix the cached copies live in /dev/shm; half of it is left to parallel queries and other users."),
					 errhint("Give the server a larger /dev/shm (docker run --shm-size, a Kubernetes memory emptyDir), or set streamhnsw.shared_cache_size or min_dynamic_shared_memory.")));
	}
	if (!callbacks_registered)
	{
		RegisterXactCallback(cache_xact_callback, NULL);
		RegisterSubXactCallback(cache_subxact_callback, NULL);
		before_shmem_exit(cache_exit_callback, 0);
		callbacks_registered = true;
	}
	return cache_ctl;
}

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
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		strlcpy(cache_dsm_error, edata->message ? edata->message : "", sizeof(cache_dsm_error));
		FreeErrorData(edata);
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_END_TRY();
	return ok;
}

/* shnsw_dsm_try's work for cache_try_get_ctl: attach or create the registry */
static void
dsm_get_ctl(void *arg)
{
	(void) cache_get_ctl();
}

/*
 * cache_try_get_ctl is cache_get_ctl for scans: an error attaching or creating the
 * registry (no space in /dev/shm, no DSM slot) is caught in a
 * subtransaction and returns NULL, and the attempt is not repeated for
 * CACHE_RETRY_SECS. No buffer or LWLock may be held (a subtransaction's
 * abort releases every LWLock). In parallel mode, where no subtransaction
 * can start, only an existing registry is attached.
 */
CacheCtl *
cache_try_get_ctl(void)
{
	if (cache_ctl != NULL)
		return cache_ctl;
	if (cache_registry_failed_at != 0 &&
		!TimestampDifferenceExceeds(cache_registry_failed_at, GetCurrentTimestamp(),
									CACHE_RETRY_SECS * 1000))
		return NULL;
	if (IsInParallelMode() || !IsTransactionState())
		return cache_marker_present() ? cache_get_ctl() : NULL;
	if (!shnsw_dsm_try(dsm_get_ctl, NULL))
	{
		cache_registry_failed_at = GetCurrentTimestamp();
		if (!registry_failure_logged)
			ereport(LOG,
					(errmsg("streamhnsw: no shared cache in this session: its registry could not be attached: %s",
							cache_dsm_error),
					 errdetail("Scans read every page through shared buffers.")));
		registry_failure_logged = true;
		return NULL;
	}
	return cache_ctl;
}

/*
 * Find the entry of an index (never a successor being built); the caller
 * holds cache_ctl->lock.
 */
CacheEntry *
cache_find_entry(Relation index)
{
	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
	{
		CacheEntry   *e = &cache_ctl->entries[i];

		if (e->state != ENTRY_FREE && !e->successor && e->relid == RelationGetRelid(index) &&
			e->dbid == MyDatabaseId &&
			RelFileLocatorEquals(e->locator, index->rd_locator))
			return e;
	}
	return NULL;
}

/*
 * cache_drop_segment takes an entry's segment away (caller holds cache_ctl->lock
 * exclusively); the caller unpins the returned handle after releasing it.
 */
dsm_handle
cache_drop_segment(CacheEntry *e)
{
	dsm_handle	h = e->handle;

	Assert(e->state == ENTRY_READY || e->state == ENTRY_BUILDING ||
		   e->state == ENTRY_REFRESHING);
	if (e->mappers > 0)
	{
		CacheDropped *d = NULL;

		for (int i = 0; i < CACHE_MAX_DROPPED && d == NULL; i++)
			if (cache_ctl->dropped[i].copy_id == 0)
				d = &cache_ctl->dropped[i];
		if (d != NULL)
		{
			d->copy_id = e->copy_id;
			d->dbid = e->dbid;
			d->relid = e->relid;
			d->bytes = e->bytes;
			d->mappers = e->mappers;
			cache_ctl->dropped_bytes += e->bytes;
		}
		else
		{
			/* no slot: pooled with the other overflowed copies */
			cache_ctl->overflow_bytes += e->bytes;
			cache_ctl->overflow_mappers += e->mappers;
			cache_ctl->dropped_bytes += e->bytes;
		}
	}
	e->mappers = 0;
	cache_ctl->total_bytes -= e->bytes;
	e->bytes = 0;
	e->handle = DSM_HANDLE_INVALID;
	e->copy_id = 0;
	e->behind = false;
	e->state = e->successor ? ENTRY_FREE : ENTRY_EMPTY;
	pg_atomic_fetch_sub_u32(&cache_ctl->ncopies, 1);
	cache_ctl->epoch++;
	return h;
}

void
cache_unpin(dsm_handle *h, int n)
{
	for (int i = 0; i < n; i++)
		if (h[i] != DSM_HANDLE_INVALID)
			dsm_unpin_segment(h[i]);
}

/*
 * Mapper counts: every backend that maps a copy counts itself in its entry
 * (carried into dropped[] when the copy is dropped) until it detaches, so
 * the budget sees what is still in dynamic shared memory, not only what
 * is registered. Caller holds cache_ctl->lock exclusively.
 */
static bool
mapper_add_locked(uint64 copy_id)
{
	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
	{
		CacheEntry *e = &cache_ctl->entries[i];

		if (e->state >= ENTRY_BUILDING && e->copy_id == copy_id)
		{
			e->mappers++;
			return true;
		}
	}
	for (int i = 0; i < CACHE_MAX_DROPPED; i++)
		if (cache_ctl->dropped[i].copy_id == copy_id)
		{
			cache_ctl->dropped[i].mappers++;
			return true;
		}
	return false;
}

static void
mapper_done_locked(uint64 copy_id)
{
	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
	{
		CacheEntry *e = &cache_ctl->entries[i];

		if (e->state >= ENTRY_BUILDING && e->copy_id == copy_id)
		{
			if (e->mappers > 0)
				e->mappers--;
			return;
		}
	}
	for (int i = 0; i < CACHE_MAX_DROPPED; i++)
	{
		CacheDropped *d = &cache_ctl->dropped[i];

		if (d->copy_id == copy_id)
		{
			if (--d->mappers <= 0)
			{
				/* the last mapping is gone, and the segment with it */
				cache_ctl->dropped_bytes -= d->bytes;
				memset(d, 0, sizeof(*d));
			}
			return;
		}
	}
	/* every mapping is counted: one of the overflowed copies' */
	Assert(cache_ctl->overflow_mappers > 0);
	if (cache_ctl->overflow_mappers > 0 && --cache_ctl->overflow_mappers == 0)
	{
		cache_ctl->dropped_bytes -= cache_ctl->overflow_bytes;
		cache_ctl->overflow_bytes = 0;
	}
}

/* This backend no longer maps copy copy_id (or is about to not). */
void
cache_mapper_done(uint64 copy_id)
{
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	mapper_done_locked(copy_id);
	LWLockRelease(&cache_ctl->lock);
}

/* Pointers into a mapped copy. */
static void
local_fill(LocalCopy *li, dsm_segment *seg)
{
	char	   *base = dsm_segment_address(seg);
	CacheCopy   *cp = (CacheCopy *) base;

	li->seg = seg;
	li->cp = cp;
	li->copy_id = cp->copy_id;
	li->map = (pg_atomic_uint32 *) (base + cp->map_off);
	li->gdesc = (CachePageDesc *) (base + cp->gdesc_off);
	li->udesc = (CachePageDesc *) (base + cp->udesc_off);
	li->recpos = (uint32 *) (base + cp->recpos_off);
	li->gdata = base + cp->gdata_off;
	li->udata = base + cp->udata_off;
}

/* This backend's mapping of copy copy_id, or NULL. */
LocalCopy *
cache_local_find(uint64 copy_id)
{
	for (int i = 0; i < nlocal; i++)
		if (local_copies[i].copy_id == copy_id)
			return &local_copies[i];
	return NULL;
}

/*
 * cache_local_add records this backend's mapping of segment seg (one it
 * has just created and laid out, or attached and checked).
 */
LocalCopy *
cache_local_add(dsm_segment *seg)
{
	LocalCopy  *li;

	Assert(nlocal < lengthof(local_copies));
	li = &local_copies[nlocal++];
	local_fill(li, seg);
	return li;
}

/* what shnsw_dsm_try's segment work is given and gives back */
typedef struct DsmAttempt
{
	dsm_handle	handle;			/* to attach */
	Size		size;			/* to create */
	dsm_segment *seg;			/* the segment, NULL if there is none */
} DsmAttempt;

/*
 * shnsw_dsm_try's work for cache_map_segment: attach the segment and pin its
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

/* shnsw_dsm_try's work for cache_create_segment: create it, pinned */
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
 * cache_create_segment creates and pins a segment of size bytes, or returns
 * NULL if dynamic shared memory cannot provide it (no slot, no space in
 * /dev/shm, ...). The attempt runs in a subtransaction so that a failure is
 * a fallback, not an error.
 */
dsm_segment *
cache_create_segment(Size size)
{
	DsmAttempt	at = {0};

	if (IsInParallelMode())
		return NULL;
	at.size = size;
	return shnsw_dsm_try(dsm_create_pinned, &at) ? at.seg : NULL;
}

/*
 * cache_map_segment maps segment h, expected to hold copy copy_id, and keeps
 * the mapping; NULL if it is gone, is another segment now, or (safe)
 * cannot be mapped: safe catches the error in a subtransaction (no buffer
 * or LWLock may be held then); otherwise it is raised, and the caller must
 * be at a point where an error changes nothing. No registry lock is held:
 * the segment may be dropped meanwhile, which the copy_id check sees
 * (a handle may be reused once its segment is gone).
 */
LocalCopy *
cache_map_segment(dsm_handle h, uint64 copy_id, bool safe)
{
	DsmAttempt	at = {0};
	dsm_segment *seg = NULL;
	bool		counted;

	if (nlocal == lengthof(local_copies))
		return NULL;			/* the caller treats the copy as unusable */
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
	if (dsm_segment_map_length(seg) < sizeof(CacheCopy) ||
		((CacheCopy *) dsm_segment_address(seg))->copy_id != copy_id ||
		cache_local_find(copy_id) != NULL)
	{
		dsm_detach(seg);
		return NULL;
	}
	/* counted, or (dropped and let go by all meanwhile) not kept */
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	counted = mapper_add_locked(copy_id);
	LWLockRelease(&cache_ctl->lock);
	if (!counted)
	{
		dsm_detach(seg);
		return NULL;
	}
	return cache_local_add(seg);
}

/*
 * cache_local_map returns this backend's mapping of the index's copy if the
 * registry names one (ready, or being built or refreshed), mapping it if
 * needed (cache_map_segment: safe or raising); NULL if there is none or it cannot
 * be mapped. Takes and releases the registry lock; holds it while mapping
 * never.
 */
LocalCopy *
cache_local_map(Relation index, bool safe)
{
	CacheEntry   *e;
	dsm_handle	h = DSM_HANDLE_INVALID;
	uint64		id = 0;
	LocalCopy *li = NULL;

	if (pg_atomic_read_u32(&cache_ctl->ncopies) == 0)
		return NULL;
	LWLockAcquire(&cache_ctl->lock, LW_SHARED);
	e = cache_find_entry(index);
	if (e != NULL && e->state >= ENTRY_BUILDING && e->copy_id != 0)
	{
		id = e->copy_id;
		h = e->handle;
		li = cache_local_find(id);
	}
	LWLockRelease(&cache_ctl->lock);
	if (li != NULL || id == 0)
		return li;
	return cache_map_segment(h, id, safe);
}

/*
 * cache_local_sweep detaches the copies that were dropped since this backend
 * last looked, when no scan of this backend can be using them: at a scan's
 * lookup and at the end of each transaction.
 */
void
cache_local_sweep(void)
{
	uint64		epoch;
	int			keep = 0;
	dsm_segment *gone[lengthof(local_copies)];
	int			ngone = 0;

	if (cache_active_scans > 0 || cache_ctl->epoch == local_epoch)
		return;
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	epoch = cache_ctl->epoch;
	for (int i = 0; i < nlocal; i++)
	{
		bool		live = false;

		for (int j = 0; j < CACHE_MAX_ENTRIES && !live; j++)
			live = cache_ctl->entries[j].state >= ENTRY_BUILDING &&
				cache_ctl->entries[j].copy_id == local_copies[i].copy_id;
		if (live)
			local_copies[keep++] = local_copies[i];
		else
		{
			/* uncounted first: the detach below cannot fail to happen */
			mapper_done_locked(local_copies[i].copy_id);
			gone[ngone++] = local_copies[i].seg;
		}
	}
	nlocal = keep;
	LWLockRelease(&cache_ctl->lock);
	for (int i = 0; i < ngone; i++)
		dsm_detach(gone[i]);
	local_epoch = epoch;
}


/*
 * lru_copy: the least recently used ready copy other than self's that may
 * go: one idle for CACHE_IDLE_SECS, or (in_use_too) one in use that the
 * request may evict (cache_evict_rights). NULL if none. Caller holds
 * cache_ctl->lock.
 */
static CacheEntry *
lru_copy(const CacheEntry *self, bool in_use_too)
{
	TimestampTz now = GetCurrentTimestamp();
	CacheEntry *victim = NULL;

	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
	{
		CacheEntry *e = &cache_ctl->entries[i];
		bool		idle;

		if (e == self || e->state != ENTRY_READY)
			continue;
		idle = TimestampDifferenceExceeds((TimestampTz) pg_atomic_read_u64(&e->last_used),
										  now, CACHE_IDLE_SECS * 1000);
		/* a copy in use goes on request only if the caller may evict it */
		if (!idle && (!in_use_too || !may_evict(e)))
			continue;
		if (victim == NULL ||
			pg_atomic_read_u64(&e->last_used) < pg_atomic_read_u64(&victim->last_used))
			victim = e;
	}
	return victim;
}

/*
 * Evict until `need` more bytes fit: least recently used first, copies
 * idle for CACHE_IDLE_SECS only if idle_only, else also copies in use that
 * the request may evict (cache_evict_rights). Caller holds cache_ctl->lock exclusively.
 */
bool
cache_make_room(Size need, CacheEntry *self, bool idle_only, dsm_handle *unpin, int *nunpin)
{
	Size		budget = cache_budget();

	/* dropped copies still mapped count: their memory is not back yet */
	while (cache_ctl->total_bytes + cache_ctl->dropped_bytes + need > budget)
	{
		/* the warmer's builds never evict (cache_evict_none) */
		CacheEntry *victim = cache_evict_none ? NULL : lru_copy(self, !idle_only);

		if (victim == NULL)
			return false;
		victim->evictions++;
		unpin[(*nunpin)++] = cache_drop_segment(victim);
	}
	return true;
}

/* Give up a claim (build or refresh) this backend holds. */
void
cache_release_pending(void)
{
	CacheEntry   *e;
	dsm_handle	h = DSM_HANDLE_INVALID;

	if (cache_pending_slot < 0 || cache_ctl == NULL)
		return;
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = &cache_ctl->entries[cache_pending_slot];
	if (e->builder_pid == MyProcPid)
	{
		if (cache_pending_refresh && e->state == ENTRY_REFRESHING)
			e->state = ENTRY_READY; /* still behind: the next scan refreshes */
		else if (e->state == ENTRY_BUILDING && e->copy_id != 0)
			h = cache_drop_segment(e);
		else if (e->state == ENTRY_BUILDING)
		{
			/* claimed, no segment yet (perhaps its bytes reserved) */
			cache_ctl->total_bytes -= e->bytes;
			e->bytes = 0;
			e->state = e->successor ? ENTRY_FREE : ENTRY_EMPTY;
		}
		e->builder_pid = 0;
	}
	LWLockRelease(&cache_ctl->lock);
	cache_pending_slot = -1;
	cache_pending_copy_id = 0;
	cache_pending_refresh = false;
	cache_unpin(&h, 1);
}


/*
 * cache_entry_new finds a table slot for an index the registry does not know:
 * entries of the index's older relfilenodes are dropped (unreachable), then
 * a free slot, then the least recently used one without a copy, then
 * (the table full of copies) the least recently used copy idle long
 * enough, or any if explicit. Caller holds cache_ctl->lock exclusively; segments
 * to unpin after releasing it are added to unpin. NULL if none.
 */
CacheEntry *
cache_entry_new(Relation index, bool explicit, dsm_handle *unpin, int *nunpin)
{
	CacheEntry   *e = NULL;
	CacheEntry   *lru = NULL;

	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
	{
		CacheEntry   *o = &cache_ctl->entries[i];

		if (o->state != ENTRY_FREE && o->dbid == MyDatabaseId &&
			o->relid == RelationGetRelid(index) &&
			!RelFileLocatorEquals(o->locator, index->rd_locator))
		{
			if (o->state >= ENTRY_BUILDING)
			{
				if (o->state != ENTRY_READY)
					continue;
				unpin[(*nunpin)++] = cache_drop_segment(o);
			}
			o->state = ENTRY_FREE;
		}
	}
	for (int i = 0; i < CACHE_MAX_ENTRIES && e == NULL; i++)
		if (cache_ctl->entries[i].state == ENTRY_FREE)
			e = &cache_ctl->entries[i];
	for (int i = 0; i < CACHE_MAX_ENTRIES && e == NULL; i++)
	{
		CacheEntry   *o = &cache_ctl->entries[i];

		if (o->state == ENTRY_EMPTY &&
			(lru == NULL || pg_atomic_read_u64(&o->last_used) < pg_atomic_read_u64(&lru->last_used)))
			lru = o;
	}
	if (e == NULL)
		e = lru;
	if (e == NULL && cache_evict_none)
		return NULL;
	if (e == NULL)
	{
		lru = lru_copy(NULL, explicit);
		if (lru == NULL)
			return NULL;
		unpin[(*nunpin)++] = cache_drop_segment(lru);
		e = lru;
	}
	memset(e, 0, offsetof(CacheEntry, last_used));
	pg_atomic_write_u64(&e->last_used, (uint64) GetCurrentTimestamp());
	pg_atomic_write_u64(&e->hits, 0);
	pg_atomic_write_u64(&e->misses, 0);
	pg_atomic_write_u64(&e->insert_searches, 0);
	pg_atomic_write_u64(&e->cut_until, 0);
	e->builds = e->invalidations = e->refreshes = e->evictions = 0;
	e->outgrown = 0;
	e->mappers = 0;
	e->logged_failure = 0;
	e->dbid = MyDatabaseId;
	e->relid = RelationGetRelid(index);
	e->owner = index->rd_rel->relowner;
	e->locator = index->rd_locator;
	e->state = ENTRY_EMPTY;
	return e;
}

/* true if a lazy build of e should not be tried now (it failed recently) */
bool
cache_entry_failed_recently(CacheEntry *e, BlockNumber nblocks)
{
	return e->state == ENTRY_EMPTY && e->last_failure != 0 &&
		(e->failed_nblocks == nblocks ||
		 !TimestampDifferenceExceeds(e->failed_at, GetCurrentTimestamp(),
									 CACHE_RETRY_SECS * 1000));
}

/*
 * cache_sweep_dropped drops the copies of this database's indexes that are gone
 * (DROP INDEX, DROP TABLE) or now live in another relfilenode (REINDEX,
 * TRUNCATE, VACUUM FULL) and frees their entries. Scans never reach such an
 * copy (entries are keyed by relfilenode), but it would keep its dynamic
 * shared memory until the least recently used eviction got to it, memory
 * that parallel queries and live copies need (/dev/shm is often small in
 * containers). Other databases' entries cannot be checked from here; their
 * own backends sweep them. Called where a backend asks for a build, loads
 * or lists copies, in a transaction (it reads pg_class), never from the
 * build worker (which holds no snapshot). A relation this backend cannot
 * see yet (created by a transaction still open) may lose its copy: the
 * next scan builds it again. Entries being built or refreshed are left
 * alone.
 */
void
cache_sweep_dropped(void)
{
	struct
	{
		int			slot;
		Oid			relid;
		RelFileNumber file;
		uint64		copy_id;
	}			seen[CACHE_MAX_ENTRIES];
	int			n = 0,
				ndead = 0;
	dsm_handle	unpin[CACHE_MAX_ENTRIES];
	int			nunpin = 0;

	if (cache_ctl == NULL || !IsTransactionState() || IsInParallelMode())
		return;
	LWLockAcquire(&cache_ctl->lock, LW_SHARED);
	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
	{
		CacheEntry   *e = &cache_ctl->entries[i];

		if ((e->state == ENTRY_READY || e->state == ENTRY_EMPTY) && e->dbid == MyDatabaseId)
		{
			seen[n].slot = i;
			seen[n].relid = e->relid;
			seen[n].file = e->locator.relNumber;
			seen[n].copy_id = e->copy_id;
			n++;
		}
	}
	LWLockRelease(&cache_ctl->lock);

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

	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	for (int k = 0; k < ndead; k++)
	{
		CacheEntry   *e = &cache_ctl->entries[seen[k].slot];

		/* still the entry (and copy) that was found gone */
		if (e->dbid != MyDatabaseId || e->relid != seen[k].relid ||
			e->locator.relNumber != seen[k].file || e->copy_id != seen[k].copy_id ||
			(e->state != ENTRY_READY && e->state != ENTRY_EMPTY))
			continue;
		if (e->state == ENTRY_READY)
			unpin[nunpin++] = cache_drop_segment(e);
		e->state = ENTRY_FREE;
	}
	LWLockRelease(&cache_ctl->lock);
	cache_unpin(unpin, nunpin);
}

/* ---------- GUCs ---------- */

/*
 * shm_space gives the size and free space of /dev/shm, where POSIX dynamic
 * shared memory lives on Linux; false if segments are made some other way
 * (dynamic_shared_memory_type sysv or mmap) or /dev/shm cannot be read.
 */
static bool
shm_space(uint64 *total, uint64 *avail)
{
	struct statvfs st;

	if (dynamic_shared_memory_type != DSM_IMPL_POSIX || statvfs("/dev/shm", &st) != 0 ||
		st.f_blocks == 0)
		return false;
	*total = (uint64) st.f_blocks * st.f_frsize;
	*avail = (uint64) st.f_bavail * st.f_frsize;
	return true;
}

/* The budget in bytes. */
Size
cache_budget(void)
{
	return (Size) shnsw_shared_cache_size * 1024 * 1024;
}

/*
 * cache_shm_room says whether a segment of size bytes can be created and
 * still leave parallel queries their share of /dev/shm: an eighth of it,
 * at least 4 MB (min_dynamic_shared_memory, in the main shared memory
 * area, counts as room). If not, why says so, for the log.
 */
bool
cache_shm_room(Size size, char *why, Size whylen)
{
	uint64		total,
				avail,
				margin;

	if (!shm_space(&total, &avail))
		return true;
	margin = Max(total / 8, (uint64) 4 * 1024 * 1024);
	if ((uint64) size + margin <= avail + (uint64) min_dynamic_shared_memory * 1024 * 1024)
		return true;
	snprintf(why, whylen,
			 "/dev/shm has %llu kB free of %llu kB; the copy needs %zu kB, and %llu kB are left to parallel queries.",
			 (unsigned long long) (avail / 1024), (unsigned long long) (total / 1024),
			 size / 1024, (unsigned long long) (margin / 1024));
	return false;
}

/* What the default was capped from, and /dev/shm's size (0, 0: not). */
void
cache_size_capped(int *from, int *shm_mb)
{
	*from = size_capped_from;
	*shm_mb = size_shm_mb;
}

/* A build worker takes its requester's (cache_size_capped). */
void
cache_size_set_capped(int from, int shm_mb)
{
	size_capped_from = from;
	size_shm_mb = shm_mb;
}

/* What the budget is and where it comes from, for the log. */
void
cache_size_detail(char *buf, Size len)
{
	if (size_capped_from > 0)
		snprintf(buf, len,
				 "streamhnsw.shared_cache_size is %d MB: the default, capped from %d MB by the size of /dev/shm (%d MB).",
				 shnsw_shared_cache_size, size_capped_from, size_shm_mb);
	else
		snprintf(buf, len, "streamhnsw.shared_cache_size is %d MB.", shnsw_shared_cache_size);
}

/*
 * cache_log_failure says in the server log why the index gets no copy
 * (TOO_BIG, UNAVAILABLE): the caller says it once per index and status
 * (CacheEntry.logged_failure), not per scan.
 */
void
cache_log_failure(Relation index, int status, const char *why)
{
	ereport(LOG,
			(errmsg("streamhnsw: index \"%s\" gets no copy in the shared cache: %s",
					RelationGetRelationName(index),
					status == SHNSW_CACHE_TOO_BIG ? "it is larger than streamhnsw.shared_cache_size" :
					"no dynamic shared memory for it"),
			 why != NULL && why[0] != '\0' ? errdetail_internal("%s", why) : 0,
			 errhint("Scans of it read every page through shared buffers.")));
}

/*
 * streamhnsw.shared_cache_size's -1 (the default) stands for half of
 * shared_buffers, and never less than SHNSW_CACHE_AUTO_MIN_MB: a copy takes
 * about a third of its index's size (the exact vectors stay out of it), so
 * indexes that fit in shared_buffers get their copies. It is capped at half
 * of /dev/shm's size (plus min_dynamic_shared_memory) when segments live
 * there: a container's /dev/shm is often 64 MB, and parallel queries need
 * their segments too. Resolved when set, as wal_buffers' -1 is, so that SHOW
 * and a background build see the size in force; the assign hook keeps what
 * the cap took, for the log (cache_get_ctl).
 */
#define SHNSW_CACHE_AUTO_MIN_MB 256

static bool
check_shared_cache_size(int *newval, void **extra, GucSource source)
{
	int			capped[2] = {0, 0};	/* from, /dev/shm MB */

	if (*newval == -1)
	{
		uint64		half_mb = (uint64) NBuffers * BLCKSZ / 2 / (1024 * 1024);
		uint64		mb = Min(Max(half_mb, SHNSW_CACHE_AUTO_MIN_MB), INT_MAX / 2);
		uint64		total,
					avail;

		if (shm_space(&total, &avail))
		{
			uint64		cap = total / 2 / (1024 * 1024) + (uint64) min_dynamic_shared_memory;

			if (cap < mb)
			{
				capped[0] = (int) mb;
				capped[1] = (int) Min(total / (1024 * 1024), INT_MAX);
				mb = cap;
			}
		}
		*newval = (int) mb;
	}
	*extra = guc_malloc(LOG, sizeof(capped));
	if (*extra == NULL)
		return false;
	memcpy(*extra, capped, sizeof(capped));
	return true;
}

static void
assign_shared_cache_size(int newval, void *extra)
{
	size_capped_from = ((int *) extra)[0];
	size_shm_mb = ((int *) extra)[1];
}

void
shnsw_cache_init(void)
{
	DefineCustomBoolVariable("streamhnsw.shared_cache",
							 "Searches a copy of each index's graph in the shared cache, built by the first scan that finds none.",
							 "Off: scans read every page through shared buffers (the copy, if any, is still kept up to date).",
							 &shnsw_shared_cache, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamhnsw.shared_cache_size",
							"Total dynamic shared memory the shared cache may use.",
							"-1 (the default): half of shared_buffers, at least 256MB, but at most half of /dev/shm when segments live there. A copy takes about (24 + 8 m + dims) bytes per node plus 1/8 for growth; least recently used copies are evicted to make room.",
							&shnsw_shared_cache_size, -1, -1, INT_MAX / 2,
							PGC_SUSET, GUC_UNIT_MB, check_shared_cache_size,
							assign_shared_cache_size, NULL);
	DefineCustomBoolVariable("streamhnsw.shared_cache_background",
							 "Builds an index's missing copy in the shared cache in a background worker instead of in the scan that finds none.",
							 "On: that scan, and every other until the copy is ready, searches through shared buffers; if no worker can be started, the scan builds the copy itself.",
							 &shnsw_shared_cache_background, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
#ifdef USE_ASSERT_CHECKING
	/* debug settings: only in the assertion build, and hidden there */
	DefineCustomIntVariable("streamhnsw.debug_cache_build_delay",
							"Developer setting for tests: a background copy build waits this long before reading the index.",
							"It holds the index's lock meanwhile, as a long build would, and gives up when a VACUUM truncation waits for the lock.",
							&shnsw_debug_cache_build_delay, 0, 0, 60000,
							PGC_SUSET, GUC_UNIT_MS | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("streamhnsw.debug_dsm_fail",
							 "Developer setting for tests: the shared cache's and the statistics' dynamic shared memory cannot be had, as with a full /dev/shm.",
							 "Attaching or creating the registry and mapping a copy fail where a scan would try them, so that the fallbacks can be tested where no small /dev/shm can be mounted.",
							 &shnsw_debug_dsm_fail, false,
							 PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);
#endif
}
