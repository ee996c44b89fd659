/*-------------------------------------------------------------------------
 *
 * vacuum.h
 *	  ambulkdelete and amvacuumcleanup (vacuum.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_VACUUM_H
#define STREAMHNSW_VACUUM_H

#include "access/genam.h"

extern IndexBulkDeleteResult *shnsw_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
											   IndexBulkDeleteCallback callback, void *callback_state);
extern IndexBulkDeleteResult *shnsw_vacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats);

#endif							/* STREAMHNSW_VACUUM_H */
