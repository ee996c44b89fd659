/*-------------------------------------------------------------------------
 *
 * indexopen.h
 *	  Opening an index that a user names to one of our SQL functions
 *	  (indexopen.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_INDEXOPEN_H
#define STREAMHNSW_INDEXOPEN_H

#include "storage/lockdefs.h"
#include "utils/relcache.h"

/* what the caller must be to name the index */
typedef enum ShnswIndexRight
{
	SHNSW_RIGHT_SELECT,			/* SELECT on it: its owner or a superuser,
								 * as pg_prewarm asks (an index has no grants
								 * of its own) */
	SHNSW_RIGHT_INSPECT			/* its owner, a member of pg_monitor or a
								 * superuser */
} ShnswIndexRight;

extern void shnsw_index_check(Oid relid, ShnswIndexRight right);
extern Relation shnsw_index_open(Oid relid, LOCKMODE lockmode, ShnswIndexRight right);

#endif							/* STREAMHNSW_INDEXOPEN_H */
