/*-------------------------------------------------------------------------
 *
 * cache_warm.c
 *	  Warm after a restart: the list of cached copies is kept in a file of
 *	  the data directory, and after the next start a background worker has
 *	  them rebuilt, most recently used first, one build worker at a time,
 *	  as autoprewarm does for buffers.
 *
 * With the library in shared_preload_libraries the warmer is a static
 * worker: it starts with the server, writes the list at shutdown and every
 * few minutes. Without preloading nothing runs at shutdown, so the list
 * is rewritten whenever a copy is built or dropped on request
 * (cache_warm_note), and the server's first request for a background build
 * (a scan that finds no copy) starts the warmer as a dynamic worker, which
 * rebuilds the list's copies and exits. The list it reads is the one the
 * last life of the server left: the first rewrite or request of a life
 * moves it aside (WARM_LAST_FILE) before anything of this life is written,
 * so copies built in this life before its first request are neither lost
 * from the last list nor rebuilt again.
 *
 * The list names indexes by (database, OID). A build worker
 * (streamhnsw_cache_worker in cache_build.c) opens the index by OID in its
 * database, so an index dropped meanwhile is skipped, and one rewritten
 * since (a new relfilenode) gets a copy of what it is now. The builds are
 * the lazy kind: they evict nothing and respect the budget, so the most
 * recently used copies come first and the others are built while they fit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/procsignal.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#include "cache.h"
#include "cache_int.h"

/* in the data directory, as autoprewarm's autoprewarm.blocks */
#define WARM_FILE		"streamhnsw_cache.list"
#define WARM_LAST_FILE	"streamhnsw_cache.list.last"	/* not preloaded:
														 * the last life's */
#define WARM_DUMP_SECS	300		/* rewrite the list this often, for a crash */

typedef struct WarmItem
{
	Oid			dbid;
	Oid			relid;
	TimestampTz last_used;
} WarmItem;

bool		shnsw_shared_cache_warm = true;

/* the warmer's argument: started with the server, or by a build request */
#define WARMER_STATIC	0
#define WARMER_ONCE		1

PGDLLEXPORT void streamhnsw_cache_warmer(Datum arg);

/* most recently used first */
static int
warm_cmp(const void *a, const void *b)
{
	const WarmItem *x = a;
	const WarmItem *y = b;

	return x->last_used < y->last_used ? 1 : x->last_used > y->last_used ? -1 : 0;
}

/*
 * warm_dump writes the ready copies of the registry (if one exists) to
 * WARM_FILE through a temporary file and a rename, so a crash leaves the
 * old list or the new one.
 */
static void
warm_dump(void)
{
	WarmItem	items[CACHE_MAX_ENTRIES];
	int			n = 0;
	char		tmp[MAXPGPATH];
	FILE	   *f;

	if (cache_ctl == NULL && !cache_marker_present())
		return;					/* no registry: nothing was cached */
	cache_get_ctl();
	LWLockAcquire(&cache_ctl->lock, LW_SHARED);
	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
	{
		CacheEntry *e = &cache_ctl->entries[i];

		if (e->state != ENTRY_READY && e->state != ENTRY_REFRESHING)
			continue;
		items[n].dbid = e->dbid;
		items[n].relid = e->relid;
		items[n].last_used = (TimestampTz) pg_atomic_read_u64(&e->last_used);
		n++;
	}
	LWLockRelease(&cache_ctl->lock);

	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", WARM_FILE, MyProcPid);	/* one a writer */
	f = AllocateFile(tmp, PG_BINARY_W);
	if (f == NULL)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", tmp)));
		return;
	}
	for (int i = 0; i < n; i++)
		fprintf(f, "%u %u " INT64_FORMAT "\n", items[i].dbid, items[i].relid,
				(int64) items[i].last_used);
	if (FreeFile(f) != 0 || durable_rename(tmp, WARM_FILE, LOG) != 0)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", WARM_FILE)));
}

/* warm_read reads the list in path into items (at most max); the count */
static int
warm_read(const char *path, WarmItem *items, int max)
{
	FILE	   *f = AllocateFile(path, PG_BINARY_R);
	int			n = 0;
	unsigned int dbid,
				relid;
	int64		last;

	if (f == NULL)
		return 0;
	while (n < max && fscanf(f, "%u %u " INT64_FORMAT "\n", &dbid, &relid, &last) == 3)
	{
		items[n].dbid = dbid;
		items[n].relid = relid;
		items[n].last_used = (TimestampTz) last;
		n++;
	}
	FreeFile(f);
	return n;
}

/*
 * warm_build has a build worker build the copy of one index and waits
 * for it to end; false if no worker could be started.
 */
static bool
warm_build(const WarmItem *it)
{
	BackgroundWorker bgw;
	BackgroundWorkerHandle *handle;
	CacheBuildRequest req = {0};
	pid_t		pid;

	cache_build_worker_init(&bgw, it->relid);
	req.dbid = it->dbid;
	req.relid = it->relid;
	req.cache_size_mb = -1;		/* the server's setting */
	req.last_used = it->last_used;
	memcpy(bgw.bgw_extra, &req, sizeof(req));
	bgw.bgw_notify_pid = MyProcPid;
	if (!RegisterDynamicBackgroundWorker(&bgw, &handle))
		return false;
	if (WaitForBackgroundWorkerStartup(handle, &pid) == BGWH_STARTED)
		(void) WaitForBackgroundWorkerShutdown(handle);
	pfree(handle);
	return true;
}

/*
 * streamhnsw_cache_warmer rebuilds the copies of the last list (if
 * streamhnsw.shared_cache_warm is on at its start). Started with the
 * server (preloaded), it then waits for the shutdown, rewriting the list
 * every WARM_DUMP_SECS and at the end; started once (WARMER_ONCE), it exits.
 */
void
streamhnsw_cache_warmer(Datum arg)
{
	WarmItem	items[CACHE_MAX_ENTRIES];
	int			n;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	/* a worker without a database ignores SIGUSR1: builds' ends need it */
	pqsignal(SIGUSR1, procsignal_sigusr1_handler);
	BackgroundWorkerUnblockSignals();

	if (DatumGetInt32(arg) == WARMER_ONCE)
	{
		n = shnsw_shared_cache_warm ? warm_read(WARM_LAST_FILE, items, lengthof(items)) : 0;
		(void) unlink(WARM_LAST_FILE);
	}
	else
		n = shnsw_shared_cache_warm ? warm_read(WARM_FILE, items, lengthof(items)) : 0;
	qsort(items, n, sizeof(WarmItem), warm_cmp);
	for (int i = 0; i < n && !ShutdownRequestPending; i++)
	{
		/* a few tries when every worker slot is taken */
		for (int t = 0; t < 5 && !warm_build(&items[i]) && !ShutdownRequestPending; t++)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1000,
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
	if (n > 0)
		ereport(LOG,
				(errmsg("streamhnsw: rebuilt the shared cache's copies of up to %d indexes cached at the last shutdown", n)));
	if (DatumGetInt32(arg) == WARMER_ONCE)
		proc_exit(0);

	while (!ShutdownRequestPending)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 WARM_DUMP_SECS * 1000L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		warm_dump();
	}
	warm_dump();
	proc_exit(0);
}

/* A build worker for index relid, as cache_request_build and the warmer start it. */
void
cache_build_worker_init(BackgroundWorker *bgw, Oid relid)
{
	memset(bgw, 0, sizeof(*bgw));
	bgw->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw->bgw_start_time = BgWorkerStart_ConsistentState;
	bgw->bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(bgw->bgw_library_name, "streamhnsw", BGW_MAXLEN);
	strlcpy(bgw->bgw_function_name, "streamhnsw_cache_worker", BGW_MAXLEN);
	snprintf(bgw->bgw_name, BGW_MAXLEN, "streamhnsw shared cache build for index %u", relid);
	strlcpy(bgw->bgw_type, "streamhnsw shared cache build", BGW_MAXLEN);
}

/* the warmer's definition, static or dynamic */
static void
warmer_init(BackgroundWorker *bgw, int kind)
{
	memset(bgw, 0, sizeof(*bgw));
	bgw->bgw_flags = BGWORKER_SHMEM_ACCESS;
	bgw->bgw_start_time = BgWorkerStart_ConsistentState;
	bgw->bgw_restart_time = BGW_NEVER_RESTART;
	bgw->bgw_main_arg = Int32GetDatum(kind);
	strlcpy(bgw->bgw_library_name, "streamhnsw", BGW_MAXLEN);
	strlcpy(bgw->bgw_function_name, "streamhnsw_cache_warmer", BGW_MAXLEN);
	strlcpy(bgw->bgw_name, "streamhnsw shared cache warmer", BGW_MAXLEN);
	strlcpy(bgw->bgw_type, "streamhnsw shared cache warmer", BGW_MAXLEN);
}

/*
 * warm_take_last moves the last life's list aside, once a life and before
 * this life writes one (not preloaded): a list left by an earlier life and
 * never read goes, as it is older than WARM_FILE or than no list at all.
 */
static void
warm_take_last(void)
{
	cache_get_ctl();
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	if (!cache_ctl->warm_taken)
	{
		cache_ctl->warm_taken = true;
		if (access(WARM_FILE, F_OK) == 0)
			(void) durable_rename(WARM_FILE, WARM_LAST_FILE, LOG);
		else
			(void) unlink(WARM_LAST_FILE);
	}
	LWLockRelease(&cache_ctl->lock);
}

/*
 * cache_warm_start starts the warmer once, without preloading: called for
 * the first build request of the server's life (the registry's
 * warm_pending). No worker slot: the copies come back as scans ask.
 */
void
cache_warm_start(void)
{
	BackgroundWorker bgw;

	if (cache_preloaded || !shnsw_shared_cache_warm)
		return;
	warm_take_last();
	if (access(WARM_LAST_FILE, F_OK) != 0)
		return;
	warmer_init(&bgw, WARMER_ONCE);
	(void) RegisterDynamicBackgroundWorker(&bgw, NULL);
}

/*
 * cache_warm_note rewrites the list after a copy was built or dropped on
 * request, without preloading (the static warmer writes it at shutdown).
 */
void
cache_warm_note(void)
{
	if (cache_preloaded || !shnsw_shared_cache_warm ||
		(cache_ctl == NULL && !cache_marker_present()))
		return;
	warm_take_last();
	warm_dump();
}

/*
 * shnsw_cache_warm_init defines streamhnsw.shared_cache_warm and registers
 * the warmer, from _PG_init while the library is being preloaded.
 */
void
shnsw_cache_warm_init(void)
{
	BackgroundWorker bgw;

	DefineCustomBoolVariable("streamhnsw.shared_cache_warm",
							 "Rebuilds after a start the shared cache's copies that existed at the last shutdown.",
							 "The list of copies is kept in streamhnsw_cache.list in the data directory; after a start a background worker rebuilds them, most recently used first: at once with the library preloaded, else at the first scan that finds no copy.",
							 &shnsw_shared_cache_warm, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	if (!process_shared_preload_libraries_in_progress)
		return;
	cache_preloaded = true;
	warmer_init(&bgw, WARMER_STATIC);
	RegisterBackgroundWorker(&bgw);
}
