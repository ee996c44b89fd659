/*-------------------------------------------------------------------------
 *
 * meta.h
 *	  The metapage read and written, page initialization and checks, and
 *	  the per-backend description of an index (meta.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_META_H
#define STREAMHNSW_META_H

#include "storage/bufpage.h"
#include "utils/relcache.h"

#include "format.h"
#include "pages.h"

/*
 * The description of an index: its fixed sizes and its SQ8 parameters, in
 * one chunk (lo and scale point into quant[] of the same chunk).
 * rd_amcache keeps one, never written in place; shnsw_get_index_info hands
 * out copies that the caller owns, so a scan, an insert or a VACUUM never
 * holds a pointer into rd_amcache, which relcache invalidation frees.
 */
typedef struct ShnswIndexInfo
{
	int			dims;			/* navigation dimensions: shnsw_nav_dims */
	int			coldims;		/* the column's (bits for bit) */
	int			m;
	int			ef_construction;	/* the build's; never the reloption */
	ShnswMetric metric;
	ShnswElemType elemtype;
	int			slot_bits;
	int			node_size;
	int			vec_size;		/* bytes of a stored vector; a sparsevec's
								 * largest (its header says its own) */
	int			vec_span;		/* shnsw_vec_span: bytes a vector is known
								 * to take from its offset before it is read */
	BlockNumber quant_start;
	bool		quant_trained;
	uint32		quant_version;
	float	   *lo;				/* SQ8 lower bounds, dims floats */
	float	   *scale;			/* SQ8 steps, dims floats */
	float		quant[FLEXIBLE_ARRAY_MEMBER];	/* lo[dims] then scale[dims] */
} ShnswIndexInfo;

/* A snapshot of the metapage's changing fields. */
typedef struct ShnswMetaSnapshot
{
	ShnswRef	entry;
	int			entry_level;
	uint64		node_count;
	uint64		cache_generation;
	uint32		quant_version;
	uint32		truncations;	/* see ShnswMetaPageData */
	uint64		build_nonce;	/* see ShnswMetaPageData */
	double		max_residual;	/* see ShnswMetaPageData; -1: not kept */
	bool		clamps_marked;	/* SHNSW_META_CLAMPS */
	uint64		lsn;			/* the metapage's LSN */
} ShnswMetaSnapshot;

extern ShnswIndexInfo *shnsw_get_index_info(Relation index);
extern void shnsw_forget_index_info(Relation index);
extern void shnsw_debug_discard(Relation index);
extern void shnsw_read_meta(Relation index, ShnswMetaSnapshot *snap);
extern void shnsw_init_page(Page page, uint16 page_type);
extern void shnsw_check_page(Relation index, Page page, BlockNumber blkno, uint16 page_type);
extern void shnsw_fill_meta(ShnswMetaPage meta, int dims, int m, int efc, ShnswMetric metric,
							ShnswElemType elemtype);
extern int	shnsw_quant_nblocks(int dims);
extern int	shnsw_slot_bits(int nodes_per_page);
extern int	shnsw_nodes_per_page(int node_size);

#endif							/* STREAMHNSW_META_H */
