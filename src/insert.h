/*-------------------------------------------------------------------------
 *
 * insert.h
 *	  aminsert (insert.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_INSERT_H
#define STREAMHNSW_INSERT_H

#include "access/genam.h"
#include "nodes/execnodes.h"
#include "utils/relcache.h"

extern bool shnsw_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
						 Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
						 IndexInfo *indexInfo);

#endif							/* STREAMHNSW_INSERT_H */
