/*-------------------------------------------------------------------------
 *
 * truncate.h
 *	  VACUUM's cut of free pages at the end of the index (truncate.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_TRUNCATE_H
#define STREAMHNSW_TRUNCATE_H

#include "storage/bufmgr.h"
#include "utils/relcache.h"

#include "meta.h"

extern BlockNumber shnsw_truncate_tail(Relation index, const ShnswIndexInfo *info,
									   BufferAccessStrategy bas, int elevel);

#endif							/* STREAMHNSW_TRUNCATE_H */
