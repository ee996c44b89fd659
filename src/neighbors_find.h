/*-------------------------------------------------------------------------
 *
 * neighbors_find.h
 *	  Reading nodes and finding a vector's neighbours on disk, for inserts
 *	  and VACUUM (neighbors_find.c); the linker both it and
 *	  neighbors_update.c work with.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_NEIGHBORS_FIND_H
#define STREAMHNSW_NEIGHBORS_FIND_H

#include "utils/relcache.h"

#include "format.h"
#include "meta.h"
#include "nodesource.h"
#include "pageaccess.h"


#define SHNSW_MAX_DUPS 64

typedef struct ShnswLinker
{
	Relation	index;
	ShnswIndexInfo *info;		/* the owner's copy (insert, VACUUM) */
	ShnswPageCtx pctx;
	ShnswNodeSource ops;		/* through shared buffers */
	ShnswNodeSource search_ops; /* shnsw_find_neighbors' reads: ops, or an
								 * insert's over the shared cache
								 * (shnsw_cache_insert_begin) */
	int			dims;
	int			m;
	float	   *scratch;		/* (2m + 2) * dims floats */
	int64		given_up;		/* list changes that ran out of retries */
	/* an insert's duplicate check (shnsw_find_neighbors, layer 0) */
	const uint8 *dup_code;		/* if set: collect nodes with this code ... */
	ShnswRef	dups[SHNSW_MAX_DUPS];	/* ... that had room for a row */
	int			ndups;
} ShnswLinker;

/* What shnsw_read_node copies out of a node record. */
typedef struct ShnswNodeCopy
{
	uint8		flags;
	uint8		level;
	ShnswUpperLoc upper;
	int			count;			/* entries of list on the layer read */
	ShnswRef	list[2 * SHNSW_MAX_M];
} ShnswNodeCopy;

/* A sorted array of node references (VACUUM's deleted nodes). */
typedef struct ShnswRefSet
{
	ShnswRef   *refs;
	int64		n;
} ShnswRefSet;

/* neighbors_find.c: reading and choosing */
extern void shnsw_linker_init(ShnswLinker *lk, Relation index, ShnswIndexInfo *info);
extern void shnsw_read_codes(ShnswLinker *lk, const ShnswRef *refs, int n, uint8 *codes);
extern void shnsw_read_node(ShnswLinker *lk, ShnswRef e, int layer, ShnswNodeCopy *out,
							uint8 *code);
extern int	shnsw_select_neighbors(ShnswLinker *lk, ShnswRef *refs, float *d, uint8 *codes,
								   int n, int max, int fill, int *nchosen);
extern void shnsw_find_neighbors(ShnswLinker *lk, const float *q, ShnswRef entry,
								 int entry_level, int level, int ef, ShnswRef exclude,
								 ShnswRef **nbrs, int *nnbrs);
extern void shnsw_code_distances(ShnswLinker *lk, const uint8 *ecode, const uint8 *codes, int n,
								 float *d);
extern int	shnsw_ref_cmp(const void *a, const void *b);
extern bool shnsw_refset_has(const ShnswRefSet *set, ShnswRef r);

#endif							/* STREAMHNSW_NEIGHBORS_FIND_H */
