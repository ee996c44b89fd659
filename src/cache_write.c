/*-------------------------------------------------------------------------
 *
 * cache_write.c
 *	  The page-write API (pagewrite.h): every change of an index page goes
 *	  through GenericXLog here, and is written through into the index's
 *	  cached copy before the writer releases its page locks.
 *
 * A writer's record: shnsw_write_start, shnsw_write_buffer for each page
 * (exclusively locked by the caller), shnsw_write_finish (or
 * shnsw_write_abort). At the first registration, while no page has changed
 * yet, the registry is attached (if it exists) and the index's copy mapped:
 * whatever can fail fails there. At finish, after the WAL record is out,
 * each changed graph or upper page is copied into the copy under the
 * caller's exclusive locks (cache_copy_page), and the metapage's LSN and
 * cache generation are carried over; nothing raises an error there: a copy
 * that cannot be written to is noted behind (refreshed before its next
 * use) or dropped.
 *
 * This file is the only caller of GenericXLogStart/Finish in the
 * extension (test_shared_cache.py checks the objects for it).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"

#include "cache_int.h"
#include "pages.h"
#include "pagewrite.h"

/* a record in progress (pagewrite.h) */
struct ShnswWriteState
{
	GenericXLogState *xlog;		/* NULL for a direct change */
	Relation	rel;
	int			nbuf;
	Buffer		bufs[MAX_GENERIC_XLOG_PAGES];
	bool		has_meta;
	uint64		meta_lsn;		/* the metapage's LSN and generation before */
	uint64		meta_gen;
	bool		prepared;		/* the registry existed at a registration:
								 * attached, the copy mapped (write_prepare) */
};

/*
 * The index whose changes this backend writes in place, without WAL: a
 * build's insert phase (shnsw_write_direct), which logs every page at its
 * end; InvalidOid otherwise.
 */
static Oid	direct_relid = InvalidOid;

/*
 * shnsw_write_direct makes this backend's changes of index relid (a build's
 * insert phase; InvalidOid ends it) go straight into the buffers under the
 * caller's exclusive locks, marked dirty at "finish", with no WAL record
 * and no page copy: the index is not visible to any other backend before
 * the build's transaction commits, the build WAL-logs every page once when
 * it is done (log_newpage_range), and an error aborts the build, dropping
 * the index, so a change left half made by an error is never seen. Such a
 * change cannot be abandoned (shnsw_write_abort raises an error): no caller
 * an insert runs does that. Nor is it written through: a copy of the
 * same relfilenode (a TRUNCATE rebuilding in place) is of another build,
 * which the metapage's build nonce tells scans.
 */
void
shnsw_write_direct(Oid relid)
{
	direct_relid = relid;
}

/*
 * drop_copy_of drops the index's copy (or a build or refresh of it in
 * progress, which then does not finish): a change of it cannot be written
 * through. Takes and releases the registry lock; raises no error.
 */
static void
drop_copy_of(Relation index)
{
	CacheEntry *e;
	dsm_handle	h = DSM_HANDLE_INVALID;

	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = cache_find_entry(index);
	if (e != NULL && e->state >= ENTRY_BUILDING && e->copy_id != 0)
	{
		e->invalidations++;
		e->state = ENTRY_READY; /* a build or refresh must not finish */
		h = cache_drop_segment(e);
	}
	LWLockRelease(&cache_ctl->lock);
	cache_unpin(&h, 1);
}

/*
 * copy_behind notes that a change of the index could not be copied into
 * its copy (published since the change's pages were registered, so not
 * mapped here): a logged index's copy is refreshed before its next use,
 * which recopies every page whose LSN differs from its copy's, this
 * change's included; an unlogged index's (no LSNs) is dropped. A build in
 * progress keeps the note and is refreshed once ready. Takes and releases
 * the registry lock; raises no error.
 */
static void
copy_behind(Relation index)
{
	CacheEntry *e;

	if (!RelationNeedsWAL(index))
	{
		drop_copy_of(index);
		return;
	}
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = cache_find_entry(index);
	if (e != NULL && e->state >= ENTRY_BUILDING && e->copy_id != 0)
		e->behind = true;
	LWLockRelease(&cache_ctl->lock);
}

ShnswWriteState *
shnsw_write_start(Relation index)
{
	ShnswWriteState *state = palloc0(sizeof(ShnswWriteState));

	state->rel = index;
	if (!(OidIsValid(direct_relid) && RelationGetRelid(index) == direct_relid))
		state->xlog = GenericXLogStart(index);
	return state;
}

/*
 * write_prepare readies the write-through of the record for the page the
 * caller just registered (exclusively locked): if the registry exists,
 * this backend attaches it and maps the index's copy. Both may raise an
 * error (no memory to map it), which is harmless here: no page of the
 * record has changed yet. If the registry does not exist now, no copy can
 * be published and copy this page before the caller's lock is released.
 */
static void
write_prepare(ShnswWriteState *state)
{
	if (state->prepared || state->xlog == NULL || RelationUsesLocalBuffers(state->rel))
		return;					/* once per record (write_through sees later copies) */
	if (cache_ctl == NULL && !cache_marker_present())
		return;
	cache_get_ctl();
	(void) cache_local_map(state->rel, false);
	state->prepared = true;
}

Page
shnsw_write_buffer(ShnswWriteState *state, Buffer buffer, int flags)
{
	for (int i = 0; i < state->nbuf; i++)
		if (state->bufs[i] == buffer)
			return state->xlog == NULL ? BufferGetPage(buffer) :
				GenericXLogRegisterBuffer(state->xlog, buffer, flags);
	/* as GenericXLogRegisterBuffer would, refuse a fifth page */
	if (state->nbuf >= MAX_GENERIC_XLOG_PAGES)
		elog(ERROR, "maximum number %d of generic xlog buffers is exceeded",
			 MAX_GENERIC_XLOG_PAGES);
	write_prepare(state);
	state->bufs[state->nbuf++] = buffer;
	if (BufferGetBlockNumber(buffer) == SHNSW_METAPAGE_BLKNO)
	{
		Page		page = BufferGetPage(buffer);

		state->has_meta = true;
		state->meta_lsn = PageGetLSN(page);
		state->meta_gen = PageIsNew(page) ? 0 : ShnswPageGetMeta(page)->cache_generation;
	}
	if (state->xlog == NULL)
		return BufferGetPage(buffer);
	return GenericXLogRegisterBuffer(state->xlog, buffer, flags);
}

void
shnsw_write_abort(ShnswWriteState *state)
{
	if (state->xlog == NULL)
		elog(ERROR, "streamhnsw: a change written in place cannot be abandoned");
	GenericXLogAbort(state->xlog);
	pfree(state);
}

ShnswMetaPage
shnsw_write_meta(Relation index, Buffer *metabuf, ShnswWriteState **state)
{
	*metabuf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
	LockBuffer(*metabuf, BUFFER_LOCK_EXCLUSIVE);
	*state = shnsw_write_start(index);
	return ShnswPageGetMeta(shnsw_write_buffer(*state, *metabuf, 0));
}

/*
 * write_meta_through carries the metapage's new state (page) over to the
 * copy cp, if cp had the one before this change: the metapage is
 * exclusively locked, so these updates are serialized; a copy behind stays
 * behind (and is refreshed by the next scan). A change of the build nonce
 * or the truncation count makes the copy another index's: it goes.
 */
static void
write_meta_through(const ShnswWriteState *state, CacheCopy *cp, Page page)
{
	if (ShnswPageGetMeta(page)->build_nonce != cp->meta_nonce ||
		ShnswPageGetMeta(page)->truncations != cp->meta_trunc)
		pg_atomic_write_u32(&cp->valid, 0);
	else if (pg_atomic_read_u64(&cp->meta_lsn) == state->meta_lsn &&
			 pg_atomic_read_u64(&cp->meta_gen) == state->meta_gen)
	{
		pg_atomic_write_u64(&cp->meta_lsn, PageGetLSN(page));
		pg_atomic_write_u64(&cp->meta_gen, ShnswPageGetMeta(page)->cache_generation);
	}
}

/*
 * write_through copies the pages of one finished record into the index's
 * copy, if it has one. The caller still holds the exclusive lock of every
 * page, so a build copying the same page (under a share lock) comes wholly
 * before or after, and two writers of one page are serialized.
 *
 * The record's WAL is out: nothing here raises an error. The registry
 * and the copy were attached and mapped when the pages were registered
 * (write_prepare); a copy this backend has not mapped (published since)
 * is noted behind instead of mapped (copy_behind), and a record prepared
 * with no registry has no copy to write to.
 */
static void
write_through(const ShnswWriteState *state)
{
	CacheEntry *e;
	LocalCopy  *li = NULL;
	bool		unmapped = false;

	if (!state->prepared || cache_ctl == NULL || pg_atomic_read_u32(&cache_ctl->ncopies) == 0)
		return;
	LWLockAcquire(&cache_ctl->lock, LW_SHARED);
	e = cache_find_entry(state->rel);
	if (e != NULL && e->state >= ENTRY_BUILDING && e->copy_id != 0)
	{
		li = cache_local_find(e->copy_id);
		unmapped = li == NULL;
	}
	LWLockRelease(&cache_ctl->lock);
	if (unmapped)
	{
		/* not mapped here, and mapping may fail: never mapped now */
		copy_behind(state->rel);
		return;
	}
	if (li == NULL)
		return;

	/* the pages first, then (the last) the metapage's state */
	for (int i = 0; i < state->nbuf; i++)
	{
		BlockNumber blk = BufferGetBlockNumber(state->bufs[i]);

		if (blk != SHNSW_METAPAGE_BLKNO)
			cache_copy_page(li, blk, BufferGetPage(state->bufs[i]), true);
	}
	for (int i = 0; i < state->nbuf && state->has_meta; i++)
		if (BufferGetBlockNumber(state->bufs[i]) == SHNSW_METAPAGE_BLKNO)
			write_meta_through(state, li->cp, BufferGetPage(state->bufs[i]));
}

XLogRecPtr
shnsw_write_finish(ShnswWriteState *state)
{
	XLogRecPtr	lsn = InvalidXLogRecPtr;

	if (state->xlog == NULL)
	{
		/* the pages were changed in place (shnsw_write_direct) */
		for (int i = 0; i < state->nbuf; i++)
			MarkBufferDirty(state->bufs[i]);
	}
	else
	{
		lsn = GenericXLogFinish(state->xlog);
		write_through(state);
	}
	pfree(state);
	return lsn;
}
