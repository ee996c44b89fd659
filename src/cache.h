/*-------------------------------------------------------------------------
 *
 * cache.h
 *	  The shared cache: a copy of each index's graph and upper pages in
 *	  dynamic shared memory that scans search with plain loads instead of a
 *	  buffer pin and lock per page. This is its API for the rest of the
 *	  access method; src/README, "Shared cache", has the protocol.
 *
 *	  cache_registry.c	registry, LRU and budget, mappings, callbacks, GUCs
 *	  cache_build.c		copying pages, building and refreshing a copy, the
 *						background build worker
 *	  cache_read.c		the node source over a cached copy; choosing it
 *	  cache_write.c		write-through: the page-write API (pagewrite.h)
 *	  cache_sql.c		streamhnsw_cache_load/drop/list
 *	  cache_warm.c		warm after a restart: the list of copies, the
 *						warmer, the background workers' definitions
 *
 * Every page change of an index goes through pagewrite.h, which copies the
 * changed graph and upper pages into the index's cached copy before the
 * writer releases their locks; scans compare the copy's validity token with
 * the metapage they read.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_CACHE_H
#define STREAMHNSW_CACHE_H

#include "utils/relcache.h"

#include "nodesource.h"

struct ShnswIndexInfo;
struct ShnswMetaSnapshot;
struct ShnswScanStats;

/* why a scan did or did not search the cached copy (EXPLAIN) */
#define SHNSW_CACHE_OFF			0	/* streamhnsw.shared_cache is off */
#define SHNSW_CACHE_USED		1
#define SHNSW_CACHE_BUILT		2	/* this scan built the copy, then used it */
#define SHNSW_CACHE_BUILDING	3	/* another backend is building it */
#define SHNSW_CACHE_STALE		4	/* the copy is behind the metapage */
#define SHNSW_CACHE_TOO_BIG		5	/* larger than streamhnsw.shared_cache_size */
#define SHNSW_CACHE_UNAVAILABLE 6	/* no dynamic shared memory, or not here */
#define SHNSW_CACHE_MISSING		7	/* none, and this scan did not build one */
#define SHNSW_CACHE_FULL		8	/* no room without evicting copies in use */
#define SHNSW_CACHE_LAUNCHED	9	/* this scan started a background build */
#define SHNSW_CACHE_REFRESH_LAUNCHED 10 /* this scan found the copy behind and
										 * started a background refresh */

extern bool shnsw_shared_cache;
extern int	shnsw_shared_cache_size;
extern bool shnsw_shared_cache_background;

/*
 * Debug settings: GUCs only in the assertion build (USE_ASSERT_CHECKING);
 * a release build keeps these at their defaults.
 */
extern int	shnsw_debug_cache_build_delay;
extern bool shnsw_debug_dsm_fail;

/*
 * shnsw_dsm_try runs fn(arg), which gets dynamic shared memory, in a
 * subtransaction: a failure is a fallback (false), not an error. The
 * caller is in a transaction, not in parallel mode, and holds no buffer
 * and no LWLock.
 */
extern bool shnsw_dsm_try(void (*fn) (void *arg), void *arg);

/* GUCs; called from _PG_init before the prefix is reserved. */
extern void shnsw_cache_init(void);

/*
 * streamhnsw.shared_cache_warm, and the warmer's background worker when
 * the library is being preloaded (cache_warm.c); from _PG_init too.
 */
extern void shnsw_cache_warm_init(void);

/*
 * shnsw_cache_scan_begin: if a cached copy of the index matches the
 * metapage the scan read (snap), or this scan can build one, replace *ops
 * (the scan's buffer-manager ops, kept as the fallback for nodes the copy
 * lacks) by ops over the copy, allocated in cxt. Sets stats->cache_status
 * to what happened (SHNSW_CACHE_*). Never raises an error for lack of
 * shared memory; holds no lock or buffer on return.
 */
extern void shnsw_cache_scan_begin(Relation index, const struct ShnswIndexInfo *info,
								   const struct ShnswMetaSnapshot *snap, ShnswNodeSource *ops,
								   struct ShnswScanStats *stats, MemoryContext cxt);

/*
 * shnsw_cache_insert_begin: as shnsw_cache_scan_begin, for the searches of
 * an insert: only a copy that matches snap is used (an insert never builds
 * or refreshes one), and it counts an insert search, not a hit or a miss.
 */
extern void shnsw_cache_insert_begin(Relation index, const struct ShnswIndexInfo *info,
									 const struct ShnswMetaSnapshot *snap, ShnswNodeSource *ops,
									 struct ShnswScanStats *stats, MemoryContext cxt);

/* What SHNSW_CACHE_* status says, for EXPLAIN. */
extern const char *shnsw_cache_status_name(int status);

/*
 * shnsw_cache_cut_waiting: a VACUUM truncation could not lock the index; if
 * a background build of its copy holds (or is about to take) its lock, ask
 * it to give the lock up and return true: worth waiting a moment. Takes and
 * releases the registry LWLock; no buffer lock may be held.
 */
extern bool shnsw_cache_cut_waiting(Relation index);

/*
 * shnsw_cache_drop_index drops the index's cached copy, if it has one;
 * true if it did. Takes and releases the registry LWLock; attaches the
 * registry only if it exists. The caller has the index open and locked.
 */
extern bool shnsw_cache_drop_index(Relation index);

#endif							/* STREAMHNSW_CACHE_H */
