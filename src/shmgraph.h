/*-------------------------------------------------------------------------
 *
 * shmgraph.h
 *	  The shared graph image: a copy of an index's graph and upper pages in
 *	  dynamic shared memory that scans search with plain loads (shmgraph.c;
 *	  src/README, "Shared graph image", has the protocol).
 *
 * Write-through. Every page change of an index after its build goes through
 * GenericXLog. The four macros at the end of this file route this
 * extension's calls of GenericXLogStart/RegisterBuffer/Finish/Abort through
 * shmgraph.c, which calls the real functions and then, while the caller
 * still holds the exclusive locks it registered, copies each changed graph
 * or upper page into the index's image (if it has one) and carries the
 * metapage's LSN and cache generation over to it. So no writer can change
 * a page without updating the image, whatever file it is in. Whatever can
 * fail (attaching the registry, if it exists, and mapping the image) is
 * done when a record's first page is registered, before anything changes;
 * after the real GenericXLogFinish nothing raises an error.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_SHMGRAPH_H
#define STREAMHNSW_SHMGRAPH_H

#include "access/generic_xlog.h"
#include "utils/relcache.h"

#include "nodesource.h"

struct ShnswIndexInfo;
struct ShnswMetaSnapshot;
struct ShnswScanStats;

/* why a scan did or did not search the image (EXPLAIN) */
#define SHNSW_SHM_OFF			0	/* streamhnsw.shared_cache is off */
#define SHNSW_SHM_USED			1
#define SHNSW_SHM_BUILT			2	/* this scan built the image, then used it */
#define SHNSW_SHM_BUILDING		3	/* another backend is building it */
#define SHNSW_SHM_STALE			4	/* the image is behind the metapage */
#define SHNSW_SHM_TOO_BIG		5	/* larger than streamhnsw.shared_cache_size */
#define SHNSW_SHM_UNAVAILABLE	6	/* no dynamic shared memory, or not here */
#define SHNSW_SHM_MISSING		7	/* none, and this scan did not build one */
#define SHNSW_SHM_FULL			8	/* no room without evicting images in use */
#define SHNSW_SHM_LAUNCHED		9	/* this scan started a background build */

extern bool shnsw_shared_cache;
extern int	shnsw_shared_cache_size;
extern bool shnsw_shared_cache_background;
extern int	shnsw_debug_image_build_delay;
extern bool shnsw_debug_dsm_fail;
extern bool shnsw_dsm_try(void (*fn) (void *arg), void *arg);

/* GUCs; called from _PG_init before the prefix is reserved. */
extern void shnsw_shm_init(void);

/*
 * shnsw_shm_scan_begin: if an image of the index matches the metapage the
 * scan read (snap), or this scan can build one, replace *ops (the scan's
 * buffer-manager ops, kept as the fallback for nodes the image lacks) by
 * ops over the image, allocated in cxt. Sets stats->shared_graph to what
 * happened. Never raises an error for lack of shared memory; holds no lock
 * or buffer on return.
 */
extern void shnsw_shm_scan_begin(Relation index, const struct ShnswIndexInfo *info,
								 const struct ShnswMetaSnapshot *snap, ShnswNodeSource *ops,
								 struct ShnswScanStats *stats, MemoryContext cxt);

/*
 * shnsw_shm_insert_begin: as shnsw_shm_scan_begin, for the searches of an
 * insert: only an image that matches snap is used (an insert never builds
 * or refreshes one), and it counts an insert search, not a hit or a miss.
 */
extern void shnsw_shm_insert_begin(Relation index, const struct ShnswIndexInfo *info,
								   const struct ShnswMetaSnapshot *snap, ShnswNodeSource *ops,
								   struct ShnswScanStats *stats, MemoryContext cxt);

extern const char *shnsw_shm_status_name(int status);

/*
 * shnsw_shm_cut_waiting: a VACUUM truncation could not lock the index; if
 * a background image build holds (or is about to take) its lock, ask it to
 * give the lock up and return true: worth waiting a moment. Takes and
 * releases the registry LWLock; no buffer lock may be held.
 */
extern bool shnsw_shm_cut_waiting(Relation index);

/* a build's insert phase: changes of relid written in place, no WAL */
extern void shnsw_xlog_direct(Oid relid);

/* write-through wrappers (see above) */
extern GenericXLogState *shnsw_xlog_start(Relation relation);
extern Page shnsw_xlog_register_buffer(GenericXLogState *state, Buffer buffer, int flags);
extern XLogRecPtr shnsw_xlog_finish(GenericXLogState *state);
extern void shnsw_xlog_abort(GenericXLogState *state);

#ifndef SHNSW_SHMGRAPH_NO_WRAP
#define GenericXLogStart(rel) shnsw_xlog_start(rel)
#define GenericXLogRegisterBuffer(state, buf, flags) shnsw_xlog_register_buffer(state, buf, flags)
#define GenericXLogFinish(state) shnsw_xlog_finish(state)
#define GenericXLogAbort(state) shnsw_xlog_abort(state)
#endif

#endif							/* STREAMHNSW_SHMGRAPH_H */
