/*-------------------------------------------------------------------------
 *
 * vacuum.c
 *	  VACUUM: mark the nodes of dead heap tuples deleted.
 *
 * A deleted node is never returned by a scan, but stays in the graph as a
 * waypoint so that the graph remains connected. Repairing neighbour lists
 * around deleted nodes and reusing their space is not done yet.
 *
 * Locking: takes the insert lock (LockPage on the metapage number) so that
 * it never races an insert; each graph page is exclusively locked only while
 * its flags are changed, so scans wait at most for one page.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/rel.h"

#include "streamhnsw.h"

IndexBulkDeleteResult *
shnsw_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
				 IndexBulkDeleteCallback callback, void *callback_state)
{
	Relation	index = info->index;
	ShnswIndexInfo *ii = shnsw_get_index_info(index);
	BlockNumber nblocks = RelationGetNumberOfBlocks(index);
	BufferAccessStrategy bas = info->strategy;

	if (stats == NULL)
		stats = palloc0(sizeof(IndexBulkDeleteResult));

	LockPage(index, SHNSW_METAPAGE_BLKNO, ExclusiveLock);
	for (BlockNumber blk = SHNSW_METAPAGE_BLKNO + 1; blk < nblocks; blk++)
	{
		Buffer		buf;
		Page		page;
		ShnswPageOpaque opaque;
		int			dead[SHNSW_MAX_NODES_PER_PAGE];
		int			ndead = 0;

		vacuum_delay_point(false);
		buf = ReadBufferExtended(index, MAIN_FORKNUM, blk, RBM_NORMAL, bas);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (PageIsNew(page))
		{
			/* extended by an insert that crashed before initializing it */
			UnlockReleaseBuffer(buf);
			continue;
		}
		shnsw_check_page(index, page, blk, 0);
		opaque = ShnswPageGetOpaque(page);
		if (opaque->page_type == SHNSW_PAGE_GRAPH)
		{
			for (int s = 0; s < opaque->nslots; s++)
			{
				ShnswNodeHeader *h = shnsw_page_node(page, s, ii->node_size);
				ItemPointerData tid;

				if (h->flags & SHNSW_NODE_DELETED)
					continue;
				ItemPointerSet(&tid, shnsw_node_tid_block(h), h->tid_off);
				if (callback(&tid, callback_state))
					dead[ndead++] = s;
				else
					stats->num_index_tuples++;
			}
		}
		LockBuffer(buf, BUFFER_LOCK_UNLOCK);
		if (ndead > 0)
		{
			GenericXLogState *state;
			Buffer		metabuf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
			ShnswMetaPage meta;

			/*
			 * The flags and the metapage's count change in one WAL record,
			 * so an interrupted VACUUM leaves them consistent. Lock order:
			 * data page before metapage, as inserts do.
			 */
			LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
			LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
			state = GenericXLogStart(index);
			page = GenericXLogRegisterBuffer(state, buf, 0);
			meta = ShnswPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
			for (int k = 0; k < ndead; k++)
				shnsw_page_node(page, dead[k], ii->node_size)->flags |= SHNSW_NODE_DELETED;
			meta->deleted_count += ndead;
			meta->cache_generation++;
			GenericXLogFinish(state);
			UnlockReleaseBuffer(metabuf);
			LockBuffer(buf, BUFFER_LOCK_UNLOCK);
			stats->tuples_removed += ndead;
		}
		ReleaseBuffer(buf);
	}

	UnlockPage(index, SHNSW_METAPAGE_BLKNO, ExclusiveLock);
	stats->num_pages = nblocks;
	return stats;
}

IndexBulkDeleteResult *
shnsw_vacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats)
{
	Relation	index = info->index;

	if (info->analyze_only)
		return stats;
	if (stats == NULL)
	{
		/* no bulkdelete pass: count live nodes from the metapage */
		Buffer		metabuf = ReadBuffer(index, SHNSW_METAPAGE_BLKNO);
		ShnswMetaPage meta;

		stats = palloc0(sizeof(IndexBulkDeleteResult));
		LockBuffer(metabuf, BUFFER_LOCK_SHARE);
		meta = ShnswPageGetMeta(BufferGetPage(metabuf));
		stats->num_index_tuples = (double) (meta->node_count - meta->deleted_count);
		UnlockReleaseBuffer(metabuf);
	}
	stats->num_pages = RelationGetNumberOfBlocks(index);
	return stats;
}
