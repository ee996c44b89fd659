/*-------------------------------------------------------------------------
 *
 * pagewrite.h
 *	  The page-write API: every change of an index page after its build
 *	  goes through these four calls (cache_write.c), never through
 *	  GenericXLog directly.
 *
 * They wrap GenericXLogStart/RegisterBuffer/Finish/Abort and add what the
 * shared cache needs: while the caller still holds the exclusive locks of
 * the pages it registered, shnsw_write_finish copies each changed graph or
 * upper page into the index's cached copy (if it has one) and carries the
 * metapage's LSN and cache generation over to it, so no writer can change
 * a page without updating the copy. Whatever can fail (attaching the
 * registry, if it exists, and mapping the copy) is done when a record's
 * first page is registered, before anything changes; after the WAL record
 * is out nothing raises an error.
 *
 * Usage is GenericXLog's: lock the buffers exclusively, start, register
 * each buffer and change the page returned (not the buffer's own page),
 * finish (or abort), then unlock. flags are GenericXLog's
 * (GENERIC_XLOG_FULL_IMAGE for a page written from scratch). At most
 * MAX_GENERIC_XLOG_PAGES pages per record.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_PAGEWRITE_H
#define STREAMHNSW_PAGEWRITE_H

#include "access/generic_xlog.h"
#include "access/xlogdefs.h"
#include "storage/buf.h"
#include "storage/bufpage.h"
#include "utils/relcache.h"

#include "pages.h"

/* one record in progress; palloc'd by start, freed by finish or abort */
typedef struct ShnswWriteState ShnswWriteState;

extern ShnswWriteState *shnsw_write_start(Relation index);
extern Page shnsw_write_buffer(ShnswWriteState *state, Buffer buffer, int flags);
extern XLogRecPtr shnsw_write_finish(ShnswWriteState *state);
extern void shnsw_write_abort(ShnswWriteState *state);

/*
 * shnsw_write_meta starts a record of the metapage alone: reads and locks
 * it exclusively (*metabuf), starts *state, registers the metapage and
 * returns its writable copy. The caller finishes the record, then unlocks
 * and releases *metabuf.
 */
extern ShnswMetaPage shnsw_write_meta(Relation index, Buffer *metabuf,
									  ShnswWriteState **state);

/*
 * shnsw_write_direct: this backend's changes of index relid (a build's
 * insert phase; InvalidOid ends it) are made in place, with no WAL record
 * and no copy into the cache (cache_write.c says why that is safe).
 */
extern void shnsw_write_direct(Oid relid);

#endif							/* STREAMHNSW_PAGEWRITE_H */
