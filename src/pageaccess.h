/*-------------------------------------------------------------------------
 *
 * pageaccess.h
 *	  The node source over shared buffers, exact vectors, and the bounds
 *	  checks of what is read from disk (pageaccess.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_PAGEACCESS_H
#define STREAMHNSW_PAGEACCESS_H

#include "storage/bufpage.h"
#include "storage/itemptr.h"
#include "utils/relcache.h"

#include "format.h"
#include "meta.h"
#include "nodecheck.h"
#include "nodesource.h"
#include "reader.h"


typedef struct ShnswPageCtx
{
	Relation	index;
	int			slot_bits;
	int			node_size;
	int			m;
	ShnswReader *reader;		/* NULL: plain synchronous reads (writes) */
	BlockNumber *blkbuf;		/* scratch for block lists */
	int			blkcap;
	int			vec_span;
	BlockNumber nblocks;		/* relation length last seen (only grows) */
	/* descent read-ahead (shnsw_buffer_source_descent) */
	int			ahead_graph;	/* graph pages from the entry's on */
	int			ahead_upper;	/* upper pages from the entry's record's on */
	BlockNumber entry_blk;		/* the first page read */
} ShnswPageCtx;

extern void shnsw_buffer_source_init(ShnswNodeSource *ops, ShnswPageCtx *ctx, Relation index,
								const ShnswIndexInfo *info, ShnswReader *reader);
extern void shnsw_buffer_source_descent(ShnswPageCtx *ctx, uint64 node_count);
extern void shnsw_read_vector(Relation index, ShnswReader *reader, BlockNumber blk,
							  uint16 offset, ShnswElemType elemtype, int size, char *out);
extern int	shnsw_sparse_stored_size(Relation index, Page page, BlockNumber blk, int offset,
									 int bound);
extern int	shnsw_vector_blocks(BlockNumber blk, uint16 offset, int size, BlockNumber *out);

/* bounds checks of what is read from disk (pageaccess.c; src/README, Corruption) */
pg_noreturn extern void shnsw_corrupt(Relation index, BlockNumber blk, const char *field,
									  uint64 value);
extern bool shnsw_block_exists(Relation index, BlockNumber blk, BlockNumber *nblocks);
extern void shnsw_check_block(Relation index, BlockNumber blk, BlockNumber *nblocks,
							  BlockNumber from, const char *field);
extern int	shnsw_graph_nslots(Relation index, Page page, BlockNumber blk, int node_size);
extern void shnsw_node_first_tid(Relation index, BlockNumber blk, const ShnswNodeHeader *h,
								 ItemPointer tid);
extern int	shnsw_upper_node_tids(Relation index, BlockNumber ublk, const ShnswUpperHeader *u,
								  int m, ShnswRef ref, ItemPointerData *tids);
extern void shnsw_node_set_tids(ShnswNodeHeader *h, ShnswUpperHeader *u, int m,
								const ItemPointerData *tids, int n);
struct ShnswNodeLimits;
extern void shnsw_node_limits(struct ShnswNodeLimits *lim, int m, int slot_bits, int vec_span,
							  BlockNumber nblocks);
extern void shnsw_check_node(Relation index, BlockNumber blk, int slot, const ShnswNodeHeader *h,
							 int m, int slot_bits, int vec_span, BlockNumber *nblocks);
extern ShnswUpperHeader *shnsw_upper_record(Relation index, Page page, BlockNumber blk,
											OffsetNumber off, int m);
extern int	shnsw_read_node_tids(Relation index, ShnswReader *reader, ShnswRef ref,
								 BlockNumber blk, const ShnswNodeHeader *h, int m,
								 BlockNumber *nblocks, ItemPointerData *tids);

#endif							/* STREAMHNSW_PAGEACCESS_H */
